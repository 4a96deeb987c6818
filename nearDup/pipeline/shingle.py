"""Stage 1, shingle: list the inputs, read and shingle new and changed documents into new shards, and keep the
catalog of every stored document (store.catalog). Also the documents as records for the later stages (Docs).
"""
from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import asdict
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..config import (
    FORMAT,
    BandParams,
    ShingleParams,
    SignatureParams,
    SourceParams,
    digest,
)
from ..engine.progress import counter
from ..errors import InputError, WorkDirError
from ..kernels.shingle import prepare_word_tables
from ..store.catalog import (
    Catalog,
    IdsAscend,
    ItemRuns,
    ShardRows,
    binary_columns,
    binary_of,
    fingerprint,
    fingerprint_after,
    item_digest,
    item_runs,
    plan,
    shard_columns,
    skip_known_binary,
    stored_columns,
    summary,
    summary_after,
)
from ..store.manifest import ShingleRecord, ShingleStats
from ..store.workdir import StoredTable, WorkDir
from ..text.inputs import (
    SAME_FILE,
    Item,
    ListedFiles,
    PackedItems,
    cut_columns,
    cuts_of,
    is_pattern,
    list_items,
    parquet_files,
    partition,
    shards_matching,
    under,
)
from ..text.read import first_record_fields, format_notes, missing_extras_note, read_documents, time_limited_task
from ..text.shingles import shingle_documents
from ..wording import plural
from . import band, signature
from .driver import (
    PartitionTask,
    Runner,
    _files,
    _map_partitions,
    _up_to_date,
    fused_steps,
    part_starts,
    require,
    write_steps,
)

SHINGLE_FILES = ("docs.npz", "values.npy", "offsets.npy")
# An index run that reads at most this much runs its stages' tasks in its own process (engine.map light): about a
# second of one core for plain text, against the copy-on-write cost of forking workers from a large index's run
LIGHT_BYTES = 16 << 20


class ShingledShard(NamedTuple):
    """What a shingle task gives back besides its files: its documents (for the progress bar) and the stats of its
    done marker. Not its catalog columns: the client reads them back one at a time as it writes the catalog
    (10M documents' columns held at once were 1.1 GB, returned through a Dask client 3 GB)."""

    docs: int
    stats: dict


def shingle_partition(task: PartitionTask[ShingleParams]) -> ShingledShard:
    """Read, normalise, tokenise and shingle one partition; write its docs, values and offsets, then its marker.
    Under the per-file time limit of extractions, which runs it again without a file that hangs."""
    return time_limited_task(_read_and_shingle, task)


def _read_and_shingle(task: PartitionTask[ShingleParams]) -> ShingledShard:
    work = WorkDir(task.root)
    problems: dict = {}
    source = task.source
    assert source is not None  # a shingle task always has one

    def documents():
        # tidy=False: shingles are of words, which the blanks between them do not change (normalise collapses them)
        last, digest = None, ""
        for item, doc in read_documents(task.items, source, problems, task.cwd, cache=str(work.root / "extract"),
                                        tidy=False):
            if task.only is None or doc.id in task.only:
                if item is not last:  # a JSONL range's records share its item: digested once, not once a record
                    last, digest = item, item_digest(item)
                # a file's row keeps its format in the item column (empty for plain text: inspect, plan)
                yield doc, {"item": digest or doc.format, "inode": item.inode}

    records, values, offsets = shingle_documents(documents(), task.params, problems)
    columns = shard_columns(records)
    stats = {"docs": len(records), "bytes": sum(r["size"] for r in records), **problems}
    work.save_table(work.part("shingle", task.index, "docs.npz"), columns)
    work.save_array(work.part("shingle", task.index, "values.npy"), values)
    work.save_array(work.part("shingle", task.index, "offsets.npy"), offsets)
    work.mark_part_done("shingle", task.index, task.key, suffixes=SHINGLE_FILES, stats=stats)
    write_steps(work, task.index, task.then, (values, offsets))  # fused: the next stages' files for this shard
    return ShingledShard(len(records), stats)


