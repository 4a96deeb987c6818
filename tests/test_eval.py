"""`neardup eval` and nearDup.evaluate: the scores against references that share no code with nearDup
(scikit-learn's adjusted_rand_score, pair counts by brute force over Python sets, brute-force exact Jaccard), an
end-to-end run with scores computed by hand, and bad truth files as one line on stderr."""
from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import adjusted_rand_score

import nearDup
from nearDup.cli import cli
from nearDup.kernels import evaluation, lsh, recall
from nearDup.report.evaluate import Matcher, read_truth, thresholds

from conftest import brute_force_pairs


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def scores(*args) -> tuple[list[dict], dict]:
    """The score records and the summary of `neardup ... eval ... --format jsonl`."""
    r = invoke(*args, "--format", "jsonl")
    assert r.exit_code == 0, r.output
    records = [json.loads(line) for line in r.stdout.splitlines()]
    assert records[0]["type"] == "header" and records[-1]["type"] == "summary"
    return [{k: v for k, v in rec.items() if k != "type"} for rec in records[1:-1]], records[-1]


# ------------------------------------------------------------------------------------------------ kernels

labelings = st.integers(1, 40).flatmap(lambda n: st.tuples(st.lists(st.integers(0, 5), min_size=n, max_size=n),
                                                           st.lists(st.integers(0, 5), min_size=n, max_size=n)))


@settings(max_examples=150, deadline=None)
@given(labelings)
def test_ari_equals_scikit_learn(pair):
    a, b = pair
    assert evaluation.adjusted_rand_index(np.array(a), np.array(b)) == pytest.approx(adjusted_rand_score(a, b),
                                                                                      abs=1e-12)


@pytest.mark.parametrize(("a", "b"), [([0] * 5, [0] * 5), (list(range(5)), list(range(5))), ([0], [3]),
                                      ([0, 0, 1, 1], [7, 7, 2, 2]), (list(range(6)), [0] * 6)])
def test_ari_limit_cases_equal_scikit_learn(a, b):
    assert evaluation.adjusted_rand_index(np.array(a), np.array(b)) == pytest.approx(adjusted_rand_score(a, b))


def _brute_counts(found: set, true: set, false: set | None):
    tp = len(found & true)
    fp = len(found - true) if false is None else len(found & false)
    return tp, fp, len(true - found)


pair_sets = st.sets(st.tuples(st.integers(0, 12), st.integers(0, 12)).filter(lambda p: p[0] < p[1]), max_size=40)


@settings(max_examples=120, deadline=None)
@given(pair_sets, pair_sets, pair_sets)
def test_pair_counts_equal_brute_force(found, true, false):
    false -= true

    def codes(pairs):
        return np.sort(lsh.pair_codes(np.array(sorted(pairs), np.int64).reshape(-1, 2)))
    for judged in (None, false):
        got = evaluation.pair_counts(codes(found), codes(true), None if judged is None else codes(judged))
        assert tuple(got) == _brute_counts(found, true, judged)


@settings(max_examples=120, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=2, max_size=15), st.data())
def test_cluster_pair_counts_equal_brute_force(labels, data):
    n = len(labels)
    found = data.draw(st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda p: p[0] < p[1])))
    true = {(i, j) for i, j in itertools.combinations(range(n), 2) if labels[i] == labels[j]}
    got = evaluation.cluster_pair_counts(np.array(labels), np.array(sorted(found), np.int64).reshape(-1, 2))
    assert tuple(got) == _brute_counts(found, true, None)


def test_precision_recall_f1_hand_computed_and_undefined():
    assert evaluation.precision_recall_f1(evaluation.PairCounts(2, 1, 3)) == (2 / 3, 2 / 5, 1 / 2)  # 2PR / (P + R)
    assert evaluation.precision_recall_f1(evaluation.PairCounts(0, 0, 0)) == (None, None, None)


def test_thresholds_go_up_from_the_runs():
    assert thresholds(0.8) == [0.8, 0.85, 0.9, 0.95, 1.0]
    assert thresholds(0.72, 0.1) == [0.72, 0.8, 0.9, 1.0]
    assert thresholds(1.0) == [1.0]


# ------------------------------------------------------------------------------------------------ truth files

