"""LSH against exact joins: nearDup's `run` against its exact join (kernels/allpairs.jaccard_join) and ekzhu's
SetSimilaritySearch (all_pairs, pip package SetSimilaritySearch), at t = 0.5, 0.8 and 0.9.

    python bench/joins.py [--corpora edited imdb scale-100k] [--thresholds 0.5 0.8 0.9] [--reps 3]
                          [--timeout 300] [--sss-max-docs 60000] [--sss-reps 1] [--write] [--report-only]

What is timed, each as a whole child process (wall, CPU = user + system of its process tree, peak RSS of the
tree sampled every 0.1 s), repetitions interleaved (rep 1 of every tool and threshold, then rep 2, ...):
- lsh: `neardup run DOCS -t T --jobs 1 -w FRESH --format tsv` from the files: reading, shingling, MinHash, bands,
  candidates and exact verification.
- exact: a process that loads the stored shingle sets of the corpus's work dir (nearDup's own, made by the first
  lsh run: the same sets, 32-bit shingle hashes, the documents `candidates` could pair) and runs
  allpairs.jaccard_join on them: the join at kernel level, without reading or shingling any file.
- sss: the same stored sets, as Python lists, given to SetSimilaritySearch.all_pairs (pure Python AllPairs).
The exact and sss rows also give the join's own CPU time (join_cpu, process_time around the call), without the
interpreter start-up and the loading of the sets. Recall of each = its pairs at J >= t among the exact join's.

Corpora: bench/out/corpora/NAME/docs of this checkout, else /work/main/bench/out/corpora/NAME/docs (read only);
a missing scale-N (scale-100k, scale-1m) is built by corpora.build_scale. With --write, the section between the
markers in bench/RESULTS.md is replaced.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out")
sys.path.insert(0, HERE)
import run as bench_run  # noqa: E402

BEGIN, END = bench_run.JOINS_SECTION
SHARED_CORPORA = "/work/main/bench/out/corpora"
TOOLS = ("lsh", "run-exact", "run-auto", "exact", "sss")
RUN_METHODS = {"lsh": "lsh", "run-exact": "exact", "run-auto": "auto"}  # tools that are a whole `neardup run`
MB = 1 << 20


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------ workers

def worker(tool: str, workdir: str, threshold: float, out: str) -> None:
    """Load the stored sets of workdir, join them at threshold, save the pairs (int64 (m, 2) of indices into the
    sets) to out, and print the timings as JSON."""
    import numpy as np

    from nearDup.kernels import allpairs
    from nearDup.report.evaluate import stored_sets
    from nearDup.store.workdir import WorkDir

    t0 = time.perf_counter()
    _, values, offsets = stored_sets(WorkDir(workdir, create=False))
    load = time.perf_counter() - t0
    if tool == "exact":
        c0 = time.process_time()
        pairs = allpairs.jaccard_join(values, offsets, threshold).pairs
        join_cpu = time.process_time() - c0
    else:
        from SetSimilaritySearch import all_pairs

        as_lists = [values[offsets[i]:offsets[i + 1]].tolist() for i in range(len(offsets) - 1)]
        c0 = time.process_time()
        found = [(x, y) for x, y, _ in all_pairs(as_lists, "jaccard", threshold)]
        join_cpu = time.process_time() - c0
        pairs = np.array([(min(x, y), max(x, y)) for x, y in found], np.int64).reshape(-1, 2)
    np.save(out, pairs)
    print(json.dumps({"load_s": round(load, 3), "join_cpu_s": round(join_cpu, 3), "pairs": len(pairs)}))


# ------------------------------------------------------------------------------------------------ measuring

def measure(cmd: list[str], stdout, timeout: float) -> dict:
    """One child process: wall, CPU of its tree, sampled peak RSS of its tree; timed_out when it was killed."""
    import peers  # psutil: the bench extra

    child = peers.Child(cmd, stdout)
    proc = child.proc
    try:
        _, err = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        timed_out = True
    m = child.ended()
    if proc.returncode not in (0, 1) and not timed_out:
        sys.exit(f"{' '.join(cmd)} failed: {err.decode(errors='replace')[-2000:]}")
    chose = re.search(r"--method auto chose (\w+)", err.decode(errors="replace"))
    return {"wall_s": m["wall"], "cpu_s": m["utime"] + m["stime"], "rss_mb": m["tree_peak"] / MB,
            "timed_out": timed_out, "others_cpu_s": m["others_cpu_s"], "chose": chose and chose.group(1)}


def corpus_docs(name: str) -> str:
    for root in (os.path.join(OUT, "corpora"), SHARED_CORPORA):
        docs = os.path.join(root, name, "docs")
        if os.path.isdir(docs):
            return docs
    if not name.startswith("scale-"):
        sys.exit(f"{name}: no built corpus; build it with `python bench/corpora.py {name} bench/out/corpora/{name}`")
    import corpora

    n = int(name.removeprefix("scale-").replace("k", "000").replace("m", "000000"))
    log(f"building {name} ({n} documents)")
    corpora.build_scale(os.path.join(OUT, "corpora", name), n)
    return os.path.join(OUT, "corpora", name, "docs")


def lsh_pairs(tsv: bytes, index: dict[str, int], threshold: float) -> set[tuple[int, int]]:
    out = set()
    for line in tsv.decode("utf-8", "surrogateescape").splitlines():
        j, a, b = line.split("\t")
        if float(j) >= threshold:
            x, y = index[a], index[b]
            out.add((min(x, y), max(x, y)))
    return out


def bench_corpus(name: str, thresholds: list[float], reps: int, timeout: float, sss_max_docs: int,
                 sss_reps: int) -> dict:
    from nearDup.report.evaluate import stored_sets
    from nearDup.store.workdir import WorkDir

    docs = corpus_docs(name)
    scratch = tempfile.mkdtemp(prefix=f"joins-{name}-", dir=OUT)
    keep = os.path.join(scratch, "sets")  # the work dir whose stored sets exact and sss join
    runs: dict = {}
    ids = None
    exact: dict[float, set] = {}
    found: dict = {}
    try:
        for rep in range(reps):
            for t in thresholds:
                for tool in TOOLS:
                    key = (tool, t)
                    if tool == "sss" and (rep >= sss_reps or len(ids or ()) > sss_max_docs or any(
                            r["timed_out"] for r in runs.get(key, []))):
                        continue  # pure Python, minutes a run: fewer repetitions, said in the report
                    if tool in RUN_METHODS:
                        work = keep if ids is None else os.path.join(scratch, "w")
                        shutil.rmtree(work, ignore_errors=True)
                        with tempfile.TemporaryFile() as out:
                            m = measure([os.path.join(os.path.dirname(sys.executable), "neardup"), "run", docs, "-t",
                                         str(t), "--jobs", "1", "-w", work, "--format", "tsv", "--method",
                                         RUN_METHODS[tool]], out, timeout)
                            out.seek(0)
                            tsv = out.read()
                        if ids is None:
                            ids = stored_sets(WorkDir(keep, create=False))[0]
                        found[key] = tsv
                    else:
                        pairs_file = os.path.join(scratch, f"{tool}-{t}.npy")
                        with tempfile.TemporaryFile() as out:
                            m = measure([sys.executable, __file__, "--worker", tool, keep, str(t), pairs_file], out,
                                        timeout)
                            out.seek(0)
                            text = out.read().decode()
                        if not m["timed_out"]:
                            m.update(json.loads(text))
                            import numpy as np

                            pairs = {tuple(p) for p in np.load(pairs_file).tolist()}
                            if tool == "exact":
                                exact[t] = pairs
                            found[key] = pairs
                    runs.setdefault(key, []).append(m)
                    log(f"{name} t={t} {tool} rep {rep + 1}: wall {m['wall_s']:.1f} s, CPU {m['cpu_s']:.1f} s, "
                        f"RSS {m['rss_mb']:.0f} MB" + (" (timed out)" if m["timed_out"] else ""))
        index = {doc: i for i, doc in enumerate(ids or [])}
        result: dict = {"docs": len(ids or []), "runs": {}}
        for (tool, t), ms in runs.items():
            done = [m for m in ms if not m["timed_out"]]
            row: dict = {"reps": len(ms), "timed_out": len(ms) - len(done)}
            if done:
                row.update({f: statistics.median(m[f] for m in done) for f in ("wall_s", "cpu_s")})
                row["rss_mb"] = max(m["rss_mb"] for m in done)
                row["others_cpu_s"] = statistics.median(m["others_cpu_s"] for m in done)
                if "join_cpu_s" in done[0]:
                    row["join_cpu_s"] = statistics.median(m["join_cpu_s"] for m in done)
                got = (lsh_pairs(found[(tool, t)], index, t) if tool in RUN_METHODS
                       else found.get((tool, t), set()))
                chosen = sorted({m["chose"] for m in done if m.get("chose")})
                if chosen:
                    row["chose"] = "/".join(chosen)
                truth = exact.get(t, set())
                row["pairs"] = len(got)
                row["recall"] = len(got & truth) / len(truth) if truth else None
                row["extra"] = len(got - truth)  # never more than float ties: each finds pairs with J >= t only
            result["runs"][f"{tool} {t}"] = row
        return result
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# ------------------------------------------------------------------------------------------------ report

def _f(x, digits=1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def report(measured: dict) -> list[str]:
    """The section: one table per corpus, from its latest measurement ({name: record of bench/out/joins.jsonl})."""
    lines = [BEGIN, "## LSH vs exact joins: `neardup run` against allpairs.jaccard_join and SetSimilaritySearch", "",
             "`lsh`, `run-exact` and `run-auto` are the whole `neardup run --jobs 1 --method lsh|exact|auto` from the "
             "files (reading and shingling included; `run-auto` names the method it chose); `exact` and "
             "`sss` (SetSimilaritySearch.all_pairs, pure Python) join the stored shingle sets of the same work dir "
             "(nearDup's 32-bit shingle hashes, the documents the candidates stage could pair) at kernel level: "
             "their CPU includes interpreter start-up and loading the sets, `join CPU` is the join alone. Medians of "
             "the interleaved repetitions (`reps`; SetSimilaritySearch, minutes a run, fewer, none beyond "
             "--sss-max-docs or after a timeout); `CPU / lsh`: ratios of the medians of one run of the script. Recall "
             "is against the exact join's pairs at the same t. `others`: the CPU time the rest of this shared "
             "machine used meanwhile (its load).", ""]
    for name, record in measured.items():
        args, res = record["args"], record["result"]
        beyond = "" if args["sss_max_docs"] == 60_000 else f" --sss-max-docs {args['sss_max_docs']}"
        lines += [f"`{name}`, {res['docs']:,} documents: `python bench/joins.py --corpora {name} --reps "
                  f"{args['reps']} --sss-reps {args['sss_reps']}{beyond}` on {record['date']}, {record['python']}, "
                  f"{record['cores']} cores shared with other work, load average {record['load'][0]} at the start "
                  f"and {record['load'][1]} at the end, {record['seconds']} s in all.", "",
                  "| t | tool | reps | wall s | CPU s | join CPU s | CPU / lsh | peak RSS MB | pairs | recall | "
                  "others CPU s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for key, row in res["runs"].items():
            tool, t = key.split()
            lsh = res["runs"].get(f"lsh {t}", {})
            ratio = (row["cpu_s"] / lsh["cpu_s"]) if row.get("cpu_s") and lsh.get("cpu_s") else None
            if "cpu_s" not in row:
                lines.append(f"| {t} | {tool} | {row['reps']} | timed out after {args['timeout']:.0f} s | | | | | | "
                             "| |")
                continue
            lines.append(f"| {t} | {tool} | {row['reps']} | {_f(row.get('wall_s'))} | {_f(row.get('cpu_s'))} | "
                         f"{_f(row.get('join_cpu_s'))} | {_f(ratio, 2)} | {_f(row.get('rss_mb'), 0)} | "
                         f"{row.get('pairs', '-')} | {_f(row.get('recall'), 4)} | {_f(row.get('others_cpu_s'))} |"
                         + (f" chose {row['chose']} |" if row.get("chose") else ""))
        agree = [t for t in args["thresholds"] if res["runs"].get(f"sss {t}", {}).get("recall") == 1.0
                 and res["runs"][f"sss {t}"].get("extra") == 0]
        skipped = [t for t in args["thresholds"] if f"sss {t}" not in res["runs"]]
        if skipped:
            lines.append(f"| {', '.join(map(str, skipped))} | sss | 0 | not run: more than --sss-max-docs "
                         f"{args['sss_max_docs']:,} documents | | | | | | | |")
        lines.append("")
        if agree:
            below = all(row.get("extra", 0) == 0 for row in res["runs"].values())
            lines += [f"SetSimilaritySearch found exactly the exact join's pairs at t = {', '.join(map(str, agree))}"
                      + ("; no tool found a pair the exact join did not." if below else "."), ""]
    missing = [c for c in ("edited", "imdb", "scale-100k", "scale-1m") if c not in measured]
    if missing:
        lines += [f"Not measured yet: {', '.join(missing)} (`python bench/joins.py --corpora NAME --write`; a missing "
                  "scale-N corpus is built first).", ""]
    lines.append(END)
    return lines


def latest(path: str) -> dict:
    """The latest record of each corpus in bench/out/joins.jsonl."""
    out: dict = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                record = json.loads(line)
                out[record["corpus"]] = record
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpora", nargs="+", default=["edited", "imdb"])
    ap.add_argument("--thresholds", nargs="+", type=float, default=[0.5, 0.8, 0.9])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a process may take before it is killed")
    ap.add_argument("--sss-max-docs", type=int, default=60_000, help="SetSimilaritySearch only up to this size")
    ap.add_argument("--sss-reps", type=int, default=1, help="repetitions of SetSimilaritySearch (minutes each)")
    ap.add_argument("--write", action="store_true", help="replace the section in bench/RESULTS.md with the latest "
                                                         "measurement of each corpus (bench/out/joins.jsonl)")
    ap.add_argument("--report-only", action="store_true", help="measure nothing: print (and with --write, write) "
                                                               "the section from bench/out/joins.jsonl")
    ap.add_argument("--worker", nargs=4, metavar=("TOOL", "WORKDIR", "T", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        tool, workdir, t, out = args.worker
        worker(tool, workdir, float(t), out)
        return
    os.makedirs(OUT, exist_ok=True)
    history = os.path.join(OUT, "joins.jsonl")
    for name in [] if args.report_only else args.corpora:
        started = time.time()
        load0 = open("/proc/loadavg").read().split()[0]
        result = bench_corpus(name, args.thresholds, args.reps, args.timeout, args.sss_max_docs, args.sss_reps)
        load1 = open("/proc/loadavg").read().split()[0]
        record = {"corpus": name, "date": str(datetime.date.today()), "args": vars(args), "load": [load0, load1],
                  "python": f"{platform.python_implementation()} {platform.python_version()}",
                  "cores": os.cpu_count(), "seconds": round(time.time() - started), "result": result}
        with open(history, "a") as f:
            f.write(json.dumps(record) + "\n")
        print("\n".join(report({name: record})))
    if args.report_only:
        print("\n".join(report(latest(history))))
    if args.write:
        path = os.path.join(HERE, "RESULTS.md")
        rest, _ = bench_run.split_engines_section(path, bench_run.JOINS_SECTION)
        with open(path + ".tmp", "w") as f:
            f.write(rest.rstrip("\n") + "\n\n" + "\n".join(report(latest(history))) + "\n")
        os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
