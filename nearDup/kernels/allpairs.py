"""Exact set-similarity joins over CSR sets: every pair with Jaccard >= t, or every directed pair with
containment >= t, found by prefix filtering and verified exactly. Recall 1 by construction.

Sets are given as in kernels/sets.py: `values` uint32, each set's values sorted ascending without repeats,
`offsets` int64 (n + 1,). Empty sets are never paired (their similarity is undefined).

The AllPairs / PPJoin family (Bayardo, Ma, Srikant, "Scaling up all pairs similarity search", WWW 2007;
Xiao, Wang, Lin, Yu, "Efficient similarity joins for near duplicate detection", WWW 2008):

- Global order. Tokens are renumbered by document frequency, rarest first (ties by value), and each set is
  sorted in that order, so the prefixes below hold the rarest tokens and share few documents.
- Prefix filter (Xiao et al., Lemma 1). If |x ∩ y| >= a, the first |x| - a + 1 tokens of x and the first
  |y| - a + 1 tokens of y share a token: otherwise the common tokens would all lie in the last a - 1 positions
  of one of them.
- Jaccard. J(x, y) >= t gives I = |x ∩ y| >= t max(|x|, |y|) (the union is at least the larger set) and
  I >= t (|x| + |y|) / (1 + t) (from I >= t (|x| + |y| - I)). Order the sets by (length, number); for x before y
  (so |x| <= |y|) the length filter |x| >= t |y| holds, I >= 2t/(1+t) |x| and I >= t |y|, so by the prefix
  filter with a = I, x's index prefix of |x| - ceil(2t/(1+t) |x|) + 1 tokens (PPJoin's shorter one) meets y's
  probe prefix of |y| - ceil(t |y|) + 1 tokens.
- Containment, C(x, y) = |x ∩ y| / |x| >= t, directed x -> y. I >= ceil(t |x|), so the first
  |x| - ceil(t |x|) + 1 tokens of x cannot all be outside y: x's prefix meets y itself. So x's prefix is indexed
  and every token of y probes it (the filter bounds only the contained side). Length filter: |x| <= |y| / t,
  as I <= |y|.
- Positional filter (PPJoin). Let w be the last token, in the global order, that x's indexed prefix and y's
  probed tokens share, at positions p_x and p_y (0-based), and c the number of such shared tokens. Every common
  token before w lies before p_x in x and before p_y in y, so inside both, and is counted in c; after w at most
  min(|x| - p_x - 1, |y| - p_y - 1) more can be common. So I <= c + min(|x| - p_x - 1, |y| - p_y - 1), and a pair
  whose bound is below the overlap it needs (ceil(t (|x| + |y|) / (1 + t)), or ceil(t |x|) for containment) is
  dropped before verification.

The batch formulation (textbook PPJoin walks the documents one by one, a Python loop too slow for 1M sets):
1. One sort of the index entries (token, (length, number) rank of the document, position) gives the inverted
   index as one array, keyed token * n + rank, each token's documents in length order.
2. Every probe entry (y, token) finds, by two binary searches, the contiguous run of that token's entries whose
   documents pass the length filter (and, for Jaccard, come before y): one record per (x, y, token).
3. Records are made for a batch of probe documents at a time (at most a budget of records, from max_memory;
   all of a document's records in one batch, so each pair's records are together) and sorted stably by pair,
   which leaves each pair's records in token order: c is the run length, the last record gives w. The
   positional filter, then the bitmap filter (see `bitmaps`; on 20k Zipf-distributed sets at t = 0.5 it left
   1,972 of the positional filter's 733,326 pairs, all of them true pairs), keep the survivors, verified
   exactly in slices of bounded size: only the tokens after w, as the common tokens up to w are exactly c,
   |x ∩ y| = c + |x[p_x+1:] ∩ y[p_y+1:]| (sets.intersection_sizes over the sets in the global order).
Costs O(m log m) for m values to order tokens and sort the sets, O(P log P) for P prefix entries, O(R log R) for
the R records (join_cost counts them without making them), and the verification O(sum |x| + |y| over survivors).

Floating point: a required overlap ceil(t L) is taken as ceil(t L - 1e-6), never above the true ceiling.
The final test is the float comparison a reference makes (|x ∩ y| / |x ∪ y| >= t, or |x ∩ y| / |x| >= t), which
can accept a pair whose exact ratio is a rounding below t, while the float product can round above a whole
number (0.28 * 25 is 7.000000000000001, yet 7 / 25 >= 0.28): the margin keeps every filter weaker than that test.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .hashing import U64
from .sets import intersection_sizes, ranges, sorted_sets

_EPS = 1e-6
_RECORD_BYTES = 96   # arrays held per record while a batch is filtered
_VERIFY_BYTES = 40   # per value of the pairs verified at once (tagged uint64 keys, search results)
_BITMAP_VALUES = 8   # a pair's bitmap test (two gathered bitmaps, their XOR) costs about as much as 8 values


class JoinResult(NamedTuple):
    """pairs int64 (m, 2) sorted by (a, b): for Jaccard a < b, for containment a -> b (a contained in b);
    intersection |A ∩ B|, size_a |A|, size_b |B|: int64 (m,)."""
    pairs: np.ndarray
    intersection: np.ndarray
    size_a: np.ndarray
    size_b: np.ndarray


def _at_least(x) -> np.ndarray:
    """ceil(x) of a float bound, allowing for rounding in its computation (never above the true ceiling)."""
    return np.ceil(np.asarray(x, dtype=np.float64) - _EPS).astype(np.int64)


def check_sets(values: np.ndarray, offsets: np.ndarray) -> None:
    """ValueError unless (values, offsets) is CSR with each set's values strictly ascending."""
    offsets = np.asarray(offsets)
    if offsets.ndim != 1 or not len(offsets) or offsets[0] != 0 or offsets[-1] != len(values) \
            or bool((np.diff(offsets) < 0).any()):
        raise ValueError("offsets must start at 0, never decrease and end at len(values)")
    if len(values) > 1:
        ascending = np.asarray(values[1:]) > np.asarray(values[:-1])
        starts = offsets[1:-1]
        ascending[starts[(starts > 0) & (starts < len(values))] - 1] = True  # a set boundary may go down
        if not ascending.all():
            raise ValueError("each set's values must be sorted ascending without repeats")


