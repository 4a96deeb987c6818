"""Work spread over hash partitions, as a Dask cluster runs it, against the one-process way: candidates from a
shuffle of band keys (pipeline.candidates), and connected components by local union-find, then large-star and
small-star rounds (kernels.components) against the one-process kernel and a breadth-first search."""
from __future__ import annotations

import tempfile
from collections import deque
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nearDup import pipeline as stages
from nearDup.config import (
    CandidateParams,
    ClusterParams,
    ShingleParams,
    SignatureParams,
    SourceParams,
    VerifyParams,
)
from nearDup.engine import LocalEngine
from nearDup.kernels import components as cc
from nearDup.pipeline.driver import Runner
from nearDup.store.workdir import WorkDir

from conftest import generate_corpus, stage_files


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


@settings(max_examples=40, deadline=None)
@given(graphs())
def test_components_by_the_engine_s_tasks_equal_the_embedded_groups(graph):
    """The tasks a cluster runs (pipeline.cluster: edge slices, star rounds through a work dir) give the groups
    the client would: groups_of(components), members ascending, ordered by smallest member."""
    n, edges = graph
    array = np.sort(np.array(edges, dtype=np.int64).reshape(-1, 2), axis=1)
    engine = LocalEngine(1)
    engine.shuffle = True
    with tempfile.TemporaryDirectory() as folder:
        runner = Runner(WorkDir(Path(folder) / "w"), engine, lambda m: None)
        spread = stages.cluster._spread_components(runner, array, "0123456789ab")
        assert not list((Path(folder) / "w").glob("cluster/*"))  # its files removed
    assert [g.tolist() for g in spread] == [g.tolist() for g in cc.groups_of(cc.components(n, array))]


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


# ------------------------------------------------------------------------------------------ candidates


@pytest.mark.parametrize("max_bucket,entries,edges", [(1000, 10**9, 10**9), (3, 500, 7)])
def test_work_spread_over_partitions_writes_the_same_files_as_the_embedded_run(tmp_path, monkeypatch, max_bucket,
                                                                               entries, edges):
    """What a cluster's workers do (Engine.shuffle) against the embedded way, file for file in the work dir:
    candidates from the shuffle (each shard's keys cut by hash, each partition's buckets paired in every band,
    the band index merged back) against bands grouped per task; the groups from components of partitions
    (local union-find, star rounds) against the client's. With exact copies (classes), 2 partitions or many, and
    buckets over --max-bucket (stars about their first document by id)."""
    folder = tmp_path / "docs"
    generate_corpus(folder, n_base=90, seed=5)
    for i in range(6):  # a text copied 6 times: one class, and a bucket over --max-bucket 3 in every band
        (folder / f"copy{i}.txt").write_text((folder / "doc0001.txt").read_text())
    monkeypatch.setattr(stages.candidates, "SHUFFLE_ENTRIES", entries)
    monkeypatch.setattr(stages.cluster, "COMPONENT_EDGES", edges)

    def pipeline(root, shuffle):
        engine = LocalEngine(1)
        engine.shuffle = shuffle
        runner = Runner(WorkDir(root), engine, lambda m: None)
        stages.shingle.run(runner, [str(folder)], SourceParams(partition_docs=19), ShingleParams())
        stages.signature.run(runner, SignatureParams(num_perm=64))
        stages.band.run(runner, 0.5)
        stages.candidates.run(runner, CandidateParams(max_bucket=max_bucket))
        stages.verify.run(runner, VerifyParams(0.5))
        stages.cluster.run(runner, ClusterParams(link="connected"))
        return runner.work.manifest().candidates.stats, runner.work.manifest().cluster.stats

    grouped = pipeline(tmp_path / "grouped", False)
    shuffled = pipeline(tmp_path / "shuffled", True)
    assert shuffled == grouped and grouped[0].candidates > 30 and (grouped[0].large_buckets > 0) == (max_bucket == 3)
    assert grouped[1].groups > 10
    assert stage_files(tmp_path / "shuffled") == stage_files(tmp_path / "grouped")
