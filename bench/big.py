"""Ten million documents on one machine (#23): scale corpora as JSONL shards, and `neardup run --jsonl` on them.

    python bench/big.py build N [--corpora DIR]            the corpus scale-<N>-jsonl (e.g. N = 1000000)
    python bench/big.py run [--docs 1000000 3000000 10000000] [--corpora DIR] [--reps 1] [--scheduler local:2]

build: N documents of ~1 KB made like corpora.build_scale's (words drawn independently from the imdb word
frequencies of the top 50k words, ~1% edited copies of earlier documents at word-edit rates 0.5/1/2/4%, the same
reservoir: corpora.Copies), written as JSONL shards of 100,000 records {"id": "%08d", "text": ...} into
DIR/scale-<N>-jsonl/shard-NNNNN.jsonl, with injected.tsv (copied id, copy's id, rate, exact Jaccard of their word
5-shingles, common.py) and meta.json (written last: a corpus without it is incomplete and is built again). Shards,
not a file per document: 10M files would take ~40 GB of 4 KB blocks. The words are drawn with an alias table and
joined as bytes by numpy (corpora.build_scale's np.random.choice and one str.join per document would take ~20
minutes at 10M). DIR defaults to bench/out/corpora beside this script (outside git).

run: per size, `neardup run --jsonl 'DIR/scale-<N>-jsonl/shard-*.jsonl' --threshold 0.8 --num-perm 128 --bands 9
--rows 13 --jobs 2 -w <fresh dir>` (or `--scheduler local:2`: the Dask engine) as one process, measured as
bench/peers.py measures (CPU of the process tree, peak RSS summed over the tree sampled every 0.1 s, the CPU the rest
of the machine spent meanwhile), and the main process's own peak (its VmHWM, read at each line it writes: the
client of a Dask run, issue 23's 1 GB). Each stage's line on stderr is time-stamped with the tree's peak RSS since
the line before and the main process's RSS then: where the memory goes. Recall of the injected copies whose exact
Jaccard is >= 0.8 is checked on the pairs printed. The section between the markers in bench/RESULTS.md is replaced
(a Dask run's has its own markers); raw results go to bench/out/big.jsonl.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out")
sys.path.insert(0, HERE)
import corpora  # noqa: E402
import peers  # noqa: E402

import common  # noqa: E402
import run as bench_run  # noqa: E402

BEGIN, END = "<!-- bench/big.py: begin -->", "<!-- bench/big.py: end -->"
MB = 1e6
SHARD_DOCS = 100_000
BATCH = 10_000  # documents drawn at once: ~2M words, ~100 MB of index arrays


def corpus_dir(corpora_dir: str, n: int) -> str:
    label = f"{n // 1_000_000}m" if n % 1_000_000 == 0 else f"{n // 1000}k" if n % 1000 == 0 else str(n)
    return os.path.join(corpora_dir, f"scale-{label}-jsonl")


def alias_table(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Walker's alias method (Vose's construction): draw k uniform in [0, n) and u uniform in [0, 1); the outcome is
    k if u < prob[k], else alias[k]. Each outcome i then has probability p[i] (Vose 1991, "A linear algorithm for
    generating random numbers with a given distribution"), at O(1) per draw instead of a binary search."""
    n = len(p)
    scaled = np.asarray(p, np.float64) * n / np.sum(p)
    prob, alias = np.ones(n), np.arange(n)
    small = [i for i in range(n) if scaled[i] < 1.0]
    large = [i for i in range(n) if scaled[i] >= 1.0]
    while small and large:
        s, g = small.pop(), large.pop()
        prob[s], alias[s] = scaled[s], g
        scaled[g] -= 1.0 - scaled[s]
        (small if scaled[g] < 1.0 else large).append(g)
    return prob, alias


