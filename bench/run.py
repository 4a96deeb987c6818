"""The benchmark: nearDup against datasketch and rensa, end to end, verified pairs and recall included.

    python bench/run.py                 imdb (50k reviews), edited (20k docs), scale 10k and 100k; 3 repetitions
    python bench/run.py --quick         edited at 4,000 documents only, 1 repetition (a smoke test, ~1-2 minutes)
    python bench/run.py --scale-1m      also the 1,000,000-document scale corpus (nearDup only; long)

Corpora are built once into bench/out/corpora/<name>/ (see corpora.py) with their exact-Jaccard ground truth
(truth.py), and reused while their build parameters do not change. Every configuration (tool x jobs x corpus) runs
as a whole process (peers.py) --reps times, repetitions interleaved; medians are reported. Raw results go to
bench/out/results.jsonl (appended) and the report to bench/RESULTS.md (or --out).
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(HERE, "out")
sys.path.insert(0, HERE)
import common  # noqa: E402

ENGINES_SECTION = ("<!-- bench/engines.py: begin -->", "<!-- bench/engines.py: end -->")  # kept by write_report
INCREMENTAL_SECTION = ("<!-- incremental: bench/incremental.py -->", "<!-- /incremental -->")  # kept too
SCALING_SECTION = ("<!-- bench/scaling.py: begin -->", "<!-- bench/scaling.py: end -->")  # kept too
HISTORY_SECTION = ("<!-- history: measured choices -->", "<!-- /history -->")  # kept too: written by hand
JOINS_SECTION = ("<!-- bench/joins.py: begin -->", "<!-- bench/joins.py: end -->")  # kept too
DATATROVE_SECTION = ("<!-- bench/vs_datatrove.py: begin -->", "<!-- bench/vs_datatrove.py: end -->")  # kept too
# kept too: bench/big.py's section, the notes on it written by hand and the index at 1M, as one block
BIG_SECTION = ("<!-- bench/big.py: begin -->", "<!-- /index at 1M -->")
PEER_TOOLS = [("neardup", 1), ("neardup", 2), ("rensa", 1), ("datasketch", 1)]
NEARDUP_ONLY = [("neardup", 1), ("neardup", 2)]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------ corpora

def corpus_specs(args) -> list[dict]:
    """name, build arguments for corpora.py, the tools to run on it."""
    if args.quick:
        return [{"name": "edited-4k", "build": ["edited", [], ["--docs", "4000"]], "tools": PEER_TOOLS}]
    imdb = ["imdb", [], ["--limit", str(args.imdb_limit)] if args.imdb_limit else []]
    specs = [{"name": "imdb" if not args.imdb_limit else f"imdb-{args.imdb_limit}", "build": imdb,
              "tools": PEER_TOOLS},
             {"name": "edited", "build": ["edited", [], ["--docs", "20000"]], "tools": PEER_TOOLS},
             {"name": "scale-10k", "build": ["scale", ["10000"], []], "tools": NEARDUP_ONLY},
             {"name": "scale-100k", "build": ["scale", ["100000"], []], "tools": NEARDUP_ONLY}]
    if args.scale_1m:
        specs.append({"name": "scale-1m", "build": ["scale", ["1000000"], []], "tools": NEARDUP_ONLY})
    return specs


def ensure_corpus(spec: dict) -> dict:
    """Build the corpus and its ground truth unless bench/out/corpora/<name> already holds them for this spec."""
    dest = os.path.join(OUT, "corpora", spec["name"])
    stamp = os.path.join(dest, "build.json")
    build = spec["build"]
    kind, before, options = build
    cmd_build = [sys.executable, os.path.join(HERE, "corpora.py"), kind, *before, dest, *options]
    truth = os.path.join(dest, "truth.tsv")
    want = {"build": build, "format": 2}
    have = None
    if os.path.exists(stamp) and os.path.exists(truth):
        with open(stamp) as f:
            have = json.load(f)
    if have != want:
        log(f"building corpus {spec['name']}: {shlex.join(cmd_build)}")
        if os.path.exists(stamp):
            os.unlink(stamp)
        subprocess.run(cmd_build, check=True)
        log(f"ground truth of {spec['name']}")
        t0 = time.perf_counter()
        subprocess.run([sys.executable, os.path.join(HERE, "truth.py"), os.path.join(dest, "docs"), truth],
                       check=True)
        with open(os.path.join(dest, "truth_seconds"), "w") as f:
            f.write(f"{time.perf_counter() - t0:.1f}\n")
        with open(stamp, "w") as f:
            json.dump(want, f)
    with open(os.path.join(dest, "meta.json")) as f:
        meta = json.load(f)
    return {**spec, "dest": dest, "docs_dir": os.path.join(dest, "docs"), "truth": truth, "meta": meta}


# ------------------------------------------------------------------------------------------------ running

def compile_package(folder: str) -> None:
    """Byte-compile a package as pip does when it installs one. Where PYTHONDONTWRITEBYTECODE is set (this
    machine sets it), an uncompiled package is compiled from source by every process: ~60 ms of each nearDup
    run that a user's installed copy never pays, while the peers' packages come compiled from pip."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", folder], check=True)


