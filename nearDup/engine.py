"""Engines map one module-level function over a list of tasks and return the results in task order.

The local engine runs tasks inline (one job) or in forked worker processes; the Dask engine runs the very same
functions on the workers of a Dask cluster. Results never depend on the engine or the number of jobs: tasks are
fixed by the data, and results are collected in task order.

A task reads and writes its own partition files in the work dir (atomic renames, a done marker written last), so
running it twice gives the same bytes: a task lost with a Dask worker is simply run again on another one. This is
the only module that imports dask, and only when a --scheduler is given.
"""
from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from . import __version__
from .config import FORMAT, default_jobs
from .errors import ClusterError, ParameterError

if TYPE_CHECKING:
    import concurrent.futures  # imported at run time only when a pool is made (see _workers)


class Engine(Protocol):
    """What the stages need of an engine (LocalEngine, DaskEngine): run a function over tasks, in task order."""

    progress: bool

    def map(self, fn: Callable, tasks: Iterable, desc: str = "", sizes: Sequence[int] | None = None,
            unit: str = "part", docs: Sequence[int] | None = None, nbytes: Sequence[int] | None = None) -> list: ...

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


# A pool was torn down (an interrupt, a dead worker): the process should then end without the interpreter's
# shutdown, whose concurrent.futures hooks can still race the broken pool's closed pipes in Python 3.11 and print a
# traceback after nearDup's one line (seen under load: "OSError: [Errno 9] Bad file descriptor").
TORN_DOWN = False


