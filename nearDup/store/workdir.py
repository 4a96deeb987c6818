"""The work dir: layout, manifest, atomic writes, partition shards, lock. The only module that knows paths.

    WORK/
      .neardup-workdir                 written when nearDup creates the folder: only a folder holding it is used
      manifest.json                    format, nearDup version, one record per finished stage
      sealed.json                      each per-shard stage's record key and its folder's mtime as the last manifest
                                       write left them (WorkDir._seal): a run that finds a folder unchanged trusts the
                                       record's shard keys instead of reading every done marker
      lock                             held (flock) by the one run allowed at a time (shared by `query`)
      inputs/                          JSONL read from stdin or .gz, spooled so partitions can seek
      shingle/part-00000.docs.npz      the shard's documents as columns: id, size, mtime_ns, inode, sha, shingles, ...
      shingle/part-00000.values.npy    uint32: each document's shingle hashes in text order, repeats
                                       kept (a file over 2 MB, shingled as it streams: its distinct ones)
      shingle/part-00000.offsets.npy   int64 (n_docs + 1): document d is values[offsets[d]:offsets[d+1]]
      shingle/KEY.catalog.npz          one row per document of the listed shards, in order: its current id, size,
                                       mtime_ns, inode, sha, live (false once deleted or changed), added (run);
                                       written a column at a time from the kept rows and the new shards' docs.npz
                                       (save_columns), read by later stages a column at a time, mapped (StoredTable)
      shingle/KEY.catalog.s001.npz     an index run that only added rows (and marked some dead) appends them as a
      shingle/KEY.catalog.live.npy     segment (the base and earlier segments linked under its key) and writes the
                                       liveness of every row, int8; its readers join a column when they read it
      shingle/KEY.binary.npz           the binary files skipped (id, size, mtime_ns, inode): not opened again unchanged
      signature/part-00000.npy         uint32 (n_docs, num_perm)
      band/part-00000.npy              uint64 (n_docs, bands)
      band/part-00000.digest.npy       uint64 (n_docs,): band.band_digest of its keys (copies.copy_classes reads it)
      candidates/KEY.pairable.npy      bool (n,): the documents that can pair (pipeline.copies.Pairing)
      candidates/KEY.copies.npy        int64 (m, 2): (label, member) of the classes of two or more, sorted; a
                                       class's label is the smallest number with its set
      candidates/KEY.rank.npy          int64 (n,): each document's place in id order, -1 if it cannot pair; only
                                       when the ids do not ascend with the numbers (else a number is its rank)
      candidates/KEY.digests.keys.npy, .docs.npy   the band digests of the documents that can pair, sorted, and
                                       their numbers: the digest index, a base and a segment .sNNN per run that
                                       added documents, kept as the band index is (copies.copy_classes)
      candidates/KEY.pairs.npy         int64 (m, 2) class pairs of small buckets, a <= b, sorted: (A, B) stands for
                                       A x B, (A, A) for the pairs within class A (--method exact: of the join;
                                       then no counts, star_counts nor band index)
      candidates/KEY.counts.npy        int64 (m,): in how many bands each pair shares a bucket
      candidates/KEY.stars.npy         int64 (s, 2) document pairs of buckets over --max-bucket (anchor stars)
      candidates/KEY.star_counts.npy   int64 (s,): in how many bands each star pair does
      candidates/KEY.index-000.keys.npy  the band index, 4 bands a file: uint64 (bands, n) each band's keys sorted,
      candidates/KEY.index-000.docs.npy  and int32 (bands, n) their documents (int64 past 2^31 documents, and in
                                       older indexes; read by the next run and by query)
      candidates/KEY.index-000.filter.npy  uint64 (bands, 2^L / 64): each band's key filter (lsh.key_filter) of
                                       the base, so a run searches the base only for the keys it may hold; also
                                       KEY.digests.filter.npy, of the digest index's base (none in older indexes;
                                       uint8 (bands, 2^L / 8), a one-hash filter, in some)
      candidates/KEY.index-000.s001.*  segments of the band index, one per incremental run that added documents (the
                                       same two files of its new documents); the base and earlier segments are the
                                       last run's files under this key (hard links); compacted into a new base now
                                       and then (pipeline.candidates.SEGMENTS_MAX)
      candidates/KEY.large_buckets.jsonl  buckets too large for all pairs: band, anchor, size, key
      candidates/KEY.shuffle-00000.npy,  an engine's shuffle of band keys (Engine.shuffle: Dask) and its partitions'
        KEY.buckets-0000.npy           parts of the band index; removed once the index is written
      cluster/KEY.components-*.npy     the same engine's rounds of connected components; removed as they are used
      verify/KEY.checked.npy           int64 (m, 2) every candidate entry verified so far (reused by the next run)
      verify/KEY.pairs.npy             int64 (m, 2) verified entries: class pairs (as in candidates) and star pairs
      verify/KEY.scores.npy            float64 (m, 2): exact Jaccard (or containment), signature estimate
      verify/KEY.sizes.npy             int64 (m, 2): |A ∩ B|, |A ∪ B| of the verified entries (--metric
                                       containment: (m, 4), and |A|, |B|)
      verify/KEY.pairs.jsonl           the verified pairs with ids and scores, best first (classes expanded)
      cluster/KEY.clusters.jsonl       duplicate groups: keeper, members with Jaccard against it, bounds
      <stage>/part-00000.done.json     written last: the partition's key and counts (resume skips it)

Shards are append-only: a run adds shards with new numbers for new and changed documents and marks the rows of
deleted or changed ones dead in a new catalog; it never rewrites a shard another record lists. A document's
global number is its position in the concatenation of the listed shards. Whole-stage outputs carry their stage
key (KEY, 12 hex digits) in their name, so a run never overwrites what the manifest points at. In a transaction
(every run on an --index) stage records are kept in memory and the manifest is written once, at commit: an
interrupted run leaves the work dir exactly as it was. Files no record lists are removed after a commit. Every
file is written to a temporary name in the same folder and renamed into place.

A work dir is made only in a missing or empty folder and marked as nearDup's (.neardup-workdir); any other folder
is refused before anything is written to it, so that clean-up and --force can never reach a user's files. Even
inside its own stage folders nearDup removes only files with its own names (_OWN_FILE), and a stage folder that is
a symlink is refused rather than followed.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import fcntl
import io
import itertools
import json
import math
import mmap as mmap_module
import os
import re
import shutil
import socket
import stat
import sys
import time
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from ..errors import DISK_FULL, WorkDirError
from ..text.corpus import COMPRESSIONS, copy_decompressed, split_parquet
from .manifest import STAGES, Manifest, StageRecord, load

# json.dumps(record, ensure_ascii=False, sort_keys=True), without building an encoder for every record
_JSONL_ENCODER = json.JSONEncoder(ensure_ascii=False, sort_keys=True)
_HOST = socket.gethostname()
MANIFEST = "manifest.json"
SEAL = "sealed.json"
MARKER = ".neardup-workdir"
CACHE_USE = "cache.json"  # a cache work dir's inputs and last use (see cache.py)
_MARKER_TEXT = (b"nearDup work dir: nearDup writes and removes its own files in this folder; delete the whole "
                b"folder to forget it.\n")
_FOLDERS = (*STAGES, "inputs")
# The names nearDup gives files in a stage folder: a shard's files (part-00012.values.npy, part-00012.done.json),
# a whole-stage output under its key (0123456789ab.pairs.jsonl), and their temporaries (see atomic_file). Nothing
# else in a stage folder is ever removed.
_OWN_NAME = (r"(?:part-\d{5,}\.(?:[a-z]+\.)?(?:npy|npz|json)"
             r"|[0-9a-f]{12}\.[a-z0-9_-]+(?:\.[a-z0-9_-]+)*\.(?:npy|npz|jsonl))")
_OWN_FILE = re.compile(_OWN_NAME)
# the names spool gives its copies in inputs/: stdin's, a compressed file's (NAME.SIZE.MTIME), a UTF-16/32 file's
# (NAME.SIZE.MTIME.utf-8) and a split Parquet file's (NAME.DEV-INODE.SIZE.MTIME.ROWS)
_SPOOLED = re.compile(r"stdin\.jsonl|[^.].*\.\d+\.\d+(?:\.utf-8)?|[^.].*\.\d+-\d+\.\d+\.\d+\.\d+")
_OWN_TEMP = re.compile(rf"\.(?:{_OWN_NAME}|{re.escape(MANIFEST)}|{re.escape(SEAL)}|{re.escape(MARKER)})\..+\.\d+\.tmp")


def _os_error(path, e: OSError) -> WorkDirError:
    full = DISK_FULL.get(e.errno or 0)
    if full is not None:
        return WorkDirError(f"{path}: {full}; free space or choose another --workdir")
    if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return WorkDirError(f"{path}: work dir is not writable ({e.strerror}); choose another --workdir")
    if e.errno is None:  # a library's OSError (a short write) has no strerror ("None"): say what it says
        return WorkDirError(f"{path}: cannot write ({e}); check the work dir's disk or choose another --workdir")
    return WorkDirError(f"{path}: {e.strerror}")


@contextlib.contextmanager
def atomic_file(path: Path, mode: str = "wb"):
    """Open a temporary sibling of path for writing; rename it over path only if the block succeeds.

    The temporary name holds the host and process, so that two machines sharing the work dir (Dask workers, one
    of them re-running a task it was thought to have lost) never write to the same temporary file."""
    tmp = path.with_name(f".{path.name}.{_HOST}.{os.getpid()}.tmp")
    try:
        text: dict[str, Any] = {} if "b" in mode else {"encoding": "utf-8", "errors": "surrogatepass"}
        with open(tmp, mode, **text) as f:
            yield f
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise _os_error(path, e) from None
        raise


_MARKER_READ = 1 << 14  # a done marker is read in one call if it is shorter (they hold ~150 bytes)

# The header np.save writes (format 1.0) for the arrays nearDup stores: a plain dtype, C order, a shape.
_NPY_HEADER = re.compile(rb"\{'descr': '([<>|][a-zA-Z]\d*)', 'fortran_order': False, 'shape': \(([\d, ]*)\), \} *\n")


def _npy_layout(fd: int, path: Path, at: int = 0, size: int | None = None) -> tuple[np.dtype, tuple, int] | None:
    """(dtype, shape, offset of the data) of the .npy at `at` in the open file fd (size: its length, if it lies in
    a larger file), checked against the file's length; None for a header this does not know (np.load reads it)."""
    head = os.pread(fd, 256, at)
    if head[:8] != b"\x93NUMPY\x01\x00" or len(head) < 10:
        return None
    start = 10 + int.from_bytes(head[8:10], "little")
    match = _NPY_HEADER.fullmatch(head[10:start])
    if match is None:
        return None
    dtype = np.dtype(match[1].decode())
    shape = tuple(int(n) for n in match[2].split(b",") if n.strip())
    end = os.fstat(fd).st_size if size is None else at + size
    # math.prod: exact (np.prod wraps a crafted shape round int64) and 4 us faster, per file of thousands
    if dtype.hasobject or end != at + start + math.prod(shape) * dtype.itemsize:
        raise ValueError(f"{path}: truncated")
    return dtype, shape, at + start


