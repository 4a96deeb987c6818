"""Report first, act later: comparing two documents, and writing a reviewable shell script that acts on duplicates.

nearDup itself never deletes, moves or links anything: the script does, when a person (or cron) runs it.
"""
from __future__ import annotations

import hashlib
import os
import sys
import zlib

import numpy as np

from . import __version__, corpus
from .config import ShingleParams
from .errors import InputError
from .kernels.shingle import CodePointHasher, kgram_hashes, word_hashes
from .output import plural

ACTIONS = ("remove", "move", "link")
_REVERSED_BITS = bytes(int(f"{i:08b}"[::-1], 2) for i in range(256))


def posix_cksum(data: bytes) -> int:
    """The CRC printed by POSIX `cksum`: CRC-32 (polynomial 0x04C11DB7, MSB first, initial value 0) of the data
    followed by its length in as few little-endian bytes as needed, complemented. Computed with zlib's reflected
    CRC-32 on bit-reversed bytes (init ~0 = 0, final xor ~0), whose result is the bit-reversed CRC."""
    n, tail = len(data), bytearray()
    while n:
        tail.append(n & 0xFF)
        n >>= 8
    reflected = zlib.crc32((data + bytes(tail)).translate(_REVERSED_BITS), 0xFFFFFFFF)
    return int(f"{reflected:032b}"[::-1], 2)


def sh_quote(text: str) -> str:
    """A single-quoted sh word; the bytes of non-UTF-8 names pass through unchanged (surrogate escapes)."""
    return "'" + text.replace("'", "'\\''") + "'"


# ------------------------------------------------------------------------------------------------ script

_PROLOGUE = """#!/bin/sh
# Written by nearDup {version}: {action} {count}. Review it before running it.
#   sh {name}        {verb} each duplicate below, after re-checking it and its keeper
#   sh {name} -n     dry run: print what would be done, change nothing
# Before each action the duplicate and its keeper must be as they were at the scan (regular file, size, mtime,
# cksum); a file that changed is skipped with a message. Keepers and reference documents are never touched.
set -u
dry=0
[ "${{1-}}" = "-n" ] && dry=1
acted=0
skipped=0
mtime() {{ stat -c %Y -- "$1" 2>/dev/null || stat -f %m -- "$1" 2>/dev/null; }}
same() {{ [ -f "$1" ] && [ ! -L "$1" ] && [ "$(mtime "$1")" = "$3" ] && [ "$(cksum < "$1")" = "$4 $2" ]; }}
act() {{  # keeper size mtime cksum, duplicate size mtime cksum{extra_args}
    if ! same "$1" "$2" "$3" "$4"; then
        echo "skip: keeper changed since the scan: $1" >&2; skipped=$((skipped + 1)); return
    fi
    if ! same "$5" "$6" "$7" "$8"; then
        echo "skip: changed since the scan: $5" >&2; skipped=$((skipped + 1)); return
    fi
    if [ "$dry" = 1 ]; then echo "would {verb}: $5"; return; fi
{body}
}}
"""

_BODIES = {
    "remove": '    rm -f -- "$5" && echo "removed: $5" && acted=$((acted + 1))',
    "move": ('    if [ -e "${10}" ]; then echo "skip: ${10} exists" >&2; skipped=$((skipped + 1)); return; fi\n'
             '    mkdir -p -- "$9" && mv -- "$5" "${10}" && echo "moved: $5 -> ${10}" && acted=$((acted + 1))'),
    "link": ('    ln -f -- "$1" "$5.neardup-link" && mv -f -- "$5.neardup-link" "$5" && '
             'echo "linked: $5 -> $1" && acted=$((acted + 1))'),
}
_VERBS = {"remove": "remove", "move": "move to the quarantine folder", "link": "replace by a hard link to its keeper"}


def _state(path: str, doc: dict) -> str | None:
    """'size mtime cksum' of a file if it is still as the scan saw it (size, mtime, blake2b), else None."""
    try:
        st = os.stat(path)
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if (st.st_size != doc["size"] or st.st_mtime_ns != doc["mtime_ns"]
            or ("sha" in doc and hashlib.blake2b(data, digest_size=16).hexdigest() != doc["sha"])):
        return None  # (replayed pairs have no scan: their baseline is the state when the script is written)
    return f"{st.st_size} {st.st_mtime_ns // 1_000_000_000} {posix_cksum(data)}"


