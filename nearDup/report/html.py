"""The HTML report (issue 21): one self-contained file (CSS, script and SVG figures inline, no network request)
with the summary, the S-curve, the Jaccard histogram of the candidates, the group sizes, a groups table that pages
10,000 groups from an inline JSON blob, and pair views with the shared passages marked in the original text.

Two halves: `render(data)` is a pure function from a ReportData (plain values) to one HTML string, byte-identical
for equal data (no timestamps; the figures are SVG written by figures.py with fixed precision); `load(work)` and
`load_pair(...)` build that data from a work dir or from two files, through the library's own readers (stored
pairs, groups, stage records, compare.explain_pairs for the passages). jinja2 comes with nearDup[report].
"""
from __future__ import annotations

import bisect
import dataclasses
import importlib
import itertools
import json
import re
import unicodedata
from pathlib import Path

import numpy as np

from ..config import ShingleParams
from ..errors import NearDupError, WorkDirError, full_disk
from ..kernels import sets
from ..pipeline import compare
from ..pipeline.copies import among, stored_entries, verified_entries
from ..pipeline.driver import PartitionArrays, part_starts, require
from ..pipeline.results import StoredPairs, recall_line, recall_warning, resolved_params
from ..pipeline.shingle import load_docs
from ..pipeline.similarity import set_overlap
from ..store.manifest import ShingleRecord, VerifyRecord
from ..store.workdir import WorkDir
from ..text.read import STREAM_BYTES, decode
from ..wording import human_size, plural
from . import figures
from .results import groups_summary

MISSING_EXTRA = "--report needs jinja2 and pygal: pip install 'nearDup[report]'"
VIEW_GROUPS = 20  # pair views (keeper against each duplicate) are made for the first groups only,
VIEW_PAIRS = 60  # at most this many,
VIEW_CHARS = 2_000_000  # and at most this much text in all: the others get the command that makes their report
REJECTED_SAMPLE = 20_000  # rejected candidates whose Jaccard is recomputed for the histogram (verify keeps none)
PAGE_GROUPS = 50
MAX_PAIRS = 100_000  # pair records in the page (about 200 bytes each)


def require_extra() -> None:
    """Refuse early, in one line, when the report's libraries are not installed."""
    try:
        for name in ("jinja2", "pygal"):  # the template, the figures
            importlib.import_module(name)
    except ImportError:
        raise NearDupError(MISSING_EXTRA) from None


@dataclasses.dataclass(frozen=True)
class PairView:
    """Two documents side by side: each text as segments (text, passage number or -1), the passage of the other
    side each passage is aligned with, and the scores compare.run gives."""

    a: str
    b: str
    scores: dict  # jaccard, containment_a_in_b, containment_b_in_a, shingles_a, shingles_b, shared
    segments_a: list  # [[text, passage or -1], ...] of the original text
    segments_b: list
    peers_a: list  # peers_a[i]: the passage of b where passage i of a starts (or -1)
    peers_b: list
    note: str = ""  # why the text is shown normalised, if it is


@dataclasses.dataclass(frozen=True)
class ReportData:
    """Everything a report shows, as plain values; render() draws it."""

    title: str
    summary: list  # [(label, value), ...]
    params: dict
    pairs_json: str = "[]"  # the pair records as the work dir stores them (verify's pairs.jsonl), as a JSON array
    groups_json: str = "[]"  # the group records likewise (cluster's clusters.jsonl)
    sizes: tuple = ()  # each group's size (for the figure: the JSON above is not parsed again)
    docs: dict = dataclasses.field(default_factory=dict)  # document number -> [size, "YYYY-MM-DD"] of group members
    verified: tuple = ()  # exact Jaccard of the verified entries (a pair, or the pairs of classes of copies)
    verified_counts: tuple = ()  # how many document pairs each of them stands for (empty: one each)
    rejected: tuple = ()  # exact Jaccard of (a sample of) the rejected candidates' entries
    rejected_counts: tuple = ()  # how many document pairs each of them stands for (empty: one each)
    rejected_note: str = ""
    bands: int | None = None
    rows: int | None = None
    threshold: float | None = None
    views: tuple = ()  # PairView
    notes: tuple = ()  # warnings and what was left out