@pytest.mark.parametrize(("name", "text"), [
    ("t.tsv", "a\tb\tlabel\nx\ty\t1\ny\tz\tfalse\n"),
    ("t.csv", "x,y,TRUE\nz,y,0\n"),
    ("t.jsonl", '{"a": "x", "b": "y", "label": 1}\n\n{"a": "y", "b": "z", "label": false}\n'),
])
def test_labelled_pairs_in_each_format(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    truth = read_truth(str(tmp_path / name))
    assert sorted(truth.pairs or []) == [("x", "y", True), ("y", "z", False)]


def test_cluster_labels_with_a_header(tmp_path):
    (tmp_path / "c.csv").write_text("id,cluster\nx,1\ny,1\nz,2\n")
    assert read_truth(str(tmp_path / "c.csv")).clusters == {"x": "1", "y": "1", "z": "2"}


def test_matcher_exact_normalised_suffix_and_ambiguous():
    match = Matcher(["corpus/a.txt", "corpus/sub/b.txt", "other/b.txt", "rec-7"], "/home/u")
    assert match("rec-7") == "rec-7"
    assert match("./corpus//a.txt") == "corpus/a.txt"
    assert match("/home/u/corpus/a.txt") == "corpus/a.txt"
    assert match("a.txt") == "corpus/a.txt"
    assert match("sub/b.txt") == "corpus/sub/b.txt"
    assert match("b.txt") is None  # two documents end with it
    assert match("c.txt") is None


# ------------------------------------------------------------------------------------------------ end to end

@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """A run at t = 0.8 over: a and its copy (J = 1), b and an edit of it (0.8 < J < 0.9), c, d, e unrelated."""
    root = tmp_path_factory.mktemp("eval")
    rng = random.Random(3)
    words = {name: [f"w{rng.randrange(5000)}" for _ in range(200)] for name in "abcde"}
    docs = root / "docs"
    docs.mkdir()
    texts = {f"{name}.txt": " ".join(w) for name, w in words.items()}
    texts["a_copy.txt"] = texts["a.txt"]
    edited = list(words["b"])
    edited[50:54] = edited[140:144] = ["x1", "x2", "x3", "x4"]  # 16 of 196 shingles changed: J = 180/212
    texts["b_edit.txt"] = " ".join(edited)
    for name, text in texts.items():
        (docs / name).write_text(text)
    work = root / "work"
    assert invoke("-w", work, "run", docs, "--threshold", "0.8").exit_code == 0
    reference = brute_force_pairs(texts, 0.5)
    assert set(reference) == {("a.txt", "a_copy.txt"), ("b.txt", "b_edit.txt")}
    assert 0.8 < reference[("b.txt", "b_edit.txt")] < 0.9
    return root, work, docs


def test_eval_labelled_pairs_scores_computed_by_hand(small_run):
    root, work, docs = small_run
    truth = root / "truth.tsv"
    truth.write_text(f"{docs}/a.txt\t{docs}/a_copy.txt\t1\nb.txt\tb_edit.txt\t1\nc.txt\td.txt\t1\n"
                     "c.txt\te.txt\t0\nmissing.txt\te.txt\t0\n")
    rows, summary = scores("-w", work, "eval", "--truth", truth)
    assert [r["threshold"] for r in rows] == [0.8, 0.85, 0.9, 0.95, 1.0]
    # at 0.8: both pairs found, (c, d) missed: P = 1, R = 2/3, F1 = 4/5. Groups over the 7 known ids: the truth's
    # {a, a_copy} {b, b_edit} {c, d} {e}, the run's {a, a_copy} {b, b_edit} {c} {d} {e}: index 2, row pairs 3,
    # column pairs 2, C(7, 2) = 21: ARI = (2 - 6/21) / (5/2 - 6/21) = 24/31
    first = rows[0]
    assert (first["tp"], first["fp"], first["fn"], first["unjudged"]) == (2, 0, 1, 0)
    assert (first["precision"], first["recall"]) == (1.0, pytest.approx(2 / 3))
    assert first["f1"] == pytest.approx(0.8)
    assert first["ari"] == pytest.approx(24 / 31)
    # at 0.9 the edit is below: one pair of three, F1 = 1/2; groups: index 1, row pairs 3, column pairs 1
    at9 = rows[2]
    assert (at9["tp"], at9["fn"], at9["recall"], at9["f1"]) == (1, 2, pytest.approx(1 / 3), pytest.approx(0.5))
    assert at9["ari"] == pytest.approx((1 - 3 / 21) / (2 - 3 / 21))
    assert (summary["truth_ids"], summary["unknown_ids"], summary["labelled_known"]) == (8, 1, 4)


def test_eval_clusters_and_saved_pairs_agree_with_the_work_dir(small_run):
    root, work, _ = small_run
    truth = root / "clusters.jsonl"
    truth.write_text("".join(json.dumps({"id": i, "cluster": c}) + "\n" for i, c in
                             [("a.txt", 1), ("a_copy.txt", 1), ("b.txt", 2), ("b_edit.txt", 2), ("c.txt", 2)]))
    rows, summary = scores("-w", work, "eval", "--truth", truth)
    # true pairs: (a, a_copy) and the 3 among b, b_edit, c; found: the 2 at 0.8
    assert (rows[0]["tp"], rows[0]["fp"], rows[0]["fn"]) == (2, 0, 2)
    assert (summary["clusters"], summary["truth_ids"], summary["unknown_ids"]) == (2, 5, 0)
    saved = root / "pairs.jsonl"
    r = invoke("-w", work, "verify", "--format", "jsonl")
    saved.write_text(r.stdout)
    assert scores("eval", "--pairs", saved, "--truth", truth)[0] == rows


def test_eval_exact_equals_brute_force_and_the_recall_estimate(tmp_path):
    texts = _corpus(tmp_path / "docs")
    work = tmp_path / "work"
    # two bands of 4 rows: LSH misses pairs (P(0.7) = 0.42), so the measured recall has something to measure
    assert invoke("-w", work, "run", tmp_path / "docs", "-t", "0.5", "--num-perm", "8", "--bands", "2",
                  "--rows", "4").exit_code == 0
    found = {(p["a"], p["b"]): p["jaccard"] for p in _pairs(work)}
    truth = brute_force_pairs(texts, 0.5)
    rows, summary = scores("-w", work, "eval", "--truth", "exact", "--step", "0.1")
    assert summary["bands"] and summary["documents"] == len(texts)
    missed = 0
    for row in rows:
        t = row["threshold"]
        true_at = {p for p, j in truth.items() if j >= t}
        found_at = {p for p, j in found.items() if j >= t}
        assert found_at <= true_at
        assert (row["tp"], row["fp"], row["fn"]) == (len(found_at), 0, len(true_at - found_at))
        estimate = recall.estimate_recall(np.array(list(found.values())), *summary["bands"], t)
        assert row["estimated_recall"] == estimate.recall
        missed += row["fn"]
    assert missed > 0


def _corpus(folder: Path) -> dict[str, str]:
    """Base documents and edits of them at rates that spread Jaccard over 0.3-1."""
    rng = random.Random(11)
    folder.mkdir()
    texts = {}
    for i in range(12):
        words = [f"w{rng.randrange(3000)}" for _ in range(120)]
        texts[f"d{i}.txt"] = " ".join(words)
        for j, rate in enumerate((0.02, 0.05, 0.08, 0.12)):
            edited = [w if rng.random() > rate else f"v{rng.randrange(3000)}" for w in words]
            texts[f"d{i}_{j}.txt"] = " ".join(edited)
    for name, text in texts.items():
        (folder / name).write_text(text)
    return {str(folder / name): text for name, text in texts.items()}


def _pairs(work: Path) -> list[dict]:
    r = invoke("-w", work, "verify", "--format", "jsonl")
    return [rec for rec in map(json.loads, r.stdout.splitlines()) if rec["type"] == "pair"]


def test_api_evaluate_is_the_command_line(small_run):
    _, work, _ = small_run
    result = nearDup.evaluate("exact", workdir=work)
    rows, _ = scores("-w", work, "eval", "--truth", "exact")
    assert [json.loads(json.dumps(s.__dict__)) for s in result.scores] == rows


# ------------------------------------------------------------------------------------------------ bad input

@pytest.mark.parametrize(("text", "message"), [
    ("x\ty\tmaybe\nx\tz\t1\n", "truth.tsv:1: label 'maybe' is not 1, 0, true or false"),
    ("a\tb\tlabel\nx\tx\t1\n", "truth.tsv:2: 'x' is paired with itself"),
    ("x\ty\t1\ny\tx\t0\n", "truth.tsv:2: y and x are labelled both 1 and 0"),
    ("x\ty\t1\nz\t2\n", "truth.tsv:2: every line must be a labelled pair"),
    ("", "truth.tsv: empty"),
])
def test_bad_truth_is_one_line_on_stderr(small_run, tmp_path, text, message):
    _, work, _ = small_run
    (tmp_path / "truth.tsv").write_text(text)
    r = invoke("-w", work, "eval", "--truth", tmp_path / "truth.tsv")
    assert r.exit_code == 2 and r.stdout == ""
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_eval_refuses_what_it_cannot_score(small_run, tmp_path):
    _, work, _ = small_run
    for args, message in [(("eval", "--truth", tmp_path / "none.tsv"), "give the run to score"),
                          (("-w", work, "eval", "--truth", tmp_path / "none.tsv"), "none.tsv: no such file"),
                          (("eval", "--pairs", tmp_path / "p.jsonl", "--truth", "exact"), "needs the run's work dir")]:
        (tmp_path / "p.jsonl").write_text("")
        r = invoke(*args)
        assert r.exit_code == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.output
