"""--method exact and auto (issue 22 item 3): the exact join wired into the pipeline. Every pair with exact Jaccard
>= t over the stored sets, checked against a brute force that shares no code with nearDup, the same bytes whatever
--jobs and however the join is split, resume and --index."""
from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nearDup.cli import cli
from nearDup.pipeline import candidates

from conftest import SAMPLE, brute_force_pairs


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def pairs_of(stdout: str) -> dict:
    """{(a, b): jaccard} of jsonl pairs."""
    records = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    return {tuple(sorted((r["a"], r["b"]))): r["jaccard"] for r in records if "a" in r}


def write_corpus(folder: Path, seed: int, n: int, vocab: int) -> dict[str, str]:
    """Short texts over a small vocabulary, with edited copies and exact copies: Jaccard spread over [0, 1]."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(vocab)]
    texts: dict[str, str] = {}
    for i in range(n):
        if texts and rng.random() < 0.5:
            base = rng.choice(list(texts.values())).split()
            text = [w if rng.random() > rng.choice([0.0, 0.05, 0.2, 0.4]) else rng.choice(words) for w in base]
        else:
            text = [rng.choice(words) for _ in range(rng.randint(3, 40))]
        texts[f"d{i:03d}.txt"] = " ".join(text)
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        (folder / name).write_text(text, encoding="utf-8")
    return {str(folder / name): text for name, text in texts.items()}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), n=st.integers(2, 30), vocab=st.sampled_from([5, 30, 400]),
       t=st.sampled_from([0.2, 0.5, 0.8, 1.0]), unit=st.sampled_from(["word", "char"]),
       tasks=st.booleans())
def test_exact_method_equals_brute_force(tmp_path_factory, monkeypatch, seed, n, vocab, t, unit, tasks):
    """Every pair at Jaccard >= t and nothing else, with its exact Jaccard, word and char units, the join in one
    task or in many (MIN_JOIN_VALUES 1: up to JOIN_TASKS probe ranges). 2 bands of 64 rows give LSH little
    chance at t <= 0.8: the pairs come from the join."""
    folder = tmp_path_factory.mktemp("c")
    texts = write_corpus(folder / "docs", seed, n, vocab)
    monkeypatch.setattr(candidates, "MIN_JOIN_VALUES", 1 if tasks else candidates.MIN_JOIN_VALUES)
    k = 2 if unit == "word" else 4
    result = invoke("-w", folder / "w", "run", folder / "docs", "--method", "exact", "-t", t, "--unit", unit,
                    "-k", k, "--min-shingles", 1, "--bands", 2, "--rows", 64, "--format", "jsonl", "-j", 1)
    assert result.exit_code == 0, result.stderr
    truth = brute_force_pairs(texts, t, unit, k)
    found = pairs_of(result.stdout)
    assert set(found) == set(truth)
    assert all(found[p] == pytest.approx(truth[p]) for p in truth)


def test_exact_finds_what_lsh_misses_and_says_so_in_the_records(corpus, tmp_path):
    """Bands that make LSH miss pairs (2 x 64 at t = 0.5): exact still gives every pair; the candidates record
    names the method; the same work dir run again with lsh recomputes the candidates and gives LSH's pairs."""
    folder, texts = corpus
    truth = brute_force_pairs(texts, 0.5)
    common = ("-t", 0.5, "--bands", 2, "--rows", 64, "--format", "jsonl", "--min-shingles", 1)
    lsh = invoke("-w", tmp_path / "w", "run", folder, *common)
    assert lsh.exit_code == 0, lsh.stderr
    assert set(pairs_of(lsh.stdout)) < set(truth)  # the test means something: LSH misses some
    exact = invoke("-w", tmp_path / "w", "run", folder, *common, "--method", "exact")
    assert exact.exit_code == 0, exact.stderr
    assert set(pairs_of(exact.stdout)) == set(truth)
    assert "by the exact join" in exact.stderr and "shingle: up to date" in exact.stderr
    record = json.loads((tmp_path / "w" / "manifest.json").read_text())["stages"]["candidates"]
    assert record["stats"]["method"] == "exact" and record["params"]["method"] == "exact"
    assert not list((tmp_path / "w" / "candidates").glob("*join*"))  # the join's input is not left behind
    again = invoke("-w", tmp_path / "w", "run", folder, *common)
    assert again.exit_code == 0 and again.stdout == lsh.stdout
    assert "method" not in json.loads((tmp_path / "w" / "manifest.json").read_text())["stages"]["candidates"]["params"]


