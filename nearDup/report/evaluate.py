"""A run scored against a truth (`neardup eval`, nearDup.evaluate): pair precision, recall and F1, and the adjusted
Rand index of the groups, at the run's threshold and at higher ones.

The run: a work dir, or pairs saved from one (`--format jsonl` output, or a work dir's verify/KEY.pairs.jsonl).
The curve goes up from the run's threshold only: pairs below it were never kept, so nothing can be said there.
The groups scored are the connected components of the pairs at each threshold (what --link connected makes).

The truth: labelled pairs (a, b, label 1/0 or true/false), which judge only the pairs they list; cluster labels
(id, cluster), under which two documents are a true pair exactly when they share a cluster; or "exact", every pair
of the work dir's documents with exact Jaccard >= t (kernels/allpairs.jaccard_join over the stored shingle sets,
over the documents the candidates stage could pair), next to the recall that kernels/recall.estimate_recall
estimates from the run's own pairs.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import os
from collections.abc import Callable, Iterable

import numpy as np

from ..errors import InputError, ParameterError
from ..kernels import allpairs, evaluation, lsh, sets
from ..kernels.components import components
from ..kernels.recall import estimate_recall
from ..pipeline.candidates import pairable
from ..pipeline.driver import PartitionArrays, part_starts, require
from ..pipeline.results import StoredPairs
from ..pipeline.shingle import load_catalog
from ..store.manifest import CandidatesRecord, ShingleRecord, VerifyRecord
from ..store.workdir import WorkDir
from ..wording import plural
from .pairs import read_pairs

EXACT = "exact"
_LABELS = {"1": True, "0": False, "true": True, "false": False}
_STEP = 0.05


@dataclasses.dataclass(frozen=True)
class Truth:
    """What a truth file holds: labelled pairs, or cluster labels (one of the two is None)."""
    path: str
    pairs: list[tuple[str, str, bool]] | None = None
    clusters: dict[str, str] | None = None


def read_truth(path: str) -> Truth:
    """Labelled pairs (a, b, label) or cluster labels (id, cluster) from a TSV, CSV or JSONL file (told apart by
    the first line: {...} is JSONL, a tab TSV, else CSV; a first line whose last column is named label or cluster is
    a header)."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape", newline="") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        raise InputError(f"--truth {path}: no such file") from None
    except (IsADirectoryError, OSError) as e:
        raise InputError(f"--truth {path}: cannot read ({e.strerror or e})") from None
    numbered = [(n, line) for n, line in enumerate(lines, start=1) if line.strip()]
    if not numbered:
        raise InputError(f"--truth {path}: empty; give labelled pairs (a, b, label) or cluster labels (id, cluster)")
    first = numbered[0][1].lstrip()
    if first.startswith("{"):
        rows = [(n, _json_row(path, n, line)) for n, line in numbered]
    else:
        dialect = "excel-tab" if "\t" in first else "excel"
        rows = [(n, [field.strip() for field in fields])
                for (n, _), fields in zip(numbered, csv.reader((line for _, line in numbered), dialect))]
        if rows and rows[0][1][-1].lower() in ("label", "cluster"):
            rows = rows[1:]  # a header
    if not rows:
        raise InputError(f"--truth {path}: only a header; give labelled pairs (a, b, label) or cluster labels")
    width = len(rows[0][1])
    odd = next((n for n, fields in rows if len(fields) != width), None)
    if width not in (2, 3) or odd is not None:
        raise InputError(f"--truth {path}:{odd or rows[0][0]}: every line must be a labelled pair (a, b, label) or "
                         f"every line a cluster label (id, cluster)")
    return Truth(path, pairs=_labelled(path, rows)) if width == 3 else Truth(path, clusters=_clusters(path, rows))


def _json_row(path: str, n: int, line: str) -> list[str]:
    try:
        record = json.loads(line)
        if {"a", "b", "label"} <= set(record):
            label = record["label"]  # true, 1 or "1"
            return [str(record["a"]), str(record["b"]), label if isinstance(label, str) else json.dumps(label)]
        return [str(record["id"]), str(record["cluster"])]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise InputError(f"--truth {path}:{n}: not a JSON record with a, b, label or with id, cluster") from None


