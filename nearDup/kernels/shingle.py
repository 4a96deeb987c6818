"""Shingling kernels: token hashes -> k-gram hashes -> per-document sorted unique sets (CSR).

A document is a sequence of tokens (words, or characters for --unit char). Each distinct token is hashed once with
MurmurHash3 (mmh3, 32 bits, fixed seed); a k-shingle's hash combines the k token hashes with array arithmetic
(`hashing.combine`), so no Python call is made per shingle. Sets are stored CSR-style: `values` (uint32, each
document's hashes sorted and unique, concatenated) and `offsets` (int64, n_docs + 1), document d being
values[offsets[d]:offsets[d+1]] (MMDS 3.2: a document is represented by its set of k-shingles, hashed to integers).
"""
from __future__ import annotations

import mmh3
import numpy as np

from .hashing import U64, combine

TOKEN_SEED = 0x6E656172  # fixed: the shingle hashes are part of the work-dir format
KGRAM_SEED = 0x44757021


class TokenHasher(dict):
    """Memoised mmh3 of tokens: each distinct token costs one mmh3 call per process."""

    def __missing__(self, token: str) -> int:
        value = self[token] = mmh3.hash(token, TOKEN_SEED, signed=False)
        return value

    def hash_tokens(self, tokens: list[str]) -> np.ndarray:
        return np.fromiter(map(self.__getitem__, tokens), dtype=np.uint32, count=len(tokens))


class CodePointHasher:
    """mmh3 of single characters through a lazily filled table over all code points (U+0000..U+10FFFF)."""

    def __init__(self) -> None:
        self.table = np.zeros(0x110000, dtype=np.uint32)
        self.known = np.zeros(0x110000, dtype=bool)

    def hash_text(self, text: str) -> np.ndarray:
        cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
        missing = np.unique(cps[~self.known[cps]])
        for cp in missing.tolist():
            self.table[cp] = mmh3.hash(chr(cp).encode("utf-8", "surrogatepass"), TOKEN_SEED, signed=False)
        self.known[missing] = True
        return self.table[cps]


def kgram_hashes(token_hashes: np.ndarray, doc_lengths: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """k-gram hashes of many token sequences at once.

    token_hashes: uint32 (T,), the token hashes of all documents concatenated; doc_lengths: (n,) tokens per document.
    Returns (doc_index int64 (S,), hashes uint32 (S,)): for each window t_i..t_{i+k-1} lying inside one document,
    h = upper 32 bits of combine(t_i, ..., t_{i+k-1}). A document with fewer than k tokens has no shingle.
    """
    doc_lengths = np.asarray(doc_lengths, dtype=np.int64)
    total = int(doc_lengths.sum())
    if total < k:
        return np.empty(0, np.int64), np.empty(0, np.uint32)
    doc_of_token = np.repeat(np.arange(len(doc_lengths), dtype=np.int64), doc_lengths)
    windows = total - k + 1
    inside = doc_of_token[:windows] == doc_of_token[k - 1:]
    h = combine((token_hashes[j:j + windows] for j in range(k)), KGRAM_SEED)
    return doc_of_token[:windows][inside], (h[inside] >> U64(32)).astype(np.uint32)


def csr_sets(doc_index: np.ndarray, hashes: np.ndarray, n_docs: int) -> tuple[np.ndarray, np.ndarray]:
    """Group (doc, hash) pairs into per-document sorted unique sets: (values uint32, offsets int64 (n_docs+1,))."""
    keys = (doc_index.astype(U64) << U64(32)) | hashes.astype(U64)
    keys.sort()
    if len(keys):
        keep = np.empty(len(keys), dtype=bool)
        keep[0] = True
        np.not_equal(keys[1:], keys[:-1], out=keep[1:])
        keys = keys[keep]
    counts = np.bincount((keys >> U64(32)).astype(np.int64), minlength=n_docs)
    offsets = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return (keys & U64(0xFFFFFFFF)).astype(np.uint32), offsets