def neardup_snapshot(rev: str) -> tuple[str, str]:
    """Export nearDup/ at commit `rev` to bench/out/snapshots/<sha>/ (git archive: reads the repo, changes
    nothing); returns (folder, sha). The benchmark runs that copy, so edits to the work tree during a run (or
    between its repetitions) cannot mix versions."""
    sha = subprocess.run(["git", "-C", ROOT, "rev-parse", rev], capture_output=True, text=True,
                         check=True).stdout.strip()
    dest = os.path.join(OUT, "snapshots", sha[:12])
    if not os.path.exists(os.path.join(dest, "nearDup", "__init__.py")):
        os.makedirs(dest, exist_ok=True)
        archive = subprocess.run(["git", "-C", ROOT, "archive", sha, "nearDup"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", dest], input=archive.stdout, check=True)
    compile_package(os.path.join(dest, "nearDup"))
    env = dict(os.environ, PYTHONPATH=dest)
    where = subprocess.run(["neardup", "--version"], env=env, capture_output=True, text=True)
    check = subprocess.run([sys.executable, "-c", "import nearDup; print(nearDup.__file__)"], env=env, cwd="/",
                           capture_output=True, text=True).stdout.strip()
    if not check.startswith(dest):
        raise SystemExit(f"snapshot {dest} is not the nearDup that gets imported ({check})")
    log(f"nearDup: commit {sha[:12]} exported to {dest} ({where.stdout.strip()})")
    return dest, sha


def run_one(corpus: dict, tool: str, jobs: int, source: str | None) -> dict:
    pairs_dir = os.path.join(OUT, "pairs", corpus["name"])
    os.makedirs(pairs_dir, exist_ok=True)
    pairs_file = os.path.join(pairs_dir, f"{tool}-j{jobs}.tsv")
    cmd = [sys.executable, os.path.join(HERE, "peers.py"), "--tool", tool, "--corpus", corpus["docs_dir"],
           "--jobs", str(jobs), "--pairs", pairs_file] + (["--neardup-source", source] if source else [])
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"failed: {shlex.join(cmd)}\n{proc.stderr[-3000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["corpus_name"] = corpus["name"]
    res["pairs_set_hash"] = hash(frozenset(common.read_pairs(pairs_file)))
    res["loadavg"] = os.getloadavg()[0]
    return res


def summarise(runs: list[dict], truth: dict) -> dict:
    """Medians over the repetitions, and recall of the last repetition's pairs against the ground truth."""
    med = lambda key: statistics.median(r[key] for r in runs) if all(r.get(key) is not None for r in runs) else None
    last = runs[-1]
    found = common.read_pairs(last["pairs_file"])
    hit = set(found) & set(truth)
    s = {k: med(k) for k in ("cpu_s", "user_s", "sys_s", "wall_s", "mb_s", "mb_s_per_core", "peak_rss_mb",
                             "tree_rss_mb", "others_cpu_s")}
    s["others_load"] = statistics.median(r["others_cpu_s"] / r["wall_s"] for r in runs)
    s.update(tool=last["tool"], jobs=last["jobs"], docs=last["docs"], bytes=last["bytes"], reps=len(runs),
             candidates=last["candidates"], pairs=len(found), true_pairs=len(hit), false_pairs=len(found) - len(hit),
             recall=len(hit) / len(truth) if truth else None,
             deterministic=len({r["pairs_set_hash"] for r in runs}) == 1,
             cpu_all=[r["cpu_s"] for r in runs], wall_all=[r["wall_s"] for r in runs],
             jaccard_max_diff=max((abs(found[p] - truth[p]) for p in hit), default=0.0),
             found=set(found))
    if "phases" in last:
        s["phases"] = {k: statistics.median(r["phases"][k] for r in runs) for k in last["phases"]}
    if "stderr" in last:
        s["stderr"] = last["stderr"]
        s["workdir_mb"] = last.get("workdir_mb")
    return s


# ------------------------------------------------------------------------------------------------ report

def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _mem_gb() -> str:
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
        return f"{kb / 1024 ** 2:.1f} GiB"
    except (OSError, ValueError, IndexError):
        return "?"


def _version(pkg: str) -> str:
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _git_head() -> str:
    try:
        out = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "nearDup"], capture_output=True,
                               text=True).stdout.strip()
        return out.stdout.strip() + (" (nearDup/ modified)" if dirty else "")
    except OSError:
        return "?"


