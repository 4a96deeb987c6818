"""Exact-Jaccard ground truth of a corpus folder: every pair with word-5-shingle Jaccard >= 0.8.

    python bench/truth.py DIR OUT.tsv [--threshold 0.8] [--full]

Shingles come from the common shingler (common.py, the text model the peers use and that nearDup implements).
Each shingle (bytes) is mapped to its 64-bit Python hash (SipHash, one process, so consistent); the chance of any
collision among the shingles of these corpora is below 1e-6 (imdb: ~11M distinct), so the Jaccard values are exact.

Candidate pairs come from an inverted index over shingles. With --full every pair of documents sharing at least
one shingle is enumerated and its intersection counted (quadratic in posting-list lengths: fine for small
corpora). The default enumerates only pairs sharing a shingle within their *prefixes* (prefix filtering, Chaudhuri
et al. 2006; Bayardo et al. 2007): shingles ordered by increasing document frequency, a document's prefix being
its first |x| - ceil(t |x|) + 1 shingles. Any pair with J >= t shares at least ceil(t max(|x|,|y|)) shingles, so
their prefixes intersect: the default finds exactly the pairs --full finds (checked on the quick corpus), but
skips the pairs that only share frequent phrases. Every candidate is then verified with its exact Jaccard.
Documents with no shingle are never paired (their similarity is undefined), as in nearDup.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common


def load(root: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """ids, values (int64 hashes, each document's sorted and unique), offsets (n+1)."""
    files = common.list_corpus(root)
    ids = [i for i, _ in files]
    chunks, lengths = [], []
    for _, path in files:
        s = common.shingles(common.read_text(path))
        a = np.fromiter(map(hash, s), dtype=np.int64, count=len(s))
        a.sort()
        chunks.append(a)
        lengths.append(len(a))
    offsets = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = np.concatenate(chunks) if chunks else np.empty(0, np.int64)
    return ids, values, offsets


def _pairs_of_groups(keys: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """docs grouped by equal keys (keys sorted): every pair (a < b) inside a group, as int64 a * 2^32 + b."""
    if not len(keys):
        return np.empty(0, np.int64)
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    sizes = np.diff(np.r_[starts, len(keys)])
    out = []
    big = sizes >= 2
    for size in np.unique(sizes[big]):
        st = starts[sizes == size]
        ia, ib = np.triu_indices(int(size), 1)
        a = docs[st[:, None] + ia[None, :]].ravel()
        b = docs[st[:, None] + ib[None, :]].ravel()
        lo, hi = np.minimum(a, b), np.maximum(a, b)
        out.append(lo.astype(np.int64) << 32 | hi.astype(np.int64))
    return np.concatenate(out) if out else np.empty(0, np.int64)


def ground_truth(values: np.ndarray, offsets: np.ndarray, t: float, full: bool = False) -> tuple[list, dict]:
    n = len(offsets) - 1
    lengths = np.diff(offsets)
    doc_of = np.repeat(np.arange(n, dtype=np.int64), lengths)
    stats = {"docs": n, "shingles": int(len(values))}
    if full:
        order = np.argsort(values, kind="stable")
        keys = _pairs_of_groups(values[order], doc_of[order])
        pair_keys, inter = np.unique(keys, return_counts=True)
        stats["pairs_sharing_a_shingle"] = int(len(pair_keys))
        a, b = pair_keys >> 32, pair_keys & 0xFFFFFFFF
        union = lengths[a] + lengths[b] - inter
        keep = inter >= t * union - 1e-12
        return [(int(x), int(y), float(i / u)) for x, y, i, u in zip(a[keep], b[keep], inter[keep], union[keep])], stats
    uniq, inv, counts = np.unique(values, return_inverse=True, return_counts=True)
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[np.lexsort((uniq, counts))] = np.arange(len(uniq))
    tok_rank = rank[inv]
    del inv
    order = np.lexsort((tok_rank, doc_of))  # by document, then by increasing document frequency
    tok_rank = tok_rank[order]
    pos = np.arange(len(values), dtype=np.int64) - offsets[:-1][doc_of]
    prefix_len = lengths - np.ceil(t * lengths - 1e-9).astype(np.int64) + 1
    in_prefix = pos < prefix_len[doc_of]
    p_rank, p_doc = tok_rank[in_prefix], doc_of[in_prefix]
    o = np.argsort(p_rank, kind="stable")
    keys = np.unique(_pairs_of_groups(p_rank[o], p_doc[o]))
    stats["prefix_candidates"] = int(len(keys))
    a, b = keys >> 32, keys & 0xFFFFFFFF
    la, lb = lengths[a], lengths[b]
    size_ok = np.minimum(la, lb) >= t * np.maximum(la, lb) - 1e-9
    out = []
    for x, y in zip(a[size_ok].tolist(), b[size_ok].tolist()):
        sx = values[offsets[x]:offsets[x + 1]]
        sy = values[offsets[y]:offsets[y + 1]]
        inter = len(np.intersect1d(sx, sy, assume_unique=True))
        union = len(sx) + len(sy) - inter
        if inter >= t * union - 1e-12:
            out.append((x, y, inter / union))
    stats["verified"] = int(size_ok.sum())
    return out, stats


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus")
    ap.add_argument("out")
    ap.add_argument("--threshold", type=float, default=common.THRESHOLD)
    ap.add_argument("--full", action="store_true", help="enumerate every pair sharing a shingle (no prefix filter)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    ids, values, offsets = load(args.corpus)
    t1 = time.perf_counter()
    pairs, stats = ground_truth(values, offsets, args.threshold, args.full)
    common.write_pairs(args.out, {(min(ids[a], ids[b]), max(ids[a], ids[b])): j for a, b, j in pairs})
    print(f"truth: {len(pairs)} pairs with J >= {args.threshold} among {stats} (shingling {t1 - t0:.1f} s, "
          f"join {time.perf_counter() - t1:.1f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
