"""The work dir is nearDup's alone (#17): a folder nearDup did not make is refused before anything is written to
it, clean-up and --force remove only nearDup's own files, no link leads them out of the work dir, and a manifest
of the wrong shape is named as corrupt instead of failing deep inside a stage."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from nearDup.cli import cli
from nearDup.store.workdir import MARKER

from conftest import SAMPLE


def invoke(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


def one_line_error(r, *needles) -> str:
    stderr = r.stderr if isinstance(r.stderr, str) else r.stderr.decode()
    lines = [line for line in stderr.splitlines() if line.strip()]
    code = r.exit_code if hasattr(r, "exit_code") else r.returncode
    assert code == 2 and len(lines) == 1 and "Traceback" not in stderr and "internal error" not in stderr, stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def snapshot(*roots: Path) -> dict:
    """Every entry below the roots, links not followed: a file's bytes, a link's target, a folder's existence."""
    found = {}
    for root in roots:
        for folder, dirs, files in os.walk(root):
            for name in dirs + files:
                path = Path(folder) / name
                found[str(path)] = (os.readlink(path) if path.is_symlink() else
                                    "dir" if path.is_dir() else path.read_bytes())
    return found


def user_folder(tmp_path: Path, manifest: str | None) -> tuple[Path, Path]:
    """A user's folder whose subfolders happen to have nearDup's stage names (with files named as nearDup
    names its own), optionally a manifest.json of the user's, and a `cluster` folder that is a link to a folder
    outside it."""
    user, outside = tmp_path / "projects", tmp_path / "outside"
    for stage in ("shingle", "signature", "band", "candidates", "verify", "inputs"):
        (user / stage).mkdir(parents=True)
        (user / stage / "notes.txt").write_text(f"my {stage} notes")
        (user / stage / "part-00000.npy").write_bytes(b"user data")
        (user / stage / "0123456789ab.pairs.jsonl").write_text("{}\n")
    (user / "inputs" / "stdin.jsonl").write_text('{"id": "mine", "text": "not nearDup\'s"}\n')
    outside.mkdir()
    (outside / "thesis.txt").write_text("the only copy")
    (outside / "part-00003.done.json").write_text("{}")
    (user / "cluster").symlink_to(outside)
    if manifest is not None:
        (user / "manifest.json").write_text(manifest)
    return user, outside


@pytest.mark.parametrize("manifest", [
    '{"name": "my project", "stages": ["a", "b"]}',  # a user's manifest
    None,  # only subfolders with stage names
    json.dumps({"format": 4, "version": "0.1.0", "stages": {}}),  # nearDup's manifest, but the user's files beside
])
def test_a_folder_nearDup_did_not_make_is_refused_and_left_byte_identical(tmp_path, manifest):
    user, outside = user_folder(tmp_path, manifest)
    if manifest and '"format"' in manifest:
        (user / "report.odt").write_bytes(b"a user's file")
    before = snapshot(user, outside)
    attempts = [("-w", user, "run", SAMPLE), ("-w", user, "run", SAMPLE, "--force"),
                ("run", SAMPLE, "--index", user), ("run", SAMPLE, "--index", user, "--rebuild", "--force"),
                ("-w", user, "run", "--jsonl", "-"), ("-w", user, "shingle", SAMPLE), ("-w", user, "verify"),
                ("--index", user, "query", SAMPLE / "lighthouses_original.txt"), ("-w", user, "inspect")]
    for args in attempts:
        if args[0] == "--index":  # query takes --index after the command
            args = ("query", "--index", user, *args[3:])
        r = invoke(*args, input='{"id": "x", "text": "one two three four five six"}\n')
        one_line_error(r, str(user), "not a nearDup work dir")
        assert snapshot(user, outside) == before, args
    r = subprocess.run([sys.executable, "-m", "nearDup", "-w", str(user), "run", str(SAMPLE), "--force"],
                       capture_output=True)
    one_line_error(r, str(user), "new or empty folder")
    assert snapshot(user, outside) == before


