"""The work dir without the CLI: the manifest and its transactions, clean-up, shard markers, atomic writes, and what
a damaged or crafted file turns into (one WorkDirError line, never a traceback or a half-written file)."""
from __future__ import annotations

import errno
import json
import os
import shutil
import zipfile

import numpy as np
import pytest

from nearDup import __version__
from nearDup.config import FORMAT
from nearDup.errors import WorkDirError
from nearDup.store import workdir as store
from nearDup.store.manifest import RECORDS
from nearDup.store.workdir import MANIFEST, StoredTable, WorkDir, atomic_file

KEY = "abcdef0123456789abcdef0123456789"
VERIFY = {"key": KEY, "upstream": "u" * 32, "files": {"pairs.npy": 144}, "params": {"threshold": 0.8},
          "stats": {"pairs": 3}}  # a verify record of the shape the manifest check wants
CLUSTER = {"key": "c" * 32, "upstream": KEY, "files": {}, "params": {"link": "keeper"},
           "stats": {"groups": 1, "documents": 2, "duplicates": 1}}


def as_record(stage: str, data: dict):
    """The typed record (store.manifest) of a stage record's JSON."""
    return RECORDS[stage].from_json(data)


def stored(work: WorkDir, stage: str) -> dict | None:
    """A stage's record as the manifest holds it (JSON)."""
    return work.read_manifest()["stages"].get(stage)


def one_line(error: pytest.ExceptionInfo, *needles: str) -> str:
    message = str(error.value)
    assert "\n" not in message and all(n in message for n in needles), message
    return message


def entries(folder) -> list[str]:
    return sorted(os.listdir(folder))


# ------------------------------------------------------------------------------------------ the manifest

def test_a_new_work_dir_has_an_empty_manifest_until_a_stage_is_recorded(tmp_path):
    work = WorkDir(tmp_path / "w")
    assert work.read_manifest() == {"format": FORMAT, "version": __version__, "stages": {}}
    assert not (tmp_path / "w" / MANIFEST).exists() and stored(work, "verify") is None and work.usable()
    work.record_stage("verify", as_record("verify", VERIFY))
    work.set(index=True, reported=2)
    on_disk = json.loads((tmp_path / "w" / MANIFEST).read_text())
    assert on_disk == work.read_manifest()
    record = on_disk["stages"]["verify"]
    assert {k: v for k, v in record.items() if k not in ("version", "completed")} == VERIFY
    assert record["version"] == __version__ and record["completed"].endswith("+00:00")  # UTC, to the second
    assert (on_disk["index"], on_disk["reported"], on_disk["format"]) == (True, 2, FORMAT)
    assert stored(WorkDir(tmp_path / "w", create=False), "verify") == record  # another process reads the same


def test_record_stage_replaces_only_its_own_stage(tmp_path):
    work = WorkDir(tmp_path / "w")
    work.record_stage("verify", as_record("verify", VERIFY))
    cluster = {"key": "c" * 32, "upstream": KEY, "files": {}, "params": {"link": "keeper"},
               "stats": {"groups": 1, "documents": 2, "duplicates": 1}}
    work.record_stage("cluster", as_record("cluster", cluster))
    work.record_stage("verify", as_record("verify", {**VERIFY, "stats": {"pairs": 5}}))
    stages = work.read_manifest()["stages"]
    assert sorted(stages) == ["cluster", "verify"]
    assert stages["verify"]["stats"] == {"pairs": 5} and stages["cluster"]["params"]["link"] == "keeper"


def count_manifest_writes(monkeypatch) -> list[str]:
    written: list[str] = []
    real = store.atomic_file

    def counting(path, mode="wb"):
        if path.name == MANIFEST:
            written.append(mode)
        return real(path, mode)

    monkeypatch.setattr(store, "atomic_file", counting)
    return written


