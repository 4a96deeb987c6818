"""Locality-sensitive hashing of MinHash signatures: the S-curve, the choice of (b, r), band keys, candidates.

MMDS 3.4.2: with b bands of r rows, two documents of Jaccard similarity s share a bucket in at least one band with
probability P(s) = 1 - (1 - s^r)^b. Its threshold is about (1/b)^(1/r); its inflection point, where P'' = 0, is
s* = ((r - 1) / (b*r - 1))^(1/r).
"""
from __future__ import annotations

import functools
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike

from .hashing import U64, combine
from .sets import ranges, sorted_unique, stable_argsort


class ByNumber(Protocol):
    """Values by global number, looked up as an array of every document is (values[numbers]): such an array, or a
    lookup that makes only the values asked for (pipeline.copies.Pairing's ranks and labels)."""

    def __getitem__(self, numbers: Any, /) -> Any: ...

# A run of a band index (band_index): (sorted keys, their numbers), with its key filter if it has one (key_filter)
Run = tuple[np.ndarray, ...]

BAND_SEED = 0x62616E64
_GRID = np.linspace(0.0, 1.0, 4001)  # integration grid for the error areas


def s_curve(s, bands: int | np.ndarray, rows: int | np.ndarray):
    """P(s) = 1 - (1 - s^r)^b, the probability that a pair of similarity s becomes a candidate."""
    s = np.asarray(s, dtype=np.float64)
    return 1.0 - (1.0 - s ** rows) ** bands


def approximate_threshold(bands: int, rows: int) -> float:
    """(1/b)^(1/r): where the S-curve rises steepest, to a first approximation (MMDS 3.4.2)."""
    return (1.0 / bands) ** (1.0 / rows)


def inflection_point(bands: int, rows: int) -> float:
    """s* = ((r-1)/(b*r-1))^(1/r), the exact inflection of P(s) (0 for r = 1, where P is concave)."""
    if bands * rows == 1:
        return 0.0
    return ((rows - 1) / (bands * rows - 1)) ** (1.0 / rows)


