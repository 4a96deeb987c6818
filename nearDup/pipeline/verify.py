"""Stage 5, verify: the exact Jaccard of every candidate pair, kept when it is at least the threshold; with
--metric containment, the containment of the smaller set in the larger, |A ∩ B| / min(|A|, |B|), and the pair
written contained -> container."""
from __future__ import annotations

import dataclasses
from json.encoder import encode_basestring  # what json.dumps(a str, ensure_ascii=False) is
from pathlib import Path

import numpy as np

from ..config import (
    VerifyParams,
)
from ..kernels import lsh, sets
from ..store.manifest import CandidatesRecord, ShingleRecord, SignatureRecord, VerifyBasis, VerifyRecord, VerifyStats
from ..store.workdir import WorkDir, atomic_file
from ..wording import plural
from .copies import ClassPairs, Listing, Pairing, among, named_members, uncovered
from .driver import PartitionArrays, Runner, _absolute, _begin, _files, _up_to_date, part_starts, require
from .results import EXACT_RECALL, estimated_recall, recall_line, recall_warning
from .shingle import load_catalog
from .similarity import agreement, containment, set_overlap

VERIFY_CHUNK = 20_000  # candidate pairs per verification task, at most
VERIFY_TASKS = 8  # and at least this many tasks when there are VERIFY_TASKS * MIN_VERIFY_CHUNK pairs or more
MIN_VERIFY_CHUNK = 1_000



@dataclasses.dataclass(frozen=True)
class VerifyTask:
    root: str
    pairs: str  # the .npy of the pairs to verify
    lo: int
    hi: int
    starts: tuple
    shards: tuple

    def __post_init__(self):
        _absolute(self, "root", "pairs")


