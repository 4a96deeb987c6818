"""Stage 4, candidates: the pairs of documents that share a bucket in at least one band, from a band index that
an incremental run updates instead of rebuilding; or (--method exact) every pair whose stored shingle sets have
Jaccard >= the threshold, by an exact set-similarity join (kernels.allpairs); or (--method auto) whichever of the
two costs less (choose_method).
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..config import (
    CandidateParams,
)
from ..errors import WorkDirError
from ..kernels import allpairs, lsh, sets
from ..store.catalog import Catalog
from ..store.manifest import (
    BandRecord,
    CandidatesBasis,
    CandidatesRecord,
    CandidatesStats,
    ShingleRecord,
    SignatureRecord,
)
from ..store.workdir import WorkDir
from ..wording import plural
from .copies import Copies, Pairing, copy_classes, expanded_count, uncovered
from .driver import (
    PartitionArrays,
    Runner,
    _absolute,
    _begin,
    _files,
    _resolved,
    _up_to_date,
    load_routed,
    part_starts,
    require,
    routed_bounds,
    save_routed,
)
from .shingle import load_docs


@dataclasses.dataclass(frozen=True)
class BandTask:
    """The candidate pairs of a few bands, and their band index (each band's keys sorted, with their documents)
    written to `index` (keys .npy, docs .npy; shape (bands, documents)) for the next run and for `query`.

    pairing: the files of this run's Pairing (pipeline.copies: which documents can pair, their order by id, their
    copy classes, whose copies a bucket pairs as one), as (name, path) pairs.
    previous: the last run's, and runs: its band index of these bands, (keys .npy, docs .npy) of its base and of
    each segment (see _index_runs). The task then writes the new documents' index as one more segment to `index`
    (or, compact, the index of every live document as a new base) and returns the change in candidate pairs (with
    counts -1 and +1), computed over the touched buckets only: those holding a new, changed or deleted document,
    or too large."""

    root: str
    bands: tuple
    pairing: tuple
    shards: tuple
    starts: tuple  # global number of each shard's first document
    max_bucket: int
    index: tuple
    previous: tuple = ()
    large_keys: tuple = ()  # per band, the keys (as int64) of the last run's large buckets
    runs: tuple = ()
    compact: bool = False
    changed: tuple = ()  # with previous: (died .npy, new .npy) of this run (_changed_documents)

    def __post_init__(self):
        _absolute(self, "root")
        _resolved(self, index=tuple(os.path.join(os.getcwd(), p) for p in self.index),
                  pairing=_absolute_files(self.pairing), previous=_absolute_files(self.previous),
                  runs=tuple(tuple(os.path.join(os.getcwd(), p) for p in run) for run in self.runs),
                  changed=tuple(os.path.join(os.getcwd(), p) for p in self.changed))


def _absolute_files(files: tuple) -> tuple:
    """(name, path) pairs with each path made absolute: a task may run in another working directory."""
    return tuple((name, os.path.join(os.getcwd(), path)) for name, path in files)


BANDS_PER_TASK = 4  # each task reads every band shard once; fixed, so tasks never depend on --jobs
LIGHT_DOCUMENTS = 16_000  # new documents whose band index segment is written inline (engine.map light)


def _band_keys(work: WorkDir, task: BandTask, first: int = 0) -> np.ndarray:
    """The task's columns of band keys of every document numbered first or more (whole shards from there)."""
    parts = [work.load_array(work.part("band", n, "npy"), "band", mmap=True)[:, list(task.bands)]
             for n, start in zip(task.shards, task.starts) if start >= first]
    return np.concatenate(parts) if parts else np.empty((0, len(task.bands)), np.uint64)


def _keys_of(work: WorkDir, task: BandTask, numbers: np.ndarray) -> np.ndarray:
    """The task's columns of band keys of a few documents (global numbers, ascending), from their shards."""
    starts = np.asarray(task.starts, np.int64)
    shard = np.searchsorted(starts, numbers, "right") - 1
    parts = [np.asarray(work.load_array(work.part("band", task.shards[s], "npy"), "band", mmap=True)[
        numbers[shard == s] - starts[s]][:, list(task.bands)]) for s in sets.sorted_unique(shard).tolist()]
    return np.concatenate(parts) if parts else np.empty((0, len(task.bands)), np.uint64)


def ranks(order: np.ndarray, documents: int) -> np.ndarray:
    """rank[n]: the position of document n in order (by id), -1 if it cannot pair."""
    rank = np.full(documents, -1, np.int64)
    rank[order] = np.arange(len(order))
    return rank


