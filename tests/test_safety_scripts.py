"""Action scripts that cannot act wrongly, whatever happens between the scan and the run (issue 17, items 2-9).

Every test writes the script with the real CLI, runs it with `sh` (dash where /bin/sh is dash) from another folder
than the scan's, and checks exactly which files exist afterwards and what they hold."""
from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

NEARDUP = [sys.executable, "-m", "nearDup"]


def text(seed: int, words: int = 120) -> bytes:
    rng = random.Random(seed)
    return (" ".join(f"w{rng.randrange(5000)}" for _ in range(words)) + "\n").encode()


A, B, C = text(1), text(2), text(3)
A_EDIT = A.replace(b" ", b" x ", 1)  # a near-duplicate of A, not the same bytes


def neardup(*args, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_CACHE_HOME": str(cwd) + "/.cache"}
    return subprocess.run([*NEARDUP, *map(str, args)], cwd=cwd, env=env, capture_output=True)


def write(path: Path | bytes, data: bytes, age: float = 0) -> None:
    """A file with data, its mtime age seconds in the past (keeper rules prefer the oldest)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    if age:
        t = 1_700_000_000 - age
        os.utime(path, (t, t))


def pair(tmp_path: Path, duplicate: bytes = A) -> Path:
    """docs/a.txt (text A, the oldest: the keeper) and docs/b.txt (duplicate, newer); returns docs."""
    write(tmp_path / "docs" / "a.txt", A, age=1000)
    write(tmp_path / "docs" / "b.txt", duplicate, age=10)
    return tmp_path / "docs"


def tree(root: Path) -> dict[str, bytes | str]:
    """Every file and link below root: relative path -> content, or '-> target' for a symbolic link."""
    out: dict[str, bytes | str] = {}
    for folder, dirs, files in os.walk(os.fsencode(root)):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            path = os.path.join(folder, name)
            rel = os.fsdecode(os.path.relpath(path, os.fsencode(root)))
            if os.path.islink(path):
                out[rel] = "-> " + os.fsdecode(os.readlink(path))
            else:
                with open(path, "rb") as f:
                    out[rel] = f.read()
    return out


def script(tmp_path: Path, *args, cwd: Path | None = None, action: str = "remove") -> Path:
    """The script of `run ARGS --print script`, scanned from cwd (default tmp_path), written outside the corpus."""
    r = neardup("-w", tmp_path / "work", "run", *args, "-t", 0.5, "--print", "script", "--action", action,
                cwd=cwd or tmp_path)
    assert r.returncode == 0, r.stderr
    path = tmp_path / "script.sh"
    path.write_bytes(r.stdout)
    return path


def run(path: Path, *args, env=None) -> subprocess.CompletedProcess:
    """sh SCRIPT from a folder that is neither the scan's nor the corpus's."""
    elsewhere = path.parent / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    return subprocess.run(["sh", str(path), *args], cwd=elsewhere, capture_output=True, env=env)


def acts(path: Path) -> int:
    return sum(line.startswith(b"act ") for line in path.read_bytes().splitlines())


# ------------------------------------------------------------------------------- 2. one file, two paths

SPELLINGS = {
    "folder and ./folder": ["docs", "./docs"],
    "relative and absolute": ["docs", "{abs}/docs"],
    "folder and its subfolder spelled otherwise": ["./docs", "docs//sub/"],
    "folder and a link to it": ["docs", "link"],
    "a file listed twice": ["docs/a.txt", "./docs/a.txt", "docs/sub/b.txt"],
    "hard links in one folder": ["docs"],
}


@pytest.mark.parametrize("case", SPELLINGS)
def test_one_file_by_two_paths_is_never_its_own_duplicate(tmp_path, case):
    write(tmp_path / "docs" / "a.txt", A)
    write(tmp_path / "docs" / "sub" / "b.txt", B)
    os.symlink("docs", tmp_path / "link")
    if case == "hard links in one folder":
        os.link(tmp_path / "docs" / "a.txt", tmp_path / "docs" / "z_hard.txt")
    before = tree(tmp_path / "docs")
    args = [a.format(abs=tmp_path) for a in SPELLINGS[case]]
    r = neardup("-w", tmp_path / "work", "run", *args, "--print", "dupes", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == b"", r.stdout
    assert b"of files already listed skipped (same file)" in r.stderr
    path = script(tmp_path, *args)
    assert acts(path) == 0
    for flag in ("-n", None):
        assert run(path, *[flag] if flag else []).returncode == 0
        assert tree(tmp_path / "docs") == before


def test_lazy_listing_of_one_folder_skips_hard_links_too(tmp_path):
    """The first run on a new work dir shingles a folder while it is listed: the same file is still listed once."""
    write(tmp_path / "docs" / "a.txt", A)
    os.link(tmp_path / "docs" / "a.txt", tmp_path / "docs" / "b.txt")
    r = neardup("-w", tmp_path / "work", "run", "docs", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == b""
    assert b"1 path of files already listed skipped (same file)" in r.stderr


# ------------------------------------------------------------------------------- 3. nested references

def test_replay_sees_a_reference_however_it_is_spelled(tmp_path):
    write(tmp_path / "docs" / "copy.txt", A, age=1000)
    write(tmp_path / "docs" / "master" / "gold.txt", A, age=10)
    saved = neardup("-w", tmp_path / "work", "run", "docs", "--format", "jsonl", cwd=tmp_path).stdout
    (tmp_path / "saved.jsonl").write_bytes(saved)
    for ref in ("./docs/master/", str(tmp_path / "docs" / "master")):
        r = neardup("run", "--replay", "saved.jsonl", "--reference", ref, "--print", "dupes", cwd=tmp_path)
        assert r.stdout == b"docs/copy.txt\n", (ref, r.stdout, r.stderr)


# ------------------------------------------------------------------------------- 9. --follow-links

@pytest.mark.parametrize("link", ["0link.txt", "z_link.txt"])
def test_a_link_is_not_a_duplicate_of_its_target(tmp_path, link):
    write(tmp_path / "docs" / "a.txt", A)
    write(tmp_path / "docs" / "c.txt", C)
    os.symlink("a.txt", tmp_path / "docs" / link)
    r = neardup("-w", tmp_path / "work", "run", "docs", "--follow-links", "--print", "dupes", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == b""
    path = script(tmp_path, "docs", "--follow-links")
    assert acts(path) == 0 and run(path).returncode == 0
    assert tree(tmp_path / "docs") == {"a.txt": A, "c.txt": C, link: "-> a.txt"}