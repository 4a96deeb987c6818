"""A run: the stages in order over one work dir, with parameters resolved once (config.resolve). The command line
(`neardup run`) and the Python API (nearDup.find_duplicates, nearDup.Index) both go through here."""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from contextlib import ExitStack

from ..config import RunConfig, SourceParams
from ..engine import make_engine
from ..errors import InputError, NearDupError
from ..store.cache import absolute, default_workdir, record_use
from ..store.workdir import WorkDir
from ..text.inputs import is_pattern, shards_matching
from . import band, candidates, cluster, shingle, signature, verify
from . import query as query_stage
from .driver import Runner
from .index import check_fixed_parameters


@dataclasses.dataclass(frozen=True)
class Engine:
    """Where and how the stages run: worker processes or a Dask cluster, and progress bars on stderr."""

    jobs: int | None = None
    scheduler: str | None = None
    scheduler_file: str | None = None
    progress: bool = False


def open_runner(path: str, resources: ExitStack, log: Callable[[str], None], engine: Engine = Engine(), *,
                cache: bool = False, index: bool = False, force: bool = False, wait_lock: float = 0.0) -> Runner:
    """Lock the work dir at path and start an engine on it; resources releases both (on errors too). cache: path
    is a default work dir of the cache, which holds derived data only (rebuilt when unusable). index: the work dir
    becomes an index (or is one already): one transaction per run, committed once the results are reported."""
    work = WorkDir(path, cache=cache)
    work.lock(wait_lock)
    resources.callback(work.release)
    if force:
        work.clear()
    elif cache and not work.usable():
        log(f"work dir: {work.root} was written by another nearDup version or is damaged; rebuilding it")
        work.clear()
    if index or work.manifest().index:
        work.begin()  # committed once the results are reported: an interrupted run changes nothing
        work.set(index=True)
    started = make_engine(engine.jobs, engine.progress, engine.scheduler, engine.scheduler_file, work.root, log)
    resources.callback(started.close)
    return Runner(work, started, log)


def check_inputs(paths: list[str], source: SourceParams | None = None) -> None:
    """Every input exists, or is a glob pattern that matches a file, for JSONL or Parquet shards (before a cache
    work dir is made for them)."""
    if not paths:
        raise InputError("give at least one PATH (a file, a folder, or - for paths on stdin)")
    for path in paths:
        if source is not None and source.records and is_pattern(path):
            shards_matching(path)
        elif path != "-" and not os.path.exists(path):
            raise InputError(f"{path}: no such file or directory")


def cache_workdir(paths: list[str], config: RunConfig) -> str:
    """The default work dir of a run: in the cache, keyed by the inputs and their source and shingle options."""
    return default_workdir(paths, config.source, config.shingle)


def used_cache(runner: Runner, paths: list[str]) -> None:
    """Say which cache work dir a run uses, and mark it used (the cache evicts the least recently used)."""
    runner.log(f"work dir: {runner.work.root}")
    record_use(runner.work.root, absolute(paths))


def run(runner: Runner, paths: list[str], config: RunConfig, groups: bool = False, rebuild: bool = False) -> str:
    """Every stage from the documents to the verified pairs (and the groups, if asked); returns the last stage
    run. The bands are chosen once, before the shingle tasks that compute signatures and band keys of their sets
    while they are in memory; an index refuses parameters other than its own unless rebuilt."""
    chosen = config.band(band.kept_bands(runner.work, config.signature.num_perm, config.threshold, config.bands,
                                         config.rows, config.recall))
    if not rebuild:
        check_fixed_parameters(runner.work, {
            "shingle": shingle.shingle_content(config.shingle, config.source),
            "signature": dataclasses.asdict(config.signature), "band": dataclasses.asdict(chosen)})
    shingle.run(runner, paths, config.source, config.shingle, references=config.references, rebuild=rebuild,
                then=(config.signature, chosen))
    signature.run(runner, config.signature)
    band.run(runner, config.threshold, config.bands, config.rows, chosen=chosen, recall=config.recall)
    candidates.run(runner, config.candidates)
    verify.run(runner, config.verify)
    if not groups:
        return "verify"
    cluster.run(runner, config.cluster)
    return "cluster"


def query(work: WorkDir, paths: list[str], stdin, threshold: float | None,
          log: Callable[[str], None]) -> tuple[list[dict], int]:
    """The pairs (query document, indexed document) of `neardup query` and the count of inputs that could not be
    read (warned about on log); an error when none of the inputs is usable, as for a run."""
    pairs, problems = query_stage.run(work, paths, stdin, threshold)
    for message in problems.get("messages", []):
        log(f"warning: {message}")
    if problems.get("queried") == 0:
        raise NearDupError(f"{' '.join(paths)}: no readable text documents (binary: {problems.get('binary', 0)}, "
                           f"unreadable: {problems.get('unreadable', 0) + problems.get('vanished', 0)})")
    return pairs, problems.get("unreadable", 0) + problems.get("vanished", 0)