def test_a_transaction_keeps_records_in_memory_and_commit_writes_the_manifest_once(tmp_path, monkeypatch):
    work = WorkDir(tmp_path / "w")
    work.record_stage("verify", as_record("verify", VERIFY))
    before = (tmp_path / "w" / MANIFEST).read_bytes()
    written = count_manifest_writes(monkeypatch)
    work.begin()
    work.begin()  # a second begin joins the open transaction
    work.record_stage("verify", as_record("verify", {**VERIFY, "stats": {"pairs": 9}}))
    work.record_stage("cluster", as_record("cluster", CLUSTER))
    work.set(reported=4)
    assert written == [] and (tmp_path / "w" / MANIFEST).read_bytes() == before
    seen = work.read_manifest()  # the open transaction's records in place of the stored ones
    assert seen["stages"]["verify"]["stats"] == {"pairs": 9} and seen["reported"] == 4 and "cluster" in seen["stages"]
    assert "cluster" not in WorkDir(tmp_path / "w", create=False).read_manifest()["stages"]  # others see the old
    work.commit()
    assert written == ["w"]
    stored = json.loads((tmp_path / "w" / MANIFEST).read_text())
    assert stored["stages"]["verify"]["stats"] == {"pairs": 9} and stored["reported"] == 4
    assert sorted(stored["stages"]) == ["cluster", "verify"]
    work.commit()  # nothing pending: nothing written
    work.begin()
    work.commit()
    assert written == ["w"]


def test_an_interrupted_transaction_leaves_the_manifest_byte_identical(tmp_path):
    work = WorkDir(tmp_path / "w")
    work.record_stage("verify", as_record("verify", VERIFY))
    before = {p.name: p.read_bytes() for p in (tmp_path / "w").rglob("*") if p.is_file()}
    with pytest.raises(KeyboardInterrupt):
        work.begin()
        work.record_stage("verify", as_record("verify", {**VERIFY, "key": "f" * 32}))
        work.set(index=True)
        raise KeyboardInterrupt
    after = {p.name: p.read_bytes() for p in (tmp_path / "w").rglob("*") if p.is_file()}
    assert after == before and sorted(before) == sorted([MANIFEST, store.MARKER])
    assert stored(WorkDir(tmp_path / "w", create=False), "verify")["key"] == KEY


# ------------------------------------------------------------------------------------------ the shape check

def tampered(record: dict, *path_and_value):
    *path, value = path_and_value
    manifest = {"format": FORMAT, "version": __version__, "stages": {"verify": json.loads(json.dumps(record))}}
    target = manifest
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return manifest


@pytest.mark.parametrize("change", [
    ("stages", "verify", "params", "threshold", "0.8"),  # a string for a float
    ("stages", "verify", "params", "colour", "red"),  # a parameter this nearDup does not know
    ("stages", "verify", "files", "pairs.npy", 1.5),  # a size that is not an int
    ("stages", "verify", "stats", "pairs", True),  # a bool is not an int
    ("stages", "verify", "key", None),
    ("stages", "verify", "upstream", ["u"]),
    ("stages", "shingle", {"key": "k"}),  # a record missing almost everything
    ("reported", "1"),
    ("stages", []),
])
def test_the_manifest_check_refuses_a_tampered_manifest_in_one_line(tmp_path, change):
    work = WorkDir(tmp_path / "w")
    work.record_stage("verify", as_record("verify", VERIFY))
    work.read_manifest()  # checked once, then remembered as good: a change must be checked again
    text = json.dumps(tampered(stored(work, "verify"), *change))
    (tmp_path / "w" / MANIFEST).write_text(text)
    for reader in (work, WorkDir(tmp_path / "w", create=False)):
        with pytest.raises(WorkDirError) as e:
            reader.read_manifest()
        one_line(e, f"{tmp_path / 'w' / MANIFEST}: manifest is corrupt", "--force")
        assert not reader.usable()
    with pytest.raises(WorkDirError):
        work.record_stage("cluster", as_record("cluster", CLUSTER))  # refused, not merged into what it cannot read
    assert (tmp_path / "w" / MANIFEST).read_text() == text


@pytest.mark.parametrize("text", ["", "{", "[1, 2]", '{"format": 4, "version": "x"}', "\udce9"])
def test_a_manifest_that_is_not_one_is_named_corrupt(tmp_path, text):
    work = WorkDir(tmp_path / "w")
    (tmp_path / "w" / MANIFEST).write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(WorkDirError) as e:
        work.read_manifest()
    one_line(e, "manifest is corrupt; re-run with --force to rebuild the work dir")


def test_another_format_is_named_with_both_versions(tmp_path):
    work = WorkDir(tmp_path / "w")
    (tmp_path / "w" / MANIFEST).write_text(json.dumps({"format": FORMAT - 1, "version": "0.0.1", "stages": {}}))
    with pytest.raises(WorkDirError) as e:
        stored(work, "verify")
    one_line(e, "written by nearDup 0.0.1 (format", f"{FORMAT - 1}), this is {__version__} (format {FORMAT})",
             "--force")