@pytest.mark.parametrize("options", [["--format", "jsonl"], ["--groups", "--format", "csv"], ["--print", "script"]])
def test_exact_output_is_the_same_whatever_jobs_and_join_split(corpus, tmp_path, monkeypatch, options):
    folder, _ = corpus
    outputs = []
    for i, (jobs, min_values) in enumerate([(1, candidates.MIN_JOIN_VALUES), (1, 1), (2, 1), (2, 5000)]):
        monkeypatch.setattr(candidates, "MIN_JOIN_VALUES", min_values)
        result = invoke("-w", tmp_path / str(i), "run", folder, "--method", "exact", "-t", 0.6, "--partition-docs",
                        29, "-j", jobs, *options)
        assert result.exit_code == 0, result.stderr
        outputs.append(result.stdout_bytes)
    assert outputs[0] and all(out == outputs[0] for out in outputs)


@settings(max_examples=60, deadline=None)
@given(sets_=st.lists(st.lists(st.integers(0, 40), max_size=25), min_size=1, max_size=40),
       t=st.sampled_from([0.2, 0.5, 0.8, 1.0]), metric=st.sampled_from(["jaccard", "containment"]),
       cuts=st.lists(st.floats(0, 1), max_size=4))
def test_join_parts_over_any_probe_ranges_make_the_whole_join(sets_, t, metric, cuts):
    """allpairs.join_part over consecutive ranges covering the sets finds each pair of the whole join once."""
    from nearDup.kernels import allpairs

    uniques = [sorted(set(s)) for s in sets_]
    offsets = np.r_[0, np.cumsum([len(s) for s in uniques])].astype(np.int64)
    values = np.array([v for s in uniques for v in s], np.uint32)
    whole = (allpairs.jaccard_join if metric == "jaccard" else allpairs.containment_join)(values, offsets, t)
    n = len(uniques)
    bounds = sorted({0, n, *(int(c * n) for c in cuts)})
    ordered = allpairs.frequency_order(values, offsets)
    parts = [allpairs.join_part(ordered, offsets, t, metric, lo, hi) for lo, hi in itertools.pairwise(bounds)]
    pairs = np.concatenate([p.pairs for p in parts])
    inter = np.concatenate([p.intersection for p in parts])
    order = np.lexsort((pairs[:, 1], pairs[:, 0]))
    assert np.array_equal(pairs[order], whole.pairs) and np.array_equal(inter[order], whole.intersection)


def test_join_ranges_cover_the_sets_once(monkeypatch):
    offsets = np.r_[0, np.cumsum(np.arange(1, 500))].astype(np.int64)
    for min_values in (1, 1000, 10**9):
        monkeypatch.setattr(candidates, "MIN_JOIN_VALUES", min_values)
        ranges = candidates.join_ranges(offsets)
        assert ranges[0][0] == 0 and ranges[-1][1] == 499 and len(ranges) <= candidates.JOIN_TASKS
        assert all(a < b for a, b in ranges) and all(r[1] == s[0] for r, s in itertools.pairwise(ranges))
        assert len(ranges) == (1 if min_values == 10**9 else candidates.JOIN_TASKS)
    assert candidates.join_ranges(np.zeros(1, np.int64)) == []