def error_areas(threshold: float, bands: ArrayLike, rows: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """False-positive area FP = integral_0^t P(s) ds and false-negative area FN = integral_t^1 (1 - P(s)) ds.

    Trapezoid rule on a fixed grid, vectorised over arrays of (b, r); deterministic, needs no scipy.
    """
    b = np.asarray(bands, dtype=np.float64)[:, None]
    r = np.asarray(rows, dtype=np.float64)[:, None]
    lo = _GRID[_GRID <= threshold]
    hi = _GRID[_GRID >= threshold]
    fp = np.trapezoid(1.0 - (1.0 - lo[None, :] ** r) ** b, lo, axis=1) if len(lo) > 1 else np.zeros(len(b))
    fn = np.trapezoid((1.0 - hi[None, :] ** r) ** b, hi, axis=1) if len(hi) > 1 else np.zeros(len(b))
    return fp, fn  # type: ignore[return-value]  # trapezoid along axis 1 of a 2-D array gives an array


FP_WEIGHT, FN_WEIGHT = 0.1, 0.9


@functools.lru_cache(maxsize=64)  # integrates FP and FN for every (b, r), and a run asks in several stages
def optimal_bands(threshold: float, num_perm: int, fp_weight: float = FP_WEIGHT,
                  fn_weight: float = FN_WEIGHT) -> tuple[int, int]:
    """(b, r) with b*r <= num_perm minimising fp_weight * FP + fn_weight * FN (the criterion of datasketch's
    `_optimal_param`). Ties go to the first pair in (b, r) order, so the choice is deterministic.

    The default weights favour recall (0.1 / 0.9, where datasketch uses 0.5 / 0.5): every candidate is verified
    exactly, so a false positive costs one set intersection, while a false negative is a lost result. At t = 0.8
    with 128 permutations, equal weights give (9, 13), which makes a pair of J = 0.82 a candidate with
    probability 0.51; these give (14, 9) and 0.92."""
    if not 0.0 < threshold < 1.0:
        raise ValueError("threshold must be strictly between 0 and 1")
    bands, rows = zip(*[(b, r) for b in range(1, num_perm + 1) for r in range(1, num_perm // b + 1)])
    fp, fn = error_areas(threshold, np.array(bands), np.array(rows))
    best = int(np.argmin(fp_weight * fp + fn_weight * fn))
    return int(bands[best]), int(rows[best])


def band_keys(sig: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """key[d, j] = combine(sig[d, j*r], ..., sig[d, j*r + r - 1]) as uint64: equal bands give equal keys; unequal
    bands collide with probability ~2^-64. Shape (n_docs, bands). Rows past b*r are unused."""
    n = sig.shape[0]
    keys = np.empty((n, bands), dtype=U64)
    for j in range(bands):
        keys[:, j] = combine((sig[:, j * rows + i] for i in range(rows)), BAND_SEED + j)
    return keys


def band_index(keys: np.ndarray, numbers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One band's keys sorted for lookups: (keys ascending, their documents), equal keys by document number.

    keys: uint64 (n,); numbers: int64 (n,) ascending (the stable sort keeps them so within a key)."""
    order = stable_argsort(keys)
    return keys[order], numbers[order]


def stored_numbers(numbers: np.ndarray) -> np.ndarray:
    """Document numbers as a band index stores them: int32 while they fit, int64 beyond. An incremental run maps
    the numbers of the ~2,700 keys it finds in each band of 10M: at 4 bytes a number it maps half as many pages
    (a page fault each 64 kB), and the index holds 4 bytes a key less."""
    numbers = np.asarray(numbers)
    return numbers.astype(np.int32) if not numbers.size or int(numbers.max()) < 2**31 else numbers


FILTER_BITS = 8  # bits of a key filter per key, at least (8 to 16: it passes 0.4% to 3.3% of absent keys)
FILTER_MIN_LOG = 10  # and at least 2^10 bits
FILTER_HASHES = 4  # bits a key sets in its word


def key_filter(sorted_keys: np.ndarray) -> np.ndarray:
    """A filter of a band index's keys: a blocked Bloom filter (Putze, Sanders & Singler, "Cache-, hash- and
    space-efficient Bloom filters", 2007) of 2^L bits, the power of two >= FILTER_BITS bits a key, as 2^L / 64
    words. A key sets FILTER_HASHES bits of one word: the word is its top L - 6 bits, the bits its low 6-bit groups
    (band keys are hashes, uniform over 64 bits: the groups are independent of each other and of the word). A key
    absent from the index passes when its word holds all its bits: with n keys a word holds j ~ Poisson(64 n / 2^L)
    of them, so it passes with probability sum_j P(j) (1 - (63/64)^(4 j))^4, 0.8% at 13.4 bits a key and 3.3% at 8
    (against 7.2% and 11.8% for one hash, the filter stored before, which still reads: may_hold). One word per key
    asked: one cache miss, as for one hash.

    An incremental run looks up ~1% new keys in each band of a large index, and most of them are in no bucket:
    searching 10M sorted keys costs a chain of cache misses and maps most of the keys' pages; at 10M documents one
    hash let through 97,000 absent keys of 1.4M (with 37,000 present ones), four bits of a word ~10,000.

    sorted_keys: uint64, ascending. Returns uint64 (2^L / 64,)."""
    log = max(FILTER_MIN_LOG, (len(sorted_keys) * FILTER_BITS - 1).bit_length())
    out = np.zeros(1 << (log - 6), U64)
    if len(sorted_keys):
        word = (sorted_keys >> U64(64 - (log - 6))).astype(np.int64)  # ascending too: a word's keys neighbours
        first = np.flatnonzero(np.r_[True, word[1:] != word[:-1]])
        out[word[first]] = np.bitwise_or.reduceat(_filter_bits(sorted_keys), first)
    return out


def _filter_bits(keys: np.ndarray) -> np.ndarray:
    """Each key's bits in its word of a key filter: bit (key >> 6 i) & 63 for i < FILTER_HASHES."""
    bits = np.zeros(len(keys), U64)
    for i in range(FILTER_HASHES):
        bits |= U64(1) << ((keys >> U64(6 * i)) & U64(63))
    return bits


def may_hold(key_filter_: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Whether each of keys may be among the keys of key_filter_ (False: certainly not). A filter of bytes (uint8)
    is the one-hash filter of an index stored before: bit key >> (64 - L) of its 2^L, byte i >> 3, bit i & 7."""
    keys = np.asarray(keys, U64)
    if key_filter_.dtype == np.uint8:
        log = (len(key_filter_) * 8).bit_length() - 1
        slot = keys >> U64(64 - log)
        return ((key_filter_[(slot >> U64(3)).astype(np.int64)] >> (slot & U64(7)).astype(np.uint8)) & 1
                ).astype(bool)
    log = (len(key_filter_) * 64).bit_length() - 1
    bits = _filter_bits(keys)
    return (key_filter_[(keys >> U64(64 - (log - 6))).astype(np.int64)] & bits) == bits


def bucket_members(sorted_keys: np.ndarray, numbers: np.ndarray, keys: np.ndarray,
                   key_filter_: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The part of a band index (sorted_keys, numbers) whose keys are among `keys` (unique, ascending): whole
    buckets, still in index order. key_filter_: the index's (key_filter), if it has one: only the keys it may hold
    are searched."""
    if key_filter_ is not None:
        keys = keys[may_hold(key_filter_, keys)]
    lo = np.searchsorted(sorted_keys, keys, "left")
    at = ranges(lo, _run_lengths(sorted_keys, keys, lo))
    return sorted_keys[at], numbers[at].astype(np.int64)  # (stored as int32: stored_numbers)


SCAN_STEPS = 4  # bucket sizes counted by stepping; larger buckets (rare) by a second binary search


def _run_lengths(sorted_keys: np.ndarray, keys: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """How many entries of sorted_keys from lo on equal keys: searchsorted(sorted_keys, keys, "right") - lo, found
    by stepping from lo (the entry next to the one the left search ended on, most often in the same cache line)
    rather than by a second search of the whole band: most touched keys are in no bucket or one of 1 or 2
    documents, and the second search was half of an index run's lookups (10M keys a band)."""
    length = np.zeros(len(keys), np.int64)
    going = np.arange(len(keys))
    for _ in range(SCAN_STEPS):
        at = lo[going] + length[going]
        inside = at < len(sorted_keys)
        going = going[inside][sorted_keys[at[inside]] == keys[going[inside]]]
        if not len(going):
            return length
        length[going] += 1
    length[going] = np.searchsorted(sorted_keys, keys[going], "right") - lo[going]
    return length


def runs_members(runs: list[Run], keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """bucket_members of a band index kept as sorted runs (a base and the segments appended after it, each a
    band_index whose numbers all exceed those of the runs before it): the whole buckets of `keys` (unique,
    ascending) of all runs, as bucket_members of their band_index would give them. Merged in run order, later
    runs' entries after earlier ones' among equal keys, each bucket's numbers ascend, since the runs come in number
    order. A run with a key filter is searched through it."""
    return _merged([bucket_members(run[0], run[1], keys, *run[2:]) for run in runs])


def _merged(runs: list[Run]) -> tuple[np.ndarray, np.ndarray]:
    """Runs of (sorted keys, numbers), each numbered after the one before, as one: what a stable sort by key of
    their concatenation gives, made by merging them in turn (merge_sorted), in linear time."""
    keys, numbers = np.empty(0, U64), np.empty(0, np.int64)
    for run in runs:
        keys, numbers = merge_sorted(keys, numbers, np.asarray(run[0]), np.asarray(run[1]))
    return keys, numbers


def merge_sorted(keys_a: np.ndarray, numbers_a: np.ndarray, keys_b: np.ndarray, numbers_b: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Two runs of (keys ascending, their numbers) as one, a's entries before b's among equal keys: the stable
    sort of their concatenation. The smaller run's places are found by binary search in the larger and the two
    are scattered into place: an incremental band update merges ~2,700 old entries with 100,000 new ones, 0.3 ms
    against 2.7 ms for the sort."""
    if len(keys_a) <= len(keys_b):  # a's entries go before b's equal keys
        small, at = 0, np.searchsorted(keys_b, keys_a, side="left") + np.arange(len(keys_a))
    else:  # b's after a's equal keys
        small, at = 1, np.searchsorted(keys_a, keys_b, side="right") + np.arange(len(keys_b))
    keys = np.empty(len(keys_a) + len(keys_b), U64)
    numbers = np.empty(len(keys), np.int64)
    rest = np.ones(len(keys), bool)
    rest[at] = False
    for out, a, b in ((keys, keys_a, keys_b), (numbers, numbers_a, numbers_b)):
        out[at], out[rest] = (a, b) if small == 0 else (b, a)
    return keys, numbers


def merge_runs(runs: list[Run], rank: ByNumber) -> tuple[np.ndarray, np.ndarray]:
    """The band_index of the runs' documents that are still indexed (rank[number] >= 0): runs compacted into one
    (see runs_members for why merging them in number order gives the band_index)."""
    kept: list[Run] = []
    for run in runs:
        numbers = np.asarray(run[1])
        keep = rank[numbers] >= 0
        kept.append((np.asarray(run[0])[keep], numbers[keep]))
    return _merged(kept)


def bucket_pairs(sorted_keys: np.ndarray, numbers: np.ndarray, max_bucket: int, rank: ByNumber | None = None):
    """Pairs of documents sharing a key in one band, from (part of) its band_index.

    A bucket of up to max_bucket documents gives all its pairs. A larger one gives only the star (anchor, member)
    pairs, the anchor being its first document by rank (rank[number], a document's place in id order; None: by
    number), so 10,000 copies cost 9,999 pairs, not 5e7. Returns (pairs int64 (m, 2) with a < b, large) where
    large is an int64 (L, 3) array of (anchor, size, key bits as int64), in key order.
    """
    n = len(sorted_keys)
    if n < 2:
        return np.empty((0, 2), np.int64), np.empty((0, 3), np.int64)
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    lengths = np.diff(np.r_[starts, n])
    out = []
    small = (lengths >= 2) & (lengths <= max_bucket)
    for size in sorted_unique(lengths[small]).tolist():
        s = starts[lengths == size]
        iu, ju = np.triu_indices(size, 1)
        out.append(np.stack([numbers[s[:, None] + iu].ravel(), numbers[s[:, None] + ju].ravel()], axis=1))
    large = []
    for q in np.flatnonzero(lengths > max_bucket).tolist():
        members = numbers[starts[q]:starts[q] + lengths[q]]
        anchor = members[np.argmin(rank[members])] if rank is not None else members[0]
        out.append(np.stack([np.full(len(members) - 1, anchor), members[members != anchor]], axis=1))
        large.append((anchor, lengths[q], sorted_keys[starts[q]:starts[q] + 1].view(np.int64)[0]))
    pairs = np.concatenate(out) if out else np.empty((0, 2), np.int64)
    return np.sort(pairs, axis=1), np.array(large, dtype=np.int64).reshape(-1, 3)


def class_bucket_pairs(sorted_keys: np.ndarray, numbers: np.ndarray, max_bucket: int, rank: ByNumber,
                       label: ByNumber):
    """bucket_pairs with copies collapsed: documents of equal label (label[number], the smallest number of the
    documents with the same set) fall whole into one bucket, so a bucket of up to max_bucket documents gives the
    pairs of its distinct labels, plus (l, l) for a label with two or more documents there, standing for the pairs
    among them. A larger bucket gives its star pairs document by document, as bucket_pairs does.
    Returns (label pairs (m, 2) with a <= b, star pairs (s, 2) with a < b, large)."""
    lengths = np.diff(np.r_[np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]]), len(sorted_keys)]) \
        if len(sorted_keys) else np.empty(0, np.int64)
    bucket = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    over = (lengths > max_bucket)[bucket]
    small = ((lengths >= 2) & (lengths <= max_bucket))[bucket]  # most buckets hold one document: left out first
    stars, large = bucket_pairs(sorted_keys[over], numbers[over], max_bucket, rank)
    # each small bucket's distinct labels, and how many of its documents have each
    codes = np.sort((bucket[small].astype(U64) << U64(32)) | label[numbers[small]].astype(U64))
    first = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]]) if len(codes) else np.empty(0, np.int64)
    held = np.diff(np.r_[first, len(codes)])
    distinct = codes[first]
    labels = (distinct & U64(0xFFFFFFFF)).astype(np.int64)
    within = np.repeat(labels[held > 1], 2).reshape(-1, 2)
    across, _ = bucket_pairs(distinct >> U64(32), labels, max(len(labels), 2))
    return np.concatenate([within, across]), stars, large


def update_band(runs: list[Run], old_rank: ByNumber, large_keys: np.ndarray,
                died_keys: np.ndarray, new_keys: np.ndarray, new_numbers: np.ndarray, rank: ByNumber,
                max_bucket: int, old_label: ByNumber | None = None, label: ByNumber | None = None):
    """One band of an incremental run: (the new documents' run, pairs lost, pairs gained, large buckets).

    The band index is kept as sorted runs (runs_members): a base and one segment per run that added documents,
    never rewritten; a document that leaves the index stays in its run and is skipped by rank (-1: not indexed).
    The old runs gave bucket_pairs(old index, old_rank); with the new run appended they must give
    bucket_pairs(new index, rank). The two differ only in the touched buckets: those with a new document, one that
    left (died_keys: its keys), and the large ones (large_keys, as int64), whose star moves when the first
    document by id is renamed. So
        pairs(new) = pairs(old) - pairs(old, touched) + pairs(new, touched)
    counted per band; a pair of old documents in an untouched bucket is not looked at, nor read: each run is
    searched for the touched keys only. Returned large buckets are all of the band's (an untouched large bucket
    was large before, hence touched).

    With labels (old_label, label: class_bucket_pairs), lost and gained are (label pairs, star pairs). A label
    changes only when its class gains or loses a document, which touches the class's bucket in every band."""
    new_run = band_index(new_keys, new_numbers)
    touched = sorted_unique(np.concatenate([new_keys, died_keys, np.asarray(large_keys, np.int64).view(np.uint64)]))
    old = runs_members(runs, touched)
    new = _merged([old, new_run])  # (runs_members of both: every new document's bucket is touched)
    old_alive, alive = old_rank[old[1]] >= 0, rank[new[1]] >= 0
    old, new = (old[0][old_alive], old[1][old_alive]), (new[0][alive], new[1][alive])
    if label is not None and old_label is not None:
        *lost_pairs, _ = class_bucket_pairs(*old, max_bucket, old_rank, old_label)
        *gained_pairs, large = class_bucket_pairs(*new, max_bucket, rank, label)
        return new_run, tuple(lost_pairs), tuple(gained_pairs), large
    lost, _ = bucket_pairs(*old, max_bucket, old_rank)
    gained, large = bucket_pairs(*new, max_bucket, rank)
    return new_run, lost, gained, large


def pair_codes(pairs: np.ndarray) -> np.ndarray:
    """a * 2^32 + b of (a, b) pairs of non-negative numbers < 2^32: ascending exactly when the pairs are sorted."""
    return (pairs[:, 0].astype(U64) << U64(32)) | pairs[:, 1].astype(U64)


def _code_pairs(codes: np.ndarray) -> np.ndarray:
    """The (a, b) pairs of pair_codes, as int64 (m, 2)."""
    return np.stack([(codes >> U64(32)).astype(np.int64), (codes & U64(0xFFFFFFFF)).astype(np.int64)], axis=1)


def count_pairs(pairs: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows of an (m, 2) array of non-negative int64 pairs (< 2^32 each), sorted by (a, b), with the sum
    of their counts: how many bands a candidate pair shares a bucket in, kept so that an incremental run can add
    and remove one band's pairs and know when a pair has no bucket left."""
    if not len(pairs):
        return pairs.reshape(0, 2).astype(np.int64), np.empty(0, np.int64)
    code = pair_codes(pairs)
    order = np.argsort(code)  # (not stable: the counts of a pair are summed, in any order)
    code = code[order]
    first = np.flatnonzero(np.r_[True, code[1:] != code[:-1]])
    return _code_pairs(code[first]), np.add.reduceat(np.asarray(counts, np.int64)[order], first)


def bucket_pair_count(keys: np.ndarray, weights: np.ndarray) -> int:
    """sum over the buckets of one band of C(W, 2), W the summed weights of the bucket's members (weights: how many
    documents each member stands for, e.g. a class of copies): the pairs that share a bucket in this band."""
    order = np.argsort(keys)  # (not stable: a bucket's weights are summed, in any order)
    k = keys[order]
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]]) if len(k) else np.empty(0, np.int64)
    w = np.add.reduceat(np.asarray(weights, np.int64)[order], starts) if len(k) else np.empty(0, np.int64)
    return int((w * (w - 1) // 2).sum())


def unique_pairs(pairs: np.ndarray) -> np.ndarray:
    """Distinct rows of an (m, 2) array of non-negative int64 pairs (< 2^32 each), sorted by (a, b)."""
    if not len(pairs):
        return pairs.reshape(0, 2).astype(np.int64)
    code = pair_codes(pairs)
    code.sort()
    return _code_pairs(code[np.r_[True, code[1:] != code[:-1]]])
