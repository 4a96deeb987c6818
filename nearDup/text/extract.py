"""Text of a document file: format detection by content, and one extractor per format.

    fmt = detect(head, name)                       # head: the file's first HEAD bytes
    for suffix, text in extract(path, fmt, ExtractOptions()):
        ...                                        # id = path + suffix ("" or "#3" for the 3rd message of an mbox)

Formats: text, pdf, docx, odt, epub, html, eml, mbox, and gz/bz2/xz/zst around any of them. The libraries were
chosen by measurement (bench/extractors.py, bench/RESULTS-formats.md): pypdfium2 for PDF, lxml for HTML's visible
text and EPUB chapters, trafilatura for HTML main content, charset-normalizer when an HTML file's charset must be
guessed, zstandard for .zst; DOCX, ODT, e-mail and gz/bz2/xz need only the standard library. A missing library
raises MissingExtra, never ImportError.

Every failure is an ExtractError whose str() is one line "PATH: what happened: skipped|refused"; the caller warns
and goes on. Memory is bounded: compressed layers and zip members are read in chunks against one budget
(ExtractOptions.max_bytes of uncompressed bytes per file, refusing zip and compression bombs), XML is parsed
incrementally, and PDFs page by page. A per-file time limit is the calling worker's job; max_pages is the
cooperative part of it.
"""
from __future__ import annotations

import bz2
import codecs
import dataclasses
import email
import email.policy
import functools
import gzip
import importlib
import io
import lzma
import posixpath
import re
import shutil
import struct
import sys
import tempfile
import threading
import zipfile
import zlib
from collections.abc import Callable, Iterator
from importlib import metadata
from typing import Any
from urllib.parse import unquote
from xml.etree import ElementTree as ET

from ..errors import InputError
from .read import BOMS, compressed_format, decode, document_format

HEAD = 4096  # bytes detect() needs from the start of a file
PIP = "pip install 'nearDup[formats]'"

# Bump a format's number whenever its extractor's output can change: cached texts are keyed by content hash and
# version(fmt), so a bump (or a new version of the library doing the work) re-extracts exactly that format.
EXTRACTOR_VERSION = {"text": 1, "pdf": 1, "docx": 1, "odt": 1, "epub": 1, "html": 1, "eml": 1, "mbox": 1}
COMPRESSED = ("gz", "bz2", "xz", "zst")
FORMATS = tuple(EXTRACTOR_VERSION) + COMPRESSED
LIBRARIES = {"pdf": ("pypdfium2",), "html": ("lxml", "charset-normalizer"), "epub": ("lxml",),
             "eml": ("lxml",), "mbox": ("lxml",), "zst": ("zstandard",)}
LABELS = {"text": "text", "pdf": "PDF", "docx": "DOCX", "odt": "ODT", "epub": "EPUB", "html": "HTML",
          "eml": "e-mail", "mbox": "mbox", "gz": "gzip", "bz2": "bzip2", "xz": "xz", "zst": "zstd", "zip": "zip",
          "ole": "MS Office (OLE)", "binary": "binary"}


@dataclasses.dataclass(frozen=True)
class ExtractOptions:
    """How to read documents. max_bytes bounds the uncompressed bytes of one file (all compression layers and zip
    members together); max_pages (0: none) refuses longer PDFs before reading them. tidy: one line per paragraph,
    blanks collapsed (_tidy), as `neardup extract` shows a text; the shingle stage reads only words, which blanks do
    not change (normalise collapses them), so it skips that pass (a fifth of reading an HTML page). An mbox message
    is always tidied: its id's hash and size are those of its text."""

    html_main: bool = False
    max_bytes: int = 256 << 20
    max_pages: int = 0
    tidy: bool = True


class ExtractError(InputError):
    """One file cannot be read as a document; reason is one line saying what happened to it."""

    def __init__(self, reason: str, path: str = ""):
        super().__init__(reason)
        self.reason, self.path = reason, path

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}" if self.path else self.reason


class Encrypted(ExtractError):
    """Password-protected PDF, office document or zip member."""


class NoText(ExtractError):
    """A PDF without a text layer (a scan): reported, not read as an empty document."""


class Corrupt(ExtractError):
    """Truncated or malformed file: the parser or decompressor failed."""


class Refused(ExtractError):
    """Past a limit: a zip or compression bomb, too many pages, nesting too deep."""


class Unsupported(ExtractError):
    """Binary data or a container that holds no supported document."""


class MissingExtra(ExtractError):
    """The format's library is not installed; .format names it so the caller can count files per format."""

    def __init__(self, fmt: str, path: str = ""):
        self.format = fmt
        super().__init__(f"reading {LABELS.get(fmt, fmt)} needs the formats extra: {PIP}", path)


