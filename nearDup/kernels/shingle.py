"""Shingling kernels: texts -> token hashes -> k-gram hashes -> per-document sorted unique sets (CSR).

A document is a sequence of tokens: words (maximal runs of \\w characters) or characters (--unit char). No Python
call is made per token or per shingle:
- words: the texts' code points are classified with a table of \\w over all of Unicode; a word's hash is the
  polynomial h = sum_i c_i * P^i mod 2^64 of its code points, from prefix sums (each token's sum is
  (S[end] - S[start]) * P^-start; P is odd, so invertible mod 2^64), mixed with its length by fmix64;
- characters: each distinct code point is hashed once with MurmurHash3 (mmh3, fixed seed), through a table;
then a k-shingle's hash combines its k token hashes with array arithmetic (`hashing.combine`). Sets are stored
CSR-style: `values` (uint32, each document's hashes sorted and unique, concatenated) and `offsets` (int64,
n_docs + 1), document d being values[offsets[d]:offsets[d+1]] (MMDS 3.2: a document is represented by its set of
k-shingles, hashed to integers).
"""
from __future__ import annotations

import functools

import mmh3
import numpy as np

from .hashing import U64, combine, fmix64

TOKEN_SEED = 0x6E656172  # fixed: the shingle hashes are part of the work-dir format
KGRAM_SEED = 0x44757021


_POLY = 0x100000001B3  # odd: the FNV-64 prime
_POLY_INVERSE = pow(_POLY, -1, 1 << 64)


@functools.cache
def word_characters() -> np.ndarray:
    """bool (0x110000,): the code points Python's re matches with \\w (checked for every code point by the tests),
    surrogates excluded. Built once per process, before workers fork."""
    import re

    codes = np.arange(0x110000, dtype="<u4")
    codes[0xD800:0xE000] = 0  # surrogates cannot be decoded; NUL is not a word character
    everything = codes.tobytes().decode("utf-32-le")
    table = np.zeros(0x110000, dtype=bool)
    for run in re.finditer(r"\w+", everything):  # the runs of word characters, found by re itself, in C
        table[run.start():run.end()] = True
    return table


_POWER_TABLES: dict[int, np.ndarray] = {}


def _powers(base: int, n: int) -> np.ndarray:
    """base^0 .. base^(n-1) mod 2^64, from a per-process table grown by doubling (partitions reuse it)."""
    table = _POWER_TABLES.get(base)
    if table is None or len(table) < n:
        size = max(n, 2 * len(table) if table is not None else 1 << 20)
        table = np.full(size, base, dtype=U64)
        table[0] = 1
        np.cumprod(table, out=table)
        _POWER_TABLES[base] = table
    return table[:n]


BATCH_CODE_POINTS = 1 << 20  # texts are hashed in batches this large: memory stays ~50 MB whatever the partition


def word_hashes(texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The words (maximal runs of \\w) of each text: (hashes uint32 (T,), words per text (n,), (starts, ends) of
    each word in the texts joined by NUL). Equal words get equal hashes; a word's hash is
    fmix64(sum_i c_i P^i + len * C) >> 32 over its code points c_0 .. c_{len-1}."""
    results, batch, size, offset = [], [], 0, 0
    for text in [*texts, None]:
        if batch and (text is None or size + len(text) > BATCH_CODE_POINTS):
            hashes, counts, positions = _word_hashes(batch)
            results.append((hashes, counts, positions + offset))
            offset += size
            batch, size = [], 0
        if text is not None:
            batch.append(text)
            size += len(text) + 1
    if not results:
        return np.empty(0, np.uint32), np.zeros(len(texts), np.int64), np.empty((2, 0), np.int64)
    hashes, counts, positions = zip(*results)
    return np.concatenate(hashes), np.concatenate(counts), np.concatenate(positions, axis=1)


def _word_hashes(texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    joined = "\0".join(texts)  # NUL is not a word character: no word spans two texts
    cps = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    is_word = word_characters()[cps].view(np.int8)
    edges = np.diff(np.r_[np.int8(0), is_word, np.int8(0)])
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    prefix = np.zeros(len(cps) + 1, dtype=U64)
    np.cumsum(cps.astype(U64) * _powers(_POLY, len(cps)), out=prefix[1:])
    poly = (prefix[ends] - prefix[starts]) * _powers(_POLY_INVERSE, len(cps) + 1)[starts]
    hashes = (fmix64(poly + (ends - starts).astype(U64) * U64(0x9E3779B97F4A7C15)) >> U64(32)).astype(np.uint32)
    text_starts = np.r_[0, np.cumsum([len(t) + 1 for t in texts])[:-1]] if texts else np.empty(0, np.int64)
    counts = np.bincount(np.searchsorted(text_starts, starts, side="right") - 1, minlength=len(texts))
    return hashes, counts, np.stack([starts, ends])


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