CATALOG = "catalog.npz"  # the catalog's rows (its base, when index runs appended segments: catalog_files)
LIVE = "catalog.live.npy"  # with segments: every row's liveness, int8 (a run changes old rows' too)
# An index run that only adds rows and marks some dead (no shard dropped, no row renamed or touched) appends its
# new rows as a segment and writes the liveness, instead of rewriting the catalog (1.1 GB at 10M rows: 3 CPU s);
# past SEGMENTS_MAX segments, or any other change, the catalog is written whole again.
SEGMENTS_MAX = 16
BINARY = "binary.npz"  # the binary files skipped, with their fingerprints (catalog.binary_columns)
CUTS = "cuts.npz"  # how each JSONL file was cut into items (text.inputs.Cut), reused while the file is unchanged
# records: what a run knows of the catalog's columns without reading them again: the runs of its item column
# (catalog.item_runs) and whether its live ids ascend (catalog.IdsAscend)
ITEMS = "items.npz"
SKIPPED_NOUNS = {"hidden": ("hidden entry", "hidden entries"), "symlink": ("symlink",), "excluded": ("excluded file",),
                 "special": ("special file",),
                 SAME_FILE: ("path of a file already listed", "paths of files already listed")}
SKIPPED_WHY = {"special": " (FIFO, socket, device)", SAME_FILE: " (same file)"}


def shingle_content(params: ShingleParams, source: SourceParams) -> dict:
    """What decides a shard's bytes: shingle parameters and how records are read (an index keeps them fixed)."""
    formats = {k: list(v) if isinstance(v, tuple) else v for k, v in source.record().items()
               if k in ("formats", "html", "parquet")}  # only when not the defaults: keys stay as they were
    return {"params": asdict(params), "jsonl": source.jsonl, "id_field": source.id_field,
            "text_field": source.text_field, "strict": source.strict, **formats}