def band_candidates(task: BandTask) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(distinct class pairs (pipeline.copies), their counts, distinct star pairs of global numbers, their counts,
    large buckets (band, anchor, size, key)) of the task's bands. A large bucket's anchor is its first document by
    id, however the shards were appended."""
    work = WorkDir(task.root)
    found: list[list[np.ndarray]] = [[], []]  # class pairs, star pairs
    counts: list[list[np.ndarray]] = [[], []]
    large, index = [], []
    pairing = Pairing.read(work, dict(task.pairing))
    if task.previous:
        # looked up, not made: a run looks up only the documents of the buckets it touches (Pairing.rank, .label)
        last = Pairing.read(work, dict(task.previous))
        old_total, old_rank, old_label, rank, label = (last.documents, last.rank, last.label, pairing.rank,
                                                       pairing.label)
        died, new = (work.load_array(Path(p), "candidates") for p in task.changed)
        runs = [tuple(work.load_array(Path(p), "candidates", mmap=True) for p in run) for run in task.runs]
        died_keys = _keys_of(work, task, died)
        new_keys = _band_keys(work, task, old_total)[new - old_total]
    else:  # every document looked up in every band: as arrays
        rank, label = pairing.dense_ranks(), pairing.dense_labels()
        members = pairing.members()
        keys = _band_keys(work, task)[members]
    for j, band in enumerate(task.bands):
        if task.previous:
            band_runs = [tuple(stacked[j] for stacked in run) for run in runs]  # (keys, docs[, filter])
            new_index, lost, gained, big = lsh.update_band(band_runs, old_rank, task.large_keys[j], died_keys[:, j],
                                                           np.ascontiguousarray(new_keys[:, j]), new, rank,
                                                           task.max_bucket, old_label, label)
            for kind in (0, 1):
                found[kind] += [lost[kind], gained[kind]]
                counts[kind] += [np.full(len(lost[kind]), -1, np.int64), np.ones(len(gained[kind]), np.int64)]
            sk, sn = lsh.merge_runs([*band_runs, new_index], rank) if task.compact else new_index
        else:
            sk, sn = lsh.band_index(np.ascontiguousarray(keys[:, j]), members)
            *pairs, big = lsh.class_bucket_pairs(sk, sn, task.max_bucket, rank, label)
            for kind in (0, 1):
                found[kind].append(pairs[kind])
                counts[kind].append(np.ones(len(pairs[kind]), np.int64))
        for kind in (0, 1):  # merged band by band: each band's star pairs of a large bucket are the same ones
            merged, summed = lsh.count_pairs(np.concatenate(found[kind]), np.concatenate(counts[kind]))
            found[kind], counts[kind] = [merged], [summed]
        index.append((sk, sn))
        large.append(np.concatenate([np.full((len(big), 1), band), big], axis=1))
    _save_index(work, task.index, index)
    return (found[0][0], counts[0][0], found[1][0], counts[1][0],
            np.concatenate(large).astype(np.int64) if large else np.empty((0, 4), np.int64))


SHUFFLE_ENTRIES = 2_000_000  # (band, key, document) entries per shuffle partition, about; fixed by the data


@dataclasses.dataclass(frozen=True)
class ShuffleTask:
    """One shard's band keys, cut by partition (the key mod parts) for the partitions' candidate tasks: int64 rows
    (band, key bits, global number), band by band and numbers ascending, routed to `out` (driver.save_routed)."""

    root: str
    shard: int
    start: int  # its first document's global number
    members: str  # the .npy of the numbers of the documents that can pair, ascending
    lo: int  # and the shard's among them: members[lo:hi]
    hi: int
    parts: int
    out: str

    def __post_init__(self):
        _absolute(self, "root", "members", "out")


def shuffle_shard(task: ShuffleTask) -> int:
    """Write one shard's rows of the shuffle (ShuffleTask); returns how many."""
    work = WorkDir(task.root)
    keys = work.load_array(work.part("band", task.shard, "npy"), "band", mmap=True)
    members = np.asarray(work.load_array(Path(task.members), "candidates", mmap=True)[task.lo:task.hi])
    bands = keys.shape[1]
    keys = np.asarray(keys[members - task.start]).T.ravel()  # band by band, numbers ascending within a band
    rows = np.stack([np.repeat(np.arange(bands, dtype=np.int64), len(members)), keys.view(np.int64),
                     np.tile(members, bands)], axis=1)
    # band keys are hashes already: their residues spread evenly
    save_routed(work, rows, (keys % np.uint64(task.parts)).astype(np.int64), task.parts, Path(task.out))
    return len(rows)


@dataclasses.dataclass(frozen=True)
class BucketTask:
    """The candidate pairs of the buckets whose keys fall in one shuffle partition, every band; its part of the
    band index (rows (band, key bits, number) sorted by band, key, number) written to `out`."""

    root: str
    part: int
    shuffled: tuple  # each shard's routed rows (ShuffleTask.out), in shard order
    pairing: tuple  # as BandTask's
    max_bucket: int
    out: str

    def __post_init__(self):
        _absolute(self, "root", "out")
        _resolved(self, shuffled=tuple(os.path.join(os.getcwd(), p) for p in self.shuffled),
                  pairing=_absolute_files(self.pairing))


def bucket_candidates(task: BucketTask) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """band_candidates of the buckets of one shuffle partition: a bucket (a key of a band) is whole in its
    partition, so the partitions' pairs together are the bands' pairs. The rows of a band come shard after shard,
    numbers ascending, as band_index expects."""
    work = WorkDir(task.root)
    pairing = Pairing.read(work, dict(task.pairing))
    rank, label = pairing.dense_ranks(), pairing.dense_labels()
    rows = load_routed(work, task.shuffled, task.part, "candidates", 3)
    rows = rows[np.argsort(rows[:, 0], kind="stable")]
    cuts = np.flatnonzero(np.r_[True, rows[1:, 0] != rows[:-1, 0]]) if len(rows) else np.empty(0, np.int64)
    found = [np.empty((0, 2), np.int64), np.empty((0, 2), np.int64)]  # class pairs, star pairs
    counts = [np.empty(0, np.int64), np.empty(0, np.int64)]
    large, index = [np.empty((0, 4), np.int64)], [np.empty((0, 3), np.int64)]
    for lo, hi in zip(cuts.tolist(), np.r_[cuts[1:], len(rows)].tolist()):
        band = int(rows[lo, 0])
        sk, sn = lsh.band_index(rows[lo:hi, 1].view(np.uint64), rows[lo:hi, 2])
        *pairs, big = lsh.class_bucket_pairs(sk, sn, task.max_bucket, rank, label)
        for kind in (0, 1):  # merged band by band, as in band_candidates
            found[kind], counts[kind] = lsh.count_pairs(np.concatenate([found[kind], pairs[kind]]), np.concatenate(
                [counts[kind], np.ones(len(pairs[kind]), np.int64)]))
        index.append(np.stack([np.full(len(sk), band), sk.view(np.int64), sn], axis=1))
        large.append(np.concatenate([np.full((len(big), 1), band), big], axis=1).astype(np.int64))
    work.save_array(Path(task.out), np.concatenate(index))
    return found[0], counts[0], found[1], counts[1], np.concatenate(large)


