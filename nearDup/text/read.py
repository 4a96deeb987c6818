"""Reading documents: an Item gives Documents (a file's text, decoded, or a large file as pieces; a JSONL file's
records), with their size, mtime and content hash. Problems (binary, unreadable, vanished) are counted, not raised.
"""
from __future__ import annotations

import codecs
import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import queue
import re
import sqlite3
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ..config import SourceParams
from ..errors import InputError
from ..wording import plural
from .corpus import parquet_rows, usable_id
from .normalise import WORD_RUN

if TYPE_CHECKING:
    from .extract import ExtractOptions
    from .inputs import Item

BOMS = ((b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"),
        (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))


STREAM_BYTES = 2 << 20  # files larger than this are read and shingled block by block (bounded memory)
BLOCK_BYTES = 1 << 20


@dataclasses.dataclass
class Document:
    """A document's text, whole (text), or for a large file as pieces cut after whitespace (pieces); sha and
    replaced of a streamed document are known once its pieces have been consumed."""

    id: str
    text: str | None
    size: int
    mtime_ns: int
    sha: str
    replaced: bool  # invalid UTF-8 was replaced by U+FFFD
    pieces: Iterator[str] | None = None
    format: str = ""  # the file's format when its text was extracted (extract.FORMATS); "" for plain text


def content_hash(data: bytes) -> str:
    """A document's content hash (Document.sha: what the catalog, an index, the extraction cache and an action
    script's check compare): SHA-256 truncated to its first 128 bits, 32 hex digits (truncation as NIST SP 800-107
    r1 section 5.1 allows). SHA-256, not BLAKE2b: with the SHA extensions of x86 and ARM CPUs, OpenSSL hashes
    1.3-1.8 GB/s against BLAKE2b's 0.8-0.9 (without them, 1.7x slower: bench/RESULTS-formats.md)."""
    return hashlib.sha256(data).hexdigest()[:32]


def content_digest() -> hashlib._Hash:
    """content_hash's incremental form, for a file read block by block: update() each block, then content_hex()."""
    return hashlib.sha256()


def content_hex(digest: hashlib._Hash) -> str:
    return digest.hexdigest()[:32]


class BinaryFile(Exception):
    """Raised while streaming a large file that turns out to hold a NUL byte."""



def decode(data: bytes) -> tuple[str, bool] | None:
    """Text of a file's bytes: BOM-selected UTF-8/16/32, else UTF-8 with U+FFFD replacement.

    Returns (text, replaced) or None for binary data (a NUL byte and no UTF-16/32 BOM)."""
    for bom, encoding in BOMS:
        if data.startswith(bom):
            text = data[len(bom):].decode(encoding, "replace")
            return text, "\ufffd" in text
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace"), True


def read_documents(items: Iterable[Item], params: SourceParams, problems: dict,
                   cwd: str = "", cache: str | None = None, tidy: bool = True) -> Iterator[tuple[Item, Document]]:
    """The documents of a partition, in order, each with its item; relative item paths are taken relative to cwd
    (default: the working directory). Unreadable, vanished and binary files, and bad JSONL lines, are counted in
    problems (with messages) and skipped; JSONL errors raise InputError when params.strict.

    A file in another format than plain text (PDF, office, HTML, e-mail, compressed: text/extract.py, detected by
    content) gives the documents its extractor finds, each counted in problems["format:FMT"]; one in a format
    whose library is missing is counted in problems["missing:FMT"] (missing_extras_note says so once); a file
    --formats leaves out, in problems["other_format"]. cache: a folder where extracted texts are kept by content
    hash and extractor version, so that a file read again unchanged is not extracted again (when its extraction
    took at least CACHE_SECONDS: a quicker one is redone rather than stored). tidy=False leaves an extracted text's
    blanks as its extractor gives them (extract.ExtractOptions.tidy), for a reader of its words only."""
    store = _TextCache(cache) if cache else None
    try:
        yield from _read_items(items, params, problems, cwd, store, tidy)
    finally:  # at the end of the partition, or when its reader stops early: the texts extracted are kept
        if store is not None:
            store.close()


def _read_items(items: Iterable[Item], params: SourceParams, problems: dict, cwd: str,
                store: _TextCache | None, tidy: bool) -> Iterator[tuple[Item, Document]]:
    base = cwd if not cwd or cwd.endswith("/") else cwd + "/"  # os.path.join(cwd, path) without a call per file
    text_wanted = not params.formats or "text" in params.formats
    @functools.cache
    def options() -> ExtractOptions:  # at the first file an extractor reads: JSONL never imports them (~20 ms)
        from .extract import ExtractOptions

        return ExtractOptions(html_main=params.html == "main", max_bytes=EXTRACT_BYTES, tidy=tidy)

    guard = getattr(_local, "guard", None)
    for item in items:
        if guard is not None and guard.abandoned:  # the task was given up (a hung file, Ctrl-C): stop here
            raise _Abandoned
        path = base + item.path if base and item.path[:1] != "/" else item.path
        if item.kind == "jsonl":
            for doc in _read_jsonl(item, path, params, problems):
                yield item, doc
            continue
        if item.kind == "parquet":
            for doc in _read_parquet(item, path, params, problems):
                yield item, doc
            continue
        if item.size > STREAM_BYTES:
            try:
                with open(path, "rb") as f:
                    fmt = document_format(f.read(HEAD), item.path)
            except OSError as e:
                _unreadable(problems, item, e)
                continue
            if fmt is not None:
                for doc in _extracted(item, path, fmt, None, params, options(), problems, store):
                    yield item, doc
            elif text_wanted:
                yield item, _streamed(item, path)
            else:
                _count(problems, "other_format")
            continue
        try:
            data = _read_file(path, item.size)
        except OSError as e:
            _unreadable(problems, item, e)
            continue
        fmt = document_format(data, item.path)
        if fmt is not None:
            for doc in _extracted(item, path, fmt, data, params, options(), problems, store):
                yield item, doc
            continue
        if not text_wanted:
            _count(problems, "other_format")
            continue
        decoded = decode(data)
        if decoded is None:
            count_binary(problems, item.id)
            continue
        text, replaced = decoded
        sha = content_hash(data)
        yield item, Document(item.id, text, len(data), item.mtime_ns, sha, replaced)


def stdin_document(stdin=None) -> Document | None:
    """The text on standard input as one document "-" (compare and query read text there, not paths), or None
    for binary data."""
    raw = (stdin if stdin is not None else sys.stdin.buffer).read()
    decoded = decode(raw)
    return None if decoded is None else Document("-", decoded[0], len(raw), 0, "", decoded[1])


def content_hashes(item: Item, params: SourceParams) -> Iterator[tuple[str, str]]:
    """(id, sha) of each document of an item, as read_documents would give them, without decoding files: how an
    index recognises an unchanged or renamed document before shingling it. Unreadable items give nothing."""
    if item.kind != "file":
        read = _read_jsonl if item.kind == "jsonl" else _read_parquet
        for doc in read(item, item.path, dataclasses.replace(params, strict=False), {}):
            yield doc.id, doc.sha
        return
    try:
        sha = _file_hash(item.path)
    except OSError:
        return
    yield item.id, sha


def _read_file(path: str, size: int) -> bytes:
    """The whole file, in as few system calls as the listed size allows: open, read, close (open(...).read()
    also makes two fstat, an ioctl, two lseek and a second read per file: 8 calls instead of 3, a fifth of the
    reading time for 20,000 small files). Reads on until end of file if the file grew since it was listed."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        data = os.read(fd, size + 1)
        if len(data) <= size:  # a short read of a regular file is its end
            return data
        chunks = [data]
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _streamed(item: Item, path: str) -> Document:
    doc = Document(item.id, None, 0, item.mtime_ns, "", False)

    def pieces() -> Iterator[str]:
        digest = content_digest()
        with open(path, "rb") as f:
            head = f.read(4)
            encoding = next((enc for bom, enc in BOMS if head.startswith(bom)), None)
            skip = next((len(bom) for bom, enc in BOMS if head.startswith(bom)), 0)
            decoder = codecs.getincrementaldecoder(encoding or "utf-8")("replace")
            f.seek(0)
            carry, first = "", True
            while True:
                block = f.read(BLOCK_BYTES)
                digest.update(block)
                doc.size += len(block)
                if encoding is None and b"\0" in block:
                    raise BinaryFile(item.id)
                text = carry + decoder.decode(block[skip:] if first else block, final=not block)
                first = False
                doc.replaced = doc.replaced or "\ufffd" in text
                cut = max(text.rfind(c) for c in " \n\t\r") + 1 if block else len(text)
                if cut == 0 and len(text) > 8 * BLOCK_BYTES:  # 8 MB without a blank: cut anyway, memory first,
                    # after the last non-word character (no word is cut), else inside the one word the text is
                    # (the word shingler carries it over: stages._streamed_shingles)
                    cut = len(text) - WORD_RUN.match(text[::-1]).end() or len(text)  # type: ignore[union-attr]  # \w*
                carry, text = text[cut:], text[:cut]
                if text:
                    yield text
                if not block:
                    break
        doc.sha = content_hex(digest)

    doc.pieces = pieces()
    return doc


def count_binary(problems: dict, doc_id: str) -> None:
    """Count a binary file, and name it: an index remembers it so as not to open it again while it is unchanged."""
    problems["binary"] = problems.get("binary", 0) + 1
    problems.setdefault("binary_ids", []).append(doc_id)


def _problem(problems: dict, kind: str, message: str) -> None:
    problems[kind] = problems.get(kind, 0) + 1
    problems.setdefault("messages", []).append(message)


def _read_jsonl(item: Item, path: str, params: SourceParams, problems: dict) -> Iterator[Document]:
    with open(path, "rb") as f:
        f.seek(item.start)
        block = f.read(item.end - item.start)
    for number, line in enumerate(block.splitlines(), start=item.first_line):
        if not line.strip():
            continue
        where = f"{item.id.rsplit(':', 1)[0]}:{number}"
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            yield from _bad_line(problems, params, f"{where}: not a JSON object ({str(e).splitlines()[0]})")
            continue
        doc = _record(item, where, record.get(params.id_field), record.get(params.text_field), "field", params,
                      problems)
        if doc is not None:
            yield doc


def _read_parquet(item: Item, path: str, params: SourceParams, problems: dict) -> Iterator[Document]:
    """The documents of rows [item.start, item.end) of a Parquet file, read as JSONL records are."""
    for number, (value, text) in enumerate(parquet_rows(path, item.start, item.end,
                                                        (params.id_field, params.text_field)), start=item.first_line):
        doc = _record(item, f"{item.path}: row {number}", value, text, "column", params, problems)
        if doc is not None:
            yield doc


def _record(item: Item, where: str, value, text, what: str, params: SourceParams, problems: dict) -> Document | None:
    """The document of a record (a JSONL line's fields, a Parquet row's columns), or None and a bad line counted
    (an error with --strict) when it has no usable id (corpus.usable_id) or no string text."""
    doc_id = usable_id(value)
    if doc_id is None:
        _bad_line(problems, params, f"{where}: no usable id {what} {params.id_field!r}")
        return None
    replaced = False
    if isinstance(text, bytes):  # a Parquet column of bytes (BYTE_ARRAY without the UTF8 annotation): as a file's
        decoded = decode(text)
        if decoded is None:
            _bad_line(problems, params, f"{where}: binary data (a NUL byte) in text {what} {params.text_field!r}")
            return None
        text, replaced = decoded
    if not isinstance(text, str):
        missing = "no" if text is None else "a non-string"
        _bad_line(problems, params, f"{where}: {missing} text {what} {params.text_field!r}")
        return None
    raw = text.encode("utf-8", "surrogatepass")
    return Document(doc_id, text, len(raw), item.mtime_ns, content_hash(raw), replaced)


def first_record_fields(item: Item) -> list[str] | None:
    """The fields of the first JSON object in a JSONL item (what an error names when a field given is not
    there), or None if it has none."""
    try:
        with open(item.path, "rb") as f:
            f.seek(item.start)
            block = f.read(item.end - item.start)
    except OSError:
        return None
    for line in block.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            return list(record)
    return None


def _bad_line(problems: dict, params: SourceParams, message: str):
    if params.strict:
        raise InputError(message + " (remove --strict to skip such lines)")
    _problem(problems, "bad_lines", message)
    return iter(())


# ------------------------------------------------------------------------------------ other formats (issue 20)

HEAD = 4096  # what extract.detect needs of a file's start
# What can start a file that is not plain text: markup or header lines (HTML, e-mail, mbox), magic numbers (PDF,
# zip, gzip, xz, zstd, bzip2, OLE) and UTF-16/32 byte order marks; one cheap match fails on plain text, so
# that the costlier extract.detect runs only on files that may need it. (A PDF may have junk before its header.)
_MAYBE_DOCUMENT = re.compile(
    rb"(?:\xef\xbb\xbf)?[ \t\r\n]*(?:<|From |[!-9;-~]+:)|%PDF-|PK\x03\x04|\x1f\x8b|\xfd7zXZ\x00|\x28\xb5\x2f\xfd|BZh"
    rb"|\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1|\xff\xfe|\xfe\xff|\x00\x00\xfe\xff")
_MARKUP_FIRST = frozenset((b"<", b"\xef", b" ", b"\t", b"\r", b"\n"))  # what can start a head extract._markup accepts
_HTML_NAMES = (".html", ".htm", ".xhtml", ".HTML", ".HTM", ".XHTML")
_COMPRESSED_MAGIC = {b"\x1f\x8b": (b"\x1f\x8b", "gz"), b"\xfd7": (b"\xfd7zXZ\x00", "xz"),
                     b"\x28\xb5": (b"\x28\xb5\x2f\xfd", "zst"), b"BZ": (b"BZh", "bz2")}  # by first 2 bytes
_FIRST_BYTES = frozenset(b"<%PF\x1f\xfd(B\xd0\xff\xfe\x00\xef \t\r\n")  # the first bytes _MAYBE_DOCUMENT can match
                                                                           # without a ":" (headers have one)
EXTRACT_SECONDS = 60.0  # per file: an extractor still busy after this is abandoned and the file skipped
EXTRACT_BYTES = 256 << 20  # per file: uncompressed bytes of all its layers and zip members (bombs are refused)
# An extraction is cached when it took longer than this (CPU time of the extracting thread). Writing a text to the
# cache costs ~0.045 ms of CPU (in its task's one transaction) and reading it back ~0.02 ms (bench/RESULTS-formats.md,
# 2 KB texts): at most a tenth of the extraction for the texts kept (PDF, EPUB, e-mail), while small DOCX, ODT, HTML
# and compressed files, which take 0.1-0.4 ms, are extracted again rather than paying for a cache a first run does
# not use
CACHE_SECONDS = 0.0005
CACHE_FLUSH_BYTES = 16 << 20  # a task's texts waiting to be written to the cache (_TextCache)
CACHE_FLUSH_SECONDS = 10.0


def document_format(head: bytes, name: str) -> str | None:
    """The format of a file whose text must be extracted (extract.FORMATS, "zip" or "ole"), from its first bytes
    (HEAD of them or more) and its name; None for plain text and binary data, which are read as they always were."""
    # memchr-fast tests first: a plain text usually starts with a letter, has no ":" in its first 80 bytes (a
    # mail header has one there) and no "%" in its first 1024 (a PDF header after junk)
    if (not head or (head[0] not in _FIRST_BYTES and head.find(b":", 0, 80) < 0 and head.find(b"%", 0, 1024) < 0
                     and not name.endswith(_HTML_NAMES))):
        return None
    # a compressed file by its magic number, extract.detect's first test, without the regex, detect's other tests
    # and their calls: 2 us of a .gz file's 20
    compressed = compressed_format(head)
    if compressed is not None:
        return compressed
    percent = head.find(b"%", 0, 1024)
    pdf = percent >= 0 and head.find(b"%PDF-", percent, 1024) >= 0
    if not (_MAYBE_DOCUMENT.match(head) or pdf or name.endswith(_HTML_NAMES)):
        return None
    ex = _extract()
    # markup: detect's answer, as none of the magic numbers it tests before starts with "<", a blank or a BOM;
    # without its copy of a page's first 4 KB and its other tests (1-1.5 us of an HTML page's 3)
    if not pdf and head[:1] in _MARKUP_FIRST and ex._markup(head, name.lower().endswith(ex._TEXT_NAMES)):
        return "html"
    fmt = ex.detect(head[:HEAD], name)
    return None if fmt in ("text", "binary") else fmt


def compressed_format(head: bytes) -> str | None:
    """The compressed format ("gz", "xz", "zst", "bz2") whose magic number head starts with (bzip2's: "BZh" and a
    block size digit), or None; extract.detect's test too."""
    magic = _COMPRESSED_MAGIC.get(head[:2])
    if magic is None or not head.startswith(magic[0]) or (magic[1] == "bz2" and not head[3:4].isdigit()):
        return None
    return magic[1]


_EXTRACT: Any = None


def _extract() -> Any:
    """The module text/extract.py, imported on first use (the command line starts without it: ARCHITECTURE.md) and
    then kept: an import statement in a function costs 0.5-1 us a call, 5% of a small compressed file."""
    global _EXTRACT
    if _EXTRACT is None:
        from . import extract
        _EXTRACT = extract
    return _EXTRACT


def _unreadable(problems: dict, item: Item, e: OSError) -> None:
    if isinstance(e, FileNotFoundError):
        _problem(problems, "vanished", f"{item.id}: vanished before it could be read")
    else:
        _problem(problems, "unreadable", f"{item.id}: cannot read ({e.strerror})")


def _count(problems: dict, kind: str, n: int = 1) -> None:
    problems[kind] = problems.get(kind, 0) + n


def _extracted(item: Item, path: str, fmt: str, data: bytes | None, params: SourceParams, options: ExtractOptions,
               problems: dict, store: _TextCache | None) -> list[Document]:
    """The documents of a file in format fmt (data: its bytes, if read), from the cache or its extractor.

    A file the extractor refuses (encrypted, corrupt, no text layer, a bomb, too slow) gives one warning naming
    it and counts as unreadable (exit status 2); binary data or an unsupported container counts as binary, as a
    plain-text reader would have it; a missing library is counted per format (missing_extras_note). A list, not a
    generator: one object less a file, whose documents are all in memory anyway."""
    ex = _extract()
    if params.formats and fmt not in params.formats:
        _count(problems, "other_format")
        return []
    key = (path, item.size, item.mtime_ns)
    if _HUNG and key in _HUNG:  # its extraction passed the time limit in this process (time_limited_task): not again
        _problem(problems, "unreadable", f"{item.id}: still extracting after {EXTRACT_SECONDS:g} s: skipped "
                                         f"(a hung or very slow {ex.LABELS.get(fmt, fmt)} file)")
        return []
    # what the cache or the extractor found: the documents [(id suffix, text)] and notes, or an error [kind, reason]
    docs: list = []
    notes: list[str] = []
    error = None
    try:
        sha = _file_hash(path) if data is None else content_hash(data)
        stored = store.key(sha, fmt, options) if store is not None and store.may_hold() else None
        found = store.get(stored) if store is not None and stored is not None else None
        if found is not None:
            docs, notes, error = found.get("docs", []), found.get("notes", []), found.get("error")
        else:
            began = store.clock(fmt) if store is not None else (0.0, None)
            try:
                docs = _limited(key, ex.extract, path, fmt, options, notes.append, data)
            except ex.ExtractError as exc:
                if isinstance(exc, ex.MissingExtra):
                    _count(problems, f"missing:{exc.format}")
                    return []
                error = [type(exc).__name__, exc.reason]
            except _TimeLimit:
                _problem(problems, "unreadable", f"{item.id}: still extracting after {EXTRACT_SECONDS:g} s: "
                                                 f"skipped (a hung or very slow {ex.LABELS.get(fmt, fmt)} file)")
                return []
            if store is not None and store.keeps(fmt, began):  # (the dict made only then: 0.2 us a file)
                store.put(stored or store.key(sha, fmt, options),
                          {"error": error} if error else {"docs": docs, "notes": notes})
    except OSError as e:
        _unreadable(problems, item, e)
        return []
    if error:
        kind, reason = error
        if kind == "Unsupported":
            count_binary(problems, item.id)
        else:
            _problem(problems, "unreadable", f"{item.id}: {reason}")
        return []
    for note in notes:  # about parts of the file (malformed mbox messages); the rest is read
        _problem(problems, "unreadable", note.replace(path, item.id, 1))
    _count(problems, f"format:{fmt}", len(docs))
    out = []
    for suffix, text in docs:
        if suffix:  # one of several documents of the file (an mbox message): its own hash and size
            raw = text.encode("utf-8", "surrogatepass")
            out.append(Document(item.id + suffix, text, len(raw), item.mtime_ns, content_hash(raw), False,
                                format=fmt))
        else:  # the file's size and hash, as an index and an action script check them (no pieces; the format
            # by position: a keyword argument cost 0.12 us)
            out.append(Document(item.id, text, item.size, item.mtime_ns, sha, False, None, fmt))
    return out


def missing_extras_note(counts: dict) -> str | None:
    """One line about the files skipped for want of the formats extra (counts: problems or stage stats with
    "missing:FMT" keys), or None."""
    missing = {k.split(":", 1)[1]: n for k, n in counts.items() if k.startswith("missing:") and n}
    if not missing:
        return None
    from .extract import LABELS, PIP  # (only then, as in format_notes)

    total = sum(missing.values())
    formats = ", ".join(f"{LABELS.get(fmt, fmt)} ({n})" for fmt, n in sorted(missing.items()))
    return (f"{plural(total, 'file')} skipped: reading {formats} needs the formats extra; "
            f"install it with: {PIP}")


def _file_hash(path: str) -> str:
    digest = content_digest()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(BLOCK_BYTES), b""):
            digest.update(block)
    return content_hex(digest)