def run(runner: Runner, args: list[str], source: SourceParams, params: ShingleParams, stdin=None,
            references: tuple[str, ...] = (), rebuild: bool = False,
            then: tuple[SignatureParams, BandParams] | None = None) -> ShingleRecord:
    """Bring the shards up to the inputs: only new and changed documents are read and shingled, into new shards;
    deleted ones are marked dead. references: folders or files whose documents are always keepers; rebuild:
    read every document again, into new shards. then: the parameters of the signature and band stages about to
    run, whose files for the new shards are then written by the same task, from the sets still in memory (one
    task per shard instead of three, and no reading back)."""
    work = runner.work
    previous = work.manifest().shingle
    # with nothing stored there is nothing to match: a folder's first partitions are shingled while it is listed
    spooled: set[str] = set()  # the copies in inputs/ this listing reads: the others are garbage once it commits

    def spool(*given, **options) -> str:
        path = work.spool(*given, **options)
        spooled.add(os.path.basename(path))
        return path

    listing = list_items([*args, *references], source, stdin, spool=spool, lazy=previous is None,
                                skip=(str(work.root),),  # a work dir inside an input folder holds no documents
                                progress=counter(getattr(runner.engine, "progress", False), "listing", "file"),
                                columns=previous is not None,  # matched by columns against the stored catalog
                                cuts=_stored_cuts(runner, previous) if previous is not None and source.jsonl else None)
    inputs = [{"path": p, "reference": i >= len(listing.args) - len(references)} for i, p in enumerate(listing.args)]
    nothing = InputError(f"{' '.join(args)}: no documents found (folder empty, or every file hidden or excluded)")
    streamed = not isinstance(listing.items, (list, ListedFiles))
    if not streamed and not listing.items:
        raise nothing
    content = shingle_content(params, source)
    base = previous if previous is not None and previous.content == content else None
    stored = _stored_catalog(runner, previous) if previous is not None else Catalog.empty()
    known = _stored_binary(runner, base) if base is not None and not rebuild and not streamed else {}
    items, binary = skip_known_binary([] if streamed else listing.items, known)  # not opened again
    runs, ascend = _stored_items(runner, base) if base is not None and source.records else (None, None)
    todo = plan(stored if base is not None else Catalog.empty(), items, source, runs=runs)
    if (base is not None and not rebuild and not todo.todo and todo.catalog.same(stored)
            and base.inputs == inputs and len(binary) == len(known) and base.cwd == os.getcwd()
            and (base.links or {}) == listing.links):
        runner.log(f"shingle: up to date ({_shingle_summary(base)})")
        _report_problems(runner, base)
        return base
    this_run = (previous.run if previous is not None else 0) + 1
    carried: dict = {}  # (id, sha) -> the run a document came in, kept through a rebuild
    live = int(todo.catalog.live.sum())
    if base is None or rebuild or len(todo.catalog) - live > max(live, 1000):  # (or mostly dead rows) rebuild
        carried = {(stored.ids[n], stored["sha"][n]): int(stored["added"][n])
                   for n in np.flatnonzero(stored.live).tolist()}
        if base is not None:  # planned against the stored rows: plan again from nothing
            base, todo = None, plan(Catalog.empty(), items, source)
    kept = _live_shards(base, todo.catalog.live) if base is not None else Shards()
    ranges = list(zip(kept.starts, kept.docs))  # (start, count) of the stored shards kept
    catalog = (todo.catalog if sum(kept.docs) == len(todo.catalog) else todo.catalog.take(_rows_of(ranges))
               ) if kept.starts else Catalog.empty()
    next_shard = previous.next_shard if previous is not None else 0
    new = NewPartitions(listing.items if streamed else (item for item, _ in todo.todo), source, params, content,
                        next_shard, {item.id: ids for item, ids in todo.todo})
    fused = ((signature.STAGE, then[0]), (band.STAGE, then[1])) if then is not None else ()
    reused, shingled = _map_partitions(
        runner, "shingle", shingle_partition, new.shards, new.keys, SHINGLE_FILES,
        lambda i: PartitionTask(str(work.root), new.shards[i], new.keys[i], params, new.parts[i], source,
                                new.only[i], then=fused_steps(runner, fused, new.keys[i], new.shards[i])),
        sizes=new.bytes, unit="B", nbytes=new.bytes, stream=iter(new),
        light=previous is not None and not streamed and _read_bytes(todo.todo) <= LIGHT_BYTES)
    if not new.parts and streamed:
        raise nothing
    # the catalog: the kept rows, then the new shards' rows read back a column at a time (never joined in memory)
    totals: dict = {}
    added = _new_shards(work, new, shingled, kept, binary, carried, this_run, totals)
    segments: list = [catalog, *added]
    del shingled
    if len(catalog):  # stored rows kept: their fingerprint and totals from the last run's and what changed
        assert base is not None
        rows = fingerprint_after(base.key, todo.catalog, ranges, todo.patched, added)
        last = load_catalog(work, base)  # as stored: the rows that died were live in it
        # (live then, not now): the plan's, unless rows of damaged shards were marked dead before it (a pass over
        # every row's liveness, 0.02 CPU s at 10M, otherwise)
        died = last.take(todo.died if last is stored else np.flatnonzero(np.greater(last.live, todo.catalog.live)))
        totals.update(summary_after(_summary_of(base.stats), died, added))
    else:
        rows = fingerprint(segments)
        totals.update(summary(segments))
    totals.update(skipped=listing.skipped, removed=todo.removed, renamed=todo.renamed,  # (kept rows: older runs')
                  added=sum(int(((s.column("added") == this_run) & (s.column("live") != 0)).sum()) for s in added))
    if binary:  # every binary file the inputs hold now, found by this run or an earlier one
        totals["binary"] = len(binary)
    key = digest("shingle", kept.keys, inputs, rows, *([sorted(binary.items())] if binary else []))
    tables = catalog_files(base) if base is not None and len(catalog) and catalog is todo.catalog \
        and not len(todo.patched) else []  # (catalog is todo.catalog: every stored row kept, in place)
    if base is not None and 0 < len(tables) <= SEGMENTS_MAX and key[:12] != base.key[:12]:  # append
        for name in tables:  # kept as they are: the same files under this run's key
            work.link(work.output("shingle", name, base.key), work.output("shingle", name, key))
        if sum(map(len, added)):
            tables.append(_catalog_segment(len(tables)))
            work.save_columns(work.output("shingle", tables[-1], key), stored_columns(added))
        work.save_array(work.output("shingle", LIVE, key),
                        np.concatenate([catalog.live, *(s.column("live") != 0 for s in added)]).view(np.int8))
        tables.append(LIVE)
    else:  # a catalog of every row: the first, or rows renumbered (a shard dropped), patched or too many segments
        work.save_columns(work.output("shingle", CATALOG, key), stored_columns(segments))
        tables = [CATALOG]
    if binary:
        work.save_table(work.output("shingle", BINARY, key), binary_columns(binary))
    if listing.cuts:  # complete now: a streamed listing is consumed by the shingle tasks
        work.save_table(work.output("shingle", CUTS, key), cut_columns(listing.cuts))
    # records: the stored rows' item runs as the plan had them (unless rows moved), then the new shards'
    runs = item_runs(segments, first=todo.runs if catalog is todo.catalog else None) if source.records else None
    if catalog is not todo.catalog or len(todo.patched) or ascend is None or ascend[0] != len(catalog):
        ascend = None  # the rows it vouched for renumbered or renamed
    del segments, catalog
    _CATALOGS.clear()  # the next load maps the new file
    record = ShingleRecord(key=key, params=params, source=source, content=content, inputs=inputs, cwd=os.getcwd(),
                           shard_keys=kept.keys, shard_numbers=kept.numbers, shard_docs=kept.docs,
                           shard_bytes=kept.bytes, run=this_run, next_shard=next_shard + len(new.parts),
                           files=_files(work, "shingle", key, *tables, *([BINARY] if binary else []),
                                        *([CUTS] if listing.cuts else [])),
                           stats=ShingleStats.from_json(totals), links=listing.links or None,
                           spooled=sorted(spooled) if spooled or (work.root / "inputs").is_dir() else None)
    first = listing.items[:1] if not streamed else [next(iter(new.parts[0]))] if new.parts else []
    ascend = _check_documents(runner, record, params, args, first if source.records else (), ascend)
    if runs is not None:  # (written once the ids are checked: the check's finding goes in)
        work.save_table(work.output("shingle", ITEMS, key), {
            **dict(zip(("start", "rows", "item"), runs)), "ascend": np.array(ascend[:1] if ascend else [], np.int64),
            "last_id": np.array([ascend[1]] if ascend and ascend[1] is not None else [], np.bytes_)})
        record = dataclasses.replace(record, files={**record.files, **_files(work, "shingle", key, ITEMS)})
    work.record_stage("shingle", record)
    runner.log(f"shingle: {_shingle_summary(record)}" + (f"; {reused} of {plural(len(new.parts), 'new partition')} "
                                                          "reused from an interrupted run" if reused else ""))
    _report_problems(runner, record)
    return record


