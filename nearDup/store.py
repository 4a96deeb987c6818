"""The work dir: layout, manifest, atomic writes, partition shards, lock. The only module that knows paths.

    WORK/
      manifest.json                    format, nearDup version, one record per finished stage
      lock                             held (flock) by the one run allowed at a time
      inputs/                          JSONL read from stdin or .gz, spooled so partitions can seek
      shingle/part-00000.docs.jsonl    one record per document: id, size, mtime_ns, sha, shingles, replaced
      shingle/part-00000.values.npy    uint32: each document's sorted unique shingle hashes, concatenated
      shingle/part-00000.offsets.npy   int64 (n_docs + 1): document d is values[offsets[d]:offsets[d+1]]
      signature/part-00000.npy         uint32 (n_docs, num_perm)
      signature/permutations.npy       uint64 (2, num_perm): a and b of the drawn permutations (permutation method)
      band/part-00000.npy              uint64 (n_docs, bands)
      candidates/pairs.npy             int64 (m, 2) global document numbers, a < b, sorted
      candidates/large_buckets.jsonl   buckets too large for all pairs: band, anchor, size
      verify/pairs.npy                 int64 (m, 2) verified pairs (global numbers)
      verify/scores.npy                float64 (m, 2): exact Jaccard, signature estimate
      verify/pairs.jsonl               the verified pairs with ids and scores, best first
      cluster/clusters.jsonl           duplicate groups: keeper, members with Jaccard against it, bounds
      <stage>/part-00000.done.json     written last: the partition's key and counts (resume skips it)

A document's global number is its partition's first number (the running sum of documents per partition, kept in
the shingle record) plus its index within the partition. Every file is written to a temporary name in the same
folder and renamed into place, so a reader sees the old file or the new one, never half of one.
"""
from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import gzip
import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path

import numpy as np

from . import __version__
from .config import FORMAT
from .errors import WorkDirError

_HOST = socket.gethostname()
STAGES = ("shingle", "signature", "band", "candidates", "verify", "cluster")
MANIFEST = "manifest.json"


def _os_error(path, e: OSError) -> WorkDirError:
    if e.errno == errno.ENOSPC:
        return WorkDirError(f"{path}: no space left on device; free space or choose another --workdir")
    if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return WorkDirError(f"{path}: work dir is not writable ({e.strerror}); choose another --workdir")
    return WorkDirError(f"{path}: {e.strerror}")


@contextlib.contextmanager
def atomic_file(path: Path, mode: str = "wb"):
    """Open a temporary sibling of path for writing; rename it over path only if the block succeeds.

    The temporary name holds the host and process, so that two machines sharing the work dir (Dask workers, one
    of them re-running a task it was thought to have lost) never write to the same temporary file."""
    tmp = path.with_name(f".{path.name}.{_HOST}.{os.getpid()}.tmp")
    try:
        with open(tmp, mode, **({} if "b" in mode else {"encoding": "utf-8", "errors": "surrogatepass"})) as f:
            yield f
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise _os_error(path, e) from None
        raise


