"""Groups, keepers, selectors, formats, exit codes and actions, through a real `neardup` process and a shell."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import SAMPLE, refuse_open

NEARDUP = [sys.executable, "-m", "nearDup"]


def neardup(*args, cwd=None, env=None, **kw) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "XDG_CACHE_HOME": str(cwd or "/tmp") + "/.cache", **(env or {})}
    full_env.pop("NO_COLOR", None) if env is None or "NO_COLOR" not in env else None
    return subprocess.run([*NEARDUP, *map(str, args)], cwd=cwd, env=full_env, capture_output=True, **kw)


@pytest.fixture
def docs(tmp_path):
    """A copy of the sample corpus, with mtimes set so that originals are the oldest files."""
    folder = tmp_path / "docs"
    shutil.copytree(SAMPLE, folder)
    now = time.time()
    for p in folder.iterdir():
        age = 1000 if "original" in p.name else 10
        os.utime(p, (now - age, now - age))
    return folder


def lines(out: bytes) -> list[str]:
    return out.decode().splitlines()


# ------------------------------------------------------------------------------------------ groups

def test_groups_keepers_dupes_uniques_partition_the_corpus(docs, tmp_path):
    w = tmp_path / "w"
    groups = [json.loads(x) for x in lines(neardup("-w", w, "run", docs, "-t", 0.5, "--groups", "--format",
                                                   "jsonl").stdout)]
    groups = [g for g in groups if g["type"] == "group"]
    keepers = lines(neardup("-w", w, "run", docs, "-t", 0.5, "--print", "keepers").stdout)
    dupes = lines(neardup("-w", w, "run", docs, "-t", 0.5, "--print", "dupes").stdout)
    uniques = lines(neardup("-w", w, "run", docs, "-t", 0.5, "--print", "uniques").stdout)
    assert sorted(keepers + dupes + uniques) == sorted(str(p) for p in docs.iterdir())
    assert len(groups) == 6 and all(g["keeper"].endswith("_original.txt") for g in groups)  # oldest is kept
    assert sorted(keepers) == sorted(g["keeper"] for g in groups)
    for g in groups:  # the keeper link: every member is >= the threshold against its keeper
        assert all(m["jaccard"] >= 0.5 for m in g["members"]) and g["members"][0]["role"] == "keeper"
        assert g["min_jaccard"] <= g["max_jaccard"] and g["pairwise"] == "all pairs"
    assert any(u.endswith("_rewrite.txt") for u in uniques) and any("short_" in u for u in uniques)


def test_keeper_link_splits_what_connected_joins(tmp_path):
    # a ~ b and b ~ c, but a !~ c: a chain of edits drifting away from the original
    words = [f"w{i}" for i in range(400)]
    a = words
    b = words[:100] + [f"x{i}" for i in range(60)] + words[160:]  # J(a, b) ~ 0.72
    c = b[:300] + [f"y{i}" for i in range(60)] + b[360:]  # J(b, c) ~ 0.72, J(a, c) ~ 0.51
    folder = tmp_path / "chain"
    folder.mkdir()
    for name, ws in (("a.txt", a), ("b.txt", b), ("c.txt", c)):
        (folder / name).write_text(" ".join(ws))
    common = ("run", folder, "-t", 0.6, "--bands", 64, "--rows", 2,  # P(candidate) ~ 1: test grouping, not LSH
              "--groups", "--format", "jsonl", "--keep", "alpha")
    connected = [json.loads(x) for x in lines(neardup("-w", tmp_path / "w1", *common, "--link", "connected").stdout)]
    keeper = [json.loads(x) for x in lines(neardup("-w", tmp_path / "w2", *common, "--link", "keeper").stdout)]
    connected = [g for g in connected if g["type"] == "group"]
    keeper = [g for g in keeper if g["type"] == "group"]
    assert [g["size"] for g in connected] == [3] and connected[0]["min_jaccard"] < 0.6
    assert [g["size"] for g in keeper] == [2] and keeper[0]["keeper"].endswith("a.txt")


def test_keeper_rules_and_references(docs, tmp_path):
    ref = tmp_path / "master"
    ref.mkdir()
    shutil.copy(docs / "sourdough_light_edit.txt", ref / "sourdough.txt")
    out = neardup("-w", tmp_path / "w", "run", docs, "-t", 0.5, "--reference", ref, "--groups").stdout.decode()
    sourdough = [line.split("\t") for line in out.splitlines() if "sourdough" in line]
    assert [r[1] for r in sourdough if r[3].startswith(str(ref))] == ["keeper"]
    dupes = lines(neardup("-w", tmp_path / "w", "run", docs, "-t", 0.5, "--reference", ref, "--print", "dupes").stdout)
    assert not any(d.startswith(str(ref)) for d in dupes)
    only = neardup("-w", tmp_path / "w", "run", docs, "-t", 0.5, "--reference", ref, "--groups",
                   "--reference-only").stdout.decode()
    assert {line.split("\t")[0] for line in only.splitlines()} == {sourdough[0][0]}
    longest = lines(neardup("-w", tmp_path / "w2", "run", docs, "-t", 0.5, "--keep", "longest,alpha",
                            "--print", "keepers").stdout)
    assert any(k.endswith("lighthouses_light_edit.txt") for k in longest)  # the light edit is the longest text
    preferred = lines(neardup("-w", tmp_path / "w3", "run", docs, "-t", 0.5, "--prefer", "reordered",
                              "--print", "keepers").stdout)
    assert sum(k.endswith("_reordered.txt") for k in preferred) == 5


def test_huge_groups_are_anchored_not_quadratic(tmp_path):
    folder = tmp_path / "boiler"
    folder.mkdir()
    page = " ".join(f"word{i}" for i in range(80))
    for i in range(600):
        (folder / f"copy{i:04d}.txt").write_text(page + f" tail{i % 3}")
    r = neardup("-w", tmp_path / "w", "run", folder, "--max-bucket", 50, "--groups", "--format", "jsonl")
    records = [json.loads(x) for x in lines(r.stdout)]
    groups = [g for g in records if g["type"] == "group"]
    assert r.returncode == 0 and len(groups) == 1 and groups[0]["size"] == 600 and groups[0]["anchored"]
    assert "too large" in groups[0]["pairwise"] and "--max-bucket 50" in r.stderr.decode()
    manifest = json.loads((tmp_path / "w" / "manifest.json").read_text())
    assert manifest["stages"]["candidates"]["stats"]["candidates"] < 600 * 10  # stars, not 179,700 pairs


# ------------------------------------------------------------------------------------------ Unix behaviour

def test_formats_of_groups(docs, tmp_path):
    w = tmp_path / "w"
    base = ("-w", w, "run", docs, "-t", 0.5, "--groups")
    tsv = lines(neardup(*base).stdout)
    assert all(len(x.split("\t")) == 4 for x in tsv)
    csv = lines(neardup(*base, "--format", "csv").stdout)
    assert csv[0] == "group,role,jaccard,path" and len(csv) == len(tsv) + 1
    fdupes = neardup(*base, "--format", "fdupes").stdout.decode()
    assert fdupes.count("\n\n") == 6 and len(fdupes.split()) == len(tsv)
    human = neardup(*base, "--format", "human").stdout.decode()
    assert "group 1" in human and "keep" in human and "\x1b[" not in human  # no colour into a pipe
    coloured = neardup(*base, "--format", "human", "--color", "always").stdout.decode()
    assert "\x1b[" in coloured
    assert "\x1b[" not in neardup(*base, "--format", "human", "--color", "auto", env={"NO_COLOR": "1"}).stdout.decode()


def test_null_separated_dupes_through_xargs(docs, tmp_path):
    quarantine = tmp_path / "quarantine"
    quarantine.mkdir()
    (docs / "name with spaces.txt").write_text((docs / "tide_pools_original.txt").read_text())
    (docs / "-leading-dash.txt").write_text((docs / "chess_openings_original.txt").read_text())
    (docs / "new\nline.txt").write_text((docs / "sourdough_original.txt").read_text())
    cmd = (f"{sys.executable} -m nearDup -w {tmp_path / 'w'} run {docs} --print dupes -0 --keep oldest,alpha "
           f"| xargs -0 mv -t {quarantine}/")
    r = subprocess.run(cmd, shell=True, capture_output=True)
    assert r.returncode == 0, r.stderr
    moved = sorted(os.listdir(quarantine))
    assert {"name with spaces.txt", "-leading-dash.txt", "new\nline.txt"} <= set(moved)
    assert not any("original" in m for m in moved)


def test_non_utf8_file_name_round_trips(tmp_path):
    folder = tmp_path / "bytes"
    folder.mkdir()
    text = (SAMPLE / "lighthouses_original.txt").read_bytes()
    name = b"caf\xe9.txt"  # Latin-1, not UTF-8
    with open(os.path.join(os.fsencode(folder), name), "wb") as f:
        f.write(text)
    (folder / "plain.txt").write_bytes(text)
    tsv = neardup("-w", tmp_path / "w", "run", folder).stdout
    assert name in tsv  # the original bytes, not a replacement character
    record = [json.loads(x) for x in lines(neardup("-w", tmp_path / "w", "run", folder, "--format", "jsonl").stdout)][1]
    assert os.fsencode(record["a"]).endswith(name)
    nul = neardup("-w", tmp_path / "w", "run", folder, "--print", "dupes", "-0").stdout
    assert os.path.exists(nul.rstrip(b"\0"))


def test_exit_codes(docs, tmp_path):
    w = tmp_path / "w"
    assert neardup("-w", w, "run", docs).returncode == 0
    found = neardup("-w", w, "run", docs, "--exit-code", "-q")
    assert found.returncode == 1 and found.stdout == b"" and found.stderr == b""
    unrelated = tmp_path / "unrelated"
    unrelated.mkdir()
    for name in ("misc_origami.txt", "misc_honeybees.txt"):
        shutil.copy(docs / name, unrelated)
    none = neardup("-w", tmp_path / "w2", "run", unrelated, "--exit-code")
    assert none.returncode == 0 and none.stdout == b""
    assert neardup("run", tmp_path / "missing").returncode == 2


def test_unreadable_file_warns_and_exits_2_with_results(docs, tmp_path, monkeypatch):
    """Permission denied cannot be staged as root (CI runs as root), so open() is made to refuse one file."""
    from click.testing import CliRunner

    from nearDup.cli import cli

    (docs / "locked.txt").write_text("secret " * 50)
    refuse_open(monkeypatch, "locked.txt", PermissionError(13, "Permission denied", "locked.txt"))
    r = CliRunner().invoke(cli, ["-w", str(tmp_path / "w"), "run", str(docs), "--jobs", "1"])
    assert r.exit_code == 2 and len(r.stdout.splitlines()) == 10
    assert "warning: " in r.stderr and "locked.txt: cannot read (Permission denied)" in r.stderr


@pytest.mark.parametrize("jobs", [1, 2])
def test_progress_shows_documents_and_megabytes_per_second(docs, tmp_path, jobs):
    """Forced on (stderr is not a terminal here): the shingle, signature and band bars give both rates. (In `run`
    the shingle tasks also sign and band their shards, so the stages are chained here to show every bar.)"""
    import re

    r = neardup("-w", tmp_path / "w", "--progress", "--jobs", jobs, "shingle", docs, "signature", "band")
    assert r.returncode == 0
    err = r.stderr.decode()
    for stage in ("shingle", "signature", "band"):
        shown = [line for line in re.split(r"[\r\n]", err) if line.startswith(f"{stage}:") and "|" in line]
        assert any(re.search(r"[\d,]+ docs/s, [\d,.]+ MB/s", line) for line in shown), (stage, shown)


def test_broken_pipe_ends_quietly(docs, tmp_path):
    r = subprocess.run(f"{sys.executable} -m nearDup -w {tmp_path / 'w'} run {docs} -t 0.3 --print uniques --hidden "
                       f"| head -1", shell=True, capture_output=True)
    assert r.returncode == 0 and len(lines(r.stdout)) == 1 and b"Traceback" not in r.stderr
    assert b"Broken pipe" not in r.stderr


def test_progress_only_on_a_terminal(docs, tmp_path):
    r = neardup("-w", tmp_path / "w", "run", docs)
    assert b"it/s" not in r.stderr and b"%|" not in r.stderr
    forced = neardup("-w", tmp_path / "w2", "run", docs, "--progress", "--jobs", 1)
    assert b"%|" in forced.stderr or b"B/s" in forced.stderr


# ------------------------------------------------------------------------------------------ actions

def test_script_acts_after_rechecking_and_skips_modified_files(docs, tmp_path):
    script = tmp_path / "dedup.sh"
    r = neardup("-w", tmp_path / "w", "run", docs, "-t", 0.5, "--print", "script")
    script.write_bytes(r.stdout)
    before = set(os.listdir(docs))
    (docs / "lighthouses_copy.txt").write_text("changed after the scan\n" * 100)  # must be skipped
    dry = subprocess.run(["sh", str(script), "-n"], capture_output=True)
    assert set(os.listdir(docs)) == before and b"would remove" in dry.stdout
    done = subprocess.run(["sh", str(script)], capture_output=True)
    assert done.returncode == 1 and b"skip: changed since the scan" in done.stderr
    left = set(os.listdir(docs))
    assert "lighthouses_copy.txt" in left
    assert all(f"{t}_original.txt" in left for t in ("lighthouses", "sourdough", "tide_pools", "chess_openings"))
    assert "sourdough_reordered.txt" not in left and "misc_origami.txt" in left


def test_script_moves_to_quarantine(docs, tmp_path):
    q = tmp_path / "q"
    r = neardup("-w", tmp_path / "w", "run", docs, "--print", "script", "--action", "move", "--quarantine", q)
    (tmp_path / "s.sh").write_bytes(r.stdout)
    assert subprocess.run(["sh", str(tmp_path / "s.sh")], capture_output=True).returncode == 0
    moved = [os.path.join(dp, f) for dp, _, fs in os.walk(q) for f in fs]
    assert len(moved) == 8 and all("copy" in m or "reordered" in m for m in moved)
    assert all(os.path.exists(m.replace(str(q), "", 1)) is False for m in moved)


def test_compare_explains_and_sets_exit_status(docs):
    similar = neardup("compare", docs / "lighthouses_original.txt", docs / "lighthouses_reordered.txt", "--explain")
    assert similar.returncode == 0 and b"jaccard\t0.9526" in similar.stdout and b"[[" in similar.stdout
    different = neardup("compare", docs / "lighthouses_original.txt", docs / "misc_origami.txt")
    assert different.returncode == 1 and b"jaccard\t0.0000" in different.stdout


def test_replay_refilters_and_regroups_without_reading_documents(docs, tmp_path):
    saved = tmp_path / "saved.jsonl"
    saved.write_bytes(neardup("-w", tmp_path / "w", "run", docs, "-t", 0.5, "--format", "jsonl").stdout)
    direct = neardup("-w", tmp_path / "w", "run", docs, "-t", 0.9, "--groups").stdout
    for p in docs.iterdir():  # the documents' text is gone: replay must not need it
        p.write_bytes(b"")
        os.utime(p, (time.time() - (1000 if "original" in p.name else 10),) * 2)
    replayed = neardup("run", "--replay", saved, "-t", 0.9, "--groups")
    assert replayed.returncode == 0 and replayed.stdout == direct
    uniques = lines(neardup("run", "--replay", saved, "-t", 0.9, "--print", "uniques").stdout)
    assert sorted(uniques) == sorted(str(docs / f"{t}_light_edit.txt") for t in
                                     ("lighthouses", "water_treatment", "bicycle_history", "chess_openings",
                                      "sourdough", "tide_pools"))
    assert neardup("run", "--replay", tmp_path / "nope.jsonl").returncode == 2
