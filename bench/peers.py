"""Run ONE benchmark configuration in this process and print one JSON line of results.

    python bench/peers.py --tool neardup|datasketch|rensa --corpus DIR [--jobs J] [--pairs FILE]

All three tools end with verified pairs (exact Jaccard >= 0.8 of the candidates of MinHash LSH with b=9 bands of
r=13 rows, num_perm 128):

Every tool runs as a child process of this one and is measured from outside in the same way: CPU = user+sys of
resource.getrusage(RUSAGE_CHILDREN) (so neardup's worker processes are included), peak RSS = its ru_maxrss,
wall = time.perf_counter() around the child (interpreter start-up and imports included for every tool).

- neardup: the CLI end to end, `neardup run DIR --threshold 0.8 --num-perm 128 --bands 9 --rows 13
  -w <fresh tmp dir> --jobs J`. Candidates parsed from its stderr line `candidates: N pairs ...`.
  --neardup-source DIR runs the `neardup` command with DIR first on PYTHONPATH (bench/run.py uses it to measure
  a `git archive` snapshot of one commit while the work tree may be changing).
- datasketch / rensa: the child (this script with --worker) reads the files, shingles them with the common Python
  shingler (common.py), builds MinHashes, inserts them all into the LSH index then queries each one, and verifies
  every candidate pair with exact Jaccard of the Python sets; it reports seconds per phase.
  datasketch: MinHash(num_perm=128) (the permutations drawn once and passed to every MinHash, a speed-up over the
  default) with update_batch; MinHashLSH(threshold=0.8, num_perm=128, params=(9, 13)).
  rensa: RMinHashLSH requires num_perm divisible by num_bands, so it is given num_perm 117 = 9 x 13 (the same
  b=9, r=13 banding; nearDup and datasketch also band only 117 of their 128 rows); RMinHash.from_token_sets
  (seed 42), RMinHashLSH(threshold=0.8, num_perm=117, num_bands=9) insert_many then query_all.

JSON fields: tool, jobs, corpus, docs, bytes, cpu_s (user+sys), user_s, sys_s, wall_s, mb_s (MB / wall),
mb_s_per_core (MB / cpu s), peak_rss_mb (ru_maxrss: the largest single process), tree_rss_mb (peak of the RSS
summed over the process tree, sampled every 0.1 s; counts shared copy-on-write pages once per worker), candidates,
pairs, phases (seconds per phase, peers only), others_cpu_s (CPU seconds the rest of the machine spent during the
run, from /proc/stat: other sessions' load), pairs_file. Before each run the corpus is read once, unmeasured, so
every tool starts with its files in the page cache.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common

MB = 1e6


def corpus_size(root: str) -> tuple[int, int]:
    files = common.list_corpus(root)
    return len(files), sum(os.path.getsize(p) for _, p in files)


class TreeRss(threading.Thread):
    """Samples the summed RSS of a process and its descendants every `interval` seconds; keeps the peak."""

    def __init__(self, pid: int, interval: float = 0.1):
        super().__init__(daemon=True)
        self.pid, self.interval, self.peak = pid, interval, 0
        self.window = 0  # the peak since the last mark()
        self.stop = threading.Event()

    def mark(self) -> int:
        """The peak since the last mark (or the start); a new window starts."""
        peak, self.window = self.window, 0
        return peak

    def run(self) -> None:
        try:
            root = psutil.Process(self.pid)
        except psutil.Error:
            return
        while not self.stop.is_set():
            total = 0
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                break
            for p in procs:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)
            self.window = max(self.window, total)
            self.stop.wait(self.interval)


def machine_busy_s() -> float:
    """CPU seconds spent by the whole machine so far (all cores, everything but idle and iowait), /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def warm_cache(root: str) -> None:
    """Read every file once, unmeasured, so each tool starts with the corpus in the page cache (this machine's
    page cache is sometimes dropped between runs, which made the first reader pay for the disk)."""
    for _, path in common.list_corpus(root):
        with open(path, "rb") as f:
            while f.read(1 << 20):
                pass


