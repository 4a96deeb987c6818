#!/usr/bin/env python
"""Measure how the shingle unit (word / char) and k affect exact Jaccard on real corpora, to choose nearDup's
default shingling. Independent of nearDup's code: shingles are plain Python sets and Jaccard is computed by brute
force, but the text normalisation is the same as nearDup's (NFKC + casefold; words = \\w+ runs; for char shingles,
whitespace runs collapsed to one blank and the text stripped; a document with fewer than k tokens has no shingle).

    python bench/choose_defaults.py [--corpora DIR] [--imdb-docs N]

Prints markdown tables:
 1. clough_stevenson: mean J(answer, original) per category; best single-threshold accuracy separating
    {cut, light} from {non}; AUC of {cut, light} vs {non} and of {heavy} vs {non}; mean containment
    C = |answer & original| / |answer| for light and non (answers are much shorter than the originals).
 2. bbcnews, all configurations: pairs sharing at least one shingle of document frequency <= 50 (a capped inverted
    index, done as a sparse matrix product), how many have J >= 0.8 / >= 0.5 (J exact, for all pairs: the capped
    index's shared counts plus a dense product over the shingles with df > 50; pairs at J >= 0.5 re-checked with
    plain sets), how many J >= 0.5 pairs the cap would miss, how many of the exact-duplicate pairs are at J = 1,
    and false-positive proxies among the J >= 0.5 pairs that are not exact duplicates: pairs across BBC topics, and
    pairs that share no 8-word passage (word-8-shingle containment < 0.1), with a few printed for inspection.
 3. set statistics: mean shingles per document, share of documents with no shingle (fewer than k tokens), share of
    distinct shingles seen in exactly one document, on bbcnews (exact duplicates removed) and an imdb50k sample.
"""
from __future__ import annotations

import argparse
import csv
import gzip
import itertools
import json
import re
import sys
import time
import unicodedata
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy import sparse

WORD = re.compile(r"\w+")
SPACE = re.compile(r"\s+")
WORD_KS = (1, 2, 3, 4, 5, 6, 7, 8)
CHAR_KS = (3, 4, 5, 6, 7, 8, 9, 10, 12)
CONFIGS = [("word", k) for k in WORD_KS] + [("char", k) for k in CHAR_KS]
MAX_DF = 50            # inverted-index cap: shingles in more than this many documents make no candidate pair
PASSAGE_K = 8          # "share a passage" = word-8-shingle containment >= PASSAGE_MIN
PASSAGE_MIN = 0.1
DEFAULT_CORPORA = Path(__file__).resolve().parents[2] / "shared" / "corpora"


# ------------------------------------------------------------------------------------------------- text

def decode(data: bytes) -> str:
    """As nearDup reads a file without BOM: UTF-8, invalid bytes replaced by U+FFFD."""
    return data.decode("utf-8", "replace")


def tokens(text: str, unit: str):
    text = unicodedata.normalize("NFKC", text).casefold()
    if unit == "word":
        return WORD.findall(text)
    return SPACE.sub(" ", text).strip()


def shingles(toks, k: int, unit: str) -> set:
    """The set of k-shingles: tuples of k words, or substrings of k characters; empty when fewer than k tokens."""
    if unit == "word":
        return set(zip(*(toks[i:] for i in range(k))))
    return {toks[i:i + k] for i in range(len(toks) - k + 1)}


def as_ids(sets: list[set]) -> list[frozenset]:
    """Replace shingles by small ints (one dictionary per configuration): same sets, cheaper intersections."""
    ids: dict = {}
    return [frozenset(ids.setdefault(s, len(ids)) for s in doc) for doc in sets]


def jaccard(a, b) -> float:
    if not a and not b:
        return 0.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


# ---------------------------------------------------------------------------------------------- corpora

def load_clough(root: Path):
    """(category, answer text, original text) for each of the 95 answers."""
    folder = root / "clough_stevenson"
    with open(folder / "file_information.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    read = lambda name: decode((folder / name).read_bytes())
    return [(r["Category"], read(r["File"]), read(f"orig_task{r['Task']}.txt"))
            for r in rows if r["Category"] != "orig"]


def load_jsonl(path: Path, limit: int | None = None):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in itertools.islice(f, limit)]


# ------------------------------------------------------------------------------------------ measurements

def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def auc(pos: list[float], neg: list[float]) -> float:
    """P(score of a random positive > that of a random negative), ties counted half (Mann-Whitney)."""
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def best_threshold(pos: list[float], neg: list[float]) -> tuple[float, float]:
    """Best accuracy of `J >= t means positive` over all thresholds t, and the t (midpoint) reaching it."""
    scored = sorted([(s, 1) for s in pos] + [(s, 0) for s in neg])
    n = len(scored)
    best, best_t = len(neg) / n, scored[-1][0] + 1e-9     # threshold above everything: all negative
    tp, tn = len(pos), 0                                   # threshold below everything: all positive
    if tp / n > best:
        best, best_t = tp / n, 0.0
    for i, (s, label) in enumerate(scored):               # move scored[i] to the negative side
        tp -= label
        tn += 1 - label
        if i + 1 < n and scored[i + 1][0] == s:
            continue
        if (tp + tn) / n > best:
            best = (tp + tn) / n
            best_t = (s + scored[i + 1][0]) / 2 if i + 1 < n else s + 1e-9
    return best, best_t


