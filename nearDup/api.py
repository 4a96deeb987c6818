"""The Python API: find_duplicates and Index, the same pipeline as `neardup run` and `neardup query` with the same
parameters, checks and results, as typed records. Nothing is printed; what the command line says on stderr goes to
`log` (default: the logging module's "nearDup" logger, at INFO, silent unless configured).
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from .config import by_extension, resolve
from .errors import InputError, ParameterError
from .pipeline import run as pipeline_run
from .pipeline.driver import Runner
from .pipeline.index import check_query_parameters, mark_reported
from .report import corpus
from .report import evaluate as evaluation
from .report.results import Results
from .store.workdir import WorkDir

Log = Callable[[str], None]
_LOGGER = logging.getLogger("nearDup")


@dataclasses.dataclass(frozen=True)
class Pair:
    """A verified pair: ids a < b (for a query: a is the query document), exact Jaccard |A ∩ B| / |A ∪ B| of their
    shingle sets, the MinHash estimate, and the sizes of the intersection and union. With metric="containment", a
    is contained in b and containment is |A ∩ B| / |A| (None otherwise)."""

    a: str
    b: str
    jaccard: float
    estimate: float
    intersection: int
    union: int
    containment: float | None = None


@dataclasses.dataclass(frozen=True)
class Member:
    """A document of a group: its role (keeper, duplicate, reference) and its Jaccard against the keeper (with
    metric="containment": NaN, and containment, the share of it in the keeper)."""

    id: str
    role: str
    jaccard: float
    reference: bool
    containment: float | None = None


@dataclasses.dataclass(frozen=True)
class Group:
    """A group of near-duplicates with its keeper (members[0]); min/max_jaccard: the least and most similar pair of
    members, over "all pairs" (groups up to 200 documents) or "known pairs only" (pairwise); anchored: it holds a
    document that anchored a bucket larger than max_bucket. With metric="containment", min/max_jaccard are NaN and
    min/max_containment the least and greatest containment of a member in the keeper."""

    group: int
    keeper: str
    size: int
    min_jaccard: float
    max_jaccard: float
    pairwise: str
    anchored: bool
    members: tuple[Member, ...]
    min_containment: float | None = None
    max_containment: float | None = None


@dataclasses.dataclass(frozen=True)
class Result:
    """What a run found: the pairs (as `run --format jsonl`), the groups (as `run --groups --format jsonl`), the
    parameters they were made with (the JSONL header's), and how many inputs could not be read (the command line's
    exit status 2)."""

    pairs: tuple[Pair, ...]
    groups: tuple[Group, ...]
    params: dict[str, Any]
    unreadable: int = 0
    recall: dict[str, Any] | None = None  # the estimated recall (the JSONL summary's `recall`; README, Recall)


def find_duplicates(paths: Sequence[str | os.PathLike] | None = None, *, texts: Sequence[str] | None = None,
                    ids: Sequence[str] | None = None, workdir: str | os.PathLike | None = None,
                    jobs: int | None = None, scheduler: str | None = None, scheduler_file: str | None = None,
                    log: Log | None = None, **options: Any) -> Result:
    """Near-duplicates among the documents under paths (files, folders, JSONL files with jsonl=True), or among
    texts (ids: their ids, default "0", "1", ...). options are those of `neardup run`, by their Python names:
    unit, k, whitespace, strip_punct, num_perm, seed, minhash, threshold, bands, rows, recall, max_bucket,
    min_shingles, min_size, method, metric, link, keep, prefer, references, jsonl, id_field, text_field, strict,
    include, exclude, hidden, follow_links, write_deduped (a folder: write the inputs minus the duplicates there,
    as `run --write-deduped`), write_deduped_mode (copy or link). workdir: keep the work there (a later call with
    the same inputs reads only what changed); default: a temporary one, removed afterwards. Raises a NearDupError
    (ParameterError, InputError, ...) with the command line's message."""
    with contextlib.ExitStack() as resources:
        if texts is not None:
            if paths is not None:
                raise ParameterError("give either paths or texts, not both")
            if set(options) & {"jsonl", "parquet", "id_field", "text_field"}:
                raise ParameterError("texts are read as given: jsonl, parquet, id_field and text_field do not apply")
            paths = [_write_texts(texts, ids, resources.enter_context(tempfile.TemporaryDirectory()))]
            options["jsonl"] = True
        elif ids is not None:
            raise ParameterError("ids name texts: give texts=[...] with them")
        if paths is None:
            raise ParameterError("give the paths of files or folders, or texts=[...]")
        if isinstance(paths, (str, os.PathLike)):  # one path, not a sequence of one-letter paths
            paths = [paths]
        args = [os.fspath(p) for p in paths]
        config = by_extension(resolve(**options), args)
        pipeline_run.check_inputs(args, config.source)
        if workdir is None:
            workdir = resources.enter_context(tempfile.TemporaryDirectory(prefix="neardup-"))
        engine = pipeline_run.Engine(jobs, scheduler, scheduler_file)
        if config.deduped:
            corpus.check_target(config.deduped, args, os.fspath(workdir))
        runner = pipeline_run.open_runner(os.fspath(workdir), resources, log or _LOGGER.info, engine)
        last = pipeline_run.run(runner, args, config, groups=True)
        if config.deduped:
            corpus.write(runner.work, config.deduped, runner.log)
        return _finish(runner, last)