def _labelled(path: str, rows) -> list[tuple[str, str, bool]]:
    seen: dict[tuple[str, str], bool] = {}
    for n, (a, b, label) in rows:
        value = _LABELS.get(label.lower())
        if value is None:
            raise InputError(f"--truth {path}:{n}: label {label!r} is not 1, 0, true or false")
        if a == b:
            raise InputError(f"--truth {path}:{n}: {a!r} is paired with itself; a pair needs two documents")
        key = (min(a, b), max(a, b))
        if seen.setdefault(key, value) != value:
            raise InputError(f"--truth {path}:{n}: {a} and {b} are labelled both 1 and 0; keep one label")
    return [(a, b, label) for (a, b), label in seen.items()]


def _clusters(path: str, rows) -> dict[str, str]:
    out: dict[str, str] = {}
    for n, (doc, cluster) in rows:
        if out.setdefault(doc, cluster) != cluster:
            raise InputError(f"--truth {path}:{n}: {doc} is in two clusters ({out[doc]} and {cluster}); keep one")
    return out


class Matcher:
    """The run's document that a truth id names: the one with that id; else the one with the same path once
    normalised (absolute paths against the folder the run was started in, cwd); else the one document whose path
    ends with it on a / boundary (g0pA_taska.txt names corpus/g0pA_taska.txt). None: no document, or several."""

    def __init__(self, ids: Iterable[str], cwd: str):
        self.ids = set(ids)
        self.normal: dict[str, str] = {}
        self.suffix: dict[str, str | None] = {}  # None: ends more than one id
        for doc in sorted(self.ids):
            normal = os.path.normpath(doc)
            self.normal.setdefault(normal, doc)
            self.normal.setdefault(os.path.normpath(os.path.join(cwd, doc)), doc)
            parts = normal.split(os.sep)
            for i in range(1, len(parts)):
                tail = os.sep.join(parts[i:])
                self.suffix[tail] = doc if self.suffix.get(tail, doc) == doc else None

    def __call__(self, truth_id: str) -> str | None:
        if truth_id in self.ids:
            return truth_id
        normal = os.path.normpath(truth_id) if truth_id else truth_id
        return self.normal.get(normal) or self.suffix.get(normal)


@dataclasses.dataclass
class Run:
    """The pairs a run found (ids and exact Jaccard), the threshold they were kept at, the documents it read (None
    for saved pairs, which list only paired documents), and its bands (None for saved pairs)."""
    a: list[str]
    b: list[str]
    jaccard: np.ndarray
    threshold: float
    documents: list[str] | None = None
    cwd: str = ""
    bands: tuple[int, int] | None = None


def load_workdir(work: WorkDir) -> Run:
    verify = require(work, VerifyRecord)
    shingle = require(work, ShingleRecord)
    band = work.manifest().band
    a, b, jaccard = _columns(StoredPairs(work))
    catalog = load_catalog(work, shingle)
    ids = catalog.ids
    documents = [ids[n] for n in np.flatnonzero(catalog.live).tolist()]
    return Run(a, b, jaccard, verify.params.threshold, documents, shingle.cwd or "",
               (band.params.bands, band.params.rows) if band else None)


def load_saved(path: str) -> Run:
    header: dict = {}
    saved = read_pairs(path, None, header)
    a, b, jaccard = _columns(saved)
    floor = header.get("threshold")
    if not isinstance(floor, (int, float)):
        floor = float(jaccard.min()) if len(jaccard) else 0.0
    return Run(a, b, jaccard, float(floor), None, os.getcwd())


def _columns(pairs: Iterable[dict]) -> tuple[list[str], list[str], np.ndarray]:
    a, b, jaccard = [], [], []
    for p in pairs:
        a.append(p["a"])
        b.append(p["b"])
        jaccard.append(p["jaccard"])
    return a, b, np.asarray(jaccard, dtype=np.float64)


def thresholds(start: float, step: float = _STEP) -> list[float]:
    """The run's threshold, then every multiple of step above it up to 1."""
    out = [start]
    k = int(np.floor(start / step + 1e-9)) + 1
    while k * step <= 1.0 + 1e-9:
        value = round(k * step, 6)
        if value > start + 1e-9:
            out.append(min(value, 1.0))
        k += 1
    return out