class WorkDir:
    def __init__(self, root: str | os.PathLike, create: bool = True):
        self.root = Path(root)
        if create:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise _os_error(self.root, e) from None
        elif not self.root.is_dir():
            raise WorkDirError(f"{self.root}: no such work dir; run `neardup -w {self.root} shingle PATH...` first")
        self._lock_fd: int | None = None

    # ------------------------------------------------------------------------------------------------ manifest
    def read_manifest(self) -> dict:
        path = self.root / MANIFEST
        if not path.exists():
            return {"format": FORMAT, "version": __version__, "stages": {}}
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
            assert isinstance(manifest.get("stages"), dict)
        except (ValueError, AssertionError, AttributeError, OSError):
            raise WorkDirError(f"{path}: manifest is corrupt; re-run with --force to rebuild the work dir") from None
        if manifest.get("format") != FORMAT:
            raise WorkDirError(
                f"{self.root}: work dir was written by nearDup {manifest.get('version', '?')} (format "
                f"{manifest.get('format')}), this is {__version__} (format {FORMAT}); use a new --workdir "
                f"or re-run with --force to rebuild it")
        return manifest

    def stage(self, name: str) -> dict | None:
        return self.read_manifest()["stages"].get(name)

    def record_stage(self, name: str, record: dict) -> None:
        manifest = self.read_manifest()
        manifest["version"] = __version__
        record = {**record, "version": __version__,
                  "completed": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        manifest["stages"][name] = record
        with atomic_file(self.root / MANIFEST, "w") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)

    def clear(self) -> None:
        """--force: forget every stage (the manifest and stage folders), keeping the lock and spooled inputs."""
        for name in (*STAGES, MANIFEST):
            path = self.root / name
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()

    # ------------------------------------------------------------------------------------------------ paths
    def path(self, stage: str, name: str) -> Path:
        folder = self.root / stage
        folder.mkdir(exist_ok=True)
        return folder / name

    def part(self, stage: str, index: int, suffix: str) -> Path:
        return self.path(stage, f"part-{index:05d}.{suffix}")

    # ------------------------------------------------------------------------------------------------ files
    def save_array(self, path: Path, array: np.ndarray) -> None:
        with atomic_file(path) as f:
            np.save(f, np.ascontiguousarray(array), allow_pickle=False)

    def load_array(self, path: Path, stage: str, mmap: bool = False) -> np.ndarray:
        try:
            return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
        except FileNotFoundError:
            raise WorkDirError(f"{path}: missing; re-run the {stage} stage (or use --force)") from None
        except (ValueError, OSError, EOFError):
            raise WorkDirError(f"{path}: corrupt or truncated; re-run the {stage} stage (or use --force)") from None

    def save_jsonl(self, path: Path, records) -> None:
        with atomic_file(path, "w") as f:
            for record in records:
                f.write(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")

    def load_jsonl(self, path: Path, stage: str) -> list[dict]:
        try:
            with open(path, encoding="utf-8", errors="surrogatepass") as f:
                return [json.loads(line) for line in f]
        except FileNotFoundError:
            raise WorkDirError(f"{path}: missing; re-run the {stage} stage (or use --force)") from None
        except (ValueError, OSError):
            raise WorkDirError(f"{path}: corrupt or truncated; re-run the {stage} stage (or use --force)") from None

    def save_json(self, path: Path, obj) -> None:
        with atomic_file(path, "w") as f:
            json.dump(obj, f, sort_keys=True)

    def part_done(self, stage: str, index: int, key: str, suffixes: tuple[str, ...]) -> dict | None:
        """The done marker of a partition if it was finished with this key and its files are all present."""
        try:
            done = json.loads(self.part(stage, index, "done.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if done.get("key") != key:
            return None
        sizes = done.get("files", {})
        for suffix in suffixes:  # a missing or truncated file makes the partition not done: it is recomputed
            path = self.part(stage, index, suffix)
            if not path.exists() or path.stat().st_size != sizes.get(suffix, -1):
                return None
        return done

    def mark_part_done(self, stage: str, index: int, key: str, stats: dict, suffixes: tuple[str, ...]) -> None:
        """Written last: the partition's key, counts, and the sizes of its files (checked by part_done)."""
        files = {s: self.part(stage, index, s).stat().st_size for s in suffixes}
        self.save_json(self.part(stage, index, "done.json"), {"key": key, "files": files, **stats})

    def spool(self, name: str, stream) -> str:
        """Copy JSONL from stdin or a .gz file to inputs/, once per content (stdin) or file version (.gz)."""
        folder = self.root / "inputs"
        folder.mkdir(exist_ok=True)
        if name == "-":
            with atomic_file(folder / "stdin.jsonl") as out:
                shutil.copyfileobj(stream if stream is not None else sys.stdin.buffer, out)
            return str(folder / "stdin.jsonl")
        st = os.stat(name)
        target = folder / f"{Path(name).name[:-3]}.{st.st_size}.{st.st_mtime_ns}"
        if not target.exists():
            with gzip.open(name, "rb") as src, atomic_file(target) as out:
                shutil.copyfileobj(src, out, 1 << 20)
        return str(target)

    # ------------------------------------------------------------------------------------------------ lock
    def lock(self, wait: float = 0.0) -> None:
        """Hold an exclusive flock on WORK/lock until release() or exit; wait up to `wait` seconds for it."""
        if self._lock_fd is not None:
            return
        try:
            fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise _os_error(self.root / "lock", e) from None
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise WorkDirError(f"{self.root}: work dir is in use by another nearDup run; wait for it or "
                                       f"pass --wait-lock SECONDS") from None
                time.sleep(0.1)
        self._lock_fd = fd

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