# ------------------------------------------------------------------------------------------ clean-up

def test_collect_garbage_removes_only_unlisted_files_with_nearDups_names(tmp_path):
    work = WorkDir(tmp_path / "w")
    files = {
        "signature/part-00001.npy": True,  # a listed shard
        "signature/part-00001.done.json": True,
        "signature/part-00000.npy": False,  # an earlier shard no record lists
        "signature/part-00002.npy": False,
        "signature/part-00007.npy": True,  # at or past next_shard: a run not yet committed writes it
        "signature/.part-00000.npy.host.123.tmp": True,  # another process's temporary file
        "signature/notes.txt": True,  # not a name nearDup gives
        "signature/part-1.npy": True,
        "signature/part-00000.notes.txt": True,  # an unlisted shard's number, but not a name nearDup gives
        "verify/abcdef012345.pairs.npy": True,  # listed under the record's key
        "verify/abcdef012345.scores.npy": False,  # the record's key, but not one of its files
        "verify/0123456789ab.pairs.npy": False,  # another key's output
        "verify/0123456789ab.pairs.odt": True,  # not nearDup's suffix
        "band/part-00000.npy": True,  # a stage with no record is left alone
    }
    for name in files:
        (tmp_path / "w" / name).parent.mkdir(exist_ok=True)
        (tmp_path / "w" / name).write_bytes(b"x")
    work.collect_garbage({
        "signature": as_record("signature", {"key": KEY, "upstream": "u" * 32, "partitions": ["p" * 32],
                                             "shards": [1], "next_shard": 3,
                                             "params": {"num_perm": 128, "seed": 1, "method": "oph"}}),
        "verify": as_record("verify", {**VERIFY, "files": {"pairs.npy": 1}}),
    })
    assert {name: (tmp_path / "w" / name).exists() for name in files} == files


def test_recording_a_stage_collects_what_its_old_record_listed(tmp_path):
    work = WorkDir(tmp_path / "w")
    old = work.output("verify", "pairs.npy", KEY)
    old.write_bytes(b"old")
    work.record_stage("verify", as_record("verify", VERIFY))
    assert old.exists()
    new_key = "0" * 32
    work.output("verify", "pairs.npy", new_key).write_bytes(b"new")
    work.begin()
    work.record_stage("verify", as_record("verify", {**VERIFY, "key": new_key}))
    assert old.exists()  # never inside a transaction: the stored record still lists it
    work.commit()
    assert not old.exists() and entries(tmp_path / "w" / "verify") == ["000000000000.pairs.npy"]


# ------------------------------------------------------------------------------------------ shard markers

def test_part_done_holds_only_for_the_same_key_and_intact_files(tmp_path):
    work = WorkDir(tmp_path / "w")
    assert work.part("band", 12, "npy").name == "part-00012.npy"
    assert work.output("verify", "pairs.npy", KEY).name == "abcdef012345.pairs.npy"
    work.save_array(work.part("band", 3, "npy"), np.arange(6, dtype=np.uint64))
    work.save_array(work.part("band", 3, "keys.npy"), np.arange(2, dtype=np.int64))
    suffixes = ("npy", "keys.npy")
    assert work.part_done("band", 3, "k1", suffixes) is None  # no marker yet
    work.mark_part_done("band", 3, "k1", {"docs": 6}, suffixes)
    sizes = {s: work.part("band", 3, s).stat().st_size for s in suffixes}
    assert work.part_done("band", 3, "k1", suffixes) == {"key": "k1", "files": sizes, "docs": 6}
    assert work.part_done("band", 3, "k2", suffixes) is None  # a stale key
    assert work.part_done("band", 3, "k1", ("npy", "values.npy")) is None  # a file the marker does not know
    with open(work.part("band", 3, "npy"), "r+b") as f:
        f.truncate(100)
    assert work.part_done("band", 3, "k1", suffixes) is None  # truncated
    work.save_array(work.part("band", 3, "npy"), np.arange(6, dtype=np.uint64))
    assert work.part_done("band", 3, "k1", suffixes) is not None
    os.unlink(work.part("band", 3, "keys.npy"))
    assert work.part_done("band", 3, "k1", suffixes) is None  # missing
    work.part("band", 3, "done.json").write_text('{"key": "k1", "fi')
    assert work.part_done("band", 3, "k1", ()) is None  # a marker cut short
    messages = [f"{i}: " + "é" * 200 for i in range(300)]  # a marker longer than one read (100 KB)
    work.mark_part_done("band", 4, "k1", {"docs": 6, "messages": messages}, ())
    assert work.part_done("band", 4, "k1", ()) == {"key": "k1", "files": {}, "docs": 6, "messages": messages}