def _summary_of(stats: ShingleStats) -> dict:
    """A record's stats as catalog.summary() gave them."""
    return {"docs": stats.docs, "bytes": stats.bytes, "shingles": stats.shingles, "short": stats.count("short"),
            "replaced": stats.count("replaced")}


def _read_bytes(todo: list[tuple[Item, frozenset | None]]) -> int:
    """At most how many bytes the items to read hold (a JSONL range: its own bytes)."""
    return sum(item.end - item.start if item.kind == "jsonl" else item.size for item, _ in todo)


@dataclasses.dataclass
class Shards:
    """The shards a shingle record will list, in order: their numbers, keys, documents and bytes, and (for the
    stored shards kept) the catalog row of their first document."""

    numbers: list[int] = dataclasses.field(default_factory=list)
    keys: list[str] = dataclasses.field(default_factory=list)
    docs: list[int] = dataclasses.field(default_factory=list)
    bytes: list[int] = dataclasses.field(default_factory=list)
    starts: list[int] = dataclasses.field(default_factory=list)


def _live_shards(base: ShingleRecord, live: np.ndarray) -> Shards:
    """The stored shards that still hold a live document (live: per catalog row); the others are dropped, and the
    global numbers of the documents after them shift down. (Which shards hold one: a reduction over the rows, not a
    Python step and an array per shard: 2,500 shards at 10M rows.)"""
    docs = np.asarray(base.shard_docs, np.int64)
    starts = part_starts(base)
    held = np.zeros(len(docs), bool)
    # (reduceat of an empty shard would give its next row's value; live holds no row when the catalog was damaged)
    full = np.flatnonzero((docs > 0) & (starts < len(live)))
    if len(full):
        held[full] = np.logical_or.reduceat(np.asarray(live, bool), starts[full])
    kept = Shards()
    for i in np.flatnonzero(held).tolist():
        kept.numbers.append(base.shard_numbers[i])
        kept.keys.append(base.shard_keys[i])
        kept.docs.append(base.shard_docs[i])
        kept.bytes.append(base.shard_bytes[i])
        kept.starts.append(int(starts[i]))
    return kept


