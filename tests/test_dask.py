"""The Dask engine: the same stages on a cluster give the embedded engine's bytes, and a broken cluster gives a
one-line error. The reference for every comparison is the embedded run (--jobs 1) of the same command."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

distributed = pytest.importorskip("distributed", reason="the dask extra is not installed (pip install -e "
                                                        "'.[dask]'; CI installs it with `make test`)")

from nearDup import pipeline as stages  # noqa: E402
from nearDup.cli import cli  # noqa: E402
from nearDup.config import CandidateParams, ShingleParams, SignatureParams, SourceParams, VerifyParams  # noqa: E402
from nearDup.engine import DaskEngine, LocalEngine  # noqa: E402
from nearDup.pipeline.driver import Runner  # noqa: E402
from nearDup.pipeline.results import verified_pairs  # noqa: E402
from nearDup.store.workdir import WorkDir  # noqa: E402

from conftest import REPO, SAMPLE, generate_corpus, stage_files  # noqa: E402

BIN = Path(sys.executable).parent
DASK = str(BIN / "dask")


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def embedded(workdir, *args) -> bytes:
    """stdout of the embedded run: the truth every cluster run must reproduce byte for byte."""
    result = invoke("-w", workdir, *args, "--jobs", 1)
    assert result.exit_code == 0, result.stderr
    assert result.stdout_bytes
    return result.stdout_bytes


# ------------------------------------------------------------------------------------------ clusters

@pytest.fixture(scope="session")
def local_cluster():
    """A LocalCluster of 2 worker processes, 1 thread each, shared by the tests of this session. Its nannies would
    set MALLOC_TRIM_THRESHOLD_ in this process's environment (Dask does, before spawning workers): configured like
    the clusters of --scheduler local:N, so that those never inherit it here."""
    import dask

    from nearDup.engine.dask import LOCAL_CLUSTER_CONFIG

    with dask.config.set(LOCAL_CLUSTER_CONFIG):
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                           dashboard_address=":0")
    yield cluster
    cluster.close()


def start(cmd: list[str], log: Path, env: dict | None = None) -> subprocess.Popen:
    """A process in a session (group) of its own, so that stopping it by its PID also stops a nanny's worker."""
    with open(log, "wb") as f:
        return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True, cwd="/",
                                env={**os.environ, **(env or {})})


def stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM (SIGKILL after 10 s) to each process group, workers before their scheduler (so that they need not
    wait for it to come back)."""
    procs = procs[::-1]
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def start_scheduler(folder: Path, procs: list) -> tuple[Path, str]:
    scheduler_file = folder / "scheduler.json"
    procs.append(start([DASK, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                        "--scheduler-file", str(scheduler_file)], folder / "scheduler.log"))
    address = wait_for(lambda: scheduler_file.exists() and json.loads(scheduler_file.read_text() or "{}")
                       .get("address"), 30, "the scheduler file")
    return scheduler_file, address


def start_worker(scheduler_file: Path, log: Path, *extra: str, env: dict | None = None) -> subprocess.Popen:
    return start([DASK, "worker", "--scheduler-file", str(scheduler_file), "--nthreads", "1", "--no-dashboard",
                  *extra], log, env)


def workers_of(address: str) -> int:
    with distributed.Client(address, timeout=10, set_as_default=False) as client:
        return len(client.scheduler_info(n_workers=-1)["workers"])


@pytest.fixture(scope="module")
def dask_processes(tmp_path_factory):
    """`dask scheduler --scheduler-file F` and two `dask worker --scheduler-file F --nthreads 1`, as a user starts
    them; stopped by their PIDs at the end."""
    folder = tmp_path_factory.mktemp("dask")
    procs: list[subprocess.Popen] = []
    try:
        scheduler_file, address = start_scheduler(folder, procs)
        for i in range(2):
            procs.append(start_worker(scheduler_file, folder / f"worker{i}.log"))
        wait_for(lambda: workers_of(address) >= 2, 60, "two workers")
        yield scheduler_file, address
    finally:
        stop(procs)


def neardup(*args, cwd=REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nearDup", *map(str, args)], capture_output=True, cwd=cwd,
                          timeout=300)


# ------------------------------------------------------------------------------------------ same bytes

def test_dask_engine_in_process_writes_the_same_files_as_the_local_engine(corpus, tmp_path):
    """(a) The stages driven through a DaskEngine over an in-process client (threads) equal the local engine's,
    file by file in the work dir."""
    folder, _ = corpus
    source = SourceParams(partition_docs=23)

    def pipeline(runner):
        stages.shingle.run(runner, [str(folder)], source, ShingleParams())
        stages.signature.run(runner, SignatureParams(num_perm=64, method="permutation"))
        stages.band.run(runner, 0.5)
        stages.candidates.run(runner, CandidateParams())
        stages.verify.run(runner, VerifyParams(0.5))
        return verified_pairs(runner.work)

    local = pipeline(Runner(WorkDir(tmp_path / "local"), LocalEngine(1), lambda m: None))
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=":0",
                            set_as_default=False) as client:
        engine = DaskEngine(client, client.scheduler.address)
        engine.check(tmp_path, timeout=10)
        on_dask = pipeline(Runner(WorkDir(tmp_path / "dask"), engine, lambda m: None))
    assert on_dask == local and len(local) > 30
    assert stage_files(tmp_path / "dask") == stage_files(tmp_path / "local")


@pytest.mark.parametrize("options", [["--threshold", 0.5, "--partition-docs", 17],
                                     ["--groups", "--format", "jsonl", "--partition-docs", 40]])
def test_cli_on_a_local_cluster_prints_the_same_bytes(corpus, tmp_path, local_cluster, options):
    """(b) `--scheduler tcp://...` of a LocalCluster of 2 workers."""
    folder, _ = corpus
    truth = embedded(tmp_path / "e", "run", folder, *options)
    result = invoke("-w", tmp_path / "d", "run", folder, *options, "--scheduler", local_cluster.scheduler_address)
    assert result.exit_code == 0, result.stderr
    assert result.stdout_bytes == truth


def test_exact_join_split_over_a_local_cluster_prints_the_same_bytes(corpus, tmp_path, local_cluster, monkeypatch):
    """--method exact: the join's probe ranges (several, MIN_JOIN_VALUES 1) run on the cluster's workers."""
    from nearDup.pipeline import candidates

    folder, _ = corpus
    monkeypatch.setattr(candidates, "MIN_JOIN_VALUES", 1)
    options = ("--method", "exact", "--threshold", 0.5, "--partition-docs", 17, "--groups", "--format", "jsonl")
    truth = embedded(tmp_path / "e", "run", folder, *options)
    result = invoke("-w", tmp_path / "d", "run", folder, *options, "--scheduler", local_cluster.scheduler_address)
    assert result.exit_code == 0, result.stderr
    assert result.stdout_bytes == truth
    assert stage_files(tmp_path / "d") == stage_files(tmp_path / "e")


@pytest.mark.parametrize("link", ["keeper", "connected"])
def test_many_shuffle_and_component_partitions_on_a_cluster_print_the_same_bytes(corpus, tmp_path, local_cluster,
                                                                                 monkeypatch, link):
    """Candidates from a shuffle of band keys over many partitions, and components by star rounds over many node
    partitions, on the 2 workers (the partition counts are decided by the client, from the data)."""
    monkeypatch.setattr(stages.candidates, "SHUFFLE_ENTRIES", 400)
    monkeypatch.setattr(stages.cluster, "COMPONENT_EDGES", 5)
    folder, _ = corpus
    options = ["--threshold", 0.5, "--groups", "--link", link, "--format", "jsonl", "--partition-docs", 30]
    truth = embedded(tmp_path / "e", "run", folder, *options)
    result = invoke("-w", tmp_path / "d", "run", folder, *options, "--scheduler", local_cluster.scheduler_address)
    assert result.exit_code == 0, result.stderr
    assert result.stdout_bytes == truth and truth.count(b"\n") > 10
    assert stage_files(tmp_path / "d") == stage_files(tmp_path / "e")


def test_components_rounds_run_on_the_workers(tmp_path, local_cluster, monkeypatch):
    """Star rounds on the cluster's worker processes (tasks pickled, files through the work dir): a path of 400
    documents numbered at random, cut into 8 slices and 8 node partitions, needs several rounds; its groups and
    a separate pair's equal the embedded kernel's."""
    import numpy as np

    from nearDup.kernels.components import components, groups_of

    monkeypatch.setattr(stages.cluster, "COMPONENT_EDGES", 50)
    nodes = np.random.default_rng(5).permutation(400) + 10
    edges = np.sort(np.concatenate([np.stack([nodes[:-1], nodes[1:]], axis=1), [[3, 7]]]), axis=1)
    with distributed.Client(local_cluster.scheduler_address, set_as_default=False) as client:
        engine = DaskEngine(client, local_cluster.scheduler_address)
        runner = Runner(WorkDir(tmp_path / "w"), engine, lambda m: None)
        found = stages.cluster._spread_components(runner, edges, "0123456789ab")
    assert [g.tolist() for g in found] == [g.tolist() for g in groups_of(components(420, edges))]
    assert [len(g) for g in found] == [2, 400]


def test_scheduler_local_n_starts_and_stops_its_own_cluster(tmp_path):
    truth = embedded(tmp_path / "e", "run", SAMPLE, "--threshold", 0.5)
    result = invoke("-w", tmp_path / "d", "run", SAMPLE, "--threshold", 0.5, "--scheduler", "local:2")
    assert result.exit_code == 0, result.stderr
    assert result.stdout_bytes == truth
    assert "dask: 2 workers (2 threads) at tcp://" in result.stderr
    assert "MALLOC_TRIM_THRESHOLD_" not in result.stderr  # unset for the workers nearDup starts: 1.4-2.4x faster


def _monitors() -> dict:
    import dask

    return {key: dask.config.get(key) for key in ("distributed.worker.profile.enabled",
                                                  "distributed.admin.tick.interval",
                                                  "distributed.worker.memory.monitor-interval")}


def test_the_workers_local_n_starts_poll_rarely(tmp_path):
    """Dask's profiler (every 10 ms) and monitors cost 0.1 core while a run waits; the cluster of local:N runs
    without the profiler and polls once a second, in its spawned workers too."""
    engine = DaskEngine.connect("local:1", None, workdir=tmp_path)
    try:
        seen = list(engine.client.run(_monitors).values())
    finally:
        engine.close()
    assert seen == [{"distributed.worker.profile.enabled": False, "distributed.admin.tick.interval": "1s",
                     "distributed.worker.memory.monitor-interval": "1s"}]


def _reused_memory_faults() -> int:
    """Minor page faults of a new thread that allocates and frees arrays of 1-17 MB (as a partition task's thread
    does), after another such thread ran: glibc's default malloc gives each thread fresh pages (12k faults)."""
    import resource
    import threading

    import numpy as np

    faults = []

    def task() -> None:
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        for _ in range(6):
            arrays = [np.ones(n << 20, dtype=np.uint8) for n in (3, 9, 1, 17, 6)]
            del arrays
        faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)

    for _ in range(2):
        thread = threading.Thread(target=task)
        thread.start()
        thread.join()
    return faults[-1]


