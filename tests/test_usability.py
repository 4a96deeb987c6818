"""What a new user meets first (issue #18): defaults, results, messages and help, through a real `neardup`."""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time

import pytest

from conftest import SAMPLE

NEARDUP = [sys.executable, "-m", "nearDup"]
TEXT = " ".join(f"word{i}" for i in range(60))


def neardup(*args, cwd=None, input=None, env=None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "XDG_CACHE_HOME": str(cwd or "/tmp") + "/.cache", **(env or {})}
    return subprocess.run([*NEARDUP, *map(str, args)], cwd=cwd, env=full_env, capture_output=True, input=input,
                          text=True)


def one_error(r: subprocess.CompletedProcess, *words: str) -> None:
    """Exit 2, nothing on stdout, one line on stderr holding every word."""
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stderr
    assert all(w in r.stderr for w in words), r.stderr


@pytest.fixture
def docs(tmp_path):
    folder = tmp_path / "docs"
    shutil.copytree(SAMPLE, folder)
    return folder


def groups_of(out: str) -> list[dict]:
    return [r for r in map(json.loads, out.splitlines()) if r["type"] == "group"]


# ------------------------------------------------------------------------------------------ results

def test_summary_line_counts_groups_duplicates_and_their_bytes(docs, tmp_path):
    w = tmp_path / "w"
    r = neardup("-w", w, "run", docs, "--groups", "--format", "jsonl")
    groups = groups_of(r.stdout)
    dupes = [m["id"] for g in groups for m in g["members"] if m["role"] == "duplicate"]
    size = sum(os.path.getsize(p) for p in dupes)
    assert len(groups) == 6 and len(dupes) == 8
    assert r.stderr.splitlines()[-1] == f"summary: 6 groups, 8 duplicates, {size} bytes ({size / 1e3:.1f} kB) in " \
                                        f"duplicates"
    pairs = neardup("-w", w, "run", docs)
    assert pairs.stderr.splitlines()[-1] == "summary: 10 pairs among 14 documents"
    assert neardup("-w", w, "run", docs, "--groups", "-q").stderr == ""


def test_fdupes_format_prints_groups_without_asking_for_them(docs, tmp_path):
    w = tmp_path / "w"
    groups = groups_of(neardup("-w", w, "run", docs, "--groups", "--format", "jsonl").stdout)
    out = neardup("-w", w, "run", docs, "--format", "fdupes").stdout
    blocks = [block.splitlines() for block in out.strip("\n").split("\n\n")]
    assert blocks == [[m["id"] for m in g["members"]] for g in groups]  # keeper first, as fdupes -o would
    one_error(neardup("-w", w, "run", docs, "--format", "fdupes", "--print", "pairs"), "fdupes prints groups")


def test_exit_code_is_1_when_duplicates_are_found_whatever_is_printed(docs, tmp_path):
    uniques = neardup("-w", tmp_path / "w", "run", docs, "--print", "uniques", "--exit-code")
    assert uniques.returncode == 1 and "misc_origami.txt" in uniques.stdout  # printed, and duplicates exist
    alone = tmp_path / "alone"
    alone.mkdir()
    for name in ("misc_origami.txt", "misc_honeybees.txt"):
        shutil.copy(docs / name, alone / name)
    r = neardup("-w", tmp_path / "w2", "run", alone, "--print", "uniques", "--exit-code")
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 2  # both printed, no duplicate: 0


# ------------------------------------------------------------------------------------------ messages