class Index:
    """An incremental index (`neardup run --index DIR`): its parameters are fixed when it is made; add reads only
    new and changed documents; query finds the indexed near-duplicates of other documents without changing it."""

    def __init__(self, path: str | os.PathLike, options: dict[str, Any], log: Log | None = None,
                 jobs: int | None = None, scheduler: str | None = None, scheduler_file: str | None = None):
        self.path, self.options, self.log = os.fspath(path), options, log or _LOGGER.info
        self.engine = pipeline_run.Engine(jobs, scheduler, scheduler_file)
        resolve(**options)  # bad values are refused now

    @classmethod
    def open(cls, path: str | os.PathLike, *, log: Log | None = None, jobs: int | None = None,
             scheduler: str | None = None, scheduler_file: str | None = None, **options: Any) -> Index:
        """The index at path (made by the first add). options: those of find_duplicates; for an existing index,
        any given must equal the index's own (as `run --index` checks), or add(rebuild=True) rebuilds with them."""
        return cls(path, options, log, jobs, scheduler, scheduler_file)

    def add(self, paths: Sequence[str | os.PathLike], *, new_only: bool = False, rebuild: bool = False) -> Result:
        """Add the documents under paths to those the index holds (re-reading only new and changed ones; a document
        gone from its file or folder leaves the index) and return the results over the whole index, as `neardup run
        --index DIR` with the index's inputs and paths; new_only: only the pairs and groups that involve a document
        added or changed since the last add (--new-only)."""
        known = self.inputs()
        args = [*known, *(p for p in (os.fspath(p) for p in paths) if p not in known)]
        return self.update(args, new_only=new_only, rebuild=rebuild)

    def update(self, paths: Sequence[str | os.PathLike], *, new_only: bool = False, rebuild: bool = False) -> Result:
        """Bring the index to exactly the documents under paths: `neardup run --index DIR PATH...` (documents not
        under paths are removed from it)."""
        args = [os.fspath(p) for p in paths]
        config = by_extension(resolve(**self.options), args)
        pipeline_run.check_inputs(args, config.source)
        with contextlib.ExitStack() as resources:
            if config.deduped:
                corpus.check_target(config.deduped, args, self.path)
            runner = pipeline_run.open_runner(self.path, resources, self.log, self.engine, index=True)
            last = pipeline_run.run(runner, args, config, groups=True, rebuild=rebuild)
            if config.deduped:
                corpus.write(runner.work, config.deduped, runner.log)
            return _finish(runner, last, new_only)

    def inputs(self) -> list[str]:
        """The paths the index was last brought up to (not its --reference inputs)."""
        if not os.path.isdir(self.path):
            return []
        record = WorkDir(self.path, create=False).manifest().shingle
        return [i["path"] for i in record.inputs if not i["reference"]] if record else []

    def query(self, text: str | None = None, *, paths: Sequence[str | os.PathLike] | None = None,
              threshold: float | None = None) -> list[Pair]:
        """The indexed near-duplicates of text (its id is "-") or of the documents under paths, as `neardup query
        --index DIR`: pairs (query document, indexed document) with exact Jaccard >= threshold (default: the
        index's). The shingle, signature and band options given to open must equal the index's."""
        if (text is None) == (paths is None):
            raise ParameterError("give either a text or paths to query")
        if threshold is not None:
            resolve(threshold=threshold)
        args = [os.fspath(p) for p in paths] if paths is not None else []
        stdin = io.BytesIO(text.encode("utf-8", "surrogateescape")) if text is not None else None
        work = WorkDir(self.path, create=False)
        with contextlib.ExitStack() as resources:
            work.lock(0.0, shared=True)  # waits only for a run writing the index
            resources.callback(work.release)
            check_query_parameters(work, {name: value for name, value in self.options.items()
                                          if name in _QUERY_FIXED})
            pairs, _ = pipeline_run.query(work, args, stdin, threshold, self.log)
        return [_pair(p) for p in pairs]