class Child:
    """A child process measured from its start (after common.settle()): ended(), once it is reaped, gives its wall
    time, the CPU of its process tree (rusage of the reaped children), the tree's peak RSS sampled every 0.1 s
    (TreeRss) and the CPU the rest of the machine used meanwhile. measure() here, bench/joins.py and bench/big.py
    time their runs with it."""

    def __init__(self, cmd: list[str], stdout, env: dict | None = None):
        common.settle()
        self.before = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.busy0 = machine_busy_s()
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE, env=env)
        self.sampler = TreeRss(self.proc.pid)
        self.sampler.start()

    def ended(self) -> dict:
        """wall, utime, stime (s), maxrss_kb (the largest reaped child), tree_peak (bytes), others_cpu_s."""
        wall = time.perf_counter() - self.t0
        self.sampler.stop.set()
        self.sampler.join()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        utime, stime = after.ru_utime - self.before.ru_utime, after.ru_stime - self.before.ru_stime
        return {"wall": wall, "utime": utime, "stime": stime, "maxrss_kb": after.ru_maxrss,
                "tree_peak": self.sampler.peak,
                "others_cpu_s": max(0.0, machine_busy_s() - self.busy0 - utime - stime)}


def measure(cmd: list[str], stdout, env: dict | None = None) -> tuple[dict, str, int, int]:
    """Run cmd as a child process; (rusage-derived numbers without bytes, stderr, exit code, tree RSS peak)."""
    child = Child(cmd, stdout, env)
    _, err = child.proc.communicate()
    m = child.ended()
    return ({k: m[k] for k in ("utime", "stime", "maxrss_kb", "wall", "others_cpu_s")},
            err.decode("utf-8", "replace"), child.proc.returncode, m["tree_peak"])


def _numbers(m: dict, nbytes: int, tree_peak: int) -> dict:
    cpu = m["utime"] + m["stime"]
    wall = m["wall"]
    return {"cpu_s": round(cpu, 3), "user_s": round(m["utime"], 3), "sys_s": round(m["stime"], 3),
            "wall_s": round(wall, 3), "mb_s": round(nbytes / MB / wall, 3) if wall else None,
            "mb_s_per_core": round(nbytes / MB / cpu, 3) if cpu else None,
            "peak_rss_mb": round(m["maxrss_kb"] / 1024, 1), "tree_rss_mb": round(tree_peak / MB, 1),
            "others_cpu_s": round(m["others_cpu_s"], 2)}


def neardup_env(source: str | None) -> dict | None:
    """The environment for `neardup`: with PYTHONPATH=source, that copy of the nearDup package is imported (it
    comes before the editable install's finder on the import path); None: the installed `neardup` as it is."""
    if not source:
        return None
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.abspath(source) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_neardup(corpus: str, jobs: int, pairs_file: str | None, extra: list[str], source: str | None) -> dict:
    docs, nbytes = corpus_size(corpus)
    warm_cache(corpus)
    work_parent = tempfile.mkdtemp(prefix="neardup-bench-")
    work = os.path.join(work_parent, "w")
    cmd = ["neardup", "run", corpus, "--threshold", str(common.THRESHOLD), "--num-perm", str(common.NUM_PERM),
           "--bands", str(common.BANDS), "--rows", str(common.ROWS), "-w", work, "--jobs", str(jobs), *extra]
    raw = os.path.join(work_parent, "pairs.raw")
    try:
        with open(raw, "wb") as out:
            m, err, code, tree_peak = measure(cmd, out, neardup_env(source))
        if code != 0:
            raise SystemExit(f"neardup exited {code}: {err.strip()[-2000:]}")
        cand = re.search(r"^candidates: (\d+) pairs", err, re.M)
        prefix = corpus.rstrip("/") + "/"
        pairs = {}
        with open(raw, encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                j, a, b = line.rstrip("\n").split("\t")
                a, b = a.removeprefix(prefix), b.removeprefix(prefix)
                pairs[(min(a, b), max(a, b))] = float(j)
        if pairs_file:
            common.write_pairs(pairs_file, pairs)
        work_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(work) for f in fs)
    finally:
        shutil.rmtree(work_parent, ignore_errors=True)
    return {"tool": "neardup", "jobs": jobs, "corpus": corpus, "docs": docs, "bytes": nbytes,
            **_numbers(m, nbytes, tree_peak), "candidates": int(cand.group(1)) if cand else None,
            "pairs": len(pairs), "workdir_mb": round(work_bytes / MB, 1), "stderr": err.strip().splitlines(),
            "pairs_file": pairs_file}


