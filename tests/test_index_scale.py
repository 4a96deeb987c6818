"""The incremental index at scale (issue 23 item 4): what an incremental run skips must not change what it
finds."""
from __future__ import annotations

import itertools
import json
import os
import random
import re
import shutil
from pathlib import Path

import numpy as np
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
        assert columns.items[-1] == usual.items[-1] and columns.items[-len(usual.items)] == usual.items[0]
        with pytest.raises(IndexError):
            columns.items[len(usual.items)]
        assert columns.skipped == usual.skipped and columns.links == usual.links
        assert (item_numbers(columns.items) == item_numbers(usual.items)).all()
        assert (item_id_bytes(columns.items) == item_id_bytes(usual.items)).all()
        expected = [(str(p), p.stat().st_size) for p in sorted(Path(root).rglob("*"), key=lambda p: str(p))
                    if p.is_file() and not p.is_symlink() and (params.hidden or "/." not in str(p))]
        assert {(i.path, i.size) for i in usual.items} <= set(expected)


@pytest.mark.parametrize("seed", range(4))
def test_a_folder_is_listed_in_id_order_with_each_file_once_by_its_first_path(tmp_path, seed):
    """Independent truth: every regular file below the folder (os.walk), sorted by path; of the paths of one file
    (hard links) the first in that order. Names where a subfolder's ids sort apart from its name ("a/" after
    "a-b", "a.txt", before "a0"), and hard links whose first path lies in a subfolder listed after a file of the
    parent that sorts later."""
    rng = random.Random(seed)
    root = tmp_path / "docs"
    names = ["a", "a-b", "a.txt", "a0", "a b", "b", "é", "z"]
    files: list[Path] = []
    for depth in range(3):
        for _ in range(12):
            parts = [rng.choice(names) for _ in range(depth)] + [rng.choice(names) + rng.choice(["", ".txt", "1"])]
            path = root.joinpath(*parts)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                if not path.exists():
                    path.write_text(f"{path} {rng.random()}")
                    files.append(path)
            except (FileExistsError, NotADirectoryError, IsADirectoryError):
                continue  # a name taken by a file where a folder was wanted, or the reverse
    for _ in range(6):  # second names of some files, anywhere
        target = rng.choice(files)
        link = root / rng.choice(names) / f"{rng.choice(names)}.link"
        try:
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists():
                os.link(target, link)
        except (FileExistsError, NotADirectoryError):
            continue
    every = sorted(str(Path(top) / name) for top, _, names_ in os.walk(root) for name in names_)
    first: dict[tuple[int, int], str] = {}
    for path in every:
        st = os.stat(path)
        first.setdefault((st.st_dev, st.st_ino), path)
    expected = sorted(first.values())
    for columns in (False, True):
        listing = list_items([str(root)], SourceParams(), columns=columns)
        assert [item.path for item in listing.items] == expected
        assert [item.size for item in listing.items] == [os.stat(p).st_size for p in expected]
        assert listing.skipped["same file"] == len(every) - len(expected)
    lazy = list_items([str(root)], SourceParams(), lazy=True)
    assert [item.path for item in lazy.items] == expected


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
    over the same files prints, pairs and groups; query finds the same documents as in a fresh index. The digest
    index (copies) is kept alike: its live entries are the digests of the documents that can pair, each once, and
    an updating run reads no other digest than the new documents', and no done marker of a shard the index held
    (their stages are sealed: WorkDir._seal)."""
    from nearDup.pipeline import candidates, copies
    from nearDup.pipeline.shingle import load_catalog
    from nearDup.store.workdir import WorkDir

    def whole_digest(*args):
        raise AssertionError("every document's digest read")

    markers, real_part_done = [], WorkDir.part_done

    def part_done(self, stage, number, *args):
        if Path(self.root).resolve() == index.resolve():
            markers.append((stage, number))
        return real_part_done(self, stage, number, *args)

    monkeypatch.setattr(candidates, "SEGMENTS_MAX", 3)
    monkeypatch.setattr(candidates, "COMPACT_SHARE", 1)
    folder = tmp_path / "docs"
    generate_corpus(folder, n_base=45, seed=seed)
    index, rng, segments, shorts = tmp_path / "index", random.Random(seed), [], []
    args = ["--partition-docs", 16, "-t", 0.5, "-j", 1, *(["--min-shingles", 100] if seed == 2 else [])]
    for step in range(7):
        if step:
            _random_changes(folder, rng, step)
        for extra in ([], ["--groups"], ["--groups", "--format", "jsonl"]):  # (jsonl: with the recall estimate)
            held = WorkDir(str(index)).manifest().shingle.next_shard if step else 0
            with monkeypatch.context() as m:
                if step:
                    m.setattr(copies, "_band_digest", whole_digest)
                m.setattr(WorkDir, "part_done", part_done)
                markers.clear()
                got = _invoke("run", folder, "--index", index, *args, *extra)
            assert [(stage, n) for stage, n in markers if n < held] == []
            assert step == 0 or not extra or markers == []  # (nothing new: no marker read at all)
            scratch = tmp_path / f"scratch{step}"
            want = _invoke("-w", scratch, "run", folder, *args, *extra)
            assert got.exit_code == 0 and want.exit_code == 0, got.stderr + want.stderr
            assert got.stdout == want.stdout
        probe = sorted(folder.iterdir())[rng.randrange(5)]
        assert _invoke("query", probe, "--index", index).stdout == _invoke("query", probe, "--index", scratch).stdout
        # the documents that can pair, and those too short to (an updating run tests only new and unpaired rows)
        pairable_ids, small = [], []
        for root in (index, scratch):
            work = WorkDir(str(root))
            manifest = work.manifest()
            members = copies.Pairing.load(work, manifest.candidates).members().tolist()
            pairable_ids.append(sorted(load_catalog(work, manifest.shingle).ids_of(members).values()))
            small.append(manifest.candidates.stats.small)
        assert pairable_ids[0] == pairable_ids[1] and small[0] == small[1]
        shorts.append(small[0])
        shutil.rmtree(scratch)
        work = WorkDir(str(index))
        record = work.manifest().candidates
        segments.append(candidates.index_segments(record))
        pairing = copies.Pairing.load(work, record)
        runs = [tuple(np.load(work.output("candidates", name, record.key)) for name in files)
                for files in candidates.digest_runs(record)]
        keys, docs = (np.concatenate(column) for column in zip(*(run[:2] for run in runs)))  # (not the filter)
        live = pairing.pairable_mask()[docs]
        members = pairing.members()
        assert sorted(docs[live].tolist()) == members.tolist()
        assert keys[live].tolist() == copies._band_digest(work, work.manifest().shingle)[docs[live]].tolist()
    assert max(segments) >= 2 and 0 in segments[1:]  # segments appended, and compacted into a base again
    assert (max(shorts) > 0) == (seed == 2)  # (--min-shingles 100 leaves some documents out)


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


def test_a_jsonl_cut_is_reused_only_while_the_shard_is_unchanged(tmp_path, monkeypatch):
    """An unchanged shard (same size, mtime and inode) is not read again for its newlines: its last cut is
    reused; a new mtime, a new inode (same size and mtime) or a new size is a changed shard, cut anew, as are
    other partition limits."""
    import json

    from nearDup.text import inputs
    shard = tmp_path / "a.jsonl"
    lines = [json.dumps({"id": f"r{i}", "text": f"record {i} " * (i % 4 + 1)}) + "\n" for i in range(10)]
    shard.write_text("".join(lines))
    params = SourceParams(jsonl=True, partition_docs=3)
    first = list_items([str(shard)], params)
    assert set(first.cuts) == {str(shard)} and len(first.items) == 4
    reads: list[str] = []
    real = inputs._read_jsonl_file
    monkeypatch.setattr(inputs, "_read_jsonl_file", lambda arg, path: reads.append(path) or real(arg, path))
    again = list_items([str(shard)], params, cuts=first.cuts)
    assert again.items == first.items and reads == [] and set(again.cuts) == {str(shard)}
    st = shard.stat()

    def new_mtime():
        os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))

    def new_inode():  # the same size and mtime, other line ends: only the inode tells
        other = tmp_path / "other"
        other.write_text("".join(lines[1:2] + lines[:1] + lines[2:]))
        os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(other, shard)
        assert shard.stat().st_size == st.st_size and shard.stat().st_ino != st.st_ino

    def new_size():
        with open(shard, "a") as f:
            f.write(json.dumps({"id": "r10", "text": "one more"}) + "\n")

    for change in (new_mtime, new_inode, new_size):
        change()
        reads.clear()
        got = list_items([str(shard)], params, cuts=first.cuts)
        assert reads == [str(shard)]
        monkeypatch.setattr(inputs, "_read_jsonl_file", real)
        assert got.items == list_items([str(shard)], params).items  # as a listing with no cut to reuse
        monkeypatch.setattr(inputs, "_read_jsonl_file", lambda arg, path: reads.append(path) or real(arg, path))
    reads.clear()
    fresh = list_items([str(shard)], params)
    assert list_items([str(shard)], SourceParams(jsonl=True, partition_docs=2), cuts=fresh.cuts).items != \
        fresh.items and len(reads) == 2


def test_an_index_of_jsonl_shards_reads_only_the_changed_shard_for_its_newlines(tmp_path, monkeypatch):
    import json

    from nearDup.text import inputs
    texts = generate_corpus(tmp_path / "docs", n_base=30, seed=5)
    shards = [tmp_path / f"s{i}.jsonl" for i in range(3)]
    for i, (path, text) in enumerate(sorted(texts.items())):
        with open(shards[i % 3], "a") as f:
            f.write(json.dumps({"id": os.path.basename(path), "text": text}) + "\n")
    args = ["run", *shards, "--jsonl", "--index", tmp_path / "index", "-t", 0.5, "-j", 1]
    assert _invoke(*args).exit_code == 0
    with open(shards[1], "a") as f:
        f.write(json.dumps({"id": "late", "text": sorted(texts.values())[4] + " late"}) + "\n")
    reads: list[str] = []
    real = inputs._read_jsonl_file
    monkeypatch.setattr(inputs, "_read_jsonl_file", lambda arg, path: reads.append(path) or real(arg, path))
    again = _invoke(*args)
    assert again.exit_code == 0 and reads == [str(shards[1])]
    assert again.stdout == _invoke("-w", tmp_path / "scratch", *args[:5], *args[7:]).stdout and "late" in again.stdout


def test_an_index_run_that_adds_a_few_documents_forks_no_worker(tmp_path, monkeypatch):
    """engine.map light: adding a few documents to an index runs every stage's tasks in the run's own process
    (forking workers from a large index's run cost more CPU than they saved), with the output of a run from
    scratch; the same corpus from scratch, in as many partitions, does fork them."""
    from nearDup.engine import local

    forks: list[int] = []
    real = local.LocalEngine._workers
    monkeypatch.setattr(local.LocalEngine, "_workers", lambda self: forks.append(1) or real(self))
    folder = tmp_path / "docs"
    generate_corpus(folder, n_base=60, seed=5)
    index = tmp_path / "index"
    args = ["run", folder, "--partition-docs", 16, "-t", 0.5, "-j", 2]
    assert _invoke(*args, "--index", index).exit_code == 0
    assert forks, "the first run of 100+ documents in partitions of 16 uses the workers"
    for name in sorted(os.listdir(folder))[:12:3]:
        (folder / f"new_{name}").write_text((folder / name).read_text() + " and a few more words")
    forks.clear()
    added = _invoke(*args, "--index", index)
    assert added.exit_code == 0 and not forks
    scratch = _invoke(*args, "-w", tmp_path / "scratch")
    assert forks and scratch.stdout == added.stdout and "new_doc0000.txt" in added.stdout


@pytest.mark.parametrize("split_rows", [1, 3, 1 << 15])
def test_utf8_array_is_each_text_encoded_with_surrogates_kept(monkeypatch, split_rows):
    """utf8_array against encoding each text by itself: empty texts, non-ASCII, lone surrogates (undecodable
    file names), a NUL inside a text (a JSONL id), rows spread over several chunks of the numpy fill."""
    from nearDup.text import inputs

    monkeypatch.setattr(inputs, "SPLIT_ROWS", split_rows)
    rng = random.Random(split_rows)
    alphabet = ["a", "z", "/", " ", "é", "ß", "\udcff", "\udc80", "😀", "0"]
    for texts in ([], [""], ["", ""], ["a\0b", "c"], ["x" * 300, "", "é"],
                  ["".join(rng.choice(alphabet) for _ in range(rng.randrange(12))) for _ in range(500)]):
        got = inputs.utf8_array(texts)
        want = [t.encode("utf-8", "surrogatepass") for t in texts]
        assert got.tolist() == [w.rstrip(b"\0") for w in want]  # (numpy's bytes drop trailing NULs)
        assert got.dtype.itemsize == max([1, *map(len, want)])
        assert got.shape == (len(texts),)


def test_copy_classes_updated_from_the_last_run_equal_those_computed_afresh(tmp_path):
    """copies.copy_classes with the last run's labels against computing them from nothing, on the index's own work
    dir after runs that add copies of a document that had none, remove the first document (the label) of a
    class, remove another member, and add copies to a class."""
    import numpy as np

    from nearDup.pipeline.copies import Pairing, copy_classes
    from nearDup.store.manifest import CandidatesRecord, ShingleRecord
    from nearDup.store.workdir import WorkDir

    folder = tmp_path / "docs"
    generate_corpus(folder, n_base=40, seed=6)
    names = sorted(os.listdir(folder))
    for i in range(3):  # a class of four: a0 (its label) a1 a2 a3
        shutil.copy(folder / names[0], folder / f"a{i + 1}_{names[0]}")
    index = tmp_path / "index"
    args = ["run", folder, "--index", index, "--partition-docs", 8, "-t", 0.5, "-j", 1]
    steps = [
        lambda: [shutil.copy(folder / names[5], folder / f"b{i}_{names[5]}") for i in range(2)],  # a new class
        lambda: os.unlink(folder / names[0]),  # the label of the class of four
        lambda: os.unlink(folder / f"a2_{names[0]}"),  # another member
        lambda: shutil.copy(folder / f"a1_{names[0]}", folder / f"zz_{names[0]}"),  # one more copy
    ]
    work = WorkDir(index)
    labels = []
    for step in [lambda: None, *steps]:
        step()
        assert _invoke(*args).exit_code == 0
        record = work.manifest().candidates
        shingle = work.manifest().shingle
        assert isinstance(record, CandidatesRecord) and isinstance(shingle, ShingleRecord)
        pairing = Pairing.load(work, record)
        assert pairing.documents == sum(shingle.shard_docs)
        afresh, _ = copy_classes(work, shingle, pairing.pairable_mask())
        assert pairing.copies.rows.tolist() == afresh.rows.tolist()
        stored = pairing.dense_labels()
        sizes = np.bincount(stored[stored >= 0])
        labels.append(sorted(sizes[sizes > 1].tolist()))
    # the classes of two or more did change at every step: one more, then the class of four shrinks and grows
    assert len(labels[1]) == len(labels[0]) + 1 and all(a != b for a, b in itertools.pairwise(labels[1:]))


def test_an_index_runs_catalog_fingerprint_and_totals_are_those_of_its_rows(tmp_path):
    """An index run composes its catalog's fingerprint and totals from the last run's and what changed (no pass
    over the rows kept): after adds, changes, renames, deletions, touches and a damaged shard, the stored totals
    equal those computed afresh from the stored rows, and whenever the rows differ from the last run's, so does
    the key (touching a file changes only its row's mtime)."""
    from nearDup.pipeline.shingle import load_catalog
    from nearDup.store.catalog import fingerprint, summary
    from nearDup.store.workdir import WorkDir

    folder = tmp_path / "docs"
    generate_corpus(folder, n_base=40, seed=4)
    names = sorted(os.listdir(folder))
    index = tmp_path / "index"
    work = WorkDir(index)

    def touch(name):
        st = os.stat(folder / name)
        os.utime(folder / name, ns=(st.st_atime_ns, st.st_mtime_ns + 7_000_000_000))

    def damage():  # a stored shard's file cut short: its documents are read again
        shard = min(p for p in (index / "shingle").glob("*") if p.name.endswith("docs.npz"))
        shard.write_bytes(shard.read_bytes()[:-10])

    steps = [lambda: None, lambda: None, lambda: touch(names[3]),
             lambda: os.rename(folder / names[4], folder / f"moved_{names[4]}"),
             lambda: os.unlink(folder / names[5]),
             lambda: shutil.copy(folder / names[6], folder / "zz_copy.txt"),
             lambda: (folder / names[7]).write_text("now something else entirely, " * 30),
             lambda: _random_changes(folder, random.Random(5), 1), damage]
    seen: dict[str, str] = {}  # key -> the fingerprint of the rows computed afresh
    last = None
    for step in steps:
        step()
        r = _invoke("run", folder, "--index", index, "--partition-docs", 8, "-t", 0.5, "-j", 1)
        assert r.exit_code == 0, r.stderr
        record = work.manifest().shingle
        catalog = load_catalog(work, record)
        rows = fingerprint([catalog])
        stats = record.stats
        assert summary([catalog]) == {"docs": stats.docs, "bytes": stats.bytes, "shingles": stats.shingles,
                                      "short": stats.count("short"), "replaced": stats.count("replaced")}
        assert seen.setdefault(record.key, rows) == rows  # one key, one catalog
        if last is not None and rows != last[1]:
            assert record.key != last[0]
        last = (record.key, rows)
    assert len(set(seen.values())) >= len(steps) - 2  # (the first two runs: the same rows)


def test_index_runs_from_one_state_that_leave_different_rows_get_different_keys(tmp_path):
    """The composed key is a function of the rows: from the same stored index, runs whose changes differ only in
    which document died or in a touched document's new mtime (a patched row) get different keys, and the same
    change gives the same key again."""
    from nearDup.pipeline.shingle import load_catalog
    from nearDup.store.catalog import fingerprint
    from nearDup.store.workdir import WorkDir

    folder, aside = tmp_path / "docs", tmp_path / "aside"
    generate_corpus(folder, n_base=30, seed=8)
    aside.mkdir()
    names = sorted(os.listdir(folder))
    index, saved = tmp_path / "index", tmp_path / "saved"
    args = ("run", folder, "--index", index, "--partition-docs", 8, "-t", 0.5, "-j", 1)
    assert _invoke(*args).exit_code == 0
    shutil.copytree(index, saved)

    def delete(name):
        os.rename(folder / name, aside / name)  # (moved back after: same inode and mtime)
        return lambda: os.rename(aside / name, folder / name)

    def touch(name, seconds):
        st = os.stat(folder / name)
        os.utime(folder / name, ns=(st.st_atime_ns, st.st_mtime_ns + seconds * 1_000_000_000))
        return lambda: os.utime(folder / name, ns=(st.st_atime_ns, st.st_mtime_ns))

    found: dict[str, str] = {}  # rows -> key
    keys = []
    for change in (lambda: delete(names[2]), lambda: delete(names[9]), lambda: touch(names[2], 7),
                   lambda: touch(names[2], 9), lambda: touch(names[9], 7), lambda: delete(names[2])):
        shutil.rmtree(index)
        shutil.copytree(saved, index)
        undo = change()
        assert _invoke(*args).exit_code == 0
        work = WorkDir(index)
        record = work.manifest().shingle
        rows = fingerprint([load_catalog(work, record)])
        assert found.setdefault(rows, record.key) == record.key
        keys.append(record.key)
        undo()
    assert len(set(keys)) == 5 and keys[0] == keys[-1]


@pytest.mark.parametrize("jsonl", [False, True])
def test_an_appended_catalog_holds_the_rows_of_one_written_whole(tmp_path, monkeypatch, jsonl):
    """Index runs that only add documents and delete some append their rows to the catalog as segments (and write
    every row's liveness); after each run, the catalog they leave holds, column for column, the rows of the same
    runs made with every catalog written whole (SEGMENTS_MAX 0), and stdout is the same; past SEGMENTS_MAX (2
    here) segments the catalog is written whole again; a rename writes it whole."""
    from nearDup.pipeline import shingle
    from nearDup.store.catalog import NUMBERS, TEXT
    from nearDup.store.workdir import WorkDir

    rng = random.Random(11)
    words = [f"w{i}" for i in range(300)]

    def record_line(i):
        return json.dumps({"id": f"r{i:04d}{'é' * (i % 3)}", "text": " ".join(rng.choices(words, k=60))}) + "\n"

    def add(step, folder):
        if jsonl:
            lines = [record_line(100 * step + i) for i in range(12)]
            lines += [json.dumps({"id": f"copy{step}", "text": json.loads(lines[0])["text"]}) + "\n"]
            (folder / f"shard-{step:02d}.jsonl").write_text("".join(lines))
        else:
            for i in range(6):
                (folder / f"f{step}_{i}{'é' * i}.txt").write_text(" ".join(rng.choices(words, k=60)))
            shutil.copy(folder / f"f{step}_0.txt", folder / f"f{step}_copy.txt")
            if step > 1:
                os.unlink(folder / f"f{step - 1}_1é.txt")

    def args(folder, index):
        source = ["--jsonl", folder / "shard-*.jsonl"] if jsonl else [folder]
        return ["run", *source, "--index", index, "--partition-docs", 5, "-t", 0.5, "-j", 1]

    def state(index):
        work = WorkDir(index)
        record = work.manifest().shingle
        catalog = shingle.load_catalog(work, record)
        segments = sum(name.startswith("catalog.s") for name in record.files)
        if jsonl:  # the runs of the item column kept beside it are those of its rows
            runs = work.load_table(work.output("shingle", shingle.ITEMS, record.key), "shingle")
            items, truth = catalog.column("item").tolist(), []
            for n, item in enumerate(items):
                if n and item == items[n - 1]:
                    truth[-1][1] += 1
                else:
                    truth.append([n, 1, item])
            assert [list(r) for r in zip(*(runs[f].tolist() for f in ("start", "rows", "item")))] == truth
        return segments, {f: (catalog.column(f).tolist() if f in TEXT else catalog.column(f).astype(np.int64).tolist())
                          for f in (*TEXT, *NUMBERS)}

    results: dict[int, list] = {2: [], 0: []}
    folder = tmp_path / "docs"
    folder.mkdir()
    for step in range(5):
        add(step, folder)
        for most, runs in results.items():  # two indexes of the same folder
            monkeypatch.setattr(shingle, "SEGMENTS_MAX", most)
            r = _invoke(*args(folder, tmp_path / f"index{most}"))
            assert r.exit_code == 0, r.stderr
            runs.append((r.stdout, *state(tmp_path / f"index{most}")))
    assert [segments for _, segments, _ in results[0]] == [0] * 5
    assert [segments for _, segments, _ in results[2]] == [0, 1, 2, 0, 1]  # written whole at the third append
    for (out, _, rows), (out0, _, rows0) in zip(results[2], results[0]):
        assert out == out0 and rows == rows0
    if not jsonl:  # a rename: rows patched, the catalog written whole
        monkeypatch.setattr(shingle, "SEGMENTS_MAX", 2)
        os.rename(folder / "f4_2éé.txt", folder / "moved.txt")
        assert _invoke(*args(folder, tmp_path / "index2")).exit_code == 0
        assert state(tmp_path / "index2")[0] == 0


def test_joined_columns_read_as_the_joined_column():
    """JoinedColumns' point reads (value, at) and take give what the joined column gives, for text columns of
    different widths and numbers, in any row order."""
    from nearDup.store.catalog import Catalog, JoinedColumns

    rng = np.random.default_rng(4)
    sizes = [5, 0, 7, 1]
    segments = [{"id": np.array([b"x" * int(rng.integers(1, 9)) + b"%d" % i for i in range(n)]),
                 "size": rng.integers(0, 100, n)} for n in sizes]
    whole = {f: np.concatenate([s[f] for s in segments if len(s[f])] or [segments[0][f]]) for f in ("id", "size")}
    whole["id"] = np.concatenate([s["id"].astype("S12") for s in segments])
    live = rng.integers(0, 2, sum(sizes)).astype(np.int8)
    joined = JoinedColumns(segments, {"live": live})
    rows = rng.permutation(sum(sizes))[:9]
    for f in ("id", "size"):
        assert [joined.value(f, n) for n in range(sum(sizes))] == whole[f].tolist()
        assert joined.at(f, rows).tolist() == whole[f][rows].tolist()
    catalog = Catalog(joined)
    assert catalog.take(rows).columns["id"].tolist() == whole["id"][rows].tolist()
    assert catalog.ids_of(rows.tolist()) == {int(n): whole["id"][n].decode() for n in rows}
    assert (joined["size"] == whole["size"]).all() and (joined["id"] == whole["id"]).all()
    assert catalog.with_columns(live=1 - live)["size"] is joined["size"]  # joined once, shared
    fresh = JoinedColumns(segments, {"live": live})  # an unchanged run's check: no column joined for it
    assert Catalog(fresh).same(Catalog(fresh.replaced({"live": live.copy()}))) and not fresh.joined
    assert not Catalog(fresh).same(Catalog(fresh.replaced({"live": 1 - live})))
    assert not Catalog(fresh).same(Catalog(fresh.replaced({"size": whole["size"] + 1})))


@pytest.mark.parametrize("ascending", [True, False])
def test_pairing_order_of_segments_is_that_of_the_rows_by_id(ascending):
    """pairable and pairing_order of a segmented catalog, read segment by segment (never joined), against brute
    force over its rows: live, shingles >= max(--min-shingles, 1), size >= --min-size, sorted by id. The
    shortcut (ids already ascending in row order, as distinct_live_ids found) is taken only when it holds."""
    from nearDup.config import CandidateParams
    from nearDup.pipeline.candidates import pairable, pairing_order
    from nearDup.store.catalog import Catalog, JoinedColumns

    rng = np.random.default_rng(5)
    sizes = [6, 0, 9, 4]
    names = [b"doc%03d" % i for i in range(sum(sizes))]
    if not ascending:
        names = [names[i] for i in rng.permutation(len(names))]
    segments, at = [], 0
    for n in sizes:
        segments.append({"id": np.array(names[at:at + n] or [b""])[:n], "shingles": rng.integers(0, 6, n),
                         "size": rng.integers(0, 60, n)})
        at += n
    live = (rng.random(sum(sizes)) < 0.8).astype(np.int8)
    params = CandidateParams(min_shingles=2, min_size=10)
    shingles = np.concatenate([s["shingles"] for s in segments])
    size = np.concatenate([s["size"] for s in segments])
    truth = [n for n in range(len(names)) if live[n] and shingles[n] >= 2 and size[n] >= 10]
    catalog = Catalog(JoinedColumns(segments, {"live": live}))
    assert np.flatnonzero(pairable(catalog, params)).tolist() == truth and not catalog.columns.joined
    assert catalog.distinct_live_ids() and catalog.ids_ascending == ascending
    assert pairing_order(catalog, params).tolist() == sorted(truth, key=lambda n: names[n])


@pytest.mark.parametrize("ids, live, distinct, ascending", [
    ([[b"a", b"c"], [], [b"d", b"e"]], [1, 1, 1, 1], True, True),
    ([[b"a", b"c"], [b"b"]], [1, 1, 1], True, False),  # each segment ascending, not across them
    ([[b"a", b"b"], [b"b"]], [1, 1, 1], False, False),  # the same id in two segments
    ([[b"a", b"b"], [b"b"]], [1, 0, 1], True, True),  # ... held by a dead row
    ([[b"a", b"z"], [b"b", b"c"]], [1, 0, 1, 1], True, True)])  # the row out of order is dead
def test_distinct_live_ids_of_segments(ids, live, distinct, ascending):
    from nearDup.store.catalog import Catalog, JoinedColumns

    segments = [{"id": np.array(part, "S1"), "size": np.zeros(len(part), np.int64)} for part in ids]
    catalog = Catalog(JoinedColumns(segments, {"live": np.array(live, np.int8)}))
    assert catalog.distinct_live_ids() == distinct and catalog.ids_ascending == ascending


def test_the_item_runs_of_a_segmented_catalog_are_those_of_the_catalog_whole():
    """item_runs reads the item column segment by segment, or takes the first segment's runs as known: either way
    the runs of equal values of the rows joined (a range whose rows fall in two segments is one run, one that
    comes back in a later segment another), against a loop over the rows."""
    from nearDup.store.catalog import Catalog, JoinedColumns, ShardRows, item_runs

    items = [b"a", b"a", b"b", b"b", b"b", b"c", b"c", b"a", b"d", b"d", b"e"]
    cuts = [0, 3, 3, 6, 9]  # segments of 3, 0, 3 and 3 rows: "b" runs across the first two that hold rows
    segments = [{"item": np.array(items[lo:hi], "S1"), "size": np.arange(lo, hi)}
                for lo, hi in itertools.pairwise(cuts)]
    live = np.array([1, 0, 1, 1, 1, 0, 1, 1, 1], np.int8)
    catalog = Catalog(JoinedColumns(segments, {"live": live}))
    new = ShardRows(lambda field: np.array(items[9:], "S1"), 2, {}, 3)  # a new shard: "d" goes on

    def runs(values):
        found: list = []
        for n, value in enumerate(values):
            if found and value == found[-1][2]:
                found[-1][1] += 1
            else:
                found.append([n, 1, value])
        return found

    for got, want in ((item_runs([catalog]), runs(items[:9])), (item_runs([catalog, new]), runs(items)),
                      (item_runs([catalog, new], first=item_runs([catalog])), runs(items)),
                      (item_runs([Catalog.empty(), new]), runs(items[9:]))):
        assert [list(run) for run in zip(*(a.tolist() for a in got))] == want
    assert [len(a) for a in item_runs([Catalog.empty()])] == [0, 0, 0]


def test_each_band_shard_keeps_the_digest_of_its_keys_and_a_missing_one_is_made_again(tmp_path):
    """The band stage writes part-n.digest.npy, band_digest of the shard's keys (equal rows of keys, equal digests;
    a key changed in any band, another digest); a work dir whose digest files are gone (an older one, or damaged)
    makes them again and prints what it printed."""
    from nearDup.config import BandParams
    from nearDup.pipeline.band import band_digest

    keys = np.random.default_rng(2).integers(0, 2**63, (50, 14)).astype(np.uint64)
    keys[7] = keys[3]
    changed = keys.copy()
    changed[np.arange(14) + 20, np.arange(14)] += np.uint64(1)  # rows 20..33: one band each
    params = BandParams(bands=14, rows=9, threshold=0.8)
    digest, other = band_digest(keys, params), band_digest(changed, params)
    assert digest[7] == digest[3] and len(set(digest.tolist())) == 49
    assert (digest[20:34] != other[20:34]).all() and (digest[:20] == other[:20]).all()

    folder = tmp_path / "docs"
    generate_corpus(folder, n_base=40, seed=9)
    index = tmp_path / "index"
    args = ("run", folder, "--index", index, "--partition-docs", 10, "-t", 0.5, "-j", 1)
    first = _invoke(*args)
    stored = sorted((index / "band").glob("part-*.digest.npy"))
    assert first.exit_code == 0 and len(stored) == len(list((index / "band").glob("part-*[0-9].npy"))) > 1
    for path in stored:
        assert (np.load(path) == band_digest(np.load(str(path).replace(".digest", "")), params)).all()
        path.unlink()
    (folder / "zz_new.txt").write_text((folder / sorted(os.listdir(folder))[0]).read_text())
    again = _invoke(*args)
    assert again.exit_code == 0 and all(path.exists() for path in stored)
    assert again.stdout == _invoke("run", folder, "-w", tmp_path / "scratch", "--partition-docs", 10, "-t", 0.5,
                                   "-j", 1).stdout


def _stored_as_before(work_dir: Path, *kept: str) -> None:
    """Rewrite a work dir's candidates record as nearDup stored it before pairable.npy: order.npy (the pairable
    documents by id) and classes.npy (a label per document), with those of kept of rank.npy (each document's
    place in order) and copies.npy."""
    from nearDup.pipeline.copies import Pairing
    from nearDup.store.workdir import WorkDir

    work = WorkDir(work_dir)
    record = work.manifest().candidates
    pairing = Pairing.load(work, record)
    rank = pairing.dense_ranks()
    members = pairing.members()
    order = members[np.argsort(rank[members])]
    dense_rank = np.full(pairing.documents, -1, np.int64)
    dense_rank[order] = np.arange(len(order))
    arrays = {"order.npy": order, "classes.npy": pairing.dense_labels(), "rank.npy": dense_rank,
              "copies.npy": pairing.copies.rows}
    manifest = json.loads((work_dir / "manifest.json").read_text())
    files = manifest["stages"]["candidates"]["files"]
    for name in ("pairable.npy", "rank.npy", "copies.npy"):
        files.pop(name, None)
        work.output("candidates", name, record.key).unlink(missing_ok=True)
    for name in ("order.npy", "classes.npy", *kept):
        path = work.output("candidates", name, record.key)
        np.save(path, arrays[name])
        files[name] = path.stat().st_size
    (work_dir / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("kept", [("rank.npy", "copies.npy"), ("copies.npy",), ()])
def test_an_index_stored_as_before_is_updated_to_the_same_result(tmp_path, kept):
    """A last candidates run stored as before pairable.npy (order.npy and classes.npy; rank.npy and copies.npy as
    later versions added them): the run reads its ranks and classes from those, prints what a run from scratch
    prints, stores its own as now and leaves no temporary file."""
    folder = tmp_path / "docs"
    generate_corpus(folder, n_base=40, seed=12)
    names = sorted(os.listdir(folder))
    shutil.copy(folder / names[3], folder / f"c_{names[3]}")  # a class of copies
    index = tmp_path / "index"
    args = ("run", folder, "--partition-docs", 10, "-t", 0.5, "-j", 1)
    assert _invoke(*args, "--index", index).exit_code == 0
    _stored_as_before(index, *kept)
    for name in names[:6:2]:
        (folder / f"new_{name}").write_text((folder / name).read_text() + " with a few more words at the end")
    shutil.copy(folder / names[3], folder / f"d_{names[3]}")  # one more copy in the class
    os.unlink(folder / names[-1])
    again = _invoke(*args, "--index", index)
    assert again.exit_code == 0, again.stderr
    assert again.stdout == _invoke(*args, "-w", tmp_path / "scratch").stdout and "new_" in again.stdout
    assert "d_" in again.stdout
    left = sorted(p.name.split(".", 1)[1] for p in (index / "candidates").iterdir())
    assert "pairable.npy" in left and "classes.npy" not in left
    assert not [n for n in left if n in ("died.npy", "new.npy")]


def _indexed_then_updated(tmp_path: Path, seed: int):
    """(index, its manifest, update): an index of a 30-document corpus, and update(manifest), which writes the
    manifest back (as a test changed it, to hold files stored as an older nearDup did), deletes, edits and adds a
    document, runs the index again and checks that it prints what a run from scratch prints."""
    folder, index = tmp_path / "docs", tmp_path / "index"
    generate_corpus(folder, n_base=30, seed=seed)
    args = ("run", folder, "--partition-docs", 10, "-t", 0.5, "-j", 1)
    assert _invoke(*args, "--index", index).exit_code == 0

    def update(manifest: dict) -> None:
        (index / "manifest.json").write_text(json.dumps(manifest))
        names = sorted(os.listdir(folder))
        os.unlink(folder / names[0])
        (folder / names[1]).write_text((folder / names[1]).read_text() + " and an edit")
        (folder / "new.txt").write_text((folder / names[2]).read_text() + " with a few more words")
        again = _invoke(*args, "--index", index)
        assert again.exit_code == 0, again.stderr
        assert again.stdout == _invoke(*args, "-w", tmp_path / "scratch").stdout and "new.txt" in again.stdout
    return index, json.loads((index / "manifest.json").read_text()), update


def test_an_index_whose_catalog_holds_the_liveness_as_int64_is_updated_to_the_same_result(tmp_path):
    """A catalog stores each row's liveness as int8 (read as bools without a copy); before, as int64. An index
    stored so is read as it was: a run that deletes, edits and adds documents prints what a run from scratch
    prints, and its catalog is int8 from then on."""
    index, manifest, update = _indexed_then_updated(tmp_path, seed=5)
    shingle = manifest["stages"]["shingle"]
    path = index / "shingle" / f"{shingle['key'][:12]}.catalog.npz"
    with np.load(path) as stored:
        columns = {name: stored[name] for name in stored.files}
    assert columns["live"].dtype == np.int8
    np.savez(path, **{**columns, "live": columns["live"].astype(np.int64)})  # as nearDup stored it before
    shingle["files"]["catalog.npz"] = path.stat().st_size
    update(manifest)
    key = json.loads((index / "manifest.json").read_text())["stages"]["shingle"]["key"][:12]
    appended = index / "shingle" / f"{key}.catalog.live.npy"  # (the rows appended: the liveness apart)
    with np.load(index / "shingle" / f"{key}.catalog.npz") as whole:
        live = np.load(appended) if appended.exists() else whole["live"]
    assert live.dtype == np.int8


def test_an_index_whose_band_index_holds_numbers_as_int64_is_updated_to_the_same_result(tmp_path):
    """A band index (and the digest index) stores document numbers as int32 (lsh.stored_numbers); before, as
    int64. An index stored so is read as it was: a run that deletes, edits and adds documents prints what a run
    from scratch prints, and the segments it appends are int32."""
    index, manifest, update = _indexed_then_updated(tmp_path, seed=6)
    candidates = manifest["stages"]["candidates"]
    rewritten = 0
    for name in candidates["files"]:
        if name.endswith("docs.npy"):
            path = index / "candidates" / f"{candidates['key'][:12]}.{name}"
            stored = np.load(path)
            assert stored.dtype == np.int32
            np.save(path, stored.astype(np.int64))  # as nearDup stored it before
            candidates["files"][name] = path.stat().st_size
            rewritten += 1
    assert rewritten >= 2  # (the band index's files and the digest index's)
    update(manifest)
    key = json.loads((index / "manifest.json").read_text())["stages"]["candidates"]["key"][:12]
    segments = list((index / "candidates").glob(f"{key}.*.s[0-9]*.docs.npy"))  # this run's; the bases are kept
    assert segments and all(np.load(p).dtype == np.int32 for p in segments)


def test_a_work_dir_from_before_copies_were_stored_reports_the_same_pairs_and_groups(tmp_path):
    """A candidates record without copies.npy (made before it was kept): the verified pairs, groups and the
    report's counts are read through the classes' labels instead, as they print from a fresh run."""
    folder = tmp_path / "docs"
    generate_corpus(folder, n_base=30, seed=14)
    names = sorted(os.listdir(folder))
    for i in range(3):  # a class of four copies, and another of two
        shutil.copy(folder / names[4], folder / f"c{i}_{names[4]}")
    shutil.copy(folder / names[9], folder / f"c_{names[9]}")
    work = tmp_path / "work"
    printed = {what: _invoke("run", folder, "-w", work, "-t", 0.5, "--print", what).stdout
               for what in ("pairs", "groups")}
    assert "c2_" in printed["pairs"]
    _stored_as_before(work)
    for what, out in printed.items():
        again = _invoke("run", folder, "-w", work, "-t", 0.5, "--print", what)
        assert again.exit_code == 0 and again.stdout == out, again.stderr
        assert "candidates: up to date" in again.stderr  # (read as stored, not made again)


def test_copy_classes_regroup_a_document_that_can_pair_only_now_with_its_class(tmp_path):
    """copy_classes(previous): a document that could not pair in the last run but can now joins the class of its
    copies, whose classes were not touched otherwise; the result equals the classes afresh."""
    from nearDup.pipeline.candidates import digest_runs
    from nearDup.pipeline.copies import Copies, Pairing, copy_classes
    from nearDup.store.workdir import WorkDir

    folder = tmp_path / "docs"
    generate_corpus(folder, n_base=30, seed=13)
    names = sorted(os.listdir(folder))
    for i in range(3):
        shutil.copy(folder / names[4], folder / f"c{i}_{names[4]}")
    index = tmp_path / "index"
    assert _invoke("run", folder, "--index", index, "--partition-docs", 8, "-t", 0.5, "-j", 1).exit_code == 0
    work = WorkDir(index)
    record, shingle = work.manifest().candidates, work.manifest().shingle
    mask = Pairing.load(work, record).pairable_mask()
    afresh, _ = copy_classes(work, shingle, mask)
    runs = [tuple(np.load(work.output("candidates", name, record.key), mmap_mode="r") for name in files)
            for files in digest_runs(record)]
    assert len(runs) == 1  # (the base)
    label = Pairing(mask, afresh).dense_labels()
    sizes = np.bincount(label[label >= 0])
    big = int(np.flatnonzero(sizes >= 4)[0])  # the class of four copies, by its label
    for who in (big, int(np.flatnonzero(label == big)[-1])):  # its label, then its last member
        previous = label.copy()
        previous[who] = -1  # could not pair then
        if who == big:  # its class was labelled by the next one then
            rest = np.flatnonzero(label == big)[1:]
            previous[rest] = rest[0]
        before = Pairing(previous >= 0, Copies.of(previous))
        for last_runs in (None, runs):  # every digest read, or the last run's digest index looked up
            assert copy_classes(work, shingle, mask, before, last_runs)[0].rows.tolist() == afresh.rows.tolist()


@pytest.mark.parametrize("files", [3, 64, 300])
def test_listed_ids_as_bytes_are_each_path_encoded(tmp_path, files):
    """ListedFiles.id_bytes (folders of 64 files or more: the names' rows put after their folder's prefix) against
    each path encoded by itself: names of different lengths, non-ASCII, an undecodable byte, folders whose prefixes
    differ in length, and paths wider than any name."""
    root = tmp_path / "docs"
    rng = random.Random(files)
    for folder in ("a", "bé/longer-folder-name", "c"):
        (root / folder).mkdir(parents=True)
        for i in range(files):
            name = f"{'x' * rng.randrange(1, 30)}{'é' if i % 7 == 0 else ''}{i}.txt"
            (root / folder / name).write_text("some text")
    os.close(os.open(os.path.join(os.fsencode(root / "c"), b"bad\xff.txt"), os.O_CREAT | os.O_WRONLY))
    listing = list_items([str(root)], SourceParams(), columns=True)
    got = listing.items.id_bytes()
    expected = [item.id.encode("utf-8", "surrogatepass") for item in listing.items]
    assert got.tolist() == expected and got.dtype.itemsize == max(map(len, expected))


def test_every_reader_of_an_appended_catalog_gives_what_it_gives_on_one_written_whole(tmp_path, monkeypatch):
    """query, inspect, groups, keepers, uniques and the action script read an index whose catalog was appended
    to (segments and a liveness file) as they read the same index with its catalog written whole."""
    from nearDup.pipeline import shingle

    folder = tmp_path / "docs"
    generate_corpus(folder, n_base=40, seed=14)
    names = sorted(os.listdir(folder))
    args = ("--partition-docs", 8, "-t", 0.5, "-j", 1)
    for most in (16, 0):
        monkeypatch.setattr(shingle, "SEGMENTS_MAX", most)
        assert _invoke("run", folder, "--index", tmp_path / f"index{most}", *args).exit_code == 0
    for step in range(2):  # documents added and deleted only: appended (SEGMENTS_MAX 16), or written whole (0)
        shutil.copy(folder / names[3 + step], folder / f"zz{step}_copy.txt")
        (folder / f"zz{step}_near.txt").write_text((folder / names[10 + step]).read_text() + " a few more words")
        os.unlink(folder / names[20 + step])
        for most in (16, 0):
            monkeypatch.setattr(shingle, "SEGMENTS_MAX", most)
            assert _invoke("run", folder, "--index", tmp_path / f"index{most}", *args, "-q").exit_code == 0
    assert sum(".catalog.s" in name for name in os.listdir(tmp_path / "index16" / "shingle")) >= 2
    assert not [name for name in os.listdir(tmp_path / "index0" / "shingle") if ".catalog.s" in name]
    probe = tmp_path / "probe.txt"
    probe.write_text((folder / names[3]).read_text())
    commands = [("query", probe, "-t", 0.5), ("-w", "{index}", "inspect"),
                ("run", folder, *args, "--groups", "--format", "jsonl"), ("run", folder, *args, "--print", "keepers"),
                ("run", folder, *args, "--print", "uniques"), ("run", folder, *args, "--print", "script")]
    for command in commands:
        outputs = []
        for most in (16, 0):
            index = str(tmp_path / f"index{most}")
            line = [index if c == "{index}" else c for c in command]
            r = _invoke(*line, *(["--index", index] if "{index}" not in command else []))
            assert r.exit_code == 0, (command, r.stderr)
            # (inspect prints when each stage ran: the two indexes' runs may fall in different seconds)
            outputs.append(re.sub(r"\d{4}-\d\d-\d\dT[\d:]+\+00:00", "TIME", r.stdout.replace(index, "INDEX")))
        assert outputs[0] == outputs[1] and outputs[0].strip(), command


def test_a_run_of_jsonl_or_plain_text_never_imports_the_extractors(tmp_path):
    """The extractors' module (and what it imports: email, xml, importlib.metadata; ~20 ms) is imported at the
    first file that needs one, or for a note on formats: never by a run of JSONL records or of plain text."""
    import subprocess
    import sys

    records = tmp_path / "records.jsonl"
    records.write_text("".join(json.dumps({"id": f"r{i}", "text": f"words of record {i} " * 8}) + "\n"
                               for i in range(20)))
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(5):
        (folder / f"d{i}.txt").write_text(f"plain text number {i} " * 10)
    probe = ("import sys; from nearDup.cli.main import main\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n"
             "print('nearDup.text.extract' in sys.modules, file=sys.stderr)\n")
    for args in (["--jsonl", str(records)], [str(folder)]):
        done = subprocess.run([sys.executable, "-c", probe, "run", *args, "-w", str(tmp_path / args[-1][-4:])],
                              capture_output=True, text=True)
        assert done.stderr.splitlines()[-1] == "False", done.stderr


def test_the_shards_kept_are_those_holding_a_live_row_with_their_first_rows():
    """_live_shards finds the shards with a live row by one reduction over the rows: against a loop over the
    shards, with empty shards (first, between and last), one whose only live row is its last, and dropped ones."""
    from types import SimpleNamespace

    from nearDup.pipeline.shingle import _live_shards, _rows_of

    docs = [0, 2, 0, 3, 1, 4, 2, 0]
    rng = np.random.default_rng(5)
    for trial in range(40):
        live = rng.random(sum(docs)) < (0.0 if trial == 0 else 0.3)
        live[4] = trial % 2 == 1  # shard 3's last row
        base = SimpleNamespace(shard_docs=docs, shard_numbers=[10 + i for i in range(len(docs))],
                               shard_keys=[f"k{i}" for i in range(len(docs))], shard_bytes=[100 * i for i in docs])
        if trial == 1:  # a damaged catalog: no row live, none at all
            live = live[:0]
        kept = _live_shards(base, live)
        truth, start = [], 0
        for i, count in enumerate(docs):
            if live[start:start + count].any():
                truth.append((10 + i, f"k{i}", count, 100 * count, start))
            start += count
        assert list(zip(kept.numbers, kept.keys, kept.docs, kept.bytes, kept.starts)) == truth
        if truth:
            rows = _rows_of(list(zip(kept.starts, kept.docs)))
            assert rows.tolist() == [s + j for *_, count, _, s in truth for j in range(count)]


def test_an_index_of_jsonl_from_before_item_runs_were_kept_is_updated_to_the_same_result(tmp_path, monkeypatch):
    """A shingle record without items.npz (made before the item column's runs were kept): the run reads the item
    column for its runs, prints what a run from scratch prints, and keeps them; the next run matches its ranges
    from the kept runs, reading only the new shard's item column."""
    from nearDup.store import catalog

    rng = random.Random(3)
    words = [f"w{i}" for i in range(200)]
    folder = tmp_path / "docs"
    folder.mkdir()

    def add(step):
        lines = [json.dumps({"id": f"r{step}-{i:02d}", "text": " ".join(rng.choices(words, k=50))}) + "\n"
                 for i in range(10)]
        lines.append(json.dumps({"id": f"copy{step}", "text": json.loads(lines[3])["text"]}) + "\n")
        (folder / f"shard-{step}.jsonl").write_text("".join(lines))

    def args(index):
        return ["run", "--jsonl", folder / "shard-*.jsonl", "--index", index, "--partition-docs", 4, "-t", 0.5,
                "-j", 1]

    read: list[int] = []  # the rows of each item column cut into runs
    real = catalog._value_runs
    monkeypatch.setattr(catalog, "_value_runs", lambda column: read.append(len(column)) or real(column))
    index = tmp_path / "index"
    for step in range(2):
        add(step)
        assert _invoke(*args(index)).exit_code == 0
    manifest = json.loads((index / "manifest.json").read_text())
    record = manifest["stages"]["shingle"]
    (index / "shingle" / f"{record['key'][:12]}.items.npz").unlink()
    del record["files"]["items.npz"]
    (index / "manifest.json").write_text(json.dumps(manifest))
    for step in (2, 3):
        add(step)
        read.clear()
        got = _invoke(*args(index))
        assert got.exit_code == 0, got.stderr
        # the stored rows' item column read (22 rows) before the runs were kept, then only the new shards' (11)
        assert sum(read) == (22 + 11 if step == 2 else 11)
        assert got.stdout == _invoke(*args(tmp_path / f"scratch{step}")).stdout and f"copy{step}" in got.stdout
        assert "items.npz" in json.loads((index / "manifest.json").read_text())["stages"]["shingle"]["files"]


@pytest.mark.parametrize("step", [1, 3, 4, 1 << 22])
def test_a_jsonl_files_line_ends_are_found_in_steps_as_in_the_whole_file(tmp_path, monkeypatch, step):
    """_read_jsonl_file reads the file and compares it a step at a time: the ends of its lines (the last one's
    without a newline too), its first bytes and stat are those of the file read whole, with newlines at and
    across the steps' edges, a BOM read in several steps, and an empty file."""
    from nearDup.text import inputs

    monkeypatch.setattr(inputs, "NEWLINE_STEP", step)
    rng = random.Random(step)
    for n, text in enumerate([b"", b"\n", b"\n\n\n", b"abc", b"ab\ncd", b"\xef\xbb\xbf{}\n{}",
                              *(bytes(rng.choice(b"ab\n") for _ in range(rng.randrange(1, 40))) for _ in range(30))]):
        path = tmp_path / f"f{n}.jsonl"
        path.write_bytes(text)
        st, head, ends = inputs._read_jsonl_file(str(path), str(path))
        truth = [i + 1 for i, byte in enumerate(text) if byte == 10] + ([len(text)] if text[-1:] not in (b"", b"\n")
                                                                          else [])
        assert ends.tolist() == truth and head == text[:4] and st.st_ino == path.stat().st_ino, text


def test_distinct_live_ids_after_the_rows_an_earlier_check_vouched_for_are_those_of_every_row():
    """distinct_live_ids(known) reads only the rows after those an earlier check found ascending (live rows of
    them dead since, or not): the same answer as a check of every row, against brute force; ascend vouches for
    every row, with a bound no live id passes, only when the live ids ascend."""
    from nearDup.store.catalog import Catalog, JoinedColumns

    rng = np.random.default_rng(8)
    for trial in range(300):
        n = int(rng.integers(1, 14))
        ids = np.array([b"%02d" % v for v in np.sort(rng.choice(40, n, replace=False))], "S2")
        if trial % 3 == 0:  # some out of order, or repeated
            ids[rng.integers(0, n)] = ids[rng.integers(0, n)]
        live = (rng.random(n) < 0.7).astype(np.int8)
        cut = int(rng.integers(0, n + 1))
        was = (live | (rng.random(n) < 0.3)).astype(np.int8)  # earlier, more rows were live
        before = Catalog({"id": ids[:cut], "live": was[:cut]})
        if not before.distinct_live_ids() or not before.ids_ascending:
            continue
        bounds = sorted({0, cut, int(rng.integers(0, n + 1)), n})
        segments = [{"id": ids[lo:hi], "size": np.zeros(hi - lo, np.int64)} for lo, hi in itertools.pairwise(bounds)]
        catalog = Catalog(JoinedColumns(segments, {"live": live}))
        alive = [v for v, a in zip(ids.tolist(), live.tolist()) if a]
        distinct, ascending = len(set(alive)) == len(alive), all(a < b for a, b in itertools.pairwise(alive))
        assert catalog.distinct_live_ids(before.ascend) == distinct
        # known ascending only if they do; surely if nothing was vouched for (the bound may be a row dead since)
        assert catalog.ids_ascending <= ascending and (catalog.ids_ascending == ascending or cut > 0)
        if catalog.ids_ascending:  # every row vouched for: no live id above the bound
            rows, bound = catalog.ascend
            assert rows == n and (not alive or (bound is not None and alive[-1] <= bound))
        else:
            assert catalog.ascend is None


def test_an_index_of_records_finds_an_id_of_a_new_shard_held_by_a_stored_record(tmp_path):
    """A new shard whose record takes an id that a stored record holds stops the run with the duplicate named,
    though the stored ids were found ascending by the last run (and are not read again when the new ids come
    after them)."""
    def shard(name, ids):
        (tmp_path / name).write_text("".join(json.dumps({"id": i, "text": f"text of {i} " * 20}) + "\n" for i in ids))

    shard("s0.jsonl", [f"r{i}" for i in range(5)])
    args = ["run", "--jsonl", tmp_path / "s*.jsonl", "--index", tmp_path / "index", "-t", 0.5, "-j", 1]
    assert _invoke(*args).exit_code == 0
    shard("s1.jsonl", ["r7", "r8"])
    assert _invoke(*args).exit_code == 0
    shard("s2.jsonl", ["r9", "r3"])
    got = _invoke(*args)
    assert got.exit_code != 0 and "duplicate ids in field 'id': 'r3'" in got.stderr


@pytest.mark.parametrize("damage", ["truncated", "missing"])
def test_a_damaged_item_runs_file_is_noticed_and_the_index_made_again(tmp_path, damage):
    """items.npz is one of the shingle record's files: truncated or missing, the record is not trusted (said on
    stderr), the documents are read again, and the run prints what a run from scratch prints."""
    for step in range(2):
        (tmp_path / f"s{step}.jsonl").write_text("".join(
            json.dumps({"id": f"r{step}-{i}", "text": f"text {i % 4} of shard " * 30 + str(i // 2)}) + "\n"
            for i in range(8)))
        if step == 0:
            args = ["run", "--jsonl", tmp_path / "s*.jsonl", "--index", tmp_path / "index", "-t", 0.5, "-j", 1]
            assert _invoke(*args).exit_code == 0
            manifest = json.loads((tmp_path / "index" / "manifest.json").read_text())
            items = tmp_path / "index" / "shingle" / f"{manifest['stages']['shingle']['key'][:12]}.items.npz"
            if damage == "missing":
                items.unlink()
            else:
                items.write_bytes(items.read_bytes()[:-10])
    got = _invoke(*args)
    assert got.exit_code == 0 and f"{items} is missing or truncated; recomputing the shingle stage" in got.stderr, \
        got.stderr
    assert got.stdout == _invoke("run", "--jsonl", tmp_path / "s*.jsonl", "-w", tmp_path / "scratch", "-t", 0.5,
                                 "-j", 1).stdout and "r1-" in got.stdout