def test_counts_are_singular_or_plural(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.txt").write_text(TEXT)
    (d / "b.txt").write_text(TEXT)
    (d / "c.txt").write_text(TEXT.replace("word3 ", ""))
    (d / "bin.dat").write_bytes(b"\0\1\2")
    os.symlink(d / "a.txt", d / "link.txt")
    r = neardup("-w", tmp_path / "w", "run", d, "-t", 0.99, "--groups")
    for phrase in ("1 binary file skipped", "1 symlink skipped", "1 pair shares a bucket",
                   "1 of 1 candidate pair has exact Jaccard", "1 group of 2 documents (1 duplicate of a keeper"):
        assert phrase in r.stderr, r.stderr
    script = neardup("-w", tmp_path / "w", "run", d, "-t", 0.99, "--print", "script").stdout
    assert "remove 1 near-duplicate file." in script


def test_large_buckets_warn_once_per_cause(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    for i in range(5):
        (d / f"a{i}.txt").write_text(TEXT)
        (d / f"b{i}.txt").write_text(TEXT.replace("word", "other"))
    r = neardup("-w", tmp_path / "w", "run", d, "--max-bucket", 2)
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2, r.stderr  # one line per anchor, not one per band
    assert warnings[0].startswith("warning: 14 buckets over --max-bucket 2 in 14 bands (largest 5 documents) "
                                  f"paired with their anchor {d}/a0.txt only; see ")
    assert f"anchor {d}/b0.txt only" in warnings[1]


def test_missing_jsonl_field_is_named_with_the_fields_there(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"url": f"u{i}", "body": TEXT}) + "\n" for i in range(3)))
    one_error(neardup("-w", tmp_path / "w", "run", "--jsonl", corpus, "--id-field", "nope", "--text-field", "body"),
              "'nope' (--id-field)", "'url', 'body'")
    one_error(neardup("-w", tmp_path / "w", "run", "--jsonl", corpus, "--id-field", "url"),
              "'text' (--text-field)", "'url', 'body'")


def test_script_of_jsonl_records_is_refused(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"u{i}", "text": TEXT}) + "\n" for i in range(3)))
    one_error(neardup("-w", tmp_path / "w", "run", "--jsonl", corpus, "--print", "script"), "not files")
    assert neardup("-w", tmp_path / "w", "run", "--jsonl", corpus, "--groups").returncode == 0
    one_error(neardup("-w", tmp_path / "w", "script"), "not files")  # the stage, on the stored groups


# ------------------------------------------------------------------------------------------ options and help

def test_options_that_do_nothing_are_refused(docs, tmp_path):
    w = tmp_path / "w"
    for extra, words in ((["--print", "dupes", "--format", "csv"], ["--format csv does not apply"]),
                         (["--print", "keepers", "--format", "fdupes"], ["--format fdupes does not apply"]),
                         (["--print", "script", "--format", "tsv"], ["--format tsv does not apply"])):
        one_error(neardup("-w", w, "run", docs, *extra), *words)
    help_text = neardup("query", "--help").stdout
    assert "--index" in help_text and all(o not in help_text for o in ("--jobs", "--scheduler", "--force"))
    one_error(neardup("query", "x.txt", "--index", w, "--jobs", 2), "No such option")
    one_error(neardup("--jobs", 2, "query", "x.txt", "--index", w), "--jobs does not apply to query")
    one_error(neardup("compare", docs / "misc_origami.txt", docs / "misc_origami.txt", "--format", "csv"),
              "No such option")


def test_query_takes_the_shingle_options_of_its_index(docs, tmp_path):
    index = tmp_path / "index"
    assert neardup("run", docs, "--index", index, "-k", 4, "--num-perm", 64).returncode == 0
    probe = docs / "lighthouses_copy.txt"
    same = neardup("query", probe, "--index", index, "-k", 4, "--unit", "word", "--num-perm", 64)
    assert same.returncode == 0 and f"{probe}\t{docs}/lighthouses_original.txt" in same.stdout
    one_error(neardup("query", probe, "--index", index, "-k", 5), "built with -k 4, not 5")
    one_error(neardup("query", probe, "--index", index, "--num-perm", 128), "--num-perm 64, not 128")


def test_compare_reads_one_side_from_stdin(docs):
    a, b = docs / "lighthouses_copy.txt", docs / "lighthouses_reordered.txt"
    files = neardup("compare", a, b)
    piped = neardup("compare", "-", b, input=a.read_text())
    assert piped.returncode == files.returncode == 0 and piped.stdout == files.stdout
    assert piped.stdout.startswith("jaccard\t0.9526")
    one_error(neardup("compare", "-", "-", input="x"), "only one of A and B can be -")