@dataclasses.dataclass(frozen=True)
class IndexTask:
    """The band index files of a few bands (as BandTask writes them), merged from the partitions' parts."""

    root: str
    bands: tuple
    parts: tuple  # each partition's rows (band, key bits, number), sorted
    documents: int  # pairable documents: each band's length
    index: tuple

    def __post_init__(self):
        _resolved(self, root=os.path.join(os.getcwd(), self.root),
                  parts=tuple(os.path.join(os.getcwd(), p) for p in self.parts),
                  index=tuple(os.path.join(os.getcwd(), p) for p in self.index))


def merge_index(task: IndexTask) -> None:
    """Each band's keys sorted, with their documents: a key's documents are all in one partition, numbers
    ascending, so a stable sort of the partitions' rows by key gives band_index of the whole band."""
    work = WorkDir(task.root)
    keys = np.empty((len(task.bands), task.documents), np.uint64)
    docs = np.empty((len(task.bands), task.documents), np.int64)
    found = []
    for path in task.parts:
        rows = work.load_array(Path(path), "candidates", mmap=True)
        lo, hi = np.searchsorted(rows[:, 0], [task.bands[0], task.bands[-1] + 1]).tolist()
        found.append(np.asarray(rows[lo:hi]))
    rows = np.concatenate(found) if found else np.empty((0, 3), np.int64)
    rows = rows[np.lexsort((rows[:, 1].view(np.uint64), rows[:, 0]))]  # stable: numbers stay ascending in a key
    for j, band in enumerate(task.bands):
        lo, hi = np.searchsorted(rows[:, 0], [band, band + 1]).tolist()
        keys[j], docs[j] = rows[lo:hi, 1].view(np.uint64), rows[lo:hi, 2]
    _save_index(work, task.index, list(zip(keys, docs)))


def _save_index(work: WorkDir, paths: tuple, index: list[tuple[np.ndarray, np.ndarray]]) -> None:
    """A task's part of the band index, each band's (sorted keys, documents), to paths (keys, docs[, filter]): a
    base has its key filters (lsh.key_filter) too, a segment not (it is small)."""
    work.save_array(Path(paths[0]), np.stack([k for k, _ in index]))
    work.save_array(Path(paths[1]), lsh.stored_numbers(np.stack([d for _, d in index])))
    if len(paths) > 2:
        work.save_array(Path(paths[2]), np.stack([lsh.key_filter(k) for k, _ in index]))


def pairable(catalog: Catalog, params: CandidateParams) -> np.ndarray:
    """Which rows can pair: live, with at least one shingle (an empty set has no similarity) and at least
    --min-shingles and --min-size (too short to say anything by being alike: stubs, licence headers)."""
    least = max(params.min_shingles, 1)
    return catalog.live & _per_row(catalog, lambda shingles, size: (shingles >= least) & (size >= params.min_size))


def _pairable_since(catalog: Catalog, params: CandidateParams, last: Pairing | None) -> tuple[np.ndarray, int]:
    """(pairable, how many live rows have shingles and cannot pair). last: the Pairing of the last run over the
    same rows with the same limits (_previous_candidates): a row's shingles and size never change, so a row it
    found pairable still is while live, and only the rows it did not (too short, or dead then) and the new rows
    are tested: at 10M rows the two int64 columns are not read whole (~0.07 CPU s)."""
    least = max(params.min_shingles, 1)
    if last is None:
        mask = pairable(catalog, params)
        with_shingles = catalog.live & _per_row(catalog, lambda shingles, _: shingles > 0)
        return mask, int(with_shingles.sum()) - int(np.count_nonzero(mask))
    old, live = last.documents, catalog.live
    mask = live.copy()
    mask[:old] &= last.pairable_mask()
    rows = np.r_[np.flatnonzero(live[:old] & ~mask[:old]), np.arange(old, len(live))]  # the rows to test
    shingles, size = catalog.values_at("shingles", rows), catalog.values_at("size", rows)
    mask[rows] = live[rows] & (shingles >= least) & (size >= params.min_size)
    return mask, int((live[rows] & (shingles > 0) & ~mask[rows]).sum())


def _per_row(catalog: Catalog, test) -> np.ndarray:
    """test(shingles, size) of every row, segment by segment as the catalog stores them: joining the two columns
    first copied 160 MB at 10M rows."""
    shingles, size = catalog.parts("shingles"), catalog.parts("size")
    if len(shingles) != len(size):  # (one of them held whole)
        shingles, size = [catalog["shingles"]], [catalog["size"]]
    return np.concatenate([test(a, b) for a, b in zip(shingles, size)])


def pairing_order(catalog: Catalog, params: CandidateParams) -> np.ndarray:
    """Global numbers of the documents that can pair (pairable), sorted by id (UTF-8 bytes sort in code point
    order, as Python sorts str)."""
    mask = pairable(catalog, params)
    order = _by_id(catalog, mask)
    return np.flatnonzero(mask) if order is None else order