def _read_npy(path: Path, mmap: bool, at: int = 0, size: int | None = None) -> np.ndarray | None:
    """An .npy file as np.load reads it (read-only when mapped), or None for a header this does not know (np.load
    then reads it). np.load parses each header with ast.literal_eval and wraps a map in np.memmap: slow per
    file, and a stage that looks up rows in every shard of a million documents opens thousands of them.
    at, size: where the .npy lies in a larger file (a member of an uncompressed .npz: _table_members)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        layout = _npy_layout(fd, path, at, size)
        if layout is None:
            return None
        dtype, shape, start = layout
        count = math.prod(shape)
        if mmap and count:
            return np.frombuffer(mmap_module.mmap(fd, 0, access=mmap_module.ACCESS_READ), dtype, count,
                                 start).reshape(shape)
        array = np.empty(shape, dtype)
        if not count:
            return array
        # numpy's stubs give ndarray the buffer protocol (__buffer__) only for Python >= 3.12
        view, done = memoryview(array.reshape(-1)).cast("B"), 0  # type: ignore[arg-type]
        while done < len(view):
            got = os.preadv(fd, [view[done:]], start + done)
            if got == 0:
                raise EOFError(f"{path}: truncated")
            done += got
        return array
    finally:
        os.close(fd)


def _table_members(path: Path) -> dict[str, tuple[int, int, int]] | None:
    """Where each array of an .npz lies in it, {name: (offset of its .npy, size, CRC-32)}, or None if one is
    compressed (np.savez stores them uncompressed: np.load then reads it)."""
    members = {}
    with open(path, "rb") as f:
        with zipfile.ZipFile(f) as z:
            infos = z.infolist()
        for info in infos:
            if info.compress_type != zipfile.ZIP_STORED or not info.filename.endswith(".npy"):
                return None
            f.seek(info.header_offset)
            local = f.read(30)  # the local header: its name and extra field lengths say where the data starts
            if len(local) < 30 or local[:4] != b"PK\x03\x04":
                raise zipfile.BadZipFile(f"{path}: bad member header")
            name, extra = int.from_bytes(local[26:28], "little"), int.from_bytes(local[28:30], "little")
            members[info.filename[:-4]] = (info.header_offset + 30 + name + extra, info.file_size, info.CRC)
    return members


class NpyRows:
    """A stored 1-D .npy array read only where it is indexed (a pread of each run of consecutive indices), nothing
    mapped: a map brings in the kernel's fault-around (64 KB of the file) about each page touched, all counted in
    the process's RSS; the client gathering the sets of 2,811 documents from the maps of 250 shards grew by
    200 MB. Indexing by an int array gives a new array, as a map would."""

    def __init__(self, path: Path, start: int, dtype: np.dtype, rows: int):
        self.path, self.start, self.dtype, self.rows = path, start, dtype, rows
        self.shape = (rows,)

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, index) -> np.ndarray:
        index = np.asarray(index, np.int64)
        out = np.empty(len(index), self.dtype)
        if not len(index):
            return out
        if index.min() < 0 or index.max() >= self.rows:
            raise IndexError(f"{self.path}: rows out of range")
        cut = np.flatnonzero(np.diff(index) != 1) + 1
        firsts, lasts = index[np.r_[0, cut]].tolist(), index[np.r_[cut - 1, len(index) - 1]].tolist()
        size = self.dtype.itemsize
        view = memoryview(out).cast("B")  # type: ignore[arg-type]
        fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            at = 0
            for first, last in zip(firsts, lasts):
                want = (last - first + 1) * size
                if os.preadv(fd, [view[at:at + want]], self.start + first * size) != want:
                    raise EOFError(f"{self.path}: truncated")
                at += want
        finally:
            os.close(fd)
        return out


@contextlib.contextmanager
def _reading(path: Path, stage: str):
    """A stored file's absence or damage as one line that says what to do."""
    try:
        yield
    except FileNotFoundError:
        raise WorkDirError(f"{path}: missing; re-run the {stage} stage (or use --force)") from None
    except (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile):  # .npz is a zip: damage shows there
        raise WorkDirError(f"{path}: corrupt or truncated; re-run the {stage} stage (or use --force)") from None