def _signature_record(keys: list[str], key: str = KEY):
    return as_record("signature", {"key": key, "upstream": "u" * 32, "partitions": keys,
                                   "shards": list(range(len(keys))), "docs": [4] * len(keys), "next_shard": len(keys),
                                   "params": {"num_perm": 128, "seed": 1, "method": "oph"}})


def test_a_sealed_stage_is_trusted_only_while_its_folder_is_as_the_manifest_write_left_it(tmp_path, monkeypatch):
    """A transaction takes the shard keys of a per-shard stage's stored record as done without reading a marker
    while the stage folder is as the manifest write that recorded it left it (WorkDir._seal). A run killed after
    rewriting a shard in place with other parameters (a manifest write of another stage after it), a file removed,
    another record, or a folder whose times are whole seconds: the markers are read, and they decide."""
    root = tmp_path / "w"
    work = WorkDir(root)
    keys = ["a" * 32, "b" * 32, "c" * 32]  # (shard keys: 32 hex digits)
    other, k3 = "d" * 32, "e" * 32

    def write_part(n: int, key: str) -> None:  # as a shard task writes one: its file by rename, then its marker
        work.save_array(work.part("signature", n, "npy"), np.full(4, int(key[0], 16), np.uint32))
        work.mark_part_done("signature", n, key, {"docs": 4}, ("npy",))

    for n, key in enumerate(keys):
        write_part(n, key)
    work.record_stage("signature", _signature_record(keys))
    reads: list[tuple] = []
    real = WorkDir.part_done
    monkeypatch.setattr(WorkDir, "part_done", lambda self, *args: reads.append(args[1:3]) or real(self, *args))

    def known(where, n: int, key: str) -> bool:
        reads.clear()
        run = WorkDir(where)
        run.begin()
        try:
            return run.part_known("signature", n, key, ("npy",))
        finally:
            run.rollback()

    assert all(known(root, n, key) for n, key in enumerate(keys)) and reads == []  # sealed: no marker read
    assert not known(root, 1, other) and reads == [(1, other)]  # another key: the marker says no
    assert not known(root, 3, k3) and reads == [(3, k3)]  # a shard the record does not list
    reads.clear()
    assert WorkDir(root).part_known("signature", 0, keys[0], ("npy",)) and reads == [(0, keys[0])]  # no transaction
    shutil.copytree(root, tmp_path / "copy")  # a copy that keeps the folders' times (cp -a, rsync -a)
    assert known(tmp_path / "copy", 2, keys[2]) and reads == []

    write_part(1, other)  # a run killed after rewriting shard 1, then another stage recorded
    work.record_stage("verify", as_record("verify", VERIFY))
    assert not known(root, 1, keys[1]) and reads == [(1, keys[1])]
    assert json.loads((root / store.SEAL).read_text())["signature"][0] == KEY  # (the seal itself was kept)
    write_part(1, keys[1])
    work.record_stage("signature", _signature_record(keys))  # sealed again
    assert known(root, 1, keys[1]) and reads == []
    os.unlink(work.part("signature", 2, "npy"))
    assert not known(root, 2, keys[2]) and reads == [(2, keys[2])]  # missing
    write_part(2, keys[2])
    work.record_stage("signature", _signature_record(keys, key="0" * 32))  # another record, sealed
    assert known(root, 2, keys[2]) and reads == []
    (root / MANIFEST).write_text((root / MANIFEST).read_text().replace("0" * 32, "1" * 32))  # not the sealed one
    assert known(root, 2, keys[2]) and reads == [(2, keys[2])]
    work.record_stage("signature", _signature_record(keys))
    shutil.copytree(root, tmp_path / "cleared")
    WorkDir(tmp_path / "cleared").clear()  # --force
    assert (root / store.SEAL).exists() and not (tmp_path / "cleared" / store.SEAL).exists()
    os.utime(root / "signature", ns=(10**18, 10**18))  # whole seconds: too coarse to seal
    work.record_stage("signature", _signature_record(keys, key="2" * 32))
    assert not (root / store.SEAL).exists()  # (nothing sealed: no file)
    assert known(root, 0, keys[0]) and reads == [(0, keys[0])]