def build(n: int, dest: str, seed: int = 1, dup_frac: float = 0.01) -> dict:
    """The corpus of n documents in dest (see the module docstring); deterministic for a seed."""
    vocab, p = corpora.imdb_vocabulary()
    words = [w.encode("utf-8") + b" " for w in vocab]  # \\w+ words: nothing JSON would escape
    lens = np.array([len(w) for w in words], np.int64)
    starts = np.r_[0, np.cumsum(lens)[:-1]]
    joined = np.frombuffer(b"".join(words), np.uint8)
    prob, alias = alias_table(p)
    gen = np.random.Generator(np.random.PCG64(seed))
    copies = corpora.Copies(random.Random(seed), vocab, dup_frac)
    tmp = dest + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    total = 0
    truth = open(os.path.join(tmp, "injected.tsv"), "w")
    for shard_lo in range(0, n, SHARD_DOCS):
        with open(os.path.join(tmp, f"shard-{shard_lo // SHARD_DOCS:05d}.jsonl"), "wb") as out:
            for lo in range(shard_lo, min(n, shard_lo + SHARD_DOCS), BATCH):
                hi = min(n, shard_lo + SHARD_DOCS, lo + BATCH)
                lengths = gen.integers(150, 221, size=hi - lo)  # ~180 words ~ 1 KB, as build_scale
                k = gen.integers(0, len(vocab), size=int(lengths.sum()))
                idx = np.where(gen.random(len(k)) < prob[k], k, alias[k])
                sizes = lens[idx]
                ends = np.cumsum(sizes)
                text = joined[np.repeat(starts[idx] - (ends - sizes), sizes) + np.arange(ends[-1])].tobytes()
                doc_ends = ends[np.cumsum(lengths) - 1].tolist()
                lines = []
                begin = 0
                for i, end in zip(range(lo, hi), doc_ends):
                    name = f"{i:08d}"
                    own = text[begin:end - 1]  # without the last word's space
                    copy = copies.next(name, lambda: own.decode("utf-8"))  # noqa: B023 (called at once)
                    if copy is not None:
                        rate = copies.injected[-1][2]
                        j = common.jaccard(common.shingles(copies.copied), common.shingles(copy))
                        truth.write(f"{copies.injected[-1][0]}\t{name}\t{rate}\t{j:.4f}\n")
                        own = copy.encode("utf-8")
                    lines.append(b'{"id":"%s","text":"%s"}\n' % (name.encode(), own))
                    total += len(own)
                    begin = end
                out.write(b"".join(lines))
        print(f"[{time.strftime('%H:%M:%S')}] {min(n, shard_lo + SHARD_DOCS):,} documents", file=sys.stderr)
    truth.close()
    meta = {"kind": "scale-jsonl", "docs": n, "seed": seed, "dup_frac": dup_frac, "rates": corpora.SCALE_RATES,
            "bytes": total, "shards": -(-n // SHARD_DOCS), "injected": len(copies.injected)}
    with open(os.path.join(tmp, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    shutil.rmtree(dest, ignore_errors=True)
    os.rename(tmp, dest)
    return meta


def measure(cmd: list[str], stdout) -> dict:
    """One run as a child process, measured as bench/peers.py measures, with its stderr lines as they come, each
    with its time, the tree's peak RSS since the line before and the main process's RSS then (stages)."""
    import psutil  # the bench extra, as peers.py

    child = peers.Child(cmd, stdout)
    proc, sampler, t0 = child.proc, child.sampler, child.t0
    main = psutil.Process(proc.pid)
    stages, main_peak = [], 0
    assert proc.stderr is not None
    for raw in proc.stderr:
        try:
            rss = main.memory_info().rss
        except psutil.Error:
            rss = 0
        main_peak = max(main_peak, _vm_hwm(proc.pid))
        stages.append({"t": round(time.perf_counter() - t0, 2), "line": raw.decode("utf-8", "replace").rstrip(),
                       "tree_peak_mb": round(sampler.mark() / MB), "main_rss_mb": round(rss / MB)})
    proc.wait()
    m = child.ended()
    if proc.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)} failed: {stages[-5:]}")
    return {"wall_s": round(m["wall"], 2), "cpu_s": round(m["utime"] + m["stime"], 2),
            "tree_rss_mb": round(m["tree_peak"] / MB), "maxrss_mb": round(m["maxrss_kb"] / 1024),
            "others_cpu_s": round(m["others_cpu_s"], 1), "main_peak_mb": round(main_peak / MB), "stages": stages}


def _vm_hwm(pid: int) -> int:
    """A live process's peak RSS so far (VmHWM, bytes), 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:")), 0)
    except OSError:
        return 0


def recall(corpus: str, pairs_tsv: str) -> tuple[int, int]:
    """(injected copies with exact Jaccard >= THRESHOLD found among the pairs printed, how many there are)."""
    truth = set()
    with open(os.path.join(corpus, "injected.tsv")) as f:
        for line in f:
            a, b, _, j = line.split("\t")
            if float(j) >= common.THRESHOLD:
                truth.add((min(a, b), max(a, b)))
    found = set(common.read_pairs(pairs_tsv))
    return len(truth & found), len(truth)


def run_sizes(args) -> None:
    results = []
    for n in args.docs:
        corpus = corpus_dir(args.corpora, n)
        if not os.path.exists(os.path.join(corpus, "meta.json")):
            sys.exit(f"{corpus}: no such corpus; build it with python bench/big.py build {n}")
        meta = json.load(open(os.path.join(corpus, "meta.json")))
        for rep in range(args.reps):
            parent = tempfile.mkdtemp(prefix="neardup-big-", dir=args.scratch)
            try:
                out = os.path.join(parent, "pairs.tsv")
                cmd = ["neardup", "run", "--jsonl", os.path.join(corpus, "shard-*.jsonl"), "--threshold",
                       str(common.THRESHOLD), "--num-perm", str(common.NUM_PERM), "--bands", str(common.BANDS),
                       "--rows", str(common.ROWS), *engine_options(args), "-w", os.path.join(parent, "w"),
                       "--format", "tsv"]
                with open(out, "wb") as f:
                    m = measure(cmd, f)
                m["found"], m["truth"] = recall(corpus, out)
                m["pairs"] = sum(1 for _ in open(out))
                work = os.path.join(parent, "w")
                m["workdir_mb"] = round(sum(os.path.getsize(os.path.join(d, x)) for d, _, xs in os.walk(work)
                                            for x in xs) / MB)
            finally:
                shutil.rmtree(parent, ignore_errors=True)
            m.update(docs=n, bytes=meta["bytes"], rep=rep + 1, jobs=args.jobs, scheduler=args.scheduler,
                     date=time.strftime("%Y-%m-%d %H:%M"), commit=bench_run._git_head())
            cand = [s["line"] for s in m["stages"] if s["line"].startswith("candidates:")]
            m["candidates"] = int(cand[-1].split()[1].replace(",", "")) if cand else None
            log(f"{n:,} documents rep {rep + 1}: wall {m['wall_s']} s, CPU {m['cpu_s']} s, tree RSS "
                f"{m['tree_rss_mb']} MB, main process's peak {m['main_peak_mb']} MB, others' CPU "
                f"{m['others_cpu_s']} s, {m['pairs']} pairs, recall "
                f"{m['found']}/{m['truth']}")
            for s in m["stages"]:
                log(f"  {s['t']:8.1f} s  tree peak {s['tree_peak_mb']:6d} MB  main {s['main_rss_mb']:6d} MB  "
                    f"{s['line'][:100]}")
            with open(os.path.join(OUT, "big.jsonl"), "a") as f:
                f.write(json.dumps(m) + "\n")
            results.append(m)
    report(args, results)


def engine_options(args) -> list[str]:
    return ["--scheduler", args.scheduler] if args.scheduler else ["--jobs", str(args.jobs)]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _marker(marker: str, args) -> str:
    """The markers of a section of Dask runs (kept apart from the embedded engine's)."""
    return marker.replace("bench/big.py:", f"bench/big.py --scheduler {args.scheduler}:")


def report(args, results: list[dict]) -> None:
    """The section between the markers in args.out: growth per size (medians over the repetitions), and where
    the memory goes at the largest size."""
    import statistics

    rows, by_size = [], {}
    for m in results:
        by_size.setdefault(m["docs"], []).append(m)
    first = None
    for n, runs in sorted(by_size.items()):
        med = {f: statistics.median(r.get(f, 0) for r in runs)
               for f in ("wall_s", "cpu_s", "tree_rss_mb", "main_peak_mb", "others_cpu_s")}
        first = first or (n, med)
        growth = (f"{med['wall_s'] / first[1]['wall_s']:.2f}x / {med['cpu_s'] / first[1]['cpu_s']:.2f}x / "
                  f"{n / first[0]:.0f}x" if n != first[0] else "1x")
        r = runs[0]
        rows.append(f"| {n:,} | {r['bytes'] / 1e9:.2f} | {med['wall_s']:.1f} | {med['cpu_s']:.1f} | "
                    f"{med['tree_rss_mb'] / 1000:.2f} | {med['main_peak_mb'] / 1000:.2f} | {r['candidates']:,} | "
                    f"{r['pairs']:,} | "
                    f"{r['found']:,} / {r['truth']:,} | {r['workdir_mb'] / 1000:.1f} | {growth} | "
                    f"{med['others_cpu_s']:.0f} | {r.get('commit', '?')}, {r['date']} |")
    largest = max(results, key=lambda m: (m["docs"], -m["wall_s"]))
    stages = [f"| {s['t']:.1f} | {s['tree_peak_mb']:,} | {s['main_rss_mb']:,} | `{s['line'][:90]}` |"
              for s in largest["stages"] if not s["line"].startswith("  ")]
    engine = " ".join(engine_options(args))
    begin, end = (BEGIN, END) if not args.scheduler else (_marker(BEGIN, args), _marker(END, args))
    lines = [begin, f"## Ten million documents: JSONL shards end to end{'' if not args.scheduler else f', {engine}'}",
             "",
             f"- {datetime.date.today()}, {platform.node()}, {len(os.sched_getaffinity(0))} usable cores, "
             f"{bench_run._cpu_model()}, {bench_run._mem_gb()}, Python {platform.python_version()}",
             f"- command: `python bench/big.py run --docs {' '.join(map(str, args.docs))} --reps {args.reps}"
             f"{f' --scheduler {args.scheduler}' if args.scheduler else ''}` "
             "(corpora: `python bench/big.py build N`); each run `neardup run --jsonl 'scale-N-jsonl/shard-*.jsonl'"
             f" --threshold {common.THRESHOLD} --num-perm {common.NUM_PERM} --bands {common.BANDS} --rows "
             f"{common.ROWS} {engine} -w <fresh dir> --format tsv`, one whole process (main peak: its own VmHWM)",
             "- the corpora: ~1 KB documents of imdb words, 100,000 records a shard, ~1% edited copies "
             "(injected.tsv: their exact Jaccard); recall = the copies at Jaccard >= 0.8 found", "",
             "| documents | GB of text | wall s | CPU s | peak tree RSS GB | main peak GB | candidates "
             "| pairs | recall | work dir GB | growth of wall / CPU / documents | others' CPU s meanwhile "
             "| nearDup commit, when |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
             *rows, "",
             f"Where the memory goes at {largest['docs']:,} documents: each stage's line on stderr, when it came, the "
             "peak RSS of the process tree since the line before (the stage's own work) and the main process's RSS "
             "then.", "", "| s | tree peak MB | main MB | stderr |", "|---|---|---|---|", *stages, "", end]
    section = "\n".join(lines)
    common.replace_section(args.out, begin, end, section)
    print(section)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("n", type=int)
    r = sub.add_parser("run")
    r.add_argument("--docs", type=int, nargs="+", default=[1_000_000, 3_000_000, 10_000_000])
    r.add_argument("--reps", type=int, default=1)
    r.add_argument("--jobs", type=int, default=2)
    r.add_argument("--scheduler", default=None, help="run on Dask (e.g. local:2) instead of --jobs")
    r.add_argument("--scratch", default=None, help="where work dirs are made [default: the system's temp dir]")
    r.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"))
    for p in (b, r):
        p.add_argument("--corpora", default=os.path.join(OUT, "corpora"), help="[default: bench/out/corpora]")
    w = sub.add_parser("report", help="the section again from bench/out/big.jsonl: the latest run of each size")
    w.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"))
    args = ap.parse_args(argv)
    if args.command == "report":
        latest = {}
        with open(os.path.join(OUT, "big.jsonl")) as f:
            for line in f:
                m = json.loads(line)
                latest[m["docs"]] = m
        args.docs, args.reps, args.jobs = sorted(latest), 1, latest[max(latest)]["jobs"]
        report(args, [latest[n] for n in sorted(latest)])
        return
    if args.command == "build":
        t0 = time.perf_counter()
        meta = build(args.n, corpus_dir(args.corpora, args.n))
        print(f"{meta['docs']:,} documents, {meta['bytes'] / 1e6:.0f} MB of text in {corpus_dir(args.corpora, args.n)}"
              f" ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    else:
        run_sizes(args)


if __name__ == "__main__":
    main()