class _Numbering:
    """Documents numbered in order of first appearance (ids to numbers, and back)."""

    def __init__(self, ids: Iterable[str] = ()):
        self.index: dict[str, int] = {}
        for i in ids:
            self(i)

    def __call__(self, doc: str) -> int:
        return self.index.setdefault(doc, len(self.index))

    def pairs(self, a: Iterable[str], b: Iterable[str]) -> np.ndarray:
        x = np.fromiter((self(i) for i in a), np.int64)
        y = np.fromiter((self(i) for i in b), np.int64)
        return np.stack([np.minimum(x, y), np.maximum(x, y)], axis=1) if len(x) else np.empty((0, 2), np.int64)


def _codes(pairs: np.ndarray) -> np.ndarray:
    return sets.sorted_unique(lsh.pair_codes(pairs)) if len(pairs) else np.empty(0, np.uint64)


def _score(threshold: float, counts: evaluation.PairCounts, ari: float, **extra) -> dict:
    precision, recall, f1 = evaluation.precision_recall_f1(counts)
    return {"threshold": threshold, "precision": precision, "recall": recall, "f1": f1, "ari": ari,
            "tp": counts.tp, "fp": counts.fp, "fn": counts.fn, **extra}


def evaluate(run: Run, truth: Truth | str, step: float = _STEP, work: WorkDir | None = None,
             log: Callable[[str], None] = lambda message: None) -> dict:
    """The scores of run against truth (a Truth, or "exact" with the run's work dir): {"scores": one dict per
    threshold, "counts": what was matched, unknown and left unjudged}. See the module docstring."""
    if not 0.0 < step <= 1.0:
        raise ParameterError("--step must be in (0, 1]")
    grid = thresholds(run.threshold, step)
    if isinstance(truth, str):
        if work is None:
            raise ParameterError("--truth exact needs the run's work dir (-w DIR): saved pairs hold no shingle sets")
        return _exact(run, work, grid, log)
    known = run.documents if run.documents is not None else sorted(set(run.a) | set(run.b))
    match = Matcher(known, run.cwd)
    truth_ids = sorted({i for p in truth.pairs for i in p[:2]} if truth.pairs is not None
                       else set(truth.clusters or {}))
    matched = {i: match(i) for i in truth_ids}
    if run.documents is None:  # saved pairs: a truth id that names none of them is a document without pairs
        matched = {i: (m if m is not None or _ambiguous(match, i) else i) for i, m in matched.items()}
    unknown = sorted(i for i, m in matched.items() if m is None)
    if unknown:
        names = "names" if len(unknown) == 1 else "name"
        log(f"eval: {plural(len(unknown), 'id')} of {truth.path} {names} no document of the run, or several: left "
            f"out of the scores: " + ", ".join(unknown[:3]) + (", ..." if len(unknown) > 3 else ""))
    numbers = _Numbering(m for m in matched.values() if m is not None)
    items = np.arange(len(numbers.index), dtype=np.int64)  # the truth's documents, numbered first
    found = numbers.pairs(run.a, run.b)
    n = len(numbers.index)
    counts = {"truth": truth.path, "kind": "pairs" if truth.pairs is not None else "clusters",
              "truth_ids": len(truth_ids), "unknown_ids": len(unknown), "run_threshold": run.threshold}
    scores = []
    if truth.pairs is not None:
        kept = [(x, y, label) for x, y, label in ((matched[a], matched[b], label) for a, b, label in truth.pairs)
                if x is not None and y is not None]
        counts.update(labelled=len(truth.pairs), labelled_known=len(kept), positive=sum(k[2] for k in kept))
        true_pairs = numbers.pairs([k[0] for k in kept if k[2]], [k[1] for k in kept if k[2]])
        false_pairs = numbers.pairs([k[0] for k in kept if not k[2]], [k[1] for k in kept if not k[2]])
        true, false = _codes(true_pairs), _codes(false_pairs)
        truth_labels = components(len(items), true_pairs)
        for t in grid:
            at = found[run.jaccard >= t]
            pair_counts = evaluation.pair_counts(_codes(at), true, false)
            ari = evaluation.adjusted_rand_index(truth_labels, components(n, at)[items])
            scores.append(_score(t, pair_counts, ari, unjudged=len(at) - pair_counts.tp - pair_counts.fp))
    else:
        assert truth.clusters is not None
        cluster_of = _Numbering()
        labels = np.full(len(items), -1, np.int64)
        for i, m in matched.items():
            if m is not None:
                label = cluster_of(truth.clusters[i])
                if labels[numbers.index[m]] not in (-1, label):
                    raise InputError(f"--truth {truth.path}: {i} and another id name the same document {m} with "
                                     f"different clusters; keep one")
                labels[numbers.index[m]] = label
        counts.update(clusters=len(cluster_of.index))
        for t in grid:
            at = found[run.jaccard >= t]
            inside = (at < len(items)).all(axis=1)
            pair_counts = evaluation.cluster_pair_counts(labels, at[inside])
            ari = evaluation.adjusted_rand_index(labels, components(n, at)[items])
            scores.append(_score(t, pair_counts, ari, unjudged=int((~inside).sum())))
    return {"scores": scores, "counts": counts}


