"""Grouping without the CLI: build_groups against a brute force on random similarity matrices (components found by
breadth-first search, keepers by a key written here from the README's rules), each keeper rule on a hand-made
case, replay_groups against build_groups on the same pairs, and the errors of KeeperRules.parse."""
from __future__ import annotations

import itertools
import os
import random
from collections import deque

import numpy as np
import pytest

from nearDup.config import DEFAULT_RULES, RULES, ClusterParams, resolve
from nearDup.errors import ParameterError
from nearDup.pipeline.groups import KeeperRules, build_groups, replay_groups

SECOND = 1_000_000_000


def doc(doc_id: str, size: int = 100, mtime_s: float = 1000, arg: int = 0, reference: bool = False) -> dict:
    return {"id": doc_id, "size": size, "mtime_ns": int(mtime_s * SECOND), "arg": arg, "reference": reference}


def matrix(n: int, pairs: dict[tuple[int, int], float], default: float = 0.0) -> np.ndarray:
    """A symmetric similarity matrix: the given pairs, `default` elsewhere, 1 on the diagonal."""
    sims = np.full((n, n), default)
    np.fill_diagonal(sims, 1.0)
    for (a, b), s in pairs.items():
        sims[a, b] = sims[b, a] = s
    return sims


def group(docs, sims, threshold, rules, link="keeper", anchors=frozenset(), weighted=False) -> list[dict]:
    """build_groups over the pairs >= threshold (the verified pairs), with similarities looked up in sims;
    weighted: the pairs' Jaccard given (as the pipeline gives verify's scores), else computed when needed."""
    edges = np.array([(a, b) for a, b in itertools.combinations(range(len(docs)), 2) if sims[a, b] >= threshold],
                     np.int64).reshape(-1, 2)
    weights = sims[edges[:, 0], edges[:, 1]] if weighted else None
    return build_groups(docs, edges, threshold, rules, link, lambda a, b: sims[a, b], set(anchors), weights)


def shape(groups: list[dict]) -> list[tuple[str, list[tuple[str, str, float]]]]:
    """(keeper, [(member, role, Jaccard against the keeper)]) of each group, in output order."""
    return [(g["keeper"], [(m["id"], m["role"], m["jaccard"]) for m in g["members"]]) for g in groups]


def keepers(docs, sims, threshold, rules, link="keeper") -> list[str]:
    return [g["keeper"] for g in group(docs, sims, threshold, rules, link)]


# ------------------------------------------------------------------------------------------ brute force

def bfs_components(nodes: list[int], edges: set[tuple[int, int]]) -> list[list[int]]:
    """Connected components (of two or more nodes) by breadth-first search: no numpy, no label propagation."""
    neighbours: dict[int, list[int]] = {n: [] for n in nodes}
    for a, b in edges:
        neighbours[a].append(b)
        neighbours[b].append(a)
    seen, found = set(), []
    for start in nodes:
        if start in seen:
            continue
        seen.add(start)
        queue, component = deque([start]), []
        while queue:
            node = queue.popleft()
            component.append(node)
            for other in neighbours[node]:
                if other not in seen:
                    seen.add(other)
                    queue.append(other)
        if len(component) > 1:
            found.append(sorted(component))
    return found


