"""Report first, act later: a reviewable shell script that acts on duplicates.

nearDup itself never deletes, moves or links anything: the script does, when a person (or cron) runs it, and it
checks before every action that each file is still the one scanned (device and inode, size, checksum).
"""
from __future__ import annotations

import os
import stat
import zlib

from .. import __version__
from ..errors import InputError
from ..text.read import content_hash
from ..wording import plural
from .printer import visible

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



_PROLOGUE = """#!/bin/sh
# Written by nearDup {version}: {action} {count}. Review it before running it.
#   sh {name}        {verb} each duplicate below, after re-checking it and its keeper
#   sh {name} -n     dry run: print what would be done ({dry}), change nothing
# Paths are absolute, with their folders resolved at the scan: the script does the same from any folder.
# Before each action the duplicate and its keeper must be the files the scan read: regular files (not links), in
# the same resolved folders, with the same device and inode, mtime, cksum and size, and not one and the same file.
# Anything else is skipped with a message; a failed action says "failed:". Keepers and reference documents are
# never touched. Exit status: 0 all done, 1 something skipped, 2 an action failed.{warning}
set -u
dry=0
[ "${{1-}}" = "-n" ] && dry=1
acted=0 skipped=0 failed=0 already=0
mtime() {{ stat -c %Y -- "$1" 2>/dev/null || stat -f %m -- "$1" 2>/dev/null; }}
ident() {{ stat -c '%d %i' -- "$1" 2>/dev/null || stat -f '%d %i' -- "$1" 2>/dev/null; }}
# a folder as resolved now; the x keeps a trailing newline of its name through $(...)
here() {{ (cd -P -- "$1" 2>/dev/null && pwd -P && printf x); }}
unmoved() {{ [ "$(here "$1")" = "$(printf '%s\\nx' "$1")" ]; }}
same() {{  # path, its folder, 'device inode', 'mtime cksum size' as at the scan
    [ -f "$1" ] && [ ! -L "$1" ] && unmoved "$2" && [ "$(ident "$1")" = "$3" ] &&
        [ "$(mtime "$1") $(cksum < "$1")" = "$4" ]
}}
skip() {{ printf 'skip: %s\\n' "$1" >&2; skipped=$((skipped + 1)); }}
fail() {{ printf 'failed: %s\\n' "$1" >&2; failed=$((failed + 1)); }}
act() {{  # keeper: path, folder, 'device inode', 'mtime cksum size'; duplicate: the same four{extra_args}
    if ! same "$1" "$2" "$3" "$4"; then skip "keeper changed since the scan: $1"; return; fi
{same_file}
    if ! same "$5" "$6" "$7" "$8"; then skip "changed since the scan: $5"; return; fi
{body}
}}
"""

_SAME_FILE = {  # the duplicate is now the keeper itself: for link the end state, else never to be acted on
    "link": """\
    if [ "$5" -ef "$1" ]; then printf 'already linked: %s\\n' "$5"; already=$((already + 1)); return; fi""",
    "other": """\
    if [ "$5" -ef "$1" ]; then skip "same file as its keeper: $5"; return; fi""",
}
_BODIES = {
    "remove": """\
    if [ "$dry" = 1 ]; then printf 'would remove: %s\\n' "$5"; return; fi
    if rm -f -- "$5"; then printf 'removed: %s\\n' "$5"; acted=$((acted + 1)); else fail "cannot remove $5"; fi""",
    "move": """\
    if [ -e "${10}" ] || [ -L "${10}" ]; then skip "${10} exists"; return; fi
    if [ "$dry" = 1 ]; then printf 'would move: %s -> %s\\n' "$5" "${10}"; return; fi
    if ! mkdir -p -- "$9"; then fail "cannot create $9"; return; fi
    if ! unmoved "$9"; then skip "quarantine folder resolves elsewhere now: $9"; return; fi
    if mv -- "$5" "${10}"; then printf 'moved: %s -> %s\\n' "$5" "${10}"; acted=$((acted + 1))
    else fail "cannot move $5 -> ${10}"; fi""",
    # ln without -f: a file of that name that is not ours is never replaced; ours never outlives a failure
    "link": """\
    if [ "$dry" = 1 ]; then printf 'would link: %s -> %s\\n' "$5" "$1"; return; fi
    tmp="$6/.neardup-link.$$"
    if ! ln -- "$1" "$tmp"; then fail "cannot link $5 to $1"; return; fi
    if mv -f -- "$tmp" "$5"; then printf 'linked: %s -> %s\\n' "$5" "$1"; acted=$((acted + 1))
    else rm -f -- "$tmp"; fail "cannot replace $5 by a link to $1"; fi""",
}
_VERBS = {"remove": "remove", "move": "move to the quarantine folder", "link": "replace by a hard link to its keeper"}
_DRY = {"remove": "would remove: FILE", "move": "would move: FILE -> TARGET", "link": "would link: FILE -> KEEPER"}
_EPILOGUE = """
printf 'done: %s acted, {already}%s skipped, %s failed\\n' "$acted" {already_arg}"$skipped" "$failed" >&2
[ "$failed" = 0 ] || exit 2
[ "$skipped" = 0 ]
"""

