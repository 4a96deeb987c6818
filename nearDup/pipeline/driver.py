"""The stage driver: what every stage shares (the Runner, the chain checks, keys, resume, partition maps).

Each stage has a key: a digest of its name, the data format, its parameters and the keys of what it consumes
(for a shingle shard, the fingerprints of its inputs; for the shingle stage, its shards and its catalog). Keys exist
per shard and per stage. A stage whose stored key equals the key it would compute is skipped; a shard whose done
marker carries its key is not recomputed, so an interrupted stage resumes where it stopped and gives the same bytes.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Generic, TypeVar

import numpy as np

from ..config import (
    FORMAT,
    SourceParams,
    digest,
)
from ..engine import Engine
from ..errors import WorkDirError
from ..store.workdir import STAGES, WorkDir
from ..text.inputs import PackedItems

P = TypeVar("P")  # a stage's parameters (ShingleParams, SignatureParams, BandParams)


@dataclasses.dataclass
class Runner:
    """What every stage needs: the work dir, an engine, and where to say what happened (stderr)."""

    work: WorkDir
    engine: Engine
    log: Callable[[str], None]
    soft_errors: int = 0  # problems that let the run finish but make the exit status 2 (unreadable files)
    ahead: set = dataclasses.field(default_factory=set)  # (stage, shard) done by an earlier stage's task this run



def require(work: WorkDir, name: str, consumer: str | None = None) -> dict:
    """The stored record of stage `name`, after checking that it and every stage before it are present and
    consistent: each record's upstream key must be the key of the stage before it. The error names the stages to
    re-run, up to the consumer (the stage about to read `name`'s result)."""
    stages = work.read_manifest()["stages"]
    upto = STAGES.index(consumer or name)
    previous: dict | None = None
    for i, stage in enumerate(STAGES[:STAGES.index(name) + 1]):
        record = stages.get(stage)
        if record is None:
            what = " ".join("shingle PATH..." if s == "shingle" else s for s in STAGES[i:upto + 1])
            raise WorkDirError(f"{work.root}: the {stage} stage has not run; run `neardup -w {work.root} {what}`")
        if previous is not None and record.get("upstream") != previous["key"]:
            raise WorkDirError(f"{work.root}: the {stage} stage is out of date (the {STAGES[i - 1]} stage changed "
                               f"since); re-run `neardup -w {work.root} {' '.join(STAGES[i:upto + 1])}`")
        previous = record
    assert previous is not None  # the loop ran at least once: name is a stage
    return previous


def _up_to_date(work: WorkDir, name: str, key: str, log: Callable[[str], None] | None = None) -> dict | None:
    """The stage's record if it was made with this key and the files it lists are intact (present, same size)."""
    record = work.read_manifest()["stages"].get(name)
    if record is None or record.get("key") != key:
        return None
    for file, size in record.get("files", {}).items():
        path = work.output(name, file, key)
        if not path.exists() or path.stat().st_size != size:
            if log is not None:
                log(f"warning: {path} is missing or truncated; recomputing the {name} stage")
            return None
    return record


def _begin(runner: Runner, name: str, params, *extra) -> tuple[dict, str, dict | None]:
    """For a stage computed as a whole: the record it consumes (checked), its key, and its stored record if that
    is up to date."""
    upstream = require(runner.work, STAGES[STAGES.index(name) - 1], consumer=name)
    key = digest(name, FORMAT, params, upstream["key"], *extra)
    return upstream, key, _up_to_date(runner.work, name, key, runner.log)


def _files(work: WorkDir, stage: str, key: str, *names: str) -> dict:
    """Sizes of a stage's output files, kept in its record so that a damaged file is noticed."""
    return {name: work.output(stage, name, key).stat().st_size for name in names}


def part_starts(shingle_record: dict) -> np.ndarray:
    """Global number of each partition's first document."""
    counts = np.asarray(shingle_record["docs"], dtype=np.int64)
    return np.r_[0, np.cumsum(counts)[:-1]].astype(np.int64)


class PartitionArrays:
    """Lazily memory-mapped per-partition arrays of one stage (what `sets.gather_*` index into): item p is the
    arrays of the p-th listed shard, shard number shards[p]."""

    def __init__(self, work: WorkDir, stage: str, suffixes: tuple[str, ...], shards):
        self.work, self.stage, self.suffixes, self.shards = work, stage, suffixes, shards
        self.cache: dict[int, tuple | np.ndarray] = {}

    def __getitem__(self, p: int):
        if p not in self.cache:
            arrays = tuple(self.work.load_array(self.work.part(self.stage, self.shards[p], s), self.stage, mmap=True)
                           for s in self.suffixes)
            self.cache[p] = arrays if len(arrays) > 1 else arrays[0]
        return self.cache[p]


def _resolved(task, **fields) -> None:
    """Set fields of a frozen task as it is made. Tasks carry absolute paths, resolved where they are made (the
    client): a worker of a Dask cluster runs in another working directory."""
    for name, value in fields.items():
        object.__setattr__(task, name, value)


def _absolute(task, *names: str) -> None:
    """Make the named path fields of a frozen task absolute (see _resolved)."""
    _resolved(task, **{name: os.path.join(os.getcwd(), getattr(task, name)) for name in names})


def _map_partitions(runner: Runner, stage: str, fn, shards: list[int], keys: list[str], files: tuple[str, ...],
                    make_task, sizes=None, unit="part", docs=None, nbytes=None, stream=None) -> tuple[int, dict]:
    """Run fn over the shards whose done marker is missing or stale (make_task(i) for the i-th listed shard);
    returns how many were reused and {i: fn's result} of the shards run. docs and nbytes per shard feed the
    progress bar's rates. stream: an iterator of shard indices i whose lists (shards, keys, sizes...) it fills as
    it goes; the tasks are then submitted as it yields them."""
    work = runner.work
    per_part = {name: values for name, values in (("sizes", sizes), ("docs", docs), ("nbytes", nbytes))
                if values is not None}
    picked: dict[str, list] = {name: [] for name in per_part}
    ran = []

    def todo():
        for i in (stream if stream is not None else range(len(keys))):
            if work.part_done(stage, shards[i], keys[i], files) is not None:
                continue
            if work.part_done(stage, shards[i], keys[i], ()) is not None:  # finished once, but a file was lost
                runner.log(f"warning: {work.part(stage, shards[i], '*')} has a missing or truncated file; "
                           f"recomputing it")
            for name, values in per_part.items():
                picked[name].append(values[i])
            ran.append(i)
            yield make_task(i)

    results = runner.engine.map(fn, todo() if stream is not None else list(todo()), desc=stage, unit=unit, **picked)
    return len(keys) - len(ran) - sum((stage, n) in runner.ahead for n in shards), dict(zip(ran, results))



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
    then: tuple = ()  # shingle: (signature key, params, band key, params) to do with the sets still in memory

    def __post_init__(self):
        _absolute(self, "root")
        _resolved(self, cwd=self.cwd or os.getcwd())
