"""The embedded engine: tasks inline (one job) or in forked worker processes that die with their parent."""
from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import concurrent.futures
from ..config import default_jobs
from ..errors import EngineError
from .progress import _progress_bar

# A pool was torn down (an interrupt, a dead worker): the process should then end without the interpreter's
# shutdown, whose concurrent.futures hooks can still race the broken pool's closed pipes in Python 3.11 and print a
# traceback after nearDup's one line (seen under load: "OSError: [Errno 9] Bad file descriptor").
TORN_DOWN = False

# The signal (SIGINT, SIGTERM) whose handler the command line installed (cli.main) ran in this command, 0 if none.
# Python raises its KeyboardInterrupt at whatever bytecode runs when the signal arrives; where that is code whose
# exceptions are swallowed (an at-fork callback, a finaliser such as a generator's or NpzFile.__del__, a library's
# `except BaseException`), the run went on and ended with status 0 as if no Ctrl-C had come. The handler sets this
# before it raises, and stop_if_interrupted raises again at the next task, stage or the command's end. Python API
# callers never set it: their Ctrl-C stays Python's own.
INTERRUPTED = 0


def stop_if_interrupted() -> None:
    """Raise KeyboardInterrupt if the command line was interrupted, even if the first one was swallowed."""
    if INTERRUPTED:
        raise KeyboardInterrupt


class LocalEngine:
    """Tasks inline (one job) or in forked worker processes, one pool for all the stages of a run: a pool per
    stage forked and joined its workers up to five times a run, and the last partition of each stage kept one
    worker waiting while the next stage's pool started."""

    shuffle = False  # forked workers read the same files as fast: bands grouped per task cost the least I/O

    def __init__(self, jobs: int | None = None, progress: bool = False,
                 log: Callable[[str], None] = lambda message: None):
        self.jobs = max(1, jobs or default_jobs())
        self.progress = progress
        self.log = log if jobs else lambda message: None  # only a --jobs the user gave is worth a note
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._forked = self._most = 0  # workers forked, and the most tasks of one stage (for finish's note)
        keep_freed_memory()

    def map(self, fn: Callable, tasks: Iterable, desc: str = "", sizes: Sequence[int] | None = None,
            unit: str = "part", docs: Sequence[int] | None = None, nbytes: Sequence[int] | None = None,
            light: bool = False) -> list:
        """[fn(t) for t in tasks], in parallel when jobs > 1.

        tasks may be an iterator (a stream): each task is submitted as it is produced, so the workers start while
        the producer (listing a folder) goes on. For the progress bar: sizes (per task, in `unit`) drive the bar;
        docs and nbytes (documents and text bytes per task, where known) add documents/s and MB/s; for a stream
        they are lists the producer fills as it goes. A task whose documents are not known in advance may return
        its number of documents (an int, or a result with a `docs` field), which counts when it completes.

        light (little work): inline unless the workers are forked already. Forking them from a process that
        holds an index's listing and catalog costs more than a second core saves on a few thousand documents:
        adding 10,000 to a 1M-file index took 6.9 CPU s with two workers and 6.1 inline, in as much wall time."""
        stop_if_interrupted()  # between stages
        count = len(tasks) if isinstance(tasks, Sequence) else None  # None: a stream
        bar = _progress_bar(self.progress, desc, sizes, unit, count, docs, nbytes)
        try:
            if self.jobs == 1 or (count is not None and count <= 1) or (light and self._pool is None):
                results = []
                for i, task in enumerate(tasks):
                    results.append(fn(task))
                    bar.done(i, results[-1])
                    stop_if_interrupted()
                return results
            import concurrent.futures
            import concurrent.futures.process

            pool = self._workers()
            futures: list = []
            try:
                shown = 0
                for task in tasks:
                    with _signals_held():  # submit may fork a worker
                        futures.append(pool.submit(fn, task))
                    stop_if_interrupted()
                    while shown < len(futures) and futures[shown].done():  # progress while the stream goes on
                        bar.done(shown, futures[shown].result())
                        shown += 1
                bar.settle(len(futures))
                index = {f: i for i, f in enumerate(futures)}
                for f in concurrent.futures.as_completed(futures[shown:]):
                    bar.done(index[f], f.result())
                    stop_if_interrupted()
                return [f.result() for f in futures]
            except concurrent.futures.process.BrokenProcessPool:  # killed by hand or by the OOM killer: not a bug
                self.close(cancel=True)
                raise EngineError(f"{desc or fn.__name__}: a worker process died (killed, or out of memory?); run "
                                  f"the same command again to resume (finished partitions are kept)") from None
            except BaseException:
                self.close(cancel=True)
                raise
            finally:
                self._most = max(self._most, len(futures))
                self._forked = max(self._forked, len(getattr(pool, "_processes", None) or ()))
        finally:
            bar.close()

    def _workers(self):
        """The run's process pool, made when first needed; a worker is forked when a task is submitted and none
        is idle, up to --jobs (so --jobs 1000 forks as many workers as there are tasks at once, not 1,000), and
        forks after listing inherit the tables built by then. concurrent.futures and multiprocessing are imported
        only here: a one-job run does not pay."""
        if self._pool is None:
            import concurrent.futures
            import multiprocessing

            ctx = multiprocessing.get_context("fork")
            self._pool = concurrent.futures.ProcessPoolExecutor(self.jobs, mp_context=ctx, initializer=_worker_start,
                                                                initargs=(os.getpid(),))
            # With fork, the pool forks all its workers at the first task, because forking while its manager thread
            # runs could deadlock a child on a lock that thread held. Ours take none in the child that
            # multiprocessing does not reset after fork (its queues' locks), as multiprocessing.Pool, which forks
            # from its own thread, has long relied on. A Python without the switch forks them all, as before.
            self._pool._safe_to_dynamically_spawn_children = True  # type: ignore[attr-defined]  # private, see above
        return self._pool

    def close(self, cancel: bool = False) -> None:
        """Stop the workers (at exit concurrent.futures stops them anyway); cancel (an error or an interrupt):
        drop queued tasks and terminate the running ones now, for a run must stop within a second or two of
        Ctrl-C or SIGTERM, not when the longest task ends (concurrent.futures waits for them at exit)."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        processes = list((getattr(pool, "_processes", None) or {}).values())
        if cancel:
            terminate = getattr(pool, "terminate_workers", None)  # Python 3.14
            if terminate is not None:
                terminate()
            else:
                for process in processes:
                    with contextlib.suppress(Exception):
                        process.terminate()
        pool.shutdown(wait=not cancel, cancel_futures=cancel)
        if not cancel:
            return
        global TORN_DOWN
        TORN_DOWN = True
        deadline = time.monotonic() + 2  # SIGTERM ends a worker at once (default action): reap them, so that none
        for process in processes:          # is left when this process ends without the interpreter's shutdown
            with contextlib.suppress(Exception):
                process.join(max(0.0, deadline - time.monotonic()))
        manager = getattr(pool, "_executor_manager_thread", None)
        if manager is not None:  # its workers are gone: it ends at once. Joined now, it cannot race
            manager.join(max(0.0, deadline - time.monotonic()))  # concurrent.futures' exit hook (see TORN_DOWN)

    def finish(self) -> None:
        """The run's work is done: stop the workers, and say so if --jobs asked for more than were needed."""
        self.close()
        if 0 < self._forked < self.jobs:
            self.log(f"--jobs {self.jobs}: {self._forked} worker processes were enough (the largest stage had "
                     f"{self._most} tasks)")
            self._forked = 0


