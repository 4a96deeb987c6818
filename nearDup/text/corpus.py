"""Corpus shards as records: JSONL files, plain or compressed (gz, zst, bz2, xz), read and written line by line
with each record's bytes unchanged; Parquet files read and written row group by row group. What the listing
spools a compressed JSONL file through, and what report.corpus writes a deduplicated corpus with: a shard is
streamed, never held whole.
"""
from __future__ import annotations

import bz2
import contextlib
import gzip
import importlib
import io
import json
import lzma
import shutil
from collections.abc import Callable, Iterator
from typing import IO, Any

from ..errors import InputError

# A JSONL file's compression, by its name's ending (as gzip, zstd and the others name their output).
COMPRESSIONS = {".gz": "gz", ".zst": "zst", ".bz2": "bz2", ".xz": "xz"}
GZIP_LEVEL = 6  # gzip's own default: level 9 (Python's) is 2-3x slower for a few percent
ZSTD_LEVEL = 3  # zstd's own default
PARQUET_PIP = "pip install 'nearDup[parquet]'"
ZSTD_PIP = "pip install 'nearDup[formats]'"


def compression(path: str) -> str | None:
    """gz, zst, bz2 or xz for a compressed JSONL file's name, else None."""
    return next((kind for end, kind in COMPRESSIONS.items() if path.endswith(end)), None)


def is_parquet(path: str) -> bool:
    return path.endswith(".parquet")


def _zstandard(path: str):
    try:
        zstandard = importlib.import_module("zstandard")  # an extra: by importlib, as mypy need not know its types
    except ImportError:
        raise InputError(f"{path}: reading or writing zstd needs the zstandard library; install it with: "
                         f"{ZSTD_PIP}") from None
    return zstandard


def pyarrow_parquet(path: str):
    """pyarrow.parquet, or a one-line error naming path and the pip command."""
    try:
        return importlib.import_module("pyarrow.parquet")
    except ImportError:
        raise InputError(f"{path}: reading or writing Parquet needs pyarrow; install it with: {PARQUET_PIP}") \
            from None


def open_read(path: str) -> IO[bytes]:
    """The decompressed bytes of a JSONL file (by its name's ending), as a stream."""
    kind = compression(path)
    if kind == "zst":
        zstd = _zstandard(path)
        raw = open(path, "rb")
        reader = zstd.ZstdDecompressor().stream_reader(raw, read_across_frames=True, closefd=True)
        return io.BufferedReader(reader, 1 << 20)  # which reads lines, as the others do
    opener: Any = {"gz": gzip.open, "bz2": bz2.open, "xz": lzma.open}.get(kind or "", open)
    return opener(path, "rb")


def copy_decompressed(path: str, out: IO[bytes]) -> None:
    """The decompressed bytes of the file at path into out. Raises EOFError for truncated or corrupt data
    (whichever error its decompressor raises), OSError for the disk's errors."""
    try:
        with open_read(path) as f:
            shutil.copyfileobj(f, out, 1 << 20)
    except OSError as e:
        if e.errno is not None:  # the disk; gzip's BadGzipFile and bz2's "Invalid data stream" have none
            raise
        raise EOFError(str(e)) from None
    except (lzma.LZMAError, EOFError) as e:
        raise EOFError(str(e)) from None
    except Exception as e:
        if type(e).__name__ != "ZstdError":
            raise
        raise EOFError(str(e)) from None


@contextlib.contextmanager
def open_write(f: IO[bytes], like: str) -> Iterator[IO[bytes]]:
    """A stream that writes into f compressed as the file `like` is (by its name's ending). Compressed bytes
    depend only on the data: no time or name in a gzip header, one zstd frame of fixed level."""
    kind = compression(like)
    if kind == "gz":
        with gzip.GzipFile(filename="", mode="wb", fileobj=f, compresslevel=GZIP_LEVEL, mtime=0) as out:
            yield out  # type: ignore[misc]
    elif kind == "zst":
        with _zstandard(like).ZstdCompressor(level=ZSTD_LEVEL).stream_writer(f, closefd=False) as out:
            yield out
    elif kind == "bz2":
        with bz2.BZ2File(f, "wb") as out:
            yield out
    elif kind == "xz":
        with lzma.LZMAFile(f, "wb") as out:
            yield out
    else:
        yield f


def record_id(line: bytes, id_field: str) -> str | None:
    """The id of a JSONL line as read.read_documents gives it (str of the id field), or None for a line that is
    no document (blank, not a JSON object, no usable id)."""
    if not line.strip():
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    return usable_id(record.get(id_field))


