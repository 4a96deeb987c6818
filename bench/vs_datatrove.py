"""nearDup against datatrove's MinHash deduplication (issue 23): the same JSONL shards, the same word 5-shingles,
the same b x r bands, each tool end to end from the shards to a deduplicated copy of them.

    python bench/vs_datatrove.py [--corpus edited] [--thresholds 0.8 0.5] [--reps 3] [--datatrove-own T ...]
                                 [--write] [--report-only]

(`make bench-datatrove`.) The named corpus folder (bench/out/corpora/NAME/docs of this checkout, else
/work/main/bench/out/corpora/NAME/docs, read only) is written once as two JSONL shards, bench/out/vs_datatrove/
shards-NAME/0000{0,1}.jsonl, records {"id": path relative to docs, "text": the file's text}, in id order.

datatrove 0.10.1 is not a nearDup dependency: it is installed into its own venv, bench/out/venv-datatrove (made on
the first run, with the packages of its extras that these steps import: DEPS), and runs there as `python
bench/vs_datatrove.py --worker`: its four stages in one process, each a LocalPipelineExecutor with workers=2 (its
default forkserver start), the stages of datatrove's examples/minhash_deduplication.py (there under Slurm; its
TokensCounter left out):
  1. JsonlReader + MinhashDedupSignature   tasks = 2 (one per shard)
  2. MinhashDedupBuckets                   tasks = b (one per band; datatrove requires a multiple of it)
  3. MinhashDedupCluster                   tasks = 1 (datatrove requires a single task)
  4. JsonlReader + MinhashDedupFilter (exclusion_writer: the removed records) + JsonlWriter, tasks = 2
MinhashConfig(n_grams=5, num_buckets=b, hashes_per_bucket=r, seed=1), 64-bit xxhash (its defaults), with b and r
the bands nearDup chose for the threshold (parsed from its `band:` line, the first repetition runs nearDup first).
Shingles are nearDup's: datatrove's tokenizer for English is spaCy's and its simplify_text lowercases, removes
punctuation and rewrites numbers and diacritics, so the worker passes a WordTokenizer doing what nearDup does (NFKC,
case folding, runs of \\w, common.py) and a TextNormConfig that does nothing; datatrove joins the 5 words with one
space and hashes them, as common.shingles does, so both tools see the same shingle sets. datatrove has no
verification: every document sharing a band bucket with another is clustered, and all but one per cluster removed.
With --datatrove-own T..., datatrove also runs at those thresholds as shipped for English (`datatrove-own`: its
TextNormConfig defaults and spaCy's tokenizer; spacy is in its venv), to show what its own text model costs; its
shingles are then not nearDup's, so its accuracy against T includes that difference.

nearDup: `neardup run --jsonl SHARDS -t T --jobs 2 -w FRESH --write-deduped FRESH_OUT --format tsv` (its bands
chosen by -t; it verifies every candidate with its exact Jaccard; keepers by its default rules).

Each run is one child process tree, measured from outside (peers.measure: wall, CPU = user + system of the tree,
its peak RSS summed over the tree and sampled every 0.1 s, the CPU the rest of the machine used meanwhile);
repetitions interleaved (rep 1 of every threshold and tool, then rep 2, ...); medians. The worker reaps datatrove's
forkserver before it exits, so the CPU of datatrove's pool processes is in the tree's figure.

Accuracy against exact truth: the pairs with exact Jaccard >= t of the common shingler's sets (bench/truth.py,
T). For both tools the same definitions, from what each removed:
- a cluster is a kept document and the documents removed in its favour (nearDup: OUT/removed.jsonl, id ->
  keeper; datatrove: the connected components of its .dups matches, all members but the root removed);
- pair recall = share of T whose two documents are in one cluster; pair precision = share of the pairs inside
  clusters that are in T (nearDup's clusters are stars around a keeper, each member >= t against it, two members
  need not be);
- false removals = removed documents with no pair in T at all (a unique document deleted);
- pairs left = pairs of T with both documents still in the output (duplication the dedup missed).
nearDup's printed pairs are checked too (all verified: precision 1 up to float ties).
With --write, the section between the markers in bench/RESULTS.md is replaced: one table for the latest record of
each configuration (corpus, thresholds, --datatrove-own) in bench/out/vs_datatrove.jsonl.
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
import struct
import subprocess
import sys
import tempfile
import time
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out")
WORK = os.path.join(OUT, "vs_datatrove")
VENV = os.path.join(OUT, "venv-datatrove")
DATATROVE = "datatrove==0.10.1"
# what its minhash module needs of the extra "processing": regex, xxhash (its default hash), tokenizers (imported
# by datatrove.pipeline.dedup); of "io": orjson (JsonlReader and JsonlWriter); spacy: its English word tokenizer
DEPS = (DATATROVE, "xxhash<4", "regex", "tokenizers", "orjson", "spacy")
STAGES = ("signature", "buckets", "cluster", "filter")
WORD = re.compile(r"\w+")  # common.WORD; repeated so that the worker needs nothing of nearDup's bench


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------ worker
# Runs in bench/out/venv-datatrove (datatrove's Python), not nearDup's.

def worker(shards: str, work: str, bands: int, rows: int, text_model: str) -> None:
    """datatrove's four MinHash stages on the shards; prints the wall seconds of each stage as JSON. text_model
    "neardup": nearDup's words, datatrove's normalisation off; "own": datatrove's defaults (English)."""
    import multiprocess.forkserver
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup import MinhashDedupSignature
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
    )
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers.jsonl import JsonlWriter
    from datatrove.utils.text import TextNormConfig
    from datatrove.utils.typeshelper import Languages
    from datatrove.utils.word_tokenizers import WordTokenizer

    class NearDupWords(WordTokenizer):
        """nearDup's words (common.shingles): \\w runs of the NFKC-normalised, case-folded text."""

        def word_tokenize(self, text: str) -> list[str]:
            return WORD.findall(unicodedata.normalize("NFKC", text).casefold())

        def sent_tokenize(self, text: str) -> list[str]:
            raise NotImplementedError

        def span_tokenize(self, text: str) -> list[tuple[int, int]]:
            raise NotImplementedError

    if text_model == "own":
        config = MinhashConfig(n_grams=5, num_buckets=bands, hashes_per_bucket=rows, seed=1)
        words = Languages.english  # its default: spaCy's tokenizer
    else:
        words = NearDupWords()
        config = MinhashConfig(n_grams=5, num_buckets=bands, hashes_per_bucket=rows, seed=1,
                               norm_config=TextNormConfig(lowercase=False, norm_whitespace=False,
                                                          remove_punctuation=False, norm_unicode_diacritics=False,
                                                          norm_numbers=False))
    nshards = len([f for f in os.listdir(shards) if f.endswith(".jsonl")])

    def reader():
        return JsonlReader(shards, glob_pattern="*.jsonl")

    stages = {
        "signature": LocalPipelineExecutor(
            [reader(), MinhashDedupSignature(f"{work}/signatures", config=config, language=words)],
            tasks=nshards, workers=2, logging_dir=f"{work}/logs/signature"),
        "buckets": LocalPipelineExecutor(
            [MinhashDedupBuckets(f"{work}/signatures", f"{work}/buckets", config=config)],
            tasks=bands, workers=2, logging_dir=f"{work}/logs/buckets"),
        "cluster": LocalPipelineExecutor(
            [MinhashDedupCluster(f"{work}/buckets", f"{work}/remove_ids", config=config)],
            tasks=1, logging_dir=f"{work}/logs/cluster"),
        "filter": LocalPipelineExecutor(
            [reader(), MinhashDedupFilter(f"{work}/remove_ids",
                                          exclusion_writer=JsonlWriter(f"{work}/removed", compression=None)),
             JsonlWriter(f"{work}/deduped", compression=None)],
            tasks=nshards, workers=2, logging_dir=f"{work}/logs/filter"),
    }
    seconds = {}
    for name, executor in stages.items():
        t0 = time.perf_counter()
        executor.run()
        seconds[name] = round(time.perf_counter() - t0, 3)
    # The pool processes are the forkserver's children, which it reaps; the forkserver itself is reaped only here,
    # so that their CPU reaches this process's parent (the measuring one) through RUSAGE_CHILDREN.
    server = multiprocess.forkserver._forkserver
    if server._forkserver_pid is not None:
        server._stop()
    print(json.dumps({"stage_wall_s": seconds}))