class LocalEngine:
    """Tasks inline (one job) or in forked worker processes, one pool for all the stages of a run: a pool per
    stage forked and joined its workers up to five times a run, and the last partition of each stage kept one
    worker waiting while the next stage's pool started."""

    def __init__(self, jobs: int | None = None, progress: bool = False,
                 log: Callable[[str], None] = lambda message: None):
        self.jobs = max(1, jobs or default_jobs())
        self.progress = progress
        self.log = log if jobs else lambda message: None  # only a --jobs the user gave is worth a note
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._forked = self._most = 0  # workers forked, and the most tasks of one stage (for finish's note)
        keep_freed_memory()

    def map(self, fn: Callable, tasks: Iterable, desc: str = "", sizes: Sequence[int] | None = None,
            unit: str = "part", docs: Sequence[int] | None = None, nbytes: Sequence[int] | None = None) -> list:
        """[fn(t) for t in tasks], in parallel when jobs > 1.

        tasks may be an iterator (a stream): each task is submitted as it is produced, so the workers start while
        the producer (listing a folder) goes on. For the progress bar: sizes (per task, in `unit`) drive the bar;
        docs and nbytes (documents and text bytes per task, where known) add documents/s and MB/s; for a stream
        they are lists the producer fills as it goes. A task whose documents are not known in advance may return
        its number of documents (an int, or a result with a `docs` field), which counts when it completes."""
        count = len(tasks) if isinstance(tasks, Sequence) else None  # None: a stream
        bar = _progress_bar(self.progress, desc, sizes, unit, count, docs, nbytes)
        try:
            if self.jobs == 1 or (count is not None and count <= 1):
                results = []
                for i, task in enumerate(tasks):
                    results.append(fn(task))
                    bar.done(i, results[-1])
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
                    while shown < len(futures) and futures[shown].done():  # progress while the stream goes on
                        bar.done(shown, futures[shown].result())
                        shown += 1
                bar.settle(len(futures))
                index = {f: i for i, f in enumerate(futures)}
                for f in concurrent.futures.as_completed(futures[shown:]):
                    bar.done(index[f], f.result())
                return [f.result() for f in futures]
            except concurrent.futures.process.BrokenProcessPool:  # killed by hand or by the OOM killer: not a bug
                self.close(cancel=True)
                raise ClusterError(f"{desc or fn.__name__}: a worker process died (killed, or out of memory?); run "
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
    had happened. Blocked, the signal is delivered after the fork, in the main code."""
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


class DaskEngine:
    """Runs tasks on a Dask cluster, through a distributed.Client.

    Every task is submitted under its own fresh key (never cached across runs or stages), results come back in
    task order, and the progress bar advances as futures complete. Dask re-runs the tasks of a lost worker on the
    others (up to distributed.scheduler.allowed-failures times each); a task that fails for good stops the run with
    a one-line error.
    """

    def __init__(self, client, address: str, progress: bool = False, cluster=None):
        self.client, self.address, self.progress, self.cluster = client, address, progress, cluster

    @classmethod
    def connect(cls, scheduler: str | None, scheduler_file: str | None, progress: bool = False,
                workdir: str | os.PathLike | None = None,
                log: Callable[[str], None] = lambda message: None) -> DaskEngine:
        """Connect to a running scheduler (tcp://HOST:PORT, or the address in a scheduler file), or start a
        LocalCluster (local:N: N worker processes of one thread); then check the workers (see check)."""
        option = "--scheduler" if scheduler is not None else "--scheduler-file"
        try:
            import dask
            import distributed
        except ImportError:
            raise ParameterError(f"{option} needs the dask extra: pip install 'nearDup[dask]'") from None
        timeout = dask.utils.parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"), "s")
        # Errors reach the user as nearDup's one line; Dask's own log lines (reconnecting, a worker restarted)
        # belong in the scheduler's and workers' logs, not on the client's stderr.
        logging.getLogger("distributed").setLevel(logging.CRITICAL)
        cluster = None
        if scheduler is not None and (scheduler == "local" or scheduler.startswith("local:")):
            workers = _local_workers(scheduler)
            # Dask's nannies give workers MALLOC_TRIM_THRESHOLD_=65536, which makes glibc map and unmap every
            # large numpy array: the shingle and signature kernels ran 1.4x and 2.4x slower. Not for our workers.
            with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}):
                cluster = distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                                   dashboard_address=":0", silence_logs=logging.CRITICAL)
            address = cluster.scheduler_address
        elif scheduler is not None:
            address = _checked_address(scheduler)
        else:
            assert scheduler_file is not None  # make_engine gives one of the two
            address = _read_scheduler_file(scheduler_file, timeout)
        try:
            client = distributed.Client(cluster if cluster is not None else address, timeout=timeout,
                                        set_as_default=False)
        except (OSError, TimeoutError) as e:
            if cluster is not None:
                cluster.close()
            raise ClusterError(f"cannot connect to the Dask scheduler at {address} ({_one_line(e)}); start one "
                               f"with `dask scheduler`, or check the address") from None
        engine = cls(client, address, progress, cluster)
        try:
            engine.check(workdir, timeout, log)
        except BaseException:
            engine.close()
            raise
        return engine

    def check(self, workdir: str | os.PathLike | None, timeout: float,
              log: Callable[[str], None] = lambda message: None) -> None:
        """Before any work: at least one worker; every worker imports this nearDup and sees the work dir at the
        same absolute path; client, scheduler and workers run the same versions of Dask's packages."""
        try:
            self.client.wait_for_workers(1, timeout=timeout)
        except (TimeoutError, OSError):
            raise ClusterError(f"no Dask workers joined the scheduler at {self.address} within {timeout:g} s; start "
                               f"some with `dask worker {self.address}`") from None
        probe = None
        if workdir is not None:  # a file only this run wrote: a worker that sees it sees the client's work dir
            probe = Path(workdir).absolute() / f".worker-probe-{uuid.uuid4().hex}"
            probe.write_text("")
        try:
            answers = self.client.run(_worker_facts, str(probe) if probe else None, on_error="return")
        finally:
            if probe is not None:
                probe.unlink(missing_ok=True)
        failed = [w for w, a in answers.items() if not isinstance(a, dict)]
        if failed:
            raise ClusterError(f"workers at {self.address} cannot import nearDup ({_one_line(answers[failed[0]])} "
                               f"on {len(failed)} of {len(answers)} workers); install nearDup on every worker")
        other = {w: a for w, a in answers.items() if (a["version"], a["format"]) != (__version__, FORMAT)}
        if other:
            w, a = next(iter(other.items()))
            raise ClusterError(f"workers at {self.address} run nearDup {a['version']} (data format {a['format']}), "
                               f"this is {__version__} (format {FORMAT}), e.g. {w}; install the same nearDup on "
                               f"every worker")
        blind = [w for w, a in answers.items() if probe is not None and not a["sees_workdir"]]
        if blind:
            assert workdir is not None  # only a work dir is probed
            raise ClusterError(f"{len(blind)} of {len(answers)} workers at {self.address} cannot see the work dir "
                               f"{Path(workdir).absolute()} (e.g. {blind[0]}); it must be on storage shared by "
                               f"this machine and every worker, at the same path")
        with warnings.catch_warnings():  # newer distributed only warns about mismatches; here they are an error
            warnings.simplefilter("ignore")
            try:
                versions = self.client.get_versions(check=True)
            except ValueError:  # older distributed raises on mismatches
                versions = self.client.get_versions()
        mismatched = _mismatches(versions)
        if mismatched:
            raise ClusterError(f"the Dask cluster at {self.address} runs other versions than this client: "
                               f"{'; '.join(mismatched)}; install the same versions everywhere")
        threads = sum(self.client.nthreads().values())
        log(f"dask: {len(answers)} workers ({threads} threads) at {self.address}")
        trimmed = [a["malloc_trim"] for a in answers.values() if a.get("malloc_trim")]
        if trimmed:
            log(f"warning: {len(trimmed)} of {len(answers)} workers run with MALLOC_TRIM_THRESHOLD_={trimmed[0]} "
                f"(Dask's nanny sets it), which slows nearDup's kernels up to 2.4x; see `Running on a cluster` in "
                f"nearDup's README")

    def map(self, fn: Callable, tasks: Iterable, desc: str = "", sizes: Sequence[int] | None = None,
            unit: str = "part", docs: Sequence[int] | None = None, nbytes: Sequence[int] | None = None) -> list:
        """[fn(t) for t in tasks] on the cluster's workers; progress as in LocalEngine.map (a stream of tasks is
        produced first, then submitted)."""
        tasks = tasks if isinstance(tasks, Sequence) else list(tasks)
        if not tasks:
            return []
        from distributed import as_completed

        run = uuid.uuid4().hex[:12]  # fresh keys: a result is never taken from another run or stage
        keys = [f"neardup-{desc or fn.__name__}-{i:06d}-{run}" for i in range(len(tasks))]
        index = {key: i for i, key in enumerate(keys)}
        bar = _progress_bar(self.progress, desc, sizes, unit, len(tasks), docs, nbytes)
        with warnings.catch_warnings():  # the tasks are the data (each partition's list of files), by design
            warnings.filterwarnings("ignore", message="Sending large graph")
            futures = self.client.map(fn, tasks, key=keys, pure=False)
        try:
            for future in as_completed(futures, loop=self.client.loop):  # not the default client: we set none
                if future.status != "finished":
                    self._fail(future, desc or fn.__name__)
                bar.done(index[future.key], future.result() if future.status == "finished" else None)
            try:
                return self.client.gather(futures)
            except Exception:  # a finished result lost with its worker, and its re-run failed
                for future in futures:
                    if future.status != "finished":
                        self._fail(future, desc or fn.__name__)
                raise
        finally:
            bar.close()
            with contextlib.suppress(Exception):  # forget them on the cluster (and stop the rest after a failure)
                self.client.cancel(futures)

    def _fail(self, future, stage: str) -> None:
        """Raise the error of a future that did not finish, unless it finishes after all."""
        if future.status == "cancelled":
            raise ClusterError(f"{stage}: lost the Dask scheduler at {self.address}; run the same command again "
                               f"to resume (finished partitions are kept)")
        from distributed import KilledWorker

        error = future.exception()  # waits: a result lost with its worker is being computed again
        if error is None:  # and was
            return
        if isinstance(error, KilledWorker):
            raise ClusterError(f"{stage}: a task was lost with {error.allowed_failures + 1} workers at "
                               f"{self.address} in turn (out of memory, or a worker without nearDup?); see the "
                               f"workers' logs, then run the same command again to resume (finished partitions are "
                               f"kept)") from None
        if isinstance(error, ImportError) and "nearDup" in str(error):
            raise ClusterError(f"workers at {self.address} cannot import nearDup ({_one_line(error)}); install "
                               f"nearDup on every worker") from None
        raise error  # a NearDupError says what to do; anything else is a bug, as with the local engine

    def finish(self) -> None:
        """The run's work is done (the connection is closed with close())."""

    def close(self) -> None:
        """Disconnect; and stop the cluster if this engine started it (local:N)."""
        with contextlib.suppress(Exception):
            self.client.close()
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                self.cluster.close()


def _worker_facts(probe: str | None) -> dict:
    """Run on each worker by DaskEngine.check (unpickling it imports nearDup there)."""
    return {"version": __version__, "format": FORMAT, "sees_workdir": probe is not None and os.path.exists(probe),
            "malloc_trim": os.environ.get("MALLOC_TRIM_THRESHOLD_")}


def _local_workers(scheduler: str) -> int:
    count = scheduler.partition(":")[2]
    if not count:
        return default_jobs()
    if not count.isdigit() or int(count) < 1:
        raise ParameterError(f"--scheduler {scheduler}: local:N needs a number of workers N >= 1")
    return int(count)


def _checked_address(address: str) -> str:
    """tcp://HOST:PORT (or another Dask protocol://...); a bare HOST:PORT means tcp."""
    scheme, sep, rest = address.rpartition("://")
    host, colon, port = (rest if sep else address).rpartition(":")
    if not (host and colon and port.isdigit()) or (sep and not scheme.isalnum()):
        raise ParameterError(f"--scheduler {address}: expected a scheduler address tcp://HOST:PORT, or local:N for "
                             f"a local cluster of N workers")
    return address if sep else f"tcp://{address}"


def _read_scheduler_file(path: str, timeout: float) -> str:
    """The address in a scheduler file (`dask scheduler --scheduler-file PATH`), waiting up to timeout seconds
    for the scheduler to write it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(path, encoding="utf-8") as f:
                return json.load(f)["address"]
        except FileNotFoundError:
            problem = "no such file"
        except (ValueError, KeyError, TypeError):
            problem = "no scheduler address in it"
        except OSError as e:
            raise ClusterError(f"--scheduler-file {path}: cannot read ({e.strerror})") from None
        if time.monotonic() >= deadline:
            raise ClusterError(f"--scheduler-file {path}: {problem} after {timeout:g} s; start the scheduler with "
                               f"`dask scheduler --scheduler-file {path}`")
        time.sleep(0.1)


def _mismatches(versions: dict) -> list[str]:
    """'package: client X, scheduler Y, workers Z' for each package whose versions differ, by Dask's own rule
    (distributed.versions.error_message: the scheduler counts only for the packages it uses)."""
    from distributed.versions import scheduler_relevant_packages

    client = versions["client"]["packages"]
    scheduler = versions["scheduler"]["packages"]
    workers = [w["packages"] for w in versions["workers"].values() if isinstance(w, dict)]
    out = []
    for name in sorted(set(client).union(scheduler, *workers)):
        seen = {client.get(name, "missing"), *(w.get(name, "missing") for w in workers)}
        if name in scheduler_relevant_packages:
            seen.add(scheduler.get(name, "missing"))
        if len(seen) > 1:
            on_workers = "/".join(sorted({str(w.get(name, "missing")) for w in workers})) or "-"
            out.append(f"{name}: client {client.get(name, 'missing')}, scheduler {scheduler.get(name, 'missing')}, "
                       f"workers {on_workers}")
    return out


def _one_line(error) -> str:
    """An error as one line: its type (unless plain Exception, which Client.run wraps remote errors in)
    and message."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if type(error) not in (str, Exception) else text


class _NoBar:
    def done(self, task: int, result) -> None:
        pass

    def settle(self, count: int) -> None:
        pass

    def close(self) -> None:
        pass


# tqdm's default line without its own rate, which would repeat one of ours ({postfix} begins with ", ")
BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}{postfix}]"