@dataclasses.dataclass(frozen=True)
class Score:
    """A run's scores at one threshold: pair precision, recall and F1 (None where undefined: no pair found, or no
    true pair), the adjusted Rand index of its groups (connected components of the pairs >= threshold) against the
    truth's, the pair counts (tp, fp, fn; unjudged: found pairs the truth does not label), and for --truth exact the
    recall estimated from the run's own pairs, with its 95% interval."""

    threshold: float
    precision: float | None
    recall: float | None
    f1: float | None
    ari: float
    tp: int
    fp: int
    fn: int
    unjudged: int
    estimated_recall: float | None = None
    estimated_low: float | None = None
    estimated_high: float | None = None


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """The scores at the run's threshold (scores[0]) and at each multiple of step above it; counts: the truth and
    what of it was matched (truth_ids, unknown_ids, labelled, positive, clusters, documents, ...)."""

    scores: tuple[Score, ...]
    counts: dict[str, Any]


def evaluate(truth: str | os.PathLike, *, workdir: str | os.PathLike | None = None,
             pairs: str | os.PathLike | None = None, step: float = 0.05, log: Log | None = None) -> Evaluation:
    """Score a run against a truth, as `neardup eval`: the run is a work dir, or pairs saved from one (JSONL output,
    or a work dir's verify/KEY.pairs.jsonl); truth is a file of labelled pairs (a, b, label) or cluster labels (id,
    cluster), as TSV, CSV or JSONL, or "exact": every pair with exact Jaccard >= t among the work dir's documents.
    Raises a NearDupError with the command line's message."""
    if (workdir is None) == (pairs is None):
        raise ParameterError("give the run to score: a work dir (-w DIR) or saved pairs (--pairs FILE), one of them")
    log = log or _LOGGER.info
    truth = os.fspath(truth)
    parsed = truth if truth == evaluation.EXACT else evaluation.read_truth(truth)
    if pairs is not None:
        out = evaluation.evaluate(evaluation.load_saved(os.fspath(pairs)), parsed, step, log=log)
    else:
        assert workdir is not None  # one of the two, checked above
        work = WorkDir(os.fspath(workdir), create=False)
        work.lock(0.0, shared=True)  # waits only for a run writing it
        try:
            out = evaluation.evaluate(evaluation.load_workdir(work), parsed, step, work, log)
        finally:
            work.release()
    return Evaluation(tuple(Score(**row) for row in out["scores"]), out["counts"])


_QUERY_FIXED = ("unit", "k", "whitespace", "strip_punct", "num_perm", "seed", "minhash", "bands", "rows",
                "recall")


def _write_texts(texts: Sequence[str], ids: Sequence[str] | None, folder: str) -> str:
    """texts as a JSONL file of {"id", "text"} records (the pipeline reads JSONL like any input)."""
    if isinstance(texts, str):
        raise ParameterError("texts: give a list of strings, not one string")
    names = [str(i) for i in range(len(texts))] if ids is None else [str(i) for i in ids]
    if len(names) != len(texts):
        raise ParameterError(f"ids: {len(names)} ids for {len(texts)} texts; give one id per text")
    if len(set(names)) != len(names):
        raise ParameterError("ids: every id must be unique")
    for text in texts:
        if not isinstance(text, str):
            raise InputError(f"texts: {type(text).__name__} is not a str")
    path = os.path.join(folder, "texts.jsonl")
    with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
        for name, text in zip(names, texts):
            f.write(json.dumps({"id": name, "text": text}) + "\n")
    return path


def _finish(runner: Runner, last: str, new_only: bool = False) -> Result:
    """The results of a run just done (as the command line reports them), then its work committed."""
    runner.engine.finish()
    results = Results.of_workdir(runner, last, new_only)
    out = Result(tuple(_pair(p) for p in results.pairs), tuple(_group(g) for g in results.groups()),
                 dict(results.params), runner.soft_errors, results.recall)
    mark_reported(runner.work)
    runner.work.commit()
    return out


def _pair(record: dict) -> Pair:
    return Pair(record["a"], record["b"], record["jaccard"], record["estimate"], record["intersection"],
                record["union"], record.get("containment"))


def _group(record: dict) -> Group:
    nan = float("nan")  # a Jaccard a containment run does not compute
    members = tuple(Member(m["id"], m["role"], m.get("jaccard", nan), m["reference"], m.get("containment"))
                    for m in record["members"])
    return Group(record["group"], record["keeper"], record["size"], record.get("min_jaccard", nan),
                 record.get("max_jaccard", nan), record["pairwise"], record["anchored"], members,
                 record.get("min_containment"), record.get("max_containment"))