def _f(x, nd=2) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def _label(s: dict) -> str:
    return f"nearDup --jobs {s['jobs']}" if s["tool"] == "neardup" else s["tool"]


def write_report(path: str, args, corpora: list[dict], results: dict, started: float, load: tuple,
                 finished: float | None = None) -> None:
    L = []
    mode = " - QUICK smoke test (reduced corpus, 1 repetition; not for quoting)" if args.quick else ""
    L.append(f"# nearDup benchmark{mode}\n")
    L.append(f"- date: {datetime.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}, "
             f"took {((finished or time.time()) - started) / 60:.1f} min")
    L.append(f"- machine: nproc {os.cpu_count()} ({len(os.sched_getaffinity(0))} usable), CPU {_cpu_model()}, "
             f"RAM {_mem_gb()}, {platform.system()} {platform.release()}")
    L.append(f"- load average (1 min) at start / end: {load[0]:.2f} / {load[1]:.2f} (other sessions may "
             f"share this machine: CPU seconds are the robust measure, wall seconds are noisier)")
    import numpy
    what = (f"commit {args.sha[:12]} (exported with git archive and run through the `neardup` command with it "
            f"first on PYTHONPATH)" if args.sha else f"the work tree as installed, git {_git_head()}")
    L.append(f"- versions: Python {platform.python_version()}, numpy {numpy.__version__}, nearDup "
             f"{_version('nearDup')} at {what}, datasketch {_version('datasketch')}, rensa {_version('rensa')}")
    argv = [a for a in sys.argv[1:] if a != "--report-only"]
    again = " (report rewritten from bench/out/results.jsonl with --report-only)" if args.report_only else ""
    L.append(f"- command: `{shlex.join(['python', 'bench/run.py', *argv])}` ({args.reps} repetition(s) "
             f"per configuration, medians; each repetition a whole process){again}")
    L.append("")
    L.append("Settings (all tools): word 5-shingles after NFKC + casefold, `\\w+` tokens; MinHash num_perm 128; LSH "
             "b = 9 bands x r = 13 rows (117 rows used); exact-Jaccard verification, pairs with J >= 0.8. "
             "nearDup: `neardup run DIR --threshold 0.8 --num-perm 128 --bands 9 --rows 13 -w <fresh tmp> --jobs J` "
             "(its own shingler, OPH MinHash, numpy). Peers: one common Python shingler (bench/common.py), "
             "datasketch MinHash(num_perm=128).update_batch + MinHashLSH(params=(9, 13)) insert then query; "
             "rensa RMinHash.from_token_sets + RMinHashLSH(threshold=0.8, num_perm=117, num_bands=9) insert_many then "
             "query_all (rensa requires num_perm divisible by num_bands: 117 = 9 x 13 gives the same banding, and "
             "spares rensa 11 of 128 hash rows); candidates verified with Python sets. Every tool reads the same "
             "folder of files; all timings include interpreter start-up, reading, shingling, MinHash, LSH, "
             "verification and writing the pairs.")
    L.append("")
    L.append("Columns: CPU s = user + sys of the whole process tree (median); MB/s = corpus MB / wall s; MB/s per "
             "core = corpus MB / CPU s; peak RSS = ru_maxrss (the largest single process); tree RSS = peak of the "
             "RSS summed over the process tree, sampled every 0.1 s (counts pages shared by forked workers once per "
             "worker); recall = verified pairs found / ground-truth pairs (exact Jaccard >= 0.8 over all pairs "
             "sharing a shingle, bench/truth.py); false = reported pairs that are not in the ground truth; "
             "others' load = CPU seconds the rest of the machine used during the run / wall s (median; 2 cores "
             "in all: at 1.0 another process kept one core busy, so --jobs 2 cannot scale and wall times "
             "stretch). Each run starts with the corpus in the page cache (read once, unmeasured) and no dirty "
             "pages left by the run before (synced, unmeasured). The peers' RSS is mostly the shingle sets of "
             "the whole corpus held as Python sets of bytes (needed for their exact verification); "
             "nearDup keeps its hashed shingles in its work dir.")
    L.append("")

    # headline
    L.append("## Headline: nearDup vs peers (CPU throughput, MB per CPU-second)\n")
    L.append("| corpus | nearDup -j1 MB/CPU-s | vs rensa | vs datasketch | nearDup -j2 wall speedup over -j1 | "
             "others' load then | nearDup -j2 wall vs rensa wall | recall nearDup / rensa / datasketch |")
    L.append("|---|---|---|---|---|---|---|---|")
    for c in corpora:
        r = results[c["name"]]
        nd1, nd2 = r.get(("neardup", 1)), r.get(("neardup", 2))
        rs, ds = r.get(("rensa", 1)), r.get(("datasketch", 1))
        if nd1 is None:
            continue
        vs = lambda p, nd1=nd1: f"**{p['cpu_s'] / nd1['cpu_s']:.2f}x**" if p else "-"
        speed = f"{nd1['wall_s'] / nd2['wall_s']:.2f}x" if nd2 else "-"
        wall_vs = f"{rs['wall_s'] / nd2['wall_s']:.2f}x" if (rs and nd2) else "-"
        rec = " / ".join(_f(p["recall"], 4) if p else "-" for p in (nd1, rs, ds))
        load_j = f"{max(nd1['others_load'], nd2['others_load']):.2f}" if nd2 else "-"
        L.append(f"| {c['name']} | {_f(nd1['mb_s_per_core'])} | {vs(rs)} | {vs(ds)} | {speed} | {load_j} | "
                 f"{wall_vs} | {rec} |")
    L.append("")
    L.append("Ratios > 1 mean nearDup is faster: (peer CPU s) / (nearDup --jobs 1 CPU s) on the same bytes. The "
             "--jobs 2 speedup is only meaningful where others' load (CPU the rest of the machine used during the "
             "nearDup runs, in cores) is near 0: at ~1.0 another session kept one of the 2 cores busy.\n")

    L.extend(_growth_table(corpora, results))
    L.extend(_seeds_table())

    # per corpus tables
    for c in corpora:
        m = c["meta"]
        truth = results[c["name"]]["_truth"]
        L.append(f"## Corpus `{c['name']}`: {m['docs']:,} documents, {m['bytes'] / 1e6:.1f} MB, "
                 f"{len(truth)} ground-truth pairs (J >= 0.8)\n")
        L.append(_corpus_blurb(c))
        L.append("")
        L.append("| tool | CPU s | wall s | MB/s | MB/s per core | peak RSS MB | tree RSS MB | candidates | "
                 "verified pairs | recall | false | runs CPU s | others' load |")
        L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for key in c["tools"]:
            s = results[c["name"]].get(key)
            if s is None:
                continue
            L.append(f"| {_label(s)} | {_f(s['cpu_s'])} | {_f(s['wall_s'])} | {_f(s['mb_s'])} | "
                     f"{_f(s['mb_s_per_core'])} | {_f(s['peak_rss_mb'], 0)} | {_f(s['tree_rss_mb'], 0)} | "
                     f"{s['candidates']} | {s['pairs']} | {_f(s['recall'], 4)} | {s['false_pairs']} | "
                     f"{', '.join(_f(x, 1) for x in s['cpu_all'])}"
                     f"{'' if s['deterministic'] else ' (pair sets differ between runs!)'} | "
                     f"{s['others_load']:.2f} |")
        L.append("")
        peers = [s for k, s in results[c["name"]].items() if k != "_truth" and "phases" in s]
        if peers:
            L.append("Peers' time by phase (median s): " + "; ".join(
                f"{s['tool']}: " + ", ".join(f"{k} {v:.1f}" for k, v in s["phases"].items()) for s in peers))
            L.append("")
        nd = results[c["name"]].get(("neardup", 1))
        if nd and nd.get("stderr"):
            L.append(f"nearDup's stderr (--jobs 1; work dir {_f(nd.get('workdir_mb'), 1)} MB; largest |J_nearDup - "
                     f"J_exact| on found pairs {nd['jaccard_max_diff']:.4f}):\n")
            L.append("```")
            L.extend(nd["stderr"])
            L.append("```")
            L.append("")
        inj = os.path.join(c["dest"], "injected.tsv")
        if os.path.exists(inj):
            L.extend(_injected_table(inj, results[c["name"]], c["tools"]))
    _rest, engines = split_engines_section(path)  # sections measured by other scripts: kept as they are
    _, incremental = split_engines_section(path, INCREMENTAL_SECTION)
    _, scaling = split_engines_section(path, SCALING_SECTION)
    _, history = split_engines_section(path, HISTORY_SECTION)
    _, joins = split_engines_section(path, JOINS_SECTION)
    _, datatrove = split_engines_section(path, DATATROVE_SECTION)
    _, big = split_engines_section(path, BIG_SECTION)
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n" + "".join(f"\n{s}" for s in (scaling, joins, datatrove, big, engines,
                                                                   incremental, history) if s))


