"""Connected components of the verified-pair graph.

Min-label propagation with pointer jumping: every node starts with its own label; each round sets both ends of
every edge to the smaller of their labels' labels (label[label[x]]), until nothing changes. The result labels every
node with the smallest node of its component; O((n + m) log n) in practice, all in numpy.
"""
from __future__ import annotations

import numpy as np


def components(n: int, edges: np.ndarray) -> np.ndarray:
    """labels (n,) int64: labels[x] = the smallest node connected to x by edges (m, 2)."""
    labels = np.arange(n, dtype=np.int64)
    if not len(edges):
        return labels
    a, b = edges[:, 0].astype(np.int64), edges[:, 1].astype(np.int64)
    while True:
        low = np.minimum(labels[a], labels[b])
        before = labels.copy()
        np.minimum.at(labels, a, low)
        np.minimum.at(labels, b, low)
        while True:  # pointer jumping: follow labels to their roots
            jumped = labels[labels]
            if np.array_equal(jumped, labels):
                break
            labels = jumped
        if np.array_equal(labels, before):
            return labels


def groups_of(labels: np.ndarray) -> list[np.ndarray]:
    """Members (ascending) of every component with more than one node, ordered by smallest member."""
    order = np.argsort(labels, kind="stable")
    sorted_labels = labels[order]
    cuts = np.flatnonzero(np.diff(sorted_labels)) + 1
    return [g for g in np.split(order, cuts) if len(g) > 1]
