"""The embedded engine against the Dask engine (`--scheduler local:2`) on the scale corpus: wall and CPU seconds.

    python bench/engines.py                  scale-1m (1,000,000 documents, ~1 GB), 3 repetitions
    python bench/engines.py --docs 100000    scale-100k
    python bench/engines.py --quick          scale-10k, 1 repetition (a smoke test, ~1 minute)

Every configuration runs `neardup run DOCS --threshold 0.8 --num-perm 128 --bands 9 --rows 13 -w <fresh dir>`
plus its engine options as a whole process, measured like bench/run.py's runs (bench/peers.py `measure`: CPU =
user + sys of the process and every child it waited for, which includes the LocalCluster's worker processes:
nearDup starts them and reaps them when it closes the cluster; others' load = CPU the rest of the machine spent
meanwhile). Repetitions are interleaved; medians are reported. The stdout of every run must be byte-identical to
the embedded --jobs 1 run's, or the benchmark stops. The corpus is built with bench/corpora.py into
bench/out/corpora/scale-<N>/ (the same place as bench/run.py's; no ground truth is needed here, since the
embedded run is the reference). The nearDup measured is a `git archive` snapshot of --rev, as in bench/run.py.

The report replaces the table of the "Dask engine" section of bench/RESULTS.md where it stands, keeping the
analyses written after it (### subsections); bench/run.py keeps that section when it rewrites the rest of the file;
raw results are appended to bench/out/engines.jsonl.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out")
sys.path.insert(0, HERE)
import peers  # noqa: E402

import common  # noqa: E402
import run as bench_run  # noqa: E402

BEGIN, END = bench_run.ENGINES_SECTION
CONFIGS = [("embedded --jobs 1", ["--jobs", "1"]), ("embedded --jobs 2", ["--jobs", "2"]),
           ("dask --scheduler local:2", ["--scheduler", "local:2"])]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def ensure_scale_corpus(docs: int) -> tuple[str, dict]:
    """bench/out/corpora/scale-<N>/ (built once: its meta.json is written last)."""
    name = f"scale-{docs // 1_000_000}m" if docs % 1_000_000 == 0 else f"scale-{docs // 1000}k"
    dest = os.path.join(OUT, "corpora", name)
    meta_path = os.path.join(dest, "meta.json")
    meta = json.load(open(meta_path)) if os.path.exists(meta_path) else None
    if not meta or meta.get("kind") != "scale" or meta.get("docs") != docs or meta.get("seed") != 1:
        log(f"building {name}")
        subprocess.run([sys.executable, os.path.join(HERE, "corpora.py"), "scale", str(docs), dest], check=True)
        meta = json.load(open(meta_path))
    return os.path.join(dest, "docs"), {**meta, "name": name}


def run_once(docs_dir: str, options: list[str], env: dict | None) -> tuple[dict, bytes]:
    """One whole `neardup run` in a fresh work dir, measured from a child process of its own (so that ru_maxrss
    is this run's, not the largest of every run so far): its numbers and its stdout."""
    parent = tempfile.mkdtemp(prefix="neardup-engines-")
    try:
        out = os.path.join(parent, "stdout")
        child = subprocess.run([sys.executable, os.path.abspath(__file__), "--measure", docs_dir, out, "--",
                                *options], env=env, capture_output=True, text=True)
        if child.returncode != 0:
            raise SystemExit(child.stderr[-3000:])
        with open(out, "rb") as f:
            return json.loads(child.stdout), f.read()
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def measure(docs_dir: str, out: str, options: list[str]) -> dict:
    """(In the child) warm the page cache, run neardup with its stdout to out, return the numbers."""
    peers.warm_cache(docs_dir)
    cmd = ["neardup", "run", docs_dir, "--threshold", str(common.THRESHOLD), "--num-perm", str(common.NUM_PERM),
           "--bands", str(common.BANDS), "--rows", str(common.ROWS), "-w", os.path.join(os.path.dirname(out), "w"),
           *options]
    with open(out, "wb") as f:
        m, err, code, tree_peak = peers.measure(cmd, f, None)  # the environment is this process's (PYTHONPATH)
    if code != 0:
        raise SystemExit(f"failed ({code}): {shlex.join(cmd)}\n{err[-2000:]}")
    return {"cpu_s": round(m["utime"] + m["stime"], 2), "user_s": round(m["utime"], 2),
            "sys_s": round(m["stime"], 2), "wall_s": round(m["wall"], 2),
            "peak_rss_mb": round(m["maxrss_kb"] / 1024), "tree_rss_mb": round(tree_peak / 1e6),
            "others_load": round(m["others_cpu_s"] / m["wall"], 2), "stderr": err.strip().splitlines()}


def report(args, meta: dict, runs: dict[str, list[dict]], started: float, sha: str) -> str:
    med = lambda label, key: statistics.median(r[key] for r in runs[label])
    base = CONFIGS[1][0]  # the embedded engine as run by default on this 2-core machine
    lines = [BEGIN, "## Dask engine: embedded vs `--scheduler local:2`\n",
             f"- date: {datetime.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}, took "
             f"{(time.time() - started) / 60:.1f} min; machine: {len(os.sched_getaffinity(0))} usable cores, "
             f"{bench_run._mem_gb()} RAM, {bench_run._cpu_model()}; Python {platform.python_version()}, dask "
             f"{bench_run._version('dask')}, distributed {bench_run._version('distributed')}, "
             f"nearDup commit {sha[:12]}",
             f"- command: `{shlex.join(['python', 'bench/engines.py', *sys.argv[1:]])}` ({args.reps} repetition(s) "
             f"per configuration, interleaved; medians)",
             f"- corpus `{meta['name']}`: {meta['docs']:,} documents, {meta['bytes'] / 1e6:.1f} MB (bench/corpora.py "
             f"scale); `neardup run DOCS --threshold 0.8 --num-perm 128 --bands 9 --rows 13 -w <fresh dir>` plus the "
             f"engine's options; the work dir on the local disk (shared by the workers trivially)",
             "- stdout of every run byte-identical to the embedded --jobs 1 run: yes (checked; the benchmark stops "
             "otherwise)", "",
             "| engine | wall s | CPU s (user + sys) | wall vs embedded --jobs 2 | CPU vs embedded --jobs 2 | peak RSS "
             "MB (largest process) | tree RSS MB | others' load | runs: wall s / CPU s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for label, _ in CONFIGS:
        walls = ", ".join(f"{r['wall_s']:.1f} / {r['cpu_s']:.1f}" for r in runs[label])
        lines.append(f"| {label} | {med(label, 'wall_s'):.1f} | {med(label, 'cpu_s'):.1f} ({med(label, 'user_s'):.0f} "
                     f"+ {med(label, 'sys_s'):.0f}) | "
                     f"{med(label, 'wall_s') / med(base, 'wall_s'):.2f}x | "
                     f"{med(label, 'cpu_s') / med(base, 'cpu_s'):.2f}x | {med(label, 'peak_rss_mb'):.0f} | "
                     f"{med(label, 'tree_rss_mb'):.0f} | {med(label, 'others_load'):.2f} | "
                     f"{walls} |")
    lines += ["", "Ratios > 1 mean slower than the embedded engine with both cores. CPU s counts the whole process "
              "tree (for Dask: client, scheduler thread, nannies and worker processes); tree RSS sums it. Others' "
              "load is the CPU the rest of the machine used during the run, in cores: at ~1 another session had "
              "one of the 2 cores, and wall times stretch.", "",
              "nearDup's stderr with `--scheduler local:2`:", "", "```", *runs[CONFIGS[2][0]][-1]["stderr"], "```",
              END]
    return "\n".join(lines) + "\n"


def write_section(path: str, section: str) -> None:
    """Replace the marked section of path where it is (or append it), leaving the rest of the file as it is. The
    analyses written by hand after the table (### subsections, up to the end marker) are kept after the new table:
    a rerun replaced them too."""
    text = open(path).read() if os.path.exists(path) else ""
    if BEGIN not in text or END not in text:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        a, b = text.index(BEGIN), text.index(END)
        notes = text[a:b][text[a:b].index("\n### ") + 1:] if "\n### " in text[a:b] else ""
        text = text[:a] + section[:section.index(END)] + notes + text[b:]
    with open(path, "w") as f:
        f.write(text)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=1_000_000, help="documents in the scale corpus [default: 1000000]")
    ap.add_argument("--quick", action="store_true", help="scale-10k, 1 repetition")
    ap.add_argument("--reps", type=int, help="repetitions per configuration [default: 3, --quick: 1]")
    ap.add_argument("--rev", default="HEAD", help="the commit of nearDup to measure [default: HEAD]")
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"), help="report [default: bench/RESULTS.md]")
    ap.add_argument("--measure", nargs=2, metavar=("DOCS", "STDOUT"), help=argparse.SUPPRESS)  # one run (child)
    ap.add_argument("options", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(*args.measure, args.options)))
        return
    docs = 10_000 if args.quick else args.docs
    args.reps = args.reps or (1 if args.quick else 3)
    started = time.time()
    os.makedirs(OUT, exist_ok=True)
    source, sha = bench_run.neardup_snapshot(args.rev)
    env = peers.neardup_env(source)  # PYTHONPATH: the LocalCluster's worker processes inherit it
    docs_dir, meta = ensure_scale_corpus(docs)
    runs: dict[str, list[dict]] = {label: [] for label, _ in CONFIGS}
    reference = None
    for rep in range(args.reps):
        for label, options in CONFIGS:
            log(f"{meta['name']}: {label}, repetition {rep + 1}/{args.reps}")
            numbers, stdout = run_once(docs_dir, options, env)
            digest = hashlib.sha256(stdout).hexdigest()
            reference = reference or digest
            if digest != reference:
                raise SystemExit(f"{label}: stdout differs from the embedded run's ({digest} != {reference})")
            pairs = stdout.count(b"\n")
            log(f"  wall {numbers['wall_s']:.1f} s, cpu {numbers['cpu_s']:.1f} s, others' load "
                f"{numbers['others_load']:.2f}, {pairs} pairs")
            runs[label].append(numbers)
            with open(os.path.join(OUT, "engines.jsonl"), "a") as f:
                f.write(json.dumps({"started": started, "corpus": meta["name"], "config": label, "sha": sha,
                                    "stdout_sha256": digest, **numbers}) + "\n")
    write_section(args.out, report(args, meta, runs, started, sha))
    log(f"wrote the Dask engine section of {args.out}")


if __name__ == "__main__":
    main()
