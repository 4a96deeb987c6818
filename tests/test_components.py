"""Connected components spread over partitions (kernels.components: local union-find, then large-star and
small-star rounds) against the one-process kernel and a breadth-first search, on random graphs."""
from __future__ import annotations

from collections import deque

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nearDup.kernels import components as cc


def bfs_labels(n: int, edges: list[tuple[int, int]]) -> list[int]:
    """The smallest node reachable from each node, by breadth-first search from every node in turn."""
    neighbours: list[list[int]] = [[] for _ in range(n)]
    for a, b in edges:
        neighbours[a].append(b)
        neighbours[b].append(a)
    labels = [-1] * n
    for start in range(n):  # ascending: the first node to reach a component is its smallest
        if labels[start] >= 0:
            continue
        labels[start], queue = start, deque([start])
        while queue:
            for other in neighbours[queue.popleft()]:
                if labels[other] < 0:
                    labels[other] = start
                    queue.append(other)
    return labels


@st.composite
def graphs(draw):
    """A random graph: n nodes, edges drawn uniformly, or paths and stars (the shapes that take the most rounds),
    with self-loops and repeated edges allowed."""
    n = draw(st.integers(1, 80))
    shape = draw(st.sampled_from(["random", "path", "star"]))
    if shape == "random":
        edges = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=120))
    else:
        nodes = draw(st.permutations(range(n)))
        edges = [(nodes[i], nodes[i + 1]) if shape == "path" else (nodes[0], nodes[i + 1]) for i in range(n - 1)]
    return n, edges


@settings(max_examples=300, deadline=None)
@given(graphs(), st.integers(1, 9), st.integers(1, 4))
def test_star_rounds_over_partitions_equal_the_embedded_components_and_bfs(graph, parts, chunks):
    n, edges = graph
    array = np.array(edges, dtype=np.int64).reshape(-1, 2)
    spread = cc.star_components(n, array, parts, chunks)
    assert spread.tolist() == cc.components(n, array).tolist() == bfs_labels(n, edges)


def test_a_long_path_in_shuffled_order_converges_to_its_smallest_node():
    """A path of 5,000 nodes numbered at random: the case that needs the most rounds; still exact."""
    rng = np.random.default_rng(7)
    nodes = rng.permutation(5000)
    edges = np.stack([nodes[:-1], nodes[1:]], axis=1)
    assert (cc.star_components(5000, edges, parts=4, chunks=3) == 0).all()


def test_the_star_forest_check_is_exact():
    """A star about its smallest node passes; a path, or a star whose centre is not its smallest node, does
    not (the check is what stops the rounds, so a wrong 'yes' would leave components unfinished)."""
    star = cc.both_ways(np.array([[5, 1], [7, 1], [9, 1]]))
    assert cc.is_star_forest(star)
    assert not cc.is_star_forest(cc.both_ways(np.array([[1, 2], [2, 3]])))
    assert not cc.is_star_forest(cc.both_ways(np.array([[5, 3], [5, 7], [5, 9]])))


def test_large_and_small_star_follow_the_paper():
    """Kiveris et al. 2014, Algorithm 1, on a node u = 4 with neighbours 2, 6, 9: large-star links the larger
    ones (6, 9) to m(u) = 2; small-star of u = 9 with smaller neighbours 3, 6 links 6 and 9 to 3."""
    arcs = np.array([[4, 2], [4, 6], [4, 9]])
    assert cc.large_star(arcs).tolist() == [[6, 2], [9, 2]]
    assert cc.small_star(np.array([[9, 3], [9, 6]])).tolist() == [[6, 3], [9, 3]]
    assert cc.local_forest(np.array([[3, 8], [8, 5], [10, 11]])).tolist() == [[5, 3], [8, 3], [11, 10]]
