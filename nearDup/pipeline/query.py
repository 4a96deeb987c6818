"""query: near-duplicates in an index of new documents, found as a run finds them, without changing the index."""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..config import (
    CandidateParams,
)
from ..errors import InputError, ParameterError
from ..kernels import lsh, sets
from ..store.manifest import BandRecord, CandidatesRecord, ShingleRecord, SignatureRecord
from ..store.workdir import WorkDir
from ..text.inputs import list_items
from ..text.read import Document, missing_extras_note, read_documents, stdin_document
from ..text.shingles import shingle_documents
from .candidates import _limits, index_runs, pairing_order
from .copies import Pairing
from .driver import PartitionArrays, _up_to_date, part_starts, require
from .results import inherited_threshold, recall_warning
from .shingle import load_catalog
from .signature import signatures
from .similarity import agreement, jaccard, one_shard, pair_records, set_overlap


def _candidate_params(work: WorkDir) -> CandidateParams:
    """What the candidates stage paired with (the defaults if it has not run)."""
    record = work.manifest().candidates
    return record.params if record is not None else CandidateParams()


def _band_index(work: WorkDir, shingle_record: ShingleRecord, band_record: BandRecord):
    """Each band's band index of the documents that can pair, as a list of runs (sorted keys, documents), and
    which documents are indexed (bool by global number; None: all those in the runs): the candidates stage's
    band index, its base and segments (candidates.update_band), when it is current, else sorted here."""
    record = work.manifest().candidates
    if record is not None and record.upstream == band_record.key and record.stats.method != "exact" and \
            _up_to_date(work, CandidatesRecord, record.key) is not None:
        indexed = None
        if record.basis is not None:  # documents that left stay in the runs
            indexed = Pairing.load(work, record).pairable_mask()
        for task_runs in index_runs(record, band_record.params.bands):
            loaded = [tuple(work.load_array(work.output("candidates", name, record.key), "candidates", mmap=True)
                            for name in run) for run in task_runs]
            for j in range(len(loaded[0][0])):
                yield [(keys[j], docs[j]) for keys, docs, *_ in loaded], indexed
        return
    members = np.sort(pairing_order(load_catalog(work, shingle_record), _candidate_params(work)))
    keys = np.concatenate([work.load_array(work.part("band", n, "npy"), "band", mmap=True)[:]
                           for n in shingle_record.shard_numbers])[members]
    for j in range(band_record.params.bands):
        yield [lsh.band_index(np.ascontiguousarray(keys[:, j]), members)], None


def run(work: WorkDir, paths: list[str], stdin, threshold: float | None) -> tuple[list[dict], dict]:
    """Near-duplicates in the index of the given documents (paths, or one text on stdin for "-"), with exact
    Jaccard >= threshold, found like a run finds them (same shingles, signatures and bands); the index is only
    read. Returns (pairs with a = the query document, problems)."""
    band_record = require(work, BandRecord)
    shingle_record = require(work, ShingleRecord)
    verify_record = work.manifest().verify
    if verify_record is not None and verify_record.params.metric != "jaccard":
        raise ParameterError(f"{work.root}: query finds near-duplicates by Jaccard, and this index was built with "
                             f"--metric {verify_record.params.metric}; run it with the new documents instead")
    source, params = shingle_record.source, shingle_record.params
    signature_params = require(work, SignatureRecord).params
    bands, rows = band_record.params.bands, band_record.params.rows
    threshold = inherited_threshold(work, threshold)
    problems: dict = {}
    if (warning := recall_warning(work, threshold)) is not None:
        problems["messages"] = [warning]
    if list(paths) in ([], ["-"]):
        doc = stdin_document(stdin)
        if doc is None:
            raise InputError("-: standard input is binary, not text")
        documents: Iterable[Document] = [doc]
    else:
        items = list_items(list(paths), source, skip=(str(work.root),)).items
        documents = (doc for _, doc in read_documents(items, source, problems))
    records, values, offsets = shingle_documents(((doc, {}) for doc in documents), params, problems)
    # a run only counts binary files; a query names its few inputs (count_binary kept their ids)
    problems.setdefault("messages", []).extend(f"{i}: binary file skipped" for i in problems.get("binary_ids", ()))
    if (note := missing_extras_note(problems)) is not None:
        problems["messages"].append(note)
    problems["queried"] = len(records)
    if not records:
        return [], problems
    query_signatures = signatures(values, offsets, signature_params)
    keys = lsh.band_keys(query_signatures, bands, rows)
    catalog = load_catalog(work, shingle_record)
    found, starts = [], part_starts(shingle_record)
    for j, (runs, indexed) in enumerate(_band_index(work, shingle_record, band_record)):
        for sorted_keys, numbers in runs:
            lo, hi = (np.searchsorted(sorted_keys, keys[:, j], side) for side in ("left", "right"))
            pairs = np.stack([np.repeat(np.arange(len(records)), hi - lo), numbers[sets.ranges(lo, hi - lo)]], axis=1)
            found.append(pairs if indexed is None else pairs[indexed[pairs[:, 1]]])
    pairs = lsh.unique_pairs(np.concatenate(found))
    limits = _candidate_params(work)
    small = [i for i, r in enumerate(records) if r["shingles"] < limits.min_shingles or r["size"] < limits.min_size]
    for i in small:
        problems.setdefault("messages", []).append(
            f"{records[i]['id']}: under the index's {_limits(limits) or 'one shingle'}; not paired")
    pairs = pairs[~np.isin(pairs[:, 0], small)].reshape(-1, 2)
    ids = catalog.ids_of(sets.sorted_unique(pairs[:, 1]).tolist())  # of ~100,000, the few found: not the whole column
    pairs = pairs[[records[a]["id"] != ids[b] for a, b in pairs.tolist()]].reshape(-1, 2)
    shards = shingle_record.shard_numbers
    inter, la, lb = set_overlap(*one_shard((values, offsets)), pairs[:, 0], pairs[:, 1],
                                other=(PartitionArrays(work, "shingle", ("values.npy", "offsets.npy"), shards), starts))
    estimate = agreement(*one_shard(query_signatures), pairs[:, 0], pairs[:, 1],
                         other=(PartitionArrays(work, "signature", ("npy",), shards), starts))
    similarity = jaccard(inter, la, lb)
    keep = np.flatnonzero(similarity >= threshold)
    out = list(pair_records([records[a]["id"] for a in pairs[keep, 0].tolist()],
                            [ids[b] for b in pairs[keep, 1].tolist()], np.stack([similarity, estimate], axis=1)[keep],
                            np.stack([inter, la + lb - inter], axis=1)[keep]))
    out.sort(key=lambda r: (-r["jaccard"], r["a"], r["b"]))
    return out, problems
