"""A deduplicated corpus (--write-deduped OUT): the inputs minus the duplicates of the groups, in the inputs' own
format, plus OUT/removed.jsonl (each removed id, its keeper, their Jaccard).

JSONL and Parquet inputs keep their sharding: one output shard per input shard, named as it is (relative to the
inputs' common folder), its records in input order, each record's bytes unchanged (JSONL: the line; Parquet: the
row, same schema), compressed as the input is; a shard is streamed (text.corpus), so memory holds the removed ids,
never the text. A folder's kept files are copied (or hard-linked) into OUT with their relative paths.

Nothing is written into or over an input, and OUT appears whole or not at all: everything is written in a hidden
sibling folder, renamed to OUT at the end. An OUT that exists is replaced only if it is empty or a previous output
(it holds removed.jsonl); a folder interrupted mid-write (a crash, a kill) is removed by the next write.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Callable, Iterable

import numpy as np

from ..config import DedupedParams
from ..errors import InputError, full_disk
from ..pipeline.cluster import clusters, stored_similarity
from ..pipeline.driver import require
from ..pipeline.shingle import load_docs
from ..store.manifest import ShingleRecord
from ..store.workdir import WorkDir
from ..text import corpus
from ..text.inputs import is_pattern, parquet_files, shards_matching, under
from ..wording import plural

REMOVED = "removed.jsonl"
STAGING = ".{name}.neardup-{kind}"  # OUT's hidden siblings: the output being written, a replaced one going


@dataclasses.dataclass(frozen=True)
class Written:
    """What a write did: shards (or files) written, records (or files) kept and removed."""

    folder: str
    shards: int
    kept: int
    removed: int


def check_target(params: DedupedParams, inputs: Iterable[str], workdir: str | None = None) -> None:
    """Refuse an OUT that is, holds or lies inside an input or the work dir, or that exists and is not a folder
    nearDup may replace (empty, or a previous output): before the run, so that no work is lost to it."""
    out = params.folder
    paths = [f for p in inputs if p != "-" for f in (shards_matching(p) if is_pattern(p) else [p])]
    if under(paths)(out):
        raise InputError(f"--write-deduped: {out} is an input or lies inside one; give a folder outside the inputs")
    inside_out = under([out])
    if any(inside_out(p) for p in paths):
        raise InputError(f"--write-deduped: {out} holds an input; give a folder outside the inputs")
    if workdir is not None and (inside_out(workdir) or under([workdir])(out)):
        raise InputError(f"--write-deduped: {out} holds the work dir or lies inside it; give another folder")
    if os.path.lexists(out):
        if not os.path.isdir(out) or os.path.islink(out):
            raise InputError(f"--write-deduped: {out} exists and is not a folder; give a new folder")
        if os.listdir(out) and not os.path.isfile(os.path.join(out, REMOVED)):
            raise InputError(f"--write-deduped: {out} is not empty and holds no {REMOVED} of an earlier "
                             f"deduplicated corpus; give a new or empty folder")


def removals(work: WorkDir) -> list[dict]:
    """The documents left out of the corpus: every group member but its keeper and reference documents, as
    {"id", "keeper", "jaccard"} in group order.

    In an index, a group that holds a document indexed before this run keeps an indexed one (the group's keeper if
    it is indexed, else its most similar indexed member): what an earlier run wrote out stays the copy kept, and a
    new document that duplicates it is removed with that old id as its keeper ("indexed": true) and their exact
    Jaccard."""
    groups = clusters(work)
    if not work.manifest().index:
        return [{"id": m["id"], "keeper": g["keeper"], "jaccard": m["jaccard"]}
                for g in groups for m in g["members"] if m["role"] == "duplicate"]
    record = require(work, ShingleRecord)
    added = load_docs(work, record).catalog["added"]
    old = {m["doc"] for g in groups for m in g["members"] if added[m["doc"]] < record.run}
    rows, pairs = [], []
    for g in groups:
        members = g["members"]  # the keeper, then the others most similar first
        keeper = members[0]
        if keeper["doc"] not in old and not keeper["reference"]:
            keeper = next((m for m in members if m["doc"] in old and not m["reference"]), keeper)
        for m in members:
            if m is not keeper and not m["reference"]:
                rows.append({"id": m["id"], "keeper": keeper["id"], "jaccard": m["jaccard"],
                             "indexed": keeper["doc"] in old})
                if keeper is not members[0]:  # m's Jaccard is against the group's keeper, not this one
                    pairs.append((len(rows) - 1, m["doc"], keeper["doc"]))
    if pairs:
        at, a, b = (np.array(column, np.int64) for column in zip(*pairs))
        for i, j in zip(at.tolist(), stored_similarity(work, record)(a, b).tolist()):
            rows[i]["jaccard"] = j
    return rows


def write(work: WorkDir, params: DedupedParams, log: Callable[[str], None]) -> Written:
    """Write the deduplicated corpus of the run stored in work (its groups) to params.folder; say so on log."""
    record = require(work, ShingleRecord)
    cwd = record.cwd or os.getcwd()
    inputs = [p["path"] for p in record.inputs if not p["reference"]]
    check_target(params, [os.path.join(cwd, p) for p in inputs], str(work.root))
    removed = removals(work)
    duplicates = {r["id"] for r in removed}
    dropped: set[str] = set()  # the duplicates met in the shards written (not those of --reference inputs)

    def drop(doc_id: str) -> bool:
        if doc_id in duplicates:
            dropped.add(doc_id)
            return True
        return False

    out = os.path.abspath(params.folder)
    staging = _staging(out, "new")
    shards = kept = 0
    try:
        os.makedirs(staging)
        if record.source.jsonl:
            base = _common_folder([os.path.join(cwd, p) for p in inputs if p != "-"])
            for path in inputs:
                source, name = _jsonl_source(work, cwd, path, base)
                with open(_target(staging, name), "wb") as f:
                    kept += corpus.copy_jsonl(source, f, drop, record.source.id_field)[0]
                shards += 1
        elif record.source.parquet:
            base = _common_folder([os.path.join(cwd, p) for p in inputs])
            for source in (f for path in inputs for f in parquet_files(os.path.join(cwd, path))):
                kept += corpus.copy_parquet(source, _target(staging, _relative(source, base)), drop,
                                            record.source.id_field)[0]
                shards += 1
        else:
            shards = kept = _copy_files(load_docs(work, record), cwd, inputs, drop, staging, params.mode)
        removed = [row for row in removed if row["id"] in dropped]
        with open(os.path.join(staging, REMOVED), "w", encoding="utf-8", errors="surrogatepass") as listing:
            for row in removed:
                listing.write(json.dumps(row, ensure_ascii=False) + "\n")
        _replace(staging, out)
    except OSError as e:
        shutil.rmtree(staging, ignore_errors=True)
        if e.filename2 and not full_disk(e):  # a copy's error names both ends, and either may have failed
            where = f"copy {e.filename} to {e.filename2}"
        else:  # (a full disk stops the file written: a copy's second name)
            where = f"write {e.filename2 or e.filename or out}"
        raise InputError(f"--write-deduped: cannot {where} ({e.strerror or e}){full_disk(e)}") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    what = f"{plural(shards, 'shard')}, {plural(kept, 'line' if record.source.jsonl else 'row')} kept" \
        if record.source.records else \
        plural(kept, "file") + (" linked" if params.mode == "link" else " copied")
    log(f"write-deduped: {params.folder}: {what}, {plural(len(removed), 'duplicate')} removed (listed in {REMOVED})")
    return Written(params.folder, shards, kept, len(removed))


def _target(staging: str, name: str) -> str:
    """The path of an output file in staging, its folders made."""
    target = os.path.join(staging, name)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    return target


def _staging(out: str, kind: str) -> str:
    """OUT's hidden sibling of a kind (new: being written; old: being replaced), after removing what an
    interrupted write left of it: a write holds the work dir's lock, so none is in progress."""
    parent, name = os.path.split(out)
    path = os.path.join(parent, STAGING.format(name=name, kind=kind))
    if os.path.lexists(path):
        shutil.rmtree(path)
    return path


