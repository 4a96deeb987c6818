"""Frozen parameter objects for each stage, their fingerprints, and the one step that resolves a run's options into
them (resolve -> RunConfig): every default, clamp and threshold-to-bands rule is decided here, once.

A stage's key is a digest of its name, the work-dir format, its parameters and the keys of what it consumes, so a
stored result is reused exactly when it would be recomputed identically.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from typing import NoReturn

from .errors import ParameterError

FORMAT = 6  # work-dir data format; bump when stored bytes change meaning (hash functions, layouts)
UNITS = ("word", "char")
METHODS = ("oph", "permutation")
# How candidates are found (--method): LSH bands, an exact set-similarity join (kernels.allpairs), or whichever
# costs less on the stored sets (pipeline.candidates.choose_method)
JOIN_METHODS = ("lsh", "exact", "auto")
# What a pair's similarity is (--metric): Jaccard, or the containment of the smaller set in the larger
METRICS = ("jaccard", "containment")
DEFAULT_THRESHOLD = 0.8
# (b, r) are chosen by integrating the S-curve's error areas over [0, t] and [t, 1]: at t = 1 the second is empty and
# every choice ties, so a threshold of 1 (keep only exact copies of the shingle set) chooses the bands for 0.99.
BANDING_CEILING = 0.99


def digest(*parts) -> str:
    """A short stable hex digest of JSON-serialisable parts."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=_plain).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(blob, digest_size=16).hexdigest()


def digests(parts: tuple, lasts: list) -> list[str]:
    """[digest(*parts, last) for last in lasts], the JSON of parts made once (a per-shard stage's keys: 10 us a
    digest, for each of 2,530 shards of 10M documents in two stages, every run)."""
    head = json.dumps([*parts, None], sort_keys=True, separators=(",", ":"), default=_plain)[:-len("null]")]
    return [hashlib.blake2b((head + json.dumps(last, sort_keys=True, separators=(",", ":"), default=_plain) + "]"
                             ).encode("utf-8", "surrogatepass"), digest_size=16).hexdigest() for last in lasts]


def _plain(obj):
    if isinstance(obj, RECORDED_PARAMS):
        return obj.record()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    raise TypeError(f"cannot fingerprint {type(obj).__name__}")


@dataclasses.dataclass(frozen=True)
class SourceParams:
    """How documents are found: affects which documents exist, not how they are shingled."""

    jsonl: bool = False
    id_field: str = "id"
    text_field: str = "text"
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    hidden: bool = False
    follow_links: bool = False
    null: bool = False  # paths on stdin are NUL-separated
    strict: bool = False  # a bad JSONL line stops the run instead of being skipped
    # A partition (shard) is cut by bytes for usual documents; the count caps it for tiny ones. Each shard has a
    # fixed cost beyond its documents (its eight files, its task), a large share for tiny documents at 1,000 a shard.
    partition_docs: int = 4000
    partition_bytes: int = 4 << 20
    # Document formats (issue 20): formats, the ones read (empty: every one text/extract.py knows); html "main"
    # keeps an HTML page's main content only. Left out of fingerprints and records at their defaults (record()),
    # so that work dirs, keys and cache dirs of plain-text runs stay what they were before formats existed.
    formats: tuple[str, ...] = ()
    html: str = "visible"
    # Parquet (issue 23): each PATH is a Parquet file or a dataset folder of them. Left out at its default, as the
    # format fields are.
    parquet: bool = False

    @property
    def records(self) -> bool:
        """Documents are records of files (JSONL lines, Parquet rows), not files."""
        return self.jsonl or self.parquet

    def record(self) -> dict:
        """The stored form: dataclasses.asdict without the format and Parquet fields at their defaults."""
        record = dataclasses.asdict(self)
        for f in dataclasses.fields(self):
            if f.name in ("formats", "html", "parquet") and record[f.name] == f.default:
                del record[f.name]
        return record


@dataclasses.dataclass(frozen=True)
class ShingleParams:
    unit: str = "word"
    k: int = 5
    whitespace: str = "collapse"  # or "remove" (char shingles over text with no blanks)
    strip_punct: bool = False