def test_the_workers_local_n_starts_reuse_freed_memory(tmp_path):
    """The spawned workers of local:N allocate as the embedded engine's forked ones (keep_freed_memory): without
    it they took 11-20x the page faults at 1M documents, 2.4-2.9x the system time (bench/RESULTS.md, Dask engine)."""
    engine = DaskEngine.connect("local:1", None, workdir=tmp_path)
    try:
        faults = list(engine.client.run(_reused_memory_faults).values())
    finally:
        engine.close()
    assert len(faults) == 1 and faults[0] < 1000  # 12,000 with glibc's defaults


def _megabyte(i: int) -> bytes:
    return bytes([i]) * (1 << 20)


def _bytes_sent(dask_worker) -> int:
    return dask_worker.transfer_outgoing_bytes_total


def test_each_result_crosses_from_its_worker_once(local_cluster):
    """DaskEngine.map fetches each task's result once: it used to fetch each as its task completed, and all of
    them again at the end (the shingle tasks' catalog columns are ~150 bytes a document)."""
    with distributed.Client(local_cluster.scheduler_address, set_as_default=False) as client:
        engine = DaskEngine(client, local_cluster.scheduler_address)
        before = sum(client.run(_bytes_sent).values())
        results = engine.map(_megabyte, range(6))
        sent = sum(client.run(_bytes_sent).values()) - before
    assert results == [bytes([i]) * (1 << 20) for i in range(6)]
    assert 6 << 20 <= sent < 7 << 20  # 12 MB before


def _touch(path: str) -> str:
    Path(path).touch()
    return path


