"""Golden outputs (issue 19): nearDup's stdout and work-dir files for fixed inputs are what tests/golden/ froze.

Every scenario of tests/golden/harness.py runs through the real CLI in a fresh folder and must render byte for byte
as its frozen record; the harness's docstring says what is normalised (tmp paths, inodes, stage keys, timestamps)
and why. A difference is shown as a unified diff. An intended change is frozen again with
`python tests/golden/freeze.py` and explained in its commit (see that file).
"""
from __future__ import annotations

import difflib

import pytest
from golden import harness

MAX_DIFF_LINES = 150


@pytest.mark.parametrize("scenario", harness.SCENARIOS, ids=lambda s: s.name)
def test_golden(scenario, tmp_path):
    actual, stdouts = harness.render(scenario, tmp_path / "root")
    expected_file = harness.expected_path(scenario)
    expected = expected_file.read_text(encoding="utf-8")
    if actual != expected:
        (tmp_path / expected_file.name).write_text(actual, encoding="utf-8")
        diff = list(difflib.unified_diff(expected.splitlines(), actual.splitlines(),
                                         f"frozen {expected_file.name}", "this checkout", lineterm="", n=2))
        shown = diff[:MAX_DIFF_LINES] + ([f"... {len(diff) - MAX_DIFF_LINES} more diff lines"]
                                         if len(diff) > MAX_DIFF_LINES else [])
        pytest.fail(f"{scenario.name}: output differs from {expected_file} (full output: "
                    f"{tmp_path / expected_file.name}; if intended, freeze again with "
                    f"python tests/golden/freeze.py {scenario.name} and explain why in the commit)\n"
                    + "\n".join(shown), pytrace=False)
    if scenario.name == "gen_jobs":  # same input and seed: byte-identical stdout whatever --jobs
        assert stdouts[0] == stdouts[1] and stdouts[0].strip()


def test_golden_records_cover_every_scenario():
    """No stale record is left behind by a renamed scenario (it would never be checked)."""
    frozen = {p.name for p in harness.GOLDEN.glob("*.txt")}
    assert frozen == {harness.expected_path(s).name for s in harness.SCENARIOS}