def test_jsonl_header_holds_every_resolved_parameter(docs, tmp_path):
    outputs = [neardup("-w", tmp_path / f"w{jobs}", "run", docs, "--format", "jsonl", "-j", jobs).stdout
               for jobs in (1, 2)]
    assert outputs[0] == outputs[1]
    params = json.loads(outputs[0].splitlines()[0])["params"]
    assert {k: params[k] for k in ("threshold", "bands", "rows", "num_perm", "unit", "k", "seed", "minhash",
                                   "max_bucket")} == {"threshold": 0.8, "bands": 14, "rows": 9, "num_perm": 128,
                                                      "unit": "word", "k": 5, "seed": 1, "minhash": "oph",
                                                      "max_bucket": 1000}
    stage = neardup("-w", tmp_path / "w1", "verify", "--threshold", 0.9, "--format", "jsonl").stdout
    assert json.loads(stage.splitlines()[0])["params"]["bands"] == 14
    query = neardup("query", docs / "misc_origami.txt", "--index", tmp_path / "w1", "--format", "jsonl").stdout
    header = json.loads(query.splitlines()[0])["params"]
    assert header["k"] == 5 and header["rows"] == 9 and header["threshold"] == 0.8


def test_inspect_finds_the_cache_work_dir_of_its_inputs(docs, tmp_path):
    assert neardup("run", docs, "-k", 4, cwd=tmp_path).returncode == 0
    r = neardup("inspect", docs, "-k", 4, cwd=tmp_path)
    assert r.returncode == 0 and "34 documents in 1 partition" in r.stdout
    assert str(tmp_path / ".cache" / "neardup") in r.stdout.splitlines()[0]
    one_error(neardup("inspect", docs, cwd=tmp_path), "no cache work dir", f"neardup run {docs}")


# ------------------------------------------------------------------------------------------ keepers

def _keepers(folder, w, *options) -> dict[str, str]:
    groups = groups_of(neardup("-w", w, "run", folder, "--groups", "--format", "jsonl", *options).stdout)
    return {os.path.basename(g["keeper"]): sorted(os.path.basename(m["id"]) for m in g["members"]) for g in groups}


def test_default_keepers_of_a_fresh_clone_are_the_originals(docs, tmp_path):
    """A clone or a copy sets every mtime within a second, in checkout order: the keepers must not depend on it."""
    second = int(time.time()) - 3600
    for p in docs.iterdir():
        os.utime(p, ns=(second * 10**9, second * 10**9))
    equal = [_keepers(docs, tmp_path / "w1"), _keepers(docs, tmp_path / "w2", "-t", 0.5)]
    rng = random.Random(5)
    for p in sorted(docs.iterdir()):
        t = second * 10**9 + rng.randrange(10**9)
        os.utime(p, ns=(t, t))
    assert [_keepers(docs, tmp_path / "w3"), _keepers(docs, tmp_path / "w4", "-t", 0.5)] == equal
    originals = sorted(f"{topic}_original.txt" for topic in (
        "bicycle_history", "chess_openings", "lighthouses", "sourdough", "tide_pools", "water_treatment"))
    assert sorted(equal[0]) == sorted(equal[1]) == originals
    assert any("light_edit" in name for members in equal[1].values() for name in members)  # edits joined at 0.5


