"""Integer mixing functions shared by the shingle, signature and band kernels.

All arithmetic is on numpy unsigned arrays, where multiplication wraps modulo 2^64 (or 2^32): that wrap is the
intended ring arithmetic of the MurmurHash3 finalisers, not an overflow.
"""
from __future__ import annotations

import numpy as np

U64 = np.uint64
U32 = np.uint32

# MurmurHash3 fmix64 / fmix32 constants (Appleby, MurmurHash3.cpp).
_F64_1 = U64(0xFF51AFD7ED558CCD)
_F64_2 = U64(0xC4CEB9FE1A85EC53)
_F32_1 = U32(0x85EBCA6B)
_F32_2 = U32(0xC2B2AE35)
# Odd multiplier for combining words (the 64-bit golden-ratio constant): odd, so x -> x * C is a bijection mod 2^64.
COMBINE_MULT = U64(0x9E3779B97F4A7C15)


def fmix64(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser, a bijection on [0, 2^64) with full avalanche.

    h ^= h >> 33; h *= 0xff51afd7ed558ccd; h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53; h ^= h >> 33.
    out: a uint64 array of x's shape to compute in (x itself to overwrite it); default a new array.
    """
    if out is None:
        out = np.array(x, dtype=U64)
    elif out is not x:
        out[...] = x
    shifted = np.empty_like(out)  # one scratch array instead of a temporary per step
    for mult in (_F64_1, _F64_2, None):
        np.right_shift(out, U64(33), out=shifted)
        out ^= shifted
        if mult is not None:
            out *= mult
    return out


def fmix32(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finaliser, a bijection on [0, 2^32).

    h ^= h >> 16; h *= 0x85ebca6b; h ^= h >> 13; h *= 0xc2b2ae35; h ^= h >> 16.
    """
    x = np.asarray(x, dtype=U32).copy()
    x ^= x >> U32(16)
    x *= _F32_1
    x ^= x >> U32(13)
    x *= _F32_2
    x ^= x >> U32(16)
    return x


def combine(columns, seed: int) -> np.ndarray:
    """Hash a sequence of equal-length uint32/uint64 columns, position by position, into uint64.

    acc_0 = seed; acc_{j+1} = (acc_j XOR c_j) * C mod 2^64; result = fmix64(acc_k).
    Order-sensitive (the k-gram "a b" differs from "b a"); used for word k-grams and LSH band keys.
    Computed in one accumulator, in place.
    """
    acc = None
    for col in columns:
        col = np.asarray(col)
        if col.dtype.kind != "u":  # XOR with a signed array has no integer result type in numpy
            col = col.astype(U64)
        if acc is None:
            acc = col.astype(U64)  # a copy
            acc ^= U64(seed)
        else:
            acc ^= col
        acc *= COMBINE_MULT
    if acc is None:
        raise ValueError("combine needs at least one column")
    return fmix64(acc, out=acc)
