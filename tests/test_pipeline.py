"""The whole pipeline against brute-force exact Jaccard, resume behaviour, and the CLI's contracts."""
from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from nearDup.cli import cli
from nearDup.config import FORMAT
from nearDup.kernels import lsh

from conftest import REPO, SAMPLE, brute_force_pairs, reference_shingles, stage_files


def invoke(*args, input=None, env=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input, env=env)


def parse_tsv(stdout: str) -> dict:
    out = {}
    for line in stdout.splitlines():
        j, a, b = line.split("\t")
        out[(a, b)] = float(j)
    return out


# ------------------------------------------------------------------------------------------ correctness

@pytest.mark.parametrize("unit,k,threshold,extra", [
    ("word", 5, 0.5, []), ("word", 3, 0.7, ["--minhash", "permutation"]), ("char", 7, 0.6, ["--num-perm", "64"])])
def test_verified_pairs_equal_brute_force_up_to_predicted_lsh_misses(corpus, tmp_path, unit, k, threshold, extra):
    folder, texts = corpus
    result = invoke("-w", tmp_path / "w", "run", folder, "--unit", unit, "-k", k, "--threshold", threshold,
                    "--partition-docs", 37, *extra)
    assert result.exit_code == 0, result.stderr
    found = parse_tsv(result.stdout)
    truth = brute_force_pairs(texts, threshold, unit, k)
    # Every reported pair is a true pair, with its exact Jaccard (4 decimals).
    for pair, j in found.items():
        assert pair in truth, pair
        assert j == pytest.approx(truth[pair], abs=5.0001e-5)
    # Misses are LSH false negatives only: no more than the S-curve predicts, with a generous Poisson margin.
    record = json.loads((tmp_path / "w" / "manifest.json").read_text())["stages"]["band"]["params"]
    b, r = record["bands"], record["rows"]
    expected_misses = sum(1 - float(lsh.s_curve(j, b, r)) for j in truth.values())
    missed = len(set(truth) - set(found))
    assert missed <= expected_misses + 4 * math.sqrt(expected_misses) + 2
    assert len(truth) > 30  # the corpus really spans the threshold


def test_output_is_sorted_and_formatted(corpus, tmp_path):
    folder, _ = corpus
    out = invoke("-w", tmp_path / "w", "run", folder, "--threshold", 0.3).stdout
    rows = [line.split("\t") for line in out.splitlines()]
    assert all(len(r) == 3 and len(r[0]) == 6 and r[1] < r[2] for r in rows)
    keys = [(-float(r[0]), r[1], r[2]) for r in rows]
    assert keys == sorted(keys)