def rule_key(d: dict, order: tuple[str, ...], centrality: float) -> tuple:
    """The README's keeper order for the rules whose meaning needs no pattern: references first, then each rule,
    then the id."""
    values = {"longest": -d["size"], "shortest": d["size"], "oldest": d["mtime_ns"] // SECOND,
              "newest": -(d["mtime_ns"] // SECOND), "first": d["arg"], "shallowest": d["id"].count("/"),
              "central": -round(centrality, 9), "alpha": d["id"]}
    return (not d["reference"], *(values[r] for r in order), d["id"])


def brute_force_groups(docs, sims, threshold, order, link, anchors) -> list[dict]:
    """Groups as the README defines them: a connected component of the pairs >= threshold; its keeper by the rules
    (centrality: the sum of a member's pair similarities among the documents being grouped); with the keeper link,
    members below the threshold against their keeper leave and are grouped again among themselves."""
    n = len(docs)
    edges = {(a, b) for a in range(n) for b in range(a + 1, n) if sims[a, b] >= threshold}

    def centrality(among: set[int]) -> dict[int, float]:
        return {d: sum(sims[a, b] for a, b in edges if d in (a, b) and a in among and b in among) for d in among}

    strength = centrality(set(range(n)))
    pending, groups = bfs_components(list(range(n)), edges), []
    while pending:
        later = []
        for component in pending:
            keeper = min(component, key=lambda d: rule_key(docs[d], order, strength[d]))
            others = [d for d in component if d != keeper]
            near = [d for d in others if link != "keeper" or sims[keeper, d] >= threshold]
            far = [d for d in others if d not in near]
            if len(far) > 1:
                strength.update(centrality(set(far)))
                later += bfs_components(far, {(a, b) for a, b in edges if a in far and b in far})
            if near:
                near.sort(key=lambda d: (-sims[keeper, d], docs[d]["id"]))
                members = [keeper, *near]
                pairs = [sims[a, b] for a, b in itertools.combinations(members, 2)]
                groups.append({
                    "type": "group", "keeper": docs[keeper]["id"], "size": len(members),
                    "members": [{"id": docs[d]["id"], "doc": d, "reference": docs[d]["reference"],
                                 "jaccard": 1.0 if d == keeper else float(sims[keeper, d]),
                                 "role": "keeper" if d == keeper else
                                 "reference" if docs[d]["reference"] else "duplicate"} for d in members],
                    "anchored": any(d in anchors for d in members), "min_jaccard": float(min(pairs)),
                    "max_jaccard": float(max(pairs)), "pairwise": "all pairs"})
        pending = later
    groups.sort(key=lambda g: (-g["size"], g["keeper"]))
    for number, g in enumerate(groups, start=1):
        g["group"] = number
    return groups


def random_case(rng: random.Random, n: int) -> tuple[list[dict], np.ndarray]:
    """n documents with tied sizes, times, depths and arguments, a few references; similarities in 64ths (sums of
    them are exact, so centrality never depends on the order of addition), many pairs near 0.75."""
    docs = [doc("/".join(["d"] * rng.randint(0, 2) + [f"x{i:02d}"]), size=rng.choice((10, 20, 30)),
                mtime_s=rng.choice((100, 100.5, 200)), arg=rng.randint(0, 2), reference=rng.random() < 0.15)
            for i in range(n)]
    sims = np.eye(n)
    for a, b in itertools.combinations(range(n), 2):
        sims[a, b] = sims[b, a] = rng.choice((rng.randint(0, 64), rng.randint(40, 60))) / 64
    return docs, sims


ORDERS = [("alpha",), ("first", "central", "oldest", "shallowest", "alpha"), ("central",), ("newest", "longest"),
          ("shortest", "shallowest"), ("oldest", "central", "alpha")]


@pytest.mark.parametrize("link", ["keeper", "connected"])
@pytest.mark.parametrize("order", ORDERS, ids=",".join)
def test_build_groups_equals_the_brute_force_on_random_graphs(link, order):
    rng = random.Random(f"{link} {order}")
    for trial in range(25):
        docs, sims = random_case(rng, rng.randint(2, 11))
        anchors = {d for d in range(len(docs)) if rng.random() < 0.1}
        expected = brute_force_groups(docs, sims, 0.75, order, link, anchors)
        for weighted in (False, True):
            got = group(docs, sims, 0.75, KeeperRules(order), link, anchors, weighted)
            assert got == expected, (trial, weighted, docs, sims)


@pytest.mark.parametrize("order", ORDERS, ids=",".join)
def test_groups_partition_documents_and_keeper_groups_hold_only_near_duplicates_of_the_keeper(order):
    rng = random.Random(len(order))
    for _ in range(25):
        docs, sims = random_case(rng, 12)
        connected = group(docs, sims, 0.75, KeeperRules(order), "connected")
        keeper = group(docs, sims, 0.75, KeeperRules(order), "keeper")
        for groups in (connected, keeper):
            members = [m["doc"] for g in groups for m in g["members"]]
            assert len(members) == len(set(members))  # no document in two groups
        assert all(sims[g["members"][0]["doc"], m["doc"]] >= 0.75 for g in keeper for m in g["members"])
        in_keeper = {m["doc"] for g in keeper for m in g["members"]}
        assert in_keeper <= {m["doc"] for g in connected for m in g["members"]}  # the keeper link only splits


# ------------------------------------------------------------------------------------------ hand-made cases

def test_the_keeper_link_splits_a_chain_that_the_connected_link_joins():
    docs = [doc("a"), doc("b"), doc("c")]
    sims = matrix(3, {(0, 1): 0.75, (1, 2): 0.75, (0, 2): 0.5})
    assert shape(group(docs, sims, 0.7, KeeperRules(("alpha",)), "connected")) == [
        ("a", [("a", "keeper", 1.0), ("b", "duplicate", 0.75), ("c", "duplicate", 0.5)])]
    assert shape(group(docs, sims, 0.7, KeeperRules(("alpha",)), "keeper")) == [
        ("a", [("a", "keeper", 1.0), ("b", "duplicate", 0.75)])]  # c alone is below a: a unique


def test_members_far_from_the_keeper_are_grouped_again_among_themselves():
    docs = [doc(x) for x in "akxyz"]
    # k is the hub (central); a ~ k; x, y, z ~ k too but far from a; among themselves x ~ y, y ~ z, x !~ z
    sims = matrix(5, {(0, 1): 0.9, (1, 2): 0.8, (1, 3): 0.8, (1, 4): 0.8, (2, 3): 0.85, (3, 4): 0.85, (2, 4): 0.6,
                      (0, 2): 0.1, (0, 3): 0.1, (0, 4): 0.1})
    groups = group(docs, sims, 0.75, KeeperRules(("alpha",)))
    assert shape(groups) == [("a", [("a", "keeper", 1.0), ("k", "duplicate", 0.9)]),
                             ("x", [("x", "keeper", 1.0), ("y", "duplicate", 0.85)])]  # z is far from x: unique
    assert [g["group"] for g in groups] == [1, 2] and [g["size"] for g in groups] == [2, 2]
    central = group(docs, sims, 0.75, KeeperRules(("central", "alpha")))
    assert shape(central) == [("k", [("k", "keeper", 1.0), ("a", "duplicate", 0.9), ("x", "duplicate", 0.8),
                                     ("y", "duplicate", 0.8), ("z", "duplicate", 0.8)])]


def test_bounds_anchors_and_order_of_groups():
    docs = [doc(x) for x in "abcdefg"]
    sims = matrix(7, {(0, 1): 0.8, (2, 3): 0.9, (2, 4): 0.8, (3, 4): 0.85, (5, 6): 0.95})
    groups = group(docs, sims, 0.75, KeeperRules(("alpha",)), anchors={6})
    assert [(g["group"], g["keeper"], g["size"], g["anchored"]) for g in groups] == [
        (1, "c", 3, False), (2, "a", 2, False), (3, "f", 2, True)]  # largest first, then by keeper
    assert [(g["min_jaccard"], g["max_jaccard"], g["pairwise"]) for g in groups] == [
        (0.8, 0.9, "all pairs"), (0.8, 0.8, "all pairs"), (0.95, 0.95, "all pairs")]
    assert [m["id"] for m in groups[0]["members"]] == ["c", "d", "e"]  # members best first


def pair_keeper(a: dict, b: dict, rules: KeeperRules) -> str:
    """The keeper of a group of two documents at Jaccard 0.9."""
    (found,) = keepers([a, b], matrix(2, {(0, 1): 0.9}), 0.8, rules)
    return found


@pytest.mark.parametrize(("rules", "a", "b", "keeper"), [
    ("alpha", doc("b"), doc("a"), "a"),
    ("first", doc("a", arg=1), doc("b", arg=0), "b"),  # the argument given first on the command line
    ("longest", doc("a", size=10), doc("b", size=20), "b"),
    ("shortest", doc("a", size=20), doc("b", size=10), "b"),
    ("oldest", doc("a", mtime_s=200), doc("b", mtime_s=100), "b"),
    ("newest", doc("a", mtime_s=100), doc("b", mtime_s=200), "b"),
    ("oldest,alpha", doc("b", mtime_s=100.2), doc("a", mtime_s=100.9), "a"),  # the same second: a tie
    ("shallowest", doc("a/b/c"), doc("z/c"), "z/c"),
    ("nocopy", doc("a copy.txt"), doc("a.txt"), "a.txt"),  # alpha alone would keep "a copy.txt"
    ("nocopy", doc("Copy of a.txt"), doc("a.txt"), "a.txt"),
    ("nocopy", doc("a - Copy.txt"), doc("b.txt"), "b.txt"),
    ("nocopy", doc("a_copy2.txt"), doc("b.txt"), "b.txt"),
    ("nocopy", doc("a (1).txt"), doc("b.txt"), "b.txt"),
    ("nocopy", doc("a.bak"), doc("b"), "b"),
    ("nocopy", doc("a backup.txt"), doc("b.txt"), "b.txt"),
    ("nocopy", doc("a.txt~"), doc("b.txt"), "b.txt"),
    ("nocopy", doc("copyright.txt"), doc("photocopy.txt"), "copyright.txt"),  # words, not copies: alpha decides
    ("nocopy", doc("copy/a.txt"), doc("d.txt"), "copy/a.txt"),  # only the file's name counts
    ("nocopy", doc("backup/a.txt"), doc("d.txt"), "backup/a.txt"),
    ("alpha", doc("z", reference=True), doc("a"), "z"),  # a reference is kept whatever the rules
    ("longest", doc("z", size=1, reference=True), doc("a", size=9), "z"),
])
def test_each_keeper_rule_on_a_pair(rules, a, b, keeper):
    assert pair_keeper(a, b, KeeperRules.parse(rules)) == keeper


def test_a_reference_member_is_named_so_and_the_default_rules_apply_in_order():
    docs = [doc("b", reference=True), doc("a", reference=True), doc("c")]
    sims = matrix(3, {(0, 1): 0.9, (0, 2): 0.9, (1, 2): 0.9})
    assert shape(group(docs, sims, 0.8, KeeperRules())) == [
        ("a", [("a", "keeper", 1.0), ("b", "reference", 0.9), ("c", "duplicate", 0.9)])]
    # default: first, then nocopy, then central, then oldest, shallowest, alpha
    docs = [doc("x/orig.txt", arg=1), doc("orig copy.txt", arg=0, mtime_s=1), doc("orig.txt", arg=0, mtime_s=9)]
    sims = matrix(3, {(0, 1): 0.9, (0, 2): 0.9, (1, 2): 0.9})
    assert keepers(docs, sims, 0.8, KeeperRules()) == ["orig.txt"]  # first argument, then not a copy
    docs = [doc("b/z.txt", mtime_s=5), doc("y.txt", mtime_s=5), doc("c/x.txt", mtime_s=1), doc("w.txt", mtime_s=9)]
    sims = matrix(4, {(0, 1): 0.9, (1, 2): 0.9, (1, 3): 0.9, (0, 2): 0.8, (0, 3): 0.8, (2, 3): 0.8})
    assert keepers(docs, sims, 0.8, KeeperRules()) == ["y.txt"]  # the most central (2.7), though not the oldest
    sims = matrix(4, {(0, 1): 0.9, (1, 2): 0.9, (0, 3): 0.9, (2, 3): 0.9, (0, 2): 0.9, (1, 3): 0.9})
    assert keepers(docs, sims, 0.8, KeeperRules()) == ["c/x.txt"]  # all equally central: the oldest


def test_prefer_comes_first_unless_placed_and_matches_anywhere_in_the_id():
    rules = KeeperRules.parse("oldest,alpha", prefer=r"/master/")
    assert rules.order == ("prefer", "oldest", "alpha") and rules.prefer == "/master/"
    assert pair_keeper(doc("/d/master/b", mtime_s=9), doc("/d/a", mtime_s=1), rules) == "/d/master/b"
    placed = KeeperRules.parse("oldest,prefer,alpha", prefer="master")
    assert placed.order == ("oldest", "prefer", "alpha")
    assert pair_keeper(doc("/master/b", mtime_s=9), doc("/a", mtime_s=1), placed) == "/a"  # oldest decides first
    assert pair_keeper(doc("/master/b", mtime_s=1), doc("/a", mtime_s=1), placed) == "/master/b"  # then prefer
    assert pair_keeper(doc("/x/b"), doc("/y/a"), KeeperRules.parse("prefer,alpha")) == "/x/b"  # no pattern: a tie


def test_parse_accepts_blanks_and_refuses_unknown_rules_and_bad_patterns():
    assert KeeperRules.parse(" alpha , ,oldest,").order == ("alpha", "oldest")
    assert KeeperRules.parse("").order == ()
    with pytest.raises(ParameterError) as e:
        KeeperRules.parse("oldest,biggest")
    assert str(e.value) == f"--keep: unknown rule 'biggest'; choose from {', '.join(RULES)}"
    with pytest.raises(ParameterError) as e:
        KeeperRules.parse("alpha", prefer="(unclosed")
    assert str(e.value).startswith("--prefer: not a regular expression (") and "\n" not in str(e.value)



def test_resolve_checks_keep_and_prefer_as_parse_does():
    """config.resolve (the CLI and the API) and KeeperRules.parse order and refuse rules by one function: the
    default order, "prefer" put first, the same messages."""
    assert resolve().cluster.keep == DEFAULT_RULES == KeeperRules().order
    assert resolve(prefer="master").cluster == ClusterParams("keeper", ("prefer", *DEFAULT_RULES), "master")
    assert resolve(keep="alpha,prefer", prefer="x").cluster.keep == KeeperRules.parse("alpha,prefer", "x").order
    for keep, prefer in (("oldest,biggest", None), ("alpha", "(unclosed")):
        with pytest.raises(ParameterError) as by_resolve:
            resolve(keep=keep, prefer=prefer)
        with pytest.raises(ParameterError) as by_parse:
            KeeperRules.parse(keep, prefer)
        assert str(by_resolve.value) == str(by_parse.value)


# ------------------------------------------------------------------------------------------ replay

def saved_pairs(ids: list[str], sims: np.ndarray, floor: float) -> list[dict]:
    """What a run at threshold `floor` saved: every pair >= floor, in no particular order."""
    return [{"a": ids[b], "b": ids[a], "jaccard": float(sims[a, b])}
            for a, b in itertools.combinations(range(len(ids)), 2) if sims[a, b] >= floor]


def direct(ids: list[str], sims: np.ndarray, threshold: float, rules: KeeperRules, link: str) -> list[dict]:
    """build_groups on the documents replay_groups sees (sorted ids, their files' size and mtime), with every
    similarity known."""
    docs = []
    for doc_id in ids:
        st = os.stat(doc_id) if os.path.exists(doc_id) else None
        docs.append({"id": doc_id, "size": st.st_size if st else 0, "mtime_ns": st.st_mtime_ns if st else 0,
                     "arg": 0, "reference": False})
    return group(docs, sims, threshold, rules, link)


def unknown_below(groups: list, floor: float) -> list:
    """Groups' shapes with a Jaccard below the saved file's floor (or NaN: not in the file) as None: replay cannot
    know it, and lists such members last, by id."""
    out = []
    for keeper, members in groups:
        known = [m for m in members if m[2] >= floor]
        out.append((keeper, known + sorted((i, role, None) for i, role, j in members if not j >= floor)))
    return out


@pytest.mark.parametrize("link", ["keeper", "connected"])
def test_replay_groups_agree_with_build_groups_on_the_same_pairs(tmp_path, link):
    rng = random.Random(5)
    rules = KeeperRules(("longest", "oldest", "alpha"))
    for trial in range(30):
        n = rng.randint(2, 10)
        ids = sorted(str(tmp_path / f"t{trial}" / f"f{i}.txt") for i in range(n))
        os.makedirs(tmp_path / f"t{trial}")
        for doc_id in ids:  # sizes and times the rules read from the files themselves
            with open(doc_id, "wb") as f:
                f.write(b"x" * rng.choice((1, 2, 3)))
            os.utime(doc_id, ns=(0, rng.choice((1, 2, 3)) * SECOND))
        sims = random_case(rng, n)[1]
        for threshold in (0.5, 0.75):
            groups, docs = replay_groups(saved_pairs(ids, sims, 0.5), threshold, rules, link)
            expected = unknown_below(shape(direct(ids, sims, threshold, rules, link)), 0.5)
            assert unknown_below(shape(groups), 0.5) == expected, (trial, threshold, sims)
            named = sorted({i for a, b in itertools.combinations(range(n), 2) if sims[a, b] >= 0.5
                            for i in (ids[a], ids[b])})
            assert [d["id"] for d in docs] == named and all(d["size"] == os.path.getsize(d["id"]) for d in docs)


def test_replay_groups_again_the_members_of_unknown_similarity_to_their_keeper():
    """Replay dropped them instead: c and d (0.9 to each other, neither in the file with a) were left out of every
    group, while the same pairs grouped with their similarities known give {a, b} and {c, d}."""
    saved = [{"a": "/r/a", "b": "/r/b", "jaccard": 0.9}, {"a": "/r/b", "b": "/r/c", "jaccard": 0.9},
             {"a": "/r/b", "b": "/r/d", "jaccard": 0.9}, {"a": "/r/c", "b": "/r/d", "jaccard": 0.9}]
    groups, _ = replay_groups(saved, 0.8, KeeperRules(("alpha",)), "keeper")
    assert shape(groups) == [("/r/a", [("/r/a", "keeper", 1.0), ("/r/b", "duplicate", 0.9)]),
                             ("/r/c", [("/r/c", "keeper", 1.0), ("/r/d", "duplicate", 0.9)])]


def test_replay_knows_every_similarity_the_file_holds_even_below_the_threshold():
    """A pair in the file below -t is no edge, but its Jaccard is known: it was reported NaN ("known pairs only")."""
    saved = [{"a": "/r/a", "b": "/r/b", "jaccard": 0.9}, {"a": "/r/c", "b": "/r/b", "jaccard": 0.9},
             {"a": "/r/a", "b": "/r/c", "jaccard": 0.6}]
    (g,), _ = replay_groups(saved, 0.8, KeeperRules(("alpha",)), "connected")
    assert shape([g]) == [("/r/a", [("/r/a", "keeper", 1.0), ("/r/b", "duplicate", 0.9),
                                    ("/r/c", "duplicate", 0.6)])]
    assert (g["min_jaccard"], g["max_jaccard"], g["pairwise"]) == (0.6, 0.9, "all pairs")
    assert replay_groups(saved, 0.95, KeeperRules(("alpha",)), "connected")[0] == []  # no edge left


def test_replay_says_which_bounds_it_knows_and_reads_missing_files_as_empty(tmp_path):
    saved = [{"a": "/gone/b", "b": "/gone/a", "jaccard": 0.9}, {"a": "/gone/b", "b": "/gone/c", "jaccard": 0.85}]
    groups, docs = replay_groups(saved, 0.8, KeeperRules(("alpha",)), "connected", references=("/gone/c",))
    assert [(d["id"], d["size"], d["mtime_ns"], d["reference"]) for d in docs] == [
        ("/gone/a", 0, 0, False), ("/gone/b", 0, 0, False), ("/gone/c", 0, 0, True)]
    (g,) = groups
    assert g["keeper"] == "/gone/c" and [m["id"] for m in g["members"]] == ["/gone/c", "/gone/b", "/gone/a"]
    assert np.isnan(g["members"][2]["jaccard"]) and g["members"][1]["jaccard"] == 0.85
    assert (g["min_jaccard"], g["max_jaccard"], g["pairwise"]) == (0.85, 0.9, "known pairs only")
