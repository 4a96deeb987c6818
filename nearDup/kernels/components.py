"""Connected components of the verified-pair graph, in one process or spread over partitions of the nodes.

In one process (`components`): min-label propagation with pointer jumping: every node starts with its own label;
each round sets both ends of every edge to the smaller of their labels' labels (label[label[x]]), until nothing
changes. The result labels every node with the smallest node of its component; O((n + m) log n) in practice, all
in numpy.

Spread over P partitions (`local_forest`, `large_star`, `small_star`, `is_star_forest`, `route`): the alternating
algorithm of Kiveris, Lattanzi, Mirrokni, Rastogi and Vassilvitskii, "Connected Components in MapReduce and
Beyond" (SoCC 2014), Algorithm 1, after a local union-find of each partition's edges (each partition's edges
replaced by a spanning forest of them, stars to their smallest node: same components, at most one edge per node).
With N(u) the neighbours of u and m(u) = min(N(u) ∪ {u}):

    large-star(u):  for every neighbour v > u, the edge (v, m(u))
    small-star(u):  with N'(u) = {v in N(u): v < u} and m'(u) = min(N'(u) ∪ {u}), for every v in N'(u) ∪ {u}
                    other than m'(u), the edge (v, m'(u))

Neither changes the components (each new edge joins two nodes already connected through u, and every node keeps
an edge to the smallest node of its neighbourhood, so no component is cut); alternated, they reach in O(log^2 n)
rounds (Theorem 2.5) the fixed point where every component is a star whose centre is its smallest node. A
partition holds the nodes u with hash(u) mod P = its number and all their edges (`route`), so each operation runs
partition by partition, and the edges it emits are routed to the partitions of their new endpoints. That the
graph is such a star forest is checked exactly, node by node (`is_star_forest`), not by comparing digests of
rounds: every node is a leaf (one neighbour, smaller than itself) or a centre (all neighbours larger). Then a
leaf's neighbour is a centre (a leaf's one neighbour is smaller, yet the leaf is its larger neighbour), so each
component is a star about its smallest node, and each leaf's label is its neighbour.
"""
from __future__ import annotations

import itertools

import numpy as np

from .hashing import U64, fmix64
from .sets import sorted_unique

NO_EDGES = np.empty((0, 2), np.int64)


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


def _distinct(edges: np.ndarray) -> np.ndarray:
    """Distinct rows of (m, 2) non-negative int64 edges, sorted by (a, b)."""
    if not len(edges):
        return NO_EDGES
    codes = sorted_unique((edges[:, 0].astype(U64) << U64(32)) | edges[:, 1].astype(U64))
    return np.stack([(codes >> U64(32)).astype(np.int64), (codes & U64(0xFFFFFFFF)).astype(np.int64)], axis=1)


def local_forest(edges: np.ndarray) -> np.ndarray:
    """A partition's local union-find: (v, r) for every node v of the edges (m, 2) that is not the smallest node
    r of its component among them. Same components as edges, at most one edge per node, sorted."""
    if not len(edges):
        return NO_EDGES
    nodes = sorted_unique(edges.ravel())
    labels = nodes[components(len(nodes), np.searchsorted(nodes, edges))]
    return np.stack([nodes, labels], axis=1)[nodes != labels]


def _grouped_min(arcs: np.ndarray) -> np.ndarray:
    """For arcs (u, v) sorted by u: min(v over the arcs of u, u itself), arc by arc."""
    starts = np.flatnonzero(np.r_[True, arcs[1:, 0] != arcs[:-1, 0]])
    low = np.minimum.reduceat(arcs[:, 1], starts)
    return np.minimum(np.repeat(low, np.diff(np.r_[starts, len(arcs)])), arcs[:, 0])


def large_star(arcs: np.ndarray) -> np.ndarray:
    """Large-star of the nodes u whose arcs (u, v) are given, every arc of each such u (both directions of their
    edges): (v, m(u)) for each neighbour v > u; distinct, sorted, v > m(u)."""
    arcs = _distinct(arcs)
    if not len(arcs):
        return NO_EDGES
    low = _grouped_min(arcs)
    larger = arcs[:, 1] > arcs[:, 0]
    return _distinct(np.stack([arcs[larger, 1], low[larger]], axis=1))