def _by_id(catalog: Catalog, mask: np.ndarray) -> np.ndarray | None:
    """The numbers of the rows of mask sorted by id; None if the numbers ascend by id already, as they most often
    do (a 10M index's incremental run made them in ~0.15 CPU s, for nothing: 80 MB of fresh pages)."""
    catalog.let_go()  # live, shingles and size read whole (24 bytes a document) out of the client's RSS
    if catalog.ids_ascending:  # (checked this run: no column of ids joined again)
        return None
    numbers = np.flatnonzero(mask)
    ids = catalog.id_bytes()
    ids = ids if len(numbers) == len(ids) else ids[numbers]  # (every row pairable: no copy of the column)
    if len(ids) > 1 and not (ids[1:] > ids[:-1]).all():  # appended shards: restore id order
        return numbers[np.argsort(ids, kind="stable")]
    return None


def _index_files(bands: int, segment: int = 0) -> list[tuple[int, str, str]]:
    """(first band, keys file, docs file) of each task's part of the band index: of its base (segment 0), or of
    a segment that an incremental run appended."""
    tail = f".s{segment:03d}" if segment else ""
    return [(lo, f"index-{lo:03d}{tail}.keys.npy", f"index-{lo:03d}{tail}.docs.npy")
            for lo in range(0, bands, BANDS_PER_TASK)]


def _filter_file(lo: int) -> str:
    """The key filters (lsh.key_filter) of a task's bands of the base; an index from before them has none."""
    return f"index-{lo:03d}.filter.npy"


def _base_filters(bands: int, segment: int, previous: CandidatesRecord | None) -> list[str]:
    """The key filter files of the band index a run leaves: all of a new base's (segment 0), else those the kept
    base has."""
    if not segment or previous is None:
        return [_filter_file(lo) for lo, _, _ in _index_files(bands)]
    return [name for task_runs in index_runs(previous, bands) for name in task_runs[0][2:]]


def index_segments(record: CandidatesRecord) -> int:
    """How many segments follow the base of a candidates record's band index."""
    return sum(name.startswith("index-000.s") and name.endswith(".keys.npy") for name in record.files)


def index_runs(record: CandidatesRecord, bands: int) -> list[list[tuple[str, ...]]]:
    """For each task's bands (_index_files), the (keys, docs) file names of the record's band index runs: its
    base (with its key filters, if it has them: (keys, docs, filter)), then each segment."""
    runs: list[list[tuple[str, ...]]] = [[] for _ in range(0, bands, BANDS_PER_TASK)]
    for s in range(index_segments(record) + 1):
        for i, (lo, k, d) in enumerate(_index_files(bands, s)):
            runs[i].append((k, d, _filter_file(lo)) if not s and _filter_file(lo) in record.files else (k, d))
    return runs


# An incremental run appends the new documents' band index as a segment instead of rewriting the whole index
# (14 bands x 16 bytes a document: 224 MB at 1M documents, for 1% new). The segments are merged into a new base,
# without the documents that left, once there would be more than SEGMENTS_MAX of them or once the entries outside
# the base (in segments, or of documents that left) would exceed 1 / COMPACT_SHARE of all: reading stays a few
# binary searches per run and band, and the disk held by the index stays within 4/3 of a compact one.
SEGMENTS_MAX = 16
COMPACT_SHARE = 4


def _next_segment(work: WorkDir, previous: CandidatesRecord, pairable_docs: int, bands: int, new: int) -> int:
    """The segment an incremental run appends (1 for the first after the base), or 0: compact into a new base.
    new: how many of the pairable documents are new (numbered after the last run's)."""
    old = index_segments(previous)
    entries = [work.load_array(work.output("candidates", _index_files(bands, s)[0][2], previous.key), "candidates",
                               mmap=True).shape[1] for s in range(old + 1)]
    total = sum(entries)
    kept = pairable_docs - new  # indexed documents still indexed
    outside = total - entries[0] + (total - kept) + new
    return 0 if old + 1 > SEGMENTS_MAX or COMPACT_SHARE * outside > total + new else old + 1


def _previous_candidates(work: WorkDir, basis: CandidatesBasis) -> CandidatesRecord | None:
    """The last candidates record if this run can update its band index and pairs instead of starting again:
    same signatures, bands and --max-bucket, and shards that are a prefix of today's (a global number still means
    the same document), its files intact."""
    record = work.manifest().candidates
    if record is None or record.basis is None or _up_to_date(work, CandidatesRecord, record.key) is None:
        return None
    old = record.basis
    if any(getattr(old, f) != getattr(basis, f) for f in ("signature", "bands", "max_bucket", "min_shingles",
                                                           "min_size")) or \
            old.shard_keys != basis.shard_keys[:len(old.shard_keys)]:
        return None
    return record