def _rows_of(ranges: list[tuple[int, int]]) -> np.ndarray:
    """The rows of (start, count) ranges, in order."""
    return np.concatenate([np.arange(start, start + count, dtype=np.int64) for start, count in ranges])


class NewPartitions:
    """The new partitions of a run, made as the listing completes each (iterating yields their indices, for the
    engine to submit their tasks while the listing goes on): their items, shard numbers, keys, bytes, and for JSONL
    the ids wanted of each (the rest of its records are stored already)."""

    def __init__(self, items, source: SourceParams, params: ShingleParams, content: dict, first_shard: int,
                 wanted: dict):
        self.items, self.source, self.params, self.content = items, source, params, content
        self.first_shard, self.wanted = first_shard, wanted
        self.parts: list[PackedItems] = []
        self.shards: list[int] = []
        self.keys: list[str] = []
        self.bytes: list[int] = []
        self.only: list[frozenset | None] = []

    def __iter__(self):
        for i, part in enumerate(partition(self.items, self.source)):
            if i == 0 and self.params.unit == "word":
                prepare_word_tables()  # built once, before the first task forks the workers that inherit them
            wanted = [self.wanted.get(item.id) for item in part]
            # ids are wanted only of JSONL items, each alone in its part (with JSONL input every item is one)
            restriction = frozenset().union(*wanted) if any(w is not None for w in wanted) else None  # type: ignore[arg-type]
            self.parts.append(PackedItems(part))
            self.keys.append(digest("shingle", FORMAT, self.content, self.parts[-1].fingerprint(),
                                    sorted(restriction) if restriction is not None else None))
            self.shards.append(self.first_shard + i)
            self.only.append(restriction)
            self.bytes.append(self.parts[-1].bytes())
            yield i


def _new_shards(work: WorkDir, new: NewPartitions, shingled: dict, kept: Shards, binary: dict, carried: dict,
                this_run: int, totals: dict) -> list[ShardRows]:
    """Append the new shards to kept (in place) and return their catalog rows (read from their files when asked);
    totals gains the problems their tasks counted, binary the binary files they found. A shard finished by an
    interrupted run has its done marker read back."""
    added = []
    for i, (n, key) in enumerate(zip(new.shards, new.keys)):
        done = shingled[i].stats if i in shingled else work.part_done("shingle", n, key, SHINGLE_FILES)
        assert done is not None  # _map_partitions ran every shard not done
        # mapped: a column's pages are read once per pass and let go with it (no copy, and no CRC: the shard's
        # files were checked whole by part_done, by size)
        added.append(ShardRows(functools.partial(StoredTable(work.part("shingle", n, "docs.npz"), "shingle").read,
                                                 mmap=True), done["docs"], carried, this_run))
        binary.update(_binary_found(new.parts[i], done.get("binary_ids", ())))
        for name, value in done.items():
            if name == "messages":
                totals.setdefault("messages", []).extend(value)
            elif isinstance(value, int) and name not in ("docs", "bytes"):
                totals[name] = totals.get(name, 0) + value
        kept.numbers.append(n)
        kept.keys.append(key)
        kept.docs.append(len(added[-1]))
        kept.bytes.append(done["bytes"])
    return added