# ------------------------------------------------------------------------------------------------ set-up

def ensure_venv() -> str:
    """The python of bench/out/venv-datatrove, made with datatrove and xxhash if missing."""
    python = os.path.join(VENV, "bin", "python")
    if not os.path.exists(os.path.join(VENV, ".installed")):
        log(f"installing {DATATROVE} into {VENV}")
        shutil.rmtree(VENV, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *DEPS],
                       check=True)
        open(os.path.join(VENV, ".installed"), "w").close()
    return python


def venv_versions(python: str) -> dict:
    code = "import importlib.metadata as m; print(m.version('datatrove'), m.version('xxhash'))"
    dt, xx = subprocess.run([python, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    return {"datatrove": dt, "xxhash": xx}


def write_shards(docs: str, shards: str, n: int = 2) -> list[str]:
    """The corpus as n JSONL shards of consecutive ids ({"id", "text"}); rewritten only if missing."""
    import common

    paths = [os.path.join(shards, f"{i:05d}.jsonl") for i in range(n)]
    if all(os.path.exists(p) for p in paths):
        return paths
    files = common.list_corpus(docs)
    os.makedirs(shards, exist_ok=True)
    per = -(-len(files) // n)
    for i, path in enumerate(paths):
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            for doc_id, file in files[i * per:(i + 1) * per]:
                f.write(json.dumps({"id": doc_id, "text": common.read_text(file)}, ensure_ascii=False) + "\n")
        os.replace(path + ".tmp", path)
    return paths


def shard_ids(paths: list[str]) -> list[list[str]]:
    out = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            out.append([json.loads(line)["id"] for line in f])
    return out


def truth_pairs(docs: str, t: float, loaded: dict) -> set[tuple[str, str]]:
    """Pairs (a < b) of ids with exact Jaccard >= t (bench/truth.py), cached in bench/out/vs_datatrove/."""
    import truth

    import common

    path = os.path.join(WORK, f"truth-{os.path.basename(os.path.dirname(docs))}-{t}.tsv")
    if not os.path.exists(path):
        if not loaded:
            loaded["sets"] = truth.load(docs)
        ids, values, offsets = loaded["sets"]
        pairs, _ = truth.ground_truth(values, offsets, t)
        common.write_pairs(path + ".tmp", {(min(ids[a], ids[b]), max(ids[a], ids[b])): j for a, b, j in pairs})
        os.replace(path + ".tmp", path)
    return set(common.read_pairs(path))


# ------------------------------------------------------------------------------------------------ running

def run_neardup(shards: list[str], t: float, scratch: str) -> tuple[dict, dict]:
    work, out = os.path.join(scratch, "nd-work"), os.path.join(scratch, "nd-deduped")
    for d in (work, out):
        shutil.rmtree(d, ignore_errors=True)
    neardup = os.path.join(os.path.dirname(sys.executable), "neardup")
    cmd = [neardup, "run", "--jsonl", *shards, "-t", str(t), "--jobs", "2", "-w", work, "--write-deduped", out,
           "--format", "tsv"]
    with tempfile.TemporaryFile() as stdout:
        m, err = measure(cmd, stdout)
        stdout.seek(0)
        printed = stdout.read().decode("utf-8", "surrogateescape")
    band = re.search(r"^band: b=(\d+) bands x r=(\d+) rows", err, re.M)
    cand = re.search(r"^candidates: (\d+) pairs", err, re.M)
    keeper = {}
    with open(os.path.join(out, "removed.jsonl"), encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            keeper[row["id"]] = row["keeper"]
    pairs = set()
    for line in printed.splitlines():
        _, a, b = line.split("\t")
        pairs.add((min(a, b), max(a, b)))
    found = {"bands": int(band.group(1)), "rows": int(band.group(2)), "candidates": int(cand.group(1)),
             "keeper": keeper, "printed_pairs": pairs}
    return m, found


def run_datatrove(python: str, shards_dir: str, ids: list[list[str]], bands: int, rows: int, text_model: str,
                  scratch: str) -> tuple[dict, dict]:
    work = os.path.join(scratch, "dt-work")
    shutil.rmtree(work, ignore_errors=True)
    cmd = [python, os.path.abspath(__file__), "--worker", shards_dir, work, str(bands), str(rows), text_model]
    with tempfile.TemporaryFile() as stdout:
        m, _ = measure(cmd, stdout)
        stdout.seek(0)
        m.update(json.loads(stdout.read().decode().strip().splitlines()[-1]))
    matches = set()
    buckets = os.path.join(work, "buckets")
    for name in sorted(os.listdir(buckets)):
        with open(os.path.join(buckets, name), "rb") as f:
            for f1, d1, f2, d2 in struct.iter_unpack("<4I", f.read()):
                a, b = ids[f1][d1], ids[f2][d2]
                matches.add((min(a, b), max(a, b)))
    cluster_of = components(matches)  # its clusters: the components of its matches, as its stage 3 makes them
    removed = set()
    for name in sorted(os.listdir(os.path.join(work, "removed"))):
        with open(os.path.join(work, "removed", name), encoding="utf-8") as f:
            removed.update(json.loads(line)["id"] for line in f)
    kept = sum(1 for name in os.listdir(os.path.join(work, "deduped"))
               for _ in open(os.path.join(work, "deduped", name), encoding="utf-8"))
    # the removed records are all but one of each cluster: the same count as the components give
    clusters = set(cluster_of.values())
    if len(removed) != len(cluster_of) - len(clusters) or kept + len(removed) != sum(map(len, ids)):
        sys.exit(f"datatrove removed {len(removed)} and kept {kept}; its matches give {len(cluster_of)} documents in "
                 f"{len(clusters)} clusters")
    return m, {"cluster_of": cluster_of, "removed": removed, "candidates": len(matches)}


def components(pairs: set[tuple[str, str]]) -> dict[str, str]:
    """Each document of a pair -> the smallest id of its connected component (union-find)."""
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        while parent.get(x, x) != x:
            parent[x] = parent.get(parent[x], parent[x])
            x = parent[x]
        return x

    for a, b in pairs:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {x: root(x) for pair in pairs for x in pair}


def measure(cmd: list[str], stdout) -> tuple[dict, str]:
    """One child process tree (peers.measure): wall, CPU of the tree, its peak summed RSS, others' CPU; stderr."""
    import peers

    m, err, code, tree_peak = peers.measure(cmd, stdout)
    if code != 0:
        sys.exit(f"{' '.join(cmd)} exited {code}: {err.strip()[-2000:]}")
    return {"wall_s": m["wall"], "cpu_s": m["utime"] + m["stime"], "rss_mb": tree_peak / 2**20,
            "others_cpu_s": m["others_cpu_s"]}, err


# ------------------------------------------------------------------------------------------------ accuracy

def accuracy(cluster_of: dict[str, str], removed: set[str], truth: set[tuple[str, str]]) -> dict:
    """The definitions of the module's docstring, the same for both tools: cluster_of maps every document of a
    cluster (keeper too) to its cluster's name; removed is what the tool took out."""
    sizes: dict[str, int] = {}
    for c in cluster_of.values():
        sizes[c] = sizes.get(c, 0) + 1
    in_clusters = sum(n * (n - 1) // 2 for n in sizes.values())
    together = sum(1 for a, b in truth if a in cluster_of and cluster_of.get(a) == cluster_of.get(b))
    paired = {x for pair in truth for x in pair}
    return {"removed": len(removed), "clusters": len(sizes), "cluster_pairs": in_clusters,
            "recall": together / len(truth) if truth else None,
            "precision": together / in_clusters if in_clusters else None,
            "false_removals": len(removed - paired),
            "pairs_left": sum(1 for a, b in truth if a not in removed and b not in removed)}


def neardup_clusters(keeper: dict[str, str]) -> dict[str, str]:
    out = dict(keeper)
    out.update({k: k for k in keeper.values()})
    return out


def truth_summary(truth: set[tuple[str, str]]) -> dict:
    """Pairs, documents in a pair, and the fewest removals that leave no pair of T (all but one of each component)."""
    comp = components(truth)
    return {"pairs": len(truth), "docs": len(comp), "min_removals": len(comp) - len(set(comp.values()))}


# ------------------------------------------------------------------------------------------------ the benchmark

def bench(corpus: str, thresholds: list[float], reps: int, own: list[float]) -> dict:
    import joins
    import peers

    docs = joins.corpus_docs(corpus)
    python = ensure_venv()
    shards_dir = os.path.join(WORK, f"shards-{corpus}")
    shards = write_shards(docs, shards_dir)
    ids = shard_ids(shards)
    loaded: dict = {}
    truths = {t: truth_pairs(docs, t, loaded) for t in thresholds}
    peers.warm_cache(shards_dir)  # read once, unmeasured: the first tool does not pay for the disk
    scratch = tempfile.mkdtemp(prefix="vs-datatrove-", dir=OUT)
    runs: dict = {}
    found: dict = {}
    bands: dict = {}
    try:
        for rep in range(reps):
            for t in thresholds:
                for tool in ("neardup", "datatrove", "datatrove-own")[:3 if t in own else 2]:
                    if tool == "neardup":
                        m, got = run_neardup(shards, t, scratch)
                        bands[t] = (got["bands"], got["rows"])
                        acc = accuracy(neardup_clusters(got["keeper"]), set(got["keeper"]), truths[t])
                        printed = got["printed_pairs"]
                        acc["printed_pairs"] = len(printed)
                        acc["printed_recall"] = len(printed & truths[t]) / len(truths[t]) if truths[t] else None
                        acc["printed_extra"] = len(printed - truths[t])
                        removed = set(got["keeper"])
                    else:
                        m, got = run_datatrove(python, shards_dir, ids, *bands[t],
                                               "own" if tool == "datatrove-own" else "neardup", scratch)
                        acc = accuracy(got["cluster_of"], got["removed"], truths[t])
                        removed = got["removed"]
                    acc["candidates"] = got["candidates"]
                    if (tool, t) in found and found[(tool, t)][1] != removed:
                        sys.exit(f"{tool} removed other documents at rep {rep + 1} than at rep 1 (t = {t})")
                    found[(tool, t)] = (acc, removed)
                    runs.setdefault((tool, t), []).append(m)
                    log(f"{corpus} t={t} {tool} rep {rep + 1}: wall {m['wall_s']:.1f} s, CPU {m['cpu_s']:.1f} s, "
                        f"RSS {m['rss_mb']:.0f} MB, removed {len(removed)}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result: dict = {"docs": sum(map(len, ids)), "bytes": sum(os.path.getsize(p) for p in shards),
                    "versions": venv_versions(python), "truth": {str(t): truth_summary(truths[t]) for t in thresholds},
                    "runs": {}}
    for (tool, t), ms in runs.items():
        row = {"reps": len(ms), "bands": list(bands[t]), **found[(tool, t)][0]}
        row.update({f: statistics.median(m[f] for m in ms) for f in ("wall_s", "cpu_s", "others_cpu_s")})
        row["rss_mb"] = max(m["rss_mb"] for m in ms)
        if tool != "neardup":
            row["stage_wall_s"] = {s: statistics.median(m["stage_wall_s"][s] for m in ms) for s in STAGES}
        result["runs"][f"{tool} {t}"] = row
    return result


# ------------------------------------------------------------------------------------------------ report

def report(records: list[dict]) -> list[str]:
    """The section: what is compared and how, then one table per record (one configuration of the script each)."""
    from joins import _f

    import run as bench_run

    begin, end = bench_run.DATATROVE_SECTION
    res0 = records[0]["result"]
    lines = [begin, "## nearDup against datatrove's MinHash deduplication", "",
             f"The {records[0]['corpus']} corpus ({res0['docs']:,} documents, {res0['bytes'] / 1e6:.1f} MB) as two "
             "JSONL shards; nearDup `run --jsonl SHARDS -t T --jobs 2 --write-deduped OUT` against datatrove "
             f"{res0['versions']['datatrove']}'s four MinHash stages (signature, buckets, cluster, filter writing "
             "the kept and the removed records) under its LocalPipelineExecutor with workers = 2, with nearDup's "
             "word 5-shingles (a tokenizer doing what nearDup does in place of datatrove's spaCy one, datatrove's "
             "text normalisation off), nearDup's b x r for the threshold, seed 1, 64-bit xxhash. Both end with a "
             "deduplicated copy of the shards. datatrove has no verification step: every pair that shares a band "
             "bucket is a duplicate. `datatrove-own` is datatrove as shipped for English: its text normalisation "
             "(lowercase, punctuation to blanks, numbers to 0, no diacritics) and spaCy's tokenizer, other shingles "
             "than nearDup's (its accuracy against T includes that difference). Each run is a whole process tree: "
             "medians of the interleaved repetitions, CPU = user + system of the tree, peak RSS summed over the tree "
             "(sampled every 0.1 s); `CPU / nearDup` is the ratio of the medians of one run of the script; `others`: "
             "the CPU seconds the rest of this shared machine used during a run (its load).", "",
             "Accuracy against the exact pairs T (Jaccard >= t of the same shingle sets, bench/truth.py), the same "
             "definitions for both tools, from what each removed: a cluster is a kept document and the documents "
             "removed in its favour; `recall` is the share of T inside one cluster, `precision` the share of the "
             "pairs inside clusters that are in T; `false rm` counts removed documents with no pair in T at all "
             "(unique documents deleted), `left` the pairs of T whose two documents both stayed. `candidates`: "
             "nearDup's pairs sharing a bucket in at least one band; datatrove's, the distinct pairs its buckets "
             "stage wrote (in each band, each document paired with the one before it in key order: a chain per "
             "bucket, not every pair).", ""]
    for record in records:
        args, res = record["args"], record["result"]
        own = args.get("datatrove_own") or []
        lines += [f"`python bench/vs_datatrove.py --corpus {args['corpus']} --thresholds "
                  f"{' '.join(map(str, args['thresholds']))} --reps {args['reps']}"
                  + (f" --datatrove-own {' '.join(map(str, own))}" if own else "")
                  + f"` on {record['date']}, nearDup at {record['neardup']}, {record['python']}, {record['cores']} "
                  f"cores shared with other work, load average {record['load'][0]} at the start and "
                  f"{record['load'][1]} at the end, {record['seconds']} s in all:", "",
                  "| t | tool | b x r | reps | wall s | CPU s | CPU / nearDup | peak RSS MB | candidates | removed | "
                  "recall | precision | false rm | left | others CPU s |", "|---" * 15 + "|"]
        for t in args["thresholds"]:
            base = res["runs"].get(f"neardup {t}", {})
            for tool in ("neardup", "datatrove", "datatrove-own"):
                row = res["runs"].get(f"{tool} {t}")
                if not row:
                    continue
                ratio = row["cpu_s"] / base["cpu_s"] if base.get("cpu_s") else None
                lines.append(f"| {t} | {tool} | {row['bands'][0]} x {row['bands'][1]} | {row['reps']} | "
                             f"{_f(row['wall_s'])} | {_f(row['cpu_s'])} | {_f(ratio, 2)} | {_f(row['rss_mb'], 0)} | "
                             f"{row['candidates']:,} | {row['removed']:,} | {_f(row['recall'], 4)} | "
                             f"{_f(row['precision'], 4)} | {row['false_removals']} | {row['pairs_left']} | "
                             f"{_f(row['others_cpu_s'])} |")
        lines.append("")
        for t in args["thresholds"]:
            truth, nd = res["truth"][str(t)], res["runs"].get(f"neardup {t}")
            text = (f"t = {t}: T has {truth['pairs']:,} pairs among {truth['docs']:,} documents; removing all but "
                    f"one document of each of its connected components takes {truth['min_removals']:,} removals.")
            if nd:
                text += (f" nearDup printed {nd['printed_pairs']:,} verified pairs (recall "
                         f"{_f(nd['printed_recall'], 4)}, {nd['printed_extra']} not in T).")
            for tool in ("datatrove", "datatrove-own"):
                dt = res["runs"].get(f"{tool} {t}")
                if dt:
                    text += (f" {tool}'s stages, wall s: "
                             + ", ".join(f"{s} {dt['stage_wall_s'][s]:.1f}" for s in STAGES) + ".")
            lines += [text, ""]
    lines.append(end)
    return lines


def latest(path: str) -> list[dict]:
    """The latest record of each configuration (corpus, thresholds, --datatrove-own) in bench/out/vs_datatrove.jsonl,
    in the order the configurations first appear."""
    out: dict = {}
    with open(path) as f:
        for line in f:
            record = json.loads(line)
            args = record["args"]
            out[(record["corpus"], tuple(args["thresholds"]), tuple(args.get("datatrove_own") or ()))] = record
    return list(out.values())


def write_section(lines: list[str]) -> None:
    import run as bench_run

    path = os.path.join(HERE, "RESULTS.md")
    rest, _ = bench_run.split_engines_section(path, bench_run.DATATROVE_SECTION)
    with open(path + ".tmp", "w") as f:
        f.write(rest.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n")
    os.replace(path + ".tmp", path)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default="edited", help="a corpus folder name under bench/out/corpora/")
    ap.add_argument("--thresholds", nargs="+", type=float, default=[0.8, 0.5])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--datatrove-own", nargs="*", type=float, default=[], metavar="T",
                    help="thresholds at which datatrove also runs with its own text model (its TextNormConfig "
                         "defaults and spaCy's English tokenizer), as `datatrove-own`")
    ap.add_argument("--write", action="store_true", help="replace the section in bench/RESULTS.md with the latest "
                                                         "record of each configuration in bench/out/vs_datatrove.jsonl")
    ap.add_argument("--report-only", action="store_true", help="measure nothing: print (and with --write, write) "
                                                               "the section from bench/out/vs_datatrove.jsonl")
    ap.add_argument("--worker", nargs=5, metavar=("SHARDS", "WORK", "BANDS", "ROWS", "TEXT_MODEL"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        shards, work, b, r, text_model = args.worker
        worker(shards, work, int(b), int(r), text_model)
        return
    sys.path.insert(0, HERE)
    os.makedirs(WORK, exist_ok=True)
    history = os.path.join(OUT, "vs_datatrove.jsonl")
    if not args.report_only:
        started = time.time()
        load0 = open("/proc/loadavg").read().split()[0]
        result = bench(args.corpus, args.thresholds, args.reps, args.datatrove_own)
        load1 = open("/proc/loadavg").read().split()[0]
        sha = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True).stdout.strip()
        record = {"corpus": args.corpus, "date": str(datetime.date.today()), "args": {k: v for k, v in vars(
            args).items() if k != "worker"}, "load": [load0, load1], "neardup": f"commit {sha}",
                  "python": f"{platform.python_implementation()} {platform.python_version()}",
                  "cores": os.cpu_count(), "seconds": round(time.time() - started), "result": result}
        with open(history, "a") as f:
            f.write(json.dumps(record) + "\n")
    lines = report(latest(history))
    print("\n".join(lines))
    if args.write:
        write_section(lines)


if __name__ == "__main__":
    main()
