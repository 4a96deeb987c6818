"""The stage driver: what every stage shares (the Runner, the chain checks, keys, resume, partition maps, the
per-shard stages and their fusion into the shingle task).

Each stage has a key: a digest of its name, the data format, its parameters and the keys of what it consumes
(for a shingle shard, the fingerprints of its inputs; for the shingle stage, its shards and its catalog). Keys exist
per shard and per stage. A stage whose stored key equals the key it would compute is skipped; a shard whose done
marker carries its key is not recomputed, so an interrupted stage resumes where it stopped and gives the same bytes.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar, cast, overload

import numpy as np

from ..config import (
    FORMAT,
    SourceParams,
    digest,
    digests,
)
from ..engine import Engine
from ..errors import WorkDirError
from ..store.manifest import STAGES, Manifest, ShardRecord, ShingleRecord, StageRecord
from ..store.workdir import WorkDir
from ..text.inputs import PackedItems

P = TypeVar("P")  # a stage's parameters (ShingleParams, SignatureParams, BandParams)
R = TypeVar("R", bound=StageRecord)
U = TypeVar("U", bound=StageRecord)
S = TypeVar("S", bound=ShardRecord)


@dataclasses.dataclass
class Runner:
    """What every stage needs: the work dir, an engine, and where to say what happened (stderr)."""

    work: WorkDir
    engine: Engine
    log: Callable[[str], None]
    soft_errors: int = 0  # problems that let the run finish but make the exit status 2 (unreadable files)
    # per-shard stage -> the shards whose files an earlier stage's task wrote this run (fused_steps): when that
    # stage runs they are found done, but were not reused from an earlier run
    fused: dict[str, set[int]] = dataclasses.field(default_factory=dict)


def chain(manifest: Manifest) -> list[tuple[str, StageRecord | None, bool]]:
    """(stage, its record, whether it is out of date) for each stage in order. A stage is out of date when the
    stage before it has not run or has changed since: its record's upstream key is not that stage's key."""
    out: list[tuple[str, StageRecord | None, bool]] = []
    previous: StageRecord | None = None
    for name in STAGES:
        record = manifest.stages.get(name)
        stale = record is not None and name != STAGES[0] and (
            previous is None or getattr(record, "upstream", None) != previous.key)
        out.append((name, record, stale))
        previous = record
    return out


@overload
def require(work: WorkDir, name: type[R], consumer: str | None = None) -> R: ...
@overload
def require(work: WorkDir, name: str, consumer: str | None = None) -> StageRecord: ...
def require(work, name, consumer=None):
    """The stored record of stage `name` (a stage or its record type), after checking that it and every stage
    before it are present and consistent (chain). The error names the stages to re-run, up to the consumer (the
    stage about to read `name`'s result)."""
    name = name if isinstance(name, str) else name.STAGE
    upto = STAGES.index(consumer or name)
    for i, (stage, record, stale) in enumerate(chain(work.manifest())[:STAGES.index(name) + 1]):
        if record is None:
            what = " ".join("shingle PATH..." if s == "shingle" else s for s in STAGES[i:upto + 1])
            raise WorkDirError(f"{work.root}: the {stage} stage has not run; run `neardup -w {work.root} {what}`")
        if stale:
            raise WorkDirError(f"{work.root}: the {stage} stage is out of date (the {STAGES[i - 1]} stage changed "
                               f"since); re-run `neardup -w {work.root} {' '.join(STAGES[i:upto + 1])}`")
    return record


def _up_to_date(work: WorkDir, cls: type[R], key: str, log: Callable[[str], None] | None = None) -> R | None:
    """The stage's record if it was made with this key and the files it lists are intact (present, same size)."""
    record = work.stage(cls.STAGE)
    if record is None or record.key != key:
        return None
    for file, size in getattr(record, "files", {}).items():
        path = work.output(cls.STAGE, file, key)
        if not path.exists() or path.stat().st_size != size:
            if log is not None:
                log(f"warning: {path} is missing or truncated; recomputing the {cls.STAGE} stage")
            return None
    return cast(R, record)


def _begin(runner: Runner, cls: type[R], upstream_cls: type[U], params, *extra) -> tuple[U, str, R | None]:
    """For a stage computed as a whole: the record it consumes (checked), its key, and its stored record if that
    is up to date."""
    upstream = require(runner.work, upstream_cls, consumer=cls.STAGE)
    key = digest(cls.STAGE, FORMAT, params, upstream.key, *extra)
    return upstream, key, _up_to_date(runner.work, cls, key, runner.log)


def _files(work: WorkDir, stage: str, key: str, *names: str) -> dict[str, int]:
    """Sizes of a stage's output files, kept in its record so that a damaged file is noticed."""
    return {name: work.output(stage, name, key).stat().st_size for name in names}


def part_starts(shingle_record: ShingleRecord) -> np.ndarray:
    """Global number of each partition's first document."""
    counts = np.asarray(shingle_record.shard_docs, dtype=np.int64)
    return np.r_[0, np.cumsum(counts)[:-1]].astype(np.int64)


class PartitionArrays:
    """Lazily memory-mapped per-partition arrays of one stage (what `sets.gather_*` index into): item p is the
    arrays of the p-th listed shard, shard number shards[p]. mapped=False: 1-D arrays read only at the rows
    indexed (store.NpyRows), for the client, which gathers a few sets from every shard and would otherwise hold
    the pages mapped around each of them."""

    def __init__(self, work: WorkDir, stage: str, suffixes: tuple[str, ...], shards, mapped: bool = True):
        self.work, self.stage, self.suffixes, self.shards, self.mapped = work, stage, suffixes, shards, mapped
        self.cache: dict[int, Any] = {}  # arrays, maps or NpyRows, or tuples of them

    def __getitem__(self, p: int):
        if p not in self.cache:
            paths = [self.work.part(self.stage, self.shards[p], s) for s in self.suffixes]
            arrays = tuple(self.work.load_array(path, self.stage, mmap=True) if self.mapped
                           else self.work.array_rows(path, self.stage) for path in paths)
            self.cache[p] = arrays if len(arrays) > 1 else arrays[0]
        return self.cache[p]


def save_routed(work: WorkDir, rows: np.ndarray, where: np.ndarray, parts: int, out: Path) -> None:
    """One sender's side of a shuffle through the work dir: rows (k, c) with their destination partition (k,),
    written to `out` sorted by partition (stably: each partition's rows keep their order) and to out's
    `.bounds.npy` each partition's first row (parts + 1), so a receiver maps its slice of every sender's file."""
    by = np.argsort(where, kind="stable")
    work.save_array(out, rows[by])
    work.save_array(routed_bounds(out), np.searchsorted(where[by], np.arange(parts + 1)))


def routed_bounds(out: Path) -> Path:
    return out.with_name(out.name.removesuffix(".npy") + ".bounds.npy")


def load_routed(work: WorkDir, sent: tuple, part: int, stage: str, columns: int) -> np.ndarray:
    """A receiver's side of a shuffle (save_routed): the rows every sender's file holds for partition `part`,
    sender after sender."""
    found = [np.empty((0, columns), np.int64)]
    for path in sent:
        lo, hi = work.load_array(routed_bounds(Path(path)), stage)[part:part + 2].tolist()
        found.append(np.asarray(work.load_array(Path(path), stage, mmap=True)[lo:hi]))
    return np.concatenate(found)


def _resolved(task, **fields) -> None:
    """Set fields of a frozen task as it is made. Tasks carry absolute paths, resolved where they are made (the
    client): a worker of a Dask cluster runs in another working directory."""
    for name, value in fields.items():
        object.__setattr__(task, name, value)


def _absolute(task, *names: str) -> None:
    """Make the named path fields of a frozen task absolute (see _resolved)."""
    _resolved(task, **{name: os.path.join(os.getcwd(), getattr(task, name)) for name in names})


def _map_partitions(runner: Runner, stage: str, fn, shards: list[int], keys: list[str], files: tuple[str, ...],
                    make_task, sizes=None, unit="part", docs=None, nbytes=None, stream=None,
                    light: bool = False) -> tuple[int, dict]:
    """Run fn over the shards whose done marker is missing or stale (make_task(i) for the i-th listed shard);
    returns how many were reused and {i: fn's result} of the shards run. docs and nbytes per shard feed the
    progress bar's rates. stream: an iterator of shard indices i whose lists (shards, keys, sizes...) it fills as
    it goes; the tasks are then submitted as it yields them. light: little work (engine.map)."""
    work = runner.work
    per_part = {name: values for name, values in (("sizes", sizes), ("docs", docs), ("nbytes", nbytes))
                if values is not None}
    picked: dict[str, list] = {name: [] for name in per_part}
    ran = []

    def todo():
        for i in (stream if stream is not None else range(len(keys))):
            if work.part_known(stage, shards[i], keys[i], files):
                continue
            if work.part_done(stage, shards[i], keys[i], ()) is not None:  # finished once, but a file was lost
                runner.log(f"warning: {work.part(stage, shards[i], '*')} has a missing or truncated file; "
                           f"recomputing it")
            for name, values in per_part.items():
                picked[name].append(values[i])
            ran.append(i)
            yield make_task(i)

    results = runner.engine.map(fn, todo() if stream is not None else list(todo()), desc=stage, unit=unit,
                                light=light, **picked)
    fused = runner.fused.get(stage, set())
    return len(keys) - len(ran) - sum(n in fused for n in shards), dict(zip(ran, results))


@dataclasses.dataclass(frozen=True)
class ShardStage(Generic[P, S]):
    """A stage computed shard by shard from another stage's shards (signature, band): its file of shard n,
    <name>/part-n.npy, is compute(*arrays, params) of the files <source>/part-n.<reads>."""

    name: str
    source: str
    reads: tuple[str, ...]
    compute: Callable[..., np.ndarray]  # a module-level function: tasks carry it to the workers
    record: type[S]
    counts_docs: bool = False  # the record lists the documents per shard (docs)
    derived: tuple[tuple[str, Callable[..., np.ndarray]], ...] = ()  # (suffix, f(out, params)): more files of a shard

    @property
    def files(self) -> tuple[str, ...]:
        """A shard's files: part-n.npy, then the derived ones."""
        return ("npy", *(suffix for suffix, _ in self.derived))

    def key(self, params: P, upstream_key: str) -> str:
        """The key of a shard: the key of the shard it is computed from, and the parameters."""
        return digest(self.name, FORMAT, params, upstream_key)

    def keys(self, params: P, upstream_keys: list[str]) -> list[str]:
        """key() of each of the upstream shards' keys."""
        return digests((self.name, FORMAT, params), upstream_keys)


@dataclasses.dataclass(frozen=True)
class ShardStep:
    """One shard's work of a per-shard stage, with its key."""

    stage: ShardStage[Any, Any]
    key: str
    params: Any


def write_steps(work: WorkDir, shard: int, steps: tuple[ShardStep, ...], arrays: tuple[np.ndarray, ...]) -> None:
    """Compute and write a shard's steps in order, each from the arrays of the one before, then its marker."""
    for step in steps:
        out = step.stage.compute(*arrays, step.params)
        work.save_array(work.part(step.stage.name, shard, "npy"), out)
        for suffix, derive in step.stage.derived:
            work.save_array(work.part(step.stage.name, shard, suffix), derive(out, step.params))
        work.mark_part_done(step.stage.name, shard, step.key, suffixes=step.stage.files, stats={"docs": len(out)})
        arrays = (out,)


def fused_steps(runner: Runner, stages: tuple[tuple[ShardStage[Any, Any], Any], ...], key: str, shard: int
                ) -> tuple[ShardStep, ...]:
    """The work of the per-shard stages `stages` ((stage, params) in order, each computed from the one before)
    on the shard numbered `shard` whose key is `key`, for that shard's task to do from its arrays still in memory
    (one task per shard instead of one per stage, and nothing read back). The driver remembers the shard as done
    by this run, so that the stage, when it runs, does not count it as reused from an interrupted one."""
    steps = []
    for stage, params in stages:
        key = stage.key(params, key)
        steps.append(ShardStep(stage, key, params))
        runner.fused.setdefault(stage.name, set()).add(shard)
    return tuple(steps)


def shard_partition(task: PartitionTask) -> None:
    """A per-shard stage's task: its steps, from the source stage's files of the shard."""
    work, stage = WorkDir(task.root), task.then[0].stage
    write_steps(work, task.index, task.then, tuple(work.load_array(work.part(stage.source, task.index, suffix),
                                                                   stage.source) for suffix in stage.reads))


def run_shard_stage(runner: Runner, stage: ShardStage[P, S], params: P, summary: str,
                    done: Callable[[S, int], str]) -> S:
    """Run a per-shard stage over the shards of its source stage (those not done already); summary: what the
    stage holds (logged when it is up to date); done(record, reused shards): the line logged after it ran."""
    work = runner.work
    upstream = cast(ShardRecord | ShingleRecord, require(work, stage.source, consumer=stage.name))
    shingle = require(work, ShingleRecord)  # documents and bytes per shard, for the progress bar
    keys = stage.keys(params, upstream.shard_keys)
    key = digest(stage.name, keys, upstream.key)  # a new catalog over the same shards: a new record
    shards = upstream.shard_numbers
    record = _up_to_date(work, stage.record, key)
    if record is not None and all(work.part_known(stage.name, n, k, stage.files) for n, k in zip(shards, keys)):
        runner.log(f"{stage.name}: up to date ({summary})")
        return record
    reused, _ = _map_partitions(runner, stage.name, shard_partition, shards, keys, stage.files,
                                lambda i: PartitionTask(str(work.root), shards[i], keys[i], params,
                                                        then=(ShardStep(stage, keys[i], params),)),
                                sizes=shingle.shard_docs, unit="doc", docs=shingle.shard_docs,
                                nbytes=shingle.shard_bytes)
    record = stage.record(key=key, params=params, upstream=upstream.key, shard_keys=keys, shard_numbers=shards,
                          next_shard=upstream.next_shard, shard_docs=shingle.shard_docs if stage.counts_docs else None)
    work.record_stage(stage.name, record)
    runner.log(done(record, reused))
    return record


@dataclasses.dataclass(frozen=True)
class PartitionTask(Generic[P]):
    """One partition's work for a worker (any engine): where the work dir is, which shard, with what."""

    root: str
    index: int  # the shard number
    key: str
    params: P  # the stage's parameters
    items: PackedItems | tuple = ()  # shingle: the partition's inputs
    source: SourceParams | None = None
    only: frozenset | None = None  # shingle: only these document ids of the items (the rest are indexed already)
    cwd: str = ""  # what relative paths of items are relative to (resolving a million items here costs seconds)
    then: tuple[ShardStep, ...] = ()  # per-shard stages' work on this shard (shingle: fused_steps)

    def __post_init__(self):
        _absolute(self, "root")
        _resolved(self, cwd=self.cwd or os.getcwd())