# ------------------------------------------------------------------------------------------------ loading

def load(work: WorkDir) -> ReportData:
    """The report of a work dir's stored results (through the cluster stage). Documents are read only for the pair
    views (the first VIEW_GROUPS groups)."""
    require(work, "cluster")
    manifest = work.manifest()
    shingle_record, verify_record = manifest.shingle, manifest.verify
    assert shingle_record is not None and verify_record is not None  # required above
    params = resolved_params(work, "cluster")
    threshold = float(params["threshold"])
    docs = load_docs(work)
    groups_path = work.current("cluster", "clusters.jsonl")
    groups_json = work.jsonl_array(groups_path, "cluster")  # copied into the page as it is
    members, roles, group_sizes = _group_columns(groups_json, groups_path)
    pairs = StoredPairs(work)
    sizes, mtimes = docs.catalog["size"], docs.catalog["mtime_ns"]
    numbers = np.unique(members)
    info = dict(zip(numbers.tolist(), zip(sizes[numbers].tolist(), _dates(mtimes[numbers]))))
    duplicates = members[roles == "duplicate"]
    verified = tuple(work.load_array(work.current("verify", "scores.npy"), "verify")[:, 0].tolist())  # (J, estimate)
    verified_counts = tuple(verified_entries(work).count().tolist())  # copies of one text: one entry, many pairs
    rejected, rejected_counts, rejected_note = _rejected(work, shingle_record, verify_record)
    shingle = shingle_record.stats
    candidates = verify_record.stats.candidates
    skipped = {reason: n for reason, n in sorted((shingle.skipped or {}).items()) if n}
    summary = [
        ("inputs", ", ".join(p["path"] for p in shingle_record.inputs)),
        ("documents read", f"{shingle.docs} ({human_size(shingle.bytes)})"),
        ("skipped", ", ".join(f"{n} {reason}" for reason, n in
                              {"binary": shingle.count("binary"), "too short (never paired)": shingle.count("short"),
                               **skipped}.items() if n) or "none"),
        ("parameters", f"{params['unit']} {params['k']}-shingles, num_perm {params['num_perm']}, "
                       f"b {params['bands']} x r {params['rows']}, threshold {threshold}"),
        ("candidate pairs", str(candidates)),
        ("verified pairs", str(sum(verified_counts))),
        ("recall", recall_line(work, verify_record.stats, threshold) or "not estimated (verified before nearDup "
                                                                          "estimated it: run verify again)"),
        ("groups", groups_summary(len(group_sizes), len(duplicates), int(sizes[duplicates].sum()))),
    ]
    notes = [w for w in (recall_warning(work, threshold),) if w]
    if len(pairs) > MAX_PAIRS:  # thousands of copies of one text make millions of pairs: the groups say it all
        notes.append(f"the page holds the first {MAX_PAIRS} of the {len(pairs)} verified pairs' records (all are in "
                     f"the figures); `neardup -w {work.root} verify --format jsonl` prints them all")
    views, left = _views(list(itertools.islice(work.iter_jsonl(groups_path, "cluster"), VIEW_GROUPS)),
                         len(members) - len(group_sizes), docs, shingle_record.params)
    if left:
        notes.append(left)
    return ReportData(f"nearDup report: {summary[0][1]}", summary, params,
                      work.jsonl_array(work.current("verify", "pairs.jsonl"), "verify", MAX_PAIRS),
                      groups_json, tuple(group_sizes.tolist()), info,
                      verified, verified_counts, rejected, rejected_counts, rejected_note,
                      params["bands"], params["rows"], threshold, tuple(views), tuple(notes))