def run(runner: Runner, params: CandidateParams) -> CandidatesRecord:
    """Pairs of documents that share a bucket in at least one band. With the last run's band index (an index, or
    a work dir run again after a change), only the buckets that a new, changed or deleted document touches are
    looked at: the pairs of the others are the last run's."""
    work = runner.work
    upstream, key, record = _begin(runner, CandidatesRecord, BandRecord, params)
    shingle_record = require(work, ShingleRecord)
    if record is not None:
        runner.log(f"candidates: up to date ({plural(record.stats.candidates, 'pair')})")
        return record
    docs = load_docs(work, shingle_record)
    basis = CandidatesBasis(signature=require(work, SignatureRecord).params, bands=upstream.params,
                            max_bucket=params.max_bucket, min_shingles=params.min_shingles, min_size=params.min_size,
                            shard_keys=shingle_record.shard_keys, documents=int(sum(shingle_record.shard_docs)))
    previous = _previous_candidates(work, basis)
    last = Pairing.load(work, previous) if previous is not None else None
    mask, small = _pairable_since(docs.catalog, params, last)
    # (small: documents with shingles that cannot pair; those with none are counted as short)
    pairable_docs = int(np.count_nonzero(mask))
    order = _by_id(docs.catalog, mask)  # (None where the ids ascend: no array of every document made)
    docs.catalog.let_go()  # whole columns read: out of the client's RSS (10M rows: 320 MB) before copy_classes
    bands = upstream.params.bands
    new = int(np.count_nonzero(mask[last.documents:])) if last is not None else pairable_docs
    segment = _next_segment(work, previous, pairable_docs, bands, new) if previous is not None else 0
    old_digests = digest_runs(previous) if previous is not None else []
    copies, digest_run = copy_classes(work, shingle_record, mask, last, _load_runs(work, previous, old_digests)
                                      if previous is not None and old_digests else None)
    ascending = order is None
    pairing = Pairing(mask, copies, None if order is None else ranks(order, basis.documents))
    del order
    digests = _save_digest_index(work, key, previous, old_digests, digest_run, segment, pairing)
    del digest_run  # (at 10M documents a base is 160 MB of the client's)
    pairing_files = Pairing.files(work, key, ascending)
    pairing.save(work, pairing_files)
    heads = pairing.heads() if params.method != "lsh" else np.empty(0, np.int64)  # (the sets the join would pair)
    if params.method == "exact" or (params.method == "auto" and _join_may_pay(runner, docs.catalog, heads, bands)):
        join = _join_input(work, key, shingle_record, heads)
        method = params.method if params.method == "exact" else choose_method(runner, join, params, bands)
        if method == "exact":
            return _run_exact(runner, key, params, upstream.key, join, pairing.copies, small, pairing_files)
        join.remove()
    files = _index_files(bands, segment)  # what this run's tasks write
    changed = _changed_documents(work, key, mask, last) if last is not None else ()
    if previous is None and runner.engine.shuffle:
        results = _shuffled_candidates(runner, shingle_record, key, pairing, pairing_files, basis, params.max_bucket,
                                       files)
    else:
        results = _grouped_candidates(runner, shingle_record, key, pairing_files, basis, params, previous, files,
                                      segment, light=bool(segment) and new <= LIGHT_DOCUMENTS, changed=changed)
    stored = {}
    for kind, (pairs_file, counts_file) in enumerate((("pairs.npy", "counts.npy"), ("stars.npy", "star_counts.npy"))):
        pairs, counts = np.empty((0, 2), np.int64), np.empty(0, np.int64)
        found = [(result[2 * kind], result[2 * kind + 1]) for result in results]
        if previous is not None:
            found.append((work.load_array(work.output("candidates", pairs_file, previous.key), "candidates"),
                          work.load_array(work.output("candidates", counts_file, previous.key), "candidates")))
        for more, more_counts in found:  # one task's pairs at a time, as in band_candidates
            pairs, counts = lsh.count_pairs(np.concatenate([pairs, more]), np.concatenate([counts, more_counts]))
        if (counts < 0).any():
            raise WorkDirError(f"{work.root}: the stored candidate pairs do not match the band index; run again "
                               f"with --rebuild (an index) or --force")
        stored[pairs_file], stored[counts_file] = pairs[counts > 0], counts[counts > 0]
    pairs, stars = stored["pairs.npy"], stored["stars.npy"]
    large = sorted(({"band": int(j), "anchor": int(a), "size": int(n), "key": int(k)}
                    for *_, big in results for j, a, n, k in big.tolist()),
                   key=lambda b: (b["band"], b["key"] % 2**64))
    for name, array in stored.items():
        work.save_array(work.output("candidates", name, key), array)
    count = expanded_count(pairs, stars[uncovered(stars, pairs, pairing.label)], pairing.copies)
    work.save_jsonl(work.output("candidates", "large_buckets.jsonl", key), large)
    record = CandidatesRecord(
        key=key, params=params, upstream=upstream.key, basis=basis,
        files=_files(work, "candidates", key, *pairing_files, *stored, "large_buckets.jsonl", *digests,
                     *(name for s in range(segment + 1) for _, k, d in _index_files(bands, s) for name in (k, d)),
                     *_base_filters(bands, segment, previous)),
        stats=CandidatesStats(candidates=count, large_buckets=len(large), small=small,
                              method="lsh" if params.method == "auto" else None))
    work.record_stage("candidates", record)
    since = " (the last run's, updated where new, changed or deleted documents fall)" if previous else ""
    runner.log(f"candidates: {plural(count, 'pair shares', 'pairs share')} a bucket in at least one band{since}"
               + (f"; {plural(small, 'document')} under {_limits(params)} skipped (never paired)" if small else ""))
    _warn_large_buckets(runner, large, params.max_bucket, docs, work.output("candidates", "large_buckets.jsonl", key))
    return record


def _digest_files(segment: int) -> tuple[str, str]:
    """(keys file, docs file) of the digest index's base (segment 0) or of a segment."""
    tail = f".s{segment:03d}" if segment else ""
    return f"digests{tail}.keys.npy", f"digests{tail}.docs.npy"


DIGEST_FILTER = "digests.filter.npy"  # the key filter (lsh.key_filter) of the digest index's base


def digest_runs(record: CandidatesRecord) -> list[tuple[str, ...]]:
    """The (keys, docs) file names of a record's digest index: its base (with its key filter, if it has one),
    then each segment (none: a record from before it was kept)."""
    tails = sorted(name[len("digests"):-len(".keys.npy")] for name in record.files
                   if name.startswith("digests") and name.endswith(".keys.npy"))
    return [(*_digest_files(0), *((DIGEST_FILTER,) if DIGEST_FILTER in record.files else ())) if not tail
            else _digest_files(int(tail[2:])) for tail in tails]


