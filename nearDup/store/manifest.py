"""The manifest (WORK/manifest.json): typed stage records, their JSON form, and its shape check.

A stage record is a frozen dataclass whose JSON form is exactly what the stage wrote before records were typed
(to_json / from_json are inverse on every record a manifest of this format holds). Attributes say what they hold
where the JSON keys do not: `partitions`, `shards` and `docs` are a stage's shard keys, shard numbers and
documents per shard (shard_keys, shard_numbers, shard_docs). A field that is None is absent from the JSON; keys a
record does not know are kept in `rest`, so that reading and writing a manifest never loses what it held.

`load` reads and checks a manifest; WorkDir keeps the result while the file's (size, mtime_ns, inode) stay the same,
so a run parses it once per content, and a manifest another process replaced (always by rename: a new inode) is
read again.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import types
import typing
from dataclasses import field
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any, ClassVar, TypeVar, cast

from .. import __version__
from ..config import (
    FORMAT,
    RECORDED_PARAMS,
    BandParams,
    CandidateParams,
    ClusterParams,
    ShingleParams,
    SignatureParams,
    SourceParams,
    VerifyParams,
)
from ..errors import WorkDirError

STAGES = ("shingle", "signature", "band", "candidates", "verify", "cluster")
_PARAMS = (BandParams, CandidateParams, ClusterParams, ShingleParams, SignatureParams, SourceParams, VerifyParams)
J = TypeVar("J", bound="_Json")


def _json_key(f: dataclasses.Field) -> str:
    """A field's JSON key: its name, or (metadata "json") the key the format has kept for it."""
    return f.metadata.get("json", f.name)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


_PLAIN = frozenset((str, int, float, bool, type(None)))  # values that are their own JSON form


def _dump(value: Any) -> Any:
    """The JSON form of a field's value: records by to_json, parameters as dataclasses.asdict (tuples as lists)."""
    if type(value) in _PLAIN:
        return value
    if isinstance(value, (list, tuple)) and all(type(v) in _PLAIN for v in value):  # a record's shard lists:
        return list(value)                                                          # 2,500 entries at 10M rows
    if isinstance(value, _Json):
        return value.to_json()
    if isinstance(value, RECORDED_PARAMS):  # without the fields added later at their defaults
        return _dump(value.record())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _dump(dataclasses.asdict(value))
    if isinstance(value, (list, tuple)):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value


def _load(hint: Any, value: Any) -> Any:
    """A field's value from its JSON form, by the field's type (X | None: by X)."""
    if isinstance(hint, types.UnionType):
        hint = next(h for h in typing.get_args(hint) if h is not type(None))
    if isinstance(hint, type) and issubclass(hint, _Json):
        return hint.from_json(value)
    if hint in _PARAMS:
        return hint(**{k: tuple(v) if isinstance(v, list) else v for k, v in value.items()})
    return value


class _Json:
    """A dataclass with a JSON form: one key per field (None: absent), plus the keys it does not know (`rest`)."""

    rest: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        out = dict(self.rest)
        for f in dataclasses.fields(cast(Any, self)):
            value = getattr(self, f.name)
            if f.name != "rest" and value is not None:
                out[_json_key(f)] = _dump(value)
        return out

    def json_field(self, name: str) -> Any:
        """One field's JSON form (to_json()[name] without the others: a shingle record's shard lists are 10,000
        entries at 10M documents)."""
        return _dump(getattr(self, name))

    @classmethod
    def from_json(cls: type[J], data: dict[str, Any]) -> J:
        hints, known, names = _hints(cast(type, cls)), {}, set()
        for f in dataclasses.fields(cast(Any, cls)):
            name = _json_key(f)
            names.add(name)
            if f.name != "rest" and name in data:
                known[f.name] = _load(hints[f.name], data[name])
        return cast(Any, cls)(**known, rest={k: v for k, v in data.items() if k not in names})




