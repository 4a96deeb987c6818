"""What the stored stages hold, read back for the report: verified pairs, the parameters they were made with, the
recall warning when the bands were chosen for a higher threshold than verify's, and the estimated recall.
"""
from __future__ import annotations

import functools

import numpy as np

from ..config import threshold_or_default
from ..kernels import lsh, recall, sets
from ..store.manifest import STAGES, BandRecord, RecallStats, ShingleRecord, VerifyRecord, VerifyStats
from ..store.workdir import WorkDir
from ..wording import plural
from .copies import ClassPairs, Listing
from .driver import require


class StoredPairs:
    """The verified pairs of a work dir (involving: only those with an end among these ids, for --new-only), made
    from the stored arrays as they are printed: thousands of copies of one text have millions of pairs, too many to
    hold as records."""

    def __init__(self, work: WorkDir, involving: set[str] | None = None):
        self.record = record = require(work, VerifyRecord)
        self.work, self.path, self.involving = work, work.current("verify", "pairs.jsonl"), involving
        self._count = None if involving is not None else record.stats.pairs

    # read once for the count, the print and the summary; the Listing that this run's verify made, if it did
    @functools.cached_property
    def _columns(self) -> Listing:
        return Listing.stored(self.work, self.involving)

    @property
    def _entries(self) -> ClassPairs:
        return self._columns.entries

    def __iter__(self):
        return self._columns.records()  # what pairs.jsonl holds, without parsing it

    def listing(self) -> Listing:
        """The pairs as columns (copies.Listing), to print without a record per pair."""
        return self._columns

    def __len__(self) -> int:
        if self._count is None:
            self._count = sum(len(a) for a, _, _ in self._columns.chunks())
        return self._count

    def __bool__(self) -> bool:
        return len(self) > 0

    def documents(self) -> int:
        """How many documents the pairs involve. Unfiltered: the members of the verified entries that stand for a
        pair, counted from the stored arrays (every member of such an entry's lists is in one of its pairs);
        making the 330,000 records of 110,000 pairs twice to count them cost ~0.6 CPU s. Filtered: the ends of
        the pairs kept, from the listing's chunks."""
        if self.involving is not None:
            seen = np.zeros(len(self._columns.names), bool)
            for a, b, _ in self._columns.chunks():
                seen[a] = seen[b] = True
            return int(seen.sum())
        entries = self._entries
        lists, _, _ = entries.occurrences(entries.count() > 0)
        return len(sets.sorted_unique(entries.members[entries.spread(sets.sorted_unique(lists))]))


def verified_pairs(work: WorkDir) -> list[dict]:
    require(work, VerifyRecord)
    return work.load_jsonl(work.current("verify", "pairs.jsonl"), "verify")


def recall_warning(work: WorkDir, threshold: float) -> str | None:
    """What is lost below the threshold the bands were chosen for: a pair of Jaccard t becomes a candidate only
    with probability P(t) = 1 - (1 - t^r)^b (None when threshold is not below it, or b and r were given)."""
    record = work.manifest().band
    chosen = record.params.threshold if record else None
    if record is None or chosen is None or threshold >= chosen:
        return None
    b, r = record.params.bands, record.params.rows
    return (f"bands were chosen for threshold {chosen} (b={b}, r={r}): a pair at Jaccard {threshold} is a candidate "
            f"with probability {float(lsh.s_curve(threshold, b, r)):.3g}; re-band with `neardup -w {work.root} band "
            f"--threshold {threshold} candidates verify` (or `run ... --threshold {threshold}`)")


def estimated_recall(work: WorkDir, jaccard: np.ndarray, weights: np.ndarray, threshold: float) -> RecallStats:
    """The recall of LSH with the stored bands at J >= threshold, estimated from the verified entries' exact
    Jaccard and the pairs each stands for (kernels.recall.estimate_recall; an entry of two classes of copies is
    found whole or not at all)."""
    band = require(work, BandRecord).params
    est = recall.estimate_recall(jaccard, band.bands, band.rows, threshold, weights=weights)
    return RecallStats(missed=est.missed, missed_low=est.missed_low, missed_high=est.missed_high, recall=est.recall,
                       recall_low=est.recall_low, recall_high=est.recall_high, confidence=est.confidence)


# --method exact (and containment, which has no other method): every pair at >= t was a candidate
EXACT_RECALL = RecallStats(missed=0.0, missed_low=0.0, missed_high=0.0, recall=1.0, recall_low=1.0, recall_high=1.0,
                           confidence=1.0)


def recall_line(work: WorkDir, stats: VerifyStats, threshold: float) -> str | None:
    """The estimated recall in words (None for a record made before it was estimated). Buckets over --max-bucket
    give star pairs only, which the S-curve does not know: then the estimate is an upper bound."""
    r = stats.recall
    if r is None:
        return None
    candidates = work.manifest().candidates
    if candidates is not None and candidates.stats.method == "exact":
        return f"recall 1: the exact join made every pair at >= {threshold} a candidate (--method exact)"
    large = (candidates.stats.large_buckets or 0) if candidates else 0
    caveat = (f" (an upper bound: {plural(large, 'bucket')} over --max-bucket gave only star pairs, which the "
              f"estimate does not know)") if large else ""
    level = f"{r.confidence:.0%}"
    if r.recall is None or r.recall_low is None or r.recall_high is None:
        high = int(r.missed_high)
        return (f"estimated recall unknown: no pair at J >= {threshold} was found, so none stands for the misses; at "
                f"most {plural(high, 'pair was', 'pairs were')} missed ({level}){caveat}")
    missed = round(r.missed)
    return (f"estimated recall {r.recall:.3f} ({r.recall_low:.3f}-{r.recall_high:.3f}, {level}): about "
            f"{plural(missed, 'pair', 'pairs')} at J >= {threshold} {'was' if missed == 1 else 'were'} not "
            f"{'a candidate' if missed == 1 else 'candidates'}{caveat}")


def inherited_threshold(work: WorkDir, given: float | None) -> float:
    """--threshold for verify: as given, else the threshold the band stage was chosen for, else the default."""
    record = work.manifest().band if given is None else None
    return threshold_or_default(given, record.params.threshold if record else None)


HEADER_SOURCE = ("jsonl", "parquet", "id_field", "text_field", "strict", "include", "exclude", "hidden", "follow_links")


def resolved_params(work: WorkDir, upto: str | None) -> dict:
    """Every parameter the stored results up to stage `upto` were made with, from the stage records (what a
    JSONL header records): shingle and source options, num_perm, seed, minhash, bands, rows, max_bucket, the
    verify threshold, and the cluster rules. Where and how the work was done (jobs, partitions) is left out."""
    records = work.manifest().stages
    out: dict = {}
    for name in STAGES[:STAGES.index(upto) + 1] if upto in STAGES else ():
        record = records.get(name)
        if record is None:
            continue
        params = record.json_field("params")
        if isinstance(record, ShingleRecord):
            params.update({k: v for k, v in record.json_field("source").items() if k in HEADER_SOURCE})
        elif name == "signature":
            params["minhash"] = params.pop("method")
        elif name == "band":
            params.pop("threshold", None)  # what (b, r) were chosen for; the results' threshold is verify's
        out.update(sorted(params.items()))  # (a record read back from the manifest has its keys sorted)
    return out