class StoredTable:
    """A table save_table wrote, read one column at a time (where each lies is parsed once): a catalog of 10M
    rows is summed, digested and copied column by column and shard by shard, never held whole."""

    def __init__(self, path: Path, stage: str):
        self.path, self.stage = path, stage
        with _reading(path, stage):
            self.members = _table_members(path)
            if self.members is None:
                with np.load(path, allow_pickle=False) as data:
                    self.fields = list(data.files)
            else:
                self.fields = list(self.members)

    def read(self, field: str, mmap: bool = False) -> np.ndarray:
        """One column, its CRC checked as np.load checks it; mapped read-only (mmap), unchecked: its pages are
        read only as they are touched (a bit flipped in a mapped column goes unnoticed, as in any .npy map)."""
        with _reading(self.path, self.stage):
            at, size, crc = self.members[field] if self.members is not None else (0, 0, 0)
            array = None if self.members is None else _read_npy(self.path, mmap, at, size)
            if array is None:
                with np.load(self.path, allow_pickle=False) as data:
                    return data[field]
            if not mmap:
                with open(self.path, "rb") as f:
                    f.seek(at)
                    head = f.read(size - array.nbytes)
                if zlib.crc32(array.reshape(-1).view(np.uint8), zlib.crc32(head)) != crc:  # type: ignore[arg-type]
                    raise ValueError(f"{self.path}: {field}: CRC mismatch")
            return array