# ------------------------------------------------------------------------------------------ atomic writes

def test_atomic_file_replaces_the_file_only_when_the_block_succeeds(tmp_path):
    path = tmp_path / "data.npy"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_file(path) as f:
        f.write(b"half of the new")
        raise RuntimeError("killed mid-write")
    assert path.read_bytes() == b"old" and entries(tmp_path) == ["data.npy"]
    with atomic_file(path) as f:
        f.write(b"new")
        assert path.read_bytes() == b"old" and len(entries(tmp_path)) == 2  # written beside it, renamed at the end
    assert path.read_bytes() == b"new" and entries(tmp_path) == ["data.npy"]
    with atomic_file(tmp_path / "text.jsonl", "w") as f:  # text: UTF-8, lone surrogates passed through
        f.write("café \udce9\n")
    assert (tmp_path / "text.jsonl").read_bytes() == "café ".encode() + b"\xed\xb3\xa9\n"


@pytest.mark.parametrize(("code", "says"), [(errno.ENOSPC, "no space left on device; free space"),
                                            (errno.EROFS, "work dir is not writable"),
                                            (errno.EACCES, "work dir is not writable")])
def test_atomic_file_names_a_disk_error_in_one_line_and_keeps_the_old_file(tmp_path, code, says):
    path = tmp_path / "manifest.json"
    path.write_bytes(b"{}")
    with pytest.raises(WorkDirError) as e, atomic_file(path) as f:
        f.write(b"partial")
        raise OSError(code, os.strerror(code))
    one_line(e, f"{path}: ", says)
    assert path.read_bytes() == b"{}" and entries(tmp_path) == ["manifest.json"]


# ------------------------------------------------------------------------------------------ reading back

def npy_bytes(descr: str, shape: str, data: bytes) -> bytes:
    """A format 1.0 .npy file written by hand: magic, version, header length, header padded to 64 bytes."""
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}".encode()
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + data


def test_load_array_reads_a_hand_written_npy_with_or_without_mmap(tmp_path):
    work = WorkDir(tmp_path / "w")
    path = work.part("signature", 0, "npy")
    path.write_bytes(npy_bytes("<u4", "(2, 3)", np.arange(6, dtype="<u4").tobytes()))
    for mmap in (False, True):
        array = work.load_array(path, "signature", mmap=mmap)
        assert array.dtype == np.uint32 and array.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert not work.load_array(path, "signature", mmap=True).flags.writeable
    path.write_bytes(npy_bytes("<i8", "(0, 2)", b""))
    assert work.load_array(path, "signature", mmap=True).shape == (0, 2)


@pytest.mark.parametrize("content", [
    npy_bytes("<u4", "(2, 3)", np.arange(5, dtype="<u4").tobytes()),  # a value short
    npy_bytes("<u4", "(2, 3)", np.arange(7, dtype="<u4").tobytes()),  # one too many
    npy_bytes("<i8", "(9223372036854775807, 4)", b"\0" * 64),  # a shape whose size overflows
    npy_bytes("|O", "(2,)", b"\0" * 16),  # objects: never unpickled
    npy_bytes("<u4", "(2, 3)", b"")[:-20],  # a header cut short
    b"\x93NUMPY\x01\x00\xff\xff{'descr'",  # a header length past the end
    b"not an npy file at all",
    b"",
])
@pytest.mark.parametrize("mmap", [False, True])
def test_load_array_turns_a_damaged_or_crafted_npy_into_one_line(tmp_path, content, mmap):
    work = WorkDir(tmp_path / "w")
    path = work.part("signature", 4, "npy")
    path.write_bytes(content)
    with pytest.raises(WorkDirError) as e:
        work.load_array(path, "signature", mmap=mmap)
    one_line(e, f"{path}: corrupt or truncated; re-run the signature stage (or use --force)")
    with pytest.raises(WorkDirError) as e:
        work.load_array(work.part("signature", 5, "npy"), "signature", mmap=mmap)
    one_line(e, "part-00005.npy: missing; re-run the signature stage")