def _check_threshold(threshold: float) -> None:
    if not 0.0 < threshold <= 1.0:
        raise ValueError("threshold must be in (0, 1]")


def frequency_order(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The sets rewritten in the global order: each value replaced by its token's rank by document frequency
    (rarest first, equal frequencies by value), each set sorted by rank. uint32, same offsets."""
    if not len(values):
        return np.empty(0, np.uint32)
    # an argsort and a scatter back, not a search of every value among the distinct ones: binary searches into
    # millions of values miss the cache
    order = np.argsort(values)
    s = values[order]
    new = np.r_[True, s[1:] != s[:-1]]
    starts = np.flatnonzero(new)
    frequency = np.diff(np.r_[starts, len(s)])
    rank = np.empty(len(starts), np.uint32)
    rank[np.argsort(frequency, kind="stable")] = np.arange(len(starts), dtype=np.uint32)
    ranked = np.empty(len(values), np.uint32)
    ranked[order] = rank[np.cumsum(new) - 1]
    ordered, _ = sorted_sets(ranked, offsets)
    return ordered


class _Plan(NamedTuple):
    """The inverted index of the prefixes and, per probe entry, its run of index entries [lo, lo + count)."""
    ordered: np.ndarray       # the sets in the global order (frequency_order)
    index_doc: np.ndarray
    index_pos: np.ndarray
    probe_doc: np.ndarray
    probe_pos: np.ndarray
    probe_starts: np.ndarray  # int64 (n + 1,): document y's probe entries are probe_starts[y]:probe_starts[y+1]
    lo: np.ndarray
    count: np.ndarray  # type: ignore[assignment]  # shadows tuple.count, which nothing here calls


def _entries(offsets: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The first length[d] entries of each set d: (indices into values, document, position)."""
    at = ranges(offsets[:-1], length)
    doc = np.repeat(np.arange(len(length), dtype=np.int64), length)
    return at, doc, at - offsets[:-1][doc]


def _plan(values: np.ndarray, offsets: np.ndarray, threshold: float, metric: str, probe: tuple[int, int] | None = None,
          in_order: bool = False) -> _Plan:
    """probe: only the documents [lo, hi) probe the index (join_part); in_order: values are in the global order
    already (frequency_order)."""
    offsets = np.asarray(offsets, dtype=np.int64)
    n = len(offsets) - 1
    size = np.diff(offsets)
    t = threshold
    ordered = np.asarray(values, np.uint32) if in_order else frequency_order(values, offsets)
    by_length = np.argsort(size, kind="stable")
    rank = np.empty(n, np.int64)
    rank[by_length] = np.arange(n)
    sorted_size = size[by_length]
    if metric == "jaccard":
        index_len = size - _at_least(2 * t / (1 + t) * size) + 1
        probe_len = size - _at_least(t * size) + 1
        first = np.searchsorted(sorted_size, _at_least(t * size), "left")  # |x| >= t |y|
        stop = rank  # x before y
    elif metric == "containment":
        index_len = size - _at_least(t * size) + 1
        probe_len = size  # all of y
        first = np.zeros(n, np.int64)
        largest = np.floor(size / t * (1 + 1e-12) + _EPS).astype(np.int64)  # |x| <= |y| / t
        stop = np.searchsorted(sorted_size, largest, "right")
    else:
        raise ValueError("metric must be 'jaccard' or 'containment'")
    index_len = np.clip(index_len, 0, size)
    probe_len = np.clip(probe_len, 0, size)
    if probe is not None:
        outside = np.ones(n, bool)
        outside[probe[0]:probe[1]] = False
        probe_len[outside] = 0
        if probe[1] > probe[0]:  # index only the sets a probe can pair with
            if metric == "jaccard":  # x before y
                index_len[rank >= rank[probe[0]:probe[1]].max()] = 0
            else:  # |x| <= |y| / t
                index_len[size > largest[probe[0]:probe[1]].max()] = 0
    tokens = int(ordered.max()) + 1 if len(ordered) else 1
    if tokens * max(n, 1) >= 2**63:
        raise ValueError("too many distinct values times sets for the join's 64-bit keys")
    at, doc, pos = _entries(offsets, index_len)
    key = ordered[at].astype(np.int64) * n + rank[doc]
    order = np.argsort(key, kind="stable")
    key, index_doc, index_pos = key[order], doc[order], pos[order]
    at, probe_doc, probe_pos = _entries(offsets, probe_len)
    base = ordered[at].astype(np.int64) * n
    # the queries in token order: numpy's binary search starts from the previous answer when the queries
    # ascend, and consecutive queries then read nearby keys, in cache
    by_token = np.argsort(base)
    lo, hi = np.empty_like(base), np.empty_like(base)
    lo[by_token] = np.searchsorted(key, (base + first[probe_doc])[by_token], "left")
    hi[by_token] = np.searchsorted(key, (base + stop[probe_doc])[by_token], "left")
    probe_starts = np.r_[0, np.cumsum(probe_len)].astype(np.int64)
    return _Plan(ordered, index_doc, index_pos, probe_doc, probe_pos, probe_starts, lo, np.maximum(hi - lo, 0))


def join_cost(values: np.ndarray, offsets: np.ndarray, threshold: float, metric: str = "jaccard",
              in_order: bool = False) -> int:
    """The number of (x, y, token) records the join makes before its positional filter: an upper bound on the
    pairs it verifies, from the prefixes' inverted index without making any pair. Within the sum over tokens of
    C(df_prefix, 2) (Jaccard; the looser bound that ignores the length filter). Costs O(m log m). in_order: the
    values are in the global order already (frequency_order)."""
    _check_threshold(threshold)
    check_sets(values, offsets)
    return int(_plan(values, offsets, threshold, metric, in_order=in_order).count.sum())


BITMAP_WORDS = 8  # 512 bits a set: 64 MB for 1M sets


def bitmaps(ordered: np.ndarray, offsets: np.ndarray, words: int = BITMAP_WORDS) -> np.ndarray:
    """uint64 (n, words): bit v mod (64 words) set for each value v of each set (Sandes, Teodoro, Melo, "Bitmap
    filter: speeding up exact set similarity joins with bitwise operations", Information Systems 2020).

    Each bit set in one bitmap and not the other needs a value of the symmetric difference, so
    popcount(b_x XOR b_y) <= |x Δ y| = |x| + |y| - 2 |x ∩ y|, i.e. |x ∩ y| <= (|x| + |y| - popcount) / 2."""
    n = len(offsets) - 1
    out = np.zeros(n * words, np.uint64)
    bit = ordered.astype(np.int64) % (64 * words)
    doc = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
    np.bitwise_or.at(out, doc * words + (bit >> 6), np.left_shift(np.uint64(1), (bit & 63).astype(np.uint64)))
    return out.reshape(n, words)


def _batches(weights: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Consecutive [start, stop) runs of items whose weights sum to at most budget (or one item, if larger)."""
    if not len(weights):
        return []
    end = np.cumsum(weights)
    group = (end - weights) // max(budget, 1)
    cuts = np.flatnonzero(np.diff(group)) + 1
    bounds = np.r_[0, cuts, len(weights)]
    return list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))


def _survivors(plan: _Plan, e0: int, e1: int, size: np.ndarray, need, containment: bool):
    """The (x, y) pairs of the records of probe entries [e0, e1) that pass the positional filter, with c and
    the positions of their last common token (px, py): the common tokens up to it are exactly c, so only what
    follows needs verifying."""
    count = plan.count[e0:e1]
    src = ranges(plan.lo[e0:e1], count)
    entry = np.repeat(np.arange(e0, e1, dtype=np.int64), count)
    x, y = plan.index_doc[src], plan.probe_doc[entry]
    if containment:
        other = x != y
        src, entry, x, y = src[other], entry[other], x[other], y[other]
    if not len(x):
        return x, y, x, x, x
    # records come grouped by y, so a y-major key is nearly sorted already (much faster to sort than x-major);
    # the stable sort keeps each pair's records in token order. y n + x < n^2 < 2^64.
    code = y.astype(U64) * U64(len(size)) + x.astype(U64)
    order = np.argsort(code, kind="stable")
    code = code[order]
    last = np.flatnonzero(np.r_[code[1:] != code[:-1], True])
    c = np.diff(np.r_[-1, last])
    last = order[last]
    x, y = x[last], y[last]
    px, py = plan.index_pos[src[last]], plan.probe_pos[entry[last]]
    bound = c + np.minimum(size[x] - px - 1, size[y] - py - 1)
    keep = bound >= need(size[x], size[y])
    return x[keep], y[keep], c[keep], px[keep], py[keep]


def _join(values, offsets, threshold: float, metric: str, max_memory: int, probe: tuple[int, int] | None = None,
          in_order: bool = False) -> JoinResult:
    _check_threshold(threshold)
    check_sets(values, offsets)
    values = np.asarray(values, dtype=np.uint32)
    offsets = np.asarray(offsets, dtype=np.int64)
    if len(offsets) - 1 >= 2**32:
        raise ValueError("the join numbers sets with 32 bits")
    t = threshold
    size = np.diff(offsets)
    containment = metric == "containment"

    def need(a, b):  # the overlap a pair of sizes a, b needs
        return _at_least(t * a) if containment else _at_least(t / (1 + t) * (a + b))

    def accept(inter, a, b):  # the float comparison a reference makes
        return inter / a >= t if containment else inter / (a + b - inter) >= t

    plan = _plan(values, offsets, t, metric, probe, in_order)
    per_doc = np.bincount(plan.probe_doc, weights=plan.count, minlength=len(size)).astype(np.int64)
    bits = bitmaps(plan.ordered, offsets)
    out = []
    for d0, d1 in _batches(per_doc, max(1, max_memory // _RECORD_BYTES)):
        x, y, c, px, py = _survivors(plan, int(plan.probe_starts[d0]), int(plan.probe_starts[d1]), size, need,
                                     containment)
        rest_x, rest_y = size[x] - px - 1, size[y] - py - 1  # the tokens after the last common one
        for v0, v1 in _batches(rest_x + rest_y + _BITMAP_VALUES, max(1, max_memory // _VERIFY_BYTES)):
            xs, ys, c_, lx, ly = x[v0:v1], y[v0:v1], c[v0:v1], rest_x[v0:v1], rest_y[v0:v1]
            differ = np.bitwise_count(bits[xs] ^ bits[ys]).sum(axis=1, dtype=np.int64)
            fit = (size[xs] + size[ys] - differ) // 2 >= need(size[xs], size[ys])
            xs, ys, c_, lx, ly = xs[fit], ys[fit], c_[fit], lx[fit], ly[fit]
            inter = c_ + intersection_sizes(plan.ordered[ranges(offsets[xs + 1] - lx, lx)], lx,
                                                  plan.ordered[ranges(offsets[ys + 1] - ly, ly)], ly)
            ok = accept(inter, size[xs], size[ys])
            out.append((xs[ok], ys[ok], inter[ok]))
    if not out:
        empty = np.empty(0, np.int64)
        return JoinResult(np.empty((0, 2), np.int64), empty, empty, empty)
    x, y, inter = (np.concatenate(parts) for parts in zip(*out))
    if not containment:
        x, y = np.minimum(x, y), np.maximum(x, y)
    order = np.argsort((x.astype(U64) << U64(32)) | y.astype(U64))
    x, y = x[order], y[order]
    return JoinResult(np.stack([x, y], axis=1).astype(np.int64), inter[order].astype(np.int64), size[x], size[y])


def jaccard_join(values: np.ndarray, offsets: np.ndarray, threshold: float,
                 max_memory: int = 1 << 28) -> JoinResult:
    """Every pair of non-empty sets a < b with |A ∩ B| / |A ∪ B| >= threshold (in (0, 1]), exactly.

    values uint32, offsets int64 (n + 1,), each set sorted ascending without repeats. max_memory (bytes) bounds
    the records and the verification held at once (a single document's records may exceed it). See the module
    docstring for the filters and the batch formulation."""
    return _join(values, offsets, threshold, "jaccard", max_memory)


def containment_join(values: np.ndarray, offsets: np.ndarray, threshold: float,
                     max_memory: int = 1 << 28) -> JoinResult:
    """Every directed pair a -> b of distinct non-empty sets with |A ∩ B| / |A| >= threshold (in (0, 1]),
    exactly: A is (largely) contained in B. Equal sets give both directions. As jaccard_join otherwise."""
    return _join(values, offsets, threshold, "containment", max_memory)


def join_part(ordered: np.ndarray, offsets: np.ndarray, threshold: float, metric: str, lo: int, hi: int,
              max_memory: int = 1 << 28) -> JoinResult:
    """The part of jaccard_join (metric "jaccard") or containment_join ("containment") that documents [lo, hi)
    find as probes, over sets already in the global order (`frequency_order`, computed once for all parts).

    Every pair is found from exactly one probe: for Jaccard the later of its two sets in (length, number) order,
    for containment the container b of a -> b. So the parts of consecutive ranges that cover [0, n) hold every
    pair of the whole join once, and a join split into tasks this way gives the same pairs however it is run.
    Only the sets that can pair with a probe are indexed (for Jaccard, those before the last probe)."""
    return _join(ordered, offsets, threshold, metric, max_memory, (lo, hi), in_order=True)
