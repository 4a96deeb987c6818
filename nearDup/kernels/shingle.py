"""Shingling kernels: texts -> token hashes -> k-gram hashes (per document, grouped into CSR lists by sets.py).

A document is a sequence of tokens: words (maximal runs of \\w characters) or characters (--unit char). No Python
call is made per token or per shingle:
- words: the texts' code points are classified with a table of \\w over all of Unicode; a word's hash is the
  polynomial h = sum_i c_i * P^i mod 2^64 of its code points, from prefix sums (each token's sum is
  (S[end] - S[start]) * P^-start; P is odd, so invertible mod 2^64), mixed with its length by fmix64;
- characters: each distinct code point is hashed once with MurmurHash3 (mmh3, fixed seed), through a table;
then a k-shingle's hash combines its k token hashes with array arithmetic (`hashing.combine`). A document is
represented by its set of k-shingles, hashed to integers (MMDS 3.2): stored as the list of its shingle hashes in
text order (`sets.csr_lists`), made a sorted set when compared (`sets.gather_sets`).
"""
from __future__ import annotations

import functools
import itertools
import re

import mmh3
import numpy as np

from . import sets
from .hashing import U64, combine, fmix64

TOKEN_SEED = 0x6E656172  # fixed: the shingle hashes are part of the work-dir format
KGRAM_SEED = 0x44757021


_POLY = 0x100000001B3  # odd: the FNV-64 prime
_POLY_INVERSE = pow(_POLY, -1, 1 << 64)


_WORD_BLOCK_BITS = 12  # \w is classified 4096 code points at a time, the first time a text uses them
_WORD_TABLE = np.zeros(0x110000, dtype=bool)
_WORD_BLOCKS_DONE = np.zeros(0x110000 >> _WORD_BLOCK_BITS, dtype=bool)


def word_characters(code_points: np.ndarray | None = None) -> np.ndarray:
    """bool (0x110000,): the code points Python's re matches with \\w (checked for every code point by the tests),
    surrogates excluded; filled for the blocks of 4096 code points that code_points touch (None: all of them).

    Built whole up front (re over a string of every code point) it delayed every run's first partition; most
    text needs two blocks (Latin, and U+2000.. for punctuation such as curly quotes)."""
    needed = np.zeros(len(_WORD_BLOCKS_DONE), dtype=bool)
    needed[slice(None) if code_points is None else code_points >> _WORD_BLOCK_BITS] = True
    for block in np.flatnonzero(needed & ~_WORD_BLOCKS_DONE).tolist():
        first = block << _WORD_BLOCK_BITS
        codes = np.arange(first, first + (1 << _WORD_BLOCK_BITS), dtype="<u4")
        codes[(codes >= 0xD800) & (codes < 0xE000)] = 0  # surrogates cannot be decoded; NUL is no word character
        for run in re.finditer(r"\w+", codes.tobytes().decode("utf-32-le")):  # runs of word characters, by re
            _WORD_TABLE[first + run.start():first + run.end()] = True
        _WORD_BLOCKS_DONE[block] = True
    return _WORD_TABLE


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


BATCH_CODE_POINTS = 1 << 18  # texts are hashed in batches this large: arrays stay in cache, memory stays small


def prepare_word_tables() -> None:
    """Build the word kernel's per-process tables (\\w over all code points and below 256, the powers of P and
    P^-1 for a batch), costly in page faults mostly. Called before worker processes fork, they share the tables
    instead of each building its own."""
    _latin1_word_bytes()
    _powers(_POLY, BATCH_CODE_POINTS + 1)
    _powers(_POLY_INVERSE, BATCH_CODE_POINTS + 2)