@dataclasses.dataclass(frozen=True)
class SignatureParams:
    num_perm: int = 128
    seed: int = 1
    method: str = "oph"


@dataclasses.dataclass(frozen=True)
class BandParams:
    bands: int
    rows: int
    threshold: float | None = None  # the threshold (b, r) were chosen for, if chosen
    recall: float | None = None  # the recall target at the threshold they were chosen for (--recall), if any

    def record(self) -> dict:
        """The stored form: without recall when none was asked for, so that keys and records of the runs
        without --recall stay what they were before it existed."""
        record = dataclasses.asdict(self)
        if self.recall is None:
            del record["recall"]
        return record


@dataclasses.dataclass(frozen=True)
class CandidateParams:
    max_bucket: int = 1000
    # Shorter documents are never paired. In the Python standard library every pair below 20 shingles is a stub
    # (a licence header, `from x import *`: 54 of 85 pairs, all <= 13 shingles) and the smallest real one has 78.
    min_shingles: int = 20
    min_size: int = 0  # bytes of text
    # --method (JOIN_METHODS); an exact join needs the threshold (None with lsh). Left out of fingerprints and
    # records at their defaults (record()), so that the keys of LSH runs stay what they were before --method.
    method: str = "lsh"
    threshold: float | None = None
    metric: str = "jaccard"  # containment: the join finds pairs by containment (method exact)

    def record(self) -> dict:
        """The stored form: dataclasses.asdict without method, threshold and metric at their defaults."""
        return _without_defaults(self, method="lsh", threshold=None, metric="jaccard")


def _without_defaults(params, **defaults) -> dict:
    """dataclasses.asdict(params) without the named fields at the given (default) values: fields added later
    leave the fingerprints and stored records of runs that do not use them as they were."""
    record = dataclasses.asdict(params)
    for name, default in defaults.items():
        if record[name] == default:
            del record[name]
    return record


# The keeper rules (pipeline.groups.KeeperRules applies them), checked here with the other options.
RULES = ("longest", "shortest", "oldest", "newest", "first", "nocopy", "central", "shallowest", "alpha", "prefer")
# A name that says "copy" is the surest sign of a copy; then the version closest to all the others (what they were
# made from, in a group of three or more); then time (reset by clones, checkouts, copies and archive extraction,
# so it often ties), depth, and the name, so the choice never depends on listing order (README).
DEFAULT_RULES = ("first", "nocopy", "central", "oldest", "shallowest", "alpha")


def keeper_order(keep: str | None, prefer: str | None = None) -> tuple[str, ...]:
    """The rules of --keep (comma-separated; None: DEFAULT_RULES) in order, checked, and --prefer checked to be a
    regular expression; with --prefer, "prefer" comes first unless --keep places it."""
    order = DEFAULT_RULES if keep is None else tuple(r.strip() for r in keep.split(",") if r.strip())
    unknown = [r for r in order if r not in RULES]
    if unknown:
        raise ParameterError(f"--keep: unknown rule {unknown[0]!r}; choose from {', '.join(RULES)}")
    if prefer is not None:
        try:
            re.compile(prefer)
        except re.error as e:
            raise ParameterError(f"--prefer: not a regular expression ({e})") from None
        if "prefer" not in order:
            order = ("prefer", *order)
    return order


@dataclasses.dataclass(frozen=True)
class ClusterParams:
    link: str = "keeper"  # or "connected"
    keep: tuple[str, ...] = DEFAULT_RULES
    prefer: str | None = None


@dataclasses.dataclass(frozen=True)
class VerifyParams:
    threshold: float = DEFAULT_THRESHOLD
    metric: str = "jaccard"  # or "containment": |A ∩ B| / min(|A|, |B|), the smaller set in the larger

    def record(self) -> dict:
        """The stored form: without metric at its default (CandidateParams.record)."""
        return _without_defaults(self, metric="jaccard")


DEDUPED_MODES = ("copy", "link")


@dataclasses.dataclass(frozen=True)
class DedupedParams:
    """--write-deduped: the folder the deduplicated corpus is written to, and how a folder's kept files get there
    (copy, or link: hard links to the inputs, no space but the same inode)."""

    folder: str
    mode: str = "copy"


