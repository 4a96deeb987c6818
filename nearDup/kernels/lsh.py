"""Locality-sensitive hashing of MinHash signatures: the S-curve, the choice of (b, r), band keys, candidates.

MMDS 3.4.2: with b bands of r rows, two documents of Jaccard similarity s share a bucket in at least one band with
probability P(s) = 1 - (1 - s^r)^b. Its threshold is about (1/b)^(1/r); its inflection point, where P'' = 0, is
s* = ((r - 1) / (b*r - 1))^(1/r).
"""
from __future__ import annotations

import functools

import numpy as np

from .hashing import U64, combine

BAND_SEED = 0x62616E64
_GRID = np.linspace(0.0, 1.0, 4001)  # integration grid for the error areas


def s_curve(s, bands: int, rows: int):
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


def error_areas(threshold: float, bands: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """False-positive area FP = integral_0^t P(s) ds and false-negative area FN = integral_t^1 (1 - P(s)) ds.

    Trapezoid rule on a fixed grid, vectorised over arrays of (b, r); deterministic, needs no scipy.
    """
    b = np.asarray(bands, dtype=np.float64)[:, None]
    r = np.asarray(rows, dtype=np.float64)[:, None]
    lo = _GRID[_GRID <= threshold]
    hi = _GRID[_GRID >= threshold]
    fp = np.trapezoid(1.0 - (1.0 - lo[None, :] ** r) ** b, lo, axis=1) if len(lo) > 1 else np.zeros(len(b))
    fn = np.trapezoid((1.0 - hi[None, :] ** r) ** b, hi, axis=1) if len(hi) > 1 else np.zeros(len(b))
    return fp, fn


FP_WEIGHT, FN_WEIGHT = 0.1, 0.9


@functools.lru_cache(maxsize=64)  # ~50 ms a call, and a run asks in several stages
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


def bucket_pairs(keys: np.ndarray, doc_ids: np.ndarray, max_bucket: int):
    """Pairs of documents sharing a key in one band.

    keys: uint64 (n,), doc_ids: int64 (n,) ascending. Returns (pairs int64 (m, 2) with a < b, large) where large is
    an int64 (L, 3) array of (anchor, size, first key bits) for buckets of more than max_bucket documents: those
    emit only the star (anchor, member) pairs, so 10,000 copies cost 9,999 pairs, not 5e7.
    """
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    ids = doc_ids[order]
    n = len(sk)
    if n < 2:
        return np.empty((0, 2), np.int64), np.empty((0, 3), np.int64)
    starts = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]])
    lengths = np.diff(np.r_[starts, n])
    out = []
    small = (lengths >= 2) & (lengths <= max_bucket)
    for size in np.unique(lengths[small]).tolist():
        s = starts[lengths == size]
        iu, ju = np.triu_indices(size, 1)
        out.append(np.stack([ids[s[:, None] + iu].ravel(), ids[s[:, None] + ju].ravel()], axis=1))
    big = np.flatnonzero(lengths > max_bucket)
    large = []
    for q in big.tolist():
        members = ids[starts[q]:starts[q] + lengths[q]]  # ascending: stable sort of ascending ids
        anchor = members[0]
        out.append(np.stack([np.full(len(members) - 1, anchor), members[1:]], axis=1))
        large.append((anchor, lengths[q], int(sk[starts[q]] >> U64(1))))
    pairs = np.concatenate(out) if out else np.empty((0, 2), np.int64)
    return np.sort(pairs, axis=1), np.array(large, dtype=np.int64).reshape(-1, 3)


def unique_pairs(pairs: np.ndarray) -> np.ndarray:
    """Distinct rows of an (m, 2) array of non-negative int64 pairs (< 2^32 each), sorted by (a, b)."""
    if not len(pairs):
        return pairs.reshape(0, 2).astype(np.int64)
    code = (pairs[:, 0].astype(U64) << U64(32)) | pairs[:, 1].astype(U64)
    code.sort()
    keep = np.r_[True, code[1:] != code[:-1]]
    code = code[keep]
    return np.stack([(code >> U64(32)).astype(np.int64), (code & U64(0xFFFFFFFF)).astype(np.int64)], axis=1)