@dataclasses.dataclass(frozen=True, kw_only=True)
class StageRecord(_Json):
    """What every stage record holds: its key, and (set when it is recorded) the version and time that made it."""

    STAGE: ClassVar[str]
    key: str
    params: Any  # the stage's parameters (a config dataclass, narrowed by each record)
    version: str | None = None
    completed: str | None = None
    rest: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ShingleStats(_Json):
    """The live documents, their bytes and shingles; the problems met and the changes of this run (short, binary,
    replaced, bad_lines, unreadable, vanished, added, removed, renamed: `count`), messages, entries skipped."""

    docs: int
    bytes: int
    shingles: int
    messages: list[str] | None = None
    skipped: dict[str, int] | None = None
    rest: dict[str, Any] = field(default_factory=dict, repr=False)

    def count(self, name: str) -> int:
        return int(self.rest.get(name, 0))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ShingleRecord(StageRecord):
    STAGE = "shingle"
    params: ShingleParams
    source: SourceParams
    content: dict[str, Any]  # what decides a shard's bytes (shingle.shingle_content)
    inputs: list[dict[str, Any]]  # {"path", "reference"} per argument
    cwd: str | None = None
    shard_keys: list[str] = field(metadata={"json": "partitions"})
    shard_numbers: list[int] = field(metadata={"json": "shards"})
    shard_docs: list[int] = field(metadata={"json": "docs"})  # documents (rows, live or dead) per shard
    shard_bytes: list[int] = field(metadata={"json": "bytes"})
    run: int
    next_shard: int
    files: dict[str, int]
    stats: ShingleStats
    links: dict[str, Any] | None = None
    spooled: list[str] | None = None  # the names in inputs/ its listing read from (the rest are collected)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ShardRecord(StageRecord):
    """A stage computed shard by shard from the previous stage's shards (signature, band)."""

    upstream: str
    shard_keys: list[str] = field(metadata={"json": "partitions"})
    shard_numbers: list[int] = field(metadata={"json": "shards"})
    next_shard: int
    shard_docs: list[int] | None = field(default=None, metadata={"json": "docs"})


@dataclasses.dataclass(frozen=True, kw_only=True)
class SignatureRecord(ShardRecord):
    STAGE = "signature"
    params: SignatureParams


@dataclasses.dataclass(frozen=True, kw_only=True)
class BandRecord(ShardRecord):
    STAGE = "band"
    params: BandParams


@dataclasses.dataclass(frozen=True, kw_only=True)
class WholeRecord(StageRecord):
    """A stage computed as a whole (candidates, verify, cluster): its output files under its key, with sizes."""

    upstream: str
    files: dict[str, int]


@dataclasses.dataclass(frozen=True, kw_only=True)
class CandidatesBasis(_Json):
    """What the band index and pairs were made from: a later run updates them when only shards were appended."""

    signature: SignatureParams
    bands: BandParams
    max_bucket: int
    min_shingles: int | None = None
    min_size: int | None = None
    shard_keys: list[str] = field(metadata={"json": "shards"})
    documents: int
    rest: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CandidatesStats(_Json):
    candidates: int
    large_buckets: int | None = None
    small: int | None = None
    method: str | None = None  # what found the pairs when not LSH ("exact"; --method auto may pick either)
    rest: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CandidatesRecord(WholeRecord):
    STAGE = "candidates"
    params: CandidateParams
    stats: CandidatesStats
    basis: CandidatesBasis | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class VerifyBasis(_Json):
    threshold: float
    metric: str | None = None  # None: jaccard
    shard_keys: list[str] = field(metadata={"json": "shards"})
    signature: SignatureParams
    rest: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecallStats(_Json):
    """The estimated recall of the verified pairs (kernels.recall.estimate_recall): pairs with J >= t that were
    not candidates (missed, and its interval at `confidence`), and recall = pairs / (pairs + missed); recall is
    None when no pair at J >= t was found."""
    missed: float
    missed_low: float
    missed_high: float
    recall: float | None = None
    recall_low: float | None = None
    recall_high: float | None = None
    confidence: float
    rest: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclasses.dataclass(frozen=True, kw_only=True)
class VerifyStats(_Json):
    pairs: int
    candidates: int | None = None
    checked: int | None = None
    rejected: int | None = None
    recall: RecallStats | None = None
    rest: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclasses.dataclass(frozen=True, kw_only=True)
class VerifyRecord(WholeRecord):
    STAGE = "verify"
    params: VerifyParams
    stats: VerifyStats
    basis: VerifyBasis | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClusterStats(_Json):
    groups: int
    documents: int
    duplicates: int
    anchored: int | None = None
    rest: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClusterRecord(WholeRecord):
    STAGE = "cluster"
    params: ClusterParams
    stats: ClusterStats


RECORDS: dict[str, type[StageRecord]] = {cls.STAGE: cls for cls in (
    ShingleRecord, SignatureRecord, BandRecord, CandidatesRecord, VerifyRecord, ClusterRecord)}