@contextlib.contextmanager
def _signals_held():
    """Ctrl-C and SIGTERM wait for the end of the block. One that arrived while a worker was forked ran its handler
    inside an at-fork callback (logging's), which swallows the KeyboardInterrupt: the run went on as if nothing
    had happened. Blocked, the signal is delivered after the fork, in the main code. Only in this thread: a thread
    that does not block them (one a library started) takes the signal, and its handler runs here all the same;
    the command line then stops at the next task (INTERRUPTED)."""
    import signal

    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _worker_start(parent: int) -> None:
    """First thing in each forked worker: leave signals to the parent, and never outlive it.

    The parent turns SIGTERM into KeyboardInterrupt and stops the workers on an interrupt; a worker that inherited
    that handler outlived a kill -9 of its parent (timeout -s KILL, the OOM killer), blocked on its queue and
    deaf to SIGTERM. Ctrl-C reaches the whole process group: the parent alone decides, and terminates the workers."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # held by the parent while it forked (_signals_held)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    watched = not _kill_with_parent()
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)
    if watched:  # no prctl (not Linux): poll for a new parent
        import threading

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(0.5)
            os._exit(1)

        threading.Thread(target=watch, name="neardup-parent-watch", daemon=True).start()


def _kill_with_parent() -> bool:
    """Linux: have the kernel send this process SIGKILL when its parent dies (prctl PR_SET_PDEATHSIG). Strictly,
    when the parent's forking thread ends: workers are forked by submit, in the main thread."""
    import ctypes
    import signal

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return False
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return prctl(1, signal.SIGKILL, 0, 0, 0) == 0  # 1: PR_SET_PDEATHSIG


MMAP_THRESHOLD = 32 << 20  # glibc's largest: blocks below it come from the heap, where freed memory is reused
TRIM_THRESHOLD = 128 << 20  # free memory the heap may keep at its top before giving it back to the kernel


@functools.cache
def keep_freed_memory() -> None:
    """Let glibc's malloc reuse freed memory for the next arrays of a partition instead of unmapping it.

    By default glibc serves blocks over 128 kB-32 MB (its threshold adapts) with mmap and unmaps them on free, so
    every temporary array of every partition is fresh memory: the kernel zeroes each page on first touch (a page
    fault per 4 kB). With a fixed 32 MB threshold and 128 MB kept at the top of the heap, the shingle stage's
    temporaries are recycled: far fewer page faults and less system time, for a little more resident memory.
    Forked workers inherit the setting. A no-op where malloc is not glibc's."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt(-3, MMAP_THRESHOLD)  # M_MMAP_THRESHOLD (also stops the threshold from adapting)
    mallopt(-1, TRIM_THRESHOLD)  # M_TRIM_THRESHOLD
    # M_ARENA_MAX: a shingle task runs in a thread of its own (the time limit of text.read.time_limited_task), and
    # a thread's own arena grows in 64 MB heaps that a 128 MB trim threshold never shrinks (+50 MB peak for a 200
    # MB file); one thread works at a time here, so sharing the main heap costs no lock contention
    mallopt(-8, 1)