def _catalog_segment(n: int) -> str:
    return f"catalog.s{n:03d}.npz"


def catalog_files(record: ShingleRecord) -> list[str]:
    """The catalog's stored tables, in row order: its base, then the segments index runs appended."""
    return [CATALOG, *sorted(name for name in record.files if name.startswith("catalog.s"))]


_CATALOGS: dict[tuple | None, Catalog] = {}  # loaded once per process: several stages of a run read the same catalog


def load_catalog(work: WorkDir, record: ShingleRecord) -> Catalog:
    paths = [work.output("shingle", name, record.key) for name in catalog_files(record)]
    live = work.output("shingle", LIVE, record.key) if LIVE in record.files else None
    version = _catalog_version([*paths, *([live] if live else [])])
    if version is None or version not in _CATALOGS:
        # mapped: a stage touches only the columns it reads (10M rows: 1.1 GB in all, 80 MB a number column)
        _CATALOGS.clear()
        segments = [work.load_table(path, "shingle", mmap=True) for path in paths]
        _CATALOGS[version] = Catalog(segments[0]) if live is None else \
            Catalog.joined(segments, work.load_array(live, "shingle", mmap=True))
    return _CATALOGS[version]


def _catalog_version(paths: list[Path]) -> tuple | None:
    try:
        return tuple((str(path), st.st_size, st.st_mtime_ns) for path in paths for st in [path.stat()])
    except OSError:
        return None


def _stored_catalog(runner: Runner, record: ShingleRecord) -> Catalog:
    """The stored catalog, with the rows of a damaged shard marked dead (their documents are read again), or an
    empty one when the catalog itself is damaged (everything is read again)."""
    work = runner.work
    if _up_to_date(work, ShingleRecord, record.key, runner.log) is None:
        return Catalog.empty()
    catalog = load_catalog(work, record)
    start, live = 0, None  # the stored liveness copied only when a shard is damaged (10M rows)
    for n, key, count in zip(record.shard_numbers, record.shard_keys, record.shard_docs):
        if not work.part_known("shingle", n, key, SHINGLE_FILES):
            runner.log(f"warning: {work.part('shingle', n, '*')} has a missing or truncated file; reading its "
                       f"documents again")
            live = catalog["live"].copy() if live is None else live
            live[start:start + count] = 0
        start += count
    return catalog if live is None else catalog.with_columns(live=live)


def _stored_binary(runner: Runner, record: ShingleRecord) -> dict:
    """The binary files the stored record skipped (none if it kept no list, or the list is damaged: then they
    are read again)."""
    if BINARY not in record.files or _up_to_date(runner.work, ShingleRecord, record.key) is None:
        return {}
    try:
        return binary_of(runner.work.load_table(runner.work.output("shingle", BINARY, record.key), "shingle"))
    except (WorkDirError, KeyError):
        return {}


def _stored_items(runner: Runner, record: ShingleRecord) -> tuple[ItemRuns | None, IdsAscend | None]:
    """The item runs of the stored catalog and what the last check of its ids found (none if it kept none, as
    before they were kept, or they are damaged: then the plan reads its item column, the check every id)."""
    if ITEMS not in record.files:
        return None, None
    try:
        table = runner.work.load_table(runner.work.output("shingle", ITEMS, record.key), "shingle")
        rows, last = table["ascend"].tolist(), table["last_id"].tolist()
        return (table["start"], table["rows"], table["item"]), ((rows[0], last[0] if last else None) if rows
                                                                else None)
    except (WorkDirError, KeyError, IndexError):
        return None, None