def _cache_key(sha: str, version: str) -> str:
    """The key of the text extracted from content sha by extractor version."""
    return hashlib.blake2b(f"{sha}\0{version}".encode(), digest_size=16).hexdigest()


class _TextCache:
    """Extracted texts by key (_cache_key), in one SQLite file in the cache folder. A task looks each file up
    there and writes what it extracted in one transaction at its end (or every CACHE_FLUSH_BYTES or
    CACHE_FLUSH_SECONDS, so that memory stays bounded and a killed task loses little): creating a file per
    document cost 0.3-0.8 ms on this VM's disk, more than extracting a small file. Workers of a run share the file
    (SQLite locks it; each opens its own connection, never one inherited across fork). A cache that cannot be read
    or written is no error: the text is extracted again next time."""

    NAME = "texts.sqlite"
    # SQLite's user_version of the file: the content hash its keys are made of (0, an older file's: BLAKE2b;
    # 1: content_hash's SHA-256). Entries under another hash can never be found again, and --force keeps the
    # file, so a file of another version is emptied when first opened.
    HASH_VERSION = 1

    def __init__(self, folder: str):
        self.folder = folder
        self.db: sqlite3.Connection | None = None
        self.opened = False  # tried to open the file
        self.pending: dict[str, bytes] = {}
        self.pending_bytes = 0
        self.since = time.monotonic()
        self.options: ExtractOptions | None = None  # what versions were made for
        self.versions: dict[str, str] = {}
        self.quick: set[str] = set()  # formats whose last timed extraction was far quicker than CACHE_SECONDS

    def clock(self, fmt: str) -> tuple[float, float | None]:
        """The start of an extraction of a file in format fmt, for keeps(): the wall clock, and the thread's CPU
        clock unless fmt is quick."""
        return time.monotonic(), None if fmt in self.quick else time.thread_time()

    def keeps(self, fmt: str, began: tuple[float, float | None]) -> bool:
        """Whether an extraction that began at began (clock()) took at least CACHE_SECONDS of CPU time of this
        thread, which extracts (time_limited_task), so that its text is cached. CPU time, not wall time: on a busy
        machine, wall time counted the waits for a core, and a third to a half of 0.4 ms DOCX, ODT and EPUB files
        were cached at load 15.

        The CPU clock is a system call, though (0.56 us, against 0.05 for the wall clock: 1.1 us a file, 2% of a
        small .xz file's cost), and a thread runs on one core at a time, so its CPU time over an interval is at
        most the interval's wall time: an extraction quicker than CACHE_SECONDS by the wall clock is not kept,
        exactly as the CPU clock would decide. So a format is timed by the CPU clock until one of its extractions
        takes under a quarter of CACHE_SECONDS (quick: its files are far from the line), and then by the wall
        clock alone while they stay under CACHE_SECONDS. One that does not (a wait for a core, or an unusually
        large file) is not kept, as its CPU time is unknown, and the format is timed again: a needless entry
        would make the cache file that every later run looks each file up in (a file quicker formats never make),
        while a slow file left out is only extracted again."""
        wall, cpu = began
        elapsed = time.monotonic() - wall
        if cpu is None:
            if elapsed >= CACHE_SECONDS:
                self.quick.discard(fmt)
            return False
        spent = elapsed if elapsed < CACHE_SECONDS / 4 else time.thread_time() - cpu  # (CPU time <= wall time)
        if spent < CACHE_SECONDS / 4:
            self.quick.add(fmt)
        return spent >= CACHE_SECONDS

    def key(self, sha: str, fmt: str, options: ExtractOptions) -> str:
        """_cache_key of the text of content sha extracted as fmt with options; the extractor's version is looked
        up once per format of a task (hashing the options for version()'s cache cost 0.3 us a file)."""
        if options is not self.options:
            self.options, self.versions = options, {}
        version = self.versions.get(fmt)
        if version is None:
            version = self.versions[fmt] = _extract().version(fmt, options)
        return _cache_key(sha, version)

    def may_hold(self) -> bool:
        """Whether get() can find anything: texts pending, or a cache file. A first run has neither, and skips the
        key of a lookup made in vain (0.7 us a file); a text it caches gets its key then."""
        return bool(self.pending) or self._open(False) is not None

    def _open(self, create: bool) -> sqlite3.Connection | None:
        if self.db is None and (create or not self.opened):
            self.opened = True
            path = os.path.join(self.folder, self.NAME)
            if create or os.path.exists(path):  # a first run's lookups make no file
                with contextlib.suppress(OSError, sqlite3.Error):
                    os.makedirs(self.folder, exist_ok=True)
                    self.db = sqlite3.connect(path, timeout=60, check_same_thread=False)
                    # no fsync: a crashed process leaves the file whole (SQLite's journal), and only a crash of
                    # the system could lose entries, which a cache may (an fsync cost ~30 ms a task here)
                    self.db.execute("PRAGMA synchronous = OFF")
                    if self.db.execute("PRAGMA user_version").fetchone()[0] != self.HASH_VERSION:
                        with self.db:  # one writer at a time: the check again, then the emptying
                            self.db.execute("BEGIN IMMEDIATE")
                            if self.db.execute("PRAGMA user_version").fetchone()[0] != self.HASH_VERSION:
                                self.db.execute("DROP TABLE IF EXISTS texts")
                                self.db.execute(f"PRAGMA user_version = {self.HASH_VERSION}")
                    self.db.execute("CREATE TABLE IF NOT EXISTS texts (key TEXT PRIMARY KEY, found BLOB) "
                                    "WITHOUT ROWID")
        return self.db

    def get(self, key: str) -> dict | None:
        found = self.pending.get(key)
        if found is None and (db := self._open(False)) is not None:
            with contextlib.suppress(sqlite3.Error):
                row = db.execute("SELECT found FROM texts WHERE key = ?", (key,)).fetchone()
                found = row[0] if row else None
        if found is None:
            return None
        try:
            value = json.loads(found.decode("utf-8", "surrogatepass"))  # an extracted text may hold lone surrogates
        except ValueError:
            return None
        return value if isinstance(value, dict) and ("docs" in value or "error" in value) else None

    def put(self, key: str, found: dict) -> None:
        self.pending[key] = text = json.dumps(found, ensure_ascii=False).encode("utf-8", "surrogatepass")
        self.pending_bytes += len(text)
        if self.pending_bytes >= CACHE_FLUSH_BYTES or time.monotonic() - self.since >= CACHE_FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        if self.pending and (db := self._open(True)) is not None:
            with contextlib.suppress(sqlite3.Error), db:  # one transaction, committed at the end of the block
                db.executemany("INSERT OR REPLACE INTO texts VALUES (?, ?)", self.pending.items())
        self.pending.clear()
        self.pending_bytes = 0
        self.since = time.monotonic()

    def close(self) -> None:
        self.flush()
        if self.db is not None:
            self.db.close()
            self.db = None