def _link_kept(work: WorkDir, previous: CandidatesRecord, key: str, runs: Sequence[Sequence[tuple[str, ...]]]
               ) -> None:
    """The last run's files of runs of sorted keys (lists of (keys, docs) names) linked under this run's key."""
    for name in (name for task_runs in runs for run in task_runs for name in run):
        work.link(work.output("candidates", name, previous.key), work.output("candidates", name, key))


def _load_runs(work: WorkDir, record: CandidatesRecord, names: list[tuple[str, ...]]) -> list[lsh.Run]:
    """The runs (keys, docs[, filter]) of a record's files, mapped."""
    return [tuple(work.load_array(work.output("candidates", name, record.key), "candidates", mmap=True)
                  for name in run) for run in names]


def _save_digest_index(work: WorkDir, key: str, previous: CandidatesRecord | None, old: list[tuple[str, ...]],
                       run: lsh.Run, segment: int, pairing: Pairing) -> list[str]:
    """Keep the digest index (copies.copy_classes) as the band index is kept: the new documents' run (run)
    appended as segment `segment` to the last run's base and segments, linked under this key; or, at a compacting
    run (segment 0), all of them merged into a new base without the documents that left. A run without the last
    run's digest index (run: the base of every pairable document) writes it as a base. A base is written with its
    key filter (DIGEST_FILTER), which the runs of digest_runs then carry. Returns its file names."""
    if previous is not None and old and segment:
        _link_kept(work, previous, key, [old])
        runs: list[tuple[str, ...]] = [*old, _digest_files(segment)]
    else:
        if previous is not None and old:
            run = lsh.merge_runs([*_load_runs(work, previous, old), run], pairing.rank)
        runs = [(*_digest_files(0), DIGEST_FILTER)]
        run = (*run, lsh.key_filter(run[0]))
    for name, array in zip(runs[-1], (run[0], lsh.stored_numbers(run[1]), *run[2:])):
        work.save_array(work.output("candidates", name, key), array)
    return [name for files in runs for name in files]


def _changed_documents(work: WorkDir, key: str, pairable: np.ndarray, last: Pairing) -> tuple[str, str]:
    """The documents that died since the last run (pairable then, not now: deleted or changed) and the new ones
    (numbered after its documents), ascending, written for the band tasks (each would otherwise compare both
    runs' Pairings). Returns the (died, new) paths; they are not kept after the run."""
    old = last.documents
    paths = [work.output("candidates", name, key) for name in ("died.npy", "new.npy")]
    work.save_array(paths[0], np.flatnonzero(last.pairable_mask() & ~pairable[:old]))
    work.save_array(paths[1], old + np.flatnonzero(pairable[old:]))
    return str(paths[0]), str(paths[1])


def _grouped_candidates(runner: Runner, shingle_record: ShingleRecord, key: str, pairing: dict[str, str],
                        basis: CandidatesBasis, params: CandidateParams, previous: CandidatesRecord | None,
                        files: list[tuple[int, str, str]], segment: int = 0, light: bool = False,
                        changed: tuple[str, ...] = ()) -> list[tuple]:
    """The tasks' results (band_candidates) of a few bands each, updating the last run's index if any: its base
    and segments are linked under this run's key and the new documents' index written as segment `segment`, or
    (0) all of them compacted into a new base. light: the tasks are little work (engine.map)."""
    work, bands = runner.work, basis.bands.bands
    old_large = work.load_jsonl(work.output("candidates", "large_buckets.jsonl", previous.key), "candidates") \
        if previous is not None else []
    runs = index_runs(previous, bands) if previous is not None else [[] for _ in files]
    last = tuple(Pairing.stored_files(work, previous).items()) if previous is not None else ()
    if previous is not None and segment:  # kept as they are: the same files under this run's key
        _link_kept(work, previous, key, runs)
    tasks = [BandTask(str(work.root), tuple(range(lo, min(lo + BANDS_PER_TASK, bands))), tuple(pairing.items()),
                      tuple(shingle_record.shard_numbers), tuple(part_starts(shingle_record).tolist()),
                      params.max_bucket,
                      tuple(str(work.output("candidates", name, key))
                            for name in (k, d, *(() if segment else (_filter_file(lo),)))),
                      previous=last, changed=changed,
                      large_keys=tuple(tuple(b["key"] for b in old_large if b["band"] == j)
                                       for j in range(lo, min(lo + BANDS_PER_TASK, bands))) if previous else (),
                      runs=tuple(tuple(str(work.output("candidates", name, previous.key)) for name in run)
                                 for run in runs[i]) if previous is not None else (),
                      compact=previous is not None and not segment)
             for i, (lo, k, d) in enumerate(files)]
    return runner.engine.map(band_candidates, tasks, desc="candidates", sizes=[len(t.bands) for t in tasks],
                             unit="band", light=light)