def load_pair(a: str, b: str, params: ShingleParams, threshold: float) -> ReportData:
    """The report of one pair (compare --report): its view and scores, no figures."""
    view = pair_view(a, b, a, b, params)
    s = view.scores
    summary = [("A", a), ("B", b), ("exact Jaccard", f"{s['jaccard']:.4f}"),
               ("shingles", f"A {s['shingles_a']}, B {s['shingles_b']}, {s['shared']} shared"),
               ("threshold", f"{threshold} ({'at or above' if s['jaccard'] >= threshold else 'below'})")]
    return ReportData(f"nearDup compare: {a} ~ {b}", summary, dataclasses.asdict(params), views=(view,),
                      threshold=threshold)


_MEMBER_DOC = re.compile(r'"doc": (\d+)')
_MEMBER_ROLE = re.compile(r'"role": "(\w+)"')
_GROUP_SIZE = re.compile(r'"size": (\d+)')


def _group_columns(groups_json: str, path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each member's document number and role, in order, and each group's size, found in the groups' JSON text
    without parsing it (parsing 10,000 groups took a quarter of the report's time). The keys are found only as
    keys: inside a JSON string every quote is escaped, so '"doc": ' cannot occur there; no other key of a group or
    a member ends in doc, role or size. The counts must agree (one doc and one role a member)."""
    members = np.array(_MEMBER_DOC.findall(groups_json), dtype=np.int64)
    roles = np.array(_MEMBER_ROLE.findall(groups_json))
    sizes = np.array(_GROUP_SIZE.findall(groups_json), dtype=np.int64)
    if not len(members) == len(roles) == int(sizes.sum()):
        raise WorkDirError(f"{path}: corrupt or truncated; re-run the cluster stage (or use --force)")
    return members, roles, sizes


def _dates(mtime_ns: np.ndarray) -> list[str]:
    """YYYY-MM-DD (UTC) of each modification time, "" where none is known."""
    days = np.datetime_as_string(np.asarray(mtime_ns, dtype=np.int64).astype("datetime64[ns]"), unit="D")
    return [d if t else "" for d, t in zip(days.tolist(), np.asarray(mtime_ns).tolist())]


def _rejected(work: WorkDir, shingle_record: ShingleRecord, verify_record: VerifyRecord) -> tuple[tuple, tuple, str]:
    """Exact Jaccard of the rejected candidates and how many document pairs each stands for (verify checks an entry
    for the pairs of two classes of copies once: they are all alike). Verify keeps the checked entries but scores only
    the accepted ones, so they are recomputed here, for at most REJECTED_SAMPLE entries spread evenly over them."""
    checked = work.load_array(work.current("verify", "checked.npy"), "verify")
    accepted = work.load_array(work.current("verify", "pairs.npy"), "verify")
    rejected = checked[~among(checked, accepted)]
    if not len(rejected):
        return (), (), ""
    note = ""
    if len(rejected) > REJECTED_SAMPLE:
        rejected = rejected[np.linspace(0, len(rejected) - 1, REJECTED_SAMPLE).astype(np.int64)]
        note = f"a sample of {REJECTED_SAMPLE} of the rejected candidates, evenly spread"
    counts = stored_entries(work, rejected).count()
    shingles = PartitionArrays(work, "shingle", ("values.npy", "offsets.npy"), shingle_record.shard_numbers)
    inter, la, lb = set_overlap(shingles, part_starts(shingle_record), rejected[:, 0], rejected[:, 1])
    return tuple(float(x) for x in sets.jaccard(inter, la, lb)), tuple(counts.tolist()), note


def _views(groups: list[dict], shown: int, docs, params: ShingleParams) -> tuple[list[PairView], str]:
    """Pair views of each keeper against its duplicates, in the first VIEW_GROUPS groups (within VIEW_PAIRS and
    VIEW_CHARS); shown: the keeper-member pairs of all the groups. The pairs are explained together, in rounds
    that the limits would allow if every pair gave a view (a text has no more characters than bytes, mostly):
    one round, unless the documents are large."""
    candidates = [(docs[g["members"][0]["doc"]], docs[m["doc"]]) for g in groups[:VIEW_GROUPS]
                  for m in g["members"][1:]]
    candidates = [(a, b) for a, b in candidates if a["size"] + b["size"] <= 2 * STREAM_BYTES]
    views: list[PairView] = []
    chars = at = 0
    while at < len(candidates) and len(views) < VIEW_PAIRS and chars < VIEW_CHARS:
        batch: list[tuple[dict, dict]] = []
        budget = chars
        for a, b in candidates[at:at + VIEW_PAIRS - len(views)]:
            if batch and budget >= VIEW_CHARS:
                break
            batch.append((a, b))
            budget += a["size"] + b["size"]
        at += len(batch)
        for (a, b), result in zip(batch, compare.explain_pairs([(a["path"], b["path"]) for a, b in batch], params)):
            if len(views) >= VIEW_PAIRS or chars >= VIEW_CHARS:
                break
            if isinstance(result, NearDupError):  # changed or gone since the run (JSONL records have no file)
                continue
            try:
                view = _view(*result, a["id"], b["id"], params)
            except (NearDupError, OSError):
                continue
            views.append(view)
            chars += sum(len(t) for t, _ in view.segments_a) + sum(len(t) for t, _ in view.segments_b)
    left = "" if len(views) >= shown else (
        f"pair views: {plural(len(views), 'pair')} of the first {len(groups)} groups are shown; "
        f"for another pair run `neardup compare KEEPER DUPLICATE --report pair.html`")
    return views, left


def pair_view(path_a: str, path_b: str, name_a: str, name_b: str, params: ShingleParams) -> PairView:
    """Both documents with the passages each shares with the other (compare.explain_pairs), cut where the two
    texts stop running in step (a moved paragraph is its own passage) and marked in the original text; each
    passage points at the passage of the other side that holds its first shingle."""
    (result,) = compare.explain_pairs([(path_a, path_b)], params)
    if isinstance(result, NearDupError):
        raise result
    return _view(*result, name_a, name_b, params)


def _view(ab: dict, ba: dict, name_a: str, name_b: str, params: ShingleParams) -> PairView:
    """pair_view of compare's results both ways."""
    path_a, path_b = ab["a"], ab["b"]
    scores = {k: ab[k] for k in ("jaccard", "containment_a_in_b", "containment_b_in_a", "shingles_a", "shingles_b",
                                 "shared")}
    ta, tb = ab["tokens_a"], ba["tokens_a"]  # (explain_pairs refuses a file it could not hold whole)
    (pa, sa), (pb, sb) = _aligned(ta, ab["passages"], tb, params.k), _aligned(tb, ba["passages"], ta, params.k)
    sides, notes = [], []
    for path, tokens, passages in ((path_a, ta, pa), (path_b, tb, pb)):
        text = _original(path)
        if text is None:
            raise NearDupError(f"{path}: binary now; no pair view")
        segments, note = _segments(text, tokens, passages, params)
        sides.append(segments)
        if note:
            notes.append(note)
    return PairView(name_a, name_b, scores, sides[0], sides[1], _peers(sa, pb), _peers(sb, pa), "; ".join(notes))


def _aligned(tokens: list, passages: list, other: list, k: int) -> tuple[list, list]:
    """The passages (token ranges) cut into runs whose consecutive shingles are consecutive in the other text too,
    with the position in the other text where each run's first shingle is (its first occurrence; -1 if none)."""
    first: dict = {}
    for i in range(len(other) - k + 1):
        first.setdefault(tuple(other[i:i + k]), i)
    runs: list[list[int]] = []
    starts: list[int] = []
    for s, e in passages:
        offset = None  # where the other text is, relative to this one, in the current run
        for i in range(s, max(s + 1, e - k + 1)):
            at = first.get(tuple(tokens[i:i + k]), -1)
            if i == s:
                runs.append([s, e])
                starts.append(at)
            elif at < 0 or at - i == offset:  # a shingle across a cut, or still in step
                continue
            elif offset is None:
                starts[-1] = at
            else:
                runs[-1][1] = i
                runs.append([i, e])
                starts.append(at)
            offset = at - i if at >= 0 else None
    return [(s, e) for s, e in runs], starts


def _peers(starts: list, other_passages: list) -> list[int]:
    """For each passage, the passage of the other document holding its first shingle's start (-1 if none)."""
    lows = [s for s, _ in other_passages]
    out = []
    for at in starts:
        n = bisect.bisect_right(lows, at) - 1
        out.append(n if at >= 0 and n >= 0 and at < other_passages[n][1] else -1)
    return out


def _original(path: str) -> str | None:
    with open(path, "rb") as f:
        decoded = decode(f.read())
    return None if decoded is None else decoded[0]


def _segments(text: str, tokens: list, passages: list, params: ShingleParams) -> tuple[list, str]:
    """The original text cut into [piece, passage or -1], the passages given as token ranges of the normalised
    text. Normalising piece by piece (a character with its combining marks, a run of blanks) must give the whole
    normalised text; where it does not, the normalised text is shown instead (and said so)."""
    pieces, normalised = _pieces(text, params)
    joined = "".join(normalised)
    note = ""
    if joined != _normalise(text, params):
        pieces, normalised, joined = list(joined), list(joined), joined
        note = "shown normalised: its original text could not be aligned with the normalised one"
    # where each token starts and ends in the normalised text
    spans, at = [], 0
    for token in tokens:  # in order: each token is found after the one before it
        start = joined.find(token, at)
        if start < 0:  # cannot happen when compare's tokens come from this text; show it unmarked
            return [[text, -1]], "passages not marked: tokens could not be placed"
        at = start + len(token)
        spans.append((start, at))
    # normalised offset -> original offset, at piece boundaries
    norm_at = np.cumsum([0, *map(len, normalised)])
    orig_at = np.cumsum([0, *map(len, pieces)])
    source = "".join(pieces)
    cuts: list = []
    for n, (s, e) in enumerate(passages):
        lo = int(np.searchsorted(norm_at, spans[s][0], side="right")) - 1
        hi = int(np.searchsorted(norm_at, spans[e - 1][1], side="left"))
        cuts.append((int(orig_at[lo]), int(orig_at[hi]), n))
    segments, at = [], 0
    for lo, hi, n in cuts:
        if lo > at:
            segments.append([source[at:lo], -1])
        segments.append([source[max(lo, at):hi], n])
        at = max(at, hi)
    if at < len(source):
        segments.append([source[at:], -1])
    return segments, note


_BLANKS = re.compile(r"\s+")


def _pieces(text: str, params: ShingleParams) -> tuple[list[str], list[str]]:
    """The text as pieces (a character with the combining marks after it; a run of blanks) and each piece
    normalised on its own, as normalise() would (NFKC, case folding, punctuation, blanks)."""
    from ..text.normalise import _punctuation_table

    pieces: list[str] = re.findall(r"\s+|.", text, re.DOTALL)
    if not text.isascii():  # (ASCII has no combining marks)
        merged: list[str] = []
        for piece in pieces:
            if merged and not piece.isspace() and unicodedata.combining(piece[0]):
                merged[-1] += piece
            else:
                merged.append(piece)
        pieces = merged
    table = _punctuation_table() if params.strip_punct else None
    known: dict[str, str] = {}  # a piece normalises alike wherever it is: each distinct piece once
    out = []
    for piece in pieces:
        norm = known.get(piece)
        if norm is None:
            norm = unicodedata.normalize("NFKC", piece).casefold()
            known[piece] = norm = norm.translate(table) if table is not None else norm
        out.append(norm)
    if params.unit == "char":  # blanks, as normalise() leaves them between characters
        last = len(pieces) - 1
        out = [("" if params.whitespace == "remove" or i in (0, last) else " ") if piece.isspace() else norm
               for i, (piece, norm) in enumerate(zip(pieces, out))]
    return pieces, out


def _normalise(text: str, params: ShingleParams) -> str:
    from ..text.normalise import normalise

    return normalise(text, params)


# ------------------------------------------------------------------------------------------------ rendering

def render(data: ReportData) -> str:
    """One HTML string, the same bytes for the same data."""
    return "".join(_page(data))


def _page(data: ReportData):
    """The page in pieces: the template's text around the data blob, and the blob's parts as they are (the blob is
    most of the page, megabytes for 10,000 groups: neither the template engine nor a join copies it)."""
    require_extra()
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("nearDup.report", "templates"), autoescape=True,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    shown = []
    if data.bands and data.rows:
        shown.append(_scurve(data))
    if data.verified or data.rejected:
        shown.append(_histogram(data))
    if data.sizes:
        shown.append(_group_sizes(data.sizes))
    views = [{"a": v.a, "b": v.b, "scores": v.scores, "sa": v.segments_a, "sb": v.segments_b,
              "pa": v.peers_a, "pb": v.peers_b, "note": v.note} for v in data.views]
    marker = "\x00blob\x00"  # (no path or text in the template holds a NUL)
    head, tail = env.get_template("report.html.j2").render(
        data=data, figures=shown, params=json.dumps(data.params, sort_keys=True), blob=marker).split(marker)
    yield head
    for piece in ('{"groups":', data.groups_json, ',"pairs":', data.pairs_json, ',"docs":', _json(data.docs),
                  ',"views":', _json(views), f',"page":{PAGE_GROUPS}}}'):
        yield piece.replace("<", "\\u003c")  # no "</script>" inside the script element
    yield tail


def _json(value) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _scurve(data: ReportData) -> dict:
    assert data.bands is not None and data.rows is not None
    b, r, t = data.bands, data.rows, data.threshold
    return {"name": "scurve", "svg": figures.scurve(b, r, t, np.asarray(data.verified, dtype=float)),
            "alt": f"S-curve of b = {b} bands of r = {r} rows, threshold {t}, {_verified_pairs(data)} verified pairs "
                   f"on it"}


def _pairs(scores: tuple, counts: tuple) -> int:
    """The document pairs that scores of entries stand for."""
    return sum(counts) if counts else len(scores)


def _verified_pairs(data: ReportData) -> int:
    return _pairs(data.verified, data.verified_counts)


def _histogram(data: ReportData) -> dict:
    edges = np.linspace(0, 1, 51)
    counts = [np.histogram(np.asarray(scores, dtype=float), bins=edges,
                           weights=np.asarray(weights or np.ones(len(scores)), dtype=float))[0]
              for scores, weights in ((data.rejected, data.rejected_counts), (data.verified, data.verified_counts))]
    rejected, verified = _pairs(data.rejected, data.rejected_counts), _verified_pairs(data)
    labels = (f"rejected (< threshold): {rejected}" + (f" ({data.rejected_note})" if data.rejected_note else ""),
              f"verified (>= threshold): {verified}")
    return {"name": "jaccard", "svg": figures.histogram(edges, counts[0], counts[1], data.threshold, labels),
            "alt": f"Histogram of exact Jaccard: {verified} verified, {rejected} rejected candidate pairs"}


def _group_sizes(sizes: tuple) -> dict:
    """Groups by size: each size up to 9, then decades (10-99, 100-999, ...) so that a few huge groups stay visible
    beside thousands of pairs."""
    values, counts = np.unique(sizes, return_counts=True)
    buckets: dict[str, int] = {}
    for value, count in zip(values.tolist(), counts.tolist()):
        low = value if value < 10 else 10 ** (len(str(value)) - 1)
        label = str(value) if value < 10 else f"{low}-{10 * low - 1}"
        buckets[label] = buckets.get(label, 0) + count
    return {"name": "sizes", "svg": figures.bars(list(buckets), list(buckets.values())),
            "alt": f"Group sizes: {len(sizes)} groups, from {values[0]} to {values[-1]} documents"}


def write(data: ReportData, path: str) -> None:
    """Write the report (through a temporary file, so a reader never sees half of it)."""
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8", errors="backslashreplace") as f:  # (undecodable names)
            f.writelines(_page(data))
        tmp.replace(target)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise NearDupError(f"--report {path}: cannot write ({e.strerror or e}){full_disk(e)}") from None