class _TimeLimit(Exception):
    pass


class _Abandoned(BaseException):  # not an Exception: no handler of the task's code may swallow it
    """Raised in a task's thread that time_limited_task gave up, when its extraction returns at last."""


class _Guard:
    """The deadline of the extraction under way in a task's thread, armed and cleared by plain attribute writes:
    no system call and no handoff to another thread per file (a handoff cost 30-50 us of CPU a file, and up to
    0.7 ms of wall time on a busy machine: bench/RESULTS-formats.md)."""

    def __init__(self):
        self.armed: tuple[tuple, float] | None = None  # (file key, deadline) while an extraction runs
        self.abandoned = False
        self.result: tuple[bool, Any] = (False, None)  # (True, value) or (False, the exception raised)
        self.done = threading.Event()

    def run(self, fn, arg) -> None:
        """fn(arg), in the task's thread."""
        _local.guard = self
        try:
            self.result = (True, fn(arg))
        except BaseException as exc:  # handed to the caller, which raises it
            self.result = (False, exc)
        self.done.set()


_local = threading.local()  # .guard: the _Guard of the task this thread runs, if any
_HUNG: set[tuple] = set()  # (path, size, mtime_ns) of files whose extraction passed the limit in this process


def time_limited_task(fn, arg):
    """fn(arg) run in a new thread while this one watches the deadline of each file it extracts (EXTRACT_SECONDS).

    When one passes, that thread is given up: it may be stuck inside a C library (PDFium and lxml release the
    interpreter lock), so it is left to run as a daemon, and stops with _Abandoned as soon as its extraction
    returns. The file is remembered as hung and fn(arg) runs again from the start in a fresh thread, which skips
    it with a warning. So fn must be a function of arg alone that writes its results at its end, as a partition
    task does (its files are written atomically after it has read every document). The watching thread wakes
    about once per EXTRACT_SECONDS / 2, not once per file."""
    while True:
        guard = _Guard()
        threading.Thread(target=guard.run, args=(fn, arg), daemon=True, name=TASK_THREAD).start()
        hung = None
        try:
            wait = EXTRACT_SECONDS / 2
            while not guard.done.wait(wait):
                armed = guard.armed
                wait = EXTRACT_SECONDS / 2 if armed is None else armed[1] - time.monotonic()
                if armed is not None and wait <= 0 and guard.armed is armed:
                    hung = armed[0]
                    break
                wait = max(wait, 0.01)
        finally:  # also on Ctrl-C: the thread stops at its next file
            guard.abandoned = hung is not None or not guard.done.is_set()
        if hung is None:
            ok, value = guard.result  # set before done
            if not ok:
                raise value
            return value
        _HUNG.add(hung)


