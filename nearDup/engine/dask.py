"""The Dask engine: the same tasks on the workers of a Dask cluster (an address, a scheduler file, or local:N).
This is the only module that imports dask, and only when a --scheduler is given.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import concurrent.futures
from .. import __version__
from ..config import FORMAT, default_jobs
from ..errors import EngineError, ParameterError
from .local import keep_freed_memory
from .progress import _progress_bar

# The cluster that local:N starts (its scheduler and nannies in this process, its workers spawned with this config).
# Its monitors poll while a run waits on its tasks, whatever they do: idle for 10 s, Dask's defaults cost 1.0-1.2 CPU
# s over the three processes, these 0.1 s (measured with 2 workers; bench/RESULTS.md, "Dask engine").
LOCAL_CLUSTER_CONFIG = {
    # Dask's nannies give workers MALLOC_TRIM_THRESHOLD_=65536: glibc then maps and unmaps every large numpy
    # array, which slows the shingle and signature kernels (README). Not for our workers, which set the malloc of
    # the embedded engine's forked workers when they start (dask_setup below).
    "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
    "distributed.worker.preload": [__name__],
    # One malloc arena for all threads (as keep_freed_memory's M_ARENA_MAX), from the worker's start: set by
    # dask_setup, the threads Dask started by then keep arenas of their own, and a task's thread may share one of
    # those (40k page faults a worker at 100k documents against 25k). The nanny also leaves it in the client's
    # environment, where only a child process started later would see it (one arena: less memory, no harm).
    "distributed.nanny.pre-spawn-environ.MALLOC_ARENA_MAX": "1",
    # The statistical profiler samples every worker thread's stack each 10 ms, for a dashboard nobody opens here.
    "distributed.worker.profile.enabled": False,
    # The event loops' health check (it only logs a blocked loop) every 20 ms in each of the three servers.
    "distributed.admin.tick.interval": "1s",
    # The dashboard's CPU and memory series (psutil) every 0.5 s; the memory limits' monitor every 0.1 s (a worker
    # over its limit is still paused, and restarted by its nanny, within a second).
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.worker.memory.monitor-interval": "1s",
    # Tasks wait on the scheduler until a thread is free (queuing), so two one-thread workers have nothing to steal.
    "distributed.scheduler.work-stealing": False,
}


SUBMIT_EVERY = 0.05  # seconds: a stream of tasks is submitted in batches at most this far apart


class DaskEngine:
    """Runs tasks on a Dask cluster, through a distributed.Client.

    Every task is submitted under its own fresh key (never cached across runs or stages), results come back in
    task order, and the progress bar advances as futures complete. Dask re-runs the tasks of a lost worker on the
    others (up to distributed.scheduler.allowed-failures times each); a task that fails for good stops the run with
    a one-line error.
    """

    shuffle = True  # candidates from a shuffle of band keys by hash (pipeline.candidates): each band over workers

    def __init__(self, client, address: str, progress: bool = False, started=None):
        # started: the distributed.LocalCluster this engine started (local:N), which close() stops
        self._client, self.address, self.progress, self.started = client, address, progress, started
        self._starting: concurrent.futures.Future | None = None  # local:N being started (start_local)
        self._log: Callable[[str], None] = lambda message: None

    @property
    def client(self):
        """The distributed.Client (for local:N, once its cluster has started)."""
        self._ready()
        return self._client

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
        if scheduler is not None and (scheduler == "local" or scheduler.startswith("local:")):
            return cls.start_local(_local_workers(scheduler), progress, workdir, log, timeout)
        if scheduler is not None:
            address = _checked_address(scheduler)
        else:
            assert scheduler_file is not None  # make_engine gives one of the two
            address = _read_scheduler_file(scheduler_file, timeout)
        try:
            client = distributed.Client(address, timeout=timeout, set_as_default=False)
        except (OSError, TimeoutError) as e:
            raise EngineError(f"cannot connect to the Dask scheduler at {address} ({_one_line(e)}); start one "
                              f"with `dask scheduler`, or check the address") from None
        engine = cls(client, address, progress)
        try:
            engine.check(workdir, timeout, log)
        except BaseException:
            engine.close()
            raise
        return engine

    @classmethod
    def start_local(cls, workers: int, progress: bool, workdir: str | os.PathLike | None,
                    log: Callable[[str], None], timeout: float) -> DaskEngine:
        """local:N: a LocalCluster of N worker processes of one thread, started in a thread of its own while this
        one goes on (lists the inputs), and waited for when the engine is first needed (map, client). Starting
        one took 2.1 s of wall (spawned workers that import Dask), before the listing began."""
        engine = cls(None, f"local:{workers}", progress)
        engine._log = log
        notes: list[str] = []  # check's lines, logged by the thread that waits (not amid a progress bar)

        def start() -> list[str]:
            import dask
            import distributed

            with dask.config.set(LOCAL_CLUSTER_CONFIG):
                engine.started = distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                                          dashboard_address=":0", silence_logs=logging.CRITICAL)
            engine.address = engine.started.scheduler_address
            engine._client = distributed.Client(engine.started, timeout=timeout, set_as_default=False)
            engine.check(workdir, timeout, notes.append)
            return notes

        import concurrent.futures

        pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="neardup-local-cluster")
        engine._starting = pool.submit(start)
        pool.shutdown(wait=False)
        return engine

    def _ready(self) -> None:
        """Wait for local:N's cluster (start_local) if it is being started; its failure is raised here."""
        starting = self._starting
        if starting is None:
            return
        try:
            notes = starting.result()
        except BaseException:  # its error, or Ctrl-C while waiting: close waits for the start, then stops it
            self.close()
            raise
        self._starting = None
        for note in notes:
            self._log(note)

    def _starts(self) -> bool:
        """Whether local:N's cluster is still being started."""
        return self._starting is not None and not self._starting.done()

    def check(self, workdir: str | os.PathLike | None, timeout: float,
              log: Callable[[str], None] = lambda message: None) -> None:
        """Before any work: at least one worker; every worker imports this nearDup and sees the work dir at the
        same absolute path; client, scheduler and workers run the same versions of Dask's packages."""
        try:
            self._client.wait_for_workers(1, timeout=timeout)
        except (TimeoutError, OSError):
            raise EngineError(f"no Dask workers joined the scheduler at {self.address} within {timeout:g} s; start "
                              f"some with `dask worker {self.address}`") from None
        probe = None
        if workdir is not None:  # a file only this run wrote: a worker that sees it sees the client's work dir
            probe = Path(workdir).absolute() / f".worker-probe-{uuid.uuid4().hex}"
            probe.write_text("")
        try:
            answers = self._client.run(_worker_facts, str(probe) if probe else None, on_error="return")
        finally:
            if probe is not None:
                probe.unlink(missing_ok=True)
        failed = [w for w, a in answers.items() if not isinstance(a, dict)]
        if failed:
            raise EngineError(f"workers at {self.address} cannot import nearDup ({_one_line(answers[failed[0]])} "
                              f"on {len(failed)} of {len(answers)} workers); install nearDup on every worker")
        other = {w: a for w, a in answers.items() if (a["version"], a["format"]) != (__version__, FORMAT)}
        if other:
            w, a = next(iter(other.items()))
            raise EngineError(f"workers at {self.address} run nearDup {a['version']} (data format {a['format']}), "
                              f"this is {__version__} (format {FORMAT}), e.g. {w}; install the same nearDup on "
                              f"every worker")
        blind = [w for w, a in answers.items() if probe is not None and not a["sees_workdir"]]
        if blind:
            assert workdir is not None  # only a work dir is probed
            raise EngineError(f"{len(blind)} of {len(answers)} workers at {self.address} cannot see the work dir "
                              f"{Path(workdir).absolute()} (e.g. {blind[0]}); it must be on storage shared by "
                              f"this machine and every worker, at the same path")
        with warnings.catch_warnings():  # newer distributed only warns about mismatches; here they are an error
            warnings.simplefilter("ignore")
            try:
                versions = self._client.get_versions(check=True)
            except ValueError:  # older distributed raises on mismatches
                versions = self._client.get_versions()
        mismatched = _mismatches(versions)
        if mismatched:
            raise EngineError(f"the Dask cluster at {self.address} runs other versions than this client: "
                              f"{'; '.join(mismatched)}; install the same versions everywhere")
        threads = sum(self._client.nthreads().values())
        log(f"dask: {len(answers)} workers ({threads} threads) at {self.address}")
        trimmed = [a["malloc_trim"] for a in answers.values() if a.get("malloc_trim")]
        if trimmed:
            log(f"warning: {len(trimmed)} of {len(answers)} workers run with MALLOC_TRIM_THRESHOLD_={trimmed[0]} "
                f"(Dask's nanny sets it), which slows nearDup's kernels up to 2.4x; see `Running on a cluster` in "
                f"nearDup's README")

    def map(self, fn: Callable, tasks: Iterable, desc: str = "", sizes: Sequence[int] | None = None,
            unit: str = "part", docs: Sequence[int] | None = None, nbytes: Sequence[int] | None = None,
            light: bool = False) -> list:
        """[fn(t) for t in tasks] on the cluster's workers; progress as in LocalEngine.map. A stream of tasks (a
        folder being listed) is submitted as it is produced, so the workers start while the client lists: listing
        1M files took 4.5 CPU s, all of it before the first task when the stream was made a list first. light:
        ignored (the cluster's workers are up already)."""
        from distributed import as_completed

        stage = desc or fn.__name__
        run = uuid.uuid4().hex[:12]  # fresh keys: a result is never taken from another run or stage
        count = len(tasks) if isinstance(tasks, Sequence) else None  # None: a stream
        bar = _progress_bar(self.progress, desc, sizes, unit, count, docs, nbytes)
        futures: list = []
        # Each result is fetched once, as its task completes: Future.result() fetches it from the cluster at every
        # call, and a gather of them all at the end fetched every result a second time (the shingle tasks' catalog
        # columns, ~150 bytes a document).
        results: list = []
        index: dict = {}
        completed = None  # made at the first submit, when the cluster is there

        def take(future) -> None:
            i = index[future.key]
            if future.status != "finished":
                self._fail(future, stage)
            try:
                results[i] = future.result()
            except Exception:  # a finished result lost with its worker, and its re-run failed
                self._fail(future, stage)
                raise
            bar.done(i, results[i])

        def submit(batch: list) -> None:
            nonlocal completed
            if completed is None:
                completed = as_completed(loop=self.client.loop)  # not the default client's loop: we set none
            keys = [f"neardup-{stage}-{i:06d}-{run}" for i in range(len(futures), len(futures) + len(batch))]
            index.update((key, i) for i, key in enumerate(keys, len(futures)))
            with warnings.catch_warnings():  # the tasks are the data (each partition's list of files), by design
                warnings.filterwarnings("ignore", message="Sending large graph")
                submitted = self.client.map(fn, batch, key=keys, pure=False)
            futures.extend(submitted)
            results.extend([None] * len(batch))
            completed.update(submitted)
            batch.clear()

        try:
            batch: list = []
            last = 0.0
            for task in tasks:
                batch.append(task)
                # a stream's tasks go in batches at most 0.05 s apart (one graph a batch, not one a task)
                if count is not None or time.monotonic() - last < SUBMIT_EVERY or self._starts():
                    continue
                submit(batch)
                last = time.monotonic()
                while completed is not None and completed.has_ready():  # progress while the stream goes on
                    for future in completed.next_batch(block=False):
                        take(future)
            if batch:
                submit(batch)
            bar.settle(len(futures))
            for future in completed or ():
                take(future)
            return results
        finally:
            bar.close()
            if futures:
                with contextlib.suppress(Exception):  # forget them on the cluster (and stop the rest after a failure)
                    self.client.cancel(futures)

    def _fail(self, future, stage: str) -> None:
        """Raise the error of a future that did not finish, unless it finishes after all."""
        if future.status == "cancelled":
            raise EngineError(f"{stage}: lost the Dask scheduler at {self.address}; run the same command again "
                              f"to resume (finished partitions are kept)")
        from distributed import KilledWorker

        error = future.exception()  # waits: a result lost with its worker is being computed again
        if error is None:  # and was
            return
        if isinstance(error, KilledWorker):
            raise EngineError(f"{stage}: a task was lost with {error.allowed_failures + 1} workers at "
                              f"{self.address} in turn (out of memory, or a worker without nearDup?); see the "
                              f"workers' logs, then run the same command again to resume (finished partitions are "
                              f"kept)") from None
        if isinstance(error, ImportError) and "nearDup" in str(error):
            raise EngineError(f"workers at {self.address} cannot import nearDup ({_one_line(error)}); install "
                              f"nearDup on every worker") from None
        raise error  # a NearDupError says what to do; anything else is a bug, as with the local engine

    def finish(self) -> None:
        """The run's work is done (the connection is closed with close()); a local:N cluster that no stage
        needed has started, and said so, all the same."""
        self._ready()

    def close(self) -> None:
        """Disconnect; and stop the workers and scheduler if this engine started them (local:N)."""
        starting, self._starting = self._starting, None
        if starting is not None:  # wait for what it starts, to stop it
            with contextlib.suppress(BaseException):
                starting.result()
        with contextlib.suppress(Exception):
            if self._client is not None:
                self._client.close()
        if self.started is not None:
            with contextlib.suppress(Exception):
                self.started.close()


def dask_setup(worker) -> None:
    """Run by each worker of local:N as it starts (distributed.worker.preload): glibc's malloc as in the embedded
    engine's forked workers (local.keep_freed_memory). Without it a spawned worker took 11-20x the page faults of a
    forked one at 1M documents, and 2.4-2.9x its system time (bench/RESULTS.md, "Where the Dask workers' system time
    went"). Set here, not as MALLOC_* variables of the nannies' pre-spawn-environ: a nanny writes those into its
    own process's environment, the client's, whose later children (a `dask worker`) would inherit them."""
    keep_freed_memory()


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
            raise EngineError(f"--scheduler-file {path}: cannot read ({e.strerror})") from None
        if time.monotonic() >= deadline:
            raise EngineError(f"--scheduler-file {path}: {problem} after {timeout:g} s; start the scheduler with "
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