def _ambiguous(match: Matcher, truth_id: str) -> bool:
    return match.suffix.get(os.path.normpath(truth_id) if truth_id else truth_id, "") is None


def stored_sets(work: WorkDir) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The stored shingle sets of the documents the candidates stage could pair (live, long enough): their ids,
    and the sets as CSR (values uint32, each set sorted and unique; offsets int64), as allpairs' joins take them."""
    shingle = require(work, ShingleRecord)
    candidates = require(work, CandidatesRecord)
    catalog = load_catalog(work, shingle)
    numbers = np.flatnonzero(pairable(catalog, candidates.params))
    shards = PartitionArrays(work, "shingle", ("values.npy", "offsets.npy"), shingle.shard_numbers)
    values, lengths = sets.gather_sets(shards, part_starts(shingle), numbers)
    ids = catalog.ids
    return [ids[n] for n in numbers.tolist()], values, np.r_[0, np.cumsum(lengths)].astype(np.int64)


def exact_pairs(work: WorkDir, threshold: float) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Every pair of the documents the candidates stage could pair with exact Jaccard >= threshold, over the stored
    shingle sets (allpairs.jaccard_join): (their ids, pairs (m, 2) of indices into the ids, Jaccard (m,))."""
    ids, values, offsets = stored_sets(work)
    joined = allpairs.jaccard_join(values, offsets, threshold)
    return ids, joined.pairs, sets.jaccard(joined.intersection, joined.size_a, joined.size_b)


def _exact(run: Run, work: WorkDir, grid: list[float], log: Callable[[str], None]) -> dict:
    ids, true_pairs, true_jaccard = exact_pairs(work, grid[0])
    numbers = _Numbering(ids)
    n = len(ids)
    found = numbers.pairs(run.a, run.b)
    if len(numbers.index) > n:  # never: verified pairs are pairs of pairable documents
        raise InputError(f"{work.root}: the verified pairs name documents the candidates stage could not pair; "
                         f"re-run the work dir")
    log(f"eval: the exact join found {plural(len(true_pairs), 'pair')} with Jaccard >= {grid[0]} among "
        f"{plural(n, 'document')}")
    scores = []
    for t in grid:
        at, true_at = found[run.jaccard >= t], true_pairs[true_jaccard >= t]
        pair_counts = evaluation.pair_counts(_codes(at), _codes(true_at))
        ari = evaluation.adjusted_rand_index(components(n, true_at), components(n, at))
        extra: dict = {}
        if run.bands is not None:
            estimate = estimate_recall(run.jaccard, *run.bands, t)
            extra = {"estimated_recall": estimate.recall, "estimated_low": estimate.recall_low,
                     "estimated_high": estimate.recall_high}
        scores.append(_score(t, pair_counts, ari, unjudged=0, **extra))
    return {"scores": scores, "counts": {"truth": EXACT, "kind": EXACT, "documents": n, "run_threshold": run.threshold,
                                         "bands": list(run.bands) if run.bands else None}}