def test_auto_says_what_it_chose_and_gives_that_methods_pairs(tmp_path, monkeypatch):
    """auto picks exact when the join's values and records are cheap next to the band entries, LSH otherwise
    (forced each way through AUTO_VALUE_COST and AUTO_RECORD_COST: by the records once the join's sets are
    gathered, or by the values alone before); one line on stderr; the output is the chosen method's."""
    common = ("run", SAMPLE, "-t", 0.5, "--bands", 2, "--rows", 64, "--format", "jsonl")
    want = {m: invoke("-w", tmp_path / m, *common, "--method", m).stdout for m in ("lsh", "exact")}
    assert pairs_of(want["lsh"]) != pairs_of(want["exact"])
    for n, (value_cost, record_cost, chose, counted) in enumerate(((0, 0, "exact", "records"),
                                                                    (0, 10**9, "lsh", "records"),
                                                                    (10**9, 0, "lsh", "values"))):
        monkeypatch.setattr(candidates, "AUTO_VALUE_COST", value_cost)
        monkeypatch.setattr(candidates, "AUTO_RECORD_COST", record_cost)
        result = invoke("-w", tmp_path / f"auto{n}", *common, "--method", "auto")
        assert result.exit_code == 0, result.stderr
        lines = [line for line in result.stderr.splitlines() if "--method auto" in line]
        assert len(lines) == 1 and f"chose {chose}:" in lines[0] and counted in lines[0]
        assert ("records" in lines[0]) == (counted == "records")  # the values alone decided: no join gathered
        assert pairs_of(result.stdout) == pairs_of(want[chose])
        record = json.loads((tmp_path / f"auto{n}" / "manifest.json").read_text())["stages"]["candidates"]
        assert record["stats"]["method"] == chose and record["params"]["method"] == "auto"


def test_exact_index_adds_documents_and_query_still_works(tmp_path):
    """--index with exact: after adding documents, the index's pairs are a fresh exact run's; query reads it."""
    folder = tmp_path / "docs"
    texts = write_corpus(folder, 3, 30, 60)
    options = ("-t", 0.5, "-k", 2, "--min-shingles", 1, "--method", "exact", "--format", "jsonl")
    assert invoke("run", folder, "--index", tmp_path / "ix", *options).exit_code == 0
    more = write_corpus(tmp_path / "more", 4, 10, 60)
    for path, text in more.items():
        (folder / ("new_" + Path(path).name)).write_text(text, encoding="utf-8")
    added = invoke("run", folder, "--index", tmp_path / "ix", *options)
    fresh = invoke("-w", tmp_path / "fresh", "run", folder, *options)
    assert added.exit_code == 0 and fresh.exit_code == 0, added.stderr + fresh.stderr
    assert pairs_of(added.stdout) == pairs_of(fresh.stdout)
    all_texts = {str(p): p.read_text() for p in folder.iterdir()}
    assert set(pairs_of(added.stdout)) == set(brute_force_pairs(all_texts, 0.5, k=2))
    probe = sorted(folder.iterdir())[0]
    query = invoke("query", "--index", tmp_path / "ix", probe, "--format", "jsonl")
    assert query.exit_code == 0, query.stderr
    assert texts and str(probe) in query.stdout  # the document itself is indexed: Jaccard 1


def test_method_is_checked_and_taken_by_the_api(tmp_path):
    import nearDup

    bad = invoke("-w", tmp_path / "w", "run", SAMPLE, "--method", "fast")
    assert bad.exit_code != 0 and "--method" in bad.stderr and "Traceback" not in bad.stderr
    with pytest.raises(nearDup.ParameterError, match="--method"):
        nearDup.find_duplicates([str(SAMPLE)], method="fast")
    texts = [" ".join(f"w{i}" for i in range(40)), " ".join(f"w{i}" for i in range(10, 50)), "w1 w2 w3 w4 w5 w6"]
    found = nearDup.find_duplicates(texts=texts, method="exact", threshold=0.5, bands=2, rows=64, min_shingles=1)
    assert {(p.a, p.b) for p in found.pairs} == set(brute_force_pairs(dict(zip("012", texts)), 0.5)) == {("0", "1")}


# ------------------------------------------------------------------------------------------ --metric containment

def brute_containment(texts: dict[str, str], t: float, unit: str = "word", k: int = 5) -> dict:
    """{(contained, container): |A ∩ B| / |A|} for every pair whose smaller set has at least t of itself in the
    larger, by comparing all pairs of reference shingle sets; equal sizes give both directions (either is right)."""
    from conftest import reference_shingles

    shingled = {name: reference_shingles(text, unit, k) for name, text in texts.items()}
    out = {}
    for a, b in itertools.permutations(sorted(shingled), 2):
        sa, sb = shingled[a], shingled[b]
        if sa and sb and len(sa) <= len(sb) and len(sa & sb) / len(sa) >= t:
            out[(a, b)] = len(sa & sb) / len(sa)
    return out


