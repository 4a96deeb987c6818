"""Unit tests of the manifest: typed records and their JSON, reading once per content, other writers, transactions."""
from __future__ import annotations

import dataclasses
import json
import os

import pytest
from click.testing import CliRunner

from nearDup.cli import cli
from nearDup.config import (
    FORMAT,
    BandParams,
    ShingleParams,
    SignatureParams,
    SourceParams,
    VerifyParams,
    digest,
    digests,
)
from nearDup.errors import WorkDirError
from nearDup.store.manifest import RECORDS, STAGES, Manifest, VerifyRecord, VerifyStats
from nearDup.store.workdir import MANIFEST, WorkDir

from conftest import SAMPLE


def invoke(*args):
    result = CliRunner().invoke(cli, [*map(str, args)])
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """An index of sample_corpus run with groups: every stage has a record, with a basis where a stage keeps one."""
    root = tmp_path_factory.mktemp("manifest") / "idx"
    invoke("run", "-j", 1, "--index", root, SAMPLE, "--groups", "--format", "jsonl")
    return root


def test_every_record_round_trips_the_json_of_a_real_run(index):
    stored = json.loads((index / MANIFEST).read_text(encoding="utf-8"))
    assert set(stored["stages"]) == set(STAGES)
    for name, data in stored["stages"].items():
        record = RECORDS[name].from_json(data)
        assert record.to_json() == data, name  # every key kept, none added, same values
        assert RECORDS[name].from_json(record.to_json()) == record, name
    manifest = Manifest.from_json(stored)
    assert manifest.to_json() == stored
    assert manifest.dumps() == (index / MANIFEST).read_text(encoding="utf-8")  # the bytes nearDup writes
    # the attributes hold what the JSON keys hold, typed
    shingle = manifest.shingle
    assert shingle is not None and manifest.index is True and manifest.reported == shingle.run == 1
    assert (shingle.shard_keys, shingle.shard_numbers, shingle.shard_docs, shingle.shard_bytes) == tuple(
        stored["stages"]["shingle"][k] for k in ("partitions", "shards", "docs", "bytes"))
    assert shingle.params == ShingleParams() and isinstance(shingle.source, SourceParams)
    assert shingle.stats.docs == len(list(SAMPLE.iterdir())) and shingle.stats.count("added") == shingle.stats.docs
    assert manifest.signature is not None and manifest.signature.params == SignatureParams()
    assert manifest.signature.shard_docs == shingle.shard_docs and manifest.band is not None
    assert manifest.band.shard_docs is None and isinstance(manifest.band.params, BandParams)
    assert manifest.verify is not None and manifest.verify.params == VerifyParams(0.8)
    assert manifest.verify.basis is not None and manifest.verify.basis.shard_keys == shingle.shard_keys
    assert manifest.verify.stats.pairs == stored["stages"]["verify"]["stats"]["pairs"] > 0
    assert manifest.cluster is not None and manifest.cluster.stats.groups > 0


def test_per_shard_keys_are_the_digests_of_each_shard_as_before(index):
    """digests (the per-shard keys of signature and band, made from one JSON prefix) gives digest of each: the keys an
    index stored before keep their shards reused, never recomputed."""
    params = BandParams(bands=3, rows=2, threshold=0.5)
    lasts = ["38c2686039da", "", "é\udce9\"]", 7, None, [1, {"b": 2, "a": params}]]
    for parts in [(), ("band", FORMAT, params), ({"z": 1, "a": ["x"]}, 2.5)]:
        assert digests(parts, lasts) == [digest(*parts, last) for last in lasts]
    manifest = Manifest.from_json(json.loads((index / MANIFEST).read_text(encoding="utf-8")))
    for record, upstream in ((manifest.signature, manifest.shingle), (manifest.band, manifest.signature)):
        assert record is not None and upstream is not None and record.shard_keys
        assert record.shard_keys == [digest(record.STAGE, FORMAT, record.params, k) for k in upstream.shard_keys]


def test_a_key_the_record_does_not_know_is_kept():
    data = {"key": "k", "params": {"threshold": 0.5}, "upstream": "u", "files": {}, "stats": {"pairs": 1, "new": 2},
            "later": [1]}
    record = VerifyRecord.from_json(data)
    assert record.stats == VerifyStats(pairs=1, rest={"new": 2}) and record.rest == {"later": [1]}
    assert record.to_json() == data


def test_one_run_parses_the_manifest_at_most_once(tmp_path, monkeypatch):
    """A run used to parse manifest.json some 30 times (every stage and check read it again)."""
    parsed = []
    loads = json.loads

    def counted(data, *args, **kwargs):  # json.loads, counting what has a manifest's shape (not done markers)
        value = loads(data, *args, **kwargs)
        if isinstance(value, dict) and {"format", "stages"} <= set(value):
            parsed.append(1)
        return value

    monkeypatch.setattr(json, "loads", counted)
    invoke("-w", tmp_path / "w", "run", "-j", 1, SAMPLE, "--groups")
    assert len(parsed) == 0  # a new work dir: what is written is not read back
    invoke("-w", tmp_path / "w", "run", "-j", 1, SAMPLE, "--groups")
    assert len(parsed) == 1  # up to date: read once


def test_a_manifest_changed_by_another_process_is_seen(index, tmp_path):
    work = WorkDir(tmp_path / "w")
    assert work.manifest().stages == {}
    other = WorkDir(tmp_path / "w")
    other.record_stage("shingle", WorkDir(index, create=False).manifest().stages["shingle"])
    assert set(work.manifest().stages) == {"shingle"}  # written by rename: a new inode, read again
    other.set(reported=7)
    assert work.manifest().reported == 7
    (tmp_path / "w" / MANIFEST).write_text("{", encoding="utf-8")  # damaged in place
    with pytest.raises(WorkDirError, match="manifest is corrupt; re-run with --force"):
        work.manifest()