def test_sample_corpus_pairs_match_brute_force(tmp_path):
    texts = {str(p.relative_to(REPO)): p.read_text() for p in sorted(SAMPLE.iterdir())}
    result = subprocess.run([sys.executable, "-m", "nearDup", "-w", str(tmp_path / "w"), "run", "sample_corpus",
                             "--threshold", "0.5"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    truth = brute_force_pairs(texts, 0.5)
    assert set(parse_tsv(result.stdout)) == set(truth)  # all graded pairs are far from the S-curve's slope
    assert "2 too short for one shingle" in result.stderr


def test_jobs_and_partitioning_do_not_change_output(corpus, tmp_path):
    folder, _ = corpus
    outs = {invoke("-w", tmp_path / f"w{jobs}{part}", "run", folder, "--jobs", jobs, "--partition-docs", part,
                   "--threshold", 0.5, "--format", "jsonl").stdout for jobs, part in [(1, 1000), (2, 17), (2, 50)]}
    assert len(outs) == 1 and len(next(iter(outs))) > 0



def test_run_signs_and_bands_in_the_shingle_tasks_with_the_stages_own_bytes(corpus, tmp_path):
    """`run` writes the signature and band files of a shard in its shingle task; every work-dir file must be the
    one the separate stages write, and those stages must find the shards done (nothing reported as reused)."""
    folder, _ = corpus
    fused = invoke("-w", tmp_path / "run", "run", folder, "--jobs", 2, "--partition-docs", 40)
    chained = invoke("-w", tmp_path / "chain", "--jobs", 2, "shingle", folder, "--partition-docs", 40, "signature",
                     "band", "candidates", "verify")
    assert fused.exit_code == chained.exit_code == 0 and fused.stdout == chained.stdout != ""
    assert "reused" not in fused.stderr
    assert stage_files(tmp_path / "run") == stage_files(tmp_path / "chain")
    assert len([name for name in stage_files(tmp_path / "run") if name.startswith("band/part-")]) > 2


def test_formats(tmp_path):
    w = tmp_path / "w"
    records = [json.loads(line) for line in invoke("-w", w, "run", SAMPLE, "--format", "jsonl").stdout.splitlines()]
    assert records[0]["type"] == "header" and records[0]["schema"] == 1
    recall = records[-1].pop("recall")  # the estimate itself: test_recall.py
    assert records[-1] == {"type": "summary", "pairs": 10, "aborted": False}
    assert set(recall) == {"missed", "missed_low", "missed_high", "recall", "recall_low", "recall_high", "confidence"}
    pairs = records[1:-1]
    assert all(r["type"] == "pair" and {"a", "b", "jaccard", "estimate"} <= set(r) for r in pairs)
    assert pairs[0]["jaccard"] == 1.0 and len(pairs) == 10
    csv = invoke("-w", w, "run", SAMPLE, "--format", "csv").stdout.splitlines()
    assert csv[0].startswith("jaccard,a,b,estimate") and len(csv) == len(pairs) + 1
    nul = invoke("-w", w, "verify", "-0").stdout
    assert nul.count("\0") == len(pairs) and "\n" not in nul


# ------------------------------------------------------------------------------------------ CLI parsing

def test_chained_stages_and_options_after_positionals(tmp_path):
    w = tmp_path / "w"
    r = invoke("-w", w, "shingle", SAMPLE, "--unit", "word", "signature", "--num-perm", 256, "band", "--threshold",
               0.7, "candidates", "verify", "--format", "jsonl")
    assert r.exit_code == 0, r.stderr
    truth = brute_force_pairs({str(p): p.read_text() for p in SAMPLE.iterdir()}, 0.7)
    found = {(x["a"], x["b"]) for x in map(json.loads, r.stdout.splitlines()) if x["type"] == "pair"}
    assert "256 oph permutations" in r.stderr and found <= set(truth)
    assert {pair for pair, j in truth.items() if j >= 0.9} <= found  # P(candidate) > 0.999 at these
    manifest = json.loads((w / "manifest.json").read_text())["stages"]
    assert manifest["verify"]["params"]["threshold"] == 0.7  # inherited from band
    r = invoke("-w", w, "verify", "--threshold", 0.9)
    assert r.exit_code == 0 and all(float(line.split("\t")[0]) >= 0.9 for line in r.stdout.splitlines())


def test_a_file_named_like_a_stage_is_read_after_double_dash(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    text = (SAMPLE / "lighthouses_original.txt").read_text()
    (folder / "band").write_text(text)
    (folder / "copy").write_text(text)
    os.chdir(folder)
    r = invoke("-w", tmp_path / "w", "shingle", "copy", "--", "band")
    assert r.exit_code == 0 and "2 documents" in r.stderr


def test_every_command_has_help():
    for name in cli.commands:
        r = invoke(name, "--help")
        assert r.exit_code == 0 and "Usage" in r.stdout, name


def test_tune_reproduces_figure_3_8():
    out = invoke("tune", "--bands", 20, "--rows", 5).stdout
    table = dict(line.split("\t") for line in out.splitlines() if line[:2] == "0.")
    figure = {"0.2": .006, "0.3": .047, "0.4": .186, "0.5": .470, "0.6": .802, "0.7": .975, "0.8": .9996}
    for s, value in figure.items():  # the figure gives 3 significant places: agree to within its last digit
        assert abs(float(table[s]) - value) < 0.001, s
    assert table["0.8"] == "0.9996"
    chosen = invoke("tune", "--threshold", 0.8, "--num-perm", 128).stdout
    assert "b = 14 bands x r = 9 rows" in chosen and "2 of 128 permutations unused" in chosen


def test_run_without_workdir_uses_the_cache_not_the_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = invoke("run", SAMPLE, env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert r.exit_code == 0 and os.listdir(tmp_path) == ["cache"]
    assert f"work dir: {tmp_path / 'cache' / 'neardup'}" in r.stderr


def test_inspect_reports_stages_and_staleness(tmp_path):
    w = tmp_path / "w"
    invoke("-w", w, "run", SAMPLE)
    out = invoke("-w", w, "inspect").stdout
    assert "34 documents" in out and out.count(": done") == 5
    invoke("-w", w, "band", "--threshold", 0.5)
    out = invoke("-w", w, "inspect").stdout
    assert "candidates: out of date" in out


# ------------------------------------------------------------------------------------------ resume

def stage_lines(stderr: str) -> dict:
    return {line.split(":")[0]: "up to date" in line for line in stderr.splitlines()
            if line.split(":")[0] in ("shingle", "signature", "band", "candidates", "verify")}


def test_resume_reruns_only_the_changed_stage_and_after(tmp_path):
    w = tmp_path / "w"
    first = invoke("-w", w, "run", SAMPLE, "--partition-docs", 10)
    again = invoke("-w", w, "run", SAMPLE, "--partition-docs", 10)
    assert again.stdout == first.stdout and all(stage_lines(again.stderr).values())
    # alter band's parameters: shingle and signature are reused, band and everything after re-run
    changed = invoke("-w", w, "run", SAMPLE, "--partition-docs", 10, "--threshold", 0.6)
    assert stage_lines(changed.stderr) == {"shingle": True, "signature": True, "band": False, "candidates": False,
                                           "verify": False}
    # delete signature's record: only signature is redone (its partitions were intact); the rest is unchanged
    manifest = json.loads((w / "manifest.json").read_text())
    del manifest["stages"]["signature"]
    (w / "manifest.json").write_text(json.dumps(manifest))
    redo = invoke("-w", w, "run", SAMPLE, "--partition-docs", 10, "--threshold", 0.6)
    assert stage_lines(redo.stderr)["shingle"] and not stage_lines(redo.stderr)["signature"]
    assert redo.stdout == changed.stdout
    # delete one partition's signature file: that stage is redone, and the result is the same
    os.unlink(w / "signature" / "part-00002.npy")
    redo = invoke("-w", w, "run", SAMPLE, "--partition-docs", 10, "--threshold", 0.6)
    assert not stage_lines(redo.stderr)["signature"] and "3 of 4 partitions reused" in redo.stderr
    assert redo.stdout == changed.stdout


def test_a_stage_on_stale_intermediates_names_what_to_rerun(tmp_path):
    w = tmp_path / "w"
    invoke("-w", w, "run", SAMPLE)
    invoke("-w", w, "signature", "--num-perm", 64)
    r = invoke("-w", w, "verify")
    assert r.exit_code == 2 and "re-run `neardup -w" in r.stderr and "band candidates verify" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_adding_a_file_shingles_only_the_new_file(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    for p in sorted(SAMPLE.iterdir()):
        (folder / p.name).write_text(p.read_text())
    w = tmp_path / "w"
    invoke("-w", w, "run", folder, "--partition-docs", 10)
    (folder / "zz_new.txt").write_text((SAMPLE / "sourdough_original.txt").read_text())
    r = invoke("-w", w, "run", folder, "--partition-docs", 10)
    assert "in 5 partitions" in r.stderr and "this run: 1 added" in r.stderr
    assert "signature: 35 signatures" in r.stderr and "known from the last run" in r.stderr
    assert f"{folder}/sourdough_original.txt\t{folder}/zz_new.txt" in r.stdout


# ------------------------------------------------------------------------------------------ bad input

def assert_one_line_error(r, *needles):
    assert r.exit_code == 2, (r.stdout, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    for needle in needles:
        assert needle in lines[0]


def test_bad_inputs_give_one_line_and_exit_2(tmp_path):
    w = tmp_path / "w"
    assert_one_line_error(invoke("run", tmp_path / "missing"), "missing", "no such file")
    (tmp_path / "empty").mkdir()
    assert_one_line_error(invoke("-w", w, "run", tmp_path / "empty"), "no documents found")
    short = tmp_path / "short"
    short.mkdir()
    (short / "a.txt").write_text("two words")
    (short / "b.txt").write_text("three more words")
    assert_one_line_error(invoke("-w", w, "run", short), "long enough", "-k")
    assert_one_line_error(invoke("run", SAMPLE, "--unit", "syllable"), "--unit")
    assert_one_line_error(invoke("run", SAMPLE, "--threshold", 1.5), "--threshold")
    assert_one_line_error(invoke("run", SAMPLE, "--no-such-option"), "no-such-option")
    assert invoke("-w", w, "run", SAMPLE).exit_code == 0
    assert_one_line_error(invoke("-w", w, "band", "--bands", 40, "--rows", 5), "signature", "--num-perm 200")
    assert_one_line_error(invoke("-w", tmp_path / "fresh", "verify"), "shingle stage has not run")


def test_work_dir_from_another_version_is_refused(tmp_path):
    w = tmp_path / "w"
    invoke("-w", w, "run", SAMPLE)
    manifest = json.loads((w / "manifest.json").read_text())
    manifest.update(format=999, version="9.9.9")
    (w / "manifest.json").write_text(json.dumps(manifest))
    assert_one_line_error(invoke("-w", w, "run", SAMPLE), "9.9.9", "--force")
    r = invoke("-w", w, "run", SAMPLE, "--force")
    assert r.exit_code == 0 and r.stdout.count("\n") == 10


def test_the_default_cache_work_dir_is_rebuilt_when_another_version_wrote_it(tmp_path, monkeypatch):
    """Without -w, the work dir is a cache under XDG_CACHE_HOME: derived data only, so one from another format
    (or damaged) is rebuilt with a line on stderr instead of stopping the run; an explicit -w is refused (above)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = invoke("run", SAMPLE)
    assert first.exit_code == 0
    (cache,) = (tmp_path / "cache" / "neardup").iterdir()
    for damage in ('{"format": 999, "version": "9.9.9", "stages": {}}', "{not json"):
        (cache / "manifest.json").write_text(damage)
        again = invoke("run", SAMPLE)
        assert again.exit_code == 0 and again.stdout == first.stdout
        assert "rebuilding it" in again.stderr and "shingle: 34 documents" in again.stderr
        assert json.loads((cache / "manifest.json").read_text())["format"] == FORMAT


def test_documents_are_hashed_with_sha256_and_an_index_of_blake2b_hashes_is_refused(tmp_path):
    """A document's sha is SHA-256's first 16 bytes of its file. An index or work dir of format 5 holds BLAKE2b
    hashes: read as they are, every unchanged file would look changed (or a renamed one missed), so it is refused
    with what to do, and --force rebuilds it to the output of a fresh run."""
    from nearDup.store.catalog import Catalog
    from nearDup.store.workdir import WorkDir

    index = tmp_path / "index"
    first = invoke("run", SAMPLE, "--index", index)
    assert first.exit_code == 0, first.stderr
    work = WorkDir(index)
    for shard in sorted((index / "shingle").glob("part-*.docs.npz")):
        stored = Catalog(work.load_table(shard, "shingle"))
        for n, doc_id in enumerate(stored.ids):
            assert stored["sha"][n] == hashlib.sha256(open(doc_id, "rb").read()).hexdigest()[:32]
    manifest = json.loads((index / "manifest.json").read_text())
    (index / "manifest.json").write_text(json.dumps({**manifest, "format": 5}))  # the last format of BLAKE2b
    refused = invoke("run", SAMPLE, "--index", index)
    assert refused.exit_code != 0 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "(format 5), this is" in refused.stderr
    assert "re-run with --force to rebuild it" in refused.stderr
    rebuilt = invoke("run", SAMPLE, "--index", index, "--force")
    assert rebuilt.exit_code == 0 and rebuilt.stdout == first.stdout
    assert json.loads((index / "manifest.json").read_text())["format"] == FORMAT == 6


def test_jsonl_input(tmp_path):
    src = tmp_path / "docs.jsonl"
    texts = {p.name: p.read_text() for p in sorted(SAMPLE.iterdir())}
    src.write_text("".join(json.dumps({"name": k, "body": v}) + "\n" for k, v in texts.items()))
    r = invoke("-w", tmp_path / "w", "run", "--jsonl", src, "--id-field", "name", "--text-field", "body")
    assert r.exit_code == 0, r.stderr
    assert set(parse_tsv(r.stdout)) == set(brute_force_pairs(texts, 0.8))


def test_paths_on_stdin(tmp_path):
    paths = sorted(str(p) for p in SAMPLE.iterdir())
    r = invoke("-w", tmp_path / "w", "run", "-", input="\n".join(paths) + "\n")
    r0 = invoke("-w", tmp_path / "w0", "run", "-", "-0", input="\0".join(paths))
    assert r.exit_code == 0 and r.stdout.count("\n") == 10
    assert r0.stdout.replace("\0", "\n") == r.stdout


def test_reference_shingles_sanity():
    assert reference_shingles("a b c d e f", "word", 5) == {("a", "b", "c", "d", "e"), ("b", "c", "d", "e", "f")}
