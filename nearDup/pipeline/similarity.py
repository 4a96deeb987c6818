"""The one exact-similarity path, shared by verify, cluster, query and compare: |A ∩ B|, |A| and |B| of documents'
shingle sets, the signature agreement of their MinHash signatures, and the records of scored pairs.

Documents are addressed by number in a store: a sequence of shards, each (values, offsets), the CSR shingle lists
of its documents (sets.csr_lists; any order, repeats allowed), or a 2-D array of their signatures, with `starts`,
the number of each shard's first document. The stage files of a work dir are one store (PartitionArrays, global
numbers); documents held in memory (a query's, compare's two files) are a store of one shard (`one_shard`).

    J(A, B) = |A ∩ B| / |A ∪ B| = |A ∩ B| / (|A| + |B| - |A ∩ B|)      (MMDS 3.1.1)
    C(A, B) = |A ∩ B| / |A|, the containment of A in B
    P[h_i(A) = h_i(B)] = J(A, B) for each MinHash function h_i, so the share of equal signature entries estimates J
    (MMDS 3.3.3)
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol

import numpy as np

from ..kernels import sets
from ..kernels.sets import jaccard

__all__ = ["Shards", "Store", "agreement", "containment", "jaccard", "one_shard", "pair_records", "set_overlap"]


class Shards(Protocol):
    """Shard p's arrays as shards[p]: a list, or driver.PartitionArrays (which maps each file when asked for)."""

    def __getitem__(self, p: int, /) -> Any: ...


Store = tuple[Shards, np.ndarray]  # (shards, starts): see the module docstring


def one_shard(shard) -> Store:
    """A store of documents held in memory, numbered from 0: shard is (values, offsets) or a 2-D array of rows."""
    return [shard], np.zeros(1, np.int64)


def set_overlap(shingles: Shards, starts: np.ndarray, a: np.ndarray, b: np.ndarray,
                other: Store | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(|A ∩ B|, |A|, |B|), int64 arrays, of the shingle sets of documents a[i] and b[i]: a's (and b's) in the
    store (shingles, starts), or b's in `other` when they are held apart (the index's, for a query's documents).

    Each document's set is gathered once however many pairs it is in, and a pair of equal sets (copies of one
    text) is counted without being intersected: a bucket of 1,000 copies is 500,000 pairs of only 1,000 sets."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    if other is None:
        numbers = sets.sorted_unique(np.concatenate([a, b]))
        values, lengths = sets.gather_sets(shingles, starts, numbers)
        ia, ib = np.searchsorted(numbers, a), np.searchsorted(numbers, b)
    else:  # both sides' sets in one list: a's, then b's
        numbers_a, numbers_b = sets.sorted_unique(a), sets.sorted_unique(b)
        values_a, lengths_a = sets.gather_sets(shingles, starts, numbers_a)
        values_b, lengths_b = sets.gather_sets(*other, numbers_b)
        values, lengths = np.concatenate([values_a, values_b]), np.concatenate([lengths_a, lengths_b])
        ia, ib = np.searchsorted(numbers_a, a), len(numbers_a) + np.searchsorted(numbers_b, b)
    offsets = np.cumsum(lengths) - lengths
    la, lb = lengths[ia], lengths[ib]
    label = sets.identical_sets(values, lengths)
    inter = la.copy()  # equal sets: |A ∩ B| = |A|
    unequal = np.flatnonzero(label[ia] != label[ib])
    if len(unequal):
        pa, pb = ia[unequal], ib[unequal]
        inter[unequal] = sets.intersection_sizes(values[sets.ranges(offsets[pa], lengths[pa])], lengths[pa],
                                                 values[sets.ranges(offsets[pb], lengths[pb])], lengths[pb])
    return inter, la, lb


def containment(inter: np.ndarray, la: np.ndarray) -> np.ndarray:
    """C(A, B) = |A ∩ B| / |A|; 0 where A is empty."""
    la = np.asarray(la)
    return np.divide(inter, la, out=np.zeros(len(la)), where=la > 0)


def agreement(signatures: Shards, starts: np.ndarray, a: np.ndarray, b: np.ndarray,
              other: Store | None = None) -> np.ndarray:
    """The share of equal entries of the signatures of documents a[i] and b[i] (the MinHash estimate of their
    Jaccard): a's (and b's) rows in the store (signatures, starts), or b's in `other` as for set_overlap."""
    if not len(a):
        return np.empty(0)
    rows_b = sets.gather_rows(*(other or (signatures, starts)), b)
    return (sets.gather_rows(signatures, starts, a) == rows_b).mean(axis=1)


def pair_records(a: Iterable[str], b: Iterable[str], scores: np.ndarray, sizes: np.ndarray) -> Iterator[dict]:
    """The records of scored pairs, as pairs.jsonl and query give them: the ids of a[i] and b[i], scores[i]
    (Jaccard, estimate) and sizes[i] (|A ∩ B|, |A ∪ B|)."""
    for x, y, (similarity, estimate), (inter, union) in zip(a, b, scores.tolist(), sizes.tolist()):
        yield {"a": x, "b": y, "jaccard": similarity, "estimate": estimate, "intersection": inter, "union": union}
