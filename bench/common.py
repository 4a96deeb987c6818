"""What the benchmark scripts share: listing a corpus folder, the one common Python shingler (for the peers and the
ground truth), and timing one whole process.

The shingler is the same text model as nearDup's defaults (--unit word -k 5): NFKC, case folding, maximal runs of
\\w, word 5-grams. Shingles are the 5 words joined by one space, encoded as UTF-8, in a set of bytes.
"""
from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import time
import unicodedata

WORD = re.compile(r"\w+")
K = 5
THRESHOLD = 0.8
NUM_PERM = 128
BANDS, ROWS = 9, 13


def list_corpus(root: str) -> list[tuple[str, str]]:
    """(id, path) of every file under root, id being the path relative to root with "/", sorted by id."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            if name.startswith("."):
                continue
            path = os.path.join(dirpath, name)
            out.append((os.path.relpath(path, root).replace(os.sep, "/"), path))
    out.sort()
    return out


def read_text(path: str) -> str:
    with open(path, "rb") as f:
        return f.read().decode("utf-8", errors="replace")


def shingles(text: str, k: int = K) -> set[bytes]:
    """Word k-shingles of the normalised text: {"w1 w2 w3 w4 w5".encode(), ...}; empty when < k words."""
    toks = WORD.findall(unicodedata.normalize("NFKC", text).casefold())
    return {" ".join(toks[i:i + k]).encode("utf-8") for i in range(len(toks) - k + 1)}


def jaccard(a: set, b: set) -> float:
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter) if (a or b) else 0.0


def read_pairs(path: str) -> dict[tuple[str, str], float]:
    """A pair file `jaccard<TAB>a<TAB>b` -> {(min(a,b), max(a,b)): jaccard}."""
    pairs = {}
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            j, a, b = line.split("\t")
            pairs[(min(a, b), max(a, b))] = float(j)
    return pairs


def write_pairs(path: str, pairs: dict[tuple[str, str], float]) -> None:
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
        for (a, b), j in sorted(pairs.items(), key=lambda kv: (-kv[1], kv[0])):
            f.write(f"{j:.4f}\t{a}\t{b}\n")


def settle(timeout: float = 60.0) -> None:
    """Flush dirty pages and wait until the kernel has written them, unmeasured, before a measured process starts.

    Dirty pages left by earlier runs or by anything else on the machine are written back by ext4 30 s after they
    were dirtied, whichever measurement is running then. (Deleting a work dir before its writeback drops its
    pages without I/O: that alone did not explain one 118 s run at 1M that took 42 s once repeated.)"""
    os.sync()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open("/proc/meminfo") as f:
            kb = {line.split(":")[0]: int(line.split()[1]) for line in f}
        if kb.get("Dirty", 0) + kb.get("Writeback", 0) < 4096:
            break
        time.sleep(0.2)


def timed(cmd: list[str], env: dict | None = None) -> tuple[float, float, bytes]:
    """(wall s, CPU s of the child's process tree, stdout) of one whole process; exits naming it if it fails
    (exit status 1 is nearDup's "found something" with --exit-code, not a failure)."""
    settle()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)} failed: {done.stderr.decode(errors='replace')[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done.stdout


def replace_section(path: str, begin: str, end: str, section: str) -> None:
    """Put section (which starts with begin and ends with end) in place of the one between those markers in the
    report at path, or at its end if it has none; written to a temporary file, then renamed."""
    text = open(path).read() if os.path.exists(path) else ""
    if begin in text and end in text:
        text = text[:text.index(begin)] + section + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