def _stored_cuts(runner: Runner, record: ShingleRecord) -> dict:
    """The JSONL files' cuts of the stored record (none if it kept none, or they are damaged: then the files are
    read for their newlines again)."""
    if CUTS not in record.files:
        return {}
    try:
        return cuts_of(runner.work.load_table(runner.work.output("shingle", CUTS, record.key), "shingle"))
    except (WorkDirError, KeyError, ValueError):
        return {}


def _binary_found(part: PackedItems, ids) -> dict:
    """{id: (size, mtime_ns, inode)} of the binary files a new partition found, as they were listed."""
    if not ids:
        return {}
    wanted = set(ids)
    return {item.id: (item.size, item.mtime_ns, item.inode) for item in part if item.id in wanted}


def _check_documents(runner: Runner, record: ShingleRecord, params: ShingleParams, args: list[str], items=(),
                     known: IdsAscend | None = None) -> IdsAscend | None:
    """Stop when there is nothing to pair; items: the JSONL items, whose first record names its fields when
    the --id-field or --text-field given is not one of them. Records: their ids must be distinct (known: what
    the last check found of the first rows); returns whether they ascend (Catalog.ascend)."""
    stats, source = record.stats, record.source
    where = " ".join(args)
    if not stats.docs and items:
        fields = first_record_fields(items[0])
        missing = [(option, field) for option, field in (("--id-field", source.id_field),
                                                         ("--text-field", source.text_field))
                   if fields is not None and field not in fields]
        if missing:
            option, field = missing[0]
            raise InputError(f"{where}: no record has the field {field!r} ({option}); the first record's fields are "
                             f"{', '.join(map(repr, fields or ())) or 'none'}: pass {option} with one of them")
    if not stats.docs:
        bad = stats.count("bad_lines")  # every record without a usable id or a string text: say why, once
        why = f"; {plural(bad, 'bad record')} skipped, the first: {(stats.messages or ['?'])[0]}" if bad else ""
        raise InputError(f"{where}: no readable text documents (binary: {stats.count('binary')}, unreadable: "
                         f"{stats.count('unreadable') + stats.count('vanished')}){why}")
    if "short" in stats.rest and stats.docs == stats.count("short"):
        raise InputError(f"{where}: no document is long enough for one {params.k}-{params.unit} shingle; "
                         f"lower -k or use --unit char")
    if source.records:
        catalog = load_catalog(runner.work, record)
        if not catalog.distinct_live_ids(known):  # then which: a Python string per row, on this rare path only
            ids = [catalog.ids[n] for n in np.flatnonzero(catalog.live)]
            seen, dup = set(), []
            for i in ids:
                if i in seen and i not in dup:
                    dup.append(i)
                seen.add(i)
            raise InputError(f"{where}: duplicate ids in field {source.id_field!r}: "
                             f"{', '.join(map(repr, dup[:5]))}{' ...' if len(dup) > 5 else ''}; "
                             f"ids must be unique")
        catalog.let_go()  # the ids and liveness of every row: out of the client's RSS until a stage reads them
        return catalog.ascend
    return None


def _shingle_summary(record: ShingleRecord) -> str:
    s = record.stats
    shingle = f"{record.params.k}-{record.params.unit} shingle"
    bad = "bad Parquet row" if record.source.parquet else "bad JSONL line"
    text = (f"{plural(s.docs, 'document')}, {s.bytes / 1e6:.1f} MB, {plural(s.shingles, shingle)} in "
            f"{plural(len(record.shard_keys), 'partition')}")
    notes = [text for k, text in (
        ("short", f"{s.count('short')} too short for one shingle (kept, never paired)"),
        ("binary", f"{plural(s.count('binary'), 'binary file')} skipped"),
        ("replaced", f"{s.count('replaced')} with invalid UTF-8 replaced"),
        ("bad_lines", f"{plural(s.count('bad_lines'), bad)} skipped")) if s.count(k)]
    notes += format_notes(s.rest)
    notes += [f"{plural(n, *SKIPPED_NOUNS.get(kind, (kind,)))} skipped{SKIPPED_WHY.get(kind, '')}"
              for kind, n in (s.skipped or {}).items() if n]
    changes = [f"{s.count(k)} {k}" for k in ("added", "removed", "renamed") if s.count(k)]
    if changes and s.rest.get("added") != s.docs:
        notes.append("this run: " + ", ".join(changes))
    return text + ("; " + "; ".join(notes) if notes else "")


