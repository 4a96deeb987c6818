"""The cache of work dirs that `run` uses without -w: $XDG_CACHE_HOME/neardup/ (default ~/.cache/neardup/).

A folder there is one of nearDup's work dirs when it holds a lock file and either a readable manifest.json with a
"format" field or the cache.json that `run` writes into a cache work dir; nothing else in the cache folder is ever
listed or removed. cache.json records the inputs the work dir was made for, and its mtime, set at each use, is when
the work dir was last used: eviction removes the least recently used first. A work dir is removed only while this
process holds its lock, taken without waiting, so one in use by a run is skipped; it is renamed away first, so a
run starting meanwhile makes a new one.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import shutil
import time
from pathlib import Path

from ..config import (
    ShingleParams,
    SourceParams,
    digest,
)
from ..errors import WorkDirError
from .workdir import CACHE_USE as USE_FILE
from .workdir import MANIFEST, atomic_file


def default_workdir(args: list[str], source: SourceParams, params: ShingleParams) -> str:
    """A work dir under the user's cache directory, keyed by the resolved inputs and the shingle parameters."""
    return os.path.join(cache_root(), digest(absolute(args), source, params)[:16])

DEFAULT_MAX_SIZE = 2 * 10**9  # bytes: a few hundred runs on folders of documentation


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "neardup"


def absolute(args) -> list[str]:
    """The inputs as the cache keys and lists them: absolute paths, and - for stdin."""
    return [arg if arg == "-" else os.path.abspath(arg) for arg in args]


def record_use(work_root: Path, inputs: list[str]) -> None:
    """Mark a cache work dir as used now; the first time, record the inputs it is for."""
    path = Path(work_root) / USE_FILE
    try:
        os.utime(path)
    except FileNotFoundError:
        with atomic_file(path, "w") as f:
            json.dump({"inputs": inputs}, f)


@dataclasses.dataclass(frozen=True)
class Entry:
    path: Path
    size: int  # bytes of its files
    last_used: float  # seconds since the epoch
    inputs: tuple[str, ...]  # empty when unknown (made before cache.json existed)


def _read_json(path: Path) -> dict | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _entry(path: Path) -> Entry | None:
    """The work dir at path, or None if the folder is not one of nearDup's."""
    if path.is_symlink() or not path.is_dir() or not (path / "lock").is_file():
        return None
    use, manifest = _read_json(path / USE_FILE), _read_json(path / MANIFEST)
    if (use is None or not isinstance(use.get("inputs"), list)) and (manifest is None or "format" not in manifest):
        return None
    size = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                size += os.lstat(os.path.join(folder, name)).st_size
    stamp, last_used = next((p for p in (path / USE_FILE, path / MANIFEST) if p.exists()), path), 0.0
    with contextlib.suppress(OSError):
        last_used = stamp.stat().st_mtime
    return Entry(path, size, last_used, tuple(map(str, (use or {}).get("inputs", ()))))


def entries(root: Path | None = None) -> list[Entry]:
    """nearDup's work dirs in the cache, most recently used first."""
    root = cache_root() if root is None else root
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    found = [e for name in names if not name.startswith(".") and (e := _entry(root / name)) is not None]
    return sorted(found, key=lambda e: (-e.last_used, e.path.name))


def remove(entry: Entry) -> bool:
    """Delete a cache work dir unless a run holds its lock; whether it was deleted."""
    try:
        fd = os.open(entry.path / "lock", os.O_RDWR)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        doomed = entry.path.with_name(f".{entry.path.name}.removing-{os.getpid()}")
        try:
            os.rename(entry.path, doomed)  # a run starting now makes a new work dir instead of using this one
        except OSError as e:
            raise WorkDirError(f"{entry.path}: cannot remove it from the cache: {e.strerror}") from None
        shutil.rmtree(doomed, ignore_errors=True)
        return True
    finally:
        os.close(fd)


def clean(found: list[Entry], max_size: int | None = None, older_than_days: float | None = None,
          everything: bool = False, keep: Path | None = None) -> tuple[list[Entry], list[Entry]]:
    """Remove, least recently used first, the entries unused for more than older_than_days, and then as many as
    the rest need to fit in max_size bytes (None: no cap), or every one; never `keep` (the work dir of the run
    that is evicting). Returns (removed, skipped because a run holds them)."""
    limit = time.time() - older_than_days * 86400 if older_than_days is not None else None
    total = sum(e.size for e in found)
    removed, busy = [], []
    for e in reversed(found):
        old = limit is not None and e.last_used < limit
        over = everything or (max_size is not None and total > max_size)
        if e.path == keep or not (old or over):
            continue
        if remove(e):
            removed.append(e)
            total -= e.size
        else:
            busy.append(e)
    return removed, busy
