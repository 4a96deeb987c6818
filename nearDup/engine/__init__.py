"""Engines map one module-level function over a list of tasks and return the results in task order.

The local engine (local.py) runs tasks inline (one job) or in forked worker processes; the Dask engine (dask.py)
runs the very same functions on the workers of a Dask cluster. Results never depend on the engine or the number of
jobs: tasks are fixed by the data, and results are collected in task order.

A task reads and writes its own partition files in the work dir (atomic renames, a done marker written last), so
running it twice gives the same bytes: a task lost with a Dask worker is simply run again on another one. Only
dask.py imports dask, and only when a --scheduler is given.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from ..errors import ParameterError
from .dask import DaskEngine
from .local import LocalEngine


class Engine(Protocol):
    """What the stages need of an engine (LocalEngine, DaskEngine): run a function over tasks, in task order.
    light: the caller's word that the tasks are little work (an incremental run's few new documents), which an
    engine may then run where it stands rather than start workers for."""

    progress: bool
    # Whether stages should split work by hash partitions (a shuffle through the work dir) rather than by groups of
    # bands: workers that share nothing but the work dir, each of which must not need the whole of a band.
    shuffle: bool

    def map(self, fn: Callable, tasks: Iterable, desc: str = "", sizes: Sequence[int] | None = None,
            unit: str = "part", docs: Sequence[int] | None = None, nbytes: Sequence[int] | None = None,
            light: bool = False) -> list: ...

    def finish(self) -> None: ...

    def close(self) -> None: ...


def make_engine(jobs: int | None = None, progress: bool = False, scheduler: str | None = None,
                scheduler_file: str | None = None, workdir: str | os.PathLike | None = None,
                log: Callable[[str], None] = lambda message: None):
    """The embedded engine, or a Dask engine when a scheduler (address, local:N) or scheduler file is given;
    log (stderr) hears which cluster and how many workers."""
    if scheduler is None and scheduler_file is None:
        return LocalEngine(jobs, progress, log)
    if scheduler is not None and scheduler_file is not None:
        raise ParameterError("give --scheduler or --scheduler-file, not both")
    if jobs is not None:
        raise ParameterError("--jobs sets the embedded engine's processes; with --scheduler the cluster's workers "
                             "do the work (--scheduler local:N starts N of them)")
    return DaskEngine.connect(scheduler, scheduler_file, progress, workdir, log)
