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
    assert b"already listed skipped (same file)" in r.stderr
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
    assert b"1 path of a file already listed skipped (same file)" in r.stderr


# ------------------------------------------------------------------------------- 3. nested references

@pytest.mark.parametrize("args", [
    ["docs", "--reference", "docs/master"],
    ["--reference", "docs/master", "docs"],
    ["--reference", "./docs/master/", "docs"],
    ["./docs", "--reference", "{abs}/docs/master"],
    ["{abs}/docs", "--reference", "docs/master/gold.txt"],
])
def test_reference_inside_an_input_folder_is_kept_in_any_order(tmp_path, args):
    write(tmp_path / "docs" / "copy.txt", A, age=1000)  # older and shallower: the keeper, were gold not a reference
    write(tmp_path / "docs" / "master" / "gold.txt", A, age=10)
    write(tmp_path / "docs" / "other.txt", B, age=10)
    args = [a.format(abs=tmp_path) for a in args]
    path = script(tmp_path, *args)
    assert acts(path) == 1
    done = run(path)
    assert done.returncode == 0, done.stderr
    assert tree(tmp_path / "docs") == {"master/gold.txt": A, "other.txt": B}


# in a private mount namespace: docs/master also at docs/alias (a bind mount); the script of `run $@` (from the
# scan's folder $1), then that script run by sh from $1/elsewhere, while the alias is still there
_BIND = ('cd "$1" && mount --bind docs/master docs/alias && shift && '
         '"$PY" -m nearDup -w work run "$@" --print script > script.sh 2> scan.err && echo scanned > scan.ok && '
         'mkdir -p elsewhere && cd elsewhere && sh ../script.sh > ../act.out 2> ../act.err')