def test_a_stream_of_tasks_starts_on_the_workers_while_it_is_produced(tmp_path, local_cluster):
    """A stream (a folder being listed) is submitted as it goes: its first task runs before the stream ends. It was
    made a list first, so a listing of 1M files (4.5 s) passed before the workers had anything to do."""
    first, second = str(tmp_path / "first"), str(tmp_path / "second")

    def stream():
        yield first
        wait_for(lambda: os.path.exists(first), 10, "the first task")  # on a worker, before the stream ends
        yield second

    with distributed.Client(local_cluster.scheduler_address, set_as_default=False) as client:
        assert DaskEngine(client, local_cluster.scheduler_address).map(_touch, stream()) == [first, second]


def test_local_n_starts_its_cluster_while_the_client_lists(tmp_path, monkeypatch):
    """local:N's cluster (2.1 s of wall: spawned workers that import Dask) starts while the first stage's stream
    is produced: here it may not start until the stream has ended. It used to start before connect returned."""
    import threading

    listed, real = threading.Event(), distributed.LocalCluster

    def cluster(*args, **kwargs):
        assert listed.wait(10), "the cluster was started before the listing"
        return real(*args, **kwargs)

    monkeypatch.setattr(distributed, "LocalCluster", cluster)
    files = [str(tmp_path / name) for name in "ab"]

    def stream():
        yield from files
        listed.set()

    engine = DaskEngine.connect("local:1", None, workdir=tmp_path)
    try:
        assert engine.map(_touch, stream()) == files
    finally:
        engine.close()


def test_stages_chained_on_a_cluster_resume_from_the_embedded_run(corpus, tmp_path, local_cluster):
    """Any stage can run on the cluster over a work dir the embedded engine started, and the reverse."""
    folder, _ = corpus
    w = tmp_path / "w"
    assert invoke("-w", w, "shingle", folder, "--partition-docs", 30, "-j", 1).exit_code == 0
    on_dask = invoke("-w", w, "signature", "band", "--threshold", 0.6, "candidates", "verify", "--scheduler",
                     local_cluster.scheduler_address)
    assert on_dask.exit_code == 0, on_dask.stderr
    assert on_dask.stdout_bytes == embedded(tmp_path / "e", "run", folder, "--threshold", 0.6, "--partition-docs", 30)