def _is_marker(path: Path) -> bool:
    """Whether path is nearDup's mark: a plain file (not a link) with nearDup's text."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and os.read(fd, len(_MARKER_TEXT) + 1) == _MARKER_TEXT
    finally:
        os.close(fd)


def _is_manifest(path: Path) -> bool:
    """Whether path holds what a nearDup manifest holds at the top (of any format: another version's work dir
    is still nearDup's, and its own message says what to do)."""
    try:
        manifest = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return False
    return (isinstance(manifest, dict) and isinstance(manifest.get("format"), int)
            and isinstance(manifest.get("stages"), dict) and isinstance(manifest.get("version"), str))


def _part_name(index: int, suffix: str) -> str:
    """The file name of shard number `index`'s file part-n.suffix."""
    return f"part-{index:05d}.{suffix}"


def _output_name(name: str, key: str) -> str:
    """The file name of a whole-stage output `name` of the stage computed with `key`."""
    return f"{key[:12]}.{name}"


class WorkDir:
    def __init__(self, root: str | os.PathLike, create: bool = True, cache: bool = False):
        """Open the work dir at root; create: make it if it is missing (else it must exist; nothing is written).
        Either way a folder that is not nearDup's is refused (see _claim); cache: root is the default work dir
        under the user's cache folder, whose name nearDup chose."""
        self.root = Path(root)
        self._root_text = str(self.root)
        if create:
            try:
                self.root.parent.mkdir(parents=True, exist_ok=True)
                self.root.mkdir()
                with atomic_file(self.root / MARKER) as f:  # a new folder: nearDup's from the start
                    f.write(_MARKER_TEXT)
            except FileExistsError:
                self._claim(write=True, cache=cache)
            except OSError as e:
                raise _os_error(self.root, e) from None
        elif not self.root.is_dir():
            raise WorkDirError(f"{self.root}: no such work dir; run `neardup -w {self.root} shingle PATH...` first")
        else:
            self._claim(write=False, cache=cache)
        self._lock_fd: int | None = None
        # a transaction's stage records (in a Manifest) and settings, not yet in the stored manifest
        self._pending: Manifest | None = None
        self._settings: dict = {}
        # in a transaction: {stage: {shard number: key}} of the committed records whose folders are as sealed
        self._sealed: dict[str, dict[int, str]] = {}
        # stage folders known to exist (a mkdir per path would be a syscall per file), and their paths (made once:
        # pathlib's / costs 1.2 us, and an index run of 10M documents names 25,000 shard files)
        self._folders: dict[str, Path] = {}
        self._read: tuple[tuple[int, int, int], Manifest] | None = None  # the stored manifest, by file version

    def _claim(self, write: bool, cache: bool) -> None:
        """Check that the existing folder root is nearDup's: marked, or empty (then marked now), or a work dir
        an earlier nearDup made before the mark existed (its manifest is nearDup's and every entry has a name
        nearDup gives; then marked now). Refuse anything else, and stage folders that are not plain folders
        (a symlink would let clean-up reach outside the work dir). write: mark it (else only check)."""
        try:
            if _is_marker(self.root / MARKER):
                self._check_folders()
                return
            entries = os.listdir(self.root)
        except NotADirectoryError:
            raise WorkDirError(f"{self.root}: not a folder; give -w/--workdir or --index a folder") from None
        except OSError as e:
            raise _os_error(self.root, e) from None
        foreign: list[str] = sorted(e for e in entries
                         if e not in (MANIFEST, SEAL, "lock", CACHE_USE, *_FOLDERS) and not _OWN_TEMP.fullmatch(e))
        data = sorted(e for e in entries if e in (MANIFEST, *_FOLDERS))  # not just a lock or a temporary
        if foreign or (data and not cache and not _is_manifest(self.root / MANIFEST)):
            listed = foreign or data
            shown = ", ".join(listed[:3]) + (" ..." if len(listed) > 3 else "")
            raise WorkDirError(f"{self.root}: not a nearDup work dir (it holds {shown}); nearDup keeps its work "
                               f"only in a new or empty folder: give -w/--workdir or --index another one")
        self._check_folders()
        if write:
            with atomic_file(self.root / MARKER) as f:
                f.write(_MARKER_TEXT)

    def _check_folders(self) -> None:
        for name in _FOLDERS:
            try:
                st = os.lstat(self.root / name)
            except FileNotFoundError:
                continue
            if not stat.S_ISDIR(st.st_mode):
                raise WorkDirError(f"{self.root / name}: a {'symlink' if stat.S_ISLNK(st.st_mode) else 'file'} "
                                   f"where nearDup keeps a folder of its own; nearDup never writes through it: "
                                   f"move it away (or use a new -w/--workdir)")

    # ------------------------------------------------------------------------------------------------ manifest
    def manifest(self) -> Manifest:
        """The manifest, with the records and settings of an open transaction in place of the stored ones."""
        stored = self._stored_manifest()
        return stored if self._pending is None else stored.updated(self._pending.stages, **self._settings)

    def read_manifest(self) -> dict:
        """The manifest as JSON (see manifest())."""
        return self.manifest().to_json()

    def usable(self) -> bool:
        """Whether the manifest can be read by this nearDup (absent counts: a new work dir)."""
        try:
            self._stored_manifest()
        except WorkDirError:
            return False
        return True

    def _stored_manifest(self) -> Manifest:
        """The stored manifest, read and checked once per version of the file: another process (a run beside a
        `query`) replaces it by rename, which gives it a new inode."""
        path = self.root / MANIFEST
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return Manifest()
        except OSError:
            raise WorkDirError(f"{path}: manifest is corrupt; re-run with --force to rebuild the work dir") from None
        version = (st.st_size, st.st_mtime_ns, st.st_ino)
        if self._read is None or self._read[0] != version:
            try:
                data = path.read_bytes()
            except OSError:
                raise WorkDirError(f"{path}: manifest is corrupt; re-run with --force to rebuild the work dir") \
                    from None
            self._read = version, load(path, data)
        return self._read[1]

    def stage(self, name: str) -> StageRecord | None:
        return self.manifest().stages.get(name)

    def record_stage(self, name: str, record: StageRecord) -> None:
        record = dataclasses.replace(record, version=__version__,
                                     completed=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"))
        self._write({name: record})

    def set(self, **settings) -> None:
        """Top-level manifest settings (index, reported), written like a stage record."""
        self._write({}, **settings)

    def _write(self, stages: dict[str, StageRecord], **settings) -> None:
        """The one writer of the manifest (in a transaction: kept in memory until commit)."""
        if self._pending is not None:
            self._pending = self._pending.updated(stages)
            self._settings.update(settings)
            return
        manifest = self._stored_manifest().updated(stages, version=__version__, **settings)
        path = self.root / MANIFEST
        with atomic_file(path, "w") as f:
            f.write(manifest.dumps())
        st = os.stat(path)
        self._read = (st.st_size, st.st_mtime_ns, st.st_ino), manifest  # what was written: not read back
        self.collect_garbage(manifest.stages)
        self._seal(manifest.stages, frozenset(stages))

    def begin(self) -> None:
        """Start a transaction: records and settings stay in memory until commit(). The stage folders found as
        their seal says (seal) are taken as they are now, before this run writes to them."""
        if self._pending is None:
            self._pending, self._settings = Manifest(), {}
            self._sealed = self._unchanged_stages()

    def commit(self) -> None:
        pending, settings, self._pending, self._settings = self._pending, self._settings, None, {}
        self._sealed = {}
        if pending is not None and (pending.stages or settings):
            self._write(pending.stages, **settings)

    def rollback(self) -> None:
        """Forget an open transaction's records and settings: the stored manifest stays as it was."""
        self._pending, self._settings, self._sealed = None, {}, {}

    # ------------------------------------------------------------------------------------------------ seals
    # A run over an index of 10M documents would read 2,500 done markers in each per-shard stage (and stat their
    # files): ~0.08 CPU s, a tenth of what an incremental run spends outside the new documents. A seal vouches
    # for them at once: after a manifest write, a per-shard stage whose record was just written notes its key
    # with the mtime of its folder, which every file made, renamed or removed in the folder changes (nearDup
    # writes files only by rename). A transaction that finds the folder with that mtime and the record with that
    # key takes the record's shard keys as the done ones. A run killed after rewriting a shard in place (other
    # parameters) changed the mtime: its markers are read as before. A seal is not made where the folder's times
    # are whole seconds (FAT, some network file systems), too coarse to tell a later change.

    def _seal(self, stages: dict[str, StageRecord], written: frozenset[str]) -> None:
        """Seal the stages just written (their parts are all done, as listed), keep the seals of the others (the
        folder's mtime tells whether they still hold), drop those of stages with no record."""
        before = self._seals()
        seals = {stage: seal for stage, seal in before.items() if stage in stages and stage not in written}
        for stage in written:
            record = stages.get(stage)
            mtime = self._folder_mtime(stage)
            if getattr(record, "shard_numbers", None) is not None and mtime is not None and mtime % 10**9:
                seals[stage] = [record.key, mtime]  # type: ignore[union-attr]  # (a record, by the getattr)
        if seals == before:
            return
        if not seals:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.root / SEAL)
            return
        with atomic_file(self.root / SEAL, "w") as f:
            json.dump(seals, f, sort_keys=True)

    def _seals(self) -> dict[str, list]:
        """{stage: [record key, folder mtime]} of sealed.json (none if it is missing or damaged)."""
        try:
            seals = json.loads((self.root / SEAL).read_bytes())
        except (OSError, ValueError):
            return {}
        return {stage: seal for stage, seal in seals.items() if isinstance(seal, list) and len(seal) == 2} \
            if isinstance(seals, dict) else {}

    def _unchanged_stages(self) -> dict[str, dict[int, str]]:
        """{stage: {shard number: key}} of the stored records whose folders are as their seal says."""
        stored = self._stored_manifest().stages
        out = {}
        for stage, (key, mtime) in self._seals().items():
            record = stored.get(stage)
            if record is not None and record.key == key and self._folder_mtime(stage) == mtime:
                out[stage] = dict(zip(record.shard_numbers, record.shard_keys))  # type: ignore[attr-defined]
        return out

    def _folder_mtime(self, stage: str) -> int | None:
        """The mtime of a stage folder (opened, not stat-ed by name: a network file system revalidates its cached
        attributes on open), None if it cannot be read."""
        try:
            fd = os.open(self.root / stage, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        try:
            return os.fstat(fd).st_mtime_ns
        finally:
            os.close(fd)

    def collect_garbage(self, stages: dict[str, StageRecord]) -> None:
        """Remove stage files that the stored records (`stages`) do not list: earlier runs' shards and outputs.
        Called after the manifest is written, so only by the holder of the lock and never inside a transaction."""
        for stage in STAGES:
            record = stages.get(stage)
            if record is None:
                continue
            # names as strings: a stage folder of an index of 10M documents holds 10,000 files
            keep = {_output_name(file, record.key) for file in getattr(record, "files", {})}
            shards, limit = set(getattr(record, "shard_numbers", ())), getattr(record, "next_shard", 0)
            folder = os.path.join(self.root, stage)
            for name in self._own_files(stage, every=True):
                if name in keep or name.startswith("."):  # listed, or another process's temporary file
                    continue
                if name.startswith("part-"):
                    number = name[len("part-"):].split(".", 1)[0]
                    if not number.isdigit() or int(number) in shards or int(number) >= limit:
                        continue  # a listed shard, or work of a run not yet committed
                if _OWN_FILE.fullmatch(name):  # (asked only of the files to remove: 10,000 names a stage at 10M)
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(folder, name))
        # inputs/: the copies of compressed JSONL, stdin and split Parquet the stored listing does not read (an
        # earlier version of a file that changed, or of one no longer given), each as large as its text: an index
        # kept by cron whose shards change grew by one copy of each change. A record from before `spooled` keeps
        # them all.
        spooled = getattr(stages.get("shingle"), "spooled", None)
        if spooled is not None:
            keep = set(spooled)
            for name in self._own_files("inputs", every=True):  # (a link named inputs is not followed)
                if name not in keep and _SPOOLED.fullmatch(name):  # (another's temporary file starts with a dot)
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(self.root, "inputs", name))

    def clear(self) -> None:
        """--force: forget every stage (the manifest, nearDup's files in the stage folders, and the folders if
        nothing else is left in them), keeping the mark, the lock and spooled inputs."""
        self._folders.clear()
        for stage in STAGES:  # nearDup's files only (temporaries too: the lock is held), then the folder if empty
            for name in self._own_files(stage):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.root / stage / name)
            with contextlib.suppress(OSError):
                os.rmdir(self.root / stage)
        for name in (MANIFEST, SEAL):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.root / name)

    def _own_files(self, stage: str, every: bool = False) -> list[str]:
        """The names in a stage folder that nearDup gives its files (see _OWN_FILE); none if the folder is missing
        or not a plain folder (never a link's target). every: all its names (the caller tells its own)."""
        try:
            fd = os.open(self.root / stage, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return []
        try:
            names = os.listdir(fd)
            return names if every else [n for n in names if _OWN_FILE.fullmatch(n) or _OWN_TEMP.fullmatch(n)]
        finally:
            os.close(fd)

    # ------------------------------------------------------------------------------------------------ paths
    def path(self, stage: str, name: str) -> Path:
        folder = self._folders.get(stage)
        if folder is None:
            folder = self.root / stage
            folder.mkdir(exist_ok=True)
            self._folders[stage] = folder
        return folder / name

    def part(self, stage: str, index: int, suffix: str) -> Path:
        """A file of shard number `index` (shard numbers are never reused; see the shingle record's shards)."""
        return self.path(stage, _part_name(index, suffix))

    def output(self, stage: str, name: str, key: str) -> Path:
        """A whole-stage output file of the stage computed with `key`."""
        return self.path(stage, _output_name(name, key))

    def current(self, stage: str, name: str) -> Path:
        """The output file `name` of the stage's current record."""
        record = self.stage(stage)
        if record is None:
            raise WorkDirError(f"{self.root}: the {stage} stage has not run")
        return self.output(stage, name, record.key)

    # ------------------------------------------------------------------------------------------------ files
    def save_array(self, path: Path, array: np.ndarray) -> None:
        """array as np.save writes it, its data written by Python's file, not numpy's tofile: a write cut short by a
        full disk then raises the OSError with its errno (ENOSPC), where tofile's said only "N requested and M
        written"."""
        array = np.ascontiguousarray(array)
        with atomic_file(path) as f:
            np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(array))
            f.write(array.data.cast("B") if array.size else b"")

    def link(self, source: Path, path: Path) -> None:
        """path becomes another name of the file source (a copy where the file system has no hard links), in one
        step: a file kept by the next record of its stage is neither copied nor rewritten."""
        tmp = path.with_name(f".{path.name}.{_HOST}.{os.getpid()}.tmp")
        try:
            try:
                os.link(source, tmp)
            except OSError:
                shutil.copyfile(source, tmp)
            os.replace(tmp, path)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise _os_error(path, e) from None

    def load_array(self, path: Path, stage: str, mmap: bool = False) -> np.ndarray:
        with _reading(path, stage):
            array = _read_npy(path, mmap)
            return array if array is not None else np.load(path, mmap_mode="r" if mmap else None,
                                                            allow_pickle=False)

    def load_parts(self, stage: str, shards: list[int], suffix: str, dtype: np.dtype, rows: list[int]
                   ) -> np.ndarray:
        """The 1-D arrays of the shards' files part-n.suffix (rows[i] of dtype in the i-th), concatenated. Each file
        is read straight into its slice of one array by one pread of its header, its data and a byte past its end,
        the header compared with the one np.save writes: an index of 10M documents reads 2,530 shards' files so,
        4x faster than load_array each and a concatenation. A file of another layout (written by another numpy)
        is read by load_array, which also names a damaged or missing one."""
        out = np.empty(sum(rows), dtype)
        view = memoryview(out).cast("B")  # type: ignore[arg-type]  # (numpy's stubs: see _read_npy)
        headers: dict[int, bytes] = {}
        at, past = 0, bytearray(1)
        folder = os.path.join(self.root, stage)
        for shard, n in zip(shards, rows):
            path = os.path.join(folder, _part_name(shard, suffix))
            if n not in headers:
                with io.BytesIO() as f:
                    np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(out.dtype),
                                                             "fortran_order": False, "shape": (n,)})
                    headers[n] = f.getvalue()
            expected, data = headers[n], view[at * out.itemsize:(at + n) * out.itemsize]
            head = bytearray(len(expected))
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                try:
                    got = os.preadv(fd, [head, data, past], 0)
                finally:
                    os.close(fd)
            except OSError:
                got = -1  # (load_array says what is wrong)
            if got != len(head) + len(data) or head != expected:
                array = self.load_array(Path(path), stage)
                if array.shape != (n,) or array.dtype != out.dtype:
                    raise WorkDirError(f"{path}: corrupt or truncated; re-run the {stage} stage (or use --force)")
                out[at:at + n] = array
            at += n
        return out

    def array_rows(self, path: Path, stage: str) -> NpyRows | np.ndarray:
        """A stored 1-D array to read a few rows of (NpyRows), or, in a format NpyRows does not read, the array."""
        with _reading(path, stage):
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            try:
                layout = _npy_layout(fd, path)
            finally:
                os.close(fd)
            if layout is not None and len(layout[1]) == 1:
                dtype, (rows,), start = layout
                return NpyRows(path, start, dtype, rows)
        return self.load_array(path, stage, mmap=True)

    def save_jsonl(self, path: Path, records) -> None:
        with atomic_file(path, "w") as f:
            for record in records:
                f.write(_JSONL_ENCODER.encode(record) + "\n")

    def load_jsonl(self, path: Path, stage: str) -> list[dict]:
        with _reading(path, stage), open(path, encoding="utf-8", errors="surrogatepass") as f:
            return [json.loads(line) for line in f]

    def jsonl_array(self, path: Path, stage: str, limit: int | None = None) -> str:
        """The first `limit` records of a JSONL file as the text of one JSON array, not parsed: the HTML report
        copies it into its page as it is."""
        with _reading(path, stage), open(path, encoding="utf-8", errors="surrogatepass") as f:
            if limit is None:  # (a record is one line: JSON escapes the newlines inside it)
                return "[" + f.read().rstrip("\n").replace("\n", ",") + "]"
            return "[" + ",".join(line.rstrip("\n") for line in itertools.islice(f, limit)) + "]"

    def iter_jsonl(self, path: Path, stage: str):
        """The records of a JSONL file one by one, as load_jsonl reads them (a file of millions of records)."""
        with _reading(path, stage), open(path, encoding="utf-8", errors="surrogatepass") as f:
            for line in f:
                yield json.loads(line)

    def save_table(self, path: Path, columns: dict) -> None:
        """Named arrays in one .npz (100,000 rows of a table load in milliseconds; JSON lines take a second)."""
        with atomic_file(path) as f:
            np.savez(f, **columns)

    def save_columns(self, path: Path, columns) -> None:
        """The .npz save_table writes, from columns (name, dtype, rows, parts) whose parts (arrays, cast to
        dtype) are made one at a time: a table larger than memory is written holding one part."""
        with atomic_file(path) as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
            for name, dtype, rows, parts in columns:
                with z.open(name + ".npy", "w", force_zip64=True) as out:  # as np.savez opens each member
                    header = np.lib.format.header_data_from_array_1_0(np.empty(0, dtype))
                    np.lib.format.write_array_header_1_0(out, {**header, "shape": (rows,)})
                    written = 0
                    for part in parts:
                        part = np.ascontiguousarray(part, dtype)
                        out.write(part.view(np.uint8))  # type: ignore[call-overload]  # a buffer
                        written += len(part)
                    if written != rows:
                        raise ValueError(f"{path}: column {name} has {written} rows, not {rows}")

    def load_table(self, path: Path, stage: str, mmap: bool = False) -> dict:
        """The arrays save_table wrote; mapped read-only (mmap): a column's pages are read only if touched."""
        table = StoredTable(path, stage)
        return {f: table.read(f, mmap) for f in table.fields}

    def save_json(self, path: Path, obj) -> None:
        with atomic_file(path, "w") as f:
            json.dump(obj, f, sort_keys=True)

    def part_done(self, stage: str, index: int, key: str, suffixes: tuple[str, ...]) -> dict | None:
        """The done marker of a partition if it was finished with this key and its files are all present. (Paths
        as strings and one stat a file: a run over 10M documents asks this of 2,500 shards in each stage, and
        pathlib's objects and a second stat cost ~40 us a call.)"""
        base = f"{self._root_text}/{stage}/{_part_name(index, '')}"  # (os.path.join of a Path: 2 us a call)
        try:  # (os.read, not open(): a buffered file object costs as much as the stats that follow)
            fd = os.open(base + "done.json", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            try:
                text = os.read(fd, _MARKER_READ)
                if len(text) == _MARKER_READ:  # a marker holding many messages
                    text += b"".join(iter(lambda: os.read(fd, _MARKER_READ), b""))
            finally:
                os.close(fd)
            done = json.loads(text)
        except (OSError, ValueError):
            return None
        if not isinstance(done, dict) or done.get("key") != key:
            return None
        sizes = done.get("files", {})
        for suffix in suffixes:  # a missing or truncated file makes the partition not done: it is recomputed
            try:
                if os.stat(base + suffix).st_size != sizes.get(suffix, -1):
                    return None
            except OSError:
                return None
        return done

    def part_known(self, stage: str, index: int, key: str, suffixes: tuple[str, ...]) -> bool:
        """Whether partition `index` of stage is done with `key`: its sealed record lists it so (in a transaction,
        see _seal), or its done marker does (part_done)."""
        return self._sealed.get(stage, {}).get(index) == key or self.part_done(stage, index, key, suffixes) is not None

    def mark_part_done(self, stage: str, index: int, key: str, stats: dict, suffixes: tuple[str, ...]) -> None:
        """Written last: the partition's key, counts, and the sizes of its files (checked by part_done)."""
        files = {s: self.part(stage, index, s).stat().st_size for s in suffixes}
        self.save_json(self.part(stage, index, "done.json"), {"key": key, "files": files, **stats})

    def spool(self, name: str, stream, encoding: str | None = None,
              parquet: tuple[tuple[str, ...], int] | None = None) -> str:
        """Copy JSONL from stdin or a compressed file (.gz, .zst, .bz2, .xz: text.corpus) to inputs/, once per
        content (stdin) or file version (compressed), decompressed.
        encoding: the file name is in UTF-16 or UTF-32 (with a BOM): copy it as UTF-8 (JSONL items are cut at
        newline bytes), once per file version; a file already in inputs/ is replaced by its UTF-8 copy.
        parquet: (columns, rows): copy those columns of the Parquet file name in row groups of that many rows
        (text.corpus.split_parquet), once per file version."""
        folder = self.root / "inputs"
        folder.mkdir(exist_ok=True)
        if parquet is not None:
            columns, rows = parquet
            st = os.stat(name)
            target = folder / f"{Path(name).name}.{st.st_dev}-{st.st_ino}.{st.st_size}.{st.st_mtime_ns}.{rows}"
            if not target.exists():
                with atomic_file(target) as out:
                    split_parquet(name, out, columns, rows)
            return str(target)
        if encoding is not None:
            st = os.stat(name)
            spooled = Path(name).parent == folder
            target = Path(name) if spooled else folder / f"{Path(name).name}.{st.st_size}.{st.st_mtime_ns}.utf-8"
            if spooled or not target.exists():
                with open(name, encoding=encoding, errors="replace", newline="") as src, atomic_file(target) as out:
                    for block in iter(lambda: src.read(1 << 20), ""):
                        out.write(block.encode("utf-8", "surrogatepass"))
            return str(target)
        if name == "-":
            with atomic_file(folder / "stdin.jsonl") as out:
                shutil.copyfileobj(stream if stream is not None else sys.stdin.buffer, out)
            return str(folder / "stdin.jsonl")
        st = os.stat(name)
        suffix = next(end for end in COMPRESSIONS if name.endswith(end))
        target = folder / f"{Path(name).name[:-len(suffix)]}.{st.st_size}.{st.st_mtime_ns}"
        if not target.exists():
            with atomic_file(target) as out:
                copy_decompressed(name, out)
        return str(target)

    # ------------------------------------------------------------------------------------------------ lock
    def lock(self, wait: float = 0.0, shared: bool = False) -> None:
        """Hold a flock on WORK/lock until release() or exit (shared: readers like `query`, which only wait for
        a writer); wait up to `wait` seconds for it."""
        if self._lock_fd is not None:
            return
        try:
            fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as e:
            raise _os_error(self.root / "lock", e) from None
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise WorkDirError(f"{self.root}: work dir is in use by another nearDup run; wait for it or "
                                       f"pass --wait-lock SECONDS") from None
                time.sleep(0.1)
        with contextlib.suppress(OSError):
            if os.path.samestat(os.fstat(fd), os.stat(self.root / "lock")):
                self._lock_fd = fd
                _HELD_LOCKS.add(fd)
                return
        os.close(fd)  # the lock was taken by `neardup cache clean`, which removed the work dir meanwhile
        raise WorkDirError(f"{self.root}: work dir was removed by `neardup cache clean` while this run waited for "
                           f"it; run again")

    def release(self) -> None:
        if self._lock_fd is not None:
            if self._lock_fd in _HELD_LOCKS:  # not in a forked child, which closed it already
                _HELD_LOCKS.discard(self._lock_fd)
                os.close(self._lock_fd)
            self._lock_fd = None


# A flock belongs to the open file description, which fork shares: a worker holding a copy of the fd holds the lock
# too, and one orphaned by a kill -9 of its parent kept every later run out. So no forked child keeps one.
_HELD_LOCKS: set[int] = set()


def _drop_locks_in_child() -> None:
    for fd in _HELD_LOCKS:
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD_LOCKS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_drop_locks_in_child)