def _report_problems(runner: Runner, record: ShingleRecord) -> None:
    for message in record.stats.messages or ():
        runner.log(f"warning: {message}")
    if (note := missing_extras_note(record.stats.rest)) is not None:
        runner.log(f"warning: {note}")
    runner.soft_errors += record.stats.count("unreadable") + record.stats.count("vanished")


class Docs:
    """The catalog's rows as document records, docs[n] for global number n (dead rows too: `live` says which
    documents exist now), each with `arg` (index of the argument it was found under) and `reference` (found under a
    --reference path). Records are made when asked for: a group needs a few of 100,000."""

    def __init__(self, catalog: Catalog, inputs: list[dict], cwd: str = "", links: dict | None = None,
                 source: SourceParams | None = None):
        self.catalog, self.inputs, self.cwd, self.links = catalog, inputs, cwd, links or {}
        self.prefixes = [(p["path"] if p["path"].endswith("/") else p["path"] + "/") for p in inputs]
        references = [p["path"] for p in inputs if p["reference"]]
        # a reference may lie inside an input folder, be spelled otherwise, or come first: resolved paths decide
        self.is_reference = under(references, cwd)
        # records (JSONL, Parquet) have ids, not paths: theirs is a reference when the file it came from is one,
        # known by the (inode, mtime) its rows keep of that file
        self.reference_files = _record_files(references, cwd, source) if source and source.records else set()

    def __len__(self) -> int:
        return len(self.catalog)

    def __getitem__(self, n: int) -> dict:
        doc = self.catalog.row(n)
        arg = next((i for i, p in enumerate(self.inputs) if doc["id"] == p["path"]
                    or doc["id"].startswith(self.prefixes[i])), 0)
        doc["arg"] = arg
        doc["reference"] = ((doc["inode"], doc["mtime_ns"]) in self.reference_files if doc.get("item")
                            else self.is_reference(doc["id"]))
        doc["path"] = os.path.join(self.cwd, doc["id"])  # as scanned (relative ids are relative to the scan's cwd)
        if doc["id"] in self.links:
            doc["links"] = self.links[doc["id"]]  # listed symbolic links to it (--follow-links)
        return doc

    def __iter__(self):
        return (self[n] for n in range(len(self)))

    def live(self) -> list[dict]:
        return [self[n] for n in np.flatnonzero(self.catalog.live).tolist()]


def load_docs(work: WorkDir, shingle_record: ShingleRecord | None = None) -> Docs:
    record = shingle_record or require(work, ShingleRecord)
    return Docs(load_catalog(work, record), record.inputs, record.cwd or "", record.links, record.source)


def _record_files(references: list[str], cwd: str, source: SourceParams) -> set[tuple[int, int]]:
    """(inode, mtime_ns) of the record files under the --reference paths (as the catalog's rows of their records
    keep them); files that are gone since are left out, so their records are no longer references."""
    found: set[tuple[int, int]] = set()
    for path in (p if os.path.isabs(p) else os.path.join(cwd, p) for p in references if p != "-"):
        try:  # a stat of each file, as its rows keep it (text.inputs: a compressed file's own, not its copy's)
            files = (shards_matching(path) if is_pattern(path) else
                     parquet_files(path) if source.parquet else [path])
            found.update((st.st_ino, st.st_mtime_ns) for st in map(os.stat, files))
        except (InputError, OSError):  # a reference that has vanished: its records can no longer be told apart
            continue
    return found