@functools.lru_cache(maxsize=256)  # importlib.metadata looks each library up on disk
def version(fmt: str, options: ExtractOptions = ExtractOptions()) -> str:
    """Cache key part for texts extracted as fmt: our extractor's number, its libraries' versions and the options
    that change the text. A compressed file's inner format is unknown until read, so it depends on them all."""
    if fmt in COMPRESSED:
        return "+".join(version(f, options) for f in EXTRACTOR_VERSION) + f"/{fmt}"
    main = options.html_main and fmt == "html"  # only an HTML file's own text depends on it (not EPUB's, e-mail's)
    parts = [f"{fmt}{EXTRACTOR_VERSION.get(fmt, 0)}"]
    for dist in LIBRARIES.get(fmt, ()) + (("trafilatura",) if main else ()):
        try:
            parts.append(f"{dist}-{metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{dist}-none")
    if main:
        parts.append("main")
    if not options.tidy and fmt not in ("text", "mbox"):
        parts.append("untidied")
    return ",".join(parts)


# ------------------------------------------------------------------------------------------------- detection

_HTML_TAGS = ("<!doctype html", "<html", "<head", "<body", "<script", "<iframe", "<h1", "<div", "<font", "<table",
              "<a", "<style", "<title", "<b", "<br", "<p", "<!--")
_HTML_DOCUMENT = ("<!doctype html", "<html", "<head", "<body")  # a page, whatever the file's name
# Names that say plain text: a review or a note that merely starts with <br /> or <p> stays text (IMDb's reviews do),
# unless it opens as a whole HTML document.
_TEXT_NAMES = (".txt", ".text", ".md", ".markdown", ".rst", ".csv", ".tsv", ".log", ".json", ".jsonl", ".ndjson")
_HEADER = re.compile(r"([!-9;-~]+):")
_MAIL_HEADERS = {"from", "to", "cc", "subject", "date", "message-id", "received", "return-path", "mime-version",
                 "content-type", "reply-to", "delivered-to", "sender", "in-reply-to", "references", "x-mailer"}
_MBOX_FROM = re.compile(r"From \S+ .*\d")


