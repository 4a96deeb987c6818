"""The one exact-similarity path: |A ∩ B|, |A| and |B| of stored shingle sets, shared by verify, cluster and query."""
from __future__ import annotations

import numpy as np

from ..kernels import sets
from .driver import PartitionArrays


def set_overlap(shingles: PartitionArrays, starts: np.ndarray, a: np.ndarray, b: np.ndarray):
    """(|A ∩ B|, |A|, |B|) of the stored shingle sets of documents a[i] and b[i].

    Each document's set is gathered once however many pairs it is in, and a pair of equal sets (copies of one
    text) is counted without being intersected: a bucket of 1,000 copies is 500,000 pairs of only 1,000 sets."""
    docs = sets.sorted_unique(np.concatenate([a, b]))
    values, lengths = sets.gather_sets(shingles, starts, docs)
    offsets = np.cumsum(lengths) - lengths
    ia, ib = np.searchsorted(docs, a), np.searchsorted(docs, b)
    la, lb = lengths[ia], lengths[ib]
    label = sets.identical_sets(values, lengths)
    inter = la.copy()  # equal sets: |A ∩ B| = |A|
    other = np.flatnonzero(label[ia] != label[ib])
    if len(other):
        pa, pb = ia[other], ib[other]
        inter[other] = sets.intersection_sizes(values[sets.ranges(offsets[pa], lengths[pa])], lengths[pa],
                                               values[sets.ranges(offsets[pb], lengths[pb])], lengths[pb])
    return inter, la, lb