# Parameters that store and fingerprint themselves without the fields added later at their defaults (their
# record()): the format fields, --recall, --method, --metric; so the keys of runs made before them stay the same.
RECORDED_PARAMS = (SourceParams, BandParams, CandidateParams, VerifyParams)


def default_jobs() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def threshold_or_default(given: float | None, inherited: float | None = None) -> float:
    """The threshold a stage uses: as given, else what it inherits (the threshold the bands were chosen for, the
    lowest saved pair of a replay), else DEFAULT_THRESHOLD. The one place the default is decided."""
    if given is not None:
        return given
    return inherited if inherited is not None else DEFAULT_THRESHOLD


def banding_threshold(threshold: float) -> float:
    """The threshold (b, r) are chosen for: the threshold, at most BANDING_CEILING."""
    return min(threshold, BANDING_CEILING)


def choose_bands(num_perm: int, threshold: float | None, bands: int | None, rows: int | None,
                 kept: BandParams | None = None, stored_in: str | None = None,
                 recall: float | None = None) -> BandParams:
    """Explicit --bands/--rows (one of them may be derived from num_perm), else (b, r) from the threshold: kept, the
    choice an index made for this threshold, recall and num_perm (pipeline.band.kept_bands: its parameters are
    fixed, and choosing again is a noticeable share of a run that adds a few documents), else, for a recall target,
    the (b, r) with P(t) >= recall and the fewest false positives (recall.bands_for_recall), else
    lsh.optimal_bands. stored_in: the work dir whose stored signatures have num_perm (the band stage), so the fix
    for too few is to re-run that stage."""
    t = threshold_or_default(threshold)
    if recall is not None and not (bands or rows):
        return kept or _bands_for_recall(num_perm, t, recall, stored_in)
    if bands and rows:
        params = BandParams(bands, rows, None)
    elif bands:
        params = BandParams(bands, num_perm // bands, None)
    elif rows:
        params = BandParams(num_perm // rows, rows, None)
    else:
        from .kernels import lsh  # numpy: not imported by `import nearDup`

        params = kept or BandParams(*lsh.optimal_bands(banding_threshold(t), num_perm), t)
    if params.bands < 1 or params.rows < 1 or params.bands * params.rows > num_perm:
        _too_few_permutations(num_perm, bands, rows, stored_in)
    return params


def _bands_for_recall(num_perm: int, threshold: float, recall: float, stored_in: str | None) -> BandParams:
    """--recall: (b, r) within num_perm that make a pair at the threshold a candidate with probability >= recall,
    or the error naming the smallest --num-perm that has such a choice."""
    from .kernels import recall as estimate  # numpy: not imported by `import nearDup`

    t = banding_threshold(threshold)
    chosen = estimate.bands_for_recall(t, recall, num_perm)
    if chosen is not None:
        return BandParams(*chosen, threshold, recall)
    need = estimate.min_num_perm_for_recall(t, recall)
    what = (f"--recall {recall}: no b x r within {num_perm} permutations makes a pair at Jaccard {t} a candidate "
            f"with probability {recall}")
    if stored_in is None:
        raise ParameterError(f"{what}; raise --num-perm to {need} or more, or lower --recall")
    raise ParameterError(f"{what} (the stored signatures have {num_perm}); lower --recall, or re-run the signature "
                         f"stage with more: `neardup -w {stored_in} signature --num-perm {need} band --recall "
                         f"{recall}`")


def _too_few_permutations(num_perm: int, bands: int | None, rows: int | None, stored_in: str | None) -> NoReturn:
    """Say which of --bands/--rows asks for more than num_perm rows (b x r <= num_perm), and the two fixes."""
    need = (bands or 1) * (rows or 1)
    if bands and rows:
        what = f"--bands {bands} with --rows {rows}"
        lower = f"lower --bands or --rows so that bands x rows <= {num_perm}"
    elif bands:
        what, lower = f"--bands {bands} (one row each at least)", f"lower --bands to at most {num_perm}"
    else:
        what, lower = f"--rows {rows} (in one band at least)", f"lower --rows to at most {num_perm}"
    if stored_in is None:
        raise ParameterError(f"{what} needs {need} permutations but --num-perm is {num_perm}; raise --num-perm to "
                             f"{need} or {lower}")
    options = " ".join(f"--{name} {value}" for name, value in (("bands", bands), ("rows", rows)) if value)
    raise ParameterError(f"{what} needs {need} permutations but the stored signatures have {num_perm}; {lower}, or "
                         f"re-run the signature stage with more: `neardup -w {stored_in} signature --num-perm "
                         f"{need} band {options}`")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Every parameter of a run, resolved once (resolve) and frozen: the stages receive these values and decide
    none of them again. The bands are chosen from the threshold when the work dir is known (band(kept)), since an index
    keeps the choice it made."""

    source: SourceParams
    shingle: ShingleParams
    signature: SignatureParams
    candidates: CandidateParams
    verify: VerifyParams
    cluster: ClusterParams
    threshold: float | None = None  # as given: None is the default, or the threshold an index's bands were chosen for
    bands: int | None = None
    rows: int | None = None
    recall: float | None = None  # the recall target the bands are chosen for (--recall)
    references: tuple[str, ...] = ()
    deduped: DedupedParams | None = None  # --write-deduped

    def band(self, kept: BandParams | None = None) -> BandParams:
        """(b, r): as given, an index's stored choice (kept), or chosen from the threshold (choose_bands)."""
        return choose_bands(self.signature.num_perm, self.threshold, self.bands, self.rows, kept, recall=self.recall)


# The bounds of each numeric option (the command line's click types say the same), as (low, high) inclusive.
RANGES = {"k": (1, 64), "num_perm": (1, 8192), "seed": (0, 2**63 - 1), "bands": (1, None), "rows": (1, None),
          "max_bucket": (2, None), "min_shingles": (0, None), "min_size": (0, None), "partition_docs": (1, None)}
# extract.FORMATS, written out: importing text/extract.py (email, zipfile, lzma...) on every start of the command
# line is slow; a test checks the two agree
DOCUMENT_FORMATS = ("text", "pdf", "docx", "odt", "epub", "html", "eml", "mbox", "gz", "bz2", "xz", "zst")
HTML_MODES = ("visible", "main")
CHOICES = {"unit": UNITS, "whitespace": ("collapse", "remove"), "minhash": METHODS, "link": ("keeper", "connected"),
           "method": JOIN_METHODS, "metric": METRICS}


def resolve(*, unit: str = "word", k: int = 5, whitespace: str = "collapse", strip_punct: bool = False,
            num_perm: int = 128, seed: int = 1, minhash: str = "oph", threshold: float | None = None,
            bands: int | None = None, rows: int | None = None, recall: float | None = None,
            max_bucket: int = 1000, min_shingles: int = 20,
            min_size: int = 0, link: str = "keeper", keep: str | None = None, prefer: str | None = None,
            references: tuple[str, ...] | list[str] = (), jsonl: bool = False, parquet: bool = False,
            id_field: str = "id",
            text_field: str = "text", strict: bool = False, include: tuple[str, ...] | list[str] = (),
            exclude: tuple[str, ...] | list[str] = (), hidden: bool = False, follow_links: bool = False,
            null: bool = False, partition_docs: int = 4000, formats: tuple[str, ...] | list[str] = (),
            html: str | None = None, method: str | None = None, metric: str | None = None,
            write_deduped: str | os.PathLike | None = None, write_deduped_mode: str | None = None) -> RunConfig:
    """The options of `run` (the defaults are its defaults) checked and resolved into frozen parameters (for
    inputs that are all .parquet files, by_extension then sets parquet). Raises
    ParameterError with the command line's message for a bad value; explicit --bands/--rows are checked against
    --num-perm here, before any work dir is made."""
    metric = metric or VerifyParams.metric  # None: the default, as the command line gives it when not set
    if metric == "containment" and method == "lsh":
        raise ParameterError("--metric containment: LSH bands find pairs by Jaccard, not containment; use "
                             "--method exact (the default with containment)")
    if metric == "containment" and method in (None, "auto"):  # its one way to find pairs: nothing to choose
        method = "exact"
    method = method or CandidateParams.method
    values = locals()
    for name, (low, high) in RANGES.items():
        value = values[name]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < low or (high is not None and value > high)):
            bounds = f"{low}<=x<={high}" if high is not None else f"x>={low}"
            raise ParameterError(f"{option_flag(name)}: {value!r} is not in the range {bounds}")
    for name, choices in CHOICES.items():
        if values[name] not in choices:
            raise ParameterError(f"{option_flag(name)}: {values[name]!r} is not one of {', '.join(choices)}")
    if unknown := sorted(set(formats) - set(DOCUMENT_FORMATS)):
        raise ParameterError(f"--formats: unknown format {', '.join(map(str, unknown))}; choose from "
                             f"{', '.join(DOCUMENT_FORMATS)}")
    if html is not None and html not in HTML_MODES:
        raise ParameterError(f"--html: {html!r} is not one of {', '.join(HTML_MODES)}")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                  or not 0 < threshold <= 1):  # nan fails both comparisons
        raise ParameterError(f"--threshold: {threshold!r} is not in the range 0<x<=1")
    if jsonl and parquet:
        raise ParameterError("--jsonl and --parquet: give one of them (PATHs of one kind)")
    write_deduped_mode = write_deduped_mode or DEDUPED_MODES[0]
    if write_deduped_mode not in DEDUPED_MODES:
        raise ParameterError(f"--write-deduped-mode: {write_deduped_mode!r} is not one of {', '.join(DEDUPED_MODES)}")
    if write_deduped is not None and not os.fspath(write_deduped):
        raise ParameterError("--write-deduped: give the folder to write the deduplicated corpus to")
    if recall is not None:
        check_recall(recall, bands, rows)
    keeper_rules = keeper_order(keep, prefer)
    if bands or rows or recall is not None:  # too many for num_perm, or too few for the recall target
        choose_bands(num_perm, threshold, bands, rows, recall=recall)
    return RunConfig(
        source=SourceParams(jsonl=jsonl, parquet=parquet, id_field=id_field, text_field=text_field, strict=strict,
                            include=_strings(include), exclude=_strings(exclude), hidden=hidden,
                            follow_links=follow_links, null=null, partition_docs=partition_docs,
                            formats=tuple(f for f in DOCUMENT_FORMATS if f in formats),  # fingerprinted: one order
                            html=html or HTML_MODES[0]),
        shingle=ShingleParams(unit, k, whitespace, strip_punct),
        signature=SignatureParams(num_perm, seed, minhash),
        candidates=CandidateParams(max_bucket, min_shingles, min_size, method,
                                   None if method == "lsh" else threshold_or_default(threshold), metric),
        verify=VerifyParams(threshold_or_default(threshold), metric),
        cluster=ClusterParams(link, keeper_rules, prefer),
        threshold=threshold, bands=bands, rows=rows, recall=recall, references=_strings(references),
        deduped=None if write_deduped is None else DedupedParams(os.fspath(write_deduped), write_deduped_mode))


def by_extension(config: RunConfig, paths: list[str]) -> RunConfig:
    """Parquet inputs known by their names: without --jsonl or --parquet, PATHs that all end with .parquet are
    read as Parquet."""
    if config.source.records or not paths or not all(p.endswith(".parquet") for p in paths):
        return config
    return dataclasses.replace(config, source=dataclasses.replace(config.source, parquet=True))


def check_recall(recall: float, bands: int | None, rows: int | None) -> None:
    """--recall is a probability strictly between 0 and 1, and it chooses the bands: not with --bands/--rows."""
    if isinstance(recall, bool) or not isinstance(recall, (int, float)) or not 0 < recall < 1:
        raise ParameterError(f"--recall: {recall!r} is not in the range 0<x<1")
    if bands or rows:
        raise ParameterError("--recall chooses --bands and --rows: give either --recall or --bands/--rows")


def _strings(values: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """A repeatable option's values: one string is one value (not its letters)."""
    return (values,) if isinstance(values, str) else tuple(values)


def option_flag(name: str) -> str:
    """The command-line option of a parameter: k -> -k, num_perm -> --num-perm."""
    return "-k" if name == "k" else "--" + name.replace("_", "-")
