#!/usr/bin/env python
"""Measure how the shingle unit (word / char) and k affect exact Jaccard on real corpora, to choose nearDup's
default shingling. Independent of nearDup's code: shingles are plain Python sets and Jaccard is computed by brute
force, but the text normalisation is the same as nearDup's (NFKC + casefold; words = \\w+ runs; for char shingles,
whitespace runs collapsed to one blank and the text stripped; a document with fewer than k tokens has no shingle).

    python bench/choose_defaults.py [--corpora DIR] [--imdb-docs N]

Prints markdown tables:
 1. clough_stevenson: mean J(answer, original) per category; best single-threshold accuracy separating
    {cut, light} from {non}; AUC of {cut, light} vs {non} and of {heavy} vs {non}.
 2. bbcnews: pairs sharing at least one shingle of document frequency <= 50 (inverted index, capped), how many have
    J >= 0.8 / >= 0.5, how many of the exact-duplicate pairs are at J = 1, and the false-positive proxies among the
    J >= 0.5 pairs that are not exact duplicates: pairs across BBC topics, and pairs that share no 8-word passage
    (word-8-shingle containment < 0.1), with a few printed for inspection.
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
from collections import Counter, defaultdict
from pathlib import Path

WORD = re.compile(r"\w+")
SPACE = re.compile(r"\s+")
WORD_KS = (1, 2, 3, 4, 5, 6, 7, 8)
CHAR_KS = (3, 4, 5, 6, 7, 8, 9, 10, 12)
CONFIGS = [("word", k) for k in WORD_KS] + [("char", k) for k in CHAR_KS]
BBC_CONFIGS = [("word", k) for k in (1, 2, 3, 4, 5, 6, 8)] + [("char", k) for k in (3, 4, 5, 7, 9, 12)]
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
             "| AUC heavy vs non |", "|---|---|---|---|---|---|---|---|---|"]
    for unit, k in CONFIGS:
        cache: dict[str, set] = {}

        def sh(text: str) -> set:                  # the 5 originals are shingled once per configuration
            if text not in cache:
                cache[text] = shingles(tokens(text, unit), k, unit)
            return cache[text]

        by_cat = defaultdict(list)
        for cat, answer, orig in docs:
            by_cat[cat].append(jaccard(sh(answer), sh(orig)))
        pos, neg = by_cat["cut"] + by_cat["light"], by_cat["non"]
        acc, t = best_threshold(pos, neg)
        means = " | ".join(f"{sum(by_cat[c]) / len(by_cat[c]):.3f}" for c in cats)
        lines.append(f"| {unit} | {k} | {means} | {acc:.3f} ({t:.3f}) | {auc(pos, neg):.3f} "
                     f"| {auc(by_cat['heavy'], neg):.3f} |")
    return lines


def candidate_pairs(sets: list[frozenset]) -> set[tuple[int, int]]:
    """Pairs of documents sharing at least one shingle held by 2..MAX_DF documents."""
    postings = defaultdict(list)
    for d, s in enumerate(sets):
        for x in s:
            postings[x].append(d)
    pairs = set()
    for docs in postings.values():
        if 2 <= len(docs) <= MAX_DF:
            pairs.update(itertools.combinations(docs, 2))
    return pairs


def bbc_tables(records) -> tuple[list[str], list[str]]:
    texts = [r["text"] for r in records]
    topic = [r["id"].split("/")[0] for r in records]
    word_toks = [tokens(t, "word") for t in texts]
    char_toks = [tokens(t, "char") for t in texts]
    groups = defaultdict(list)                     # exact duplicates: the same normalised word sequence
    for d, w in enumerate(word_toks):
        groups[" ".join(w)].append(d)
    dup_pairs = {p for g in groups.values() if len(g) > 1 for p in itertools.combinations(g, 2)}
    n_groups = sum(1 for g in groups.values() if len(g) > 1)
    passage = as_ids([shingles(w, PASSAGE_K, "word") for w in word_toks])

    def containment(i, j):
        a, b = passage[i], passage[j]
        return len(a & b) / min(len(a), len(b)) if a and b else 0.0

    lines = [f"exact-duplicate groups (identical normalised word sequence): {n_groups}, pairs: {len(dup_pairs)}; "
             f"candidate = shares >= 1 shingle with df <= {MAX_DF}", "",
             "| unit | k | candidate pairs | J >= 0.8 | J >= 0.5 | dup pairs at J = 1 | non-dup J >= 0.5 "
             f"| of which cross-topic | of which no {PASSAGE_K}-word passage |",
             "|---|---|---|---|---|---|---|---|---|"]
    examples = []
    for unit, k in BBC_CONFIGS:
        sets = as_ids([shingles(t, k, unit) for t in (word_toks if unit == "word" else char_toks)])
        pairs = candidate_pairs(sets)
        ge8 = ge5 = 0
        fp = []
        for i, j in pairs:
            a, b = sets[i], sets[j]
            la, lb = len(a), len(b)
            if 2 * min(la, lb) < max(la, lb):      # J <= min/max < 0.5: cannot count, skip the intersection
                continue
            jac = jaccard(a, b)
            if jac >= 0.5:
                ge5 += 1
                ge8 += jac >= 0.8
                if (i, j) not in dup_pairs:
                    fp.append((jac, i, j))
        dup_ok = sum(1 for p in dup_pairs if p in pairs and jaccard(sets[p[0]], sets[p[1]]) == 1.0)
        cross = sum(1 for _, i, j in fp if topic[i] != topic[j])
        no_passage = [(jac, i, j) for jac, i, j in fp if containment(i, j) < PASSAGE_MIN]
        lines.append(f"| {unit} | {k} | {len(pairs)} | {ge8} | {ge5} | {dup_ok}/{len(dup_pairs)} | {len(fp)} "
                     f"| {cross} | {len(no_passage)} |")
        for jac, i, j in sorted(no_passage, reverse=True)[:2]:
            examples.append(f"- {unit} k={k}: J={jac:.2f} {records[i]['id']} \"{texts[i][:45].splitlines()[0]}\" / "
                            f"{records[j]['id']} \"{texts[j][:45].splitlines()[0]}\" "
                            f"(word-{PASSAGE_K} containment {containment(i, j):.2f}, "
                            f"{len(sets[i])}/{len(sets[j])} shingles)")
    return lines, examples


def set_stats(corpora: dict[str, list[str]]) -> list[str]:
    names = list(corpora)
    head = " | ".join(f"{n}: shingles/doc | {n}: docs < k tokens | {n}: df=1 share" for n in names)
    lines = [f"| unit | k | {head} |", "|---|---|" + "---|" * (3 * len(names))]
    toks = {n: {u: [tokens(t, u) for t in texts] for u in ("word", "char")} for n, texts in corpora.items()}
    for unit, k in CONFIGS:
        cells = []
        for n in names:
            sets = [shingles(t, k, unit) for t in toks[n][unit]]
            df = Counter(x for s in sets for x in s)
            once = sum(1 for c in df.values() if c == 1)
            cells += [f"{sum(map(len, sets)) / len(sets):.0f}", f"{sum(1 for s in sets if not s) / len(sets):.1%}",
                      f"{once / max(len(df), 1):.1%}"]
        lines.append(f"| {unit} | {k} | " + " | ".join(cells) + " |")
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
    table, examples = bbc_tables(bbc)
    print("\n".join(table))
    print(f"\nnon-duplicate J >= 0.5 pairs sharing no {PASSAGE_K}-word passage (highest J first, 2 per config):")
    print("\n".join(examples) or "- none")
    seen, unique_bbc = set(), []
    for r in bbc:                                  # exact duplicates removed: df=1 then means "only in this doc"
        key = " ".join(tokens(r["text"], "word"))
        if key not in seen:
            seen.add(key)
            unique_bbc.append(r["text"])
    print(f"\n## 3. set statistics: bbcnews ({len(unique_bbc)} docs, exact duplicates removed), "
          f"imdb50k (first {len(imdb)} reviews)\n")
    print("\n".join(set_stats({"bbc": unique_bbc, "imdb": [r["text"] for r in imdb]})))
    print(f"\n(total {time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