def make_script(groups: list[dict], docs: dict[str, dict], action: str, quarantine: str | None,
                name: str = "script.sh") -> str:
    """The sh script for the duplicates of groups (never keepers or references); docs: scan records by id."""
    if action == "move" and not quarantine:
        raise InputError("--action move needs --quarantine DIR")
    lines, count = [], 0
    for g in groups:
        keeper = g["members"][0]["id"]
        keeper_state = _state(keeper, docs[keeper])
        for m in g["members"][1:]:
            if m["role"] != "duplicate":
                continue
            state = _state(m["id"], docs[m["id"]])
            if keeper_state is None or state is None:
                lines.append(f"# skipped, changed since the scan: {(keeper if keeper_state is None else m['id'])!r}")
                continue
            args = [sh_quote(keeper), keeper_state, sh_quote(m["id"]), state]
            if action == "move":
                target = os.path.join(quarantine, m["id"].lstrip("/"))
                args += [sh_quote(os.path.dirname(target)), sh_quote(target)]
            lines.append(f"act {' '.join(args)}  # group {g['group']}, Jaccard {m['jaccard']:.4f}")
            count += 1
    prologue = _PROLOGUE.format(version=__version__, action=action, count=plural(count, "near-duplicate file"),
                                name=name, verb=_VERBS[action],
                                extra_args=", quarantine dir, target" if action == "move" else "",
                                body=_BODIES[action])
    return prologue + "\n".join(lines) + ('\necho "done: $acted acted, $skipped skipped" >&2\n'
                                          '[ "$skipped" = 0 ]\n')


# ------------------------------------------------------------------------------------------------ compare

def _shingles(path: str, params: ShingleParams, stdin=None) -> tuple[list, np.ndarray, str]:
    """Tokens and shingle hashes of a file, or of the text on stdin for "-"."""
    try:
        if path == "-":
            decoded = corpus.decode((stdin or sys.stdin.buffer).read())
        else:
            with open(path, "rb") as f:
                decoded = corpus.decode(f.read())
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror})") from None
    if decoded is None:
        raise InputError(f"{path}: binary file (it has NUL bytes); compare reads text only")
    text = corpus.normalise(decoded[0], params)
    if params.unit == "word":
        th, _, (starts, ends) = word_hashes([text])
        tokens = [text[a:b] for a, b in zip(starts.tolist(), ends.tolist())]
    else:
        th, tokens = CodePointHasher().hash_text(text), list(text)
    return tokens, kgram_hashes(th, np.array([len(th)]), params.k)[1], text


def compare(path_a: str, path_b: str, params: ShingleParams, stdin=None) -> dict:
    """Exact Jaccard |A∩B|/|A∪B| and containments |A∩B|/|A|, |A∩B|/|B| of two documents' shingle sets, and the
    passages of A (token ranges) made of shingles that B has too. Either (not both) may be "-": the text on
    stdin."""
    if path_a == path_b == "-":
        raise InputError("compare: only one of A and B can be - (the text on stdin)")
    tokens_a, hashes_a, _ = _shingles(path_a, params, stdin)
    tokens_b, hashes_b, _ = _shingles(path_b, params, stdin)
    set_a, set_b = set(hashes_a.tolist()), set(hashes_b.tolist())
    inter = len(set_a & set_b)
    union = len(set_a | set_b)
    covered = np.zeros(len(tokens_a), bool)
    for i in np.flatnonzero(np.isin(hashes_a, list(set_b))).tolist():
        covered[i:i + params.k] = True
    edges = np.flatnonzero(np.diff(np.r_[0, covered.astype(np.int8), 0]))
    passages = [(int(s), int(e)) for s, e in zip(edges[::2], edges[1::2])]
    return {"a": path_a, "b": path_b, "jaccard": inter / union if union else 0.0,
            "containment_a_in_b": inter / len(set_a) if set_a else 0.0,
            "containment_b_in_a": inter / len(set_b) if set_b else 0.0,
            "shingles_a": len(set_a), "shingles_b": len(set_b), "shared": inter,
            "tokens_a": tokens_a, "passages": passages}
