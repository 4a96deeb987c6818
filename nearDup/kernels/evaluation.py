"""Scores of found pairs and groups against a truth: pair precision, recall and F1, and the adjusted Rand index.

Pairs are given as codes (lsh.pair_codes: a * 2^32 + b with a < b), sorted and unique; a partition of items as
one label per item (any values: only equality matters).

Pair scores. With TP found pairs that are true, FP found pairs that are false and FN true pairs not found,
precision = TP / (TP + FP), recall = TP / (TP + FN), F1 = 2 TP / (2 TP + FP + FN), their harmonic mean (van
Rijsbergen, Information Retrieval, 2nd ed., 1979, ch. 7). A score whose denominator is 0 is undefined (None): no
pair found has no precision, no true pair has no recall.

Adjusted Rand index (Hubert & Arabie, "Comparing partitions", Journal of Classification 2, 1985, 193-218). For two
partitions U, V of the same n items with contingency table n_ij = |U_i ∩ V_j|, row sums a_i and column sums b_j,

    index    = sum_ij C(n_ij, 2)            pairs of items together in both
    expected = sum_i C(a_i, 2) sum_j C(b_j, 2) / C(n, 2)     its expectation under random partitions with the same
                                                             cluster sizes (the hypergeometric model)
    maximum  = (sum_i C(a_i, 2) + sum_j C(b_j, 2)) / 2
    ARI      = (index - expected) / (maximum - expected)

1 for equal partitions, about 0 for independent ones, negative below chance. When maximum = expected (both
partitions all singletons, or both one cluster, or n < 2) the partitions are equal and the ARI is 1, as
scikit-learn's adjusted_rand_score defines it. The table is never made dense: its non-zero cells are the distinct
(u, v) label pairs, so the cost is a sort of n items.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .sets import in_sorted


class PairCounts(NamedTuple):
    """tp, fp, fn: found and true, found and false, true and not found."""
    tp: int
    fp: int
    fn: int


def ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def precision_recall_f1(counts: PairCounts) -> tuple[float | None, float | None, float | None]:
    """(precision, recall, F1) of the counts, None where undefined (see the module docstring)."""
    tp, fp, fn = counts
    return ratio(tp, tp + fp), ratio(tp, tp + fn), ratio(2 * tp, 2 * tp + fp + fn)


def pair_counts(found: np.ndarray, true: np.ndarray, false: np.ndarray | None = None) -> PairCounts:
    """Counts of the found pair codes against the true ones. false: the pairs known to be false (a file of labelled
    pairs judges only the pairs it lists, so a found pair in neither is not counted); None: every pair not true is
    false. All three sorted and unique."""
    tp = int(in_sorted(found, true).sum())
    fp = len(found) - tp if false is None else int(in_sorted(found, false).sum())
    return PairCounts(tp, fp, len(true) - tp)


def cluster_pair_counts(labels: np.ndarray, found: np.ndarray) -> PairCounts:
    """Counts of found pairs (m, 2) of items against the partition `labels` (n,): a pair is true when both items
    have the same label, and the true pairs are all sum_k C(n_k, 2) pairs inside the clusters (never listed)."""
    labels = np.asarray(labels)
    found = np.asarray(found, np.int64).reshape(-1, 2)
    tp = int((labels[found[:, 0]] == labels[found[:, 1]]).sum())
    _, sizes = np.unique(labels, return_counts=True)
    return PairCounts(tp, len(found) - tp, _pairs(sizes) - tp)


def _pairs(counts: np.ndarray) -> int:
    """sum C(c, 2), exactly (Python integers: C(n, 2) of 10^10 items does not fit in int64)."""
    c = np.asarray(counts, np.int64).tolist()
    return sum(x * (x - 1) // 2 for x in c)


def adjusted_rand_index(labels_a: np.ndarray, labels_b: np.ndarray) -> float:
    """The adjusted Rand index of two partitions of the same items, each given as one label per item (see the
    module docstring for the formula and the equal-partitions case)."""
    a, b = np.asarray(labels_a), np.asarray(labels_b)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError("labels_a and labels_b must be 1-D and of the same length")
    n = len(a)
    if n < 2:
        return 1.0
    _, ia = np.unique(a, return_inverse=True)
    _, ib = np.unique(b, return_inverse=True)
    _, cells = np.unique(ia.astype(np.int64) * n + ib, return_counts=True)
    index = _pairs(cells)
    sum_a, sum_b = _pairs(np.bincount(ia)), _pairs(np.bincount(ib))
    total = n * (n - 1) // 2
    # multiplied through by 2 total, in integers until the one division (exact for any n)
    numerator = 2 * (index * total - sum_a * sum_b)
    denominator = (sum_a + sum_b) * total - 2 * sum_a * sum_b
    if denominator == 0:
        return 1.0
    return numerator / denominator
