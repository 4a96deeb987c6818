"""MinHash signatures over CSR shingle sets.

Two families, both with Pr[sig_A[i] == sig_B[i]] = J(A, B) for every row i (MMDS 3.3.3):

- `affine_signatures`: the textbook scheme of MMDS 3.3.5. Row i simulates a permutation of the rows by
  h_i(x) = (a_i * x + b_i) mod p and sig[d, i] = min over x in S_d of h_i(x). Costs O(num_perm) per shingle.
- `oph_signatures`: one-permutation hashing (Li, Owen, Zhang 2012) with optimal densification (Shrivastava 2017).
  One bijection pi permutes the 32-bit shingle hashes; its range is cut into num_perm equal bins, bin(x) =
  floor(pi(x) * num_perm / 2^32), and sig[d, i] = min pi(x) over the x in S_d that fall in bin i. A bin left empty
  copies the value of the first non-empty bin along a probe sequence j_0(i), j_1(i), ... that depends only on i
  and the seed, so two documents that both miss bin i copy from the same place: the collision probability of
  every row stays J (Shrivastava 2017, Theorem 1). Costs O(1) per shingle. The default.

Empty sets get EMPTY in every row; callers must keep them out of banding (their "similarity" is undefined).
"""
from __future__ import annotations

import numpy as np

from .hashing import U32, U64, fmix32, fmix64

EMPTY = np.uint32(0xFFFFFFFF)
AFFINE_PRIME = 4294967291  # largest prime below 2^32: a*x + b < p^2 + p < 2^64, exact in uint64


def draw_affine_parameters(num_perm: int, seed: int, prime: int = AFFINE_PRIME) -> tuple[np.ndarray, np.ndarray]:
    """a_i uniform in [1, p), b_i uniform in [0, p): the drawn permutations (a pure function of the seed)."""
    rng = np.random.Generator(np.random.PCG64(seed))
    a = rng.integers(1, prime, size=num_perm, dtype=np.uint64)
    b = rng.integers(0, prime, size=num_perm, dtype=np.uint64)
    return a, b


def affine_signatures(values: np.ndarray, offsets: np.ndarray, a: np.ndarray, b: np.ndarray,
                      prime: int = AFFINE_PRIME, chunk: int = 1 << 22) -> np.ndarray:
    """sig[d, i] = min_{x in S_d} ((a_i * (x mod p) + b_i) mod p), uint32 (n_docs, len(a)) (MMDS 3.3.5).

    Requires a_i, b_i < p and p < 2^32, so every intermediate fits in uint64 (unlike datasketch#239).
    """
    n = len(offsets) - 1
    num_perm = len(a)
    sig = np.full((n, num_perm), EMPTY, dtype=np.uint32)
    lengths = np.diff(offsets)
    nonempty = np.flatnonzero(lengths)
    if not len(nonempty):
        return sig
    x = values.astype(U64) % U64(prime)
    a = np.asarray(a, dtype=U64)
    b = np.asarray(b, dtype=U64)
    per = max(1, chunk // max(1, len(x)))
    starts = offsets[nonempty]
    for lo in range(0, num_perm, per):
        h = (x[:, None] * a[None, lo:lo + per] + b[None, lo:lo + per]) % U64(prime)
        sig[nonempty, lo:lo + per] = np.minimum.reduceat(h, starts, axis=0).astype(np.uint32)
    return sig


def permute32(values: np.ndarray, seed: int) -> np.ndarray:
    """pi(x) = fmix32(x XOR s1) XOR s2, a seeded bijection of [0, 2^32) (every step is invertible)."""
    s = int(fmix64(np.array([seed], dtype=U64))[0])
    return fmix32(values.astype(U32) ^ U32(s & 0xFFFFFFFF)) ^ U32(s >> 32)


def oph_signatures(values: np.ndarray, offsets: np.ndarray, num_perm: int, seed: int) -> np.ndarray:
    """One-permutation MinHash with optimal densification: uint32 (n_docs, num_perm). See the module docstring."""
    n = len(offsets) - 1
    sig = np.full((n, num_perm), EMPTY, dtype=np.uint32)
    if not len(values):
        return sig
    pv = permute32(values, seed)
    if num_perm > 1 and num_perm & (num_perm - 1) == 0:  # a power of two (the default): floor(pv m / 2^32) is a shift
        bins = (pv >> U32(32 - num_perm.bit_length() + 1)).astype(np.intp)
    else:
        bins = ((pv.astype(U64) * U64(num_perm)) >> U64(32)).astype(np.intp)
    doc = np.repeat(np.arange(n, dtype=np.intp), np.diff(offsets))
    np.minimum.at(sig.reshape(-1), doc * num_perm + bins, pv)
    return densify(sig, seed)


def _probe(bins: np.ndarray, attempt: int, num_perm: int, seed: int) -> np.ndarray:
    """j_attempt(i): a pseudo-random bin, the same for every document (depends on i, attempt and seed only)."""
    if attempt >= 64 * num_perm:  # astronomically unlikely; a deterministic sweep guarantees termination
        return (bins + attempt) % num_perm
    salt = (attempt * 0x9E3779B97F4A7C15 + seed) & 0xFFFFFFFFFFFFFFFF  # Python ints: no scalar overflow warning
    h = fmix64(bins.astype(U64) * U64(0x100000001B3) + U64(salt))
    return ((h >> U64(32)) * U64(num_perm) >> U64(32)).astype(np.intp)


def densify(sig: np.ndarray, seed: int) -> np.ndarray:
    """Fill each empty bin (d, i) with sig[d, j_t(i)] for the first t at which bin j_t(i) was non-empty.

    Reads only bins that were non-empty before densification (Shrivastava 2017, "optimal densification").
    Rows with no non-empty bin (empty documents) stay EMPTY. Modifies and returns sig.
    """
    _n, num_perm = sig.shape
    empty = sig == EMPTY
    has_data = ~empty.all(axis=1)
    d, i = np.nonzero(empty & has_data[:, None])
    attempt = 0
    while len(d):
        j = _probe(i, attempt, num_perm, seed)
        found = ~empty[d, j]
        sig[d[found], i[found]] = sig[d[found], j[found]]
        d, i = d[~found], i[~found]
        attempt += 1
    return sig
