"""Reading documents: an Item gives Documents (a file's text, decoded, or a large file as pieces; a JSONL file's
records), with their size, mtime and content hash. Problems (binary, unreadable, vanished) are counted, not raised.
"""
from __future__ import annotations

import codecs
import dataclasses
import hashlib
import json
import os
import sys
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from ..config import SourceParams
from ..errors import InputError
from .normalise import WORD_RUN

if TYPE_CHECKING:
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
                   cwd: str = "") -> Iterator[tuple[Item, Document]]:
    """The documents of a partition, in order, each with its item; relative item paths are taken relative to cwd
    (default: the working directory). Unreadable, vanished and binary files, and bad JSONL lines, are counted in
    problems (with messages) and skipped; JSONL errors raise InputError when params.strict."""
    base = cwd if not cwd or cwd.endswith("/") else cwd + "/"  # os.path.join(cwd, path) without a call per file
    for item in items:
        path = base + item.path if base and item.path[:1] != "/" else item.path
        if item.kind == "jsonl":
            for doc in _read_jsonl(item, path, params, problems):
                yield item, doc
            continue
        if item.size > STREAM_BYTES:
            yield item, _streamed(item, path)
            continue
        try:
            data = _read_file(path, item.size)
        except FileNotFoundError:
            _problem(problems, "vanished", f"{item.id}: vanished before it could be read")
            continue
        except OSError as e:
            _problem(problems, "unreadable", f"{item.id}: cannot read ({e.strerror})")
            continue
        decoded = decode(data)
        if decoded is None:
            count_binary(problems, item.id)
            continue
        text, replaced = decoded
        sha = hashlib.blake2b(data, digest_size=16).hexdigest()
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
    if item.kind == "jsonl":
        for doc in _read_jsonl(item, item.path, dataclasses.replace(params, strict=False), {}):
            yield doc.id, doc.sha
        return
    digest = hashlib.blake2b(digest_size=16)
    try:
        with open(item.path, "rb") as f:
            for block in iter(lambda: f.read(BLOCK_BYTES), b""):
                digest.update(block)
    except OSError:
        return
    yield item.id, digest.hexdigest()


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
        digest = hashlib.blake2b(digest_size=16)
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
        doc.sha = digest.hexdigest()

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
        doc_id, text = record.get(params.id_field), record.get(params.text_field)
        if doc_id is None or isinstance(doc_id, (dict, list)):
            yield from _bad_line(problems, params, f"{where}: no usable id field {params.id_field!r}")
            continue
        if not isinstance(text, str):
            what = "no" if text is None else "a non-string"
            yield from _bad_line(problems, params, f"{where}: {what} text field {params.text_field!r}")
            continue
        raw = text.encode("utf-8", "surrogatepass")
        yield Document(str(doc_id), text, len(raw), item.mtime_ns, hashlib.blake2b(raw, digest_size=16).hexdigest(),
                       False)


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