def test_copy_names_lose_and_times_count_in_whole_seconds(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    now = int(time.time()) - 3600
    for name, age_ns in (("report.txt", 0), ("Copy of report.txt", 5 * 10**9), ("report (1).txt", 9 * 10**9),
                         ("report_copy2.txt", 7 * 10**9), ("b.txt", 0), ("a.txt", -300_000_000)):
        text = TEXT if name.startswith(("report", "Copy")) else TEXT.replace("word", "other")
        (d / name).write_text(text)
        t = now * 10**9 + 500_000_000 - age_ns  # a.txt 0.3 s newer than b.txt, in the same second
        os.utime(d / name, ns=(t, t))
    keepers = _keepers(d, tmp_path / "w")
    assert set(keepers) == {"report.txt", "a.txt"}  # the newest, but the only name that is not a copy's; a tie: alpha
    oldest = groups_of(neardup("-w", tmp_path / "w", "run", d, "--groups", "--format", "jsonl", "--keep",
                               "oldest").stdout)
    assert {os.path.basename(g["keeper"]) for g in oldest} == {"report (1).txt", "a.txt"}


def test_central_keeps_the_version_the_others_were_made_from(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    words = TEXT.split()
    texts = {"b_original.txt": words, "a_edit1.txt": words[:-3] + ["x", "y", "z"],
             "c_edit2.txt": ["p", "q", "r"] + words[3:]}  # two edits of b, each nearer to b than to each other
    for name, text in texts.items():
        (d / name).write_text(" ".join(text))
        age = 0 if name == "b_original.txt" else 100  # the original is the newest file: oldest would not keep it
        os.utime(d / name, (time.time() - age, time.time() - age))
    assert set(_keepers(d, tmp_path / "w", "-t", 0.8)) == {"b_original.txt"}
    assert set(_keepers(d, tmp_path / "w", "-t", 0.8, "--keep", "alpha")) == {"a_edit1.txt"}


# ------------------------------------------------------------------------------------------ short documents

def _stubs_and_texts(d):
    d.mkdir()
    stub = "# Licensed under the Apache License, Version 2.0; see LICENSE.\n"  # 9 words: 5 shingles
    for name in ("pkg1/__init__.py", "pkg2/__init__.py", "a.txt", "b.txt"):
        (d / name).parent.mkdir(exist_ok=True)
        (d / name).write_text(stub if name.endswith(".py") else TEXT)
    return d


def test_short_documents_are_not_paired_by_default(tmp_path):
    d = _stubs_and_texts(tmp_path / "d")
    w = tmp_path / "w"
    r = neardup("-w", w, "run", d)
    assert r.stdout == f"1.0000\t{d}/a.txt\t{d}/b.txt\n"
    assert "2 documents under --min-shingles 20 skipped (never paired)" in r.stderr
    uniques = neardup("-w", w, "run", d, "--print", "uniques").stdout.split()
    assert uniques == [f"{d}/pkg1/__init__.py", f"{d}/pkg2/__init__.py"]  # still documents, listed as unique
    assert neardup("-w", w, "run", d, "--min-shingles", 0).stdout.count("__init__.py") == 2  # the stubs' pair
    sized = neardup("-w", w, "run", d, "--min-shingles", 0, "--min-size", len(TEXT) + 1)
    assert sized.stdout == "" and f"4 documents under --min-size {len(TEXT) + 1} skipped" in sized.stderr


def test_short_document_filters_may_change_from_run_to_run_of_an_index(tmp_path):
    d = _stubs_and_texts(tmp_path / "d")
    index = tmp_path / "index"
    assert neardup("run", d, "--index", index, "--min-shingles", 0).stdout.count("\n") == 2
    again = neardup("run", d, "--index", index)
    assert again.returncode == 0 and again.stdout == neardup("-w", tmp_path / "w", "run", d).stdout
    probe = tmp_path / "probe.py"
    probe.write_text((d / "pkg1/__init__.py").read_text())
    q = neardup("query", probe, "--index", index)
    assert q.returncode == 0 and q.stdout == "" and "under the index's --min-shingles 20; not paired" in q.stderr


def test_listing_shows_the_files_found_so_far(tmp_path):
    r = neardup("-w", tmp_path / "w", "run", SAMPLE, "--progress")
    assert r.returncode == 0 and "listing: 34 files found" in r.stderr
    assert "listing:" not in neardup("-w", tmp_path / "w2", "run", SAMPLE).stderr  # not a terminal: no bars