def small_star(arcs: np.ndarray) -> np.ndarray:
    """Small-star of the nodes u whose smaller neighbours are given as arcs (u, v), v < u, every one of each such
    u: (v, m'(u)) for v in N'(u) ∪ {u} other than m'(u); distinct, sorted, larger end first."""
    arcs = _distinct(arcs)
    if not len(arcs):
        return NO_EDGES
    low = _grouped_min(arcs)
    own = np.flatnonzero(np.r_[True, arcs[1:, 0] != arcs[:-1, 0]])  # (u, m'(u)) once per u
    out = np.concatenate([np.stack([arcs[:, 1], low], axis=1), np.stack([arcs[own, 0], low[own]], axis=1)])
    return _distinct(out[out[:, 0] != out[:, 1]])


def is_star_forest(arcs: np.ndarray) -> bool:
    """Whether every node u of the arcs (u, v) (every arc of each such u) is a leaf (one neighbour, smaller) or a
    centre (all neighbours larger): true of every partition exactly when the whole graph is a forest of stars
    about their smallest nodes (see the module docstring)."""
    arcs = _distinct(arcs)
    if not len(arcs):
        return True
    starts = np.flatnonzero(np.r_[True, arcs[1:, 0] != arcs[:-1, 0]])
    degree = np.diff(np.r_[starts, len(arcs)])
    smaller = np.add.reduceat((arcs[:, 1] < arcs[:, 0]).astype(np.int64), starts)
    return bool(((smaller == 0) | ((smaller == 1) & (degree == 1))).all())


def star_leaves(arcs: np.ndarray) -> np.ndarray:
    """The leaves of a forest of stars (is_star_forest) as distinct rows (leaf, centre), sorted: each node but a
    centre with its component's smallest node."""
    arcs = _distinct(arcs)
    return arcs[arcs[:, 1] < arcs[:, 0]]


def both_ways(edges: np.ndarray) -> np.ndarray:
    """The arcs (a, b) and (b, a) of every edge (a, b)."""
    return np.concatenate([edges, edges[:, ::-1]]) if len(edges) else NO_EDGES


def partition_of(nodes: np.ndarray, parts: int) -> np.ndarray:
    """The partition (0 .. parts - 1) of each node: fmix64 of its number mod parts, so that runs of consecutive
    numbers (one shard's documents, one class's copies) spread over every partition."""
    return (fmix64(np.asarray(nodes, np.int64).astype(U64)) % U64(parts)).astype(np.int64)


def route(arcs: np.ndarray, parts: int) -> list[np.ndarray]:
    """The arcs (u, v) of each partition, by the partition of u."""
    where = partition_of(arcs[:, 0], parts)
    order = np.argsort(where, kind="stable")
    return np.split(arcs[order], np.searchsorted(where[order], np.arange(1, parts)))


def star_components(n: int, edges: np.ndarray, parts: int = 1, chunks: int = 1) -> np.ndarray:
    """components(n, edges) the way the cluster computes it: local_forest of each of `chunks` slices of the
    edges, then large-star and small-star rounds over `parts` node partitions until is_star_forest holds in
    every partition. labels (n,) int64, the smallest node of each node's component."""
    edges = np.asarray(edges, np.int64).reshape(-1, 2)
    bounds = np.linspace(0, len(edges), chunks + 1).astype(np.int64)
    forests = [local_forest(edges[lo:hi]) for lo, hi in itertools.pairwise(bounds.tolist())]
    inbox = _gather([route(both_ways(f), parts) for f in forests], parts)
    while not all(is_star_forest(arcs) for arcs in inbox):
        stars = _gather([route(large_star(arcs), parts) for arcs in inbox], parts)
        inbox = _gather([route(both_ways(small_star(arcs)), parts) for arcs in stars], parts)
    labels = np.arange(n, dtype=np.int64)
    for arcs in inbox:
        leaves = star_leaves(arcs)
        labels[leaves[:, 0]] = leaves[:, 1]
    return labels


def _gather(sent: list[list[np.ndarray]], parts: int) -> list[np.ndarray]:
    """What each partition receives: the arcs every sender routed to it."""
    return [np.concatenate([s[p] for s in sent]) if sent else NO_EDGES for p in range(parts)]
