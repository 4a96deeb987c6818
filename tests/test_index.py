"""The incremental index (#6): a run reads only new and changed documents, reports what is new, and its full
result is always the result of a run from scratch over the same files."""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from nearDup.cli import cli

from conftest import NO_TMPFS, REPO, brute_force_pairs, generate_corpus, tmpfs_flags

RUN = ["--partition-docs", "25", "-t", "0.5"]


def invoke(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


def neardup(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nearDup", *map(str, args)], capture_output=True)


def pairs_of(tsv: str) -> set[tuple[str, str]]:
    return {tuple(line.split("\t")[1:3]) for line in tsv.splitlines()}


def from_scratch(folder: Path, tmp: Path, *extra) -> str:
    w = tmp / f"scratch-{random.random()}"
    r = invoke("-w", w, "run", folder, *RUN, *extra)
    assert r.exit_code == 0, r.stderr
    shutil.rmtree(w)
    return r.stdout


def change_files(folder: Path, rng: random.Random) -> dict[str, set[str]]:
    """Add, change, rename, delete and touch files; returns which paths are new (added or changed in content),
    renamed (to), deleted, touched."""
    names = sorted(p.name for p in folder.iterdir())
    picked = rng.sample(names, 12)
    new, renamed, deleted, touched = set(), set(), set(), set()
    for name in picked[:3]:  # copies and near-copies of existing documents: new duplicates
        text = (folder / name).read_text()
        (folder / f"new_{name}").write_text(text if len(new) % 2 else text + " one more sentence here")
        new.add(str(folder / f"new_{name}"))
    for name in picked[3:6]:  # content changed: the old version leaves, the new one is new
        words = (folder / name).read_text().split()
        (folder / name).write_text(" ".join(words[: len(words) // 2] + ["changed"] + words[len(words) // 2:]))
        new.add(str(folder / name))
    for name in picked[6:8]:  # renamed: recognised by content, not read again as new
        os.rename(folder / name, folder / f"moved_{name}")
        renamed.add(str(folder / f"moved_{name}"))
    for name in picked[8:10]:
        os.unlink(folder / name)
        deleted.add(str(folder / name))
    for name in picked[10:]:  # touched: new mtime, same content
        st = os.stat(folder / name)
        os.utime(folder / name, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
        touched.add(str(folder / name))
    return {"new": new, "renamed": renamed, "deleted": deleted, "touched": touched}


@pytest.fixture
def folder(tmp_path):
    generate_corpus(tmp_path / "docs", n_base=150, seed=3)
    return tmp_path / "docs"


@pytest.mark.parametrize("max_bucket", [[], ["--max-bucket", "2"]])  # 2: buckets of copies become stars
def test_incremental_result_equals_a_run_from_scratch_byte_for_byte(folder, tmp_path, max_bucket):
    index = tmp_path / "index"
    first = invoke("run", folder, "--index", index, *RUN, *max_bucket)
    assert first.exit_code == 0 and first.stdout == from_scratch(folder, tmp_path, *max_bucket)
    assert ("over --max-bucket 2" in first.stderr) == bool(max_bucket)
    changes = change_files(folder, random.Random(1))
    again = invoke("run", folder, "--index", index, *RUN, *max_bucket)
    assert again.exit_code == 0, again.stderr
    assert again.stdout == from_scratch(folder, tmp_path, *max_bucket)
    assert "(the last run's, updated where new, changed or deleted documents fall)" in again.stderr
    if max_bucket:
        return
    # only the new and changed files were read and shingled; the renamed and touched ones were recognised
    assert (f"this run: {len(changes['new'])} added, {len(changes['deleted']) + 3} removed, "
            f"{len(changes['renamed'])} renamed") in again.stderr
    for extra in (["--groups", "--format", "jsonl"], ["--print", "uniques"],
                  ["--print", "keepers", "--keep", "newest"]):
        assert invoke("run", folder, "--index", index, *RUN, *extra).stdout == from_scratch(folder, tmp_path, *extra)
    # and against independent truth: every reported pair is a true pair
    texts = {str(p): p.read_text() for p in folder.iterdir()}
    assert pairs_of(again.stdout) <= set(brute_force_pairs(texts, 0.5))


def test_new_only_reports_exactly_the_pairs_that_involve_added_or_changed_documents(folder, tmp_path):
    index = tmp_path / "index"
    assert invoke("run", folder, "--index", index, *RUN).exit_code == 0
    quiet = invoke("run", folder, "--index", index, *RUN, "--new-only", "--exit-code")
    assert quiet.exit_code == 0 and quiet.stdout == ""  # nothing changed: nothing new, exit 0
    changes = change_files(folder, random.Random(2))
    r = invoke("run", folder, "--index", index, *RUN, "--new-only", "--exit-code")
    assert r.exit_code == 1  # new duplicates were found
    full = pairs_of(from_scratch(folder, tmp_path))
    expected = {p for p in full if p[0] in changes["new"] or p[1] in changes["new"]}
    assert expected and pairs_of(r.stdout) == expected
    groups = json.loads("[" + ",".join(invoke("run", folder, "--index", index, *RUN, "--groups", "--format",
                                              "jsonl").stdout.splitlines()) + "]")
    # reported once: the next run has nothing new, even for groups
    again = invoke("run", folder, "--index", index, *RUN, "--new-only", "--groups", "--format", "jsonl")
    assert [g for g in map(json.loads, again.stdout.splitlines()) if g["type"] == "group"] == []
    assert any(g["type"] == "group" for g in groups)


def test_groups_with_new_only_are_the_groups_holding_a_new_document(folder, tmp_path):
    index = tmp_path / "index"
    invoke("run", folder, "--index", index, *RUN)
    changes = change_files(folder, random.Random(4))
    r = invoke("run", folder, "--index", index, *RUN, "--new-only", "--groups", "--format", "jsonl")
    got = [g for g in map(json.loads, r.stdout.splitlines()) if g["type"] == "group"]
    full = [json.loads(line) for line in from_scratch(folder, tmp_path, "--groups", "--format", "jsonl").splitlines()]
    want = [g for g in full if g["type"] == "group" and any(m["id"] in changes["new"] for m in g["members"])]
    assert want and got == want


def test_parameters_are_fixed_until_rebuild(folder, tmp_path):
    index = tmp_path / "index"
    invoke("run", folder, "--index", index, *RUN)
    manifest = (index / "manifest.json").read_bytes()
    r = invoke("run", folder, "--index", index, *RUN, "-k", 4)
    assert r.exit_code == 2 and "built with shingle k 5, not 4" in r.stderr and "--rebuild" in r.stderr
    r = invoke("run", folder, "--index", index, "--partition-docs", 25, "-t", 0.6)
    assert r.exit_code == 2 and "threshold 0.5, not 0.6" in r.stderr
    assert (index / "manifest.json").read_bytes() == manifest  # a refused run changes nothing
    rebuilt = invoke("run", folder, "--index", index, *RUN, "-k", 4, "--rebuild")
    assert rebuilt.exit_code == 0 and rebuilt.stdout == from_scratch(folder, tmp_path, "-k", 4)
    assert invoke("run", folder, "--index", index, *RUN, "-k", 4).exit_code == 0


def test_query_finds_near_duplicates_in_the_index_and_changes_nothing(folder, tmp_path):
    index = tmp_path / "index"
    full = invoke("run", folder, "--index", index, *RUN)
    snapshot = {p: p.read_bytes() for p in index.rglob("*") if p.is_file() and p.name != "lock"}
    probe = sorted(p for p in folder.iterdir() if p.name.endswith("_v0.txt"))[0]
    query = tmp_path / "outside.txt"
    query.write_text(probe.read_text())
    r = invoke("query", query, "--index", index, "-t", 0.5)
    assert r.exit_code == 0, r.stderr
    found = {line.split("\t")[2]: float(line.split("\t")[0]) for line in r.stdout.splitlines()}
    # the copy's near-duplicates are the probe itself (J = 1) and the probe's partners in the full result
    partners = {b if a == str(probe) else a for a, b in pairs_of(full.stdout) if str(probe) in (a, b)}
    assert found == {str(probe): 1.0, **{p: found.get(p) for p in partners}} and found[str(probe)] == 1.0
    truth = brute_force_pairs({"q": query.read_text(), **{p: Path(p).read_text() for p in found}}, 0.0)
    for doc, j in found.items():
        assert abs(truth[tuple(sorted(("q", doc)))] - j) < 1e-9
    stdin = invoke("query", "--index", index, "-t", 0.5, "--format", "jsonl", input=query.read_text())
    assert {json.loads(line)["b"] for line in stdin.stdout.splitlines()[1:-1]} == set(found)
    assert {p: p.read_bytes() for p in index.rglob("*") if p.is_file() and p.name != "lock"} == snapshot


def test_jsonl_index_reads_only_appended_records(tmp_path):
    rng = random.Random(6)
    records = [{"id": f"r{i}", "text": " ".join(f"w{rng.randrange(5000)}" for _ in range(80))} for i in range(60)]
    records += [{"id": f"copy{i}", "text": records[i]["text"]} for i in range(0, 60, 10)]
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    index = tmp_path / "index"
    invoke("run", data, "--jsonl", "--index", index, "-t", 0.5)
    more = [{"id": "late", "text": records[5]["text"]}, {"id": "r3", "text": "replaced " * 30}]
    data.write_text("".join(json.dumps(r) + "\n" for r in records if r["id"] != "r3") +
                    "".join(json.dumps(r) + "\n" for r in more))
    r = invoke("run", data, "--jsonl", "--index", index, "-t", 0.5, "--new-only")
    assert "this run: 2 added, 1 removed" in r.stderr
    assert pairs_of(r.stdout) == {("late", "r5")}  # copy0..copy50 pair with r0..r50, but they are not new
    w = tmp_path / "scratch"
    assert invoke("run", data, "--jsonl", "--index", index, "-t", 0.5).stdout == \
        invoke("-w", w, "run", data, "--jsonl", "-t", 0.5).stdout


def test_a_killed_incremental_run_leaves_the_index_as_it_was(tmp_path):
    folder = tmp_path / "docs"
    generate_corpus(folder, n_base=700, seed=13)
    index = tmp_path / "index"
    args = ["run", folder, "--index", index, "--partition-docs", 20, "--jobs", 2, "-t", 0.5]
    assert neardup(*args).returncode == 0
    change_files(folder, random.Random(5))
    for name in sorted(os.listdir(folder))[:300]:  # enough new work for the kills to land mid-run
        (folder / f"extra_{name}").write_text((folder / name).read_text() + " extra")
    start = time.monotonic()
    timing = neardup("run", folder, "-w", tmp_path / "timing", "--partition-docs", 20, "-t", 0.5)
    duration = time.monotonic() - start
    assert timing.returncode == 0
    manifest = (index / "manifest.json").read_bytes()
    rng = random.Random(8)
    for kill_at in sorted(rng.uniform(0.1, 0.6) * duration for _ in range(4)):
        proc = subprocess.Popen([sys.executable, "-m", "nearDup", *map(str, args)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        time.sleep(kill_at)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        if proc.returncode == 0:
            break
        assert (index / "manifest.json").read_bytes() == manifest  # exactly as before the run
        probe = sorted(folder.iterdir())[0]
        assert neardup("query", probe, "--index", index).returncode == 0  # and usable
    resumed = neardup(*args)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout == timing.stdout


# in a private mount namespace, on a tmpfs at $1 (python $2, the checkout $3, documents $4, more documents $5,
# slack $6 KiB): an index of $4, then $5 added and the tmpfs shrunk to what it holds plus the slack, the run that
# fills it, and the run after the tmpfs is grown again; statuses, stderr, manifests and stdout beside $1
_INDEX_FILLS_DISK = ('mount -t tmpfs -o size=64m none "$1" && cd "$3" && m="$1" && '
                     '{ "$2" -m nearDup run "$4" --index "$m/i" -t 0.5 -q; echo $? > "$m.rc0"; '
                     'cp "$m/i/manifest.json" "$m.manifest0"; cp -R "$5"/. "$4"/; '
                     'mount -o remount,size=$(( $(df -k --output=used "$m" | tail -1) + $6 ))k "$m"; '
                     '"$2" -m nearDup run "$4" --index "$m/i" -t 0.5 -q 2> "$m.err1"; echo $? > "$m.rc1"; '
                     'cp "$m/i/manifest.json" "$m.manifest1"; find "$m/i" -name "*.tmp" > "$m.tmps"; '
                     'mount -o remount,size=64m "$m"; '
                     '"$2" -m nearDup run "$4" --index "$m/i" -t 0.5 > "$m.out2" 2> "$m.err2"; echo $? > "$m.rc2"; }')


@pytest.mark.parametrize("slack", [8, 48, 160])
def test_a_disk_that_fills_up_mid_run_leaves_the_index_as_it_was(tmp_path, slack):
    """A real full disk (a tmpfs shrunk to what the index holds plus `slack` KiB) in the middle of an incremental
    run: one line naming the cause, the index exactly as before the run (its manifest) with no temporary file, and
    once there is room the next run prints what a run from scratch over every document prints."""
    flags = tmpfs_flags(tmp_path / "probe")
    if flags is None:
        pytest.skip(NO_TMPFS)
    folder, extra = tmp_path / "docs", tmp_path / "extra"
    generate_corpus(folder, n_base=60, seed=21)
    for name in sorted(os.listdir(folder))[:40]:  # new documents, a few of them near-duplicates of indexed ones
        (extra / name.replace("doc", "new")).parent.mkdir(exist_ok=True)
        (extra / name.replace("doc", "new")).write_text((folder / name).read_text() + " added later")
    mount = tmp_path / "m"
    mount.mkdir()
    subprocess.run(["unshare", *flags, "sh", "-c", _INDEX_FILLS_DISK, "sh", str(mount), sys.executable, str(REPO),
                    str(folder), str(extra), str(slack)], check=True, timeout=300)

    def read(suffix: str) -> bytes:
        return Path(f"{mount}.{suffix}").read_bytes()

    assert read("rc0").strip() == b"0"
    err = read("err1").decode()
    assert read("rc1").strip() == b"2" and len(err.splitlines()) == 1, err
    assert "no space left on device; free space or choose another --workdir" in err, err
    assert read("manifest1") == read("manifest0") and read("tmps") == b""
    assert read("rc2").strip() == b"0", read("err2")
    scratch = neardup("run", folder, "-w", tmp_path / "scratch", "-t", 0.5)
    assert scratch.returncode == 0 and read("out2") == scratch.stdout and scratch.stdout.count(b"\n") >= 40


def test_an_index_keeps_one_copy_of_each_compressed_input_however_often_it_changes(tmp_path):
    """A compressed JSONL shard is read from a decompressed copy in the index's inputs/, named by the file's version.
    An index kept by cron whose shard changes every day kept every day's copy, each as large as the text. After a
    run commits, the copies its listing did not read are removed: of a shard that changed, and of one no longer
    given. Nothing else in inputs/ is touched, and each run prints what a run from scratch prints."""
    import gzip

    texts = (REPO / "sample_corpus").glob("*.txt")
    records = [json.dumps({"id": p.stem, "text": p.read_text()}) + "\n" for p in sorted(texts)]
    shards, index = tmp_path / "shards", tmp_path / "index"
    shards.mkdir()
    for day, count in enumerate((10, 20, 30)):
        (shards / "a.jsonl.gz").write_bytes(gzip.compress("".join(records[:count]).encode(), mtime=0))
        os.utime(shards / "a.jsonl.gz", ns=(1_700_000_000_000_000_000 + day, 1_700_000_000_000_000_000 + day))
        given = [shards / "a.jsonl.gz"]
        if day < 2:  # a second shard, given the first two days only
            (shards / "b.jsonl.gz").write_bytes(gzip.compress("".join(records[25:]).encode(), mtime=0))
            given.append(shards / "b.jsonl.gz")
        r = neardup("run", "--jsonl", *given, "--index", index, "-t", 0.5)
        scratch = neardup("run", "--jsonl", *given, "-w", tmp_path / f"scratch{day}", "-t", 0.5)
        assert r.returncode == 0 and r.stdout == scratch.stdout, r.stderr
        if day == 0:  # not a name nearDup gives a copy: never removed
            (index / "inputs" / "notes.txt").write_text("not nearDup's")
        st = os.stat(shards / "a.jsonl.gz")
        names = sorted(os.listdir(index / "inputs"))
        assert f"a.jsonl.{st.st_size}.{st.st_mtime_ns}" in names
        assert len([n for n in names if n.startswith("a.jsonl.")]) == 1, names  # today's copy only
        assert len([n for n in names if n.startswith("b.jsonl.")]) == (1 if day < 2 else 0), names
        assert "notes.txt" in names


def test_a_reader_that_stops_early_does_not_cost_the_index_its_run(tmp_path):
    """`neardup run docs --index idx | head -1` lost the whole commit (exit 1): the next run did all the work again
    and --new-only reported every pair again, forever. Now the run commits, its results count as reported (the
    reader chose to stop), and the exit status is 141 (128 + SIGPIPE), never --exit-code's 1."""
    folder = tmp_path / "docs"
    generate_corpus(folder, n_base=30, seed=3)
    text = (folder / "doc0000.txt").read_text()
    for i in range(120):  # 7,140 pairs: far more output than a pipe holds
        (folder / f"copy{i:03d}.txt").write_text(text)
    index = tmp_path / "index"
    proc = subprocess.Popen([sys.executable, "-m", "nearDup", "run", folder, "--index", index, *RUN,
                             "--exit-code"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    proc.wait()
    assert first.startswith(b"1.0000\t") and b"Traceback" not in err
    assert proc.returncode == 141, err
    assert (index / "manifest.json").exists()
    again = neardup("run", folder, "--index", index, *RUN, "--new-only", "--exit-code")
    assert again.returncode == 0 and again.stdout == b""  # nothing new, and nothing reported twice
    assert b"shingle: up to date" in again.stderr, again.stderr


def test_one_writer_at_a_time_and_queries_share_the_index(folder, tmp_path):
    from nearDup.store.workdir import WorkDir

    index = tmp_path / "index"
    invoke("run", folder, "--index", index, *RUN)
    probe = sorted(folder.iterdir())[0]
    writer = WorkDir(index)
    writer.lock()
    try:
        r = invoke("run", folder, "--index", index, *RUN)
        assert r.exit_code == 2 and "in use by another nearDup run" in r.stderr
        assert invoke("query", probe, "--index", index).exit_code == 2  # a query waits for no writer
    finally:
        writer.release()
    reader = WorkDir(index)
    reader.lock(shared=True)
    try:
        assert invoke("query", probe, "--index", index).exit_code == 0  # queries run side by side
        assert invoke("run", folder, "--index", index, *RUN).exit_code == 2  # a writer waits for readers
    finally:
        reader.release()


def test_inspect_shows_what_the_last_run_changed(folder, tmp_path):
    index = tmp_path / "index"
    invoke("run", folder, "--index", index, *RUN)
    changes = change_files(folder, random.Random(9))
    invoke("run", folder, "--index", index, *RUN, "-q")
    out = invoke("-w", index, "inspect").stdout
    assert (f"run 2: {len(changes['new'])} documents added, {len(changes['deleted']) + 3} removed, "
            f"{len(changes['renamed'])} renamed") in out and "an index (parameters fixed)" in out


def test_touching_a_file_of_a_plain_work_dir_reuses_every_shard(tmp_path):
    """A new catalog over the same shards (only an mtime changed) makes new stage records, not stale ones."""
    folder = tmp_path / "docs"
    shutil.copytree(Path(__file__).resolve().parent.parent / "sample_corpus", folder)
    w = tmp_path / "w"
    first = invoke("-w", w, "run", folder)
    for p in sorted(folder.iterdir())[:3]:
        st = os.stat(p)
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 7_000_000_000))
    again = invoke("-w", w, "run", folder)
    assert again.exit_code == 0, again.stderr
    signature = next(line for line in again.stderr.splitlines() if line.startswith("signature:"))
    assert again.stdout == first.stdout and "1 of 1 partition reused" in signature, again.stderr


def test_an_index_keeps_the_bands_it_chose_for_its_threshold(folder, tmp_path):
    """An index's (b, r) are fixed at creation: a later run with the same threshold and num_perm takes the stored
    choice instead of optimising again; a plain work dir, or another threshold, chooses afresh."""
    from nearDup.config import BandParams
    from nearDup.kernels import lsh
    from nearDup.pipeline.band import choose_bands, kept_bands
    from nearDup.store.workdir import WorkDir

    index, plain = tmp_path / "index", tmp_path / "plain"
    for where in (["--index", index], ["-w", plain]):
        assert invoke("run", folder, *where, *RUN).exit_code == 0
    chosen = BandParams(*lsh.optimal_bands(0.5, 128), 0.5)
    for work in (index, plain):  # plant another choice in the stored records, as an older nearDup might have made
        manifest = json.loads((work / "manifest.json").read_text())
        assert manifest["stages"]["band"]["params"] == {"bands": chosen.bands, "rows": chosen.rows, "threshold": 0.5}
        manifest["stages"]["band"]["params"].update(bands=7, rows=11)
        (work / "manifest.json").write_text(json.dumps(manifest))

    def choose(num_perm, threshold, bands, rows, work):  # as the band stage chooses
        kept = kept_bands(WorkDir(work), num_perm, threshold, bands, rows)
        return choose_bands(num_perm, threshold, bands, rows, kept)

    assert choose(128, 0.5, None, None, index) == BandParams(7, 11, 0.5)
    assert choose(128, 0.5, None, None, plain) == chosen
    assert choose(128, 0.6, None, None, index) == BandParams(*lsh.optimal_bands(0.6, 128), 0.6)
    assert choose(64, 0.5, None, None, index) == BandParams(*lsh.optimal_bands(0.5, 64), 0.5)
    assert choose(128, 0.5, 4, 8, index) == BandParams(4, 8, None)


def test_catalog_fingerprint_depends_on_the_rows_only():
    """However a catalog's columns are held (decoded lists, bytes arrays wider than their longest value, parts of
    different widths joined), equal rows give equal fingerprints, and any changed value changes it."""
    from nearDup.store.catalog import NUMBERS, Catalog

    def rows(ids):
        return Catalog({"id": list(ids), "sha": [f"{i:032x}" for i in range(len(ids))], "item": [""] * len(ids),
                        **{f: np.arange(len(ids), dtype=np.int64) + k for k, f in enumerate(NUMBERS)}})

    ids = ["a", "bb/ccc", "dé", "e\udcff"]  # an undecodable byte kept as a surrogate
    listed = rows(ids)
    stored = Catalog(listed.stored())
    padded = Catalog({**stored.columns, "id": stored.columns["id"].astype("S40")})
    joined = Catalog(rows(ids[:1]).stored()).concat(Catalog(rows(ids[1:]).stored()))
    joined.columns.update({f: listed.columns[f] for f in ("sha", *NUMBERS)})  # the parts numbered rows apart
    assert stored.columns["id"].dtype.itemsize == 6 and joined.columns["id"].dtype.itemsize == 6
    assert {c.fingerprint() for c in (listed, stored, padded, joined)} == {listed.fingerprint()}
    assert stored.take(np.arange(3)).fingerprint() == rows(ids[:3]).fingerprint()  # kept 6 bytes wide for 3
    for changed in (rows(["a", "bb/ccc", "dé", "e"]), Catalog({**listed.columns, "live": np.zeros(4, np.int64)})):
        assert changed.fingerprint() != listed.fingerprint()