def _replace(staging: str, out: str) -> None:
    """Rename staging to out; an existing out (checked: empty, or a previous output) is moved aside first and then
    removed, so that out is always either the old corpus or the new one."""
    if not os.path.lexists(out):
        os.rename(staging, out)
        return
    old = _staging(out, "old")
    os.rename(out, old)
    os.rename(staging, out)
    shutil.rmtree(old)


def _common_folder(paths: list[str]) -> str:
    """The folder output names are relative to: a folder given alone is itself; otherwise the deepest folder
    holding every input (a file's folder, for one file)."""
    if len(paths) == 1 and os.path.isdir(paths[0]):
        return os.path.abspath(paths[0])
    folders = [os.path.abspath(p if os.path.isdir(p) else os.path.dirname(os.path.abspath(p))) for p in paths]
    return os.path.commonpath(folders) if folders else os.getcwd()


def _relative(path: str, base: str) -> str:
    rel = os.path.relpath(os.path.abspath(path), base)
    if rel == "." or rel.startswith(".." + os.sep):  # not below base (cannot happen for listed inputs)
        rel = os.path.basename(path)
    return rel


def _jsonl_source(work: WorkDir, cwd: str, path: str, base: str) -> tuple[str, str]:
    """(file to read, output name) of a JSONL input: standard input is read from its spooled copy."""
    if path == "-":
        return str(work.root / "inputs" / "stdin.jsonl"), "stdin.jsonl"
    full = os.path.join(cwd, path)
    with open(full, "rb") as f:
        head = f.read(4) if not corpus.compression(full) else b""
    if head.startswith((b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")):
        raise InputError(f"--write-deduped: {path} is in UTF-16 or UTF-32; convert it to UTF-8 (iconv -t UTF-8) "
                         f"to write a deduplicated copy")
    return full, _relative(full, base)


def _copy_files(docs, cwd: str, inputs: list[str], drop: Callable[[str], bool], staging: str, mode: str) -> int:
    """Copy (or hard-link) the kept files of a folder run into staging, with their paths relative to the inputs'
    common folder; a file holding several documents (an mbox) is left out only if all of them are removed.
    Returns the files written."""
    base = _common_folder([os.path.join(cwd, p) for p in inputs])
    files: dict[str, bool] = {}  # file id -> kept
    catalog = docs.catalog
    for n in np.flatnonzero(catalog.live).tolist():
        doc_id = catalog.ids[n]
        if docs.is_reference(doc_id):
            continue
        path = doc_id if os.path.lexists(os.path.join(cwd, doc_id)) or "#" not in doc_id else doc_id.rsplit("#", 1)[0]
        files[path] = not drop(doc_id) or files.get(path, False)
    written = 0
    for path, keep in sorted(files.items()):
        if not keep:
            continue
        source = os.path.join(cwd, path)
        target = _target(staging, _relative(source, base))
        if mode == "link":
            try:
                os.link(source, target)
            except OSError as e:
                if e.errno in (18, 1):  # EXDEV, EPERM: another file system, or one without hard links
                    raise InputError(f"--write-deduped-mode link: cannot hard-link {path} into the output "
                                     f"({e.strerror}); write to a folder on the inputs' file system, or use "
                                     f"--write-deduped-mode copy") from None
                raise
        else:
            shutil.copy2(source, target)
        written += 1
    return written