def clough_table(docs) -> list[str]:
    cats = ("cut", "light", "heavy", "non")
    lines = ["| unit | k | cut | light | heavy | non | best acc {cut,light} vs non (t) | AUC {cut,light} vs non "
             "| AUC heavy vs non | C light | C non |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for unit, k in CONFIGS:
        cache: dict[str, set] = {}

        def sh(text: str, cache=cache, unit=unit, k=k) -> set:  # the 5 originals are shingled once per configuration
            if text not in cache:
                cache[text] = shingles(tokens(text, unit), k, unit)
            return cache[text]

        by_cat, cont = defaultdict(list), defaultdict(list)
        for cat, answer, orig in docs:
            a, o = sh(answer), sh(orig)
            by_cat[cat].append(jaccard(a, o))
            cont[cat].append(len(a & o) / len(a) if a else 0.0)
        pos, neg = by_cat["cut"] + by_cat["light"], by_cat["non"]
        acc, t = best_threshold(pos, neg)
        means = " | ".join(f"{mean(by_cat[c]):.3f}" for c in cats)
        lines.append(f"| {unit} | {k} | {means} | {acc:.3f} ({t:.3f}) | {auc(pos, neg):.3f} "
                     f"| {auc(by_cat['heavy'], neg):.3f} | {mean(cont['light']):.3f} | {mean(cont['non']):.3f} |")
    return lines


def shingle_matrix(sets: list[set]):
    """Binary documents x shingles matrix (scipy CSR) and each shingle's document frequency. Columns are the distinct
    values of Python's 64-bit hash() of the shingles; a collision could only merge two shingles, and every pair
    counted at J >= 0.5 is re-checked below with the plain sets."""
    lens = np.fromiter(map(len, sets), dtype=np.int64, count=len(sets))
    hashes = np.fromiter(itertools.chain.from_iterable(map(hash, s) for s in sets), dtype=np.int64,
                         count=int(lens.sum()))
    uniq, col = np.unique(hashes, return_inverse=True)
    doc = np.repeat(np.arange(len(sets)), lens)
    matrix = sparse.csr_matrix((np.ones(len(col), np.float32), (doc, col)), shape=(len(sets), len(uniq)))
    return matrix, np.bincount(col, minlength=len(uniq))


def pair_stats(sets: list[set]):
    """Exact Jaccard of every pair (i < j), and which pairs are candidates: they share at least one shingle held by
    2..MAX_DF documents (the capped inverted index). Intersections = rare part (sparse product, which is the capped
    inverted index) + common part (dense product over the few shingles with df > MAX_DF)."""
    matrix, df = shingle_matrix(sets)
    rare = matrix[:, np.flatnonzero((df >= 2) & (df <= MAX_DF))]
    common = matrix[:, np.flatnonzero(df > MAX_DF)].toarray()
    shared_rare = (rare @ rare.T).toarray()
    inter = shared_rare + common @ common.T
    size = np.asarray(matrix.sum(axis=1)).ravel()
    jac = inter / np.maximum(size[:, None] + size[None, :] - inter, 1)
    upper = np.triu(np.ones(jac.shape, dtype=bool), 1)
    return jac, upper & (shared_rare > 0), upper


def bbc_tables(records) -> tuple[list[str], list[str], dict]:
    texts = [r["text"] for r in records]
    topic = [r["id"].split("/")[0] for r in records]
    toks = {"word": [tokens(t, "word") for t in texts], "char": [tokens(t, "char") for t in texts]}
    groups = defaultdict(list)                     # exact duplicates: the same normalised word sequence
    for d, w in enumerate(toks["word"]):
        groups[" ".join(w)].append(d)
    dup_pairs = {p for g in groups.values() if len(g) > 1 for p in itertools.combinations(g, 2)}
    n_groups = sum(1 for g in groups.values() if len(g) > 1)
    keep = np.array(sorted(g[0] for g in groups.values()))   # one document per exact-duplicate group
    passage = [shingles(w, PASSAGE_K, "word") for w in toks["word"]]

    def containment(i, j):
        a, b = passage[i], passage[j]
        return len(a & b) / min(len(a), len(b)) if a and b else 0.0

    lines = [f"exact-duplicate groups (identical normalised word sequence): {n_groups}, pairs: {len(dup_pairs)}; "
             f"candidate = shares >= 1 shingle with df <= {MAX_DF}; J exact over all pairs", "",
             "| unit | k | candidate pairs | J >= 0.8 | J >= 0.5 | J >= 0.5 not candidate | dup pairs at J = 1 "
             f"| non-dup J >= 0.5 | of which cross-topic | of which no {PASSAGE_K}-word passage |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    examples, stats = [], {}
    for unit, k in CONFIGS:
        sets = [shingles(t, k, unit) for t in toks[unit]]
        jac, cand, upper = pair_stats(sets)
        hi_i, hi_j = np.nonzero(upper & (jac >= 0.5))
        for i, j in itertools.islice(zip(hi_i.tolist(), hi_j.tolist()), 3000):   # re-check with plain sets
            assert abs(jaccard(sets[i], sets[j]) - jac[i, j]) < 1e-6, (unit, k, i, j)
        fp = [(float(jac[i, j]), i, j) for i, j in zip(hi_i.tolist(), hi_j.tolist()) if (i, j) not in dup_pairs]
        dup_ok = sum(1 for i, j in dup_pairs if cand[i, j] and jaccard(sets[i], sets[j]) == 1.0)
        cross = sum(1 for _, i, j in fp if topic[i] != topic[j])
        no_passage = [(jac_, i, j) for jac_, i, j in fp if containment(i, j) < PASSAGE_MIN]
        lines.append(f"| {unit} | {k} | {int(cand.sum())} | {int((cand & (jac >= 0.8)).sum())} "
                     f"| {int((cand & (jac >= 0.5)).sum())} | {int((upper & ~cand & (jac >= 0.5)).sum())} "
                     f"| {dup_ok}/{len(dup_pairs)} | {len(fp)} | {cross} | {len(no_passage)} |")
        for jac_, i, j in sorted(no_passage, reverse=True)[:2]:
            examples.append(f"- {unit} k={k}: J={jac_:.2f} {records[i]['id']} \"{texts[i][:40].splitlines()[0]}\" / "
                            f"{records[j]['id']} \"{texts[j][:40].splitlines()[0]}\" "
                            f"(word-{PASSAGE_K} containment {containment(i, j):.2f}, "
                            f"{len(sets[i])}/{len(sets[j])} shingles)")
        unique_sets = [sets[d] for d in keep]
        stats[unit, k] = set_stat_cells(unique_sets)
    return lines, examples, {"n_unique": len(keep), "cells": stats}


def set_stat_cells(sets: list[set]) -> list[str]:
    """Mean shingles per document, share of documents with no shingle, share of distinct shingles in one document."""
    lens = [len(s) for s in sets]
    hashes = np.fromiter(itertools.chain.from_iterable(map(hash, s) for s in sets), dtype=np.int64, count=sum(lens))
    _, df = np.unique(hashes, return_counts=True)
    return [f"{sum(lens) / len(sets):.0f}", f"{sum(1 for n in lens if n == 0) / len(sets):.1%}",
            f"{(df == 1).sum() / max(len(df), 1):.1%}"]


def set_stats(columns: dict[str, dict]) -> list[str]:
    names = list(columns)
    head = " | ".join(f"{n}: shingles/doc | {n}: docs < k tokens | {n}: df=1 share" for n in names)
    lines = [f"| unit | k | {head} |", "|---|---|" + "---|" * (3 * len(names))]
    for unit, k in CONFIGS:
        lines.append(f"| {unit} | {k} | " + " | ".join(c for n in names for c in columns[n][unit, k]) + " |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpora", type=Path, default=DEFAULT_CORPORA)
    ap.add_argument("--imdb-docs", type=int, default=5000, help="first N imdb50k reviews for the set statistics")
    args = ap.parse_args()
    if not (args.corpora / "bbcnews.jsonl.gz").exists():
        print(f"corpora not found in {args.corpora} (pass --corpora DIR)", file=sys.stderr)
        return 2
    start = time.perf_counter()
    clough = load_clough(args.corpora)
    bbc = load_jsonl(args.corpora / "bbcnews.jsonl.gz")
    imdb = load_jsonl(args.corpora / "imdb50k.jsonl.gz", args.imdb_docs)

    print(f"## 1. clough_stevenson: mean Jaccard(answer, original) per category (n = {len(clough)} answers)\n")
    print("\n".join(clough_table(clough)))
    print(f"\n## 2. bbcnews ({len(bbc)} docs): pairs by exact Jaccard\n")
    table, examples, bbc_stats = bbc_tables(bbc)
    print("\n".join(table))
    print(f"\nnon-duplicate J >= 0.5 pairs sharing no {PASSAGE_K}-word passage (highest J first, 2 per config):")
    print("\n".join(examples) or "- none")
    imdb_toks = {u: [tokens(r["text"], u) for r in imdb] for u in ("word", "char")}
    imdb_stats = {(u, k): set_stat_cells([shingles(t, k, u) for t in imdb_toks[u]]) for u, k in CONFIGS}
    print(f"\n## 3. set statistics: bbcnews ({bbc_stats['n_unique']} docs, exact duplicates removed), "
          f"imdb50k (first {len(imdb)} reviews)\n")
    print("\n".join(set_stats({"bbc": bbc_stats["cells"], "imdb": imdb_stats})))
    print(f"\n(total {time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
