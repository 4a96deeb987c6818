"""Frozen parameter objects for each stage, and their fingerprints.

A stage's key is a digest of its name, the work-dir format, its parameters and the keys of what it consumes, so a
stored result is reused exactly when it would be recomputed identically.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os

FORMAT = 5  # work-dir data format; bump when stored bytes change meaning (hash functions, layouts)
UNITS = ("word", "char")
METHODS = ("oph", "permutation")
DEFAULT_THRESHOLD = 0.8


def digest(*parts) -> str:
    """A short stable hex digest of JSON-serialisable parts."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=_plain).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(blob, digest_size=16).hexdigest()


def _plain(obj):
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    raise TypeError(f"cannot fingerprint {type(obj).__name__}")


@dataclasses.dataclass(frozen=True)
class SourceParams:
    """How documents are found: affects which documents exist, not how they are shingled."""

    jsonl: bool = False
    id_field: str = "id"
    text_field: str = "text"
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    hidden: bool = False
    follow_links: bool = False
    null: bool = False  # paths on stdin are NUL-separated
    strict: bool = False  # a bad JSONL line stops the run instead of being skipped
    # A partition (shard) is cut by bytes for usual documents; the count caps it for tiny ones. Each shard costs
    # ~3-7 ms beyond its documents (its eight files, its task): 1 KB documents at 1,000 a shard spent 15% there.
    partition_docs: int = 4000
    partition_bytes: int = 4 << 20


@dataclasses.dataclass(frozen=True)
class ShingleParams:
    unit: str = "word"
    k: int = 5
    whitespace: str = "collapse"  # or "remove" (char shingles over text with no blanks)
    strip_punct: bool = False


@dataclasses.dataclass(frozen=True)
class SignatureParams:
    num_perm: int = 128
    seed: int = 1
    method: str = "oph"


@dataclasses.dataclass(frozen=True)
class BandParams:
    bands: int
    rows: int
    threshold: float | None = None  # the threshold (b, r) were chosen for, if chosen


@dataclasses.dataclass(frozen=True)
class CandidateParams:
    max_bucket: int = 1000
    # Shorter documents are never paired. In the Python standard library every pair below 20 shingles is a stub
    # (a licence header, `from x import *`: 54 of 85 pairs, all <= 13 shingles) and the smallest real one has 78.
    min_shingles: int = 20
    min_size: int = 0  # bytes of text


@dataclasses.dataclass(frozen=True)
class ClusterParams:
    link: str = "keeper"  # or "connected"
    keep: tuple[str, ...] = ("first", "nocopy", "central", "oldest", "shallowest", "alpha")
    prefer: str | None = None


@dataclasses.dataclass(frozen=True)
class VerifyParams:
    threshold: float = DEFAULT_THRESHOLD


def default_jobs() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