def split_engines_section(path: str, markers: tuple[str, str] = ENGINES_SECTION) -> tuple[str, str]:
    """(the report without a marked section (bench/engines.py's by default), that section ("" if none))."""
    text = open(path).read() if os.path.exists(path) else ""
    begin, end = markers
    if begin not in text or end not in text:
        return text, ""
    a, b = text.index(begin), text.index(end) + len(end)
    return text[:a].rstrip("\n") + "\n" + text[b:].lstrip("\n"), text[a:b] + "\n"


def _growth_table(corpora: list[dict], results: dict) -> list[str]:
    """Time, memory and candidates of nearDup at each scale corpus size, with the growth exponent between
    consecutive sizes: log(CPU_2 / CPU_1) / log(n_2 / n_1), 1.0 being linear growth."""
    rows = [c for c in corpora if c["meta"]["kind"] == "scale" and ("neardup", 1) in results.get(c["name"], {})]
    if len(rows) < 2:
        return []
    L = ["## Growth with the number of documents (scale corpora, nearDup end to end)\n",
         "| corpus | documents | MB | -j1 CPU s | -j1 wall s | -j2 wall s | CPU µs per document | growth exponent "
         "of CPU s | peak RSS MB -j1 / -j2 | candidates | verified pairs | recall |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    previous = None
    for c in sorted(rows, key=lambda c: c["meta"]["docs"]):
        n1, n2 = results[c["name"]][("neardup", 1)], results[c["name"]].get(("neardup", 2))
        docs = c["meta"]["docs"]
        exponent = (f"{math.log(n1['cpu_s'] / previous[1]) / math.log(docs / previous[0]):.2f}"
                    if previous else "-")
        L.append(f"| {c['name']} | {docs:,} | {c['meta']['bytes'] / 1e6:.1f} | {_f(n1['cpu_s'])} | "
                 f"{_f(n1['wall_s'])} | {_f(n2['wall_s']) if n2 else '-'} | {n1['cpu_s'] / docs * 1e6:.0f} | "
                 f"{exponent} | {_f(n1['peak_rss_mb'], 0)} / {_f(n2['peak_rss_mb'], 0) if n2 else '-'} | "
                 f"{n1['candidates']} | {n1['pairs']} | {_f(n1['recall'], 4)} |")
        previous = (docs, n1["cpu_s"])
    L.append("")
    return L


def _seeds_table() -> list[str]:
    """Recall over seeds from bench/seeds.py (bench/out/seeds.json), if it has been run."""
    path = os.path.join(OUT, "seeds.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        data = json.load(f)
    L = [f"## Recall over seeds (corpus `{data['corpus']}`, {data['truth_pairs']} ground-truth pairs; "
         f"`python bench/seeds.py`)\n",
         "One seed's recall is noisy at b = 9, r = 13 (a pair of J = 0.82 becomes a candidate with probability ~0.5), "
         "so each tool ran with the same seeds at the same b and r; recall of the verified pairs:\n",
         "| tool | mean recall | std dev | min - max | seeds |", "|---|---|---|---|---|"]
    for tool, t in data["tools"].items():
        L.append(f"| {tool} | {t['mean']:.4f} | {t['stdev']:.4f} | {t['min']:.4f} - {t['max']:.4f} | "
                 f"{len(t['seeds'])} ({', '.join(map(str, t['seeds']))}) |")
    L.append("")
    return L


def _corpus_blurb(c: dict) -> str:
    m = c["meta"]
    if m["kind"] == "imdb":
        return ("IMDB 50k reviews (/work/shared/corpora/imdb50k.jsonl.gz), one file per review"
                + (f", first {m['limit']} records only" if m.get("limit") else "") + ".")
    if m["kind"] == "edited":
        return (f"{m['base_docs']:,} base documents of 2-6 KB cut from consecutive imdb reviews, plus {m['copies']:,} "
                f"edited copies of random base documents at word-edit rates "
                f"{', '.join(f'{r:.0%}' for r in m['rates'])} "
                f"(substitute / delete / insert random imdb words), seed {m['seed']}.")
    return (f"{m['docs']:,} documents of ~1 KB of words drawn from the imdb word distribution (top 50k words), "
            f"{m['dup_frac']:.0%} of them edited copies (word-edit rates "
            f"{', '.join(f'{r:.1%}' for r in m['rates'])}); 1000 files per subfolder.")


def _injected_table(path: str, res: dict, tools) -> list[str]:
    truth = res["_truth"]
    by_rate: dict[float, list] = {}
    jac: dict[float, list] = {}
    with open(path) as f:
        for line in f:
            a, b, rate, j = line.rstrip("\n").split("\t")
            by_rate.setdefault(float(rate), []).append((a, b))
            jac.setdefault(float(rate), []).append(float(j))
    head = "| edit rate | injected | median J (min-max) | with J >= 0.8 | " + " | ".join(
        f"found by {_label(res[k])}" for k in tools if k in res) + " |"
    L = ["Injected pairs by edit rate (found = reported as verified pair):\n", head,
         "|" + "---|" * (4 + sum(1 for k in tools if k in res))]
    for rate in sorted(by_rate):
        pairs = by_rate[rate]
        above = sum(1 for p in pairs if p in truth)
        cells = [str(sum(1 for p in pairs if p in res[k]["found"])) for k in tools if k in res]
        js = jac[rate]
        L.append(f"| {rate:.1%} | {len(pairs)} | {statistics.median(js):.3f} ({min(js):.3f}-{max(js):.3f}) | "
                 f"{above} | " + " | ".join(cells) + " |")
    L.append("")
    return L


# ------------------------------------------------------------------------------------------------ main

def report_only(args) -> None:
    with open(os.path.join(OUT, "results.jsonl")) as f:
        entries = [json.loads(line) for line in f if line.strip()]
    names = [spec["name"] for spec in corpus_specs(args)]
    last = max(e["started"] for e in entries if e["corpus_name"] in names)
    entries = [e for e in entries if e["started"] == last]
    args.sha = entries[0].get("neardup_sha")
    args.reps = max(sum(1 for e in entries if (e["corpus_name"], e["tool"], e["jobs"]) == key)
                    for key in {(e["corpus_name"], e["tool"], e["jobs"]) for e in entries})
    measured = {e["corpus_name"] for e in entries}
    corpora = [ensure_corpus(spec) for spec in corpus_specs(args) if spec["name"] in measured]
    results = {}
    for c in corpora:
        truth = common.read_pairs(c["truth"])
        results[c["name"]] = {key: summarise([e for e in entries if e["corpus_name"] == c["name"]
                                              and (e["tool"], e["jobs"]) == key], truth) for key in c["tools"]}
        results[c["name"]]["_truth"] = truth
    load = (entries[0]["loadavg"], entries[-1]["loadavg"])
    write_report(args.out, args, corpora, results, last, load, max(e.get("finished", last) for e in entries))
    log(f"rewrote {args.out} from the run started {time.ctime(last)}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="edited corpus at 4,000 documents, 1 repetition")
    ap.add_argument("--scale-1m", action="store_true", help="also the 1M-document scale corpus (nearDup only)")
    ap.add_argument("--reps", type=int, help="repetitions per configuration [default: 3, --quick: 1]")
    ap.add_argument("--imdb-limit", type=int, help="only the first N imdb reviews (to keep a run short)")
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"), help="report path [default: bench/RESULTS.md]")
    ap.add_argument("--rev", default="HEAD", help="the commit of nearDup to measure, exported with git archive "
                                                  "[default: HEAD when the run starts]")
    ap.add_argument("--worktree", action="store_true", help="measure the installed `neardup` (the work tree as it "
                                                            "is, uncommitted edits included) instead of --rev")
    ap.add_argument("--report-only", action="store_true", help="rewrite the report from the last run recorded in "
                                                               "bench/out/results.jsonl (same corpus options)")
    args = ap.parse_args(argv)
    args.reps = args.reps or (1 if args.quick else 3)
    if args.report_only:
        return report_only(args)
    started, load = time.time(), os.getloadavg()
    os.makedirs(OUT, exist_ok=True)
    source, args.sha = (None, None) if args.worktree else neardup_snapshot(args.rev)
    if args.worktree:
        compile_package(os.path.join(ROOT, "nearDup"))
    corpora = [ensure_corpus(spec) for spec in corpus_specs(args)]
    results: dict[str, dict] = {}
    raw_path = os.path.join(OUT, "results.jsonl")
    for c in corpora:
        truth = common.read_pairs(c["truth"])
        runs: dict[tuple, list] = {key: [] for key in c["tools"]}
        for rep in range(args.reps):
            for tool, jobs in c["tools"]:
                log(f"{c['name']}: {tool} --jobs {jobs}, repetition {rep + 1}/{args.reps}")
                res = run_one(c, tool, jobs, source)
                log(f"  cpu {res['cpu_s']:.1f} s, wall {res['wall_s']:.1f} s, rss {res['peak_rss_mb']:.0f} MB, "
                    f"{res['candidates']} candidates, {res['pairs']} pairs")
                res["started"] = started
                res["neardup_sha"] = args.sha
                res["finished"] = time.time()
                with open(raw_path, "a") as f:
                    f.write(json.dumps(res) + "\n")
                runs[(tool, jobs)].append(res)
        results[c["name"]] = {key: summarise(rs, truth) for key, rs in runs.items()}
        results[c["name"]]["_truth"] = truth
        write_report(args.out, args, corpora[:len(results)], results, started, (load[0], os.getloadavg()[0]))
    write_report(args.out, args, corpora, results, started, (load[0], os.getloadavg()[0]))
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
