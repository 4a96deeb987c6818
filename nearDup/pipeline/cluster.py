"""Stage 6, cluster: duplicate groups from the verified pairs, with a keeper each (pipeline.groups)."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..config import (
    ClusterParams,
)
from ..errors import EngineError
from ..kernels import components as cc
from ..kernels import sets
from ..store.manifest import ClusterRecord, ClusterStats, ShingleRecord, VerifyRecord
from ..store.workdir import WorkDir
from ..wording import plural
from .copies import class_degree, class_edges, set_sizes, verified_entries
from .driver import (
    PartitionArrays,
    Runner,
    _absolute,
    _begin,
    _files,
    _resolved,
    load_routed,
    part_starts,
    require,
    routed_bounds,
    save_routed,
)
from .groups import KeeperRules, Records, build_groups
from .shingle import load_docs
from .similarity import containment, set_overlap
from .verify import VERIFY_CHUNK


def run(runner: Runner, params: ClusterParams) -> ClusterRecord:
    work = runner.work
    shingle_record = require(work, ShingleRecord)
    upstream, key, record = _begin(runner, ClusterRecord, VerifyRecord, params, shingle_record.inputs)
    if record is not None:
        runner.log(f"cluster: up to date ({_cluster_summary(record)})")
        return record
    docs = load_docs(work, shingle_record)
    entries = verified_entries(work)
    edges = class_edges(entries)  # copies as stars of their first document: the components of every pair
    anchors = {b["anchor"] for b in work.load_jsonl(work.current("candidates", "large_buckets.jsonl"), "candidates")}
    contained = upstream.params.metric == "containment"
    similarity = stored_similarity(work, shingle_record, contained)
    rules = KeeperRules.parse(",".join(params.keep), params.prefer)
    weights = work.load_array(work.current("verify", "scores.npy"), "verify")[:, 0]  # (Jaccard, estimate) per entry
    records: Records = docs
    if contained:  # the keeper is the largest set of its group (after references): what the others are part of
        rules = KeeperRules(("container", *rules.order), rules.prefer)
        records = _WithSetSize(docs, set_sizes(entries, work.load_array(work.current("verify", "sizes.npy"),
                                                                        "verify"), len(docs)))
    spread = _spread_components(runner, edges, key) if runner.engine.shuffle else None
    groups = build_groups(records, edges, upstream.params.threshold, rules, params.link, similarity, anchors,
                          degree=lambda mask: class_degree(entries, weights, len(docs), mask), component_groups=spread)
    if contained:
        groups = [_as_containment(g) for g in groups]
    work.save_jsonl(work.output("cluster", "clusters.jsonl", key), groups)
    record = ClusterRecord(key=key, params=params, upstream=upstream.key,
                           files=_files(work, "cluster", key, "clusters.jsonl"), stats=ClusterStats(
        groups=len(groups), documents=sum(g["size"] for g in groups),
        duplicates=sum(m["role"] == "duplicate" for g in groups for m in g["members"]),
        anchored=sum(g["anchored"] for g in groups)))
    work.record_stage("cluster", record)
    runner.log(f"cluster: {_cluster_summary(record)}")
    return record


class _WithSetSize:
    """Document records with their shingle-set size (set_size), for the keeper rule of containment."""

    def __init__(self, docs: Records, size: np.ndarray):
        self.docs, self.size = docs, size

    def __len__(self) -> int:
        return len(self.docs)

    def __getitem__(self, n: int) -> dict:
        return {**self.docs[n], "set_size": int(self.size[n])}


def _as_containment(group: dict) -> dict:
    """A group of --metric containment: each member's containment in the keeper (what build_groups computed as
    its similarity), their least and greatest; the members' containment in each other is not a bound of the
    group, so it is not given."""
    members = [{**{k: v for k, v in m.items() if k != "jaccard"}, "containment": m["jaccard"]}
               for m in group["members"]]
    shares = [m["containment"] for m in members[1:]]
    rest = {k: v for k, v in group.items() if k not in ("members", "min_jaccard", "max_jaccard", "pairwise")}
    return {**rest, "members": members, "min_containment": min(shares), "max_containment": max(shares),
            "pairwise": "members in the keeper"}


def stored_similarity(work: WorkDir, shingle_record: ShingleRecord,
                      contained: bool = False) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """similarity(a, b): the exact Jaccard of the stored documents a[i] and b[i] (global numbers), pairwise, in
    chunks of VERIFY_CHUNK pairs; or (contained) how much of b[i] is in a[i]: a member's share in its keeper."""
    starts = part_starts(shingle_record)
    shingles = PartitionArrays(work, "shingle", ("values.npy", "offsets.npy"),  # opened once for every call
                               shingle_record.shard_numbers, mapped=False)  # by the client: read, not mapped

    def similarity(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = []
        for lo in range(0, len(a), VERIFY_CHUNK):
            inter, la, lb = set_overlap(shingles, starts, a[lo:lo + VERIFY_CHUNK], b[lo:lo + VERIFY_CHUNK])
            out.append(containment(inter, lb) if contained else sets.jaccard(inter, la, lb))
        return np.concatenate(out) if out else np.empty(0)
    return similarity


def _cluster_summary(record: ClusterRecord) -> str:
    s = record.stats
    return (f"{plural(s.groups, 'group')} of {plural(s.documents, 'document')} "
            f"({plural(s.duplicates, 'duplicate')} of a keeper; link {record.params.link})")


def clusters(work: WorkDir) -> list[dict]:
    require(work, ClusterRecord)
    return work.load_jsonl(work.current("cluster", "clusters.jsonl"), "cluster")


COMPONENT_EDGES = 1_000_000  # edges per partition of the components rounds, about; fixed by the data


@dataclasses.dataclass(frozen=True)
class ForestTask:
    """A slice [lo, hi) of the edges: its local union-find (kernels.components.local_forest), both ways, routed
    to the partitions of the arcs' first nodes (driver.save_routed) in `out`."""

    root: str
    edges: str
    lo: int
    hi: int
    parts: int
    out: str

    def __post_init__(self):
        _absolute(self, "root", "edges", "out")


def edge_forest(task: ForestTask) -> None:
    work = WorkDir(task.root)
    edges = np.asarray(work.load_array(Path(task.edges), "cluster", mmap=True)[task.lo:task.hi])
    arcs = cc.both_ways(cc.local_forest(edges))
    save_routed(work, arcs, cc.partition_of(arcs[:, 0], task.parts), task.parts, Path(task.out))


@dataclasses.dataclass(frozen=True)
class StarTask:
    """One partition's step of the rounds: the arcs every sender routed to it, large-star or small-star of its
    nodes (kernels.components), the result routed on to `out`."""

    root: str
    step: str  # "large" or "small"
    part: int
    sent: tuple
    parts: int
    out: str

    def __post_init__(self):
        _absolute(self, "root", "out")
        _resolved(self, sent=tuple(str(Path(p).absolute()) for p in self.sent))


def star_step(task: StarTask) -> np.ndarray | None:
    """Run the step; before a large-star, its leaves (node, smallest node of its component) if the partition's
    arcs are those of a forest of stars about their smallest nodes (is_star_forest), else None. When every
    partition returns its leaves, the components are found."""
    work = WorkDir(task.root)
    arcs = load_routed(work, task.sent, task.part, "cluster", 2)
    done = None
    if task.step == "large":
        done = cc.star_leaves(arcs) if cc.is_star_forest(arcs) else None
        out = cc.large_star(arcs)
    else:
        out = cc.both_ways(cc.small_star(arcs))
    save_routed(work, out, cc.partition_of(out[:, 0], task.parts), task.parts, Path(task.out))
    return done


def _spread_components(runner: Runner, edges: np.ndarray, key: str) -> list[np.ndarray]:
    """The components of two or more documents (kernels.components.groups_of of the edges' labels), computed by
    the engine's workers: local union-find of slices of the edges, then large-star and small-star rounds over
    node partitions through the work dir (kernels.components, Kiveris et al. 2014) until every partition is a
    forest of stars. The client receives only the grouped documents, as (leaf, smallest member) pairs."""
    work = runner.work
    if not len(edges):
        return []
    parts = max(2, min(64, -(-len(edges) // COMPONENT_EDGES)))
    edges_path = work.output("cluster", "edges.npy", key)
    work.save_array(edges_path, edges)

    def outputs(name: str) -> list[Path]:
        return [work.output("cluster", f"components-{name}-{p:04d}.npy", key) for p in range(parts)]

    def forget(paths: list[Path]) -> None:
        for path in [*paths, *map(routed_bounds, paths)]:
            path.unlink(missing_ok=True)

    bounds = np.linspace(0, len(edges), parts + 1).astype(np.int64).tolist()
    sent = outputs("forest")
    runner.engine.map(edge_forest, [ForestTask(str(work.root), str(edges_path), lo, hi, parts, str(out))
                                    for lo, hi, out in zip(bounds[:-1], bounds[1:], sent)], desc="components")
    edges_path.unlink()
    # O(log^2 n) rounds (Kiveris et al., Theorem 2.5); a bound, so that a routing bug fails instead of hanging
    most = 4 * int(np.log2(len(edges) + 2)) ** 2 + 16
    for turn in range(1, most + 1):
        for step in ("large", "small"):
            out = outputs(f"{turn:03d}-{step}")
            found = runner.engine.map(star_step, [StarTask(str(work.root), step, p, tuple(map(str, sent)), parts,
                                                           str(out[p])) for p in range(parts)], desc="components")
            forget(sent)
            sent = out
            if step == "large" and all(leaves is not None for leaves in found):
                forget(sent)
                leaves = np.concatenate(found)
                if not len(leaves):  # (only self-loops)
                    return []
                centres = sets.sorted_unique(leaves[:, 1])
                rows = np.concatenate([np.stack([centres, centres], axis=1), leaves])
                rows = rows[np.lexsort((rows[:, 0], rows[:, 1]))]  # by centre, the centre first (the smallest)
                return np.split(rows[:, 0], np.flatnonzero(rows[1:, 1] != rows[:-1, 1]) + 1)
    raise EngineError(f"cluster: the star rounds did not converge in {most} rounds (a bug: please report it)")