def verify_chunk(task: VerifyTask) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For candidate pairs [lo, hi): |A ∩ B|, |A|, |B| of the shingle sets and the signature agreement."""
    work = WorkDir(task.root)
    pairs = np.asarray(work.load_array(Path(task.pairs), "candidates", mmap=True)[task.lo:task.hi])
    starts = np.asarray(task.starts, dtype=np.int64)
    inter, la, lb = set_overlap(PartitionArrays(work, "shingle", ("values.npy", "offsets.npy"), task.shards), starts,
                                pairs[:, 0], pairs[:, 1])
    return inter, la, lb, agreement(PartitionArrays(work, "signature", ("npy",), task.shards), starts, pairs[:, 0],
                                    pairs[:, 1])


def _reusable(work: WorkDir, basis: VerifyBasis) -> tuple[np.ndarray, ...] | None:
    """The last verification's (checked pairs, accepted pairs, their scores and set sizes) if it can be reused:
    same threshold and signatures, and shards that are a prefix of today's (the shards are append-only, so a
    global number still means the same stored set)."""
    record = work.manifest().verify
    if record is None or record.basis is None or _up_to_date(work, VerifyRecord, record.key) is None:
        return None
    old = record.basis
    if (old.threshold != basis.threshold or old.signature != basis.signature or old.metric != basis.metric
            or old.shard_keys != basis.shard_keys[:len(old.shard_keys)]):
        return None
    return tuple(work.load_array(work.output("verify", name, record.key), "verify")
                 for name in ("checked.npy", "pairs.npy", "scores.npy", "sizes.npy"))


def run(runner: Runner, params: VerifyParams) -> VerifyRecord:
    """Exact Jaccard (or containment) of the candidate pairs. Pairs checked by the last run on the same shards are
    not checked again: an incremental run verifies only the pairs that involve a new or changed document."""
    work = runner.work
    upstream, key, record = _begin(runner, VerifyRecord, CandidatesRecord, params)
    warning = recall_warning(work, params.threshold)  # said with the results
    if record is not None:
        runner.log(f"verify: up to date ({plural(record.stats.pairs, 'pair')} with {_named(params)} >= "
                   f"{params.threshold})")
        if (line := recall_line(work, record.stats, params.threshold)) is not None:
            runner.log(f"  {line}")
        if warning is not None:
            runner.log(f"warning: {warning}")
        return record
    shingle_record = require(work, ShingleRecord)
    contained = params.metric == "containment"
    basis = VerifyBasis(threshold=params.threshold, metric=params.metric if contained else None,
                        shard_keys=shingle_record.shard_keys, signature=require(work, SignatureRecord).params)
    pairing = Pairing.load(work, upstream)  # (a few of its labels looked up)
    label, copies = pairing.label, pairing.copies
    class_pairs = work.load_array(work.current("candidates", "pairs.npy"), "candidates")
    pairs = _entries(class_pairs, work.load_array(work.current("candidates", "stars.npy"), "candidates"), label)
    candidates = upstream.stats.candidates  # (the document pairs that pairs stand for, counted there)
    previous = _reusable(work, basis)
    if previous is not None:
        checked, accepted, scores, sizes = previous
        codes = lsh.pair_codes(pairs)
        known = sets.in_sorted(codes, lsh.pair_codes(checked))
        kept = sets.in_sorted(lsh.pair_codes(accepted), codes)
        accepted, scores, sizes = accepted[kept], scores[kept], sizes[kept]
        todo = pairs[~known]
    else:
        accepted, scores, sizes, todo = (np.empty((0, 2), np.int64), np.empty((0, 2)),
                                         np.empty((0, 4 if contained else 2), np.int64), pairs)
    todo_path = work.output("verify", "todo.npy", key)
    work.save_array(todo_path, todo)
    n = len(todo)
    starts = tuple(part_starts(shingle_record).tolist())
    shards = tuple(shingle_record.shard_numbers)
    chunk = min(VERIFY_CHUNK, max(MIN_VERIFY_CHUNK, -(-n // VERIFY_TASKS)))  # from n alone, never from --jobs
    tasks = [VerifyTask(str(work.root), str(todo_path), lo, min(lo + chunk, n), starts, shards)
             for lo in range(0, n, chunk)]
    results = runner.engine.map(verify_chunk, tasks, desc="verify", sizes=[t.hi - t.lo for t in tasks], unit="pair",
                                light=n < VERIFY_TASKS * MIN_VERIFY_CHUNK)  # (split only to share the cores)
    if results:
        inter, la, lb, estimate = (np.concatenate(column) for column in zip(*results))
    else:
        inter = la = lb = np.empty(0, np.int64)
        estimate = np.empty(0)
    similarity = containment(inter, np.minimum(la, lb)) if contained else sets.jaccard(inter, la, lb)
    keep = np.flatnonzero(similarity >= params.threshold)
    fresh_scores = np.stack([similarity[keep], estimate[keep]], axis=1) if len(keep) else np.empty((0, 2))
    # containment: |A| and |B| too, which say which side is contained (the smaller)
    fresh_sizes = np.stack([inter[keep], la[keep] + lb[keep] - inter[keep], *((la[keep], lb[keep]) if contained
                                                                             else ())], axis=1).astype(np.int64)
    del results, inter, la, lb, estimate, similarity  # per candidate: millions of pairs of copies, not needed now
    accepted, scores = np.concatenate([accepted, todo[keep]]), np.concatenate([scores, fresh_scores])
    sizes = np.concatenate([sizes, fresh_sizes])
    order = sets.stable_argsort(lsh.pair_codes(accepted))
    accepted, scores, sizes = accepted[order], scores[order], sizes[order]
    del order
    entries = ClassPairs(accepted, among(accepted, class_pairs), copies)
    counts = entries.count()
    found = int(counts.sum())
    named = named_members(load_catalog(work, shingle_record), entries)
    work.save_array(work.output("verify", "checked.npy", key), pairs)
    work.save_array(work.output("verify", "pairs.npy", key), accepted)
    work.save_array(work.output("verify", "scores.npy", key), scores)
    work.save_array(work.output("verify", "sizes.npy", key), sizes)
    listing = Listing(named, entries, scores, sizes, contained)
    with atomic_file(work.output("verify", "pairs.jsonl", key), "w") as f:
        for text in _pair_lines(listing):
            f.write(text)
    todo_path.unlink()
    record = VerifyRecord(key=key, params=params, upstream=upstream.key, basis=basis,
                          files=_files(work, "verify", key, "checked.npy", "pairs.npy", "scores.npy", "sizes.npy",
                                       "pairs.jsonl"),
                          stats=VerifyStats(candidates=candidates, checked=n, pairs=found, rejected=candidates - found,
                                            recall=EXACT_RECALL if upstream.stats.method == "exact" else
                                            estimated_recall(work, scores[:, 0], counts, params.threshold)))
    work.record_stage("verify", record)
    listing.remember(work, key)
    reused = f" ({len(pairs) - n} known from the last run)" if len(pairs) > n else ""
    runner.log(f"verify: {found} of {plural(candidates, 'candidate pair has', 'candidate pairs have')} "
               f"exact {_named(params)} >= {params.threshold}{reused}")
    runner.log(f"  {recall_line(work, record.stats, params.threshold)}")
    if warning is not None:
        runner.log(f"warning: {warning}")
    return record


def _entries(class_pairs: np.ndarray, stars: np.ndarray, label: lsh.ByNumber) -> np.ndarray:
    """What verification checks: the class pairs (pipeline.copies) and the star pairs that no class pair stands
    for, one array sorted by pair code. (A class's label is one of its documents, so a class pair is checked as
    the pair of its labels; (A, A) has Jaccard 1.)"""
    pairs = np.concatenate([class_pairs, stars[uncovered(stars, class_pairs, label)]])
    return pairs[sets.stable_argsort(lsh.pair_codes(pairs))]


def _named(params: VerifyParams) -> str:
    return "Jaccard" if params.metric == "jaccard" else "containment"


def _pair_lines(listing: Listing):
    """The verified pairs as the JSON lines of pairs.jsonl, with ids, scores and set sizes (|A ∩ B|, |A ∪ B|),
    best first, then by id: an order that does not depend on how the documents were numbered. The text of a
    bounded number of lines at a time: the pairs of classes of copies are made (pipeline.copies.expanded_pairs) on each
    id's rank among the ids, for thousands of copies of one text stand for millions of pairs. Each id and each
    entry's fields are encoded once (Listing), as json.dumps(record, ensure_ascii=False, sort_keys=True) would:
    json.dumps of every record is slow for millions of pairs. --metric containment: each pair a -> b, a contained
    in b (copies.directed), with its containment and Jaccard."""
    return listing.text(['{"a": '], list(map(encode_basestring, listing.names)), ', "b": ',
                        [*listing.json_fields(listing.fields), "}\n"])