TASK_THREAD = "nearDup-task"


def finish_given_up_tasks(seconds: float) -> None:
    """Wait up to `seconds` for the task threads that an interrupted run gave up (time_limited_task): one writing
    its shard's files finishes them (each atomically: the next run reuses them), one reading stops at its next
    file. Else the interpreter's exit kills a daemon thread mid-write and leaves its temporary file in the work
    dir."""
    deadline = time.monotonic() + seconds
    for thread in threading.enumerate():
        if thread.name == TASK_THREAD and thread is not threading.current_thread():
            while True:
                try:
                    thread.join(max(0.0, deadline - time.monotonic()))
                    break
                except RuntimeError:  # started, not yet running (the signal came in between): join it once it runs
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(0.005)


def _limited(key: tuple, fn, path: str, fmt: str, options: ExtractOptions, warn, data: bytes | None) -> list:
    """list(fn(path, fmt, options, warn, data)) (the extraction of the file key) under the time limit: by the
    deadline of the task this thread runs (time_limited_task), or outside one (extract, compare, query) in the
    extraction thread of _time_limited. The arguments, not a closure (a lambda per file cost ~0.3 us), and named
    (*args cost 0.1 us)."""
    guard = getattr(_local, "guard", None)
    if guard is None:
        return _time_limited(lambda: list(fn(path, fmt, options, warn, data)), EXTRACT_SECONDS)
    guard.armed = (key, time.monotonic() + EXTRACT_SECONDS)
    try:
        return list(fn(path, fmt, options, warn, data))
    finally:
        guard.armed = None
        if guard.abandoned:
            raise _Abandoned


