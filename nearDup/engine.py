"""Engines map one module-level function over a list of tasks and return the results in task order.

The local engine runs tasks inline (one job) or in forked worker processes; a cluster engine runs the very same
functions elsewhere. Results never depend on the engine or the number of jobs: tasks are fixed by the data, and
results are collected in task order.
"""
from __future__ import annotations

import concurrent.futures
import functools
import multiprocessing
import sys
from typing import Callable, Sequence

from .config import default_jobs


class LocalEngine:
    def __init__(self, jobs: int | None = None, progress: bool = False):
        self.jobs = max(1, jobs or default_jobs())
        self.progress = progress
        keep_freed_memory()

    def map(self, fn: Callable, tasks: Sequence, desc: str = "", sizes: Sequence[int] | None = None,
            unit: str = "part") -> list:
        """[fn(t) for t in tasks], in parallel when jobs > 1; sizes (e.g. bytes per task) drive the progress bar."""
        bar = _progress_bar(self.progress, desc, sizes, unit, len(tasks))
        try:
            if self.jobs == 1 or len(tasks) <= 1:
                results = []
                for i, task in enumerate(tasks):
                    results.append(fn(task))
                    bar.update(sizes[i] if sizes else 1)
                return results
            ctx = multiprocessing.get_context("fork")
            with concurrent.futures.ProcessPoolExecutor(self.jobs, mp_context=ctx) as pool:
                futures = [pool.submit(fn, task) for task in tasks]
                index = {f: i for i, f in enumerate(futures)}
                try:
                    for f in concurrent.futures.as_completed(futures):
                        bar.update(sizes[index[f]] if sizes else 1)
                    return [f.result() for f in futures]
                except BaseException:
                    pool.shutdown(wait=False, cancel_futures=True)
                    raise
        finally:
            bar.close()


MMAP_THRESHOLD = 32 << 20  # glibc's largest: blocks below it come from the heap, where freed memory is reused
TRIM_THRESHOLD = 128 << 20  # free memory the heap may keep at its top before giving it back to the kernel


@functools.cache
def keep_freed_memory() -> None:
    """Let glibc's malloc reuse freed memory for the next arrays of a partition instead of unmapping it.

    By default glibc serves blocks over 128 kB-32 MB (its threshold adapts) with mmap and unmaps them on free, so
    every temporary array of every partition is fresh memory: the kernel zeroes each page on first touch (a page
    fault per 4 kB). With a fixed 32 MB threshold and 128 MB kept at the top of the heap, the shingle stage's
    temporaries are recycled: ~4x fewer page faults and about half the system time, for ~20 MB more resident memory.
    Forked workers inherit the setting. A no-op where malloc is not glibc's."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt(-3, MMAP_THRESHOLD)  # M_MMAP_THRESHOLD (also stops the threshold from adapting)
    mallopt(-1, TRIM_THRESHOLD)  # M_TRIM_THRESHOLD


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress_bar(enabled: bool, desc: str, sizes, unit: str, count: int):
    if not enabled or not count:
        return _NoBar()
    from tqdm import tqdm

    if sizes:
        return tqdm(total=sum(sizes), desc=desc, unit=unit, unit_scale=True, file=sys.stderr, leave=False)
    return tqdm(total=count, desc=desc, unit=unit, file=sys.stderr, leave=False)