def run_peer_measured(tool: str, corpus: str, pairs_file: str | None) -> dict:
    """The peer in a child process (this script with --worker), measured from outside exactly like neardup."""
    warm_cache(corpus)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--tool", tool, "--corpus", corpus]
    if pairs_file:
        cmd += ["--pairs", pairs_file]
    with tempfile.TemporaryFile() as out:
        m, err, code, tree_peak = measure(cmd, out)
        out.seek(0)
        text = out.read().decode()
    if code != 0:
        raise SystemExit(f"{tool} worker exited {code}: {err.strip()[-2000:]}")
    inner = json.loads(text)
    return {"tool": tool, "jobs": 1, "corpus": corpus, "docs": inner["docs"], "bytes": inner["bytes"],
            **_numbers(m, inner["bytes"], tree_peak), "candidates": inner["candidates"], "pairs": inner["pairs"],
            "phases": inner["phases"], "pairs_file": pairs_file}


def run_peer(tool: str, corpus: str, pairs_file: str | None) -> dict:
    phases = {}
    t = time.perf_counter()
    files = common.list_corpus(corpus)
    texts = [common.read_text(p) for _, p in files]
    ids = [i for i, _ in files]
    nbytes = sum(os.path.getsize(p) for _, p in files)
    phases["read"] = time.perf_counter() - t

    t = time.perf_counter()
    sets = [common.shingles(text) for text in texts]
    del texts
    phases["shingle"] = time.perf_counter() - t
    keep = [i for i, s in enumerate(sets) if s]  # documents with no shingle are never paired (as in nearDup)

    candidates: set[tuple[int, int]] = set()
    if tool == "datasketch":
        from datasketch import MinHash, MinHashLSH

        t = time.perf_counter()
        first = MinHash(num_perm=common.NUM_PERM)
        mhs = {}
        for i in keep:
            m = MinHash(num_perm=common.NUM_PERM, permutations=first.permutations, scheme=first.scheme)
            m.update_batch(list(sets[i]))
            mhs[i] = m
        phases["minhash"] = time.perf_counter() - t
        t = time.perf_counter()
        lsh = MinHashLSH(threshold=common.THRESHOLD, num_perm=common.NUM_PERM, params=(common.BANDS, common.ROWS))
        for i in keep:
            lsh.insert(i, mhs[i])
        for i in keep:
            for j in lsh.query(mhs[i]):
                if j != i:
                    candidates.add((i, j) if i < j else (j, i))
        phases["lsh"] = time.perf_counter() - t
    elif tool == "rensa":
        from rensa import RMinHash, RMinHashLSH

        num_perm = common.BANDS * common.ROWS  # rensa needs num_perm % num_bands == 0: 117 = 9 x 13
        t = time.perf_counter()
        mhs = RMinHash.from_token_sets([list(sets[i]) for i in keep], num_perm, 42)
        phases["minhash"] = time.perf_counter() - t
        t = time.perf_counter()
        lsh = RMinHashLSH(common.THRESHOLD, num_perm, common.BANDS)
        lsh.insert_many(mhs)
        for qi, found in enumerate(lsh.query_all(mhs)):
            i = keep[qi]
            for key in found:
                j = keep[key]
                if j != i:
                    candidates.add((i, j) if i < j else (j, i))
        phases["lsh"] = time.perf_counter() - t
    else:
        raise SystemExit(f"unknown tool {tool}")

    t = time.perf_counter()
    pairs = {}
    for i, j in candidates:
        jac = common.jaccard(sets[i], sets[j])
        if jac >= common.THRESHOLD:
            a, b = ids[i], ids[j]
            pairs[(min(a, b), max(a, b))] = jac
    phases["verify"] = time.perf_counter() - t
    if pairs_file:
        common.write_pairs(pairs_file, pairs)

    return {"docs": len(files), "bytes": nbytes, "candidates": len(candidates), "pairs": len(pairs),
            "phases": {k: round(v, 3) for k, v in phases.items()}}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", required=True, choices=["neardup", "datasketch", "rensa"])
    ap.add_argument("--corpus", required=True, help="folder of documents")
    ap.add_argument("--jobs", type=int, default=1, help="neardup --jobs (the peers are single-threaded)")
    ap.add_argument("--pairs", help="write the verified pairs here (jaccard<TAB>a<TAB>b, ids relative to DIR)")
    ap.add_argument("--neardup-arg", action="append", default=[], help="extra argument for `neardup run`")
    ap.add_argument("--neardup-source", help="folder holding a nearDup package to run instead of the installed one "
                                             "(put first on PYTHONPATH of the `neardup` command)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # the measured child of a peer
    args = ap.parse_args(argv)
    if args.tool == "neardup":
        res = run_neardup(args.corpus, args.jobs, args.pairs, args.neardup_arg, args.neardup_source)
    elif args.worker:
        res = run_peer(args.tool, args.corpus, args.pairs)
    else:
        res = run_peer_measured(args.tool, args.corpus, args.pairs)
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