def test_end_to_end_with_dask_scheduler_and_worker_processes(corpus, tmp_path, dask_processes, monkeypatch):
    """(c) `dask scheduler` and two `dask worker`s started as a user would, the CLI in a process of its own. Paths
    are relative, as typed in a shell, while the workers run in another directory (/)."""
    folder, _ = corpus
    scheduler_file, _ = dask_processes
    monkeypatch.chdir(tmp_path)
    args = ["run", os.path.relpath(folder), "--threshold", 0.5, "--format", "jsonl", "--partition-docs", 25]
    truth = embedded("e", *args)
    result = neardup(*args, "-w", "d", "--scheduler-file", scheduler_file, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == truth
    assert b"warning: 2 of 2 workers run with MALLOC_TRIM_THRESHOLD_=65536" in result.stderr  # `dask worker`'s


def test_a_worker_killed_mid_run_never_gives_wrong_output(tmp_path, dask_processes):
    """(d) A third worker (no nanny: its death is final) is killed with SIGKILL once the run is under way. Dask
    re-runs its tasks on the others: the run completes with the embedded bytes, or fails with a one-line error."""
    folder = tmp_path / "docs"
    generate_corpus(folder, n_base=900, seed=3)  # 1,500 documents, 150 partitions of 10: ~4 s on this cluster
    args = ["run", folder, "--partition-docs", 10, "--format", "jsonl"]
    truth = embedded(tmp_path / "e", *args)
    scheduler_file, address = dask_processes
    victim = start_worker(scheduler_file, tmp_path / "victim.log", "--no-nanny")
    try:
        wait_for(lambda: workers_of(address) >= 3, 60, "the third worker")
        w = tmp_path / "d"
        run = subprocess.Popen([sys.executable, "-m", "nearDup", *map(str, args), "-w", str(w), "--scheduler-file",
                                str(scheduler_file)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
        wait_for(lambda: len(list((w / "shingle").glob("*.done.json"))) >= 20 if (w / "shingle").exists() else 0,
                 120, "20 partitions shingled")
        assert run.poll() is None, "the run ended before the worker could be killed: use a larger corpus"
        os.killpg(victim.pid, signal.SIGKILL)
        stdout, stderr = run.communicate(timeout=300)
    finally:
        stop([victim])
    if run.returncode == 0:
        assert stdout == truth
        assert {name: data for name, data in stage_files(w).items() if not name.endswith(".tmp")} == \
            stage_files(tmp_path / "e")  # the killed worker may leave a temporary file, never a wrong one
    else:
        assert run.returncode == 2 and stdout == b"", stderr.decode()
        errors = [line for line in stderr.decode().splitlines() if "error" in line.lower()]
        assert len(errors) == 1 and errors[0].startswith("neardup: error: "), stderr.decode()


# ------------------------------------------------------------------------------------------ clear errors

def one_line_error(result) -> str:
    stderr = result.stderr if isinstance(result.stderr, str) else result.stderr.decode()
    assert getattr(result, "returncode", getattr(result, "exit_code", None)) == 2
    lines = [line for line in stderr.strip().splitlines() if not line.startswith("dask: ")]  # which cluster
    assert len(lines) == 1 and lines[0].startswith("neardup: error: ") and "Traceback" not in stderr, stderr
    return lines[0]


def test_without_the_dask_extra_the_error_says_what_to_install(tmp_path):
    """(e) `import distributed` fails (as when the extra is not installed): one line, exit 2."""
    code = ("import sys; sys.modules['distributed'] = None; from nearDup.cli import main; "
            f"sys.argv = ['neardup', '-w', {str(tmp_path / 'w')!r}, 'run', 'sample_corpus', '--scheduler', 'local:2']; "
            "main()")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 2 and result.stdout == ""
    assert one_line_error(result) == "neardup: error: --scheduler needs the dask extra: pip install 'nearDup[dask]'"


@pytest.mark.parametrize("options,message", [
    (["--scheduler", "head-node"], "--scheduler head-node: expected a scheduler address tcp://HOST:PORT"),
    (["--scheduler", "local:0"], "local:N needs a number of workers N >= 1"),
    (["--scheduler", "local:2", "--jobs", 2], "--jobs sets the embedded engine's processes"),
    (["--scheduler", "local:2", "--scheduler-file", "s.json"], "give --scheduler or --scheduler-file, not both"),
    (["--scheduler", "tcp://127.0.0.1:9"], "cannot connect to the Dask scheduler at tcp://127.0.0.1:9"),
    (["--scheduler-file", "missing.json"], "--scheduler-file missing.json: no such file after 1 s; start the "
                                           "scheduler with `dask scheduler --scheduler-file missing.json`"),
])
def test_unusable_scheduler_options_give_one_line(tmp_path, monkeypatch, options, message):
    import dask

    monkeypatch.chdir(tmp_path)
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):  # fail in 1 s, not 30
        result = invoke("-w", tmp_path / "w", "run", SAMPLE, *options)
    assert result.exit_code == 2 and result.stdout == ""
    assert message in one_line_error(result)


def test_a_task_error_on_a_worker_is_the_same_one_line_as_embedded(tmp_path, local_cluster):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "text": "one two three four five six"}\nnot json\n')
    args = ["run", "--jsonl", bad, "--strict"]
    here = invoke("-w", tmp_path / "e", *args, "-j", 1)
    there = invoke("-w", tmp_path / "d", *args, "--scheduler", local_cluster.scheduler_address)
    assert here.exit_code == there.exit_code == 2
    assert one_line_error(there) == one_line_error(here)
    assert "2: not a JSON object" in here.stderr


def test_workers_without_nearDup_are_named(tmp_path, dask_processes):
    """A worker whose Python cannot import nearDup (here: a broken nearDup first on its path) joins the cluster:
    the run stops before any work, naming the problem. (Unpickling the check kills that worker.)"""
    fake = tmp_path / "fake" / "nearDup"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named nearDup (simulated)')\n")
    scheduler_file, address = dask_processes
    before = workers_of(address)
    broken = start_worker(scheduler_file, tmp_path / "worker.log", "--no-nanny", env={"PYTHONPATH": str(fake.parent)})
    try:
        wait_for(lambda: workers_of(address) > before, 60, "the worker without nearDup")
        result = neardup("-w", tmp_path / "w", "run", SAMPLE, "--scheduler", address)
    finally:
        stop([broken])
    line = one_line_error(result)
    assert line.startswith(f"neardup: error: workers at {address} cannot import nearDup")
    assert line.endswith("install nearDup on every worker")