def usable_id(value) -> str | None:
    """The id of a document whose id field or column holds value (its str; bytes, a Parquet column without the UTF8
    annotation, decoded as file names are), as read.read_documents names it; None for none, an object or a list."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return None if value is None or isinstance(value, (dict, list)) else str(value)


def copy_jsonl(source: str, out: IO[bytes], drop: Callable[[str], bool], id_field: str) -> tuple[int, int]:
    """Copy the lines of the JSONL file source to out (compressed as source is), leaving out those whose id
    drop() is true; every other line (records, blank and malformed lines) is copied byte for byte, in order.
    Returns (lines kept, records dropped)."""
    kept = dropped = 0
    with open_read(source) as f, open_write(out, source) as w:
        for line in f:
            doc_id = record_id(line, id_field)
            if doc_id is not None and drop(doc_id):
                dropped += 1
            else:
                w.write(line)
                kept += 1
    return kept, dropped


# ------------------------------------------------------------------------------------------------ Parquet

@contextlib.contextmanager
def _parquet_errors(path: str, where: str = ""):
    """pyarrow's errors reading path as one-line InputErrors: a file that is not Parquet, or damaged (its footer
    or a page: ArrowInvalid, a ValueError, or an OSError without errno), or an OSError of the system."""
    pa = importlib.import_module("pyarrow")
    try:
        yield
    except (OSError, pa.ArrowException) as e:
        if isinstance(e, OSError) and e.errno is not None:
            raise InputError(f"{path}: {where}cannot read ({e.strerror})") from None
        what = "not a Parquet file, or a damaged one" if not where else "damaged"
        raise InputError(f"{path}: {where}{what} ({str(e).splitlines()[0]}); check the file or leave it "
                         f"out") from None


def _parquet_file(path: str):
    pq = pyarrow_parquet(path)
    with _parquet_errors(path):
        return pq.ParquetFile(path)


def split_parquet(source: str, out: IO[bytes], columns: tuple[str, ...], rows: int) -> None:
    """Write the columns of the Parquet file source to out as a Parquet file whose row groups hold `rows` rows each,
    cut within each of source's row groups as _parquet_items cuts its items (the last of each holds the rest), read
    a batch at a time: a task then reads only its own rows, where a row group of a million rows was read whole by
    each of its 250 tasks."""
    pa, f = importlib.import_module("pyarrow"), _parquet_file(source)
    schema = pa.schema([f.schema_arrow.field(c) for c in columns])
    with pyarrow_parquet(source).ParquetWriter(out, schema, compression="snappy") as w:
        for g in range(f.metadata.num_row_groups):
            pending = None  # the row group's rows read and not written yet: fewer than `rows`
            with _parquet_errors(source, f"row group {g}: "):
                for batch in f.iter_batches(batch_size=rows, row_groups=[g], columns=list(columns)):
                    table = pa.Table.from_batches([batch], schema)
                    table = table if pending is None else pa.concat_tables([pending, table])
                    whole = table.num_rows - table.num_rows % rows
                    for lo in range(0, whole, rows):
                        w.write_table(table.slice(lo, rows), row_group_size=rows)
                    pending = table.slice(whole) if whole < table.num_rows else None
            if pending is not None:
                w.write_table(pending, row_group_size=rows)


def parquet_row_groups(path: str) -> list[int]:
    """The number of rows of each row group of a Parquet file (from its footer alone)."""
    metadata = _parquet_file(path).metadata
    return [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]


def parquet_rows(path: str, start: int, end: int, columns: tuple[str, ...]) -> Iterator[tuple]:
    """The values of columns (Python objects) of rows [start, end) of a Parquet file, a tuple per row, read row
    group by row group: only the row groups that hold them, and only those columns. A column the file lacks is
    a one-line error naming the columns it has."""
    f = _parquet_file(path)
    names = f.schema_arrow.names
    if missing := [c for c in columns if c not in names]:
        option = "--id-field" if missing[0] == columns[0] else "--text-field"
        raise InputError(f"{path}: no column {missing[0]!r} ({option}); its columns are "
                         f"{', '.join(map(repr, names)) or 'none'}: pass {option} with one of them")
    first = 0
    for g, rows in enumerate(parquet_row_groups(path)):
        lo, hi = max(start, first), min(end, first + rows)
        if lo < hi:
            with _parquet_errors(path, f"row group {g}: "):
                table = f.read_row_group(g, columns=list(columns)).slice(lo - first, hi - lo)
            yield from zip(*(table.column(c).to_pylist() for c in columns))
        first += rows
        if first >= end:
            break




def copy_parquet(source: str, target: str, drop: Callable[[str], bool], id_field: str) -> tuple[int, int]:
    """Write the rows of the Parquet file source whose id drop() is false to a new Parquet file target: same
    schema (its metadata too), rows in order, one row group per input row group, the input's compression.
    Returns (rows kept, rows dropped)."""
    f = _parquet_file(source)
    pa = importlib.import_module("pyarrow")
    metadata = f.metadata
    codec = metadata.row_group(0).column(0).compression.lower() if metadata.num_row_groups and \
        metadata.num_columns else "snappy"
    kept = dropped = 0
    with pyarrow_parquet(source).ParquetWriter(target, f.schema_arrow,
                                               compression="none" if codec == "uncompressed" else codec) as w:
        for g in range(metadata.num_row_groups):
            with _parquet_errors(source, f"row group {g}: "):
                table = f.read_row_group(g)
            keep = [(i := usable_id(v)) is None or not drop(i) for v in table.column(id_field).to_pylist()]
            n = sum(keep)
            kept, dropped = kept + n, dropped + len(keep) - n
            if n:
                w.write_table(table if n == len(keep) else table.filter(pa.array(keep)))
    return kept, dropped