def _shuffled_candidates(runner: Runner, shingle_record: ShingleRecord, key: str, pairing: Pairing,
                         pairing_files: dict[str, str], basis: CandidatesBasis, max_bucket: int,
                         files: list[tuple[int, str, str]]) -> list[tuple]:
    """The same results from a shuffle through the work dir: each shard's band keys cut by a hash of the key
    into partitions (shuffle_shard), each partition's buckets paired in every band (bucket_candidates), then the
    band index files merged from the partitions' parts (merge_index). Each band is spread over all partitions,
    so no worker holds a whole band; the shuffle's files are removed once the index is written."""
    work, bands = runner.work, basis.bands.bands
    members = pairing.members()
    pairable_docs = len(members)
    parts = max(2, min(64, -(-pairable_docs * bands // SHUFFLE_ENTRIES)))
    shards, starts = list(shingle_record.shard_numbers), part_starts(shingle_record)
    members_path = work.output("candidates", "members.npy", key)
    work.save_array(members_path, members)
    cuts = np.asarray(np.searchsorted(members, np.r_[starts, basis.documents])).tolist()
    del members
    shuffled = [work.output("candidates", f"shuffle-{n:05d}.npy", key) for n in shards]
    runner.engine.map(shuffle_shard, [ShuffleTask(str(work.root), n, start, str(members_path), lo, hi, parts,
                                                  str(out))
                                      for n, start, lo, hi, out in zip(shards, starts.tolist(), cuts[:-1], cuts[1:],
                                                                       shuffled)],
                      desc="shuffle", sizes=list(shingle_record.shard_docs), unit="doc")
    members_path.unlink()
    buckets = [work.output("candidates", f"buckets-{p:04d}.npy", key) for p in range(parts)]
    results = runner.engine.map(bucket_candidates, [
        BucketTask(str(work.root), p, tuple(map(str, shuffled)), tuple(pairing_files.items()), max_bucket,
                   str(buckets[p])) for p in range(parts)],
        desc="candidates", unit="part")
    runner.engine.map(merge_index, [
        IndexTask(str(work.root), tuple(range(lo, min(lo + BANDS_PER_TASK, bands))), tuple(map(str, buckets)),
                  pairable_docs, tuple(str(work.output("candidates", name, key)) for name in (k, d, _filter_file(lo))))
        for lo, k, d in files], desc="band index", sizes=[min(BANDS_PER_TASK, bands - lo) for lo, _, _ in files],
        unit="band")
    for path in [*shuffled, *map(routed_bounds, shuffled), *buckets]:
        path.unlink(missing_ok=True)
    return results


def _limits(params: CandidateParams) -> str:
    """The size filters in force, as options: '--min-shingles 20 or --min-size 100'."""
    return " or ".join(f"--{name.replace('_', '-')} {value}" for name, value in
                       (("min_shingles", params.min_shingles), ("min_size", params.min_size)) if value)


def _warn_large_buckets(runner: Runner, large: list[dict], max_bucket: int, docs, listed: Path) -> None:
    """One warning per anchor (one cause, such as a boilerplate page copied 10,000 times, makes a large bucket in
    nearly every band), largest first, at most 10."""
    by_anchor: dict[int, list[dict]] = {}
    for bucket in large:
        by_anchor.setdefault(bucket["anchor"], []).append(bucket)
    causes = sorted(by_anchor.items(), key=lambda kv: (-max(b["size"] for b in kv[1]), docs[kv[0]]["id"]))
    for anchor, buckets in causes[:10]:
        runner.log(f"warning: {plural(len(buckets), 'bucket')} over --max-bucket {max_bucket} in "
                   f"{plural(len({b['band'] for b in buckets}), 'band')} (largest {max(b['size'] for b in buckets)} "
                   f"documents) paired with their anchor {docs[anchor]['id']} only; see {listed}")
    if len(causes) > 10:
        rest = sum(len(buckets) for _, buckets in causes[10:])
        runner.log(f"warning: {plural(rest, 'more large bucket')} with {plural(len(causes) - 10, 'other anchor')}; "
                   f"see {listed}")


# ------------------------------------------------------------------------------------------ the exact join

JOIN_TASKS = 8  # the join is split into at most this many tasks (probe ranges), from the sets alone, never --jobs
MIN_JOIN_VALUES = 200_000  # shingles probed by a task, at least (a task re-reads and indexes the sets before it)
JOIN_MEMORY = 1 << 28  # bytes of records and verification a join task holds at once (allpairs.join_part)


@dataclasses.dataclass(frozen=True)
class JoinInput:
    """The sets the join runs over, saved for its tasks: one per copy class that can pair (its label), ordered by
    (size, number), values in the join's global order (allpairs.frequency_order)."""

    docs: np.ndarray  # the global number of each set
    offsets: np.ndarray
    paths: tuple[Path, Path]  # the .npy of the ordered values and of the offsets

    def remove(self) -> None:
        for path in self.paths:
            path.unlink(missing_ok=True)


@dataclasses.dataclass(frozen=True)
class JoinTask:
    """The pairs that the sets [lo, hi) find as probes (allpairs.join_part)."""

    root: str
    values: str
    offsets: str
    threshold: float
    lo: int
    hi: int
    metric: str = "jaccard"

    def __post_init__(self):
        _absolute(self, "root", "values", "offsets")


def join_pairs(task: JoinTask) -> np.ndarray:
    """A join task: its pairs (int64 (m, 2), numbers of the JoinInput's sets)."""
    work = WorkDir(task.root)
    values = work.load_array(Path(task.values), "candidates", mmap=True)
    offsets = work.load_array(Path(task.offsets), "candidates")
    return allpairs.join_part(values, offsets, task.threshold, task.metric, task.lo, task.hi, JOIN_MEMORY).pairs


def _join_input(work: WorkDir, key: str, shingle_record: ShingleRecord, labels: np.ndarray) -> JoinInput:
    """Gather the sets of the classes that can pair (labels, ascending: a class's copies have its set, and the
    class pair (A, A) stands for them), order them for the join and save them."""
    shingles = PartitionArrays(work, "shingle", ("values.npy", "offsets.npy"), shingle_record.shard_numbers)
    values, lengths = sets.gather_sets(shingles, part_starts(shingle_record), labels)
    by = np.argsort(lengths, kind="stable")
    values = values[sets.ranges((np.cumsum(lengths) - lengths)[by], lengths[by])]
    offsets = np.r_[0, np.cumsum(lengths[by])].astype(np.int64)
    paths = (work.output("candidates", "join.values.npy", key), work.output("candidates", "join.offsets.npy", key))
    work.save_array(paths[0], allpairs.frequency_order(values, offsets))
    work.save_array(paths[1], offsets)
    return JoinInput(labels[by], offsets, paths)


# --method auto: exact when the join costs less than LSH's own work on the same sets. Both read the stored
# shingle sets and signatures (copy classes, verification's estimate column), so what differs is the join (its
# sets' values ordered by frequency, then its records, allpairs.join_cost) against the band index, b sorted keys
# per document, and the candidates' verification. The costs are in band entries. AUTO_VALUE_COST, measured on
# bench's edited corpus at t = 0.5 (bench/joins.py, 2026-11-24): candidates + verify took 8.8 CPU s for the join
# of 12.4M values (148,003 records) and 0.24 s for LSH's 640,000 band entries, about 2 entries a value.
# AUTO_RECORD_COST: a record is gathered, sorted by pair and filtered (an estimate; records were too few there to
# measure it). So exact pays on short sets (titles, lines), where b keys a document cost more than its values.
AUTO_VALUE_COST = 2
AUTO_RECORD_COST = 4


def _join_may_pay(runner: Runner, catalog, labels: np.ndarray, bands: int) -> bool:
    """--method auto, before the join's sets are gathered and ordered (labels: of the classes that can pair):
    False (and lsh, said on stderr) when ordering their values alone costs more than LSH's band entries."""
    values, entries = int(catalog["shingles"][labels].sum()), bands * len(labels)
    if values * AUTO_VALUE_COST <= entries:
        return True
    runner.log(f"candidates: --method auto chose lsh: the exact join orders {plural(values, 'value')} "
               f"(x{AUTO_VALUE_COST}), LSH sorts {plural(entries, 'band entry', 'band entries')}")
    return False


def choose_method(runner: Runner, join: JoinInput, params: CandidateParams, bands: int) -> str:
    """--method auto: "exact" when the join's values and records, weighted by AUTO_VALUE_COST and
    AUTO_RECORD_COST, are at most LSH's band entries (b per set), else "lsh"; said on stderr with the figures."""
    values = runner.work.load_array(join.paths[0], "candidates", mmap=True)
    assert params.threshold is not None  # config.resolve sets it for exact and auto
    records = allpairs.join_cost(values, join.offsets, params.threshold, in_order=True) if len(join.docs) else 0
    entries = bands * len(join.docs)
    method = "exact" if len(values) * AUTO_VALUE_COST + records * AUTO_RECORD_COST <= entries else "lsh"
    runner.log(f"candidates: --method auto chose {method}: the exact join orders {plural(len(values), 'value')} "
               f"(x{AUTO_VALUE_COST}) and makes {plural(records, 'record')} (x{AUTO_RECORD_COST}), LSH sorts "
               f"{plural(entries, 'band entry', 'band entries')}")
    return method


def join_ranges(offsets: np.ndarray) -> list[tuple[int, int]]:
    """The probe ranges of the join's tasks: consecutive sets with about equal shingles, at most JOIN_TASKS, each
    of MIN_JOIN_VALUES or more (one task for fewer)."""
    n, total = len(offsets) - 1, int(offsets[-1])
    parts = max(1, min(JOIN_TASKS, total // MIN_JOIN_VALUES, n))
    cuts = np.searchsorted(offsets, np.arange(1, parts) * (total / parts), "left")
    bounds = sets.sorted_unique(np.r_[0, cuts, n].astype(np.int64))
    return list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))


def _run_exact(runner: Runner, key: str, params: CandidateParams, upstream: str, join: JoinInput, copies: Copies,
               small: int, pairing_files: dict[str, str]) -> CandidatesRecord:
    """The candidates of --method exact: the class pairs of every two classes whose sets have Jaccard >= the
    threshold (--metric containment: one of them contained in the other, |A ∩ B| / |A| >= t, in either
    direction), and (A, A) for each class of copies. No band index is made (so `query` on an index built so sorts
    the band keys itself) and no bucket is too large."""
    work = runner.work
    assert params.threshold is not None
    tasks = [JoinTask(str(work.root), str(join.paths[0]), str(join.paths[1]), params.threshold, lo, hi,
                      params.metric) for lo, hi in join_ranges(join.offsets)]
    results = runner.engine.map(join_pairs, tasks, desc="join", sizes=[t.hi - t.lo for t in tasks], unit="doc")
    found = join.docs[np.concatenate([np.empty((0, 2), np.int64), *results])]
    several = join.docs[copies.sizes(join.docs) > 1]
    # a pair each way once (containment finds a -> b and b -> a when each holds most of the other)
    pairs = lsh.unique_pairs(np.concatenate([np.sort(found, axis=1), np.stack([several, several], axis=1)]))
    join.remove()
    work.save_array(work.output("candidates", "pairs.npy", key), pairs)
    work.save_array(work.output("candidates", "stars.npy", key), np.empty((0, 2), np.int64))
    work.save_jsonl(work.output("candidates", "large_buckets.jsonl", key), [])
    count = expanded_count(pairs, np.empty((0, 2), np.int64), copies)
    record = CandidatesRecord(
        key=key, params=params, upstream=upstream,
        files=_files(work, "candidates", key, *pairing_files, "pairs.npy", "stars.npy", "large_buckets.jsonl"),
        stats=CandidatesStats(candidates=count, large_buckets=0, small=small, method="exact"))
    work.record_stage("candidates", record)
    skipped = f"; {plural(small, 'document')} under {_limits(params)} skipped (never paired)" if small else ""
    runner.log(f"candidates: {plural(count, 'pair has', 'pairs have')} {_metric(params.metric)} >= "
               f"{params.threshold} by the exact join{skipped}")
    return record


def _metric(metric: str) -> str:
    """How messages name the similarity of --metric."""
    return "Jaccard" if metric == "jaccard" else "containment"