def detect(head: bytes, name: str = "") -> str:
    """Format of a file from its first HEAD bytes (magic numbers, the first zip member, markup and header
    sniffing); name's extension only breaks ties (a .html fragment that does not start with a tag).
    Returns one of FORMATS, or "zip" (a zip whose kind its member list decides), "ole" or "binary"."""
    # A compressed file's magic number first: a stream that keeps its input as it is (deflate's stored blocks,
    # which gzip writes for incompressible data or at level 0) shows a compressed PDF's header within 1024 bytes,
    # and read as a PDF it gave the text with the blocks' headers in it; no PDF's junk starts with these numbers.
    compressed = compressed_format(head)
    if compressed is not None:
        return compressed
    percent = head.find(b"%", 0, 1024)  # memchr: most heads have none, and the search for the header cost 0.7 us
    if percent >= 0 and head.find(b"%PDF-", percent, 1024) >= 0:  # readers accept junk before the header
        return "pdf"
    if head.startswith(b"PK\x03\x04"):
        return _zip_hint(head)
    if head.startswith(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"):
        return "ole"
    text_name = name.lower().endswith(_TEXT_NAMES)
    if _markup(head, text_name):
        return "html"
    decoded = decode(_whole_chars(head))
    if decoded is None:
        return "binary"
    text = decoded[0].lstrip("\ufeff \t\r\n")
    low = text[:1024].lower()
    if low.startswith("<?xml") and ("<html" in low or "xhtml" in low):
        return "html"
    for tag in _HTML_DOCUMENT if text_name else _HTML_TAGS:
        if low.startswith(tag) and low[len(tag):len(tag) + 1] in (" ", ">", "\t", "\n", "\r", "/", "-"):
            return "html"
    lines = text.split("\n", 60)
    if _MBOX_FROM.match(lines[0]) and _mail_headers(lines[1:]):
        return "mbox"
    if _mail_headers(lines):
        return "eml"
    if name.lower().endswith((".html", ".htm", ".xhtml")) and "<" in text:
        return "html"
    return "text"


_HTML_TAG_BYTES = tuple(tag.encode() for tag in _HTML_TAGS)
_HTML_DOCUMENT_BYTES = tuple(tag.encode() for tag in _HTML_DOCUMENT)
_AFTER_TAG = frozenset(b" >\t\n\r/-")


def _markup(head: bytes, text_name: bool) -> bool:
    """True when head opens as HTML by detect()'s tests on the decoded text, tried on the bytes: the tags are ASCII,
    and the first 1024 bytes are within the first 1024 characters, so a True here is detect's answer too (a False
    is not: the text is tested then). Decoding the 4 KB head cost 3-5 us of a 6 KB page's 10 us detection, and
    most of an HTML page's format overhead (bench/RESULTS-formats.md). Only the first HEAD bytes are looked at, so
    that a caller may pass a whole file without copying its head (read.document_format)."""
    if head.find(b"\0", 0, HEAD) >= 0:  # binary for detect() (no UTF-16/32 BOM starts with "<" or a blank)
        return False
    start = (head[3:1027] if head.startswith(b"\xef\xbb\xbf") else head[:1024]).lstrip(b" \t\r\n")
    if start[:1] != b"<":
        return False
    low = start[:16].lower()  # the longest tag and the byte after it (lowering 1 KB cost 0.4 us)
    if low.startswith(b"<?xml"):
        low = start.lower()
        return b"<html" in low or b"xhtml" in low
    for tag in _HTML_DOCUMENT_BYTES if text_name else _HTML_TAG_BYTES:
        if low.startswith(tag) and low[len(tag):len(tag) + 1] and low[len(tag)] in _AFTER_TAG:
            return True
    return False


def _whole_chars(head: bytes) -> bytes:
    """head without the UTF-8 character its end cuts (up to 3 bytes), so that a head of valid UTF-8 decodes in one
    pass instead of failing at its last byte and being decoded again with replacement."""
    for back in range(1, min(4, len(head)) + 1):
        byte = head[-back]
        if byte < 0x80:
            return head
        if byte >= 0xC0:  # the lead byte of the last character: 2, 3 or 4 bytes long
            return head[:-back] if back < (2 if byte < 0xE0 else 3 if byte < 0xF0 else 4) else head
    return head


def _mail_headers(lines: list[str]) -> bool:
    """True when the lines open with an RFC 5322 header block naming at least two usual mail fields."""
    names: set[str] = set()
    for line in lines[:50]:
        line = line.rstrip("\r")
        if not line:
            break
        if line[0] in " \t" and names:  # folded continuation
            continue
        match = _HEADER.match(line)
        if not match:
            return False
        names.add(match.group(1).lower())
    return len(names & _MAIL_HEADERS) >= 2


def _zip_hint(head: bytes) -> str:
    """ODF and EPUB store an uncompressed "mimetype" member first (both standards require it); OOXML usually
    starts with [Content_Types].xml. Anything else is decided from the member list by extract()."""
    if len(head) >= 30:
        method, size, _, name_len, extra_len = struct.unpack("<H8xIIHH", head[8:30])
        start = 30 + name_len + extra_len
        if head[30:30 + name_len] == b"mimetype" and method == 0:
            mime = head[start:start + size]
            if mime.startswith(b"application/epub+zip"):
                return "epub"
            if mime.startswith(b"application/vnd.oasis.opendocument.text"):
                return "odt"
    if b"word/" in head or b"[Content_Types].xml" in head:
        return "docx"
    return "zip"


# ------------------------------------------------------------------------------------------------ extraction

def extract(path: str, fmt: str | None = None, options: ExtractOptions = ExtractOptions(),
            warn: Callable[[str], None] | None = None, data: bytes | None = None) -> Iterator[tuple[str, str]]:
    """(id_suffix, text) for each document of the file at path: one ("", text), or ("#i", text) for the i-th
    message (from 1) of an mbox. fmt defaults to detect(); warn receives one-line notes about parts skipped
    inside a file that is read all the same (malformed mbox messages); data: the file's bytes if already read
    (the caller hashed them), which every extractor then reads instead of the file. Raises ExtractError (path
    filled in); an OSError of the system (opening or reading the file) is left to the caller, as for plain
    files.

    A compressed, HTML or e-mail file already read is extracted by this call (so its errors are raised here, not
    by the iteration), without a file object of its own and two generator layers: they cost 1-1.5 us of the 5 us
    nearDup added to a small .xz file's 48 (bench/RESULTS-formats.md)."""
    if data is None or not (fmt in COMPRESSED or fmt in _WHOLE):
        return _extracting(path, fmt, options, warn, data)
    budget = _Budget(options.max_bytes)
    try:
        if fmt in COMPRESSED:  # a tuple (a text), else a generator to run here
            docs = _compressed(data, path, fmt, options, budget, warn, 0)
            return iter(docs if type(docs) is tuple else list(docs))
        budget.take(len(data))  # as _read_all would
        return iter((("", _tidy(_WHOLE[fmt](data, options), options)),))
    except Exception as exc:
        failure = _failure(exc, fmt)
        if isinstance(failure, ExtractError):
            failure.path = failure.path or path
        if failure is exc:
            raise
        raise failure from exc


def _extracting(path: str, fmt: str | None, options: ExtractOptions, warn, data: bytes | None):
    with open(path, "rb") if data is None else io.BytesIO(data) as f:
        if fmt is None:
            fmt = detect(f.read(HEAD), path)
            f.seek(0)
        try:
            yield from _extract(f, path, fmt, options, _Budget(options.max_bytes), warn, 0)
        except ExtractError as exc:
            exc.path = exc.path or path
            raise


def _failure(exc: Exception, fmt: str) -> Exception:
    """What an exception raised while reading a file of format fmt becomes: ExtractError, MemoryError and the
    system's OSError (the disk or the file system, not the format) as they are; any other, a parser's or a
    decompressor's (each has its own types, all mean the same to the user), Corrupt."""
    if isinstance(exc, (ExtractError, MemoryError)) or (isinstance(exc, OSError) and exc.errno is not None):
        return exc  # (gzip's BadGzipFile is an OSError without errno)
    return Corrupt(f"corrupt or truncated {LABELS.get(fmt, fmt)} ({_detail(exc)}): skipped")


def _extract(f, name: str, fmt: str, options: ExtractOptions, budget: _Budget, warn, depth: int):
    try:
        if fmt in COMPRESSED:
            yield from _compressed(f, name, fmt, options, budget, warn, depth)
        elif fmt == "pdf":
            yield from _pdf(f, options)
        elif fmt in ("docx", "odt", "epub", "zip"):
            yield "", _zipped(f, options, budget)
        elif fmt == "mbox":
            yield from _mbox(f, name, options, budget, warn)
        elif fmt == "text":  # as the plain-file reader gives it: a .txt.gz reads exactly as its .txt
            yield "", _plain(_read_all(f, budget), options)
        elif fmt in _WHOLE:
            yield "", _tidy(_WHOLE[fmt](_read_all(f, budget), options), options)
        elif fmt == "ole":
            raise _ole(f)
        elif fmt == "binary":
            raise Unsupported("binary, skipped")
        else:
            raise Unsupported(f"unknown format {fmt!r}: skipped")
    except Exception as exc:
        failure = _failure(exc, fmt)
        if failure is exc:
            raise
        raise failure from exc


def _detail(exc: Exception) -> str:
    return " ".join(str(exc).split())[:80] or type(exc).__name__


class _Budget:
    """Uncompressed bytes one file may still produce, shared by all its layers and members."""

    def __init__(self, limit: int):
        self.limit = self.left = limit

    def take(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise Refused(f"expands past {_size(self.limit)}: refused")


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:g} {unit}" if unit == "bytes" else f"{n:.3g} {unit}"
        n /= 1024
    raise AssertionError("not reached: the loop returns at GiB")


class _Limited(io.RawIOBase):
    """A stream that charges every byte read to a budget, so a bomb is refused after at most limit bytes."""

    def __init__(self, raw, budget: _Budget):
        self.raw, self.budget = raw, budget

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.raw.read(min(len(buffer), 1 << 20))
        self.budget.take(len(data))
        buffer[:len(data)] = data
        return len(data)


def _read_all(f, budget: _Budget) -> bytes:
    chunks = []  # in 1 MiB reads: read(budget) would allocate the whole budget first
    while chunk := f.read(1 << 20):
        budget.take(len(chunk))
        chunks.append(chunk)
    return b"".join(chunks)


def _need(module: str, fmt: str):
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtra(fmt) from exc


def _tidy(text: str, options: ExtractOptions | None = None) -> str:
    """One line per paragraph, runs of blanks collapsed: the same words read the same from every format. With
    options.tidy False, text as it is (ExtractOptions)."""
    if options is not None and not options.tidy:
        return text
    return "\n".join(" ".join(line.split()) for line in text.splitlines() if line and not line.isspace())


# ------------------------------------------------------------------------------------------ compression

def _compressed(f, name: str, fmt: str, options, budget: _Budget, warn, depth: int):
    """The documents of a compressed file f (a file object, or its bytes), for _extract to yield from: a plain
    function, not a generator, so that the usual small text costs no generator layer of its own."""
    if depth >= 3:
        raise Refused("compressed more than 3 times: refused")
    dot = name.rfind(".")  # the name without its compression suffix (a regex substitution cost 0.3 us)
    inner_name = name[:dot] if dot >= 0 and name[dot + 1:].lower() in _COMPRESSED_SUFFIXES else name
    left = budget.left
    data = f if type(f) is bytes else f.getvalue() if isinstance(f, io.BytesIO) else None
    whole = _decompressed(data, fmt, budget) if data is not None else None
    if whole is not None:
        # the plain-file reader's own test (its cheap checks first): a .txt.gz reads exactly as its .txt
        inner = document_format(whole, inner_name)
        if inner is None:  # text, the usual case, decoded at once (charged to the budget as _read_all would)
            budget.take(len(whole))
            return (("", _plain(whole, options)),)
        inner_file: Any = io.BytesIO(whole)
    else:  # on disk, past IN_MEMORY, or a .zst file that does not say its size: streamed
        budget.left = left
        f = io.BytesIO(data) if data is not None else f
        f.seek(0)
        inner_file = _streamed(f, fmt, budget)
        inner = document_format(inner_file.read(HEAD), inner_name) or "text"
        inner_file.seek(0)
    return _inner(inner_file, inner_name, inner, options, budget, warn, depth)


def _inner(inner_file, inner_name: str, inner: str, options, budget: _Budget, warn, depth: int):
    with inner_file:
        yield from _extract(inner_file, inner_name, inner, options, budget, warn, depth + 1)


_COMPRESSED_SUFFIXES = frozenset(("gz", "bz2", "xz", "zst", "tgz"))
IN_MEMORY = 16 << 20  # uncompressed bytes of a file kept in memory; more are spooled to disk
# One decompressor object per stream (gzip member), fed the whole file at once: for the usual small file, one C
# call instead of a file reader's Python layers, 0.01-0.02 ms less a file of 2 KB (bench/RESULTS-formats.md).
_DECOMPRESSORS: dict[str, Callable[[], Any]] = {"gz": functools.partial(zlib.decompressobj, 31),
                                                 "bz2": bz2.BZ2Decompressor, "xz": lzma.LZMADecompressor}


def _decompressed(data: bytes, fmt: str, budget: _Budget) -> bytes | None:
    """The whole of data, a compressed file in memory, decompressed, or None when it expands past IN_MEMORY (at
    most IN_MEMORY + 1 bytes are made). Streams follow each other as gzip.GzipFile, bz2.BZ2File and
    lzma.LZMAFile read them: gzip's zero padding between members is skipped, and junk after a complete bzip2 or
    xz stream is ignored; a file that ends inside a stream raises EOFError, as they do. zstd: _zstd_whole."""
    if fmt == "zst":
        return _zstd_whole(data, budget)
    # the usual file, one stream and nothing after it, in one call (a loop for it cost 0.1-0.2 us)
    obj = _DECOMPRESSORS[fmt]()
    whole = obj.decompress(data, IN_MEMORY + 1)
    budget.take(len(whole))
    if len(whole) > IN_MEMORY:
        return None
    if not obj.eof:
        raise EOFError("Compressed file ended before the end-of-stream marker was reached")
    rest = obj.unused_data.lstrip(b"\0") if fmt == "gz" else obj.unused_data
    return _streams_after(whole, rest, fmt, budget) if rest else whole


def _streams_after(first: bytes, data: bytes, fmt: str, budget: _Budget) -> bytes | None:
    """_decompressed of the first stream's output and the streams of data that follow it."""
    chunks = [first]
    size = len(first)
    while data:
        obj = _DECOMPRESSORS[fmt]()
        try:
            chunk = obj.decompress(data, IN_MEMORY + 1 - size)
        except (OSError, lzma.LZMAError):  # bz2's and lzma's error on data that is no stream: junk after the end
            break
        budget.take(len(chunk))
        size += len(chunk)
        if size > IN_MEMORY:
            return None
        if not obj.eof:
            raise EOFError("Compressed file ended before the end-of-stream marker was reached")
        chunks.append(chunk)
        data = obj.unused_data.lstrip(b"\0") if fmt == "gz" else obj.unused_data
    return b"".join(chunks)


_ZSTD = threading.local()  # .found: (the zstandard module, a ZstdDecompressor of this thread's)


def _zstd_whole(data: bytes, budget: _Budget) -> bytes | None:
    """The content of a .zst file in memory, in one call, when it is one frame that declares its size (zstd writes
    it by default), of at most IN_MEMORY bytes and within the budget; else None and the caller streams it (_Zstd):
    a frame without the size (zstd --no-content-size, or written by a stream), an empty one, several frames, and
    a corrupt or truncated one, which the stream then reports as it always did.

    zstandard's one-shot call allocates the size a frame declares, and needs an output bound only when there is
    none, so the declared size is checked against the limits first; libzstd itself refuses a frame whose content
    does not match its declared size, so a frame that lies about it cannot expand further. One decompressor per
    thread (not thread-safe; making one cost 10-25 us, more than a 2 KB file's decompression), used only in this
    call, which never nests."""
    zstd = sys.modules.get("zstandard") or _need("zstandard", "zst")
    found = getattr(_ZSTD, "found", None)
    if found is None or found[0] is not zstd:
        found = _ZSTD.found = (zstd, zstd.ZstdDecompressor())
    try:
        size = zstd.frame_content_size(data)
        if not 0 < size <= min(IN_MEMORY, budget.left):
            return None
        whole = found[1].decompress(data, max_output_size=size, allow_extra_data=False)
    except zstd.ZstdError:
        return None
    budget.take(len(whole))
    return whole


def _streamed(f, fmt: str, budget: _Budget):
    """The decompressed content of file f, read 1 MiB at a time against the budget: in memory up to IN_MEMORY
    bytes, else in a temporary file (the inner format may need to seek: zip, PDF)."""
    if fmt == "gz":
        raw: io.BufferedIOBase | io.RawIOBase = gzip.GzipFile(fileobj=f, mode="rb")
    elif fmt == "bz2":
        raw = bz2.BZ2File(f)
    elif fmt == "xz":
        raw = lzma.LZMAFile(f)
    else:
        raw = _Zstd(_need("zstandard", "zst"), f)
    chunks: list[bytes] = []
    while len(chunks) < IN_MEMORY >> 20:
        chunk = raw.read(1 << 20)
        budget.take(len(chunk))
        if not chunk:
            return io.BytesIO(b"".join(chunks))
        chunks.append(chunk)
    spool = tempfile.SpooledTemporaryFile(max_size=IN_MEMORY)
    spool.writelines(chunks)
    shutil.copyfileobj(_Limited(raw, budget), spool, 1 << 20)
    spool.seek(0)
    return spool


class _Zstd(io.RawIOBase):
    """Frames of a .zst file, decompressed as read. zstandard's stream_reader ends quietly on a truncated frame,
    so this feeds a decompressobj 1 KiB at a time (each call then expands to at most 32 MiB: one 128 KiB block per
    4 input bytes) and raises EOFError when the input ends inside a frame."""

    def __init__(self, zstd, f):
        self.zstd, self.f, self.inside = zstd, f, False
        self.obj: Any = None  # zstandard's decompressobj of the current frame (zstandard has no type hints)
        self.pending, self.at = b"", 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while self.at == len(self.pending):
            data = self.f.read(1024)
            if not data:
                if self.inside:
                    raise EOFError("truncated zstd frame")
                return 0
            out = []
            while data:
                if self.obj is None or self.obj.eof:
                    self.obj = self.zstd.ZstdDecompressor().decompressobj()
                out.append(self.obj.decompress(data))
                data = self.obj.unused_data if self.obj.eof else b""
            self.inside = not self.obj.eof
            self.pending, self.at = b"".join(out), 0
        n = min(len(buffer), len(self.pending) - self.at)
        buffer[:n] = memoryview(self.pending)[self.at:self.at + n]
        self.at += n
        return n


# ---------------------------------------------------------------------------------------- zip containers

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
MC_FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"
T = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
OFFICE = "{urn:oasis:names:tc:opendocument:xmlns:office:1.0}"
OPF = "{http://www.idpf.org/2007/opf}"
CONTAINER = "{urn:oasis:names:tc:opendocument:xmlns:container}"


def _zipped(f, options, budget: _Budget) -> str:
    """DOCX, ODT or EPUB, told apart by members (not by what detect() guessed from the first one)."""
    with zipfile.ZipFile(f) as zf:
        infos = {info.filename: info for info in zf.infolist()}
        if any(info.flag_bits & 1 for info in infos.values()):
            raise Encrypted("encrypted zip members: skipped")

        def member(name: str):
            info = infos[name]
            if info.file_size > budget.left:  # the declared size; _Limited catches a header that lies
                raise Refused(f"member {name} expands past {_size(budget.limit)}: refused")
            return io.BufferedReader(_Limited(zf.open(info), budget), 1 << 16)

        mime = b""
        if "mimetype" in infos:
            with member("mimetype") as m:
                mime = m.read(200).strip()
        if mime.startswith(b"application/epub+zip") or (not mime and "META-INF/container.xml" in infos):
            return _epub(infos, member, options)
        if mime.startswith(b"application/vnd.oasis.opendocument"):
            if not mime.startswith(b"application/vnd.oasis.opendocument.text"):
                raise Unsupported(f"OpenDocument {mime.decode('ascii', 'replace')} is not a text document: skipped")
            if "META-INF/manifest.xml" in infos:
                with member("META-INF/manifest.xml") as m:
                    if b"encryption-data" in m.read():
                        raise Encrypted("encrypted ODT: skipped")
            with member("content.xml") as m:
                return _tidy(_odt_text(m), options)
        if "word/document.xml" in infos:
            parts = []
            for name in ("word/document.xml", "word/footnotes.xml", "word/endnotes.xml"):
                if name in infos:
                    with member(name) as m:
                        parts.append(_docx_text(m))
            return _tidy("\n".join(parts), options)
        if "[Content_Types].xml" in infos:
            raise Unsupported("Office Open XML without a Word document (spreadsheet or slides?): skipped")
        raise Unsupported("zip archive without a document in it: skipped")


def _elements(stream, handle: Callable) -> None:
    """Incremental parse calling handle(event, element); at "end", an element for which handle returns True is
    dropped from its parent, so a document of any length parses in the memory of its largest kept branch."""
    stack = []
    for event, el in ET.iterparse(stream, events=("start", "end")):
        if event == "start":
            stack.append(el)
            handle(event, el)
        else:
            stack.pop()
            if handle(event, el) and stack:
                stack[-1].remove(el)


def _docx_text(stream) -> str:
    """Runs' w:t text, paragraphs and cells as lines; deleted runs (w:delText) and field codes (w:instrText) are
    other tags and so left out; mc:Fallback repeats its mc:Choice (text boxes), so it is skipped."""
    out, fallback = [], [0]
    marks = {W + "p": "\n", W + "tc": "\n", W + "br": "\n", W + "cr": "\n", W + "tab": "\t",
             W + "noBreakHyphen": "-"}

    def handle(event, el):
        if el.tag == MC_FALLBACK:
            fallback[0] += 1 if event == "start" else -1
        elif event == "end" and not fallback[0]:
            if el.tag == W + "t":
                out.append(el.text or "")
            elif el.tag in marks:
                out.append(marks[el.tag])
        return True

    _elements(stream, handle)
    return "".join(out)


def _odt_text(stream) -> str:
    """Paragraphs and headings of content.xml in order (tables and lists hold paragraphs); footnote bodies go to
    the end, as DOCX keeps them apart; annotations and tracked deletions are left out."""
    out: list[str] = []
    notes: list[str] = []
    level = [0]
    blocks = (T + "p", T + "h")
    skipped = (OFFICE + "annotation", T + "tracked-changes", T + "note-citation")

    def walk(el, into):
        tag = el.tag
        if tag in skipped:
            return
        if tag == T + "note":
            for child in el:
                if child.tag == T + "note-body":
                    walk(child, notes)
            return
        if tag == T + "s":
            into.append(" " * int(el.get(T + "c", "1")))
        elif tag == T + "tab":
            into.append("\t")
        elif tag == T + "line-break":
            into.append("\n")
        else:
            into.append(el.text or "")
        for child in el:
            walk(child, into)
            into.append(child.tail or "")
        if tag in blocks:
            into.append("\n")

    def handle(event, el):
        if el.tag in skipped:
            level[0] += 1000 if event == "start" else -1000  # nothing inside is body text
        elif el.tag in blocks:
            if event == "start":
                level[0] += 1
            else:
                level[0] -= 1
                if level[0] == 0:  # outermost paragraph complete: its text, tails and nested notes are all in
                    walk(el, out)
        return level[0] <= 0  # inside a paragraph, children stay until the paragraph is walked

    _elements(stream, handle)
    return "".join(out) + "\n" + "".join(notes)


def _epub(infos, member, options) -> str:
    """The spine's documents in reading order, each read as (X)HTML."""
    with member("META-INF/container.xml") as m:
        root = ET.parse(m).getroot()
    rootfile = root.find(f".//{CONTAINER}rootfile")
    opf_path = rootfile.get("full-path") if rootfile is not None else None
    if not opf_path:
        raise Corrupt("EPUB without a package document (META-INF/container.xml): skipped")
    with member(opf_path) as m:
        opf = ET.parse(m).getroot()
    base = posixpath.dirname(opf_path)
    hrefs = {item.get("id"): item.get("href", "") for item in opf.iter(OPF + "item")}
    texts = []
    for ref in opf.iter(OPF + "itemref"):
        href = hrefs.get(ref.get("idref"))
        if href is None:
            continue
        name = posixpath.normpath(posixpath.join(base, unquote(href.split("#")[0])))
        if name in infos:
            with member(name) as m:
                texts.append(_html_bytes(m.read(), ExtractOptions()))  # chapters have no site template
    return _tidy("\n".join(texts), options)


def _ole(f) -> ExtractError:
    """Encrypted OOXML/ODF files are OLE compound files holding an EncryptedPackage stream; other OLE files are
    legacy .doc/.xls/.ppt, which nearDup does not read."""
    data = f.read(1 << 20)
    if len(data) >= 512:  # the directory starts at header sector 0x30 (sector size 1 << u16 at 0x1E)
        shift, first = struct.unpack("<H", data[0x1E:0x20])[0], struct.unpack("<I", data[0x30:0x34])[0]
        if 7 <= shift <= 16 and first < 0xFFFFFFFA:
            f.seek((first + 1) << shift)
            data += f.read(4 << shift)
    if "EncryptedPackage".encode("utf-16-le") in data:
        return Encrypted("encrypted office document: skipped")
    return Unsupported("legacy MS Office format (.doc/.xls/.ppt): skipped; save it as .docx or .odt")


# ------------------------------------------------------------------------------------------------------- PDF

def _pdf(f, options) -> Iterator[tuple[str, str]]:
    pdfium = _need("pypdfium2", "pdf")
    try:
        # Bytes in memory are the cheapest input: PDFium parses the buffer where it is (FPDF_LoadMemDocument64;
        # BytesIO.getvalue() returns the bytes it was made from, no copy). Opening the file again by name cost
        # 0.2 ms more a one-page PDF than handing over the bytes read once (bench/RESULTS-formats.md). A large
        # file is opened by name (PDFium reads it as needed); a spooled one goes through Python callbacks.
        if isinstance(f, io.BytesIO):
            source: Any = f.getvalue()
        else:
            source = f.name if isinstance(getattr(f, "name", None), str) else f
        doc = pdfium.PdfDocument(source)
    except pdfium.PdfiumError as exc:
        if "password" in str(exc).lower():
            raise Encrypted("encrypted PDF: skipped") from exc
        raise
    try:
        pages = len(doc)
        if options.max_pages and pages > options.max_pages:
            raise Refused(f"{pages} pages, more than the limit of {options.max_pages}: refused")
        texts = []
        for i in range(pages):  # one page's objects alive at a time
            page = doc[i]
            textpage = page.get_textpage()
            texts.append(textpage.get_text_range())
            textpage.close()
            page.close()
    finally:
        doc.close()
    # PDFium marks a hyphen at a line end as U+FFFE (or 0x02): it is still a hyphen between two words.
    text = _tidy("\n".join(texts).replace("\ufffe", "-").replace("\x02", "-"), options)
    if not text or text.isspace():
        raise NoText("no text layer (scanned?): skipped")
    yield "", text


# ------------------------------------------------------------------------------------------------------ HTML

_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)
_XML_ENCODING = re.compile(rb"""^<\?xml[^>]+encoding\s*=\s*["']([A-Za-z0-9_.:-]+)""")
_SKIP_TAGS = ("script", "style", "noscript", "template", "head", "svg", "math", "iframe", "object", "select")
_BLOCK_TAGS = frozenset(
    "address article aside blockquote br caption dd details div dl dt fieldset figcaption figure footer form h1 h2 "
    "h3 h4 h5 h6 header hr li main nav ol p pre section summary table td th tr ul body html".split())


