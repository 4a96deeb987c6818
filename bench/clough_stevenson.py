"""Precision and recall of the labelled pairs of Clough and Stevenson's plagiarism corpus, with Jaccard and with
containment (the figures in the README's "Measuring precision and recall").

    python bench/clough_stevenson.py [--corpus ../shared/corpora/clough_stevenson] [--out bench/out/clough] [-k 5]

The truth: each of the 95 answers paired with the original of its task (file_information.csv), label 1 for cut,
light and heavy revision, 0 for non-plagiarism (the corpus is not copied into the repository; read in place).
Three scorings at each threshold, all on nearDup's word k-shingles (default 5; --include '*.txt'):
- nearDup: `neardup run -t T0` then `neardup eval --truth FILE` (LSH candidates, exact verification);
- exact Jaccard: every pair with J >= t, from allpairs.jaccard_join over the work dir's stored shingle sets;
- containment C(answer in original) = |A ∩ O| / |A|: from allpairs.containment_join over the same sets, the pair
  (answer, original) found when the answer -> original direction is (the kernel-level figure until `neardup run
  --metric containment` exists).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys

import numpy as np

from nearDup.kernels import allpairs, evaluation, sets
from nearDup.report.evaluate import stored_sets
from nearDup.store.workdir import WorkDir

HERE = os.path.dirname(os.path.abspath(__file__))
# ../shared/corpora beside the repository (or beside the folder of worktrees that holds it)
CORPUS = next((c for c in (os.path.join(HERE, *[".."] * up, "shared", "corpora", "clough_stevenson") for up in (2, 3))
               if os.path.isdir(c)), os.path.join(HERE, "..", "..", "shared", "corpora", "clough_stevenson"))
NEARDUP = [sys.executable, "-m", "nearDup"]
THRESHOLDS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def write_truth(corpus: str, path: str) -> list[tuple[str, str, bool]]:
    with open(os.path.join(corpus, "file_information.csv"), newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["Category"] != "orig"]
    pairs = [(r["File"], f"orig_task{r['Task']}.txt", r["Category"] != "non") for r in rows]
    with open(path, "w") as f:
        f.write("a\tb\tlabel\n")
        f.writelines(f"{a}\t{b}\t{int(label)}\n" for a, b, label in pairs)
    return pairs


def scores_at(found: dict[tuple[str, str], float], truth, t: float) -> tuple:
    """(precision, recall, F1) of the labelled pairs (answer, original), found when its score is >= t."""
    codes = {(a, b): i for i, (a, b, _) in enumerate(truth)}

    def coded(pairs) -> np.ndarray:
        return np.sort(np.array([codes[p] for p in pairs], np.int64))
    hit = coded(p for p in codes if found.get(p, 0.0) >= t)
    counts = evaluation.pair_counts(hit, coded((a, b) for a, b, label in truth if label),
                                    coded((a, b) for a, b, label in truth if not label))
    return evaluation.precision_recall_f1(counts)


def joined(work: str, t: float, metric: str) -> dict[tuple[str, str], float]:
    """{(a, b): score} of every pair the exact join finds at t: Jaccard (a, b in id order, both directions given),
    or containment of a in b (directed)."""
    ids, values, offsets = stored_sets(WorkDir(work, create=False))
    join = allpairs.jaccard_join if metric == "jaccard" else allpairs.containment_join
    result = join(values, offsets, t)
    if metric == "jaccard":
        score = sets.jaccard(result.intersection, result.size_a, result.size_b)
    else:
        score = result.intersection / result.size_a
    out = {}
    for (a, b), s in zip(result.pairs.tolist(), score.tolist()):
        out[(os.path.basename(ids[a]), os.path.basename(ids[b]))] = s
        if metric == "jaccard":
            out[(os.path.basename(ids[b]), os.path.basename(ids[a]))] = s
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default=CORPUS)
    ap.add_argument("--out", default=os.path.join(HERE, "out", "clough"))
    ap.add_argument("-k", type=int, default=5, help="words per shingle (nearDup's -k)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    truth_path = os.path.join(args.out, "truth.tsv")
    truth = write_truth(args.corpus, truth_path)
    work = os.path.join(args.out, f"work-k{args.k}")
    lowest = THRESHOLDS[0]
    subprocess.run([*NEARDUP, "-w", work, "run", args.corpus, "--include", "*.txt", "-t", str(lowest), "-k",
                    str(args.k), "-q"],
                   check=True)
    out = subprocess.run([*NEARDUP, "-w", work, "eval", "--truth", truth_path, "--step", "0.1", "--format", "jsonl"],
                         check=True, capture_output=True, text=True).stdout
    run = {round(r["threshold"], 6): r for r in map(json.loads, out.splitlines()) if r["type"] == "score"}
    jaccard, containment = joined(work, lowest, "jaccard"), joined(work, lowest, "containment")
    positive = sum(label for *_, label in truth)
    print(f"{len(truth)} labelled pairs ({positive} plagiarised, {len(truth) - positive} not); word {args.k}-shingles; "
          f"nearDup run at t = {lowest}, its bands chosen for it")
    print("| t | nearDup (LSH) P / R / F1 | exact Jaccard P / R / F1 | containment P / R / F1 |")
    print("|---|---|---|---|")

    def cell(p, r, f) -> str:
        return " / ".join("-" if x is None else f"{x:.2f}" for x in (p, r, f))
    for t in THRESHOLDS:
        r = run.get(t)
        lsh_cell = cell(r["precision"], r["recall"], r["f1"]) if r else "-"
        exact, contained = cell(*scores_at(jaccard, truth, t)), cell(*scores_at(containment, truth, t))
        print(f"| {t} | {lsh_cell} | {exact} | {contained} |")


if __name__ == "__main__":
    main()