def test_a_new_or_empty_folder_becomes_a_marked_work_dir(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    for w in (empty, tmp_path / "missing" / "deeper"):
        r = invoke("-w", w, "run", SAMPLE)
        assert r.exit_code == 0 and r.stdout.count("\n") == 10, r.stderr
        assert (w / MARKER).is_file()
        again = invoke("-w", w, "run", SAMPLE)
        assert again.exit_code == 0 and again.stdout == r.stdout and "verify: up to date" in again.stderr


def test_a_work_dir_made_before_the_marker_is_adopted(tmp_path):
    """Indexes written by nearDup before work dirs were marked keep working (and are marked on first use)."""
    w = tmp_path / "w"
    first = invoke("-w", w, "run", SAMPLE)
    (w / MARKER).unlink()
    again = invoke("-w", w, "run", SAMPLE)
    assert again.exit_code == 0 and again.stdout == first.stdout and "verify: up to date" in again.stderr
    assert (w / MARKER).is_file()
    (w / MARKER).write_text("a forged mark\n")  # a marker is nearDup's only with nearDup's text
    (w / "verify" / "notes.txt").write_text("mine")
    (w / "notes.txt").write_text("mine")
    one_line_error(invoke("-w", w, "run", SAMPLE), str(w), "notes.txt")


def test_a_work_dir_cleans_only_its_own_files(tmp_path):
    """Clean-up after a run and --force remove the files nearDup names and no record lists; a file a user put
    into a stage folder under another name is left alone, and the folder with it."""
    w = tmp_path / "w"
    first = invoke("-w", w, "run", SAMPLE, "--partition-docs", 10, "--groups")
    stale = w / "verify" / "0123456789ab.pairs.npy"
    stale.write_bytes(b"an earlier run's output")
    users = {w / "verify" / "notes.txt": b"mine", w / "shingle" / "part-1.txt": b"mine too",
             w / "cluster" / "0123456789ab.odt": b"also mine", w / "inputs" / "keep.jsonl": b"{}\n"}
    (w / "inputs").mkdir()
    for path, data in users.items():
        path.write_bytes(data)
    changed = invoke("-w", w, "run", SAMPLE, "--partition-docs", 10, "--groups", "-t", "0.7")  # new records
    assert changed.exit_code == 0, changed.stderr
    assert not stale.exists()  # nearDup's name, listed by no record: removed
    assert (w / "signature" / "part-00001.npy").exists()  # listed
    forced = invoke("-w", w, "run", SAMPLE, "--partition-docs", 10, "--groups", "--force")
    assert forced.exit_code == 0 and forced.stdout == first.stdout, forced.stderr
    assert "shingle: up to date" not in forced.stderr
    assert {p: p.read_bytes() for p in users} == users


def test_a_stage_folder_that_is_a_link_is_refused_and_its_target_untouched(tmp_path):
    w, outside = tmp_path / "w", tmp_path / "outside"
    invoke("-w", w, "run", SAMPLE, "--partition-docs", 10)
    outside.mkdir()
    (outside / "0123456789ab.clusters.jsonl").write_text("the user's, named like nearDup's")
    (outside / "part-00000.npy").write_bytes(b"the user's")
    for name in ("cluster", "inputs"):
        moved = w / name
        if moved.exists():
            os.rename(moved, tmp_path / "old-cluster")
        moved.symlink_to(outside)
        before = snapshot(outside)
        for extra in ((), ("--force",), ("--print", "groups")):
            one_line_error(invoke("-w", w, "run", SAMPLE, "--partition-docs", 10, *extra), str(moved), "symlink")
            assert snapshot(outside) == before
        moved.unlink()


def test_the_lock_file_is_never_followed(tmp_path):
    w, target = tmp_path / "w", tmp_path / "precious"
    invoke("-w", w, "run", SAMPLE)
    target.write_bytes(b"precious")
    (w / "lock").unlink()
    (w / "lock").symlink_to(target)
    one_line_error(invoke("-w", w, "run", SAMPLE), "lock")
    assert target.read_bytes() == b"precious"


def test_the_default_cache_work_dir_is_marked_and_an_unmarked_damaged_one_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = invoke("run", SAMPLE)
    (cache,) = (tmp_path / "cache" / "neardup").iterdir()
    assert (cache / MARKER).is_file()
    (cache / MARKER).unlink()  # made by an earlier nearDup, then damaged: nearDup named it, so it is rebuilt
    (cache / "manifest.json").write_text("{not json")
    again = invoke("run", SAMPLE)
    assert again.exit_code == 0 and again.stdout == first.stdout and "rebuilding it" in again.stderr
    assert (cache / MARKER).is_file()


# ------------------------------------------------------------------------------------------ manifests

def _set(path: tuple, value):
    def change(manifest):
        *parents, last = path
        target = manifest
        for key in parents:
            target = target[key]
        if value is KeyError:
            del target[last]
        else:
            target[last] = value
    return change


MALFORMED = {
    "stages a list": _set(("stages",), []),
    "a record a string": _set(("stages", "band"), "done"),
    "a record without key": _set(("stages", "verify", "key"), KeyError),
    "a record without params": _set(("stages", "signature", "params"), KeyError),
    "num_perm a string": _set(("stages", "signature", "params", "num_perm"), "128"),
    "num_perm missing": _set(("stages", "signature", "params", "num_perm"), KeyError),
    "bands a float": _set(("stages", "band", "params", "bands"), 14.0),
    "an unknown parameter": _set(("stages", "cluster", "params", "colour"), "red"),
    "shards a dict": _set(("stages", "shingle", "shards"), {"0": 0}),
    "a shard number a string": _set(("stages", "band", "shards"), ["0"]),
    "docs shorter than shards": _set(("stages", "shingle", "docs"), []),
    "next_shard null": _set(("stages", "signature", "next_shard"), None),
    "inputs of strings": _set(("stages", "shingle", "inputs"), ["sample_corpus"]),
    "stats a list": _set(("stages", "shingle", "stats"), [1, 2]),
    "a count a string": _set(("stages", "shingle", "stats", "unreadable"), "2"),
    "threshold a string": _set(("stages", "verify", "params", "threshold"), "0.8"),
    "a file size a string": _set(("stages", "verify", "files", "pairs.npy"), "288"),
    "basis without shards": _set(("stages", "verify", "basis", "shards"), KeyError),
    "reported a string": _set(("reported",), "1"),
    "index a number": _set(("index",), 2),
    "the whole manifest a list": lambda m: m.clear() or m.update({"__list__": True}),
}


@pytest.fixture(scope="module")
def good_manifest(tmp_path_factory):
    w = tmp_path_factory.mktemp("good") / "w"
    assert invoke("-w", w, "run", SAMPLE, "--print", "groups").exit_code == 0
    return w, json.loads((w / "manifest.json").read_text())


@pytest.mark.parametrize("damage", sorted(MALFORMED))
def test_a_manifest_of_the_wrong_shape_is_named_corrupt(good_manifest, tmp_path, damage):
    import shutil
    w = tmp_path / "w"
    shutil.copytree(good_manifest[0], w)
    manifest = json.loads(json.dumps(good_manifest[1]))
    MALFORMED[damage](manifest)
    text = "[1, 2]" if manifest.get("__list__") else json.dumps(manifest)
    (w / "manifest.json").write_text(text)
    for args in (("-w", w, "run", SAMPLE, "--print", "groups"), ("-w", w, "script"), ("-w", w, "inspect"),
                 ("query", "--index", w, SAMPLE / "lighthouses_original.txt")):
        one_line_error(invoke(*args), "manifest.json", "manifest is corrupt", "--force")
    assert (w / "manifest.json").read_text() == text  # refused: nothing rewritten
    rebuilt = invoke("-w", w, "run", SAMPLE, "--print", "groups", "--force")
    assert rebuilt.exit_code == 0 and rebuilt.stdout.count("\n") > 3, rebuilt.stderr


# ------------------------------------------------------------------------------------------ inside the corpus

@pytest.mark.parametrize("where", [("-w", "docs/nd"), ("--index", "docs/sub/idx")])
def test_a_work_dir_inside_an_input_folder_is_not_read_as_documents(tmp_path, monkeypatch, where):
    import shutil
    shutil.copytree(SAMPLE, tmp_path / "docs")
    (tmp_path / "docs" / "sub").mkdir()
    shutil.copy(SAMPLE / "lighthouses_original.txt", tmp_path / "docs" / "sub" / "copy.txt")
    monkeypatch.chdir(tmp_path)
    option, w = where
    args = (option, w, "run", "docs", "--print", "uniques", "--partition-docs", 10) if option == "-w" else \
        ("run", "docs", option, w, "--print", "uniques", "--partition-docs", 10)
    expected = invoke("-w", tmp_path / "outside", "run", "docs", "--print", "uniques", "--partition-docs", 10)
    for attempt in range(3):  # the work dir fills up on the first run: the later ones would list its files
        r = invoke(*args)
        assert r.exit_code == 0 and r.stdout == expected.stdout and w not in r.stdout, r.stderr
        assert ("shingle: up to date" if attempt else "shingle: 35 documents") in r.stderr
    q = invoke("query", "--index", w, "docs", "-t", "0.5")
    assert q.exit_code == 0 and w not in q.stdout and "docs/sub/copy.txt" in q.stdout, q.stderr


# ------------------------------------------------------------------------------------------ binary files

def test_an_unchanged_binary_file_is_not_opened_again_by_an_index(tmp_path):
    """The index remembers the binary files it skipped (id, size, mtime, inode): replacing one's bytes with text
    while keeping those is not noticed (it is not read), no empty shard is added, and a change is re-checked."""
    import shutil
    docs, index = tmp_path / "docs", tmp_path / "idx"
    shutil.copytree(SAMPLE, docs)
    blob = docs / "blob.bin"
    text = (SAMPLE / "lighthouses_original.txt").read_bytes()
    blob.write_bytes(b"\0" * len(text))
    first = invoke("run", docs, "--index", index, "--print", "uniques")
    assert first.exit_code == 0 and "34 documents" in first.stderr and "1 binary file skipped" in first.stderr
    record = json.loads((index / "manifest.json").read_text())["stages"]["shingle"]
    st = blob.stat()
    with open(blob, "r+b") as f:  # same inode, same size, mtime put back: only reading it would tell
        f.write(text)
    os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert blob.stat().st_ino == st.st_ino
    again = invoke("run", docs, "--index", index, "--print", "uniques")
    assert again.exit_code == 0 and again.stdout == first.stdout, again.stderr
    assert "shingle: up to date" in again.stderr and "1 binary file skipped" in again.stderr
    now = json.loads((index / "manifest.json").read_text())["stages"]["shingle"]
    assert (now["shards"], now["next_shard"], now["key"]) == (record["shards"], record["next_shard"], record["key"])
    os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # changed: read, and now it is text
    changed = invoke("run", docs, "--index", index, "--print", "pairs")
    assert changed.exit_code == 0 and "35 documents" in changed.stderr and "binary" not in changed.stderr
    assert f"{blob}\t" in changed.stdout or f"\t{blob}" in changed.stdout  # a copy of lighthouses_original.txt
    blob.write_bytes(b"\0" * 10)
    (docs / "other.bin").write_bytes(b"\0" * 10)
    invoke("run", docs, "--index", index)
    os.unlink(docs / "other.bin")  # a binary file gone: the record forgets it, without a new shard
    record = json.loads((index / "manifest.json").read_text())["stages"]["shingle"]
    gone = invoke("run", docs, "--index", index)
    now = json.loads((index / "manifest.json").read_text())["stages"]["shingle"]
    assert gone.exit_code == 0 and "1 binary file skipped" in gone.stderr, gone.stderr
    assert now["next_shard"] == record["next_shard"] and set(now["shards"]) <= set(record["shards"])


def test_a_manifest_without_a_parameter_added_later_is_still_read(good_manifest, tmp_path):
    """A parameter with a default may be missing (a field added by a later version, with the format unchanged)."""
    import shutil
    w = tmp_path / "w"
    shutil.copytree(good_manifest[0], w)
    manifest = json.loads(json.dumps(good_manifest[1]))
    del manifest["stages"]["cluster"]["params"]["prefer"]
    (w / "manifest.json").write_text(json.dumps(manifest))
    r = invoke("-w", w, "inspect")
    assert r.exit_code == 0 and "cluster: done" in r.stdout, r.stderr
