"""bench/vs_datatrove.py's accuracy figures (the same definitions for nearDup and datatrove in bench/RESULTS.md),
checked against a brute force over every pair of documents of small random examples."""
from __future__ import annotations

import itertools
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import vs_datatrove


def _components(docs: list[str], edges: set[tuple[str, str]]) -> list[set[str]]:
    seen: set[str] = set()
    out = []
    for d in docs:
        if d in seen:
            continue
        comp, todo = set(), [d]
        while todo:
            x = todo.pop()
            if x in comp:
                continue
            comp.add(x)
            todo += [b if a == x else a for a, b in edges if x in (a, b)]
        seen |= comp
        out.append(comp)
    return out


def test_accuracy_and_truth_summary_equal_a_brute_force_over_all_pairs():
    for seed in range(200):
        rng = random.Random(seed)
        docs = [f"d{i:02d}" for i in range(rng.randint(2, 14))]
        truth = {p for p in itertools.combinations(docs, 2) if rng.random() < 0.15}
        # a tool's output: clusters of a keeper and the documents removed in its favour (nearDup's removed.jsonl)
        keeper = {}
        for d in docs:
            if rng.random() < 0.4:
                k = rng.choice(docs)
                if k != d and k not in keeper:
                    keeper[d] = k
        keeper = {d: k for d, k in keeper.items() if d not in keeper.values()}  # a keeper is never removed
        removed = set(keeper)
        cluster_of = vs_datatrove.neardup_clusters(keeper)
        got = vs_datatrove.accuracy(cluster_of, removed, truth)

        same = {(a, b) for a, b in itertools.combinations(docs, 2)
                if a in cluster_of and b in cluster_of and cluster_of[a] == cluster_of[b]}
        assert got["cluster_pairs"] == len(same)
        assert got["recall"] == (len(same & truth) / len(truth) if truth else None)
        assert got["precision"] == (len(same & truth) / len(same) if same else None)
        assert got["false_removals"] == sum(1 for d in removed if not any(d in p for p in truth))
        assert got["pairs_left"] == sum(1 for a, b in truth if a not in removed and b not in removed)
        assert got["removed"] == len(removed)
        assert got["clusters"] == len(set(keeper.values()))

        summary = vs_datatrove.truth_summary(truth)
        in_pairs = sorted({x for p in truth for x in p})
        assert summary == {"pairs": len(truth), "docs": len(in_pairs),
                           "min_removals": len(in_pairs) - len(_components(in_pairs, truth))}