@pytest.mark.parametrize("args", [
    ["docs/alias", "docs/other", "--reference", "docs/master"],
    ["docs/master", "docs/other", "--reference", "docs/alias"],
])
def test_a_reference_folder_reached_through_a_bind_mount_is_still_a_reference(tmp_path, args):
    """The reference folder given by one path and its documents found by another, one folder mounted at two
    places (a bind mount, a container's volume): resolving paths cannot tell, device and inode can. The copy in
    the reference folder is newer, so were it not a reference it would be the one removed."""
    from conftest import NO_TMPFS, tmpfs_flags

    flags = tmpfs_flags(tmp_path / "probe")
    if flags is None:
        pytest.skip(NO_TMPFS)
    write(tmp_path / "docs" / "master" / "gold.txt", A, age=10)
    write(tmp_path / "docs" / "other" / "copy.txt", A, age=1000)  # older: the keeper, were gold not a reference
    (tmp_path / "docs" / "alias").mkdir()
    env = {**os.environ, "PY": sys.executable, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    subprocess.run(["unshare", *flags, "sh", "-c", _BIND, "sh", str(tmp_path), *args], env=env, timeout=300)
    assert (tmp_path / "scan.ok").exists(), (tmp_path / "scan.err").read_text()
    assert b"rm -f" in (tmp_path / "script.sh").read_bytes() or b"act " in (tmp_path / "script.sh").read_bytes()
    assert tree(tmp_path / "docs") == {"master/gold.txt": A}, (tmp_path / "act.out").read_text()


def test_replay_sees_a_reference_however_it_is_spelled(tmp_path):
    write(tmp_path / "docs" / "copy.txt", A, age=1000)
    write(tmp_path / "docs" / "master" / "gold.txt", A, age=10)
    saved = neardup("-w", tmp_path / "work", "run", "docs", "--format", "jsonl", cwd=tmp_path).stdout
    (tmp_path / "saved.jsonl").write_bytes(saved)
    for ref in ("./docs/master/", str(tmp_path / "docs" / "master")):
        r = neardup("run", "--replay", "saved.jsonl", "--reference", ref, "--print", "dupes", cwd=tmp_path)
        assert r.stdout == b"docs/copy.txt\n", (ref, r.stdout, r.stderr)


# ------------------------------------------------------------------------------- 4. a folder swapped after the scan

def test_a_parent_folder_swapped_for_a_link_to_the_keepers_folder_is_caught(tmp_path):
    write(tmp_path / "docs" / "a" / "gold.txt", A, age=1000)  # the keeper (oldest)
    write(tmp_path / "docs" / "b" / "gold.txt", A, age=1000)  # identical: same size, mtime and cksum
    write(tmp_path / "docs" / "b" / "other.txt", B)
    path = script(tmp_path, tmp_path / "docs")
    assert acts(path) == 1 and b"/docs/b/gold.txt" in path.read_bytes()
    os.rename(tmp_path / "docs" / "b", tmp_path / "docs" / "b.old")
    os.symlink("a", tmp_path / "docs" / "b")  # docs/b/gold.txt is now the keeper itself
    for flag in ("-n", None):
        done = run(path, *[flag] if flag else [])
        assert done.returncode == 1 and b"skip: same file as its keeper" in done.stderr
    assert tree(tmp_path / "docs") == {"a/gold.txt": A, "b.old/gold.txt": A, "b.old/other.txt": B, "b": "-> a"}


def test_a_parent_folder_swapped_for_a_link_to_a_lookalike_is_caught(tmp_path):
    """Not the keeper this time, but a file with the same name, bytes and mtime: device and inode tell them apart."""
    write(tmp_path / "docs" / "keep.txt", A, age=1000)
    write(tmp_path / "docs" / "b" / "copy.txt", A, age=10)
    write(tmp_path / "elsewhere_docs" / "copy.txt", A, age=10)  # not scanned
    path = script(tmp_path, tmp_path / "docs")
    os.rename(tmp_path / "docs" / "b", tmp_path / "docs" / "b.old")
    os.symlink(tmp_path / "elsewhere_docs", tmp_path / "docs" / "b")
    done = run(path)
    assert done.returncode == 1 and b"skip: changed since the scan" in done.stderr
    assert tree(tmp_path / "elsewhere_docs") == {"copy.txt": A}
    assert tree(tmp_path / "docs") == {"keep.txt": A, "b.old/copy.txt": A, "b": f"-> {tmp_path}/elsewhere_docs"}


# ------------------------------------------------------------------------------- 5. quarantine and ..

def test_move_of_dotdot_paths_stays_in_the_quarantine(tmp_path):
    base = tmp_path / "base"
    write(base / "docs" / "a.txt", A, age=1000)
    write(base / "docs" / "b.txt", A, age=10)
    (base / "scan").mkdir()
    r = neardup("-w", tmp_path / "work", "run", "../docs", "-t", 0.5, "--print", "script", "--action", "move",
                "--quarantine", "q", cwd=base / "scan")
    assert r.returncode == 0, r.stderr
    path = tmp_path / "script.sh"
    path.write_bytes(r.stdout)
    real_b = os.path.realpath(base / "docs" / "b.txt")
    target = os.path.realpath(base / "scan" / "q") + real_b
    dry = run(path, "-n")
    assert dry.returncode == 0 and dry.stdout.decode() == f"would move: {real_b} -> {target}\n"
    assert run(path).returncode == 0
    assert tree(base) == {"docs/a.txt": A, os.path.relpath(target, base): A}


def test_blank_quarantine_is_refused(tmp_path):
    write(tmp_path / "docs" / "a.txt", A)
    for blank in ("", "  "):
        r = neardup("-w", tmp_path / "work", "run", "docs", "--print", "script", "--action", "move",
                    "--quarantine", blank, cwd=tmp_path)
        assert r.returncode == 2 and r.stdout == b""
        assert r.stderr.decode().splitlines() == [
            "neardup run: error: Invalid value for '--quarantine': needs a folder, not an empty name"]


# ------------------------------------------------------------------------------- 6. any working directory

def test_script_of_relative_paths_runs_from_any_folder(tmp_path):
    pair(tmp_path, A_EDIT)
    write(tmp_path / "docs" / "c.txt", C, age=10)
    path = script(tmp_path, "docs")
    assert b"'docs/" not in path.read_bytes()  # absolute paths only
    done = run(path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == f"removed: {os.path.realpath(tmp_path)}/docs/b.txt\n"
    assert done.stderr == b"done: 1 acted, 0 skipped, 0 failed\n"
    assert tree(tmp_path / "docs") == {"a.txt": A, "c.txt": C}


# ------------------------------------------------------------------------------- 7. failures count

def test_a_failed_move_is_reported_counted_and_exits_2(tmp_path):
    pair(tmp_path)
    path = script(tmp_path, tmp_path / "docs", "--quarantine", tmp_path / "q", action="move")
    first = os.path.realpath(tmp_path).split("/")[1]
    write(tmp_path / "q" / first, b"a file where the quarantine needs a folder\n")
    done = run(path)
    assert done.returncode == 2 and b"failed: cannot create" in done.stderr
    assert done.stderr.endswith(b"done: 0 acted, 0 skipped, 1 failed\n")
    assert tree(tmp_path / "docs") == {"a.txt": A, "b.txt": A}


def test_a_failed_link_leaves_no_temporary_file(tmp_path):
    pair(tmp_path, A_EDIT)
    path = script(tmp_path, tmp_path / "docs", action="link")
    bin_dir = tmp_path / "bin"  # an mv that fails, after ln made the temporary link
    write(bin_dir / "mv", b"#!/bin/sh\necho 'mv: cannot move' >&2\nexit 1\n")
    os.chmod(bin_dir / "mv", 0o755)
    done = run(path, env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert done.returncode == 2 and b"failed: cannot replace" in done.stderr
    assert done.stderr.endswith(b"done: 0 acted, 0 already linked, 0 skipped, 1 failed\n")
    assert tree(tmp_path / "docs") == {"a.txt": A, "b.txt": A_EDIT}


def test_link_twice_is_a_no_op_and_never_replaces_a_users_file(tmp_path):
    pair(tmp_path, A_EDIT)
    path = script(tmp_path, tmp_path / "docs", action="link")
    write(tmp_path / "docs" / "b.txt.neardup-link", b"the user's own file\n")  # the old temporary name
    first = run(path)
    assert first.returncode == 0 and first.stderr == b"done: 1 acted, 0 already linked, 0 skipped, 0 failed\n"
    assert os.path.samefile(tmp_path / "docs" / "a.txt", tmp_path / "docs" / "b.txt")
    second = run(path)
    assert second.returncode == 0, second.stderr
    assert second.stdout.decode() == f"already linked: {os.path.realpath(tmp_path)}/docs/b.txt\n"
    assert second.stderr == b"done: 0 acted, 1 already linked, 0 skipped, 0 failed\n"
    assert tree(tmp_path / "docs") == {"a.txt": A, "b.txt": A, "b.txt.neardup-link": b"the user's own file\n"}


# ------------------------------------------------------------------------------- 8. names that hide text

NAMES = [b"cr\rname.txt", b"nl\nname.txt", b"bs\\cname.txt", "bidi\u202etxt.exe".encode(), b"-dash.txt",
         b"sp ace.txt", b"bad\xffname.txt"]
DECOYS = [b"cr", b"name.txt", b"nl", b"bs", b"bidi", b"dash.txt", b"sp", b"ace.txt", b"bad"]  # unique texts


def test_names_with_control_bidi_and_undecodable_characters_are_acted_on_exactly(tmp_path):
    folder = os.fsencode(tmp_path / "docs")
    write(os.path.join(folder, b"aaa_keeper.txt"), A, age=1000)
    for name in NAMES:
        write(os.path.join(folder, name), A, age=10)
    for i, name in enumerate(DECOYS):
        write(os.path.join(folder, name), text(100 + i), age=10)
    path = script(tmp_path, tmp_path / "docs")
    body = path.read_bytes()
    assert acts(path) == len(NAMES)  # (a name with a newline goes on on the next line, in its quotes)
    comments = b"\n".join(line for line in body.splitlines() if line.startswith(b"# WARNING"))
    for shown in (b"cr\\rname", b"nl\\nname", b"bidi\\u202etxt", b"bad\\xffname"):
        assert shown in comments
    assert not any(ch in comments for ch in (b"\r", "\u202e".encode(), b"\xff"))
    dry = run(path, "-n")
    assert dry.returncode == 0
    assert dry.stdout.count(b"would remove: ") == len(NAMES) and b"bs\\cname.txt\n" in dry.stdout
    done = run(path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(b"removed: ") == len(NAMES) and b"removed: " in done.stdout
    assert b"/docs/bs\\cname.txt\n" in done.stdout and b"/docs/cr\rname.txt\n" in done.stdout
    assert sorted(os.listdir(folder)) == sorted([b"aaa_keeper.txt", *DECOYS])


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


def test_a_file_that_a_listed_link_leads_to_is_not_removed(tmp_path):
    pair(tmp_path)
    os.symlink("b.txt", tmp_path / "docs" / "c_link.txt")  # listed after b.txt: the same file, skipped
    write(tmp_path / "outside" / "d.txt", A, age=10)
    os.symlink(tmp_path / "outside" / "d.txt", tmp_path / "docs" / "d_link.txt")  # the only path to d.txt
    before = tree(tmp_path / "docs"), tree(tmp_path / "outside")
    path = script(tmp_path, "docs", "--follow-links")
    body = path.read_bytes().decode()
    assert acts(path) == 0
    assert f"listed symbolic links lead to it (docs/c_link.txt), not acted on: {tmp_path}/docs/b.txt" in body
    assert f"is a symbolic link (listed with --follow-links), not acted on: {tmp_path}/docs/d_link.txt" in body
    assert run(path).returncode == 0
    assert (tree(tmp_path / "docs"), tree(tmp_path / "outside")) == before
    linked = script(tmp_path, "docs", "--follow-links", action="link")  # a link to b.txt then leads to a's text
    assert acts(linked) == 1 and run(linked).returncode == 0
    assert os.path.samefile(tmp_path / "docs" / "a.txt", tmp_path / "docs" / "c_link.txt")


def test_an_index_new_only_script_acts_on_the_new_duplicates_of_old_keepers(tmp_path):
    """`run --index IDX --new-only --print script` from cron: a group of a new document has old members (its
    keeper was indexed by an earlier run), whose identity the script must still check before it acts."""
    docs = tmp_path / "docs"
    write(docs / "a.txt", A, age=1000)
    write(docs / "c.txt", C, age=1000)
    assert neardup("run", docs, "--index", tmp_path / "index", "-t", 0.5, "-q", cwd=tmp_path).returncode == 0
    write(docs / "new" / "a-copy.txt", A, age=10)
    write(docs / "new" / "c-edit.txt", C.replace(b" ", b" x ", 1), age=10)
    before = tree(docs)
    r = neardup("run", docs, "--index", tmp_path / "index", "--new-only", "-t", 0.5, "--print", "script",
                cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    (tmp_path / "script.sh").write_bytes(r.stdout)
    done = run(tmp_path / "script.sh")
    assert done.returncode == 0, done.stderr
    assert tree(docs) == {k: v for k, v in before.items() if not k.startswith("new/")}  # the two new copies only