class _Changed(Exception):
    """A file is not as the scan saw it, or not one the script may act on; the message says how."""


def _scanned(doc: dict, follow: bool) -> tuple[str, str, str, str]:
    """(path, its resolved folder, 'device inode', 'mtime cksum size') of a document's file if it is still the
    file the scan read (inode, size, mtime, content hash); follow: the path may be a symbolic link (a keeper:
    what is checked and kept is the file it leads to). Replayed pairs have no scan: their baseline is now."""
    path = os.path.abspath(doc.get("path", doc["id"]))
    folder = os.path.realpath(os.path.dirname(path))
    real = os.path.join(folder, os.path.basename(path))
    if os.path.islink(real):
        if not follow:
            raise _Changed(f"is a symbolic link (listed with --follow-links), not acted on: {visible(path)}")
        real = os.path.realpath(real)
        folder = os.path.dirname(real)
    try:
        with open(real, "rb") as f:
            st = os.fstat(f.fileno())
            data = f.read() if stat.S_ISREG(st.st_mode) else b""
    except OSError:
        raise _Changed(f"vanished since the scan: {visible(path)}") from None
    if (not stat.S_ISREG(st.st_mode) or st.st_size != doc["size"] or st.st_mtime_ns != doc["mtime_ns"]
            or doc.get("inode", st.st_ino) != st.st_ino
            or ("sha" in doc and content_hash(data) != doc["sha"])):
        raise _Changed(f"changed since the scan: {visible(path)}")
    mtime = st.st_mtime_ns // 1_000_000_000
    return real, folder, f"{st.st_dev} {st.st_ino}", f"{mtime} {posix_cksum(data)} {st.st_size}"


def _move_target(quarantine: str, real: str) -> tuple[str, str]:
    """(folder, path) a duplicate at resolved path real is moved to: its absolute path below the resolved
    quarantine; refused (_Changed) if it would not lie below it."""
    target = os.path.join(quarantine, real.lstrip("/"))
    if os.path.commonpath([quarantine, target]) != quarantine or target == quarantine:
        raise _Changed(f"would leave the quarantine folder {visible(quarantine)}: {visible(real)}")
    return os.path.dirname(target), target


def make_script(groups: list[dict], docs: dict[str, dict], action: str, quarantine: str | None,
                name: str = "script.sh") -> str:
    """The sh script for the duplicates of groups (never keepers or references); docs: scan records by id, with
    the path as scanned (absolute, or relative to the working directory) in "path" where the id is not one."""
    if action == "move":
        if not quarantine or not quarantine.strip():
            raise InputError("--action move needs --quarantine DIR")
        quarantine = os.path.realpath(quarantine)
    lines, count, hidden = [], 0, 0
    for g in groups:
        keeper = g["members"][0]["id"]
        try:
            keeper_args = _scanned(docs[keeper], follow=True)
        except _Changed as e:
            keeper_args, keeper_problem = None, f"keeper {e}"
        for m in g["members"][1:]:
            if m["role"] != "duplicate":
                continue
            try:
                if keeper_args is None:
                    raise _Changed(keeper_problem)
                dup_args = _scanned(docs[m["id"]], follow=False)
                links = docs[m["id"]].get("links") if action != "link" else None
                if links:  # removed or moved, it would leave these links dangling
                    raise _Changed(f"listed symbolic links lead to it ({', '.join(map(visible, links))}), not "
                                   f"acted on: {visible(dup_args[0])}")
                if dup_args[2] == keeper_args[2]:
                    raise _Changed(f"same file as its keeper: {visible(dup_args[0])}")
                # quarantine is set (and real) when action == "move", see above
                extra = _move_target(quarantine, dup_args[0]) if action == "move" else ()  # type: ignore[arg-type]
            except _Changed as e:
                lines.append(f"# skipped, {e}")
                continue
            words = [*keeper_args, *dup_args, *extra]
            if any(visible(w) != w for w in words):
                hidden += 1
                lines.append(f"# WARNING: names with control, bidi or undecodable characters, shown escaped: "
                             f"{visible(dup_args[0])} (keeper {visible(keeper_args[0])})")
            score = f"Jaccard {m['jaccard']:.4f}" if "jaccard" in m else f"contained {m['containment']:.4f} in keeper"
            lines.append(f"act {' '.join(map(sh_quote, words))}  # group {g['group']}, {score}")
            count += 1
    warning = (f"\n# {hidden} action(s) below name files with control, bidi or undecodable characters: read the "
               f"WARNING comment above each, where they are shown escaped." if hidden else "")
    prologue = _PROLOGUE.format(version=__version__, action=action, count=plural(count, "near-duplicate file"),
                                name=name, verb=_VERBS[action], dry=_DRY[action], warning=warning, body=_BODIES[action],
                                same_file=_SAME_FILE["link" if action == "link" else "other"],
                                extra_args="; quarantine folder, target" if action == "move" else "")
    epilogue = _EPILOGUE.format(already="%s already linked, " if action == "link" else "",
                                already_arg='"$already" ' if action == "link" else "")
    return prologue + "\n".join(lines) + "\n" + epilogue.lstrip("\n")