def test_load_parts_reads_the_shards_files_as_their_concatenation_and_names_a_damaged_one(tmp_path, monkeypatch):
    """load_parts gives what np.load of each shard's file concatenated gives, whatever their lengths (an empty
    shard too) and layout (a version 2.0 header: another writer's), and for a file cut short, one byte too long,
    of another dtype, of another length than the shard's row count, or missing, the line load_array gives."""
    work = WorkDir(tmp_path / "w")
    rng = np.random.default_rng(5)
    rows = [4000, 3, 0, 4000, 17]
    shards = [0, 2, 5, 6, 9]  # shard numbers, not positions
    parts = [rng.integers(0, 2**64, n, dtype=np.uint64) for n in rows]
    for shard, part in zip(shards, parts):
        work.save_array(work.part("band", shard, "digest.npy"), part)
    with open(work.part("band", 6, "digest.npy"), "wb") as f:  # another layout: read by load_array
        np.lib.format.write_array(f, parts[3], version=(2, 0))
    slow = []  # the files load_array was asked to read: only the one np.save did not write
    load_array = work.load_array
    monkeypatch.setattr(work, "load_array", lambda path, stage: slow.append(path.name) or load_array(path, stage))
    got = work.load_parts("band", shards, "digest.npy", np.dtype(np.uint64), rows)
    assert got.dtype == np.uint64 and got.flags.writeable and np.array_equal(got, np.concatenate(parts))
    assert slow == ["part-00006.digest.npy"]
    assert work.load_parts("band", [], "digest.npy", np.dtype(np.uint64), []).shape == (0,)
    path = work.part("band", 9, "digest.npy")
    good = path.read_bytes()
    for damaged in (good[:-3], good + b"\0", npy_bytes("<u4", "(17,)", parts[4].astype("<u4").tobytes()),
                    npy_bytes("<u8", "(16,)", parts[4][:16].tobytes())):
        path.write_bytes(damaged)
        with pytest.raises(WorkDirError) as e:
            work.load_parts("band", shards, "digest.npy", np.dtype(np.uint64), rows)
        one_line(e, f"{path}: corrupt or truncated; re-run the band stage (or use --force)")
    path.unlink()
    with pytest.raises(WorkDirError) as e:
        work.load_parts("band", shards, "digest.npy", np.dtype(np.uint64), rows)
    one_line(e, f"{path}: missing; re-run the band stage")


def test_tables_and_jsonl_round_trip(tmp_path):
    work = WorkDir(tmp_path / "w")
    columns = {"id": np.array([b"a", "é\udce9".encode("utf-8", "surrogatepass")]), "n": np.array([1, -2**62]),
               "score": np.array([0.5, 1 / 3]), "sig": np.arange(6, dtype=np.uint32).reshape(2, 3)}
    path = work.output("shingle", "catalog.npz", KEY)
    work.save_table(path, columns)
    loaded = work.load_table(path, "shingle")
    assert sorted(loaded) == sorted(columns)
    for name, column in columns.items():
        assert loaded[name].dtype == column.dtype and np.array_equal(loaded[name], column)
    records = [{"b": 1, "a": "café", "id": "x\udce9"}, {"nested": {"z": [1, 2.5, None]}, "t": True}, {}]
    jsonl = work.output("verify", "pairs.jsonl", KEY)
    work.save_jsonl(jsonl, records)
    first = '{"a": "café", "b": 1, "id": "x\udce9"}'.encode("utf-8", "surrogatepass")  # keys sorted, not escaped
    assert jsonl.read_bytes().splitlines()[0] == first
    assert work.load_jsonl(jsonl, "verify") == records == list(work.iter_jsonl(jsonl, "verify"))


def cut(data: bytes) -> bytes:
    return data[:len(data) // 2 + 3]


def zero_end(data: bytes) -> bytes:
    """Same size, last 22 bytes zeroed: a zip's end-of-directory record, the last line of a JSONL file."""
    return data[:-22] + b"\0" * 22


def flip_middle(data: bytes) -> bytes:
    """Same size, one bit flipped in the middle: inside a zip member's data, its CRC no longer holds."""
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 1]) + data[middle + 1:]


@pytest.mark.parametrize(("what", "damage"), [("table", cut), ("table", zero_end), ("table", flip_middle),
                                              ("jsonl", cut), ("jsonl", zero_end), ("iter", cut), ("iter", zero_end)])