def html_decode(data: bytes) -> str:
    """Text of an HTML file: a BOM decides; then valid UTF-8 is UTF-8, whatever a meta tag says (a page that
    declares latin-1 but holds UTF-8 would otherwise come out as mojibake); then the declared charset if it
    decodes; then charset-normalizer's guess; then windows-1252, the web's default."""
    for bom, encoding in BOMS:
        if data.startswith(bom):
            return data[len(bom):].decode(encoding, "replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    found = _XML_ENCODING.search(data[:200]) or _META_CHARSET.search(data[:8192])
    if found:
        try:
            declared = codecs.lookup(found.group(1).decode("ascii")).name
            if declared in ("latin-1", "iso8859-1", "ascii"):
                declared = "cp1252"  # what browsers do with these labels
            return data.decode(declared)
        except (LookupError, UnicodeDecodeError):
            pass
    try:
        best = importlib.import_module("charset_normalizer").from_bytes(data[:1 << 20]).best()
        if best is not None:
            return data.decode(best.encoding, "replace")
    except ImportError:
        pass
    return data.decode("cp1252", "replace")


def _html_bytes(data: bytes, options) -> str:
    return html_text(html_decode(data), options.html_main)


def html_text(markup: str, main: bool = False) -> str:
    """Visible text of an HTML document: no scripts, styles, comments, hidden elements or tags; block elements
    end lines so words of adjacent blocks never join. main: trafilatura's main content (navigation, headers,
    footers and sidebars dropped), or all visible text when it finds none (a very short page)."""
    if main:
        found = _need("trafilatura", "html").extract(markup, include_comments=False, include_tables=True)
        if found:
            return found
    lxml_html = _need("lxml.html", "html")
    from lxml import etree

    markup = re.sub(r"^\s*<\?xml[^>]*\?>", "", markup)  # lxml refuses str input with an encoding declaration
    if not markup.strip():
        return ""
    try:
        doc = lxml_html.document_fromstring(markup)
    except etree.ParserError:  # nothing but comments or blanks
        return ""
    for el in doc.xpath("//*[@hidden]"):
        el.drop_tree()
    etree.strip_elements(doc, etree.Comment, etree.ProcessingInstruction, *_SKIP_TAGS, with_tail=False)
    out = []
    for event, el in etree.iterwalk(doc, events=("start", "end")):
        block = isinstance(el.tag, str) and el.tag.lower() in _BLOCK_TAGS
        if event == "start":
            if block:
                out.append("\n")
            out.append(el.text or "")
        else:
            if block:
                out.append("\n")
            out.append(el.tail or "")
    return "".join(out)


def _plain(data: bytes, options) -> str:
    decoded = decode(data)
    if decoded is None:
        raise Unsupported("binary, skipped")
    return decoded[0]


# ---------------------------------------------------------------------------------------------------- e-mail

def _email_text(msg) -> str:
    """Subject and the body: text/plain preferred, else text/html as visible text; attachments are ignored."""
    parts = [str(msg.get("subject", "") or "")]
    # The first text/plain part, else the first text/html one: what get_body(("plain", "html")) picks, but known
    # to be HTML or not without parsing its Content-Type header again (0.06 ms, 7% of a short mail's extraction)
    html = False
    body = msg.get_body(preferencelist=("plain",))
    if body is None:
        body = msg.get_body(preferencelist=("html",))
        html = True
    if body is not None:
        try:
            content = body.get_content()
        except (LookupError, UnicodeError):  # unknown or wrong charset label
            content = (body.get_payload(decode=True) or b"").decode("utf-8", "replace")
        if isinstance(content, bytes):
            content = content.decode("utf-8", "replace")
        parts.append(html_text(content) if html else content)
    return "\n".join(parts)


def _eml(data: bytes, options) -> str:
    return _email_text(email.message_from_bytes(data, policy=email.policy.default))


def _mbox(f, name: str, options, budget: _Budget, warn) -> Iterator[tuple[str, str]]:
    """Messages split at "From " lines that follow a blank line (or start the file), streamed one at a time.
    A message without headers, or that the parser cannot read, is counted and skipped; the rest go on."""
    index, bad, blank = 0, 0, True
    lines: list[bytes] | None = None  # the current message's, from its "From " line

    def emit():
        assert lines is not None  # called only inside a message
        msg = email.message_from_bytes(b"".join(lines), policy=email.policy.default)
        if not len(msg.keys()):
            raise ValueError("no header fields")
        return _tidy(_email_text(msg))

    def flush():
        nonlocal bad
        try:
            text = emit()
        except ExtractError:
            raise
        except Exception:
            bad += 1
            return None
        return text

    for line in f:
        budget.take(len(line))
        if blank and line.startswith(b"From "):
            if lines is not None:
                text = flush()
                if text is not None:
                    yield f"#{index}", text
            index, lines = index + 1, []
        elif lines is not None:
            lines.append(line[1:] if re.match(rb">+From ", line) else line)  # mboxrd quoting
        blank = line in (b"\n", b"\r\n")
    if lines is not None:
        text = flush()
        if text is not None:
            yield f"#{index}", text
    if bad and warn is not None:
        warn(f"{name}: {bad} of {index} messages malformed, skipped")


_WHOLE = {"html": _html_bytes, "eml": _eml}