class _Bar:
    """A tqdm bar over the tasks' sizes whose postfix gives the documents/s and MB/s since the stage began.

    Redrawn at every finished task (mininterval 0): tasks are whole partitions, at most a few thousand a stage, so
    the rates show even when a stage takes less than tqdm's usual 0.1 s between redraws."""

    def __init__(self, desc: str, sizes, unit: str, count: int | None, docs, nbytes):
        from tqdm import tqdm

        self.sizes, self.docs, self.nbytes = sizes, docs, nbytes
        self.done_docs = self.done_bytes = 0
        self.counts_docs = docs is not None
        self.start = time.monotonic()
        self.count = count
        self.bar = tqdm(total=self._total(count), desc=desc, unit=unit, unit_scale=sizes is not None,
                        file=sys.stderr, leave=False, mininterval=0, miniters=1, bar_format=BAR_FORMAT)

    def _total(self, count: int | None) -> int | None:
        return None if count is None else sum(self.sizes) if self.sizes is not None else count

    def settle(self, count: int) -> None:
        """A stream of tasks has ended: the bar gets its total."""
        if self.count is None:
            self.count, self.bar.total = count, self._total(count)
            self.bar.refresh()

    def done(self, task: int, result) -> None:
        counted = getattr(result, "docs", result)  # an int, or a result that carries its documents
        if self.docs is not None:
            self.done_docs += self.docs[task]
        elif isinstance(counted, int) and not isinstance(counted, bool):
            self.done_docs += counted
            self.counts_docs = True
        if self.nbytes is not None:
            self.done_bytes += self.nbytes[task]
        elapsed = max(time.monotonic() - self.start, 1e-9)
        rates = []
        if self.counts_docs:
            rates.append(f"{self.done_docs / elapsed:,.0f} docs/s")
        if self.nbytes is not None:
            rates.append(f"{self.done_bytes / elapsed / 1e6:,.1f} MB/s")
        step = self.sizes[task] if self.sizes else 1
        if not rates:  # neither documents nor bytes (verify: candidate pairs): the bar's own unit
            rates.append(f"{(self.bar.n + step) / elapsed:,.0f} {self.bar.unit}/s")
        self.bar.set_postfix_str(", ".join(rates), refresh=False)
        self.bar.update(step)

    def close(self) -> None:
        self.bar.close()


COUNT_EVERY = 1024  # items between redraws of a counter: a plain add and test per item, not a call


def counter(enabled: bool, desc: str, unit: str) -> Callable[[Iterable], Iterator] | None:
    """A wrapper of an iterator (of files being listed) that shows how many items went by so far, on stderr, or
    None when progress is off (no wrapper, no cost)."""
    if not enabled:
        return None

    def counted(items: Iterable) -> Iterator:
        from tqdm import tqdm

        bar = tqdm(desc=desc, unit=f"{unit}s", total=None, file=sys.stderr, leave=False, mininterval=0.2,
                   bar_format="{desc}: {n} {unit} found [{elapsed}]")
        n = 0
        try:
            for item in items:
                yield item
                n += 1
                if n % COUNT_EVERY == 0:
                    bar.update(COUNT_EVERY)
            bar.update(n % COUNT_EVERY)
            bar.refresh()  # the final count, however soon it came
        finally:
            bar.close()
    return counted


def _progress_bar(enabled: bool, desc: str, sizes, unit: str, count: int | None, docs=None, nbytes=None):
    if not enabled or count == 0:  # None: a stream, count unknown
        return _NoBar()
    return _Bar(desc, sizes, unit, count, docs, nbytes)