def directed_pairs(stdout: str) -> dict:
    """{(contained, container): containment} of jsonl pairs."""
    records = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    return {(r["contained"], r["container"]): r["containment"] for r in records if r.get("type") == "pair"}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), n=st.integers(2, 30), vocab=st.sampled_from([5, 30, 400]),
       t=st.sampled_from([0.3, 0.6, 0.9, 1.0]), unit=st.sampled_from(["word", "char"]), tasks=st.booleans())
def test_containment_equals_brute_force(tmp_path_factory, monkeypatch, seed, n, vocab, t, unit, tasks):
    """Every pair whose smaller set is contained in the larger at >= t, directed smaller -> larger, with its
    containment and Jaccard; excerpts of other texts are planted so that containment and Jaccard differ."""
    folder = tmp_path_factory.mktemp("c")
    texts = write_corpus(folder / "docs", seed, n, vocab)
    rng = random.Random(seed)
    for i, text in enumerate(list(texts.values())[:5]):
        words = text.split()
        lo = rng.randrange(len(words))
        (folder / "docs" / f"excerpt{i}.txt").write_text(" ".join(words[lo:lo + rng.randint(3, 20)]))
    texts = {str(p): p.read_text() for p in (folder / "docs").iterdir()}
    monkeypatch.setattr(candidates, "MIN_JOIN_VALUES", 1 if tasks else candidates.MIN_JOIN_VALUES)
    k = 2 if unit == "word" else 4
    result = invoke("-w", folder / "w", "run", folder / "docs", "--metric", "containment", "-t", t, "--unit", unit,
                    "-k", k, "--min-shingles", 1, "--format", "jsonl", "-j", 1)
    assert result.exit_code == 0, result.stderr
    truth = brute_containment(texts, t, unit, k)
    found = directed_pairs(result.stdout)
    assert set(found) <= set(truth)  # each pair directed the right way (smaller set contained)
    assert {frozenset(p) for p in found} == {frozenset(p) for p in truth}  # and each pair once
    assert all(found[p] == pytest.approx(truth[p]) for p in found)


@pytest.fixture
def book(tmp_path):
    """A book, a chapter of it and a copy of the chapter, a quotation with a few words of its own, another text."""
    rng = random.Random(5)
    words = [f"w{i}" for i in range(500)]
    text = [rng.choice(words) for _ in range(600)]
    folder = tmp_path / "docs"
    folder.mkdir()
    files = {"book.txt": text, "chapter.txt": text[100:250], "chapter_copy.txt": text[100:250],
             "quote.txt": text[300:340] + ["x1", "x2", "x3", "x4", "x5"],
             "other.txt": [rng.choice(words) for _ in range(200)]}
    for name, content in files.items():
        (folder / name).write_text(" ".join(content))
    return folder


def test_containment_pairs_are_directed_in_every_format(book, tmp_path, monkeypatch):
    """Which end is contained: the jsonl keys and the csv header say it; tsv and human put it first."""
    def run(*options):
        result = invoke("-w", tmp_path / "w", "run", ".", "--metric", "containment", "-t", 0.7, *options)
        assert result.exit_code == 0, result.stderr
        return result.stdout

    monkeypatch.chdir(book)
    assert run("--format", "tsv").splitlines() == [
        "1.0000\t./chapter.txt\t./book.txt", "1.0000\t./chapter_copy.txt\t./book.txt",
        "1.0000\t./chapter.txt\t./chapter_copy.txt", "0.8780\t./quote.txt\t./book.txt"]
    csv = run("--format", "csv").splitlines()
    assert csv[0] == "containment,contained,container,jaccard,estimate,intersection,union"
    assert csv[4].startswith("0.8780,./quote.txt,./book.txt,0.0599,")
    pairs = [json.loads(line) for line in run("--format", "jsonl").splitlines()]
    assert pairs[0]["params"]["metric"] == "containment" and pairs[0]["params"]["method"] == "exact"
    assert [(p["contained"], p["container"], p["intersection"]) for p in pairs[1:-1]] == [
        ("./chapter.txt", "./book.txt", 146), ("./chapter_copy.txt", "./book.txt", 146),
        ("./chapter.txt", "./chapter_copy.txt", 146), ("./quote.txt", "./book.txt", 36)]
    assert pairs[4]["containment"] == 36 / 41 and pairs[4]["jaccard"] == 36 / pairs[4]["union"]
    assert "./quote.txt  in  ./book.txt" in run("--format", "human")
    groups = [json.loads(line) for line in run("--groups", "--format", "jsonl").splitlines()][1:-1]
    assert len(groups) == 1 and groups[0]["keeper"] == "./book.txt"
    assert [(m["id"], m["role"], m["containment"]) for m in groups[0]["members"]] == [
        ("./book.txt", "keeper", 1.0), ("./chapter.txt", "duplicate", 1.0), ("./chapter_copy.txt", "duplicate", 1.0),
        ("./quote.txt", "duplicate", 36 / 41)]
    assert run("--groups", "--format", "csv").splitlines()[:2] == ["group,role,containment,path",
                                                                   "1,keeper,1.0000,./book.txt"]
    assert sorted(run("--print", "dupes").split()) == ["./chapter.txt", "./chapter_copy.txt", "./quote.txt"]
    jaccard = invoke("-w", tmp_path / "j", "run", ".", "-t", 0.7, "--format", "tsv")
    assert jaccard.stdout.splitlines() == ["1.0000\t./chapter.txt\t./chapter_copy.txt"]  # what Jaccard sees