def test_damaged_tables_and_jsonl_are_one_line(tmp_path, what, damage):
    """A damaged .npz (a zip) gave `internal error: BadZipFile` from every run on the index, and from query."""
    work = WorkDir(tmp_path / "w")
    if what == "table":
        path = work.output("shingle", "catalog.npz", KEY)
        work.save_table(path, {"n": np.arange(1000), "id": np.array([b"x" * 20] * 100)})
        load = lambda p: work.load_table(p, "shingle")
    else:
        path = work.output("verify", "pairs.jsonl", KEY)
        work.save_jsonl(path, [{"a": i} for i in range(100)])
        load = (lambda p: work.load_jsonl(p, "verify")) if what == "jsonl" else \
            (lambda p: list(work.iter_jsonl(p, "verify")))
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(WorkDirError) as e:
        load(path)
    one_line(e, f"{path}: corrupt or truncated; re-run the", "(or use --force)")
    with pytest.raises(WorkDirError) as e:
        load(path.with_name("0" * 12 + "." + path.name.split(".", 1)[1]))
    one_line(e, "missing; re-run the")


def test_save_columns_writes_save_tables_npz_part_by_part_and_columns_load_mapped(tmp_path):
    """The catalog of 10M rows is written a shard's column at a time (save_columns) and later stages map it
    (load_table mmap): the same .npz as save_table writes, each member byte for byte; mapped columns are read-only
    views of the file, not copies; an .npz np.savez compressed still loads."""
    work = WorkDir(tmp_path / "w")
    ids = [np.array([b"a", b"bcd"]), np.array([b"efghij"]), np.array([], "S1")]
    numbers = [np.array([1, -2**62], np.int64), np.array([3], np.int8), np.array([], np.int64)]
    whole, parts = work.output("shingle", "catalog.npz", KEY), work.output("shingle", "parts.npz", KEY)
    work.save_table(whole, {"id": np.concatenate(ids).astype("S6"), "n": np.concatenate(numbers).astype(np.int64)})
    work.save_columns(parts, [("id", np.dtype("S6"), 3, iter(ids)), ("n", np.dtype(np.int64), 3, iter(numbers))])
    assert parts.stat().st_size == whole.stat().st_size
    with zipfile.ZipFile(whole) as a, zipfile.ZipFile(parts) as b:
        assert a.namelist() == b.namelist() == ["id.npy", "n.npy"]
        assert all(a.read(name) == b.read(name) for name in a.namelist())
    for mmap in (False, True):
        loaded = work.load_table(parts, "shingle", mmap=mmap)
        assert loaded["id"].tolist() == [b"a", b"bcd", b"efghij"] and loaded["n"].tolist() == [1, -2**62, 3]
        assert loaded["n"].flags.writeable is not mmap and loaded["n"].flags.owndata is not mmap
    with pytest.raises(ValueError, match="column n has 2 rows, not 3"):
        work.save_columns(parts, [("n", np.dtype(np.int64), 3, iter(numbers[:1]))])
    assert work.load_table(parts, "shingle")["n"].tolist() == [1, -2**62, 3]  # a failed write replaced nothing
    squeezed = work.output("shingle", "squeezed.npz", KEY)
    np.savez_compressed(squeezed, n=np.arange(5))
    assert StoredTable(squeezed, "shingle").read("n").tolist() == [0, 1, 2, 3, 4]


def test_array_rows_reads_what_a_map_gives_at_any_index(tmp_path):
    """The client gathers a few sets from every shard's values with pread (NpyRows) instead of maps, whose
    fault-around pages it held; a 2-D array or an unknown header is mapped as before."""
    work = WorkDir(tmp_path / "w")
    path = work.part("shingle", 0, "values.npy")
    values = np.random.default_rng(1).integers(0, 2**32, 1000, dtype=np.uint32)
    work.save_array(path, values)
    rows = work.array_rows(path, "shingle")
    assert isinstance(rows, store.NpyRows) and len(rows) == 1000
    for index in ([], [0], [999], [5, 6, 7, 3, 4, 4, 998, 999, 0], list(range(200, 700))):
        got = rows[np.array(index, np.int64)]
        assert got.dtype == np.uint32 and np.array_equal(got, values[index])
    with pytest.raises(IndexError):
        rows[np.array([1000])]
    matrix = work.part("signature", 0, "npy")
    work.save_array(matrix, values.reshape(100, 10))
    assert np.array_equal(work.array_rows(matrix, "signature")[[3, 1]], values.reshape(100, 10)[[3, 1]])
    path.write_bytes(path.read_bytes()[:-4])
    with pytest.raises(WorkDirError) as e:
        work.array_rows(path, "shingle")
    one_line(e, f"{path}: corrupt or truncated; re-run the shingle stage")