class _Helper:
    """One daemon thread per process that runs extractions outside a partition task (extract, compare, query: a
    few files), so that the caller can stop waiting for one that hangs, even inside a C library (PDFium, lxml
    release the interpreter lock): the thread is then abandoned (a new one serves the next file) and, being a
    daemon, never keeps the process alive. A task avoids this handoff per file (time_limited_task)."""

    current: _Helper | None = None

    def __init__(self):
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.pid = os.getpid()
        threading.Thread(target=self.loop, daemon=True, name="nearDup-extract").start()

    def loop(self) -> None:
        while True:
            fn, box, done = self.jobs.get()
            try:
                box.append((True, fn()))
            except BaseException as exc:  # handed to the caller, which raises it
                box.append((False, exc))
            done.set()


def _time_limited(fn, seconds: float):
    """fn() run by the extraction thread; raises _TimeLimit after seconds (and abandons that thread)."""
    helper = _Helper.current
    if helper is None or helper.pid != os.getpid():  # none yet, or inherited across fork (threads are not)
        helper = _Helper.current = _Helper()
    box: list = []
    done = threading.Event()
    helper.jobs.put((fn, box, done))
    if not done.wait(seconds):
        _Helper.current = None
        raise _TimeLimit
    ok, value = box[0]
    if not ok:
        raise value
    return value


def format_counts(counts: dict) -> dict[str, int]:
    """Documents per format other than plain text, from problems or stage stats ("format:FMT" keys)."""
    return {k.split(":", 1)[1]: n for k, n in sorted(counts.items()) if k.startswith("format:") and n}


def format_notes(counts: dict) -> list[str]:
    """What a run says of its documents in other formats, for the shingle stage's summary line."""
    notes = []
    if found := format_counts(counts):
        from .extract import LABELS  # (only then: a run of plain text or JSONL never imports the extractors)

        notes.append("extracted: " + ", ".join(f"{n} {LABELS.get(fmt, fmt)}" for fmt, n in found.items()))
    if counts.get("other_format"):
        n = counts["other_format"]
        notes.append(f"{plural(n, 'file')} of other formats skipped (--formats)")
    return notes
