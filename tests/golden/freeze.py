"""Rewrite the golden records in this folder: `python tests/golden/freeze.py [SCENARIO ...]` (default: all).

Run it only when a change of nearDup's output or work-dir files is intended, and explain the difference the
regenerated records show (`git diff tests/golden/`) in the commit message. A refactor that should change nothing
(issue 19) must pass tests/test_golden.py without running this. The records are written from the checkout this
file is in, with the interpreter that runs it (use the project's venv: .venv/bin/python tests/golden/freeze.py).
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/, as pytest has it
from golden import harness


def main(names: list[str]) -> None:
    scenarios = [s for s in harness.SCENARIOS if not names or s.name in names]
    unknown = set(names) - {s.name for s in harness.SCENARIOS}
    if unknown:
        sys.exit(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    with tempfile.TemporaryDirectory() as tmp:
        for scenario in scenarios:
            record, _ = harness.render(scenario, Path(tmp) / scenario.name)
            harness.expected_path(scenario).write_text(record, encoding="utf-8")
            print(f"wrote {harness.expected_path(scenario).relative_to(harness.REPO)}")


if __name__ == "__main__":
    main(sys.argv[1:])
