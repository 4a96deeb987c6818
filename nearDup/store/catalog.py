"""The catalog: which documents the stored shards hold now, and what a run must read to bring them up to date.

One row per document of the listed shards, in global order, kept as columns (per-row dicts are far slower to load,
match against a fresh listing and save again). A row is
live while its document exists unchanged; a deleted or changed document's row is dead (its shard is append-only,
so the row stays until its shard holds no live row or the shards are rebuilt).
"""
from __future__ import annotations

import bisect
import dataclasses
import hashlib
import mmap
from collections.abc import Mapping, Sequence

import numpy as np

from ..config import SourceParams
from ..text.inputs import Item, item_id_bytes, item_numbers, utf8_array
from ..text.read import content_hashes

TEXT = ("id", "sha", "item")
SHARD_NUMBERS = ("size", "mtime_ns", "inode", "shingles", "replaced")  # what a shard knows of its documents
NUMBERS = (*SHARD_NUMBERS, "added", "live")  # what the catalog adds: the run a document came in, liveness


def item_digest(item: Item) -> str:
    """What a catalog row keeps of the item it came from: for a JSONL range, a short digest of its fingerprint
    (path, size, mtime, inode, byte range), how it is known unchanged without reading it; nothing for a file,
    which is matched by its id, size, mtime and inode columns."""
    if item.kind == "file":
        return ""
    text = "\0".join(map(str, item.fingerprint()))
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


# (rows, bound): the live ids of the first rows of a catalog increase with the row, none above bound (None: no row
# of them is live). Live rows that stay live keep it: a later check reads only the rows after them.
IdsAscend = tuple[int, bytes | None]


def decoded(values: list[bytes]) -> list[str]:
    """UTF-8 values (surrogates kept) as str: joined by NULs and decoded at once when none holds a NUL (verify
    names the ~100,000 documents of its pairs: a decode each took a third more)."""
    joined = b"\0".join(values)
    if len(values) > 1 and joined.count(b"\0") == len(values) - 1:
        return joined.decode("utf-8", "surrogatepass").split("\0")
    return [v.decode("utf-8", "surrogatepass") for v in values]


