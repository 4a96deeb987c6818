"""From verified pairs to duplicate groups: components, keeper rules, and the keeper link.

Similarity is not transitive: a ~ b and b ~ c does not make a ~ c. With link="connected" a group is a connected
component of the verified pairs. With link="keeper" (the default) every member must itself be >= the threshold
against its group's keeper; members that are not are taken out and grouped again among themselves, so no group
ever holds a document that is not a near-duplicate of what would be kept. Only verified pairs make edges: a false
LSH candidate never joins two groups.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from typing import Protocol

import numpy as np

from ..config import DEFAULT_RULES, keeper_order
from ..kernels.components import components, groups_of
from ..text.inputs import under

CENTRAL_DECIMALS = 9  # sums of Jaccard compared rounded: summed in another order they may differ in the last bit
# What file managers, browsers and editors add to a copy's name: "X copy", "Copy of X", "X - Copy", "X_copy2",
# "X (1)", "X.bak", "X backup", "X~". A letter on either side makes it another word ("copyright", "photocopy").
COPY_NAME = re.compile(r"(?<![a-z])(copy|backup|bak)(?![a-z])|\(\d+\)|~$", re.IGNORECASE)
MTIME_RESOLUTION = 1_000_000_000  # oldest/newest compare whole seconds: copies and clones differ by less
ALL_PAIRS_UP_TO = 200  # groups up to this size get min/max Jaccard over all pairs; larger ones over known pairs


@dataclasses.dataclass(frozen=True)
class KeeperRules:
    """An ordered list of criteria, like rmlint's -S; reference documents always come first, ids break ties."""

    order: tuple[str, ...] = DEFAULT_RULES
    prefer: str | None = None

    @classmethod
    def parse(cls, text: str, prefer: str | None = None) -> KeeperRules:
        """--keep and --prefer, checked and ordered as config.keeper_order says."""
        return cls(keeper_order(text, prefer), prefer)

    @functools.cached_property
    def _pattern(self) -> re.Pattern | None:
        return re.compile(self.prefer) if self.prefer else None

    def sort_key(self, doc: dict, centrality: float = 0.0) -> tuple:
        """doc: a document record; centrality: the sum of its Jaccard similarities to the other members of its
        group (verified pairs)."""
        pattern = self._pattern
        key: list = [not doc.get("reference", False)]
        for rule in self.order:
            key.append({
                "longest": lambda: -doc["size"], "shortest": lambda: doc["size"],
                "oldest": lambda: doc["mtime_ns"] // MTIME_RESOLUTION,
                "newest": lambda: -(doc["mtime_ns"] // MTIME_RESOLUTION),
                "first": lambda: doc.get("arg", 0), "shallowest": lambda: doc["id"].count("/"),
                "nocopy": lambda: COPY_NAME.search(doc["id"].rsplit("/", 1)[-1]) is not None,
                "central": lambda: -centrality,
                "alpha": lambda: doc["id"],
                "prefer": lambda: not (pattern is not None and pattern.search(doc["id"]) is not None),
                # --metric containment puts it first (never given by --keep): the keeper holds what it contains
                "container": lambda: -doc["set_size"],
            }[rule]())
        key.append(doc["id"])
        return tuple(key)


class Records(Protocol):
    """Document records by global number: a list, or stages.Docs (which makes each record when asked for)."""

    def __len__(self) -> int: ...

    def __getitem__(self, n: int, /) -> dict: ...


def build_groups(docs: Records, edges: np.ndarray, threshold: float, rules: KeeperRules, link: str,
                 similarity: Callable[[np.ndarray, np.ndarray], np.ndarray], anchors: set[int],
                 weights: np.ndarray | None = None,
                 degree: Callable[[np.ndarray | None], np.ndarray] | None = None,
                 component_groups: list[np.ndarray] | None = None) -> list[dict]:
    """Duplicate groups, largest first. docs: global document records; edges: (m, 2) verified pairs, weights
    their Jaccard (computed when None and a rule needs it); similarity(a, b): exact Jaccard of document arrays a
    and b, pairwise; anchors: documents that anchored a bucket too large to pair out (groups holding one say so).
    degree(mask): each document's sum of the Jaccard of its verified pairs with both ends in mask (None: all),
    when edges are not the pairs but have their components in every union of groups' parts (copies as stars,
    pipeline.copies); by default from edges and weights. component_groups: groups_of the edges' components, if
    computed elsewhere (by a cluster's workers: pipeline.cluster)."""
    pending = groups_of(components(len(docs), edges)) if component_groups is None else component_groups
    groups = []
    central = "central" in rules.order
    strength = np.zeros(len(docs))
    if central:
        if degree is None:
            if weights is None:
                weights = similarity(edges[:, 0], edges[:, 1]) if len(edges) else np.empty(0)
            degree = functools.partial(_edge_degree, len(docs), edges, weights)
        strength = np.round(degree(None), CENTRAL_DECIMALS)
    while pending:
        keepers = np.array([min(g.tolist(), key=lambda d: rules.sort_key(docs[d], float(strength[d])))
                            for g in pending], np.int64)
        others = [g[g != k] for g, k in zip(pending, keepers)]
        sims = np.split(similarity(np.repeat(keepers, [len(o) for o in others]), np.concatenate(others)),
                        np.cumsum([len(o) for o in others])[:-1])
        pending = []
        for keeper, members, sim in zip(keepers.tolist(), others, sims):
            if link == "keeper":
                far = members[~(sim >= threshold)]  # an unknown (NaN, replayed) similarity is not a near one
                members, sim = members[sim >= threshold], sim[sim >= threshold]
                if len(far) > 1:  # the rest may still be near-duplicates of each other
                    inside = np.isin(edges[:, 0], far) & np.isin(edges[:, 1], far)
                    pending.extend(groups_of(components(len(docs), edges[inside])))
                    if central:  # their centrality among themselves
                        assert degree is not None  # set above for central
                        mask = np.zeros(len(docs), bool)
                        mask[far] = True
                        strength[far] = np.round(degree(mask), CENTRAL_DECIMALS)[far]
            if len(members):
                groups.append(_group(docs, keeper, members, sim, anchors))
    _pairwise_bounds(groups, docs, edges, similarity)
    groups.sort(key=lambda g: (-g["size"], g["keeper"]))
    for number, group in enumerate(groups, start=1):
        group["group"] = number
    return groups


def _edge_degree(n: int, edges: np.ndarray, weights: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """Each document's sum of the Jaccard of its verified pairs (its weighted degree), of those with both ends in
    mask if given."""
    if mask is not None:
        inside = mask[edges[:, 0]] & mask[edges[:, 1]]
        edges, weights = edges[inside], weights[inside]
    out = np.zeros(n)
    np.add.at(out, edges[:, 0], weights)
    np.add.at(out, edges[:, 1], weights)
    return out


def _group(docs, keeper: int, members: np.ndarray, sim: np.ndarray, anchors: set[int]) -> dict:
    known = np.nan_to_num(sim, nan=-np.inf)  # best first; an unknown (replayed) similarity last, not anywhere
    order = sorted(range(len(members)), key=lambda i: (-known[i], docs[members[i]]["id"]))
    rows = [{"id": docs[keeper]["id"], "role": "keeper", "jaccard": 1.0, "doc": keeper,
             "reference": bool(docs[keeper].get("reference"))}]
    rows += [{"id": docs[members[i]]["id"], "jaccard": float(sim[i]), "doc": int(members[i]),
              "role": "reference" if docs[members[i]].get("reference") else "duplicate",
              "reference": bool(docs[members[i]].get("reference"))} for i in order]
    return {"type": "group", "keeper": docs[keeper]["id"], "size": len(rows), "members": rows,
            "anchored": any(r["doc"] in anchors for r in rows)}


def _pairwise_bounds(groups: list[dict], docs, edges: np.ndarray, similarity) -> None:
    """min/max Jaccard over all pairs of each group (exactly, for groups up to ALL_PAIRS_UP_TO), else over the
    verified and keeper pairs known, said in `pairwise`."""
    small = [g for g in groups if g["size"] <= ALL_PAIRS_UP_TO]
    if small:
        a, b, sizes = [], [], []
        for g in small:
            ids = np.array([m["doc"] for m in g["members"]])
            i, j = np.triu_indices(len(ids), 1)
            a.append(ids[i])
            b.append(ids[j])
            sizes.append(len(i))
        sims = np.split(similarity(np.concatenate(a), np.concatenate(b)), np.cumsum(sizes)[:-1])
        for g, s in zip(small, sims):  # NaN: a similarity not known (replayed pairs)
            g.update(min_jaccard=float(np.nanmin(s)), max_jaccard=float(np.nanmax(s)),
                     pairwise="known pairs only" if np.isnan(s).any() else "all pairs")
    for g in groups:
        if g["size"] > ALL_PAIRS_UP_TO:
            known = [m["jaccard"] for m in g["members"][1:]]
            g.update(min_jaccard=float(min(known)), max_jaccard=float(max(known)),
                     pairwise="keeper pairs only (group too large for all pairs)")


def replay_groups(saved: list[dict], threshold: float, rules: KeeperRules, link: str,
                  references: tuple[str, ...] = ()) -> tuple[list[dict], list[dict]]:
    """Groups from saved pairs alone, without reading a document: keeper rules see the files' current size and
    mtime (os.stat); a similarity not in the saved pairs is unknown, so the keeper link never keeps such a member
    (it is grouped again among the others taken out).
    Returns (groups of the pairs >= threshold, every document named in the saved pairs)."""
    import os

    ids = sorted({p["a"] for p in saved} | {p["b"] for p in saved})
    index = {doc_id: i for i, doc_id in enumerate(ids)}
    is_reference = under(references)
    docs = []
    for doc_id in ids:
        try:
            st = os.stat(doc_id)
            size, mtime = st.st_size, st.st_mtime_ns
        except OSError:
            size, mtime = 0, 0
        docs.append({"id": doc_id, "size": size, "mtime_ns": mtime, "arg": 0, "reference": is_reference(doc_id),
                     "path": os.path.abspath(doc_id)})
    # every similarity the file holds is known (a pair below threshold is no edge, but its Jaccard is not unknown)
    known = {(min(index[p["a"]], index[p["b"]]), max(index[p["a"]], index[p["b"]])): p["jaccard"] for p in saved}
    edges = np.array(sorted(pair for pair, j in known.items() if j >= threshold), dtype=np.int64).reshape(-1, 2)

    def similarity(a, b):
        return np.array([known.get((min(x, y), max(x, y)), np.nan) for x, y in zip(a.tolist(), b.tolist())])

    return build_groups(docs, edges, threshold, rules, link, similarity, set()), docs
