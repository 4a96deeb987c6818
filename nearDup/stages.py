"""The five stages: each reads its input through the store, computes with the kernels via the engine, writes back.

Each stage has a key: a digest of its name, the data format, its parameters and the keys of what it consumes
(for a shingle shard, the fingerprints of its inputs; for the shingle stage, its shards and its catalog). Keys exist
per shard and per stage. A stage whose stored key equals the key it would compute is skipped; a shard whose done
marker carries its key is not recomputed, so an interrupted stage resumes where it stopped and gives the same bytes.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any, Generic, NamedTuple, NoReturn, TypeVar

import numpy as np

from . import cache, corpus
from .catalog import Catalog, binary_columns, binary_of, item_digest, plan, shard_columns, skip_known_binary
from .config import (
    DEFAULT_THRESHOLD,
    FORMAT,
    BandParams,
    CandidateParams,
    ClusterParams,
    ShingleParams,
    SignatureParams,
    SourceParams,
    VerifyParams,
    digest,
)
from .engine import Engine, counter
from .errors import InputError, ParameterError, WorkDirError
from .groups import KeeperRules, build_groups
from .kernels import lsh, minhash, sets
from .kernels.shingle import CodePointHasher, finish_word, kgram_hashes, prepare_word_tables, word_hashes, word_state
from .output import plural
from .store import STAGES, WorkDir

SHINGLE_FILES = ("docs.npz", "values.npy", "offsets.npy")
VERIFY_CHUNK = 20_000  # candidate pairs per verification task, at most
VERIFY_TASKS = 8  # and at least this many tasks when there are VERIFY_TASKS * MIN_VERIFY_CHUNK pairs or more
MIN_VERIFY_CHUNK = 1_000
P = TypeVar("P")  # a stage's parameters (ShingleParams, SignatureParams, BandParams)


@dataclasses.dataclass
class Runner:
    """What every stage needs: the work dir, an engine, and where to say what happened (stderr)."""

    work: WorkDir
    engine: Engine
    log: Callable[[str], None]
    soft_errors: int = 0  # problems that let the run finish but make the exit status 2 (unreadable files)
    ahead: set = dataclasses.field(default_factory=set)  # (stage, shard) done by an earlier stage's task this run


# ---------------------------------------------------------------------------------------------- chain checks

def require(work: WorkDir, name: str, consumer: str | None = None) -> dict:
    """The stored record of stage `name`, after checking that it and every stage before it are present and
    consistent: each record's upstream key must be the key of the stage before it. The error names the stages to
    re-run, up to the consumer (the stage about to read `name`'s result)."""
    stages = work.read_manifest()["stages"]
    upto = STAGES.index(consumer or name)
    previous: dict | None = None
    for i, stage in enumerate(STAGES[:STAGES.index(name) + 1]):
        record = stages.get(stage)
        if record is None:
            what = " ".join("shingle PATH..." if s == "shingle" else s for s in STAGES[i:upto + 1])
            raise WorkDirError(f"{work.root}: the {stage} stage has not run; run `neardup -w {work.root} {what}`")
        if previous is not None and record.get("upstream") != previous["key"]:
            raise WorkDirError(f"{work.root}: the {stage} stage is out of date (the {STAGES[i - 1]} stage changed "
                               f"since); re-run `neardup -w {work.root} {' '.join(STAGES[i:upto + 1])}`")
        previous = record
    assert previous is not None  # the loop ran at least once: name is a stage
    return previous


def _up_to_date(work: WorkDir, name: str, key: str, log: Callable[[str], None] | None = None) -> dict | None:
    """The stage's record if it was made with this key and the files it lists are intact (present, same size)."""
    record = work.read_manifest()["stages"].get(name)
    if record is None or record.get("key") != key:
        return None
    for file, size in record.get("files", {}).items():
        path = work.output(name, file, key)
        if not path.exists() or path.stat().st_size != size:
            if log is not None:
                log(f"warning: {path} is missing or truncated; recomputing the {name} stage")
            return None
    return record


def _begin(runner: Runner, name: str, params, *extra) -> tuple[dict, str, dict | None]:
    """For a stage computed as a whole: the record it consumes (checked), its key, and its stored record if that
    is up to date."""
    upstream = require(runner.work, STAGES[STAGES.index(name) - 1], consumer=name)
    key = digest(name, FORMAT, params, upstream["key"], *extra)
    return upstream, key, _up_to_date(runner.work, name, key, runner.log)


def _files(work: WorkDir, stage: str, key: str, *names: str) -> dict:
    """Sizes of a stage's output files, kept in its record so that a damaged file is noticed."""
    return {name: work.output(stage, name, key).stat().st_size for name in names}


def part_starts(shingle_record: dict) -> np.ndarray:
    """Global number of each partition's first document."""
    counts = np.asarray(shingle_record["docs"], dtype=np.int64)
    return np.r_[0, np.cumsum(counts)[:-1]].astype(np.int64)


class PartitionArrays:
    """Lazily memory-mapped per-partition arrays of one stage (what `sets.gather_*` index into): item p is the
    arrays of the p-th listed shard, shard number shards[p]."""

    def __init__(self, work: WorkDir, stage: str, suffixes: tuple[str, ...], shards):
        self.work, self.stage, self.suffixes, self.shards = work, stage, suffixes, shards
        self.cache: dict[int, tuple | np.ndarray] = {}

    def __getitem__(self, p: int):
        if p not in self.cache:
            arrays = tuple(self.work.load_array(self.work.part(self.stage, self.shards[p], s), self.stage, mmap=True)
                           for s in self.suffixes)
            self.cache[p] = arrays if len(arrays) > 1 else arrays[0]
        return self.cache[p]


def _resolved(task, **fields) -> None:
    """Set fields of a frozen task as it is made. Tasks carry absolute paths, resolved where they are made (the
    client): a worker of a Dask cluster runs in another working directory."""
    for name, value in fields.items():
        object.__setattr__(task, name, value)


def _absolute(task, *names: str) -> None:
    """Make the named path fields of a frozen task absolute (see _resolved)."""
    _resolved(task, **{name: os.path.join(os.getcwd(), getattr(task, name)) for name in names})


def _map_partitions(runner: Runner, stage: str, fn, shards: list[int], keys: list[str], files: tuple[str, ...],
                    make_task, sizes=None, unit="part", docs=None, nbytes=None, stream=None) -> tuple[int, dict]:
    """Run fn over the shards whose done marker is missing or stale (make_task(i) for the i-th listed shard);
    returns how many were reused and {i: fn's result} of the shards run. docs and nbytes per shard feed the
    progress bar's rates. stream: an iterator of shard indices i whose lists (shards, keys, sizes...) it fills as
    it goes; the tasks are then submitted as it yields them."""
    work = runner.work
    per_part = {name: values for name, values in (("sizes", sizes), ("docs", docs), ("nbytes", nbytes))
                if values is not None}
    picked: dict[str, list] = {name: [] for name in per_part}
    ran = []

    def todo():
        for i in (stream if stream is not None else range(len(keys))):
            if work.part_done(stage, shards[i], keys[i], files) is not None:
                continue
            if work.part_done(stage, shards[i], keys[i], ()) is not None:  # finished once, but a file was lost
                runner.log(f"warning: {work.part(stage, shards[i], '*')} has a missing or truncated file; "
                           f"recomputing it")
            for name, values in per_part.items():
                picked[name].append(values[i])
            ran.append(i)
            yield make_task(i)

    results = runner.engine.map(fn, todo() if stream is not None else list(todo()), desc=stage, unit=unit, **picked)
    return len(keys) - len(ran) - sum((stage, n) in runner.ahead for n in shards), dict(zip(ran, results))


# ---------------------------------------------------------------------------------------------- 1. shingle

@dataclasses.dataclass(frozen=True)
class PartitionTask(Generic[P]):
    """One partition's work for a worker (any engine): where the work dir is, which shard, with what."""

    root: str
    index: int  # the shard number
    key: str
    params: P  # the stage's parameters
    items: corpus.PackedItems | tuple = ()  # shingle: the partition's inputs
    source: SourceParams | None = None
    only: frozenset | None = None  # shingle: only these document ids of the items (the rest are indexed already)
    cwd: str = ""  # what relative paths of items are relative to (resolving a million items here costs seconds)
    then: tuple = ()  # shingle: (signature key, params, band key, params) to do with the sets still in memory

    def __post_init__(self):
        _absolute(self, "root")
        _resolved(self, cwd=self.cwd or os.getcwd())


def shingle_documents(documents, params: ShingleParams, problems: dict) -> tuple[list[dict], np.ndarray, np.ndarray]:
    """Normalise, tokenise and shingle documents: (records, values, offsets), the records (id, size, mtime_ns, sha,
    replaced, shingles: how many shingle hashes are stored for it, repeats counted except for a streamed file) and
    their shingle hashes as CSR lists (sets.csr_lists). Binary large files found while streaming count in problems."""
    char_hasher = CodePointHasher()

    def token_hashes(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        if params.unit == "word":
            return word_hashes(texts, positions=False)[:2]
        hashed = [char_hasher.hash_text(t) for t in texts]
        return (np.concatenate(hashed) if hashed else np.empty(0, np.uint32)), np.array([len(h) for h in hashed])

    records: list[dict] = []
    texts: list[str] = []
    streamed = []  # (document number, its unique shingle hashes) of large files shingled piece by piece
    for doc, extra in documents:
        if doc.pieces is not None:
            try:
                hashes = _streamed_shingles(doc.pieces, params, lambda t: token_hashes([t])[0])
            except corpus.BinaryFile:
                corpus.count_binary(problems, doc.id)
                continue
            streamed.append((len(records), hashes))
            texts.append("")
        else:
            texts.append(corpus.normalise(doc.text, params))
        records.append({"id": doc.id, "size": doc.size, "mtime_ns": doc.mtime_ns, "sha": doc.sha,
                        "replaced": doc.replaced, **extra})
    all_tokens, lengths = token_hashes(texts)
    doc_index, hashes = kgram_hashes(all_tokens, np.asarray(lengths, np.int64), params.k)
    if streamed:
        doc_index = np.concatenate([doc_index, *(np.full(len(h), d, np.int64) for d, h in streamed)])
        hashes = np.concatenate([hashes, *(h for _, h in streamed)])
    values, offsets = sets.csr_lists(doc_index, hashes, len(records))
    for record, n in zip(records, np.diff(offsets).tolist()):
        record["shingles"] = n
    return records, values, offsets


class ShingledShard(NamedTuple):
    """What a shingle task gives back besides its files: its documents (for the progress bar), the stats of its
    done marker and its catalog columns, so that the run does not read them back from the files it just wrote."""

    docs: int
    stats: dict
    columns: dict


def shingle_partition(task: PartitionTask[ShingleParams]) -> ShingledShard:
    """Read, normalise, tokenise and shingle one partition; write its docs, values and offsets, then its marker."""
    work = WorkDir(task.root)
    problems: dict = {}
    source = task.source
    assert source is not None  # a shingle task always has one

    def documents():
        for item, doc in corpus.read_documents(task.items, source, problems, task.cwd):
            if task.only is None or doc.id in task.only:
                yield doc, {"item": item_digest(item), "inode": item.inode}

    records, values, offsets = shingle_documents(documents(), task.params, problems)
    columns = shard_columns(records)
    stats = {"docs": len(records), "bytes": sum(r["size"] for r in records), **problems}
    work.save_table(work.part("shingle", task.index, "docs.npz"), columns)
    work.save_array(work.part("shingle", task.index, "values.npy"), values)
    work.save_array(work.part("shingle", task.index, "offsets.npy"), offsets)
    work.mark_part_done("shingle", task.index, task.key, suffixes=SHINGLE_FILES, stats=stats)
    if task.then:  # the next two stages' files for this shard, as their own tasks would write them
        sig_key, sig_params, bands_key, band_params = task.then
        _save_band_keys(work, task.index, bands_key, band_params,
                        _save_signatures(work, task.index, sig_key, sig_params, values, offsets))
    return ShingledShard(len(records), stats, columns)


def _streamed_shingles(pieces, params: ShingleParams, hash_tokens) -> np.ndarray:
    """The unique shingle hashes of a document given as pieces cut after whitespace: each piece's tokens are
    shingled together with the last k-1 tokens of the text before it, so no shingle is lost or made up at a cut.
    A piece that ends inside a word (cut after megabytes without a blank) leaves that word to the next pieces,
    hashed piece by piece (word_state). Memory grows with the number of distinct shingles, not with the text."""
    tail = np.empty(0, np.uint32)
    merged, pending, first = np.empty(0, np.uint32), [], True
    word = None  # word_state of a word begun in the pieces before, for the word unit
    lead: list  # the hash of a word finished at the start of this piece
    for text, last in _lookahead(pieces):  # lazily: one piece in memory at a time
        text, lead = corpus.normalise(text, params, first=first, last=last), []
        first = False
        if params.unit == "word":
            if word is not None:  # it goes on up to this piece's first non-word character
                n = corpus.WORD_RUN.match(text).end()  # type: ignore[union-attr]  # \w* always matches
                word = word_state(text[:n], word)
                if n == len(text) and not last:
                    continue
                text, lead, word = text[n:], [finish_word(word)], None
            if not last and text and corpus.WORD_RUN.fullmatch(text[-1]):  # ends inside a word
                n = len(text) - corpus.WORD_RUN.match(text[::-1]).end()  # type: ignore[union-attr]  # as above
                text, word = text[:n], word_state(text[n:])
        th = np.concatenate([tail, *lead, hash_tokens(text)])
        pending.append(sets.sorted_unique(kgram_hashes(th, np.array([len(th)]), params.k)[1]))
        tail = th[len(th) - min(len(th), params.k - 1):]
        if sum(map(len, pending)) > max(len(merged), 1 << 20):  # merge when pending outgrows what is merged
            merged, pending = sets.sorted_unique(np.concatenate([merged, *pending])), []
    return sets.sorted_unique(np.concatenate([merged, *pending]))


def _lookahead(pieces):
    """(piece, is_last) for each piece of an iterator."""
    previous = None
    for piece in pieces:
        if previous is not None:
            yield previous, False
        previous = piece
    if previous is not None:
        yield previous, True


CATALOG = "catalog.npz"
BINARY = "binary.npz"  # the binary files skipped, with their fingerprints (catalog.binary_columns)
SKIPPED_NOUNS = {"hidden": ("hidden entry", "hidden entries"), "symlink": ("symlink",), "excluded": ("excluded file",),
                 "special": ("special file",),
                 corpus.SAME_FILE: ("path of a file already listed", "paths of files already listed")}
SKIPPED_WHY = {"special": " (FIFO, socket, device)", corpus.SAME_FILE: " (same file)"}


def shingle_content(params: ShingleParams, source: SourceParams) -> dict:
    """What decides a shard's bytes: shingle parameters and how records are read (an index keeps them fixed)."""
    return {"params": asdict(params), "jsonl": source.jsonl, "id_field": source.id_field,
            "text_field": source.text_field, "strict": source.strict}


def shingle(runner: Runner, args: list[str], source: SourceParams, params: ShingleParams, stdin=None,
            references: tuple[str, ...] = (), rebuild: bool = False,
            then: tuple[SignatureParams, BandParams] | None = None) -> dict:
    """Bring the shards up to the inputs: only new and changed documents are read and shingled, into new shards;
    deleted ones are marked dead. references: folders or files whose documents are always keepers; rebuild:
    read every document again, into new shards. then: the parameters of the signature and band stages about to
    run, whose files for the new shards are then written by the same task, from the sets still in memory (one
    task per shard instead of three, and no reading back)."""
    work = runner.work
    previous = work.read_manifest()["stages"].get("shingle")
    # with nothing stored there is nothing to match: a folder's first partitions are shingled while it is listed
    listing = corpus.list_items([*args, *references], source, stdin, spool=work.spool, lazy=previous is None,
                                skip=(str(work.root),),  # a work dir inside an input folder holds no documents
                                progress=counter(getattr(runner.engine, "progress", False), "listing", "file"))
    inputs = [{"path": p, "reference": i >= len(listing.args) - len(references)} for i, p in enumerate(listing.args)]
    nothing = InputError(f"{' '.join(args)}: no documents found (folder empty, or every file hidden or excluded)")
    streamed = not isinstance(listing.items, list)
    if not streamed and not listing.items:
        raise nothing
    content = shingle_content(params, source)
    base = previous if previous is not None and previous.get("content") == content else None
    stored = _stored_catalog(runner, previous) if previous is not None else Catalog.empty()
    known = _stored_binary(runner, base) if base is not None and not rebuild and not streamed else {}
    items, binary = skip_known_binary([] if streamed else listing.items, known)  # not opened again
    todo = plan(stored if base is not None else Catalog.empty(), items, source)
    if (base is not None and not rebuild and not todo.todo and todo.catalog.same(stored)
            and base.get("inputs") == inputs and len(binary) == len(known) and base.get("cwd") == os.getcwd()
            and base.get("links", {}) == listing.links):
        runner.log(f"shingle: up to date ({_shingle_summary(base)})")
        _report_problems(runner, base)
        return base
    run = (previous or {}).get("run", 0) + 1
    carried: dict = {}  # (id, sha) -> the run a document came in, kept through a rebuild
    live = int(todo.catalog.live.sum())
    if base is None or rebuild or len(todo.catalog) - live > max(live, 1000):  # (or mostly dead rows) rebuild
        carried = {(stored.ids[n], stored["sha"][n]): int(stored["added"][n])
                   for n in np.flatnonzero(stored.live).tolist()}
        if base is not None:  # planned against the stored rows: plan again from nothing
            base, todo = None, plan(Catalog.empty(), items, source)
    shards, counts, keys, kept, shard_bytes = [], [], [], [], []
    if base is not None:  # keep the shards that still hold a live document (numbers shift past a dropped one)
        start, live_rows = 0, todo.catalog.live
        for n, count, shard_key, size in zip(base["shards"], base["docs"], base["partitions"], base["bytes"]):
            if live_rows[start:start + count].any():
                shards.append(n)
                counts.append(count)
                keys.append(shard_key)
                shard_bytes.append(size)
                kept.append(np.arange(start, start + count))
            start += count
    catalog = todo.catalog.take(np.concatenate(kept)) if kept else Catalog.empty()
    next_shard = (previous or {}).get("next_shard", 0)
    only = {item.id: ids for item, ids in todo.todo}
    parts, new_keys, new_shards, tasks_only, part_bytes = [], [], [], [], []

    def partitions():
        """The new partitions' numbers, as the listing completes each (filling the lists above)."""
        items = listing.items if streamed else (item for item, _ in todo.todo)
        for i, part in enumerate(corpus.partition(items, source)):
            if i == 0 and params.unit == "word":
                prepare_word_tables()  # built once, before the first task forks the workers that inherit them
            wanted = [only.get(item.id) for item in part]
            # ids are wanted only of JSONL items, each alone in its part (with JSONL input every item is one)
            restriction = frozenset().union(*wanted) if any(w is not None for w in wanted) else None  # type: ignore[arg-type]
            parts.append(corpus.PackedItems(part))
            new_keys.append(digest("shingle", FORMAT, content, parts[-1].fingerprint(),
                                   sorted(restriction) if restriction is not None else None))
            new_shards.append(next_shard + i)
            tasks_only.append(restriction)
            part_bytes.append(parts[-1].bytes())
            yield i

    def downstream(i: int) -> tuple:
        """The signature and band work of new shard i for its shingle task (made only for shards run now)."""
        if then is None:
            return ()
        sig_key = signature_key(then[0], new_keys[i])
        runner.ahead.update({("signature", new_shards[i]), ("band", new_shards[i])})
        return sig_key, then[0], band_key(then[1], sig_key), then[1]

    reused, shingled = _map_partitions(
        runner, "shingle", shingle_partition, new_shards, new_keys, SHINGLE_FILES,
        lambda i: PartitionTask(str(work.root), new_shards[i], new_keys[i], params, parts[i], source,
                                tasks_only[i], then=downstream(i)),
        sizes=part_bytes, unit="B", nbytes=part_bytes, stream=partitions())
    if not parts and streamed:
        raise nothing
    totals: dict = {"skipped": listing.skipped}
    added = []
    for i, (n, key) in enumerate(zip(new_shards, new_keys)):
        if i in shingled:
            done, columns = shingled[i].stats, shingled[i].columns
        else:  # finished by an interrupted run: read back
            done = work.part_done("shingle", n, key, SHINGLE_FILES)
            columns = work.load_table(work.part("shingle", n, "docs.npz"), "shingle")
        binary.update(_binary_found(parts[i], done.get("binary_ids", ())))
        for name, value in done.items():
            if name == "messages":
                totals.setdefault("messages", []).extend(value)
            elif isinstance(value, int) and name not in ("docs", "bytes"):
                totals[name] = totals.get(name, 0) + value
        added.append(Catalog.of_shard(columns, carried, run))
        counts.append(len(added[-1]))
        shard_bytes.append(done["bytes"])
    catalog = catalog.concat(*added)
    shards, keys = [*shards, *new_shards], [*keys, *new_keys]
    totals.update(catalog.summary(), added=int(((catalog["added"] == run) & catalog.live).sum()),
                  removed=todo.removed, renamed=todo.renamed)
    if binary:  # every binary file the inputs hold now, found by this run or an earlier one
        totals["binary"] = len(binary)
    key = digest("shingle", keys, inputs, catalog.fingerprint(), *([sorted(binary.items())] if binary else []))
    catalog = Catalog(catalog.stored())  # as the next stages would load it
    catalog_path = work.output("shingle", CATALOG, key)
    work.save_table(catalog_path, catalog.columns)
    if binary:
        work.save_table(work.output("shingle", BINARY, key), binary_columns(binary))
    _remember_catalog(_catalog_version(catalog_path), catalog)
    record = {"key": key, "params": asdict(params), "source": asdict(source), "content": content,
              "inputs": inputs, "cwd": os.getcwd(), "partitions": keys, "shards": shards, "docs": counts,
              "bytes": shard_bytes, "run": run, "next_shard": next_shard + len(parts),
              "files": _files(work, "shingle", key, CATALOG, *([BINARY] if binary else [])),
              "stats": totals, **({"links": listing.links} if listing.links else {})}
    _check_documents(runner, record, params, args, listing.items if source.jsonl else ())
    work.record_stage("shingle", record)
    runner.log(f"shingle: {_shingle_summary(record)}" + (f"; {reused} of {plural(len(parts), 'new partition')} "
                                                          "reused from an interrupted run" if reused else ""))
    _report_problems(runner, record)
    return record


_CATALOGS: dict[tuple | None, Catalog] = {}  # loaded once per process: several stages of a run read the same catalog


def load_catalog(work: WorkDir, record: dict) -> Catalog:
    path = work.output("shingle", CATALOG, record["key"])
    version = _catalog_version(path)
    if version is None or version not in _CATALOGS:
        _remember_catalog(version, Catalog(work.load_table(path, "shingle")))
    return _CATALOGS[version]


def _catalog_version(path: Path) -> tuple | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return str(path), st.st_size, st.st_mtime_ns


def _remember_catalog(version: tuple | None, catalog: Catalog) -> None:
    _CATALOGS.clear()
    _CATALOGS[version] = catalog


def _stored_catalog(runner: Runner, record: dict) -> Catalog:
    """The stored catalog, with the rows of a damaged shard marked dead (their documents are read again), or an
    empty one when the catalog itself is damaged (everything is read again)."""
    work = runner.work
    if _up_to_date(work, "shingle", record["key"], runner.log) is None:
        return Catalog.empty()
    catalog = load_catalog(work, record)
    start, live = 0, catalog["live"].copy()
    for n, key, count in zip(record["shards"], record["partitions"], record["docs"]):
        if work.part_done("shingle", n, key, SHINGLE_FILES) is None:
            runner.log(f"warning: {work.part('shingle', n, '*')} has a missing or truncated file; reading its "
                       f"documents again")
            live[start:start + count] = 0
        start += count
    return Catalog({**catalog.columns, "live": live})


def _stored_binary(runner: Runner, record: dict) -> dict:
    """The binary files the stored record skipped (none if it kept no list, or the list is damaged: then they
    are read again)."""
    if BINARY not in record.get("files", {}) or _up_to_date(runner.work, "shingle", record["key"]) is None:
        return {}
    try:
        return binary_of(runner.work.load_table(runner.work.output("shingle", BINARY, record["key"]), "shingle"))
    except (WorkDirError, KeyError):
        return {}


def _binary_found(part: corpus.PackedItems, ids) -> dict:
    """{id: (size, mtime_ns, inode)} of the binary files a new partition found, as they were listed."""
    if not ids:
        return {}
    wanted = set(ids)
    return {item.id: (item.size, item.mtime_ns, item.inode) for item in part if item.id in wanted}


def _check_documents(runner: Runner, record: dict, params: ShingleParams, args: list[str], items=()) -> None:
    """Stop when there is nothing to pair; items: the JSONL items, whose first record names its fields when
    the --id-field or --text-field given is not one of them."""
    stats = record["stats"]
    where = " ".join(args)
    if not stats.get("docs") and items:
        source = record["source"]
        fields = corpus.first_record_fields(items[0])
        missing = [(option, source[name]) for option, name in (("--id-field", "id_field"),
                                                                ("--text-field", "text_field"))
                   if fields is not None and source[name] not in fields]
        if missing:
            option, field = missing[0]
            raise InputError(f"{where}: no record has the field {field!r} ({option}); the first record's fields are "
                             f"{', '.join(map(repr, fields or ())) or 'none'}: pass {option} with one of them")
    if not stats.get("docs"):
        raise InputError(f"{where}: no readable text documents (binary: {stats.get('binary', 0)}, unreadable: "
                         f"{stats.get('unreadable', 0) + stats.get('vanished', 0)})")
    if stats.get("docs") == stats.get("short"):
        raise InputError(f"{where}: no document is long enough for one {params.k}-{params.unit} shingle; "
                         f"lower -k or use --unit char")
    if record["source"]["jsonl"]:
        catalog = load_catalog(runner.work, record)
        ids = [catalog.ids[n] for n in np.flatnonzero(catalog.live)]
        if len(set(ids)) != len(ids):
            seen, dup = set(), []
            for i in ids:
                if i in seen and i not in dup:
                    dup.append(i)
                seen.add(i)
            raise InputError(f"{where}: duplicate ids in field {record['source']['id_field']!r}: "
                             f"{', '.join(map(repr, dup[:5]))}{' ...' if len(dup) > 5 else ''}; "
                             f"ids must be unique")


def _shingle_summary(record: dict) -> str:
    s = record["stats"]
    params = record["params"]
    shingle = f"{params['k']}-{params['unit']} shingle"
    text = (f"{plural(s['docs'], 'document')}, {s['bytes'] / 1e6:.1f} MB, {plural(s['shingles'], shingle)} in "
            f"{plural(len(record['partitions']), 'partition')}")
    notes = [text for k, text in (
        ("short", f"{s.get('short')} too short for one shingle (kept, never paired)"),
        ("binary", f"{plural(s.get('binary', 0), 'binary file')} skipped"),
        ("replaced", f"{s.get('replaced')} with invalid UTF-8 replaced"),
        ("bad_lines", f"{plural(s.get('bad_lines', 0), 'bad JSONL line')} skipped")) if s.get(k)]
    notes += [f"{plural(n, *SKIPPED_NOUNS.get(kind, (kind,)))} skipped{SKIPPED_WHY.get(kind, '')}"
              for kind, n in s.get("skipped", {}).items() if n]
    changes = [f"{s[k]} {k}" for k in ("added", "removed", "renamed") if s.get(k)]
    if changes and s.get("added") != s["docs"]:
        notes.append("this run: " + ", ".join(changes))
    return text + ("; " + "; ".join(notes) if notes else "")


def _report_problems(runner: Runner, record: dict) -> None:
    stats = record["stats"]
    for message in stats.get("messages", []):
        runner.log(f"warning: {message}")
    runner.soft_errors += stats.get("unreadable", 0) + stats.get("vanished", 0)


class Docs:
    """The catalog's rows as document records, docs[n] for global number n (dead rows too: `live` says which
    documents exist now), each with `arg` (index of the argument it was found under) and `reference` (found under a
    --reference path). Records are made when asked for: a group needs a few of 100,000."""

    def __init__(self, catalog: Catalog, inputs: list[dict], cwd: str = "", links: dict | None = None):
        self.catalog, self.inputs, self.cwd, self.links = catalog, inputs, cwd, links or {}
        self.prefixes = [(p["path"] if p["path"].endswith("/") else p["path"] + "/") for p in inputs]
        # a reference may lie inside an input folder, be spelled otherwise, or come first: resolved paths decide
        self.is_reference = corpus.under([p["path"] for p in inputs if p["reference"]], cwd)

    def __len__(self) -> int:
        return len(self.catalog)

    def __getitem__(self, n: int) -> dict:
        doc = self.catalog.row(n)
        arg = next((i for i, p in enumerate(self.inputs) if doc["id"] == p["path"]
                    or doc["id"].startswith(self.prefixes[i])), 0)
        doc["arg"] = arg
        doc["reference"] = self.is_reference(doc["id"])
        doc["path"] = os.path.join(self.cwd, doc["id"])  # as scanned (relative ids are relative to the scan's cwd)
        if doc["id"] in self.links:
            doc["links"] = self.links[doc["id"]]  # listed symbolic links to it (--follow-links)
        return doc

    def __iter__(self):
        return (self[n] for n in range(len(self)))

    def live(self) -> list[dict]:
        return [self[n] for n in np.flatnonzero(self.catalog.live).tolist()]


def load_docs(work: WorkDir, shingle_record: dict | None = None) -> Docs:
    record = shingle_record or require(work, "shingle")
    return Docs(load_catalog(work, record), record.get("inputs", []), record.get("cwd", ""), record.get("links"))


# ---------------------------------------------------------------------------------------------- 2. signature

def signature_partition(task: PartitionTask[SignatureParams]) -> None:
    work = WorkDir(task.root)
    values = work.load_array(work.part("shingle", task.index, "values.npy"), "shingle")
    offsets = work.load_array(work.part("shingle", task.index, "offsets.npy"), "shingle")
    _save_signatures(work, task.index, task.key, task.params, values, offsets)


def _save_signatures(work: WorkDir, shard: int, key: str, params: SignatureParams, values, offsets) -> np.ndarray:
    sig = signatures(values, offsets, params)
    work.save_array(work.part("signature", shard, "npy"), sig)
    work.mark_part_done("signature", shard, key, suffixes=("npy",), stats={"docs": len(sig)})
    return sig


def signature_key(params: SignatureParams, shingle_key: str) -> str:
    """The key of a shard's signatures: its shingle key and the signature parameters."""
    return digest("signature", FORMAT, params, shingle_key)


def signatures(values: np.ndarray, offsets: np.ndarray, params: SignatureParams) -> np.ndarray:
    """MinHash signatures (n_docs, num_perm) of CSR shingle lists (order and repeats do not change a minimum), by
    the method and seed of params."""
    if params.method == "oph":
        return minhash.oph_signatures(values, offsets, params.num_perm, params.seed)
    a, b = minhash.draw_affine_parameters(params.num_perm, params.seed)  # drawn again: cheap and deterministic
    return minhash.affine_signatures(values, offsets, a, b)


def signature(runner: Runner, params: SignatureParams) -> dict:
    work = runner.work
    upstream = require(work, "shingle", consumer="signature")
    keys = [signature_key(params, k) for k in upstream["partitions"]]
    key = digest("signature", keys, upstream["key"])  # a new catalog over the same shards: a new record
    shards = upstream["shards"]
    record = _up_to_date(work, "signature", key)
    if record is not None and all(work.part_done("signature", n, k, ("npy",)) for n, k in zip(shards, keys)):
        runner.log(f"signature: up to date ({plural(params.num_perm, params.method + ' permutation')})")
        return record
    reused, _ = _map_partitions(runner, "signature", signature_partition, shards, keys, ("npy",),
                             lambda i: PartitionTask(str(work.root), shards[i], keys[i], params),
                             sizes=upstream["docs"], unit="doc", docs=upstream["docs"], nbytes=upstream.get("bytes"))
    record = {"key": key, "params": asdict(params), "upstream": upstream["key"], "partitions": keys,
              "shards": shards, "next_shard": upstream["next_shard"], "docs": upstream["docs"]}
    work.record_stage("signature", record)
    runner.log(f"signature: {plural(sum(upstream['docs']), 'signature')} of "
               f"{plural(params.num_perm, params.method + ' permutation')}"
               + (f"; {reused} of {plural(len(keys), 'partition')} reused" if reused else ""))
    return record


# ---------------------------------------------------------------------------------------------- 3. band

def band_partition(task: PartitionTask[BandParams]) -> None:
    work = WorkDir(task.root)
    _save_band_keys(work, task.index, task.key, task.params,
                    work.load_array(work.part("signature", task.index, "npy"), "signature"))


def _save_band_keys(work: WorkDir, shard: int, key: str, params: BandParams, sig: np.ndarray) -> None:
    work.save_array(work.part("band", shard, "npy"), lsh.band_keys(sig, params.bands, params.rows))
    work.mark_part_done("band", shard, key, suffixes=("npy",), stats={"docs": len(sig)})


def band_key(params: BandParams, signature_key: str) -> str:
    """The key of a shard's band keys: its signature key and (b, r)."""
    return digest("band", FORMAT, params, signature_key)


def choose_bands(num_perm: int, threshold: float | None, bands: int | None, rows: int | None,
                 work: WorkDir | None = None, stored: bool = False) -> BandParams:
    """Explicit --bands/--rows (one of them may be derived from num_perm), else (b, r) from the threshold: for an
    index (work), those it was built with for this threshold and num_perm (its parameters are fixed; choosing
    again costs ~50 ms, a twentieth of a run that adds a few documents), else lsh.optimal_bands. stored: num_perm
    is that of the signatures stored in work (the band stage), so the fix for too few is to re-run that stage."""
    t = threshold if threshold is not None else DEFAULT_THRESHOLD
    if bands and rows:
        params = BandParams(bands, rows, None)
    elif bands:
        params = BandParams(bands, num_perm // bands, None)
    elif rows:
        params = BandParams(num_perm // rows, rows, None)
    else:
        params = _index_bands(work, num_perm, t) or BandParams(*lsh.optimal_bands(min(t, 0.99), num_perm), t)
    if params.bands < 1 or params.rows < 1 or params.bands * params.rows > num_perm:
        _too_few_permutations(num_perm, bands, rows, work if stored else None)
    return params


def _too_few_permutations(num_perm: int, bands: int | None, rows: int | None, stored: WorkDir | None) -> NoReturn:
    """Say which of --bands/--rows asks for more than num_perm rows (b x r <= num_perm), and the two fixes."""
    need = (bands or 1) * (rows or 1)
    if bands and rows:
        what = f"--bands {bands} with --rows {rows}"
        lower = f"lower --bands or --rows so that bands x rows <= {num_perm}"
    elif bands:
        what, lower = f"--bands {bands} (one row each at least)", f"lower --bands to at most {num_perm}"
    else:
        what, lower = f"--rows {rows} (in one band at least)", f"lower --rows to at most {num_perm}"
    if stored is None:
        raise ParameterError(f"{what} needs {need} permutations but --num-perm is {num_perm}; raise --num-perm to "
                             f"{need} or {lower}")
    options = " ".join(f"--{name} {value}" for name, value in (("bands", bands), ("rows", rows)) if value)
    raise ParameterError(f"{what} needs {need} permutations but the stored signatures have {num_perm}; {lower}, or "
                         f"re-run the signature stage with more: `neardup -w {stored.root} signature --num-perm "
                         f"{need} band {options}`")


def _index_bands(work: WorkDir | None, num_perm: int, threshold: float) -> BandParams | None:
    """The band parameters an index chose for this threshold and num_perm, if it is an index that did."""
    manifest = work.read_manifest() if work is not None else {}
    if not manifest.get("index"):
        return None
    band_record, signature_record = (manifest["stages"].get(name) for name in ("band", "signature"))
    if band_record is None or signature_record is None or signature_record["params"]["num_perm"] != num_perm \
            or band_record["params"].get("threshold") != threshold:
        return None
    return BandParams(**band_record["params"])


def band(runner: Runner, threshold: float | None = None, bands: int | None = None, rows: int | None = None) -> dict:
    work = runner.work
    upstream = require(work, "signature", consumer="band")
    num_perm = upstream["params"]["num_perm"]
    params = choose_bands(num_perm, threshold, bands, rows, work, stored=True)
    keys = [band_key(params, k) for k in upstream["partitions"]]
    key = digest("band", keys, upstream["key"])
    summary = describe_bands(params, num_perm)
    shards = upstream["shards"]
    record = _up_to_date(work, "band", key)
    if record is not None and all(work.part_done("band", n, k, ("npy",)) for n, k in zip(shards, keys)):
        runner.log(f"band: up to date ({summary})")
        return record
    _map_partitions(runner, "band", band_partition, shards, keys, ("npy",),
                    lambda i: PartitionTask(str(work.root), shards[i], keys[i], params), sizes=upstream["docs"],
                    unit="doc", docs=upstream["docs"], nbytes=require(work, "shingle").get("bytes"))
    record = {"key": key, "params": asdict(params), "upstream": upstream["key"], "partitions": keys,
              "shards": shards, "next_shard": upstream["next_shard"]}
    work.record_stage("band", record)
    runner.log(f"band: {summary}")
    return record


def describe_bands(params: BandParams, num_perm: int) -> str:
    used = params.bands * params.rows
    return (f"b={plural(params.bands, 'band')} x r={plural(params.rows, 'row')} ({num_perm - used} of "
            f"{plural(num_perm, 'permutation')} unused); "
            f"threshold ~ (1/b)^(1/r) = {lsh.approximate_threshold(params.bands, params.rows):.3f}, "
            f"inflection {lsh.inflection_point(params.bands, params.rows):.3f}")


# ---------------------------------------------------------------------------------------------- 4. candidates

@dataclasses.dataclass(frozen=True)
class BandTask:
    """The candidate pairs of a few bands, and their band index (each band's keys sorted, with their documents)
    written to `index` (keys .npy, docs .npy; shape (bands, documents)) for the next run and for `query`.

    previous: (order .npy, keys .npy, docs .npy, documents then) of the last run's index of these bands. The task
    then merges the new documents into that index and returns the change in candidate pairs (with counts -1 and
    +1), computed over the touched buckets only: those holding a new, changed or deleted document, or too large."""

    root: str
    bands: tuple
    order: str  # the .npy of the global numbers of the documents that can pair, in id order
    shards: tuple
    starts: tuple  # global number of each shard's first document
    documents: int  # in all shards, live or dead
    max_bucket: int
    index: tuple
    previous: tuple = ()
    large_keys: tuple = ()  # per band, the keys (as int64) of the last run's large buckets

    def __post_init__(self):
        _absolute(self, "root", "order")
        _resolved(self, index=tuple(os.path.join(os.getcwd(), p) for p in self.index),
                  previous=tuple(os.path.join(os.getcwd(), p) if isinstance(p, str) else p for p in self.previous))


BANDS_PER_TASK = 4  # each task reads every band shard once; fixed, so tasks never depend on --jobs


def _band_keys(work: WorkDir, task: BandTask, first: int = 0) -> np.ndarray:
    """The task's columns of band keys of every document numbered first or more (whole shards from there)."""
    parts = [work.load_array(work.part("band", n, "npy"), "band", mmap=True)[:, list(task.bands)]
             for n, start in zip(task.shards, task.starts) if start >= first]
    return np.concatenate(parts) if parts else np.empty((0, len(task.bands)), np.uint64)


def band_candidates(task: BandTask) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distinct pairs of global numbers, their counts, large buckets (band, anchor, size, key)) of the task's
    bands. A large bucket's anchor is its first document by id, however the shards were appended."""
    work = WorkDir(task.root)
    order = work.load_array(Path(task.order), "candidates")
    rank = np.full(task.documents, -1, np.int64)
    rank[order] = np.arange(len(order))
    found, counts, large, index = [], [], [], []
    if task.previous:
        old_order_path, old_keys_path, old_docs_path, old_total = task.previous
        old_order = work.load_array(Path(old_order_path), "candidates")
        old_rank = np.full(old_total, -1, np.int64)
        old_rank[old_order] = np.arange(len(old_order))
        old_keys = work.load_array(Path(old_keys_path), "candidates")
        old_docs = work.load_array(Path(old_docs_path), "candidates")
        dead = rank[:old_total] < 0
        new = np.sort(order[order >= old_total])
        new_keys = _band_keys(work, task, old_total)[new - old_total]
    else:
        members = np.sort(order)
        keys = _band_keys(work, task)[members]
    for j, band in enumerate(task.bands):
        if task.previous:
            (sk, sn), lost, pairs, big = lsh.update_band(old_keys[j], old_docs[j], old_rank, task.large_keys[j],
                                                         dead, new_keys[:, j], new, rank, task.max_bucket)
            found += [lost, pairs]
            counts += [np.full(len(lost), -1, np.int64), np.ones(len(pairs), np.int64)]
        else:
            sk, sn = lsh.band_index(np.ascontiguousarray(keys[:, j]), members)
            pairs, big = lsh.bucket_pairs(sk, sn, task.max_bucket, rank)
            found.append(pairs)
            counts.append(np.ones(len(pairs), np.int64))
        # merged band by band: copies of one text give the same pairs in every band, and all the bands' pairs at
        # once (4 x 12.5M for 5,000 copies with a large --max-bucket) took gigabytes before they were merged
        merged, summed = lsh.count_pairs(np.concatenate(found), np.concatenate(counts))
        found, counts = [merged], [summed]
        index.append((sk, sn))
        large.append(np.concatenate([np.full((len(big), 1), band), big], axis=1))
    work.save_array(Path(task.index[0]), np.stack([k for k, _ in index]))
    work.save_array(Path(task.index[1]), np.stack([d for _, d in index]))
    pairs, pair_counts = lsh.count_pairs(np.concatenate(found), np.concatenate(counts))
    return pairs, pair_counts, np.concatenate(large).astype(np.int64)


def pairable(catalog: Catalog, params: CandidateParams) -> np.ndarray:
    """Which rows can pair: live, with at least one shingle (an empty set has no similarity) and at least
    --min-shingles and --min-size (too short to say anything by being alike: stubs, licence headers)."""
    return (catalog.live & (catalog["shingles"] >= max(params.min_shingles, 1))
            & (catalog["size"] >= params.min_size))


def pairing_order(catalog: Catalog, params: CandidateParams) -> np.ndarray:
    """Global numbers of the documents that can pair (pairable), sorted by id (UTF-8 bytes sort in code point
    order, as Python sorts str)."""
    numbers = np.flatnonzero(pairable(catalog, params))
    ids = catalog.id_bytes()[numbers]
    if len(ids) > 1 and not (ids[1:] > ids[:-1]).all():  # appended shards: restore id order
        numbers = numbers[np.argsort(ids, kind="stable")]
    return numbers.astype(np.int64)


def _index_files(bands: int) -> list[tuple[int, str, str]]:
    """(first band, keys file, docs file) of each task's part of the band index."""
    return [(lo, f"index-{lo:03d}.keys.npy", f"index-{lo:03d}.docs.npy") for lo in range(0, bands, BANDS_PER_TASK)]


def _previous_candidates(work: WorkDir, basis: dict) -> dict | None:
    """The last candidates record if this run can update its band index and pairs instead of starting again:
    same signatures, bands and --max-bucket, and shards that are a prefix of today's (a global number still means
    the same document), its files intact."""
    record = work.read_manifest()["stages"].get("candidates")
    if record is None or "basis" not in record or _up_to_date(work, "candidates", record["key"]) is None:
        return None
    old = record["basis"]
    if any(old.get(f) != basis[f] for f in ("signature", "bands", "max_bucket", "min_shingles", "min_size")) or \
            old["shards"] != basis["shards"][:len(old["shards"])]:
        return None
    return record


def candidates(runner: Runner, params: CandidateParams) -> dict:
    """Pairs of documents that share a bucket in at least one band. With the last run's band index (an index, or
    a work dir run again after a change), only the buckets that a new, changed or deleted document touches are
    looked at: the pairs of the others are the last run's."""
    work = runner.work
    upstream, key, record = _begin(runner, "candidates", params)
    shingle_record = require(work, "shingle")
    if record is not None:
        runner.log(f"candidates: up to date ({plural(record['stats']['candidates'], 'pair')})")
        return record
    docs = load_docs(work, shingle_record)
    order_path = work.output("candidates", "order.npy", key)
    order = pairing_order(docs.catalog, params)
    work.save_array(order_path, order)
    small = int((docs.catalog.live & (docs.catalog["shingles"] > 0)).sum()) - len(order)  # (0: counted as short)
    bands = upstream["params"]["bands"]
    basis = {"signature": work.read_manifest()["stages"]["signature"]["params"], "bands": upstream["params"],
             "max_bucket": params.max_bucket, "min_shingles": params.min_shingles, "min_size": params.min_size,
             "shards": shingle_record["partitions"],
             "documents": int(sum(shingle_record["docs"]))}
    previous = _previous_candidates(work, basis)
    if previous is not None:
        old_large = work.load_jsonl(work.output("candidates", "large_buckets.jsonl", previous["key"]), "candidates")
    files = _index_files(bands)
    tasks = [BandTask(str(work.root), tuple(range(lo, min(lo + BANDS_PER_TASK, bands))), str(order_path),
                      tuple(shingle_record["shards"]), tuple(part_starts(shingle_record).tolist()),
                      basis["documents"], params.max_bucket,
                      (str(work.output("candidates", k, key)), str(work.output("candidates", d, key))),
                      previous=(str(work.output("candidates", "order.npy", previous["key"])),
                                str(work.output("candidates", k, previous["key"])),
                                str(work.output("candidates", d, previous["key"])),
                                previous["basis"]["documents"]) if previous else (),
                      large_keys=tuple(tuple(b["key"] for b in old_large if b["band"] == j)
                                       for j in range(lo, min(lo + BANDS_PER_TASK, bands))) if previous else ())
             for lo, k, d in files]
    results = runner.engine.map(band_candidates, tasks, desc="candidates", sizes=[len(t.bands) for t in tasks],
                                unit="band")
    pairs, counts = np.empty((0, 2), np.int64), np.empty(0, np.int64)
    found = [(p, c) for p, c, _ in results]
    if previous is not None:
        found.append((work.load_array(work.output("candidates", "pairs.npy", previous["key"]), "candidates"),
                      work.load_array(work.output("candidates", "counts.npy", previous["key"]), "candidates")))
    for more, more_counts in found:  # one task's pairs at a time, as in band_candidates
        pairs, counts = lsh.count_pairs(np.concatenate([pairs, more]), np.concatenate([counts, more_counts]))
    if (counts < 0).any():
        raise WorkDirError(f"{work.root}: the stored candidate pairs do not match the band index; run again with "
                           f"--rebuild (an index) or --force")
    pairs, counts = pairs[counts > 0], counts[counts > 0]
    large = sorted(({"band": int(j), "anchor": int(a), "size": int(n), "key": int(k)}
                    for _, _, big in results for j, a, n, k in big.tolist()),
                   key=lambda b: (b["band"], b["key"] % 2**64))
    work.save_array(work.output("candidates", "pairs.npy", key), pairs)
    work.save_array(work.output("candidates", "counts.npy", key), counts)
    work.save_jsonl(work.output("candidates", "large_buckets.jsonl", key), large)
    record = {"key": key, "params": asdict(params), "upstream": upstream["key"], "basis": basis,
              "files": _files(work, "candidates", key, "order.npy", "pairs.npy", "counts.npy", "large_buckets.jsonl",
                              *(name for _, k, d in files for name in (k, d))),
              "stats": {"candidates": int(len(pairs)), "large_buckets": len(large), "small": small}}
    work.record_stage("candidates", record)
    since = " (the last run's, updated where new, changed or deleted documents fall)" if previous else ""
    runner.log(f"candidates: {plural(len(pairs), 'pair shares', 'pairs share')} a bucket in at least one band{since}"
               + (f"; {plural(small, 'document')} under {_limits(params)} skipped (never paired)" if small else ""))
    _warn_large_buckets(runner, large, params.max_bucket, docs, work.output("candidates", "large_buckets.jsonl", key))
    return record


def _limits(params: CandidateParams) -> str:
    """The size filters in force, as options: '--min-shingles 20 or --min-size 100'."""
    return " or ".join(f"--{name.replace('_', '-')} {value}" for name, value in
                       (("min_shingles", params.min_shingles), ("min_size", params.min_size)) if value)


def _warn_large_buckets(runner: Runner, large: list[dict], max_bucket: int, docs, listed: Path) -> None:
    """One warning per anchor (one cause, such as a boilerplate page copied 10,000 times, makes a large bucket in
    nearly every band), largest first, at most 10."""
    by_anchor: dict[int, list[dict]] = {}
    for bucket in large:
        by_anchor.setdefault(bucket["anchor"], []).append(bucket)
    causes = sorted(by_anchor.items(), key=lambda kv: (-max(b["size"] for b in kv[1]), docs[kv[0]]["id"]))
    for anchor, buckets in causes[:10]:
        runner.log(f"warning: {plural(len(buckets), 'bucket')} over --max-bucket {max_bucket} in "
                   f"{plural(len({b['band'] for b in buckets}), 'band')} (largest {max(b['size'] for b in buckets)} "
                   f"documents) paired with their anchor {docs[anchor]['id']} only; see {listed}")
    if len(causes) > 10:
        rest = sum(len(buckets) for _, buckets in causes[10:])
        runner.log(f"warning: {plural(rest, 'more large bucket')} with {plural(len(causes) - 10, 'other anchor')}; "
                   f"see {listed}")


# ---------------------------------------------------------------------------------------------- 5. verify

@dataclasses.dataclass(frozen=True)
class VerifyTask:
    root: str
    pairs: str  # the .npy of the pairs to verify
    lo: int
    hi: int
    starts: tuple
    shards: tuple

    def __post_init__(self):
        _absolute(self, "root", "pairs")


def set_overlap(shingles: PartitionArrays, starts: np.ndarray, a: np.ndarray, b: np.ndarray):
    """(|A ∩ B|, |A|, |B|) of the stored shingle sets of documents a[i] and b[i].

    Each document's set is gathered once however many pairs it is in, and a pair of equal sets (copies of one
    text) is counted without being intersected: a bucket of 1,000 copies is 500,000 pairs of only 1,000 sets."""
    docs = sets.sorted_unique(np.concatenate([a, b]))
    values, lengths = sets.gather_sets(shingles, starts, docs)
    offsets = np.cumsum(lengths) - lengths
    ia, ib = np.searchsorted(docs, a), np.searchsorted(docs, b)
    la, lb = lengths[ia], lengths[ib]
    label = sets.identical_sets(values, lengths)
    inter = la.copy()  # equal sets: |A ∩ B| = |A|
    other = np.flatnonzero(label[ia] != label[ib])
    if len(other):
        pa, pb = ia[other], ib[other]
        inter[other] = sets.intersection_sizes(values[sets.ranges(offsets[pa], lengths[pa])], lengths[pa],
                                               values[sets.ranges(offsets[pb], lengths[pb])], lengths[pb])
    return inter, la, lb


def verify_chunk(task: VerifyTask) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For candidate pairs [lo, hi): |A ∩ B|, |A|, |B| of the shingle sets and the signature agreement."""
    work = WorkDir(task.root)
    pairs = np.asarray(work.load_array(Path(task.pairs), "candidates", mmap=True)[task.lo:task.hi])
    starts = np.asarray(task.starts, dtype=np.int64)
    inter, la, lb = set_overlap(PartitionArrays(work, "shingle", ("values.npy", "offsets.npy"), task.shards), starts,
                                pairs[:, 0], pairs[:, 1])
    signatures = PartitionArrays(work, "signature", ("npy",), task.shards)
    agree = (sets.gather_rows(signatures, starts, pairs[:, 0]) == sets.gather_rows(signatures, starts, pairs[:, 1]))
    return inter, la, lb, agree.mean(axis=1)


def _member(codes: np.ndarray, sorted_codes: np.ndarray) -> np.ndarray:
    """codes[i] in sorted_codes, by binary search."""
    at = np.searchsorted(sorted_codes, codes)
    return (at < len(sorted_codes)) & (sorted_codes[np.minimum(at, len(sorted_codes) - 1)] == codes) \
        if len(sorted_codes) else np.zeros(len(codes), bool)


def _reusable(work: WorkDir, basis: dict) -> tuple[np.ndarray, ...] | None:
    """The last verification's (checked pairs, accepted pairs, their scores and set sizes) if it can be reused:
    same threshold and signatures, and shards that are a prefix of today's (the shards are append-only, so a
    global number still means the same stored set)."""
    record = work.read_manifest()["stages"].get("verify")
    if record is None or "basis" not in record or _up_to_date(work, "verify", record["key"]) is None:
        return None
    old = record["basis"]
    if (old["threshold"] != basis["threshold"] or old["signature"] != basis["signature"]
            or old["shards"] != basis["shards"][:len(old["shards"])]):
        return None
    return tuple(work.load_array(work.output("verify", name, record["key"]), "verify")
                 for name in ("checked.npy", "pairs.npy", "scores.npy", "sizes.npy"))


def verify(runner: Runner, params: VerifyParams) -> dict:
    """Exact Jaccard of the candidate pairs. Pairs checked by the last run on the same shards are not checked
    again: an incremental run verifies only the pairs that involve a new or changed document."""
    work = runner.work
    upstream, key, record = _begin(runner, "verify", params)
    warning = recall_warning(work, params.threshold)  # said with the results
    if record is not None:
        runner.log(f"verify: up to date ({plural(record['stats']['pairs'], 'pair')} with Jaccard >= "
                   f"{params.threshold})")
        if warning is not None:
            runner.log(f"warning: {warning}")
        return record
    shingle_record = require(work, "shingle")
    basis = {"threshold": params.threshold, "shards": shingle_record["partitions"],
             "signature": work.read_manifest()["stages"]["signature"]["params"]}
    pairs = work.load_array(work.current("candidates", "pairs.npy"), "candidates")
    previous = _reusable(work, basis)
    if previous is not None:
        checked, accepted, scores, sizes = previous
        codes = lsh.pair_codes(pairs)
        known = _member(codes, lsh.pair_codes(checked))
        kept = _member(lsh.pair_codes(accepted), codes)
        accepted, scores, sizes = accepted[kept], scores[kept], sizes[kept]
        todo = pairs[~known]
    else:
        accepted, scores, sizes, todo = np.empty((0, 2), np.int64), np.empty((0, 2)), np.empty((0, 2), np.int64), pairs
    todo_path = work.output("verify", "todo.npy", key)
    work.save_array(todo_path, todo)
    n = len(todo)
    starts = tuple(part_starts(shingle_record).tolist())
    shards = tuple(shingle_record["shards"])
    chunk = min(VERIFY_CHUNK, max(MIN_VERIFY_CHUNK, -(-n // VERIFY_TASKS)))  # from n alone, never from --jobs
    tasks = [VerifyTask(str(work.root), str(todo_path), lo, min(lo + chunk, n), starts, shards)
             for lo in range(0, n, chunk)]
    results = runner.engine.map(verify_chunk, tasks, desc="verify", sizes=[t.hi - t.lo for t in tasks], unit="pair")
    if results:
        inter, la, lb, estimate = (np.concatenate(column) for column in zip(*results))
    else:
        inter = la = lb = np.empty(0, np.int64)
        estimate = np.empty(0)
    similarity = sets.jaccard(inter, la, lb)
    keep = np.flatnonzero(similarity >= params.threshold)
    fresh_scores = np.stack([similarity[keep], estimate[keep]], axis=1) if len(keep) else np.empty((0, 2))
    fresh_sizes = np.stack([inter[keep], la[keep] + lb[keep] - inter[keep]], axis=1).astype(np.int64)
    del results, inter, la, lb, estimate, similarity  # per candidate: millions of pairs of copies, not needed now
    accepted, scores = np.concatenate([accepted, todo[keep]]), np.concatenate([scores, fresh_scores])
    sizes = np.concatenate([sizes, fresh_sizes])
    order = np.argsort(lsh.pair_codes(accepted), kind="stable")
    accepted, scores, sizes = accepted[order], scores[order], sizes[order]
    del order
    ids = load_catalog(work, shingle_record).ids_of(sets.sorted_unique(accepted.ravel()).tolist())
    work.save_array(work.output("verify", "checked.npy", key), pairs)
    work.save_array(work.output("verify", "pairs.npy", key), accepted)
    work.save_array(work.output("verify", "scores.npy", key), scores)
    work.save_array(work.output("verify", "sizes.npy", key), sizes)
    work.save_jsonl(work.output("verify", "pairs.jsonl", key), _pair_records(ids, accepted, scores, sizes))
    todo_path.unlink()
    record = {"key": key, "params": asdict(params), "upstream": upstream["key"], "basis": basis,
              "files": _files(work, "verify", key, "checked.npy", "pairs.npy", "scores.npy", "sizes.npy",
                             "pairs.jsonl"),
              "stats": {"candidates": len(pairs), "checked": n, "pairs": len(accepted),
                        "rejected": len(pairs) - len(accepted)}}
    work.record_stage("verify", record)
    reused = f" ({len(pairs) - n} known from the last run)" if len(pairs) > n else ""
    runner.log(f"verify: {len(accepted)} of {plural(len(pairs), 'candidate pair has', 'candidate pairs have')} "
               f"exact Jaccard >= {params.threshold}{reused}")
    if warning is not None:
        runner.log(f"warning: {warning}")
    return record


def _pair_records(ids: dict[int, str], accepted: np.ndarray, scores: np.ndarray, sizes: np.ndarray):
    """The verified pairs with ids, scores and set sizes (|A ∩ B|, |A ∪ B|), best first, then by id: an order
    that does not depend on how the documents were numbered. A generator: the order is found on numbers (each id's
    rank among the ids) and records are made as they are written, for thousands of copies of one text verify
    millions of pairs, whose records as Python dicts took gigabytes."""
    numbers = np.array(sorted(ids), dtype=np.int64)
    names = sorted(ids.values())
    rank = np.empty(len(numbers), np.int64)
    rank[sorted(range(len(numbers)), key=lambda i: ids[int(numbers[i])])] = np.arange(len(numbers))
    ra, rb = (rank[np.searchsorted(numbers, accepted[:, i])] for i in (0, 1))
    lo, hi = np.minimum(ra, rb), np.maximum(ra, rb)
    del ra, rb
    order = np.lexsort((hi, lo, -scores[:, 0])) if len(accepted) else np.empty(0, np.int64)
    for start in range(0, len(order), VERIFY_CHUNK):
        at = order[start:start + VERIFY_CHUNK]
        for a, b, (similarity, estimate), (inter, union) in zip(lo[at].tolist(), hi[at].tolist(),
                                                                scores[at].tolist(), sizes[at].tolist()):
            yield {"a": names[a], "b": names[b], "jaccard": similarity, "estimate": estimate, "intersection": inter,
                   "union": union}


# ---------------------------------------------------------------------------------------------- 6. cluster

def cluster(runner: Runner, params: ClusterParams) -> dict:
    work = runner.work
    shingle_record = require(work, "shingle")
    upstream, key, record = _begin(runner, "cluster", params, shingle_record["inputs"])
    if record is not None:
        runner.log(f"cluster: up to date ({_cluster_summary(record)})")
        return record
    docs = load_docs(work, shingle_record)
    edges = work.load_array(work.current("verify", "pairs.npy"), "verify")
    anchors = {b["anchor"] for b in work.load_jsonl(work.current("candidates", "large_buckets.jsonl"), "candidates")}
    starts = part_starts(shingle_record)
    shingles = PartitionArrays(work, "shingle", ("values.npy", "offsets.npy"),  # mapped once for every call
                               shingle_record["shards"])

    def similarity(a, b):
        out = []
        for lo in range(0, len(a), VERIFY_CHUNK):
            inter, la, lb = set_overlap(shingles, starts, a[lo:lo + VERIFY_CHUNK], b[lo:lo + VERIFY_CHUNK])
            out.append(sets.jaccard(inter, la, lb))
        return np.concatenate(out) if out else np.empty(0)

    rules = KeeperRules.parse(",".join(params.keep), params.prefer)
    weights = work.load_array(work.current("verify", "scores.npy"), "verify")[:, 0]  # (Jaccard, estimate) per edge
    groups = build_groups(docs, edges, upstream["params"]["threshold"], rules, params.link, similarity, anchors,
                          weights)
    work.save_jsonl(work.output("cluster", "clusters.jsonl", key), groups)
    record = {"key": key, "params": asdict(params), "upstream": upstream["key"],
              "files": _files(work, "cluster", key, "clusters.jsonl"), "stats": {
        "groups": len(groups), "documents": sum(g["size"] for g in groups),
        "duplicates": sum(m["role"] == "duplicate" for g in groups for m in g["members"]),
        "anchored": sum(g["anchored"] for g in groups)}}
    work.record_stage("cluster", record)
    runner.log(f"cluster: {_cluster_summary(record)}")
    return record


def _cluster_summary(record: dict) -> str:
    s = record["stats"]
    return (f"{plural(s['groups'], 'group')} of {plural(s['documents'], 'document')} "
            f"({plural(s['duplicates'], 'duplicate')} of a keeper; "
            f"link {record['params']['link']})")


def clusters(work: WorkDir) -> list[dict]:
    require(work, "cluster")
    return work.load_jsonl(work.current("cluster", "clusters.jsonl"), "cluster")


class StoredPairs:
    """The verified pairs of a work dir (keep: those a filter keeps), read from their JSONL as they are printed:
    thousands of copies of one text have millions of pairs, too many to hold as records."""

    def __init__(self, work: WorkDir, keep: Callable[[dict], bool] | None = None):
        record = require(work, "verify")
        self.work, self.path, self.keep = work, work.current("verify", "pairs.jsonl"), keep
        self._count = None if keep else record["stats"]["pairs"]

    def __iter__(self):
        for pair in self.work.iter_jsonl(self.path, "verify"):
            if self.keep is None or self.keep(pair):
                yield pair

    def __len__(self) -> int:
        if self._count is None:
            self._count = sum(1 for _ in self)
        return self._count

    def __bool__(self) -> bool:
        return len(self) > 0


def verified_pairs(work: WorkDir) -> list[dict]:
    require(work, "verify")
    return work.load_jsonl(work.current("verify", "pairs.jsonl"), "verify")


def recall_warning(work: WorkDir, threshold: float) -> str | None:
    """What is lost below the threshold the bands were chosen for: a pair of Jaccard t becomes a candidate only
    with probability P(t) = 1 - (1 - t^r)^b (None when threshold is not below it, or b and r were given)."""
    record = work.read_manifest()["stages"].get("band")
    chosen = record["params"].get("threshold") if record else None
    if chosen is None or threshold >= chosen:
        return None
    b, r = record["params"]["bands"], record["params"]["rows"]
    return (f"bands were chosen for threshold {chosen} (b={b}, r={r}): a pair at Jaccard {threshold} is a candidate "
            f"with probability {float(lsh.s_curve(threshold, b, r)):.3g}; re-band with `neardup -w {work.root} band "
            f"--threshold {threshold} candidates verify` (or `run ... --threshold {threshold}`)")


def inherited_threshold(work: WorkDir, given: float | None) -> float:
    """--threshold for verify: as given, else the threshold the band stage was chosen for, else the default."""
    if given is not None:
        return given
    record = work.read_manifest()["stages"].get("band")
    if record and record["params"].get("threshold") is not None:
        return record["params"]["threshold"]
    return DEFAULT_THRESHOLD


HEADER_SOURCE = ("jsonl", "id_field", "text_field", "strict", "include", "exclude", "hidden", "follow_links")


def resolved_params(work: WorkDir, upto: str | None) -> dict:
    """Every parameter the stored results up to stage `upto` were made with, from the stage records (what a
    JSONL header records): shingle and source options, num_perm, seed, minhash, bands, rows, max_bucket, the
    verify threshold, and the cluster rules. Where and how the work was done (jobs, partitions) is left out."""
    records = work.read_manifest()["stages"]
    out: dict = {}
    for name in STAGES[:STAGES.index(upto) + 1] if upto in STAGES else ():
        record = records.get(name)
        if record is None:
            continue
        params = dict(record["params"])
        if name == "shingle":
            params.update({k: v for k, v in record.get("source", {}).items() if k in HEADER_SOURCE})
        elif name == "signature":
            params["minhash"] = params.pop("method")
        elif name == "band":
            params.pop("threshold", None)  # what (b, r) were chosen for; the results' threshold is verify's
        out.update(sorted(params.items()))  # (a record read back from the manifest has its keys sorted)
    return out


def default_workdir(args: list[str], source: SourceParams, params: ShingleParams) -> str:
    """A work dir under the user's cache directory, keyed by the resolved inputs and the shingle parameters."""
    return os.path.join(cache.cache_root(), digest(cache.absolute(args), source, params)[:16])


# ---------------------------------------------------------------------------------------------- the index

def check_fixed_parameters(work: WorkDir, wanted: dict[str, dict]) -> None:
    """An index keeps the parameters it was built with: a run asking for other shingle, signature or band
    parameters stops (--rebuild rebuilds the index with the new ones)."""
    manifest = work.read_manifest()
    if not manifest.get("index"):
        return
    for stage, params in wanted.items():
        record = manifest["stages"].get(stage)
        if record is None:
            continue
        stored = record.get("content", {}) if stage == "shingle" else record["params"]
        if stage == "shingle":  # the shingle parameters sit beside the source's in one record
            params, stored = ({**p.get("params", {}), **{k: v for k, v in p.items() if k != "params"}}
                              for p in (params, stored))
        for name, value in sorted(params.items(), key=lambda kv: kv[0] != "threshold"):  # the cause first
            if stored.get(name) != value:
                raise ParameterError(
                    f"{work.root}: this index was built with {stage} {name} {stored.get(name)!r}, not {value!r}; "
                    f"run with the index's parameters, or add --rebuild to rebuild the index with the new ones")


QUERY_FIXED = {"unit": "shingle", "k": "shingle", "whitespace": "shingle", "strip_punct": "shingle",
               "num_perm": "signature", "seed": "signature", "minhash": "signature", "bands": "band", "rows": "band"}


def check_query_parameters(work: WorkDir, given: dict) -> None:
    """A query uses the index's shingle, signature and band parameters; options given for them (a cron script
    passes one option list to run and query) must equal the index's."""
    records = work.read_manifest()["stages"]
    for name, value in given.items():
        record = records.get(QUERY_FIXED[name])
        if record is None:
            continue
        stored = record["params"].get("method" if name == "minhash" else name)
        if stored != value:
            flag = "-k" if name == "k" else "--" + name.replace("_", "-")
            raise ParameterError(f"{work.root}: this index was built with {flag} {stored}, not {value}; query uses "
                                 f"the index's parameters: drop {flag} or give the index's value")


def new_documents(work: WorkDir) -> set[str]:
    """Ids of the live documents added (new, or changed in content) since the last run whose results were
    reported."""
    record = require(work, "shingle")
    reported = work.read_manifest().get("reported", 0)
    catalog = load_catalog(work, record)
    return {catalog.ids[n] for n in np.flatnonzero(catalog.live & (catalog["added"] > reported)).tolist()}


def mark_reported(work: WorkDir) -> None:
    """The results of the current run were reported: --new-only will not report them again."""
    manifest = work.read_manifest()
    record = manifest["stages"].get("shingle")
    if record is not None and manifest.get("reported") != record["run"]:
        work.set(reported=record["run"])


def _candidate_params(work: WorkDir) -> CandidateParams:
    """What the candidates stage paired with (the defaults if it has not run)."""
    record = work.read_manifest()["stages"].get("candidates")
    return CandidateParams(**record["params"]) if record is not None else CandidateParams()


def _band_index(work: WorkDir, shingle_record: dict, band_record: dict):
    """Each band's (sorted keys, documents) of the documents that can pair: the candidates stage's band index
    when it is current, else sorted here."""
    record = work.read_manifest()["stages"].get("candidates")
    if record is not None and record.get("upstream") == band_record["key"] and \
            _up_to_date(work, "candidates", record["key"]) is not None:
        for _, keys_file, docs_file in _index_files(band_record["params"]["bands"]):
            yield from zip(work.load_array(work.output("candidates", keys_file, record["key"]), "candidates"),
                           work.load_array(work.output("candidates", docs_file, record["key"]), "candidates"))
        return
    members = np.sort(pairing_order(load_catalog(work, shingle_record), _candidate_params(work)))
    keys = np.concatenate([work.load_array(work.part("band", n, "npy"), "band", mmap=True)[:]
                           for n in shingle_record["shards"]])[members]
    for j in range(band_record["params"]["bands"]):
        yield lsh.band_index(np.ascontiguousarray(keys[:, j]), members)


def query(work: WorkDir, paths: list[str], stdin, threshold: float | None) -> tuple[list[dict], dict]:
    """Near-duplicates in the index of the given documents (paths, or one text on stdin for "-"), with exact
    Jaccard >= threshold, found like a run finds them (same shingles, signatures and bands); the index is only
    read. Returns (pairs with a = the query document, problems)."""
    band_record = require(work, "band")
    shingle_record = require(work, "shingle")
    stored: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in shingle_record["source"].items()}
    source = SourceParams(**stored)
    params = ShingleParams(**shingle_record["params"])
    signature_params = SignatureParams(**work.read_manifest()["stages"]["signature"]["params"])
    bands, rows = band_record["params"]["bands"], band_record["params"]["rows"]
    threshold = inherited_threshold(work, threshold)
    problems: dict = {}
    if (warning := recall_warning(work, threshold)) is not None:
        problems["messages"] = [warning]
    if list(paths) in ([], ["-"]):
        doc = corpus.stdin_document(stdin)
        if doc is None:
            raise InputError("-: standard input is binary, not text")
        documents: Iterable[corpus.Document] = [doc]
    else:
        items = corpus.list_items(list(paths), source, skip=(str(work.root),)).items
        documents = (doc for _, doc in corpus.read_documents(items, source, problems))
    records, values, offsets = shingle_documents(((doc, {}) for doc in documents), params, problems)
    # a run only counts binary files; a query names its few inputs (corpus.count_binary kept their ids)
    problems.setdefault("messages", []).extend(f"{i}: binary file skipped" for i in problems.get("binary_ids", ()))
    problems["queried"] = len(records)
    if not records:
        return [], problems
    query_signatures = signatures(values, offsets, signature_params)
    keys = lsh.band_keys(query_signatures, bands, rows)
    catalog = load_catalog(work, shingle_record)
    found, starts = [], part_starts(shingle_record)
    for j, (sorted_keys, numbers) in enumerate(_band_index(work, shingle_record, band_record)):
        lo, hi = np.searchsorted(sorted_keys, keys[:, j], "left"), np.searchsorted(sorted_keys, keys[:, j], "right")
        found.append(np.stack([np.repeat(np.arange(len(records)), hi - lo), numbers[sets.ranges(lo, hi - lo)]], axis=1))
    pairs = lsh.unique_pairs(np.concatenate(found))
    limits = _candidate_params(work)
    small = [i for i, r in enumerate(records) if r["shingles"] < limits.min_shingles or r["size"] < limits.min_size]
    for i in small:
        problems.setdefault("messages", []).append(
            f"{records[i]['id']}: under the index's {_limits(limits) or 'one shingle'}; not paired")
    pairs = pairs[~np.isin(pairs[:, 0], small)].reshape(-1, 2)
    ids = catalog.ids_of(sets.sorted_unique(pairs[:, 1]).tolist())  # of ~100,000, the few found: not the whole column
    pairs = pairs[[records[a]["id"] != ids[b] for a, b in pairs.tolist()]].reshape(-1, 2)
    mine = [(values, offsets)]
    va, la = sets.gather_sets(mine, np.zeros(1, np.int64), pairs[:, 0])
    shingles = PartitionArrays(work, "shingle", ("values.npy", "offsets.npy"), shingle_record["shards"])
    vb, lb = sets.gather_sets(shingles, starts, pairs[:, 1])
    inter = sets.intersection_sizes(va, la, vb, lb)
    similarity = sets.jaccard(inter, la, lb)
    sig_a = query_signatures[pairs[:, 0]]
    sig_b = sets.gather_rows(PartitionArrays(work, "signature", ("npy",), shingle_record["shards"]), starts,
                             pairs[:, 1])
    estimate = (sig_a == sig_b).mean(axis=1) if len(pairs) else np.empty(0)
    out = [{"a": records[a]["id"], "b": ids[b], "jaccard": float(similarity[i]),
            "estimate": float(estimate[i]), "intersection": int(inter[i]), "union": int(la[i] + lb[i] - inter[i])}
           for i, (a, b) in enumerate(pairs.tolist()) if similarity[i] >= threshold]
    out.sort(key=lambda r: (-r["jaccard"], r["a"], r["b"]))
    return out, problems