@dataclasses.dataclass
class Catalog:
    """columns: TEXT fields as list[str] or as stored, UTF-8 bytes arrays (decoded when first read, into a cache:
    the stored form stays, so an unchanged catalog is fingerprinted, joined and saved again without decoding or
    encoding 100,000 ids); NUMBERS fields as int64 arrays (live: int64, or int8 as a run plans it)."""

    columns: dict | JoinedColumns

    def __post_init__(self):
        if not isinstance(self.columns, JoinedColumns):  # (joined: each column only when read)
            self.columns = dict(self.columns)
        self._decoded: dict[str, list[str]] = {}
        self.ids_ascending = False  # known: the live rows' ids increase with the row (distinct_live_ids found it)
        self.ascend: IdsAscend | None = None  # then: (rows, the last live id)

    @classmethod
    def joined(cls, segments: list[dict], live: np.ndarray) -> Catalog:
        """The catalog of stored segments (a base, then the rows appended since, in order) whose liveness is
        `live` (one value a row of them all)."""
        if len(segments) == 1:
            return cls({**segments[0], "live": live})
        return cls(JoinedColumns(segments, {"live": live}))

    def with_columns(self, **columns) -> Catalog:
        """This catalog with some columns replaced; a joined one stays joined (no column joined for it)."""
        if isinstance(self.columns, JoinedColumns):
            return Catalog(self.columns.replaced(columns))
        return Catalog({**self.columns, **columns})

    @classmethod
    def empty(cls) -> Catalog:
        return cls({**{f: [] for f in TEXT}, **{f: np.empty(0, np.int64) for f in NUMBERS}})

    @classmethod
    def of_shard(cls, columns: dict, added: dict[tuple[str, str], int], run: int) -> Catalog:
        """Rows for a new shard's documents (columns as shard_columns stored them); `added` is the run a document
        (id, sha) was first indexed in, if it was already (a rebuild keeps it), else this run."""
        catalog = cls({**columns, "live": np.ones(len(columns["size"]), np.int64)})
        return catalog.with_columns(added=np.array([added.get(key, run) for key in zip(catalog.ids, catalog["sha"])],
                                                   np.int64) if added else np.full(len(catalog), run, np.int64))

    def __len__(self) -> int:
        return len(self.columns["live"])

    @property
    def ids(self) -> list[str]:
        return self["id"]

    @property
    def live(self) -> np.ndarray:
        live = self.columns["live"]
        # a stored liveness of 0s and 1s (int8), or a planned one (bool), read as it is: a run asks ~10 times, a
        # copy each cost 14 ms at 10M
        return live.view(bool) if live.dtype == np.int8 else live.astype(bool, copy=False)

    def __getitem__(self, field: str):
        column = self.columns[field]
        if field in TEXT and not isinstance(column, list):
            if field not in self._decoded:
                self._decoded[field] = decoded(column.tolist())
            return self._decoded[field]
        return column

    @property
    def fields(self) -> list[str]:
        return list(self.columns)

    def column(self, field: str) -> np.ndarray:
        """A column in its stored form (TEXT as a UTF-8 bytes array), whichever form it is held in."""
        column = self.columns[field]
        return utf8_array(column) if isinstance(column, list) else column

    def values_at(self, field: str, rows) -> np.ndarray:
        """A numeric column's values at a few rows, in its stored form, without joining a segmented catalog's."""
        if isinstance(self.columns, JoinedColumns):
            return self.columns.at(field, rows)
        return self.column(field)[np.asarray(rows, np.int64)]

    def ids_of(self, rows) -> dict[int, str]:
        """{n: id} for a few rows, without decoding the whole column (verify names ~1,000 of 100,000)."""
        return self.texts_of("id", rows)

    def ids_by_id(self, rows: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """(order, ids) of a few rows (numbers, ascending): the permutation that sorts them by id, and their ids in
        that order. The stored UTF-8 bytes are sorted (numpy compares them unsigned: code point order, as Python
        sorts str) and only then decoded: verify's ~125,000 ids of 10M rows made into a dict and sorted by Python
        cost 0.05 CPU s, this 0.02."""
        values = self._at("id", rows)  # (an array: the joined and stored columns index by it as it is)
        if isinstance(values, list):
            order = np.array(sorted(range(len(values)), key=values.__getitem__), np.int64)
            return order, [values[i] for i in order.tolist()]
        order = np.argsort(values, kind="stable")
        return order, decoded(values[order].tolist())

    def texts_of(self, field: str, rows) -> dict[int, str]:
        """{n: value} of a text column for a few rows, without decoding (or joining) the whole column."""
        rows = list(rows)
        values = self._at(field, rows)
        if isinstance(values, list):
            return dict(zip(rows, values))
        return dict(zip(rows, decoded(values.tolist())))

    def _at(self, field: str, rows: list[int] | np.ndarray):
        """The values of a few rows of a column as held (a list, or a stored column's array), not joined."""
        if isinstance(self.columns, JoinedColumns):
            return self.columns.at(field, rows)
        column = self.columns[field]
        return [column[n] for n in rows] if isinstance(column, list) else column[np.asarray(rows, np.int64)]

    def id_bytes(self) -> np.ndarray:
        """The ids as a bytes array (UTF-8, surrogates kept): what numpy can sort and compare quickly."""
        return self.column("id")

    def distinct_live_ids(self, known: IdsAscend | None = None) -> bool:
        """Whether no id is held by two live rows, without a Python string per row (10M records): ids in
        increasing order, as one listing gives them, are distinct (and ids_ascending then says so, for the
        pairing order, and ascend what: IdsAscend of every row); others are sorted and neighbours compared. Read
        segment by segment: joined, the ids of 10M rows are a copy of 200 MB. known: what an earlier check found
        of the first rows (their live ids ascend, up to a bound): only the rows after them are read."""
        live, start, (skip, last) = self.live, 0, known or (0, None)
        for ids in self.parts("id"):
            first, start = start, start + len(ids)
            if start <= skip:
                continue
            ids, first = (ids[skip - first:], skip) if first < skip else (ids, first)
            alive = live[first:start]
            ids = ids if alive.all() else ids[alive]
            if not len(ids):
                continue
            if (last is not None and not ids[0] > last) or not (ids[1:] > ids[:-1]).all():
                break
            last = ids[-1]
        else:
            self.ids_ascending, self.ascend = True, (len(self), None if last is None else bytes(last))
            return True
        ids = np.sort(self.id_bytes()[live])
        return not (ids[1:] == ids[:-1]).any()

    def stored(self) -> dict:
        """The columns to save: text as UTF-8 bytes arrays."""
        return {f: self.column(f) for f in self.columns}

    def row(self, n: int) -> dict:
        """Row n, decoding its text only (a group names a few documents of 10M: no column decoded whole)."""
        return {f: (self.text(f, n) if f in TEXT else int(self._value(f, n))) for f in (*TEXT, *NUMBERS)}

    def text(self, field: str, n: int) -> str:
        value = self._value(field, n)
        return value if isinstance(value, str) else value.decode("utf-8", "surrogatepass")

    def _value(self, field: str, n: int):
        columns = self.columns
        return columns.value(field, n) if isinstance(columns, JoinedColumns) else columns[field][n]

    def take(self, index: np.ndarray) -> Catalog:
        index = np.asarray(index, np.int64)
        if len(index) == len(self) and np.array_equal(index, np.arange(len(self))):
            return self
        if isinstance(self.columns, JoinedColumns):
            return Catalog({f: self.columns.at(f, index) for f in self.columns})
        return Catalog({f: ([self[f][i] for i in index.tolist()] if isinstance(c, list) else c[index])
                        for f, c in self.columns.items()})

    def concat(self, *others: Catalog) -> Catalog:
        parts = [p for p in (self, *others) if len(p)]  # an empty catalog's text columns are lists: never decode
        if len(parts) <= 1:                                 # a million ids to join it
            return parts[0] if parts else self
        def joined(f: str):  # text stays undecoded bytes while every part's is
            if all(isinstance(p.columns[f], np.ndarray) for p in parts):
                return _concatenated([p.columns[f] for p in parts])
            return [v for p in parts for v in p[f]]

        return Catalog({f: joined(f) for f in self.columns})

    def same(self, other: Catalog) -> bool:
        fields = self.columns
        if isinstance(fields, JoinedColumns) and isinstance(other.columns, JoinedColumns) \
                and fields.segments is other.columns.segments:  # one stored catalog: only what replaced it may differ
            fields = {**fields.fixed, **other.columns.fixed}
        return all(self.columns[f] is other.columns[f] or
                   np.array_equal(self.column(f), other.column(f))
                   for f in fields)

    def parts(self, field: str) -> list[np.ndarray]:
        """A column in its stored form as the arrays it is stored in (a segmented catalog's, mapped), not joined: a
        pass over them reads each once, where joining copies 80 MB a column at 10M rows first."""
        if isinstance(self.columns, JoinedColumns):  # (a column that replaced the stored one may be held decoded)
            return [utf8_array(p) if isinstance(p, list) else p for p in self.columns.parts(field)]
        return [self.column(field)]

    def fingerprint(self) -> str:
        return fingerprint([self])

    def summary(self) -> dict:
        return summary([self])

    def let_go(self) -> None:
        """Drop the pages of its mapped columns from this process (a stage that read whole columns of 10M rows
        would otherwise keep them in the client's RSS while the catalog is cached); touched again, they are read
        again from the page cache (a joined column: joined again)."""
        if isinstance(self.columns, JoinedColumns):
            self.columns.let_go()
            return
        for column in self.columns.values():
            _let_go(column)


class JoinedColumns(Mapping):
    """The columns of a catalog stored as segments (the rows of a base, then those that index runs appended; each
    a stored table, mapped), each column joined when first read and kept: a run reads a few of them, so a run that
    appends rows writes only those (at 10M rows, rewriting the whole catalog cost 3 CPU s a run). `fixed`
    replaces a column whole (the liveness, stored apart since it changes in old rows too)."""

    def __init__(self, segments: list[dict], fixed: dict, joined: dict | None = None):
        self.segments, self.fixed = segments, fixed
        self.joined = {} if joined is None else joined  # shared with the catalogs made by replaced()
        self.starts = np.cumsum([0, *(len(next(iter(segment.values()))) for segment in segments)]).tolist()

    def __getitem__(self, field: str):
        if field in self.fixed:
            return self.fixed[field]
        if field not in self.joined:
            self.joined[field] = _concatenated([segment[field] for segment in self.segments])
        return self.joined[field]

    def __iter__(self):
        return iter([*self.segments[0], *(f for f in self.fixed if f not in self.segments[0])])

    def __len__(self) -> int:
        return len(set(self.segments[0]) | set(self.fixed))

    def _whole(self, field: str) -> bool:
        """Whether the column is held whole (replaced, or joined already): read from it, not the segments."""
        return field in self.fixed or field in self.joined

    def parts(self, field: str) -> list[np.ndarray]:
        if self._whole(field):
            return [self[field]]
        return [segment[field] for segment in self.segments]

    def at(self, field: str, rows) -> np.ndarray:
        """column[rows] without joining the column (a few rows of 10M)."""
        if self._whole(field):
            return self[field][rows]
        rows = np.asarray(rows, np.int64)
        starts = self.starts
        which = np.searchsorted(starts, rows, "right") - 1
        parts = [self.segments[s][field][rows[which == s] - starts[s]] for s in range(len(self.segments))]
        out = np.empty(len(rows), max((p.dtype for p in parts), key=lambda d: d.itemsize))
        for s, part in enumerate(parts):
            out[which == s] = part
        return out

    def value(self, field: str, n: int):
        """column[n], not joined."""
        if self._whole(field):
            return self[field][n]
        s = bisect.bisect_right(self.starts, n) - 1
        return self.segments[s][field][n - self.starts[s]]

    def replaced(self, columns: dict) -> JoinedColumns:
        return JoinedColumns(self.segments, {**self.fixed, **columns}, self.joined)

    def let_go(self) -> None:
        self.joined.clear()
        for segment in self.segments:
            for column in segment.values():
                _let_go(column)


def _let_go(column) -> None:
    base = column  # a mapped column: a view of np.frombuffer's array of a memoryview of the mmap (store.workdir)
    while base is not None and not isinstance(base, mmap.mmap):
        base = base.obj if isinstance(base, memoryview) else getattr(base, "base", None)
    if base is not None and hasattr(mmap, "MADV_DONTNEED"):
        base.madvise(mmap.MADV_DONTNEED)


def _columns(segments, field: str):
    """Each segment's column, its pages let go once the next is asked for (the kept rows of an index are mapped
    from the last catalog: digested and copied whole, they would all stay in RSS)."""
    for segment in segments:
        if len(segment):
            column = segment.column(field)
            yield column
            _let_go(column)


class ShardRows:
    """A new shard's catalog rows (Catalog.of_shard's) read from its stored columns one column at a time, so that
    a run of 10M documents never holds its shards' columns together: `read` gives a stored column; live is 1;
    added is this run, or (a rebuild) the run a document (id, sha) was first indexed in."""

    def __init__(self, read, rows: int, added: dict[tuple[str, str], int], run: int):
        self.read, self.rows, self.carried, self.run = read, rows, added, run

    def __len__(self) -> int:
        return self.rows

    @property
    def fields(self) -> tuple[str, ...]:  # in Catalog.of_shard's order
        return (*TEXT, *SHARD_NUMBERS, "live", "added")

    def column(self, field: str) -> np.ndarray:
        if field == "live":
            return np.ones(self.rows, np.int64)
        if field == "added":
            if not self.carried:
                return np.full(self.rows, self.run, np.int64)
            return Catalog.of_shard({f: self.read(f) for f in ("id", "sha", "size")}, self.carried,
                                    self.run).columns["added"]
        return self.read(field)


# A catalog as segments: Catalog or ShardRows, in order, each with len() and column(field) in stored form. The
# functions below go through them column by column, holding one segment's column at a time.


def text_widths(segments) -> dict[str, tuple[int, int]]:
    """For each text field, (the width its stored column takes: the widest segment's, as their concatenation
    would; the longest value, at least 1)."""
    widths = {}
    for f in TEXT:
        stored, longest = 1, 1
        for column in _columns(segments, f):
            stored, longest = max(stored, column.dtype.itemsize), max(longest, _longest(column))
        widths[f] = stored, longest
    return widths


def stored_widths(segments) -> dict[str, int]:
    """For each text field, the width its stored column takes (text_widths' first), from the segments' dtypes
    alone: the longest value is not looked for (it touches a byte of every row: 10M rows' pages)."""
    return {f: max([1, *(segment.column(f).dtype.itemsize for segment in segments if len(segment))]) for f in TEXT}


def _longest(column: np.ndarray) -> int:
    """The length of the longest value of a non-empty bytes column (values hold no trailing NUL)."""
    size = column.dtype.itemsize
    if column.view(np.uint8)[size - 1::size].any():
        return size
    return int(np.char.str_len(column).max())


def fingerprint(segments) -> str:
    """A digest of every row: the shingle stage key changes when any id, stat, hash or liveness does. A text
    column is digested as its stored buffer (fixed-width, NUL-padded UTF-8, which holds no trailing NUL)
    with its width, narrowed to the longest value so that equal rows give equal digests: no Python object per
    row. Segment by segment, the same digest as of their concatenation."""
    widths = text_widths(segments)
    rows = sum(map(len, segments))
    h = hashlib.blake2b(digest_size=16)
    for f in TEXT:
        width = widths[f][1] if rows else widths[f][0]
        h.update(b"%d:%d\1" % (rows, width))
        for column in _columns(segments, f):
            h.update(np.ascontiguousarray(column, f"S{width}").view(np.uint8))  # type: ignore[arg-type]
    for f in NUMBERS:
        for column in _columns(segments, f):
            h.update(np.ascontiguousarray(column, np.int64).view(np.uint8))  # type: ignore[arg-type]
    return h.hexdigest()


def summary(segments) -> dict:
    total = dict.fromkeys(("docs", "bytes", "shingles", "short", "replaced"), 0)
    for segment in segments:
        live = segment.column("live").astype(bool)
        shingles = segment.column("shingles")[live]
        total["docs"] += int(live.sum())
        total["bytes"] += int(segment.column("size")[live].sum())
        total["shingles"] += int(shingles.sum())
        total["short"] += int((shingles == 0).sum())
        total["replaced"] += int(segment.column("replaced")[live].sum())
    return total


def stored_columns(segments):
    """The columns to save (work.save_columns), each made segment by segment: text as UTF-8 bytes arrays as
    wide as the widest segment's, the liveness as int8 (as an index run's catalog.live.npy: read as bools without
    a copy, 10 MB at 10M rows, not 80), other numbers as int64; in the order of the first segment's fields (of the
    only one with rows, if one has)."""
    widths = stored_widths(segments)
    rows = sum(map(len, segments))
    full = [segment for segment in segments if len(segment)]
    for f in (full if len(full) == 1 else segments)[0].fields:  # in the order Catalog.concat would give
        dtype = np.dtype(f"S{widths[f]}") if f in TEXT else np.dtype(np.int8 if f == "live" else np.int64)
        yield f, dtype, rows, _columns(segments, f)


def fingerprint_after(previous: str, planned: Catalog, kept: Sequence[tuple[int, int]], patched: np.ndarray,
                      new) -> str:
    """The fingerprint of the catalog a run writes when it keeps stored rows, made from what changed: the last
    catalog (its record's key, which digests its fingerprint), the planned rows kept ((start, count) of each
    stored shard kept), their liveness (a bit a row), the rows planned patched (renamed or touched documents:
    their values now) and the new segments' rows, digested whole. Digesting every row again cost 1.35 CPU s a
    run at 10M rows. Equal fingerprints still mean equal catalogs (by induction over the runs); two runs that
    reach equal catalogs along different histories get different ones, which only costs a later stage's reuse."""
    h = hashlib.blake2b(digest_size=16)
    h.update(b"after %s\1" % previous.encode())
    for part in (np.asarray(kept, np.int64).reshape(-1, 2), np.asarray(patched, np.int64)):
        h.update(b"%d\1" % len(part))
        h.update(np.ascontiguousarray(part).view(np.uint8))  # type: ignore[arg-type]
    h.update(b"%d\1" % len(planned))
    h.update(np.packbits(planned.live).view(np.uint8))  # type: ignore[arg-type]
    h.update(fingerprint([planned.take(patched)]).encode() if len(patched) else b"-")
    h.update(fingerprint(new).encode())
    return h.hexdigest()


def summary_after(previous: dict, died: Catalog, new) -> dict:
    """summary() of a catalog from the last one's (previous), less the rows that died since (died: their rows as
    the last catalog held them, live), plus the new segments': no pass over the kept rows."""
    gone, added = summary([died]), summary(new)
    return {k: previous[k] - gone[k] + added[k] for k in previous}


def _concatenated(columns: list[np.ndarray]) -> np.ndarray:
    """np.concatenate, but bytes columns of different widths are copied into the widest (numpy's casting of each
    part to a common width is slow for a million ids)."""
    if columns[0].dtype.kind != "S":
        return np.concatenate(columns)
    joined = np.empty(sum(map(len, columns)), f"S{max(c.dtype.itemsize for c in columns)}")
    start = 0
    for column in columns:
        joined[start:start + len(column)] = column
        start += len(column)
    return joined


def shard_columns(records: list[dict]) -> dict:
    """A shard's document records as the columns a Catalog is made of (stored form: text as UTF-8 bytes)."""
    columns = {f: utf8_array([r[f] for r in records]) for f in TEXT}
    columns.update({f: np.array([int(r[f]) for r in records], np.int64) for f in SHARD_NUMBERS})
    return columns


@dataclasses.dataclass
class Plan:
    """What a run must do: the stored rows updated (live or dead, renamed or touched), and the items to shingle
    into new shards (with the ids wanted of each JSONL range, None for all)."""

    catalog: Catalog
    todo: list[tuple[Item, frozenset | None]]
    renamed: int = 0
    removed: int = 0
    patched: np.ndarray = dataclasses.field(default_factory=lambda: np.empty(0, np.int64))  # the rows claimed
    died: np.ndarray = dataclasses.field(default_factory=lambda: np.empty(0, np.int64))  # live before, not now
    runs: ItemRuns | None = None  # records: the item runs of the stored rows (item_runs), as the match used them


# (first row, rows, value) of each run of equal values of the item column (item_runs)
ItemRuns = tuple[np.ndarray, np.ndarray, np.ndarray]


def plan(stored: Catalog, items: Sequence[Item], source: SourceParams, runs: ItemRuns | None = None) -> Plan:
    """Match the listed items against the stored rows.

    A file whose id, size, mtime and inode are unchanged keeps its row (a JSONL range: its fingerprint digest).
    The rows of vanished or changed items are released; a changed item is then read for content hashes (only when
    one could match: same id, or the size of a released file) and each of its documents claims a released row
    with the same id and hash (touched, not changed), else one with the same hash (renamed). What is left is read
    and shingled into new shards, in the order listed. runs: the stored rows' item_runs, if kept (records: else
    the item column is read, 160 MB at 10M rows)."""
    if not len(stored):  # nothing stored: read everything
        return Plan(stored, [(item, None) for item in items])
    live = np.zeros(len(stored), bool)
    was_live = stored.live
    changed = []
    n: int | None  # a row number, or None where a lookup found none
    if source.records:
        if runs is None or int(runs[1].sum()) != len(stored):
            runs = item_runs([stored])
        starts, counts, digests = runs
        held = set(digests[np.logical_or.reduceat(was_live, starts)].tolist()) if len(starts) else set()
        again: set[bytes] = set()  # the ranges listed again whose rows hold a live one: those rows stay live
        for item in items:
            key = item_digest(item).encode()
            if key in held:
                again.add(key)
            else:
                changed.append(item)
        if again:
            live = np.repeat(np.fromiter((d in again for d in digests.tolist()), bool, len(digests)), counts)
            live &= was_live
    else:
        row_of = _live_rows_of(stored, was_live, items)
        listed = item_numbers(items)
        at = np.maximum(row_of, 0)
        same = (row_of >= 0) & (stored["size"][at] == listed[:, 0]) & (stored["mtime_ns"][at] == listed[:, 1]) \
            & (stored["inode"][at] == listed[:, 2])
        live[row_of[same]] = True
        messages: dict[str, list[int]] | None = None  # mbox path -> the rows of its messages (ids path#i)
        for i in np.flatnonzero(~same).tolist():  # new and changed files only: a Python step each
            item, n = items[i], (int(row_of[i]) if row_of[i] >= 0 else None)
            if n is None:  # a file of several documents? Its rows carry the file's mtime and inode, not its size
                if messages is None:
                    messages = _messages(stored, was_live)
                parts = messages.get(item.id, [])
                if parts and all(stored["mtime_ns"][m] == item.mtime_ns and stored["inode"][m] == item.inode
                                 for m in parts):
                    live[parts] = True
                    continue
            changed.append(item)
    released = np.flatnonzero(np.greater(was_live, live)).tolist()  # (live then, not now: one pass)
    result = Plan(stored, [])
    found: list[tuple[Item, str, str]] = []  # (item, id, sha) of the documents of changed items
    wanted: dict[str, set] = {}  # ids still to read, per item read for hashes
    if released:
        released_sizes = set(stored["size"][released].tolist())
        released_ids = {doc_id: n for n, doc_id in stored.ids_of(released).items()}
        for item in changed:
            if item.kind != "file" or item.id in released_ids or item.size in released_sizes:
                found.extend((item, doc_id, sha) for doc_id, sha in content_hashes(item, source))
        released_shas = stored.texts_of("sha", released)  # (not the whole column decoded: 10M rows)
        by_sha: dict[str, list[int]] = {}
        for n in released:
            by_sha.setdefault(released_shas[n], []).append(n)
        claimed: dict[str, int] = {}
        for _, doc_id, sha in found:  # the same id with the same content first (touched), then renames, by id
            n = released_ids.get(doc_id)
            if n is not None and released_shas[n] == sha and not live[n]:
                live[n], claimed[doc_id] = True, n
        for _, doc_id, sha in sorted(found, key=lambda f: f[1]):
            if doc_id not in claimed:
                n = next((n for n in by_sha.get(sha, ()) if not live[n]), None)
                if n is not None:
                    live[n], claimed[doc_id] = True, n
                    result.renamed += 1
        if claimed:
            columns = {f: (list(stored[f]) if f in TEXT else c.copy()) for f, c in stored.columns.items()}
            for item, doc_id, _ in found:
                n = claimed.get(doc_id)
                if n is not None:
                    columns["id"][n], columns["mtime_ns"][n], columns["inode"][n] = doc_id, item.mtime_ns, item.inode
                    columns["item"][n] = item_digest(item)
            result.catalog = Catalog(columns)
            result.patched = np.array(sorted(claimed.values()), np.int64)
        result.removed = int(len(released) - sum(live[n] for n in released))
        for item, doc_id, _ in found:
            if doc_id not in claimed:
                wanted.setdefault(item.id, set()).add(doc_id)
    read = {item.id for item, _, _ in found}
    for item in changed:
        if item.id not in read:
            result.todo.append((item, None))
        elif item.id in wanted:
            result.todo.append((item, frozenset(wanted[item.id]) if item.kind != "file" else None))
    released_rows = np.array(released, np.int64)
    result.died = released_rows[~live[released_rows]]
    # int8 (as the appended catalog stores it; written whole, int64): an int64 copy cost 80 MB at 10M rows
    result.catalog = result.catalog.with_columns(live=live.view(np.int8))
    result.runs = runs if source.records and not len(result.patched) else None  # (patched: items changed)
    return result


def item_runs(segments, first: ItemRuns | None = None) -> ItemRuns:
    """(first row, rows, value) of each run of equal values of the item column of a catalog given as segments
    (Catalog or ShardRows, in order): a JSONL or Parquet range's records are rows that follow each other, so the
    column is cut where it changes, with no Python object per row (10M records are ~2,500 ranges); kept beside
    the catalog, so that a run matches its listed ranges without reading the column (160 MB at 10M rows).
    A stored catalog is read segment by segment (never joined); first: the first segment's runs, known already.
    Runs that meet across segments with equal values are merged: the runs of the rows, however they are stored."""
    found, start = [], 0
    for s, segment in enumerate(segments):
        if s == 0 and first is not None:
            found.append(first)
        else:
            at = start
            for column in segment.parts("item") if isinstance(segment, Catalog) else [segment.column("item")]:
                lo, hi = (np.asarray(ends, np.int64) for ends in _value_runs(column))
                found.append((lo + at, hi - lo, column[lo]))
                at += len(column)
        start += len(segment)
    first_rows, rows = (np.concatenate([np.empty(0, np.int64), *(f[i] for f in found)]) for i in (0, 1))
    if not len(rows):
        return first_rows, rows, np.empty(0, "S1")
    value = _concatenated([f[2] for f in found if len(f[2])])
    cut = np.flatnonzero(np.r_[True, value[1:] != value[:-1]])  # (a few thousand values: compared as bytes)
    return first_rows[cut], np.add.reduceat(rows, cut), value[cut]


def _value_runs(column: np.ndarray) -> tuple[list[int], list[int]]:
    """(starts, ends) of the runs of equal values of a bytes column. Compared as 8-byte words where the width
    allows (a JSONL range's digest: 16 bytes), not as strings: 10M rows took 1 CPU s as strings."""
    if not len(column):
        return [], []
    size = column.dtype.itemsize
    if size % 8 == 0 and column.flags.c_contiguous:
        words = column.view(np.uint64).reshape(len(column), size // 8)
        change = words[1:, 0] != words[:-1, 0]
        for w in range(1, size // 8):
            change |= words[1:, w] != words[:-1, w]
    else:
        change = column[1:] != column[:-1]
    cuts = (np.flatnonzero(change) + 1).tolist()
    return [0, *cuts], [*cuts, len(column)]


def _live_rows_of(stored: Catalog, was_live: np.ndarray, items: Sequence[Item]) -> np.ndarray:
    """For each item, the live row with its id, or -1: the ids compared as UTF-8 bytes arrays (a million listed
    files against a million rows: no Python string or dict entry per row)."""
    rows = np.flatnonzero(was_live)
    keys = stored.id_bytes() if len(rows) == len(stored) else stored.id_bytes()[rows]  # (all live: no copy)
    if len(keys) > 1 and not (keys[1:] > keys[:-1]).all():  # rows of appended shards: sort them
        by = np.argsort(keys, kind="stable")
        rows, keys = rows[by], keys[by]
    listed = item_id_bytes(items)
    if not len(keys) or not len(listed):
        return np.full(len(items), -1, np.int64)
    at = np.minimum(np.searchsorted(keys, listed), len(keys) - 1)
    return np.where(keys[at] == listed, rows[at], -1).astype(np.int64)


def _messages(stored: Catalog, was_live: np.ndarray) -> dict[str, list[int]]:
    """The live rows of mbox messages (item column "mbox", id PATH#i) by the path of their mbox."""
    found: dict[str, list[int]] = {}
    column = stored.columns["item"]
    mbox = column == b"mbox" if isinstance(column, np.ndarray) else np.array([v == "mbox" for v in column], bool)
    rows = np.flatnonzero(was_live & mbox)
    for n, doc_id in stored.ids_of(rows.tolist()).items():
        found.setdefault(doc_id.rsplit("#", 1)[0], []).append(n)
    return found


# The binary files a run skipped, by id: (size, mtime_ns, inode) as listed. Kept beside the catalog (they hold no
# document, so they have no row in it), so that an unchanged one is not opened again by the next run.
Binary = dict[str, tuple[int, int, int]]


def skip_known_binary(items: Sequence[Item], known: Binary) -> tuple[Sequence[Item], Binary]:
    """The items to plan: all but the files known to be binary and unchanged since (same id, size, mtime and
    inode); and the known ones still there. One dict lookup per item, and none without known binary files."""
    if not known:
        return items, {}
    rest, still = [], {}
    for item in items:
        fingerprint = known.get(item.id)
        if fingerprint is not None and item.kind == "file" and fingerprint == (item.size, item.mtime_ns, item.inode):
            still[item.id] = fingerprint
        else:
            rest.append(item)
    return rest, still


def binary_columns(binary: Binary) -> dict:
    """The binary files as the columns they are saved as, in id order (so equal sets save equal bytes)."""
    ids = sorted(binary)
    numbers = np.array([binary[i] for i in ids], np.int64).reshape(len(ids), 3)
    return {"id": utf8_array(ids), "size": numbers[:, 0], "mtime_ns": numbers[:, 1], "inode": numbers[:, 2]}


def binary_of(columns: dict) -> Binary:
    ids = [v.decode("utf-8", "surrogatepass") for v in columns["id"].tolist()]
    return dict(zip(ids, zip(*(columns[f].tolist() for f in ("size", "mtime_ns", "inode")))))
