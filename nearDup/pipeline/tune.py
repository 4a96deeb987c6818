"""What other choices of bands and rows would cost and find on a corpus already signed (`neardup -w DIR tune`):
the candidate pairs each makes, counted on the stored signatures, and its recall at the threshold, estimated from
the pairs the run verified (kernels.recall.recall_under).

A choice's cost is its candidates, since each is verified exactly; the S-curve's false-positive area gives it only
for similarities spread evenly below t, and a real corpus is not (most pairs are far below t, a few templates or
boilerplate near it). So the pairs are counted, band by band, on the signatures themselves: exactly the pairs the
candidates stage would report with that choice and no bucket over --max-bucket.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import WorkDirError
from ..kernels import lsh, recall, sets
from ..store.manifest import BandRecord, CandidatesRecord, ShingleRecord, VerifyRecord
from ..store.workdir import WorkDir
from .copies import Pairing, verified_entries
from .driver import PartitionArrays, part_starts, require

# pairs sharing a bucket, summed over the bands, up to which the distinct pairs are listed and counted; above it
# the sum is given as an upper bound (listing them would take more memory than the run itself)
DISTINCT_CAP = 20_000_000


@dataclasses.dataclass(frozen=True)
class ChoiceCost:
    """candidates: document pairs sharing a bucket in at least one band (distinct), or, when distinct is False,
    the pairs of every band summed (a pair in several bands counted in each: an upper bound); recall: the estimated
    recall at J >= t on this corpus (None without verified pairs at J >= t, or for containment)."""
    bands: int
    rows: int
    candidates: int
    distinct: bool
    recall: float | None


class SignedCorpus:
    """The stored signatures of the documents the candidates stage could pair, one row per class of copies (equal
    shingle sets have equal signatures, and a class's pairs are candidates together), with the documents each
    stands for; and the verified pairs' exact Jaccard and weights, with the (b, r) that found them."""

    def __init__(self, work: WorkDir):
        candidates = require(work, CandidatesRecord)
        shingle_record = require(work, ShingleRecord)
        pairing = Pairing.load(work, candidates)
        heads = pairing.heads()  # a class's label is its smallest number
        self.weights = pairing.copies.sizes(heads)
        self.signatures = sets.gather_rows(PartitionArrays(work, "signature", ("npy",), shingle_record.shard_numbers),
                                           part_starts(shingle_record), heads)
        self.within = int((self.weights * (self.weights - 1) // 2).sum())  # copies: candidates with any choice
        self.jaccard: np.ndarray | None = None
        self.pair_weights = np.empty(0, np.int64)
        self.found_with: tuple[int, int] | None = None
        verify = work.manifest().verify
        if verify is not None and verify.params.metric != "containment":
            try:
                require(work, VerifyRecord)
            except WorkDirError:  # a stale verify says nothing about today's signatures
                return
            self.jaccard = work.load_array(work.current("verify", "scores.npy"), "verify")[:, 0]
            self.pair_weights = verified_entries(work).count()
            exact = candidates.stats.method == "exact"
            band = require(work, BandRecord).params
            self.found_with = None if exact else (band.bands, band.rows)

    def cost(self, bands: int, rows: int, threshold: float) -> ChoiceCost:
        keys = lsh.band_keys(self.signatures, bands, rows)
        per_band = sum(lsh.bucket_pair_count(keys[:, j], self.weights) for j in range(bands))
        bound = per_band - (bands - 1) * self.within  # a class's own pairs share every band: count them once
        distinct = bound <= DISTINCT_CAP
        count = bound
        if distinct:
            n = len(self.signatures)
            heads = np.arange(n, dtype=np.int64)
            found = [lsh.bucket_pairs(*lsh.band_index(np.ascontiguousarray(keys[:, j]), heads), max(n, 2))[0]
                     for j in range(bands)]
            pairs = lsh.unique_pairs(np.concatenate(found)) if found else np.empty((0, 2), np.int64)
            count = int((self.weights[pairs[:, 0]] * self.weights[pairs[:, 1]]).sum()) + self.within
        estimate = None
        if self.jaccard is not None:
            estimate = recall.recall_under(self.jaccard, self.pair_weights, self.found_with, bands, rows, threshold)
        return ChoiceCost(bands, rows, count, distinct, estimate)
