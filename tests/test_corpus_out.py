"""--write-deduped: the deduplicated corpus equals the input minus the duplicates `--print dupes` names, record for
record, in the input's format, sharding and compression; a folder's kept files are copied or linked; the inputs
are never touched; an interrupted write leaves no partial output."""
from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from nearDup import find_duplicates
from nearDup.cli import cli
from nearDup.errors import ParameterError

from conftest import edit, generate_corpus

RUN = ["-t", "0.5", "--partition-docs", "25"]


def invoke(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


def _compress(kind: str, data: bytes) -> bytes:
    if kind == "zst":
        import zstandard

        return zstandard.ZstdCompressor().compress(data)
    return {"": lambda d: d, "gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}[kind](data)


def _decompress(path: Path) -> bytes:
    data = path.read_bytes()
    if path.suffix == ".zst":
        import zstandard

        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    return {".gz": gzip.decompress, ".bz2": bz2.decompress, ".xz": lzma.decompress}.get(path.suffix,
                                                                                      lambda d: d)(data)


def records(n: int, seed: int, prefix: str = "r", pool: list[list[str]] | None = None) -> list[dict]:
    """n records, about a third of them edited copies of earlier ones (or of pool's texts)."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(2000)]
    texts: list[list[str]] = list(pool or [])
    out = []
    for i in range(n):
        if texts and rng.random() < 0.35:
            words = edit(rng.choice(texts), rng.choice([0.0, 0.02, 0.1]), rng, vocab)
        else:
            words = [rng.choice(vocab) for _ in range(rng.randint(40, 120))]
        texts.append(words)
        out.append({"id": f"{prefix}{i}", "text": " ".join(words), "meta": {"n": i, "é": "ü"}})
    return out


def write_shards(folder: Path, kind: str, shards: list[list[dict]], names=None) -> list[Path]:
    """JSONL shards, each with a blank line and a malformed line among its records (kept as they are)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for s, shard in enumerate(shards):
        lines = [json.dumps(r, ensure_ascii=s % 2 == 0).encode() + b"\n" for r in shard]
        lines[3:3] = [b"\n", b"{not json\n"]
        path = folder / ((names[s] if names else f"part-{s:03d}.jsonl") + (f".{kind}" if kind else ""))
        path.write_bytes(_compress(kind, b"".join(lines)))
        paths.append(path)
    return paths


def snapshot(folder: Path) -> dict:
    """Every file below folder: its bytes, inode and mtime."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            st = path.stat()
            out[str(path.relative_to(folder))] = (path.read_bytes(), st.st_ino, st.st_mtime_ns)
    return out


@pytest.mark.parametrize("kind", ["", "gz", "zst", "bz2", "xz"])
def test_deduped_jsonl_is_the_input_minus_the_printed_dupes(tmp_path, kind):
    data = records(150, seed=3)
    shards = write_shards(tmp_path / "shards", kind, [data[:60], data[60:110], data[110:]])
    before = snapshot(tmp_path / "shards")
    out = tmp_path / "out"
    r = invoke("-w", tmp_path / "w", "run", "--jsonl", *shards, *RUN, "--write-deduped", out, "--print", "dupes")
    assert r.exit_code == 0, r.stderr
    dupes = set(r.stdout.split())
    assert len(dupes) > 10
    assert snapshot(tmp_path / "shards") == before  # the inputs untouched
    assert sorted(os.listdir(out)) == sorted([p.name for p in shards] + ["removed.jsonl"])
    for shard in shards:
        lines = _decompress(shard).splitlines(keepends=True)
        expected = [line for line in lines if not line.strip() or not line.startswith(b'{"id"')
                    or json.loads(line)["id"] not in dupes]
        assert _decompress(out / shard.name) == b"".join(expected)  # record for record, bytes unchanged
        assert (out / shard.name).read_bytes()[:4] == shard.read_bytes()[:4]  # compressed as the input is
    groups = invoke("-w", tmp_path / "w", "run", "--jsonl", *shards, *RUN, "--groups", "--format", "jsonl").stdout
    truth = {(m["id"], g["keeper"], m["jaccard"]) for g in map(json.loads, groups.splitlines())
             if g.get("type") == "group" for m in g["members"] if m["role"] == "duplicate"}
    removed = [json.loads(line) for line in (out / "removed.jsonl").read_text().splitlines()]
    assert {(r["id"], r["keeper"], r["jaccard"]) for r in removed} == truth and len(removed) == len(dupes)


def test_a_rerun_replaces_a_previous_output_and_gives_the_same_bytes(tmp_path):
    shards = write_shards(tmp_path / "shards", "gz", [records(80, seed=4)])
    out = tmp_path / "out"
    args = ["run", "--jsonl", *shards, *RUN, "--write-deduped", out]
    assert invoke("-w", tmp_path / "w", *args).exit_code == 0
    first = snapshot(out)
    assert invoke("-w", tmp_path / "w2", *args).exit_code == 0
    assert {k: v[0] for k, v in snapshot(out).items()} == {k: v[0] for k, v in first.items()}
    assert sorted(os.listdir(tmp_path)) == ["out", "shards", "w", "w2"]  # no staging folder left


KILL_AFTER_SECOND_SHARD = """
import os, signal, sys
from nearDup.text import corpus
copy, done = corpus.copy_jsonl, []
def copy_then_die(*args, **kwargs):
    result = copy(*args, **kwargs)
    done.append(1)
    if len(done) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return result
corpus.copy_jsonl = copy_then_die
from nearDup.cli import main
sys.argv = ["neardup", *sys.argv[1:]]
main()
"""


def test_a_killed_write_leaves_no_partial_output_and_a_rerun_the_same_bytes(tmp_path):
    data = records(60, seed=5)
    shards = write_shards(tmp_path / "shards", "gz", [data[:20], data[20:40], data[40:]])
    out = tmp_path / "out"
    args = ["run", "--jsonl", *map(str, shards), *RUN, "--write-deduped", str(out)]
    clean = invoke("-w", tmp_path / "clean", *args)
    assert clean.exit_code == 0, clean.stderr
    expected = {k: v[0] for k, v in snapshot(out).items()}
    (out / "removed.jsonl").unlink()
    for name in os.listdir(out):
        (out / name).unlink()
    os.rmdir(out)

    def killed(workdir):
        proc = subprocess.run([sys.executable, "-c", KILL_AFTER_SECOND_SHARD, "-w", str(workdir), *args],
                              capture_output=True)
        assert proc.returncode == -9, proc.stderr  # killed mid-write: the main process, by its PID

    killed(tmp_path / "w")
    assert not out.exists()  # no half corpus: OUT does not exist at all
    assert invoke("-w", tmp_path / "w", *args).exit_code == 0
    assert {k: v[0] for k, v in snapshot(out).items()} == expected
    # a previous output stays whole when its replacement is killed
    killed(tmp_path / "w3")
    assert {k: v[0] for k, v in snapshot(out).items()} == expected
    assert invoke("-w", tmp_path / "w3", *args).exit_code == 0
    assert {k: v[0] for k, v in snapshot(out).items()} == expected
    assert sorted(os.listdir(tmp_path)) == ["clean", "out", "shards", "w", "w3"]  # staging folders cleaned up


@pytest.mark.parametrize("mode", ["copy", "link"])
def test_a_folder_gives_its_kept_files_and_leaves_the_inputs_untouched(tmp_path, mode):
    docs = tmp_path / "docs"
    generate_corpus(docs / "a", n_base=30, seed=2)
    generate_corpus(docs / "b" / "c", n_base=12, seed=2)  # the same texts again: duplicates across folders
    (docs / "binary.bin").write_bytes(b"\0\1\2")
    before = snapshot(docs)
    out = tmp_path / "out"
    r = invoke("-w", tmp_path / "w", "run", docs, *RUN, "--write-deduped", out, "--write-deduped-mode", mode,
               "--print", "dupes")
    assert r.exit_code == 0, r.stderr
    dupes = {str(Path(p).relative_to(docs)) for p in r.stdout.split()}
    assert dupes
    assert snapshot(docs) == before
    texts = {k for k in before if k != "binary.bin"}  # what the run read as documents
    written = snapshot(out)
    assert set(written) == (texts - dupes) | {"removed.jsonl"}
    for name in texts - dupes:
        assert written[name][0] == before[name][0]
        assert (written[name][1] == before[name][1]) == (mode == "link")  # a hard link is the input's inode
    removed = {str(Path(json.loads(line)["id"]).relative_to(docs))
               for line in (out / "removed.jsonl").read_text().splitlines()}
    assert removed == dupes


def test_one_file_by_two_paths_is_written_once(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    generate_corpus(a, n_base=6, seed=9)
    b.mkdir()
    os.link(a / "doc0000.txt", b / "same.txt")  # one file, two paths
    before = snapshot(a), snapshot(b)
    out = tmp_path / "out"
    r = invoke("-w", tmp_path / "w", "run", a, b, a, *RUN, "--write-deduped", out, "--print", "dupes")
    assert r.exit_code == 0, r.stderr
    assert (snapshot(a), snapshot(b)) == before
    names = set(snapshot(out)) - {"removed.jsonl"}
    assert ("a/doc0000.txt" in names) != ("b/same.txt" in names)  # listed once, so never its own duplicate
    dupes = {str(Path(p).relative_to(tmp_path)) for p in r.stdout.split()}
    assert names == {f"a/{n}" for n in os.listdir(a)} - dupes


def test_a_bad_output_folder_is_refused_in_one_line_before_any_work(tmp_path):
    docs = tmp_path / "docs"
    generate_corpus(docs, n_base=4, seed=1)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    (tmp_path / "afile").write_text("x")
    for out, says in [(docs, "is an input"), (docs / "sub", "inside one"), (tmp_path, "holds an input"),
                      (tmp_path / "mine", "not empty"), (tmp_path / "afile", "is a file"),
                      (tmp_path / "w" / "o", "work dir")]:
        r = invoke("-w", tmp_path / "w", "run", docs, "--write-deduped", out)
        assert r.exit_code != 0
        assert len(r.stderr.strip().splitlines()) == 1 and "--write-deduped" in r.stderr and "Traceback" not in \
            r.stderr, r.stderr
        assert says in r.stderr
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    assert not (docs / "sub").exists()
    r = invoke("run", docs, "--write-deduped", tmp_path / "o", "--write-deduped-mode", "move")
    assert r.exit_code != 0 and "move" in r.stderr


# in a private mount namespace, from $1: the folder $2 also mounted at view (a bind mount), then `neardup $@`
_BIND = ('cd "$1" && mount --bind "$2" view && shift 2 && "$PY" -m nearDup "$@" > out.txt 2> err.txt; '
         'echo $? > rc.txt')


@pytest.mark.parametrize("args", [
    ["docs", "run", "docs", "--write-deduped", "view/deduped"],  # the output inside the input, by another path
    ["docs", "run", "view", "--write-deduped", "docs/deduped"],
    ["empty", "-w", "view/w", "run", "other", "--write-deduped", "empty"],  # the work dir inside the output
])
def test_one_folder_by_two_paths_is_refused_as_an_output(tmp_path, args):
    """The output folder inside an input, or holding the work dir, where the two are one folder mounted at two
    places (a bind mount, a container's volume): resolved paths differ, device and inode do not. Written, the
    deduplicated corpus would land among the inputs, and the next run would find every kept file twice."""
    from conftest import NO_TMPFS, REPO, tmpfs_flags

    flags = tmpfs_flags(tmp_path / "probe")
    if flags is None:
        pytest.skip(NO_TMPFS)
    generate_corpus(tmp_path / "docs", n_base=6, seed=2)
    generate_corpus(tmp_path / "other", n_base=6, seed=3)
    (tmp_path / "view").mkdir()
    (tmp_path / "empty").mkdir()
    before = snapshot(tmp_path / "docs")
    env = {**os.environ, "PY": sys.executable, "PYTHONPATH": str(REPO)}
    subprocess.run(["unshare", *flags, "sh", "-c", _BIND, "sh", str(tmp_path), *args], env=env, timeout=300,
                   check=True)
    err = (tmp_path / "err.txt").read_text()
    assert (tmp_path / "rc.txt").read_text().strip() == "2" and len(err.splitlines()) == 1, err
    assert err.startswith("neardup: error: --write-deduped: ") and ("input" in err or "work dir" in err), err
    assert snapshot(tmp_path / "docs") == before  # nothing written into it
    assert not (tmp_path / "empty" / "removed.jsonl").exists()


def test_an_index_keeps_what_it_held_and_names_the_old_ids(tmp_path):
    old = records(60, seed=6, prefix="old")
    pool = [r["text"].split() for r in old]
    new = records(40, seed=7, prefix="new", pool=pool)  # many are copies of old records
    shards = tmp_path / "shards"
    write_shards(shards, "gz", [old], names=["b-old.jsonl"])
    index, out = tmp_path / "index", tmp_path / "out"
    assert invoke("run", "--jsonl", shards / "b-old.jsonl.gz", "--index", index, *RUN).exit_code == 0
    write_shards(shards, "gz", [new], names=["a-new.jsonl"])
    # the new shard comes first: by the keeper rules ("first") a new record would be kept over an old one
    r = invoke("run", "--jsonl", shards / "a-new.jsonl.gz", shards / "b-old.jsonl.gz", "--index", index, *RUN,
               "--write-deduped", out, "--groups", "--format", "jsonl")
    assert r.exit_code == 0, r.stderr
    groups = [g for g in map(json.loads, r.stdout.splitlines()) if g.get("type") == "group"]
    removed = {row["id"]: row for row in map(json.loads, (out / "removed.jsonl").read_text().splitlines())}
    kept_ids = {json.loads(line)["id"] for name in ("a-new.jsonl.gz", "b-old.jsonl.gz")
                for line in _decompress(out / name).splitlines() if line.startswith(b'{"id"')}
    assert any(g["keeper"].startswith("new") and any(m["id"].startswith("old") for m in g["members"])
               for g in groups)  # the case the index changes
    for g in groups:
        ids = [m["id"] for m in g["members"]]
        olds = [i for i in ids if i.startswith("old")]
        survivors = [i for i in ids if i in kept_ids]
        assert len(survivors) == 1 and set(ids) - set(survivors) <= set(removed)
        if olds:  # an old record is the one kept, and the others name it
            assert survivors[0] in olds
            assert all(removed[i]["keeper"] == survivors[0] and removed[i]["indexed"] for i in ids if i in removed)
        else:
            assert survivors == [g["keeper"]]
    texts = {r["id"]: set(zip(*[r["text"].split()[i:] for i in range(5)])) for r in old + new}
    for row in removed.values():  # the Jaccard against the keeper named, exactly
        a, b = texts[row["id"]], texts[row["keeper"]]
        assert row["jaccard"] == pytest.approx(len(a & b) / len(a | b))


def test_the_api_writes_the_same_corpus(tmp_path):
    shards = write_shards(tmp_path / "shards", "gz", [records(60, seed=8)])
    assert invoke("-w", tmp_path / "w", "run", "--jsonl", *shards, *RUN, "--write-deduped",
                  tmp_path / "cli").exit_code == 0
    find_duplicates(shards, jsonl=True, threshold=0.5, partition_docs=25, write_deduped=tmp_path / "api")
    assert snapshot(tmp_path / "api") == {k: (v[0], *snapshot(tmp_path / "api")[k][1:])
                                          for k, v in snapshot(tmp_path / "cli").items()}
    with pytest.raises(ParameterError, match="write-deduped-mode"):
        find_duplicates(shards, jsonl=True, write_deduped=tmp_path / "x", write_deduped_mode="move")


# ------------------------------------------------------------------------------------------------ Parquet

def write_dataset(folder: Path, data: list[dict], cuts: list[int], row_group_size: int = 7) -> list[Path]:
    """data as Parquet files (cut at cuts) below folder, one in a subfolder, with integer ids in column "doc",
    the text in "body" and an extra column; small row groups, each file with another compression."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    paths = []
    for n, (lo, hi) in enumerate(zip([0, *cuts], [*cuts, len(data)])):
        part = data[lo:hi]
        table = pa.table({"doc": [int(r["id"][1:]) * 10 for r in part], "body": [r["text"] for r in part],
                          "meta": [json.dumps(r["meta"]) for r in part]}).replace_schema_metadata({"made": "test"})
        path = folder / ("sub" if n else "") / f"part-{n}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path, row_group_size=row_group_size, compression=["zstd", "snappy", "gzip"][n % 3])
        paths.append(path)
    return paths


def test_deduped_parquet_is_the_input_minus_the_printed_dupes(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    data = records(120, seed=11)
    files = write_dataset(tmp_path / "ds", data, [50, 90])
    before = snapshot(tmp_path / "ds")
    out = tmp_path / "out"
    r = invoke("-w", tmp_path / "w", "run", "--parquet", tmp_path / "ds", "--id-field", "doc", "--text-field", "body",
               *RUN, "--partition-docs", 5, "--write-deduped", out, "--print", "dupes")
    assert r.exit_code == 0, r.stderr
    dupes = set(r.stdout.split())
    assert len(dupes) > 10 and snapshot(tmp_path / "ds") == before
    assert set(snapshot(out)) == {"part-0.parquet", "sub/part-1.parquet", "sub/part-2.parquet", "removed.jsonl"}
    for path in files:
        source, written = pq.ParquetFile(path), pq.ParquetFile(out / path.relative_to(tmp_path / "ds"))
        assert written.schema_arrow.equals(source.schema_arrow, check_metadata=True)
        expected = [row for row in source.read().to_pylist() if str(row["doc"]) not in dupes]
        assert written.read().to_pylist() == expected  # row for row, in order
        assert written.metadata.row_group(0).column(0).compression == source.metadata.row_group(0).column(0).compression
    removed = {json.loads(line)["id"] for line in (out / "removed.jsonl").read_text().splitlines()}
    assert removed == dupes
    # the same records as JSONL give the same pairs (ids aside): Parquet rows are read as JSONL records are
    jsonl = tmp_path / "same.jsonl"
    jsonl.write_text("".join(json.dumps({"id": str(int(r["id"][1:]) * 10), "text": r["text"]}) + "\n" for r in data))
    pairs = invoke("-w", tmp_path / "w", "run", "--parquet", tmp_path / "ds", "--id-field", "doc", "--text-field",
                   "body", *RUN, "--partition-docs", 5)
    assert pairs.stdout == invoke("-w", tmp_path / "wj", "run", "--jsonl", jsonl, *RUN).stdout != ""


def test_parquet_columns_of_bytes_read_as_their_text(tmp_path):
    """Some writers store strings as plain BYTE_ARRAY, without the UTF8 annotation (binary in Arrow): the rows then
    came out as bytes, every one a "non-string text" skipped, and the run ended with no document. They are read as
    a file's bytes are (UTF-8, invalid bytes replaced, a NUL byte: binary, skipped), ids as file names are, so the
    file gives the pairs, dupes and deduplicated rows of the same file with string columns; and a file whose every
    row is skipped says why in its one line."""
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    data = records(60, seed=17)
    ids, texts = [r["id"] for r in data], [r["text"] for r in data]
    pq.write_table(pa.table({"id": ids, "text": texts}), tmp_path / "str.parquet")
    pq.write_table(pa.table({"id": pa.array([i.encode() for i in ids], pa.binary()),
                             "text": pa.array([t.encode() for t in texts], pa.binary())}), tmp_path / "bin.parquet")
    got = {}
    for kind in ("str", "bin"):
        r = invoke("-w", tmp_path / f"w-{kind}", "run", tmp_path / f"{kind}.parquet", *RUN, "--write-deduped",
                   tmp_path / f"out-{kind}", "--print", "dupes")
        assert r.exit_code == 0, r.stderr
        kept = pq.ParquetFile(tmp_path / f"out-{kind}" / f"{kind}.parquet").read().column("id").to_pylist()
        got[kind] = (r.stdout, [k.decode() if isinstance(k, bytes) else k for k in kept])
    assert got["bin"] == got["str"] and got["str"][0] != ""
    assert set(got["str"][1]) == set(ids) - set(got["str"][0].split())
    pq.write_table(pa.table({"id": ["a", "b"], "text": pa.array([b"x\0y", b"\0"], pa.binary())}),
                   tmp_path / "nul.parquet")
    r = invoke("-w", tmp_path / "w-nul", "run", tmp_path / "nul.parquet")
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "no readable text documents" in r.stderr and "2 bad records skipped, the first: " in r.stderr
    assert "row 1: binary data (a NUL byte) in text column 'text'" in r.stderr


def test_a_parquet_row_group_of_many_partitions_is_read_from_a_split_copy(tmp_path):
    """pyarrow reads a row group whole, so each of the tasks of one large row group read all of it (a row group of
    100,000 records: 9.1 CPU s against 2.9 for the same rows in row groups of 4,000). A file with a row group of
    more than 4 partitions is read from a copy of its id and text columns cut into row groups of one partition
    each (inputs/ of the work dir): the same items, ids and pairs as the file cut so by its writer, and as JSONL;
    --write-deduped still copies the original's rows and row groups; an index adding such a file gives what a run
    from scratch gives."""
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    data = records(130, seed=19)
    table = pa.table({"id": [r["id"] for r in data], "text": [r["text"] for r in data],
                      "extra": list(range(len(data)))})
    pq.write_table(table.slice(0, 100), tmp_path / "one.parquet", row_group_size=97)  # 97 + 3 rows
    pq.write_table(table.slice(0, 100), tmp_path / "cut.parquet", row_group_size=5)
    jsonl = tmp_path / "same.jsonl"
    jsonl.write_text("".join(json.dumps({"id": r["id"], "text": r["text"]}) + "\n" for r in data[:100]))
    args = ["-t", "0.5", "--partition-docs", "5"]
    one = invoke("-w", tmp_path / "w1", "run", tmp_path / "one.parquet", *args, "--write-deduped", tmp_path / "o1",
                 "--print", "dupes")
    cut = invoke("-w", tmp_path / "w2", "run", tmp_path / "cut.parquet", *args)
    assert one.exit_code == 0 and cut.exit_code == 0, one.stderr + cut.stderr
    assert invoke("-w", tmp_path / "w3", "run", jsonl, "--jsonl", *args, "--print", "dupes").stdout == one.stdout != ""
    assert invoke("-w", tmp_path / "w1", "run", tmp_path / "one.parquet", *args).stdout == cut.stdout != ""
    (split,) = (tmp_path / "w1" / "inputs").iterdir()
    meta = pq.ParquetFile(split).metadata
    assert [meta.row_group(g).num_rows for g in range(meta.num_row_groups)] == [5] * 19 + [2, 3]  # as the items
    assert pq.ParquetFile(split).schema_arrow.names == ["id", "text"]
    assert not list((tmp_path / "w2").glob("inputs/*"))  # row groups of one partition: read as they are
    written = pq.ParquetFile(tmp_path / "o1" / "one.parquet")  # the original's columns and row groups
    assert written.schema_arrow.names == ["id", "text", "extra"] and written.metadata.num_row_groups == 2
    dupes = set(one.stdout.split())
    assert written.read().column("id").to_pylist() == [r["id"] for r in data[:100] if r["id"] not in dupes]
    # an index: the large file first, then another one added
    pq.write_table(table.slice(100), tmp_path / "two.parquet", row_group_size=30)
    index = tmp_path / "index"
    assert invoke("run", tmp_path / "one.parquet", "--index", index, *args).exit_code == 0
    both = [tmp_path / "one.parquet", tmp_path / "two.parquet"]
    added = invoke("run", *both, "--index", index, *args)
    scratch = invoke("-w", tmp_path / "w4", "run", *both, *args)
    assert added.exit_code == 0 and added.stdout == scratch.stdout != ""


def test_a_parquet_file_that_is_not_one_or_is_damaged_is_one_line_naming_it(tmp_path):
    """pyarrow raises ArrowInvalid (a ValueError) for a file without Parquet's footer and for a page that does not
    decompress: both ended in "internal error: ArrowInvalid". A file that is not Parquet, one cut short, and one
    with a damaged row group each fail in one line naming the file (and the row group)."""
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    data = records(200, seed=18)
    good = tmp_path / "good.parquet"
    pq.write_table(pa.table({"id": [r["id"] for r in data], "text": [r["text"] for r in data]}), good,
                   row_group_size=100, compression="snappy")
    raw = good.read_bytes()
    (tmp_path / "text.parquet").write_text('{"id": "a", "text": "not parquet"}\n')
    (tmp_path / "cut.parquet").write_bytes(raw[:len(raw) // 2])
    damaged = bytearray(raw)
    for i in range(200, 2000):  # inside the first row group's pages, the footer intact
        damaged[i] = (damaged[i] * 7 + 13) & 255
    (tmp_path / "damaged.parquet").write_bytes(bytes(damaged))
    for name, says in [("text", "not a Parquet file, or a damaged one"), ("cut", "not a Parquet file, or a damaged "
                       "one"), ("damaged", "row group 0: damaged")]:
        path = tmp_path / f"{name}.parquet"
        r = invoke("-w", tmp_path / f"w-{name}", "run", path, *RUN)
        assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert r.stderr.startswith(f"neardup: error: {path}: {says} (") and "internal" not in r.stderr, r.stderr
        assert r.stderr.strip().endswith("check the file or leave it out"), r.stderr


def test_parquet_by_extension_and_its_one_line_errors(tmp_path, monkeypatch):
    pytest.importorskip("pyarrow.parquet")
    (path,) = write_dataset(tmp_path, records(30, seed=12), [])
    by_name = invoke("-w", tmp_path / "w1", "run", path, "--id-field", "doc", "--text-field", "body", *RUN)
    flagged = invoke("-w", tmp_path / "w2", "run", "--parquet", path, "--id-field", "doc", "--text-field", "body",
                     *RUN)
    assert by_name.exit_code == 0 and by_name.stdout == flagged.stdout != ""
    r = invoke("-w", tmp_path / "w3", "run", path, "--text-field", "body")
    assert r.exit_code != 0 and "no column 'id' (--id-field)" in r.stderr and "'doc'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # as if pyarrow were not installed
    r = invoke("-w", tmp_path / "w4", "run", path, "--id-field", "doc", "--text-field", "body")
    assert r.exit_code != 0 and r.stderr.strip().endswith("pip install 'nearDup[parquet]'")
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_zst_jsonl_without_zstandard_says_what_to_install(tmp_path, monkeypatch):
    (shard,) = write_shards(tmp_path / "shards", "zst", [records(10, seed=13)])
    monkeypatch.setitem(sys.modules, "zstandard", None)
    r = invoke("-w", tmp_path / "w", "run", "--jsonl", shard)
    assert r.exit_code != 0 and r.stderr.strip().endswith("pip install 'nearDup[formats]'"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and str(shard) in r.stderr


def test_reference_inputs_are_never_written_and_their_documents_are_the_keepers(tmp_path):
    old = records(40, seed=14, prefix="old")
    new = records(30, seed=15, prefix="new", pool=[r["text"].split() for r in old])
    old_shard, new_shard = write_shards(tmp_path / "shards", "gz", [old, new], names=["old.jsonl", "new.jsonl"])
    out = tmp_path / "out"
    r = invoke("-w", tmp_path / "w", "run", "--jsonl", new_shard, "--reference", old_shard, *RUN,
               "--write-deduped", out, "--print", "dupes")
    assert r.exit_code == 0, r.stderr
    assert sorted(os.listdir(out)) == ["new.jsonl.gz", "removed.jsonl"]
    removed = [json.loads(line) for line in (out / "removed.jsonl").read_text().splitlines()]
    new_ids = {rec["id"] for rec in new}
    dropped = {row["id"] for row in removed}
    assert dropped == set(r.stdout.split()) & new_ids and any(row["keeper"].startswith("old") for row in removed)
    kept = [json.loads(line)["id"] for line in _decompress(out / "new.jsonl.gz").splitlines()
            if line.startswith(b'{"id"')]
    assert kept == [rec["id"] for rec in new if rec["id"] not in dropped]


def test_a_quoted_glob_pattern_names_the_shards(tmp_path):
    data = records(60, seed=16)
    write_shards(tmp_path / "shards", "gz", [data[:30], data[30:]])
    listed = invoke("-w", tmp_path / "w1", "run", "--jsonl", *sorted((tmp_path / "shards").iterdir()), *RUN,
                    "--write-deduped", tmp_path / "listed")
    pattern = invoke("-w", tmp_path / "w2", "run", "--jsonl", tmp_path / "shards" / "*.jsonl.gz", *RUN,
                     "--write-deduped", tmp_path / "pattern")
    assert listed.exit_code == pattern.exit_code == 0 and listed.stdout == pattern.stdout != ""
    assert {k: v[0] for k, v in snapshot(tmp_path / "listed").items()} == \
        {k: v[0] for k, v in snapshot(tmp_path / "pattern").items()}
    r = invoke("-w", tmp_path / "w3", "run", "--jsonl", tmp_path / "none" / "*.jsonl")
    assert r.exit_code != 0 and r.stderr.strip().endswith("no file matches this pattern")


@pytest.mark.parametrize("kind", ["", "gz", "xz"])
def test_the_keeper_of_records_is_decided_by_their_shard_not_by_when_it_was_read(tmp_path, kind):
    """"oldest" (a default rule) compares the shards' own modification times; a compressed shard is read from a
    decompressed copy in the work dir, made whenever a run gets to it, and its time must not decide (it made the
    keeper of a copy pair depend on the machine's load). The older shard's copy keeps, listed or by pattern, and
    again when the shards' ages are swapped."""
    text = " ".join(random.Random(5).choice(["alpha", "beta", "gamma", "delta", "omega", "sigma"]) for _ in range(80))
    shards = write_shards(tmp_path / "shards", kind, [[{"id": "b", "text": text}] + records(5, seed=1, prefix="p"),
                                                      [{"id": "a", "text": text}] + records(5, seed=2, prefix="q")])
    for older, newer, keeper in ((0, 1, "b"), (1, 0, "a")):
        os.utime(shards[older], ns=(1_000_000_000 * 10**9,) * 2)
        os.utime(shards[newer], ns=(1_500_000_000 * 10**9,) * 2)
        for args in ([str(p) for p in shards], [str(tmp_path / "shards" / "*.jsonl*")]):
            r = invoke("-w", tmp_path / f"w{older}{len(args)}", "run", "--jsonl", *args, "--min-shingles", 1,
                       "--groups", "--format", "jsonl")
            assert r.exit_code == 0, r.stderr
            [group] = [g for g in map(json.loads, r.stdout.splitlines())
                       if g["type"] == "group" and {m["id"] for m in g["members"]} == {"a", "b"}]
            assert group["keeper"] == keeper, (older, args)


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_the_corpus_does_not_depend_on_jobs(tmp_path, kind):
    data = records(90, seed=17)
    if kind == "jsonl":
        paths = ["--jsonl", *write_shards(tmp_path / "in", "gz", [data[:45], data[45:]])]
    else:
        pytest.importorskip("pyarrow")
        paths = [*write_dataset(tmp_path / "in", data, [45]), "--id-field", "doc", "--text-field", "body"]
    written = []
    for jobs in (1, 2):
        out = tmp_path / f"out{jobs}"
        r = invoke("-w", tmp_path / f"w{jobs}", "-j", jobs, "run", *paths, *RUN, "--partition-docs", 10,
                   "--write-deduped", out)
        assert r.exit_code == 0, r.stderr
        written.append({k: v[0] for k, v in snapshot(out).items()})
    assert written[0] == written[1] and len(written[0]) == 3


@pytest.mark.parametrize("kind", ["jsonl", "jsonl.gz", "jsonl.zst", "parquet"])
def test_records_of_a_reference_file_are_references_never_dupes(tmp_path, kind):
    """--reference with records: their ids are not paths, so the file each came from decides. Two copies inside
    the reference file and a third in the input: only the input's copy is a dupe; the reference records keep."""
    text = " ".join(random.Random(3).choice(["alpha", "beta", "gamma", "delta", "omega", "sigma"]) for _ in range(80))
    rows = {"ref": [{"id": "r1", "text": text}, {"id": "r2", "text": text}], "new": [{"id": "x1", "text": text},
                                                                                   {"id": "x2", "text": "other " * 40}]}
    paths = {}
    for name, recs in rows.items():
        if kind.startswith("jsonl"):  # a compressed one is read from its decompressed copy in the work dir
            paths[name] = tmp_path / f"{name}.{kind}"
            paths[name].write_bytes(_compress(kind[6:], "".join(json.dumps(r) + "\n" for r in recs).encode()))
        else:
            pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
            paths[name] = tmp_path / f"{name}.parquet"
            pq.write_table(pa.table({"id": [r["id"] for r in recs], "text": [r["text"] for r in recs]}), paths[name])
    flag = "--jsonl" if kind.startswith("jsonl") else "--parquet"
    dupes = invoke("-w", tmp_path / "w", "run", flag, paths["new"], "--reference", paths["ref"], "--min-shingles", 1,
                   "--print", "dupes")
    assert dupes.exit_code == 0, dupes.stderr
    assert dupes.stdout.split() == ["x1"]
    groups = invoke("-w", tmp_path / "w", "run", flag, paths["new"], "--reference", paths["ref"], "--min-shingles", 1,
                    "--groups", "--format", "jsonl")
    [group] = [json.loads(line) for line in groups.stdout.splitlines() if '"group"' in line]
    assert {m["id"]: (m["role"], m["reference"]) for m in group["members"]} == {
        "r1": ("keeper", True), "r2": ("reference", True), "x1": ("duplicate", False)}
