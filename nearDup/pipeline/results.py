"""What the stored stages hold, read back for the report: verified pairs, the parameters they were made with, and
the recall warning when the bands were chosen for a higher threshold than verify's.
"""
from __future__ import annotations

from collections.abc import Callable

from ..config import threshold_or_default
from ..kernels import lsh
from ..store.manifest import STAGES, ShingleRecord, VerifyRecord
from ..store.workdir import WorkDir
from .copies import stored_records
from .driver import require


class StoredPairs:
    """The verified pairs of a work dir (keep: those a filter keeps), read from their JSONL as they are printed:
    thousands of copies of one text have millions of pairs, too many to hold as records."""

    def __init__(self, work: WorkDir, keep: Callable[[dict], bool] | None = None):
        record = require(work, VerifyRecord)
        self.work, self.path, self.keep = work, work.current("verify", "pairs.jsonl"), keep
        self._count = None if keep else record.stats.pairs

    def __iter__(self):
        for pair in stored_records(self.work):  # what pairs.jsonl holds, without parsing it
            if self.keep is None or self.keep(pair):
                yield pair

    def __len__(self) -> int:
        if self._count is None:
            self._count = sum(1 for _ in self)
        return self._count

    def __bool__(self) -> bool:
        return len(self) > 0


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
        params = record.to_json()["params"]
        if isinstance(record, ShingleRecord):
            params.update({k: v for k, v in record.to_json()["source"].items() if k in HEADER_SOURCE})
        elif name == "signature":
            params["minhash"] = params.pop("method")
        elif name == "band":
            params.pop("threshold", None)  # what (b, r) were chosen for; the results' threshold is verify's
        out.update(sorted(params.items()))  # (a record read back from the manifest has its keys sorted)
    return out