@dataclasses.dataclass(frozen=True)
class Manifest:
    """The work dir's manifest: its format and the version that wrote it, one record per finished stage, and the
    settings of an index (index: parameters fixed; reported: the last run whose results were reported)."""

    format: int = FORMAT
    version: str = __version__
    stages: dict[str, StageRecord] = dataclasses.field(default_factory=dict)
    index: bool | None = None
    reported: int | None = None
    rest: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)

    # typed access to each stage's record
    @property
    def shingle(self) -> ShingleRecord | None:
        return cast("ShingleRecord | None", self.stages.get("shingle"))

    @property
    def signature(self) -> SignatureRecord | None:
        return cast("SignatureRecord | None", self.stages.get("signature"))

    @property
    def band(self) -> BandRecord | None:
        return cast("BandRecord | None", self.stages.get("band"))

    @property
    def candidates(self) -> CandidatesRecord | None:
        return cast("CandidatesRecord | None", self.stages.get("candidates"))

    @property
    def verify(self) -> VerifyRecord | None:
        return cast("VerifyRecord | None", self.stages.get("verify"))

    @property
    def cluster(self) -> ClusterRecord | None:
        return cast("ClusterRecord | None", self.stages.get("cluster"))

    def updated(self, stages: dict[str, StageRecord] | None = None, **settings) -> Manifest:
        """This manifest with these records and settings in place (the others kept)."""
        return dataclasses.replace(self, stages={**self.stages, **(stages or {})}, **settings)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {**self.rest, "format": self.format, "version": self.version,
                               "stages": {name: record.to_json() for name, record in self.stages.items()}}
        out.update({k: v for k, v in (("index", self.index), ("reported", self.reported)) if v is not None})
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Manifest:
        known = ("format", "version", "stages", "index", "reported")
        return cls(data["format"], data["version"],
                   {name: RECORDS[name].from_json(record) for name, record in data["stages"].items()},
                   data.get("index"), data.get("reported"), {k: v for k, v in data.items() if k not in known})

    def dumps(self) -> str:
        """json.dumps(indent=1, sort_keys=True) of the JSON form, byte for byte; a long list of ints or strings (a
        record's shard lists: 2,500 entries each at 10M documents) written by one join, not by the pure-Python
        encoder that indent needs, an entry at a time."""
        lists: list[str] = []
        mark = f"\0{os.getpid()}-{id(lists)}:"  # (no manifest string holds a NUL)

        def flat(value, depth: int):
            if isinstance(value, dict):
                return {k: flat(v, depth + 1) for k, v in value.items()}
            if not isinstance(value, list):
                return value
            if len(value) > 1 and (all(type(v) is int for v in value) or all(type(v) is str for v in value)):
                entries = map(int.__repr__ if type(value[0]) is int else encode_basestring_ascii, value)
                lists.append(f"[\n{' ' * (depth + 1)}" + f",\n{' ' * (depth + 1)}".join(entries) + f"\n{' ' * depth}]")
                return f"{mark}{len(lists) - 1}"
            return [flat(v, depth + 1) for v in value]

        text = json.dumps(flat(self.to_json(), 0), indent=1, sort_keys=True)
        marked = encode_basestring_ascii(mark)[:-1]  # as json writes it, without its closing quote
        return re.sub(re.escape(marked) + r'(\d+)"', lambda m: lists[int(m.group(1))], text) if lists else text


def load(path: Path, data: bytes) -> Manifest:
    """The manifest in `data` (the bytes of path), checked: a work dir of another format, or a manifest of the
    wrong shape, stops with what to do."""
    corrupt = WorkDirError(f"{path}: manifest is corrupt; re-run with --force to rebuild the work dir")
    try:
        manifest = json.loads(data)
    except ValueError:
        raise corrupt from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("stages"), dict):
        raise corrupt
    if manifest.get("format") != FORMAT:
        raise WorkDirError(
            f"{path.parent}: work dir was written by nearDup {manifest.get('version', '?')} (format "
            f"{manifest.get('format')}), this is {__version__} (format {FORMAT}); use a new --workdir "
            f"or re-run with --force to rebuild it")
    if not _valid(manifest, _MANIFEST_SPEC) or not set(manifest["stages"]) <= set(STAGES) \
            or not all(_same_lengths(r) for r in manifest["stages"].values()):
        raise corrupt  # checked once here, so that no stage meets a record of the wrong shape
    return Manifest.from_json(manifest)


# ------------------------------------------------------------------------------------------------ shape check
class _Exactly(dict):
    """A spec of a JSON object with exactly these keys (a parameter record, made into its dataclass)."""


class _Map:
    """A spec of a JSON object with any keys and values of one spec."""

    def __init__(self, values):
        self.values = values


