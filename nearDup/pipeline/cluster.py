"""Stage 6, cluster: duplicate groups from the verified pairs, with a keeper each (pipeline.groups)."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..config import (
    ClusterParams,
)
from ..kernels import sets
from ..store.manifest import ClusterRecord, ClusterStats, ShingleRecord, VerifyRecord
from ..store.workdir import WorkDir
from ..wording import plural
from .copies import class_degree, class_edges, verified_entries
from .driver import PartitionArrays, Runner, _begin, _files, part_starts, require
from .groups import KeeperRules, build_groups
from .shingle import load_docs
from .similarity import set_overlap
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
    similarity = stored_similarity(work, shingle_record)
    rules = KeeperRules.parse(",".join(params.keep), params.prefer)
    weights = work.load_array(work.current("verify", "scores.npy"), "verify")[:, 0]  # (Jaccard, estimate) per entry
    groups = build_groups(docs, edges, upstream.params.threshold, rules, params.link, similarity, anchors,
                          degree=lambda mask: class_degree(entries, weights, len(docs), mask))
    work.save_jsonl(work.output("cluster", "clusters.jsonl", key), groups)
    record = ClusterRecord(key=key, params=params, upstream=upstream.key,
                           files=_files(work, "cluster", key, "clusters.jsonl"), stats=ClusterStats(
        groups=len(groups), documents=sum(g["size"] for g in groups),
        duplicates=sum(m["role"] == "duplicate" for g in groups for m in g["members"]),
        anchored=sum(g["anchored"] for g in groups)))
    work.record_stage("cluster", record)
    runner.log(f"cluster: {_cluster_summary(record)}")
    return record


def stored_similarity(work: WorkDir, shingle_record: ShingleRecord) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """similarity(a, b): the exact Jaccard of the stored documents a[i] and b[i] (global numbers), pairwise, in
    chunks of VERIFY_CHUNK pairs."""
    starts = part_starts(shingle_record)
    shingles = PartitionArrays(work, "shingle", ("values.npy", "offsets.npy"),  # mapped once for every call
                               shingle_record.shard_numbers)

    def similarity(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = []
        for lo in range(0, len(a), VERIFY_CHUNK):
            inter, la, lb = set_overlap(shingles, starts, a[lo:lo + VERIFY_CHUNK], b[lo:lo + VERIFY_CHUNK])
            out.append(sets.jaccard(inter, la, lb))
        return np.concatenate(out) if out else np.empty(0)
    return similarity


def _cluster_summary(record: ClusterRecord) -> str:
    s = record.stats
    return (f"{plural(s.groups, 'group')} of {plural(s.documents, 'document')} "
            f"({plural(s.duplicates, 'duplicate')} of a keeper; link {record.params.link})")


def clusters(work: WorkDir) -> list[dict]:
    require(work, ClusterRecord)
    return work.load_jsonl(work.current("cluster", "clusters.jsonl"), "cluster")