def test_a_transaction_writes_the_manifest_once_at_commit(index, tmp_path):
    records = WorkDir(index, create=False).manifest().stages
    work = WorkDir(tmp_path / "w")
    work.record_stage("shingle", records["shingle"])
    before = (tmp_path / "w" / MANIFEST).read_bytes()
    inode = os.stat(tmp_path / "w" / MANIFEST).st_ino
    work.begin()
    work.set(index=True)
    work.record_stage("signature", records["signature"])
    work.record_stage("band", records["band"])
    seen = work.manifest()  # the transaction's records in place of the stored ones
    assert seen.index is True and set(seen.stages) == {"shingle", "signature", "band"}
    assert WorkDir(tmp_path / "w", create=False).manifest().index is None  # another reader sees the stored one
    assert (tmp_path / "w" / MANIFEST).read_bytes() == before and os.stat(tmp_path / "w" / MANIFEST).st_ino == inode
    work.commit()
    stored = json.loads((tmp_path / "w" / MANIFEST).read_text(encoding="utf-8"))
    assert stored["index"] is True and set(stored["stages"]) == {"shingle", "signature", "band"}
    assert stored["stages"]["band"] == {**records["band"].to_json(), "completed": stored["stages"]["band"]["completed"],
                                        "version": stored["stages"]["band"]["version"]}


def test_a_rolled_back_transaction_changes_nothing(index, tmp_path):
    records = WorkDir(index, create=False).manifest().stages
    work = WorkDir(tmp_path / "w")
    work.record_stage("shingle", records["shingle"])
    before = (tmp_path / "w" / MANIFEST).read_bytes()
    work.begin()
    work.record_stage("signature", records["signature"])
    work.set(reported=3)
    work.rollback()
    assert (tmp_path / "w" / MANIFEST).read_bytes() == before
    assert set(work.manifest().stages) == {"shingle"} and work.manifest().reported is None
    work.commit()  # nothing open: nothing written
    assert (tmp_path / "w" / MANIFEST).read_bytes() == before


def test_a_record_of_the_wrong_shape_is_refused_once_read(index, tmp_path):
    stored = json.loads((index / MANIFEST).read_text(encoding="utf-8"))
    stored["stages"]["verify"]["stats"]["pairs"] = "many"
    (tmp_path / "w").mkdir()
    WorkDir(tmp_path / "w")  # marks the empty folder as nearDup's
    (tmp_path / "w" / MANIFEST).write_text(json.dumps(stored), encoding="utf-8")
    with pytest.raises(WorkDirError, match="manifest is corrupt"):
        WorkDir(tmp_path / "w", create=False).manifest()
    assert dataclasses.is_dataclass(RECORDS["verify"])


@pytest.mark.parametrize("stage,field,value", [("shingle", "shards", True), ("shingle", "docs", "3"),
                                               ("signature", "partitions", 7), ("band", "shards", 1.0)])
def test_a_shard_list_with_an_entry_of_the_wrong_type_is_refused(index, tmp_path, stage, field, value):
    """The shard lists are checked entry by entry (a bool is not an int, nor a float)."""
    stored = json.loads((index / MANIFEST).read_text(encoding="utf-8"))
    stored["stages"][stage][field][-1] = value
    (tmp_path / "w").mkdir()
    WorkDir(tmp_path / "w")
    (tmp_path / "w" / MANIFEST).write_text(json.dumps(stored), encoding="utf-8")
    with pytest.raises(WorkDirError, match="manifest is corrupt"):
        WorkDir(tmp_path / "w", create=False).manifest()


def test_inspect_shows_each_record_as_the_manifest_holds_it(index):
    stored = json.loads((index / MANIFEST).read_text(encoding="utf-8"))
    lines = invoke("-w", index, "inspect").stdout.splitlines()
    for name in STAGES:
        record = stored["stages"][name]
        assert f"{name}: done at {record['completed']}, params {json.dumps(record['params'], sort_keys=True)}" in lines
    verify = {k: v for k, v in stored["stages"]["verify"]["stats"].items() if k != "recall"}  # in words: test_recall
    assert "  " + ", ".join(f"{k} {verify[k]}" for k in sorted(verify)) in lines


def test_a_manifest_is_dumped_as_json_dumps_indented_with_sorted_keys_writes_it(index):
    """Manifest.dumps writes long lists of ints or strings by one join: byte for byte what json.dumps(indent=1,
    sort_keys=True) writes, for an index's manifest and for lists of every kind at several depths (strings that
    need escaping, bools, which are not ints, mixed, nested, empty and single lists)."""
    from nearDup.store.manifest import Manifest, load

    stored = load(index / MANIFEST, (index / MANIFEST).read_bytes())
    awkward = {"ints": [3, -1, 2**70, 0], "strs": ["a", 'q"uote', "back\\slash", "é日\udcff", "\0", ""],
               "bools": [True, False, True], "mixed": [1, "a", 2.5, None], "floats": [1.5, 2.0],
               "nested": [[1, 2, 3], {"deep": ["x", "y"], "z": [7, 8]}], "empty": [], "one": [5], "onestr": ["s"],
               "int_and_bool": [1, True]}
    for manifest in (stored, Manifest(rest={"a": awkward, "b": {"c": awkward, "d": [awkward, [awkward]]}})):
        assert manifest.dumps() == json.dumps(manifest.to_json(), indent=1, sort_keys=True)
