"""Stage 6, cluster: duplicate groups from the verified pairs, with a keeper each (pipeline.groups)."""
from __future__ import annotations

import numpy as np

from ..config import (
    ClusterParams,
)
from ..kernels import sets
from ..store.manifest import ClusterRecord, ClusterStats, ShingleRecord, VerifyRecord
from ..store.workdir import WorkDir
from ..wording import plural
from .copies import class_degree, class_edges, set_sizes, verified_entries
from .driver import PartitionArrays, Runner, _begin, _files, part_starts, require
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
    starts = part_starts(shingle_record)
    shingles = PartitionArrays(work, "shingle", ("values.npy", "offsets.npy"),  # mapped once for every call
                               shingle_record.shard_numbers)

    contained = upstream.params.metric == "containment"

    def similarity(a, b):  # Jaccard, or (containment) how much of b is in a: a member's share in its keeper
        out = []
        for lo in range(0, len(a), VERIFY_CHUNK):
            inter, la, lb = set_overlap(shingles, starts, a[lo:lo + VERIFY_CHUNK], b[lo:lo + VERIFY_CHUNK])
            out.append(containment(inter, lb) if contained else sets.jaccard(inter, la, lb))
        return np.concatenate(out) if out else np.empty(0)

    rules = KeeperRules.parse(",".join(params.keep), params.prefer)
    weights = work.load_array(work.current("verify", "scores.npy"), "verify")[:, 0]  # (Jaccard, estimate) per entry
    records: Records = docs
    if contained:  # the keeper is the largest set of its group (after references): what the others are part of
        rules = KeeperRules(("container", *rules.order), rules.prefer)
        records = _WithSetSize(docs, set_sizes(entries, work.load_array(work.current("verify", "sizes.npy"),
                                                                        "verify"), len(docs)))
    groups = build_groups(records, edges, upstream.params.threshold, rules, params.link, similarity, anchors,
                          degree=lambda mask: class_degree(entries, weights, len(docs), mask))
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


def _cluster_summary(record: ClusterRecord) -> str:
    s = record.stats
    return (f"{plural(s.groups, 'group')} of {plural(s.documents, 'document')} "
            f"({plural(s.duplicates, 'duplicate')} of a keeper; link {record.params.link})")


def clusters(work: WorkDir) -> list[dict]:
    require(work, ClusterRecord)
    return work.load_jsonl(work.current("cluster", "clusters.jsonl"), "cluster")