def word_hashes(texts: list[str], positions: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The words (maximal runs of \\w) of each text: (hashes uint32 (T,), words per text (n,), (starts, ends) of
    each word in the texts joined by NUL). Equal words get equal hashes; a word's hash is
    fmix64(sum_i c_i P^i + len * C) >> 32 over its code points c_0 .. c_{len-1}.

    Texts of code points below 256 and the others are hashed in separate batches (a narrow batch takes one byte
    per code point; one wide character would make its whole batch four), then put back in order; the results do
    not depend on it. positions=False: None instead of the positions (shingling needs only the hashes)."""
    narrow = np.fromiter(map(_is_narrow, texts), dtype=bool, count=len(texts))
    if narrow.all() or not narrow.any():
        return _batched_word_hashes(texts, positions)
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)) + 1  # with the NUL after each
    text_start = np.r_[0, np.cumsum(lengths)]  # where each text starts in the texts joined by NUL
    groups = [np.flatnonzero(~narrow), np.flatnonzero(narrow)]  # indexed by kind: 0 wide, 1 narrow
    results = [_batched_word_hashes([texts[i] for i in g.tolist()], positions) for g in groups]
    # Put back in order run by run (a run: consecutive texts of one kind, consecutive in their group too).
    group_text_start = [np.r_[0, np.cumsum(lengths[g])] for g in groups]
    group_word_start = [np.r_[0, np.cumsum(c)] for _, c, _ in results]
    cuts = [0, *(np.flatnonzero(narrow[1:] != narrow[:-1]) + 1).tolist(), len(texts)]
    seen = [0, 0]  # texts of each kind before the run
    hashes, counts, where = [], [], []
    for lo, hi in itertools.pairwise(cuts):
        kind = int(narrow[lo])
        ga, gb = seen[kind], seen[kind] + hi - lo
        h, c, pos = results[kind]
        wa, wb = group_word_start[kind][ga], group_word_start[kind][gb]
        hashes.append(h[wa:wb])
        counts.append(c[ga:gb])
        if positions:
            where.append(pos[:, wa:wb] + (text_start[lo] - group_text_start[kind][ga]))  # type: ignore[index]  # set if positions
        seen[kind] = gb
    return np.concatenate(hashes), np.concatenate(counts), np.concatenate(where, axis=1) if positions else None


def _is_narrow(text: str) -> bool:
    """Whether every code point is below 256 (O(1) for ASCII, which CPython flags; else one encoding pass)."""
    if text.isascii():
        return True
    try:
        text.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


def _batched_word_hashes(texts: list[str], positions: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """word_hashes of texts joined in batches of about BATCH_CODE_POINTS."""
    results, size, offset = [], 0, 0
    batch: list[str] = []
    for text in [*texts, None]:
        if batch and (text is None or size + len(text) > BATCH_CODE_POINTS):
            hashes, counts, where = _word_hashes(batch, positions)
            results.append((hashes, counts, where + offset if positions else None))  # type: ignore[operator]  # set if positions
            offset += size
            batch, size = [], 0
        if text is not None:
            batch.append(text)
            size += len(text) + 1
    if not results:
        return (np.empty(0, np.uint32), np.zeros(len(texts), np.int64),
                np.empty((2, 0), np.int64) if positions else None)
    hashes, counts, where = zip(*results)
    return np.concatenate(hashes), np.concatenate(counts), np.concatenate(where, axis=1) if positions else None


@functools.cache
def _latin1_word_bytes() -> bytes:
    """bytes.translate table: byte c -> 1 if chr(c) is a word character, else 0 (code points below 256)."""
    return word_characters(np.zeros(1, np.uint32))[:256].astype(np.uint8).tobytes()


def _word_hashes(texts: list[str], positions: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    # NUL is not a word character: no word spans two texts; the NULs around the whole make every word's start
    # and end a change between neighbours.
    joined = "\0" + "\0".join(texts) + "\0"
    try:  # code points below 256 (most text): one byte each, classified by bytes.translate at memcpy speed
        raw = joined.encode("latin-1")
        cps = np.frombuffer(raw, dtype=np.uint8)
        is_word = np.frombuffer(raw.translate(_latin1_word_bytes()), dtype=np.bool_)
    except UnicodeEncodeError:
        cps = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype="<u4")
        is_word = word_characters(cps)[cps]
    # Edges between neighbours in the padded text alternate start, end, ...; edge i (between padded positions i
    # and i + 1) is position i of the unpadded text.
    edges = np.flatnonzero(is_word[1:] != is_word[:-1])
    starts, ends = edges[0::2], edges[1::2]
    cps = cps[1:-1]
    # prefix[i] = sum_{j < i} c_j P^j mod 2^64, computed in place (no temporaries the size of the text)
    prefix = np.empty(len(cps) + 1, dtype=U64)
    prefix[0] = 0
    np.multiply(cps, _powers(_POLY, len(cps)), out=prefix[1:], dtype=U64)  # widened as it is multiplied
    np.cumsum(prefix[1:], out=prefix[1:])
    poly = prefix[ends]
    poly -= prefix[starts]
    poly *= _powers(_POLY_INVERSE, len(cps) + 1)[starts]
    lengths = (ends - starts).astype(U64)
    lengths *= U64(0x9E3779B97F4A7C15)
    poly += lengths
    hashes = (fmix64(poly, out=poly) >> U64(32)).astype(np.uint32)
    # words per text: how many word starts fall in each text's span of the joined string
    bounds = np.zeros(len(texts) + 1, np.int64)
    np.cumsum([len(t) + 1 for t in texts], out=bounds[1:])
    counts = np.diff(np.searchsorted(starts, bounds))
    return hashes, counts, np.stack([starts, ends]) if positions else None


def word_state(text: str, state: tuple[int, int] = (0, 0)) -> tuple[int, int]:
    """(sum_i c_i P^i mod 2^64, length) of a word's code points, continued by text: the polynomial of word_hashes
    computed piece by piece, for a word too long to hold whole (a streamed file with no blank or punctuation for
    megabytes). Extending by B: sum(A + B) = sum(A) + P^len(A) sum(B). finish_word gives its hash."""
    poly, length = state
    for lo in range(0, len(text), BATCH_CODE_POINTS):
        cps = np.frombuffer(text[lo:lo + BATCH_CODE_POINTS].encode("utf-32-le", "surrogatepass"), dtype="<u4")
        part = int(np.multiply(cps, _powers(_POLY, len(cps)), dtype=U64).sum(dtype=U64))  # wraps mod 2^64
        poly = (poly + part * pow(_POLY, length, 1 << 64)) % (1 << 64)
        length += len(cps)
    return poly, length


def finish_word(state: tuple[int, int]) -> np.ndarray:
    """The hash (uint32, shape (1,)) word_hashes gives the word whose word_state this is."""
    poly, length = state
    h = np.array([(poly + length * 0x9E3779B97F4A7C15) % (1 << 64)], dtype=U64)
    return (fmix64(h, out=h) >> U64(32)).astype(np.uint32)


class CodePointHasher:
    """mmh3 of single characters through a lazily filled table over all code points (U+0000..U+10FFFF)."""

    def __init__(self) -> None:
        self.table = np.zeros(0x110000, dtype=np.uint32)
        self.known = np.zeros(0x110000, dtype=bool)

    def hash_text(self, text: str) -> np.ndarray:
        cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
        missing = sets.sorted_unique(cps[~self.known[cps]])
        for cp in missing.tolist():
            self.table[cp] = mmh3.hash(chr(cp).encode("utf-8", "surrogatepass"), TOKEN_SEED, signed=False)
        self.known[missing] = True
        return self.table[cps]


KGRAM_BLOCK = 1 << 15  # windows hashed at a time: 256 kB uint64 temporaries (in cache: faster than whole arrays)


def kgram_hashes(token_hashes: np.ndarray, doc_lengths: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """k-gram hashes of many token sequences at once.

    token_hashes: uint32 (T,), the token hashes of all documents concatenated; doc_lengths: (n,) tokens per document.
    Returns (doc_index int64 (S,), hashes uint32 (S,)): for each window t_i..t_{i+k-1} lying inside one document,
    h = upper 32 bits of combine(t_i, ..., t_{i+k-1}). A document with fewer than k tokens has no shingle.
    doc_index is ascending.
    """
    doc_lengths = np.asarray(doc_lengths, dtype=np.int64)
    total = int(doc_lengths.sum())
    if total < k:
        return np.empty(0, np.int64), np.empty(0, np.uint32)
    windows = total - k + 1
    # Every window is hashed (contiguous slices, no gathers); the k - 1 windows that run from each document into
    # the next are dropped afterwards. Document d's windows start at its first token and number max(L_d - k + 1, 0).
    per_doc = np.maximum(doc_lengths - (k - 1), 0)
    first = np.cumsum(doc_lengths) - doc_lengths
    inside = sets.ranges(first, per_doc)
    wide = np.asarray(token_hashes).astype(U64)  # widened once, not once per column
    h = np.empty(windows, np.uint32)
    for lo in range(0, windows, KGRAM_BLOCK):  # combine's ~20 passes run over blocks that stay in L2 cache
        hi = min(lo + KGRAM_BLOCK, windows)
        block = combine((wide[lo + j:hi + j] for j in range(k)), KGRAM_SEED)
        block >>= U64(32)
        h[lo:hi] = block
    return np.repeat(np.arange(len(doc_lengths), dtype=np.int64), per_doc), h[inside]