def test_containment_script_removes_exactly_the_contained_files(book, tmp_path):
    """The script of a containment run, run with sh, removes the chapter, its copy and the quotation, and keeps
    the book that contains them and the unrelated text."""
    import subprocess

    result = invoke("-w", tmp_path / "w", "run", book, "--metric", "containment", "-t", 0.7, "--print", "script")
    assert result.exit_code == 0, result.stderr
    script = tmp_path / "script.sh"
    script.write_text(result.stdout)
    done = subprocess.run(["sh", str(script)], cwd=tmp_path, capture_output=True)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in book.iterdir()) == ["book.txt", "other.txt"]


def test_containment_is_the_same_whatever_jobs_and_options_are_checked(book, tmp_path, monkeypatch):
    monkeypatch.setattr(candidates, "MIN_JOIN_VALUES", 1)
    outputs = [invoke("-w", tmp_path / str(j), "run", book, "--metric", "containment", "-t", 0.5, "--groups",
                      "--format", "jsonl", "-j", j).stdout_bytes for j in (1, 2)]
    assert outputs[0] == outputs[1] and b"min_containment" in outputs[0]
    bad = invoke("-w", tmp_path / "b", "run", book, "--metric", "containment", "--method", "lsh")
    assert bad.exit_code != 0 and "--method exact" in bad.stderr and "Traceback" not in bad.stderr
    assert invoke("run", book, "--index", tmp_path / "ix", "--metric", "containment").exit_code == 0
    query = invoke("query", "--index", tmp_path / "ix", book / "quote.txt")
    assert query.exit_code != 0 and "--metric containment" in query.stderr


def test_containment_through_the_api(book):
    import nearDup

    result = nearDup.find_duplicates([str(book)], metric="containment", threshold=0.7)
    assert {(p.a.rsplit("/", 1)[-1], p.b.rsplit("/", 1)[-1], p.containment) for p in result.pairs} == {
        ("chapter.txt", "book.txt", 1.0), ("chapter_copy.txt", "book.txt", 1.0),
        ("chapter.txt", "chapter_copy.txt", 1.0), ("quote.txt", "book.txt", 36 / 41)}
    (group,) = result.groups
    assert group.keeper.endswith("book.txt") and group.min_containment == 36 / 41
    assert [m.containment for m in group.members] == [1.0, 1.0, 1.0, 36 / 41]


def test_containment_index_adds_documents_as_a_fresh_run_finds_them(book, tmp_path):
    """An index's verified entries (with their set sizes) are reused for the old pairs; the new pairs are
    directed like a fresh run's."""
    options = ("--metric", "containment", "-t", 0.6, "--format", "jsonl")
    assert invoke("run", book, "--index", tmp_path / "ix", *options).exit_code == 0
    words = (book / "book.txt").read_text().split()
    (book / "excerpt.txt").write_text(" ".join(words[400:480]))
    added = invoke("run", book, "--index", tmp_path / "ix", *options)
    fresh = invoke("-w", tmp_path / "fresh", "run", book, *options)
    assert added.exit_code == 0 and "known from the last run" in added.stderr, added.stderr
    assert directed_pairs(added.stdout) == directed_pairs(fresh.stdout)
    assert (str(book / "excerpt.txt"), str(book / "book.txt")) in directed_pairs(added.stdout)