def _valid(value, spec) -> bool:
    """Whether a JSON value has the shape of spec: a type (int and float exclude bool; float takes int), None,
    a tuple of alternatives, [spec] (a list of), {key: spec} (an object with at least these keys; "?key":
    optional), _Exactly({...}) or _Map(spec)."""
    if isinstance(spec, dict):
        if not isinstance(value, dict) or (isinstance(spec, _Exactly)
                                           and not set(value) <= {k.lstrip("?") for k in spec}):
            return False
        return all(_valid(value[k.lstrip("?")], v) if k.lstrip("?") in value else k[0] == "?"
                   for k, v in spec.items())
    if isinstance(spec, _Map):
        return isinstance(value, dict) and all(_valid(v, spec.values) for v in value.values())
    if isinstance(spec, list):
        if spec[0] is int or spec[0] is str:  # no call per entry: a record's shard lists (2,500 entries at 10M)
            return isinstance(value, list) and all(type(v) is spec[0] for v in value)
        return isinstance(value, list) and all(_valid(v, spec[0]) for v in value)
    if isinstance(spec, tuple):
        return any(_valid(value, s) for s in spec)
    if spec is None:
        return value is None
    if spec is object:  # a field of a type this check does not know
        return True
    if isinstance(value, bool):
        return spec is bool
    return isinstance(value, (int, float) if spec is float else spec)


def _params_spec(cls, *read: str) -> _Exactly:
    """The stored form (dataclasses.asdict, as JSON) of a parameter dataclass, from its fields' annotations. A
    field with a default may be missing (a field added later keeps older work dirs usable: cls(**params) fills
    it), unless named in `read`: a stage reads it from the record directly."""
    # f.type is the annotation as a string (from __future__ import annotations)
    kinds = {"int": int, "str": str, "bool": bool, "float": float, "float | None": (float, None),
             "str | None": (str, None), "tuple[str, ...]": [str]}
    return _Exactly({("" if f.name in read or f.default is f.default_factory is dataclasses.MISSING else "?")
                     + f.name: kinds.get(cast(str, f.type), object) for f in dataclasses.fields(cls)})


_SHINGLE_COUNTS = tuple(f"?{name}" for name in ("short", "binary", "replaced", "bad_lines", "unreadable", "vanished",
                                                "added", "removed", "renamed"))


def _manifest_spec() -> dict:
    """The shape of a manifest of this format: what the stages read from it without checking again."""
    shards = {"shards": [int], "partitions": [str], "next_shard": int}
    whole = {"upstream": str, "files": _Map(int)}
    stage = {"key": str, "?completed": str, "?version": str}
    signature = _params_spec(SignatureParams, "num_perm")
    return {"format": int, "version": str, "?index": bool, "?reported": int, "stages": {
        "?shingle": {**stage, **shards, "params": _params_spec(ShingleParams, "k", "unit"),
                     "source": _params_spec(SourceParams, "jsonl", "id_field"),
                     "content": {"params": _params_spec(ShingleParams), "jsonl": bool, "id_field": str,
                                 "text_field": str, "strict": bool},
                     "inputs": [{"path": str, "reference": bool}], "docs": [int], "bytes": [int], "run": int,
                     "files": _Map(int), "stats": {**dict.fromkeys(("docs", "bytes", "shingles"), int),
                                                   **dict.fromkeys(_SHINGLE_COUNTS, int),
                                                   "?messages": [str], "?skipped": _Map(int)},
                     "?cwd": str, "?links": dict, "?spooled": [str]},
        "?signature": {**stage, **shards, "upstream": str, "params": signature, "docs": [int]},
        "?band": {**stage, **shards, "upstream": str, "params": _params_spec(BandParams)},
        "?candidates": {**stage, **whole, "params": _params_spec(CandidateParams),
                        "stats": {"candidates": int, "?large_buckets": int, "?small": int, "?method": str},
                        "?basis": {"signature": signature, "bands": _params_spec(BandParams), "max_bucket": int,
                                   "?min_shingles": int, "?min_size": int, "shards": [str], "documents": int}},
        "?verify": {**stage, **whole, "params": _params_spec(VerifyParams, "threshold"),
                    "stats": {"pairs": int, **dict.fromkeys(("?candidates", "?checked", "?rejected"), int)},
                    "?basis": {"threshold": float, "?metric": str, "shards": [str], "signature": signature}},
        "?cluster": {**stage, **whole, "params": _params_spec(ClusterParams, "link"),
                     "stats": {**dict.fromkeys(("groups", "documents", "duplicates"), int), "?anchored": int}}}}


_MANIFEST_SPEC = _manifest_spec()


def _same_lengths(record: dict) -> bool:
    """A shard list's columns (numbers, keys, counts, sizes) go together: one entry per shard."""
    lengths = {len(record[f]) for f in ("shards", "partitions", "docs", "bytes") if f in record}
    return len(lengths) <= 1
