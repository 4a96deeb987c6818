"""The incremental index at scale (issue 23 item 4): what an incremental run skips must not change what it
finds."""
from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from nearDup.config import SourceParams
from nearDup.text.inputs import ListedFiles, item_id_bytes, item_numbers, list_items

from conftest import generate_corpus


def test_a_folder_listed_as_columns_gives_the_items_of_the_usual_listing(tmp_path):
    root = tmp_path / "docs"
    for rel in ("b/x.txt", "a.txt", "a/y.txt", "a/z/é.txt", ".hidden", "a-b.txt", "c/.h/q.txt"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel * 3)
    os.link(root / "a.txt", root / "b" / "hard.txt")  # a second name of one file: listed once
    os.symlink(root / "a.txt", root / "link.txt")
    for params in (SourceParams(), SourceParams(hidden=True, follow_links=True), SourceParams(exclude=("x*",))):
        usual = list_items([str(root)], params)
        columns = list_items([str(root)], params, columns=True)
        assert isinstance(columns.items, ListedFiles) and not isinstance(usual.items, ListedFiles)
        assert list(columns.items) == usual.items and columns.items[:2] == usual.items[:2]
        assert [columns.items[i] for i in range(len(usual.items))] == usual.items
        assert columns.skipped == usual.skipped and columns.links == usual.links
        assert (item_numbers(columns.items) == item_numbers(usual.items)).all()
        assert (item_id_bytes(columns.items) == item_id_bytes(usual.items)).all()
        expected = [(str(p), p.stat().st_size) for p in sorted(Path(root).rglob("*"), key=lambda p: str(p))
                    if p.is_file() and not p.is_symlink() and (params.hidden or "/." not in str(p))]
        assert {(i.path, i.size) for i in usual.items} <= set(expected)


def _invoke(*args):
    from click.testing import CliRunner

    from nearDup.cli import cli
    return CliRunner().invoke(cli, [str(a) for a in args])


def _random_changes(folder: Path, rng: random.Random, step: int) -> None:
    """Add (copies, near copies, new text), edit, delete and rename a few files."""
    names = sorted(p.name for p in folder.iterdir())
    for i, name in enumerate(rng.sample(names, 4)):
        words = (folder / name).read_text().split()
        kept = words if i == 0 else [w for w in words if rng.random() > 0.03 * i]
        (folder / f"add{step}_{i}.txt").write_text(" ".join(kept))
    (folder / f"add{step}_new.txt").write_text(" ".join(f"s{step}w{rng.randrange(400)}" for _ in range(80)))
    for name in rng.sample(names, 2):  # edited: the old version leaves the index, the new one comes in
        words = (folder / name).read_text().split()
        (folder / name).write_text(" ".join(words[:-3] + ["edited", str(step)]))
    deleted = rng.sample(sorted(p.name for p in folder.iterdir()), 2)
    for name in deleted:
        os.unlink(folder / name)
    name = rng.choice(sorted(p.name for p in folder.iterdir()))
    os.rename(folder / name, folder / f"renamed{step}_{name}")


@pytest.mark.parametrize("seed", [1, 2])
def test_index_segments_give_the_pairs_and_groups_of_a_run_from_scratch(tmp_path, monkeypatch, seed):
    """Runs of random adds, deletes, edits and renames: the band index grows by segments and is compacted now and
    then (limits lowered so that both happen within a few runs), and every run prints what a run from scratch
    over the same files prints, pairs and groups; query finds the same documents as in a fresh index."""
    from nearDup.pipeline import candidates
    from nearDup.store.workdir import WorkDir
    monkeypatch.setattr(candidates, "SEGMENTS_MAX", 3)
    monkeypatch.setattr(candidates, "COMPACT_SHARE", 1)
    folder = tmp_path / "docs"
    generate_corpus(folder, n_base=45, seed=seed)
    index, rng, segments = tmp_path / "index", random.Random(seed), []
    args = ["--partition-docs", 16, "-t", 0.5, "-j", 1]
    for step in range(7):
        if step:
            _random_changes(folder, rng, step)
        for extra in ([], ["--groups"]):  # (jsonl adds a recall estimate whose last digit may differ)
            got = _invoke("run", folder, "--index", index, *args, *extra)
            scratch = tmp_path / f"scratch{step}"
            want = _invoke("-w", scratch, "run", folder, *args, *extra)
            assert got.exit_code == 0 and want.exit_code == 0, got.stderr + want.stderr
            assert got.stdout == want.stdout
        probe = sorted(folder.iterdir())[rng.randrange(5)]
        assert _invoke("query", probe, "--index", index).stdout == _invoke("query", probe, "--index", scratch).stdout
        shutil.rmtree(scratch)
        segments.append(candidates.index_segments(WorkDir(str(index)).manifest().candidates))
    assert max(segments) >= 2 and 0 in segments[1:]  # segments appended, and compacted into a base again


KILL_AT = """
import os, signal, sys
from nearDup.store import workdir
from nearDup.cli.main import main

def killing(name):
    real = getattr(workdir.WorkDir, name)
    def step(self, *args):
        real(self, *args)
        if any(".s00" in str(a) for a in args):  # a file of a new segment written or linked: die mid-append
            os.kill(os.getpid(), signal.SIGKILL)
    setattr(workdir.WorkDir, name, step)

killing(sys.argv.pop(1))
sys.argv[0] = "neardup"
main()
"""


@pytest.mark.parametrize("step", ["link", "save_array"])
def test_an_incremental_run_killed_mid_append_resumes_to_the_same_result(tmp_path, step):
    """SIGKILL of the main process just after the first file of a new segment of the band index was linked or
    written: the index stays as it was (manifest unchanged), and the next run gives a run from scratch's output."""
    import subprocess
    import sys
    folder = tmp_path / "docs"
    generate_corpus(folder, n_base=60, seed=4)
    index = tmp_path / "index"
    args = ["run", folder, "--index", index, "--partition-docs", 16, "-t", 0.5, "-j", 1]
    assert _invoke(*args).exit_code == 0
    for i, name in enumerate(sorted(os.listdir(folder))[:30:3]):
        if i < 2:  # the second run appends a segment: the killed run links it, then writes the next
            _invoke(*args)
        (folder / f"new_{name}").write_text((folder / name).read_text() + " and a few more words")
    manifest = (index / "manifest.json").read_bytes()
    killed = subprocess.run([sys.executable, "-c", KILL_AT, step, *map(str, args)], capture_output=True)
    assert killed.returncode == -9, killed.stderr.decode()
    assert (index / "manifest.json").read_bytes() == manifest
    resumed = _invoke(*args)
    assert resumed.exit_code == 0, resumed.stderr
    assert resumed.stdout == _invoke("-w", tmp_path / "scratch", *args[:2], *args[4:]).stdout
