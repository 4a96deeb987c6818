"""Issue 22 items 1-2 wired end to end: the estimated recall a run prints (stderr, JSONL summary, inspect) against
the measured recall on generated corpora (brute-force exact Jaccard), a hand-computed case, and --recall."""
from __future__ import annotations

import html
import itertools
import json
import math
import random
import re

import numpy as np
import pytest
from click.testing import CliRunner

from nearDup import find_duplicates
from nearDup.cli import cli
from nearDup.errors import ParameterError
from nearDup.kernels import lsh

from conftest import brute_force_pairs


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def records(result) -> dict[str, list[dict]]:
    assert result.exit_code == 0, result.output
    out: dict[str, list[dict]] = {}
    for line in result.stdout.splitlines():
        record = json.loads(line)
        out.setdefault(record.pop("type"), []).append(record)
    return out


LINE = re.compile(r"estimated recall (\S+) \((\S+)-(\S+), 95%\): about (\d+) pairs? at J >= (\S+) (?:was|were) not")


def pair_corpus(folder, n_pairs: int, seed: int) -> dict[str, str]:
    """n_pairs disjoint pairs (a document and an edited copy; no document in two pairs, so that pairs become
    candidates independently, as the interval assumes) with Jaccard spread over about 0.35-0.9, and distinct
    words per pair so that no two pairs' documents are similar."""
    rng = random.Random(seed)
    texts = {}
    for i in range(n_pairs):
        words = [f"p{i}w{j}" for j in range(150)]
        copy = list(words)
        for _ in range(rng.randint(2, 20)):  # point substitutions: each removes up to 5 shingles
            copy[rng.randrange(len(copy))] = f"x{rng.randrange(10**9)}"
        texts[f"pair{i:03d}_a.txt"], texts[f"pair{i:03d}_b.txt"] = " ".join(words), " ".join(copy)
    folder.mkdir()
    for name, text in texts.items():
        (folder / name).write_text(text, encoding="utf-8")
    return {str(folder / name): text for name, text in texts.items()}


def test_estimated_recall_interval_covers_the_measured_recall(tmp_path):
    """One corpus of independent pairs, shingled once; each --seed draws new MinHash functions, so the LSH runs are
    independent draws. Truth: brute-force exact Jaccard. b = 8, r = 4 make P(0.5) = 0.40, so about a third of the
    pairs at J >= 0.5 are missed: the interval is put to work. The printed numbers are the summary record's."""
    t, bands, rows = 0.5, 8, 4
    texts = pair_corpus(tmp_path / "docs", 80, seed=3)
    truth = brute_force_pairs(texts, t)
    assert 40 <= len(truth) <= 75  # pairs above and below the threshold
    w = tmp_path / "w"
    assert invoke("-w", w, "-j", 1, "shingle", tmp_path / "docs").exit_code == 0
    covered, estimated, missed = [], [], []
    for seed in range(1, 21):
        r = invoke("-w", w, "-j", 1, "--format", "jsonl", "signature", "--seed", seed, "band", "--bands", bands,
                   "--rows", rows, "candidates", "verify", "-t", t)
        out = records(r)
        found = {tuple(sorted((p["a"], p["b"]))) for p in out["pair"]}
        assert found <= set(truth)  # precision 1
        measured = len(found) / len(truth)
        est = out["summary"][0]["recall"]
        printed = LINE.search(r.stderr)
        assert printed is not None, r.stderr
        assert [float(x) for x in printed.groups()[:3]] == [round(est[k], 3) for k in
                                                            ("recall", "recall_low", "recall_high")]
        assert int(printed.group(4)) == round(est["missed"])
        covered.append(est["recall_low"] <= measured <= est["recall_high"])
        estimated.append(est["missed"])
        missed.append(len(truth) - len(found))
    assert np.mean(covered) >= 0.8  # nominal 0.95; P(fewer than 16 of 20 | 0.95) < 0.02
    assert np.mean(estimated) == pytest.approx(np.mean(missed), rel=0.25)  # unbiased (Horvitz-Thompson)
    assert np.mean(missed) > 5  # misses to estimate


def test_estimated_recall_hand_computed_with_copies(tmp_path):
    """The printed estimate equals the Horvitz-Thompson sums done by hand over the pairs printed: each pair at
    similarity s stands for 1/P(s), P(s) = 1 - (1 - s^r)^b; copies (J = 1, P = 1) stand for themselves. Three
    identical copies of one text and an edited copy of it are one class pair in verify (pipeline.copies), which
    must count as the three pairs it stands for."""
    docs = tmp_path / "docs"
    docs.mkdir()
    words = [f"w{j}" for j in range(100)]
    edited = list(words)
    for at in (10, 40, 70):
        edited[at] = f"x{at}"
    other = [f"v{j}" for j in range(100)]
    other_edit = list(other)
    other_edit[50] = "y"
    for name, text in {"a1.txt": words, "a2.txt": words, "a3.txt": words, "b.txt": edited, "c.txt": other,
                       "d.txt": other_edit}.items():
        (docs / name).write_text(" ".join(text), encoding="utf-8")
    t, bands, rows = 0.5, 3, 2  # P = 0.898 at the edited copy's J = 0.73: a visible share of misses
    r = invoke("-w", tmp_path / "w", "--format", "jsonl", "run", docs, "-t", t, "--bands", bands, "--rows", rows)
    out = records(r)
    s = np.array([p["jaccard"] for p in out["pair"]])
    truth = brute_force_pairs({str(f): f.read_text() for f in docs.iterdir()}, t)
    assert sorted(s.tolist()) == sorted(truth.values()) == [81 / 111] * 3 + [91 / 101] + [1.0] * 3
    p = 1 - (1 - s ** rows) ** bands
    missed = float(((1 - p) / p).sum())
    est = out["summary"][0]["recall"]
    assert est["missed"] == pytest.approx(missed, rel=1e-12)
    assert est["recall"] == pytest.approx(7 / (7 + missed), rel=1e-12)
    # the class pair (a1..a3, b) is one draw standing for 3 pairs: variance 3^2 (1 - P) / P^2, not 3 (1 - P) / P^2;
    # the upper limit counts one more pair at t (kernels/recall.py), Wilson-Hilferty gamma quantile, rounded up
    edit, near = p[s == 81 / 111][0], p[s == 91 / 101][0]
    p_t = 1 - (1 - t ** rows) ** bands
    z = 1.959963984540054

    def upper(var):
        mean, var = missed + (1 - p_t) / p_t, var + (1 - p_t) / p_t ** 2
        c = var / (9 * mean ** 2)
        return math.ceil(max(mean * (1 - c + z * math.sqrt(c)) ** 3, missed))
    high = upper(9 * (1 - edit) / edit ** 2 + (1 - near) / near ** 2)
    assert est["missed_high"] == high != upper(3 * (1 - edit) / edit ** 2 + (1 - near) / near ** 2)
    assert est["recall_low"] == pytest.approx(7 / (7 + high)) and est["missed_low"] == 0
    line = f"estimated recall {7 / (7 + missed):.3f} ({est['recall_low']:.3f}-{est['recall_high']:.3f}, 95%): about " \
           f"{round(missed)} pairs at J >= 0.5 were not candidates"
    assert line in r.stderr
    inspected = invoke("-w", tmp_path / "w", "inspect")
    assert line in inspected.stdout and "'missed'" not in inspected.stdout
    assert invoke("-w", tmp_path / "w", "cluster", "report", "-o", tmp_path / "r.html").exit_code == 0
    assert html.escape(line, quote=False) in (tmp_path / "r.html").read_text()


def test_estimate_says_when_it_is_an_upper_bound(tmp_path):
    """A bucket over --max-bucket pairs by star only, which the S-curve does not know: the line says so."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(4):
        (docs / f"c{i}.txt").write_text(" ".join(f"w{j}" for j in range(60)) + f" end{i}", encoding="utf-8")
    r = invoke("-w", tmp_path / "w", "run", docs, "--max-bucket", 2)
    assert r.exit_code == 0 and "an upper bound: " in r.stderr and "over --max-bucket" in r.stderr


def test_replay_has_no_estimate(tmp_path):
    """Saved pairs carry no S-curve run: --replay's summary has no recall (README)."""
    docs = tmp_path / "docs"
    pair_corpus(docs, 3, seed=1)
    saved = tmp_path / "pairs.jsonl"
    saved.write_text(invoke("run", docs, "-w", tmp_path / "w", "--format", "jsonl", "-t", 0.3).stdout)
    out = records(invoke("run", "--replay", saved, "--format", "jsonl"))
    assert "recall" not in out["summary"][0]


# ------------------------------------------------------------------------------------------ --recall


def enumerate_for_recall(t: float, target: float, num_perm: int):
    """Independent truth: every (b, r) with b r <= num_perm and P(t) >= target; the least false-positive area."""
    ok = [(b, r) for b in range(1, num_perm + 1) for r in range(1, num_perm // b + 1)
          if lsh.s_curve(t, b, r) >= target]
    if not ok:
        return None
    fp, _ = lsh.error_areas(t, [b for b, _ in ok], [r for _, r in ok])
    return ok[int(np.argmin(fp))]


def test_recall_target_chooses_the_bands(tmp_path):
    docs = tmp_path / "docs"
    pair_corpus(docs, 5, seed=2)
    out = records(invoke("run", docs, "-w", tmp_path / "w", "--format", "jsonl", "-t", 0.6, "--recall", 0.99))
    b, r = out["header"][0]["params"]["bands"], out["header"][0]["params"]["rows"]
    assert (b, r) == enumerate_for_recall(0.6, 0.99, 128) and lsh.s_curve(0.6, b, r) >= 0.99
    api = find_duplicates(docs, threshold=0.6, recall=0.99)
    assert (api.params["bands"], api.params["rows"]) == (b, r)
    assert api.recall is not None and api.recall == out["summary"][0]["recall"]
    tuned = invoke("tune", "-t", 0.6, "--recall", 0.99)
    assert tuned.exit_code == 0 and f"b = {b} bands x r = {r} rows" in tuned.stdout
    assert f"--recall 0.99\t{b} x {r}\t{b * r}\t" in tuned.stdout  # the cost table lists it


def test_recall_target_out_of_reach_names_the_num_perm_that_reaches_it(tmp_path):
    need = next(m for m in itertools.count(1) if enumerate_for_recall(0.5, 0.999, m) is not None)
    r = invoke("run", tmp_path, "-t", 0.5, "--recall", 0.999, "--num-perm", need - 1)
    assert r.exit_code != 0 and "Traceback" not in r.output
    assert len(r.stderr.strip().splitlines()) == 1 and f"raise --num-perm to {need} or more" in r.stderr
    with pytest.raises(ParameterError, match=f"--num-perm to {need}"):
        find_duplicates(tmp_path, threshold=0.5, recall=0.999, num_perm=need - 1)
    both = invoke("run", tmp_path, "--recall", 0.9, "--bands", 4)
    assert both.exit_code != 0 and "either --recall or --bands/--rows" in both.stderr
    # the band stage on stored signatures: the fix is to re-run the signature stage
    docs = tmp_path / "docs"
    pair_corpus(docs, 2, seed=1)
    w = tmp_path / "w"
    assert invoke("-w", w, "shingle", docs, "signature", "--num-perm", need - 1).exit_code == 0
    staged = invoke("-w", w, "band", "-t", 0.5, "--recall", 0.999)
    assert staged.exit_code != 0 and f"signature --num-perm {need} band --recall 0.999" in staged.stderr


def test_an_index_keeps_its_recall_target(tmp_path):
    docs = tmp_path / "docs"
    pair_corpus(docs, 3, seed=4)
    index = tmp_path / "index"
    assert invoke("run", docs, "--index", index, "-t", 0.6, "--recall", 0.99).exit_code == 0
    assert invoke("run", docs, "--index", index, "-t", 0.6, "--recall", 0.99).exit_code == 0
    other = invoke("run", docs, "--index", index, "-t", 0.6, "--recall", 0.9)
    assert other.exit_code != 0 and "this index was built with band recall 0.99, not 0.9" in other.stderr


CANDIDATES = re.compile(r"candidates: (\d+) pairs? shares? a bucket")


def test_tune_on_a_work_dir_counts_each_choices_candidates_as_a_run_would(tmp_path):
    """`tune -w DIR` counts the candidates of every listed choice on the stored signatures. Independent truth: a
    run with that --bands/--rows on the same corpus, whose candidates stage reports its pairs. The corpus has
    exact copies (a class of three and one of two, whose pairs count as document pairs) and documents sharing a
    template, so that choices differ in what they pair."""
    docs = tmp_path / "docs"
    texts = pair_corpus(docs, 30, seed=5)
    first = sorted(texts)
    for i in range(3):
        (docs / f"copy{i}.txt").write_text(texts[first[0]] if i < 2 else texts[first[1]], encoding="utf-8")
    shared = " ".join(f"tpl{j}" for j in range(60))
    rng = random.Random(3)
    for i in range(12):
        (docs / f"tpl{i:02d}.txt").write_text(shared + " " + " ".join(f"t{i}x{rng.randrange(50)}" for _ in range(60)),
                                              encoding="utf-8")
    run = invoke("-w", tmp_path / "w", "run", docs, "-t", 0.5)
    assert run.exit_code == 0, run.output
    tuned = invoke("-w", tmp_path / "w", "tune")
    assert tuned.exit_code == 0, tuned.output
    table = [line.split("\t") for line in tuned.stdout.splitlines() if line.startswith(("default", "--recall"))]
    assert tuned.stdout.splitlines()[3].endswith("\tcandidates\trecall here") and len(table) == 5
    assert table[0][5] == CANDIDATES.search(run.stderr).group(1)  # the run's own choice
    counts = set()
    for i, row in enumerate(table[1:]):
        b, r = row[1].split(" x ")
        other = invoke("-w", tmp_path / f"w{i}", "run", docs, "-t", 0.5, "--bands", b, "--rows", r)
        assert other.exit_code == 0, other.output
        assert row[5] == CANDIDATES.search(other.stderr).group(1), (row, other.stderr)
        counts.add(row[5])
        assert 0.0 <= float(row[6]) <= 1.0
    assert len(counts) > 1  # the choices differ on this corpus, so the counts say something


def test_recall_under_another_choice_is_estimated_without_bias():
    """The recall a choice (20, 3) would have, estimated from the pairs a run with (8, 4) found, against its true
    expected recall over the population (mean P(s)); with an exact join (found_with None) it is that mean."""
    from nearDup.kernels.recall import recall_under

    rng = np.random.default_rng(11)
    s = rng.uniform(0.5, 1.0, 400)
    truth = float(lsh.s_curve(s, 20, 3).mean())
    assert recall_under(s, np.ones(400), None, 20, 3, 0.5) == pytest.approx(truth)
    weights = rng.integers(1, 4, 400)
    assert recall_under(s, weights, None, 20, 3, 0.5) == pytest.approx(
        float((weights * lsh.s_curve(s, 20, 3)).sum() / weights.sum()))
    estimates = []
    for _ in range(300):
        found = rng.random(400) < lsh.s_curve(s, 8, 4)
        estimates.append(recall_under(s[found], np.ones(found.sum()), (8, 4), 20, 3, 0.5))
    spread = float(np.std(estimates)) / math.sqrt(len(estimates))
    assert abs(float(np.mean(estimates)) - truth) < 4 * spread + 1e-3
    assert recall_under(np.array([0.3]), np.ones(1), (8, 4), 20, 3, 0.5) is None


def test_tune_gives_an_upper_bound_when_the_pairs_are_too_many_to_list(tmp_path, monkeypatch):
    from nearDup.pipeline import tune
    from nearDup.store.workdir import WorkDir

    docs = tmp_path / "docs"
    pair_corpus(docs, 20, seed=8)
    assert invoke("-w", tmp_path / "w", "run", docs, "-t", 0.5).exit_code == 0
    corpus = tune.SignedCorpus(WorkDir(tmp_path / "w", create=False))
    exact = corpus.cost(25, 2, 0.5)
    monkeypatch.setattr(tune, "DISTINCT_CAP", 0)
    bound = corpus.cost(25, 2, 0.5)
    assert exact.distinct and not bound.distinct and bound.candidates >= exact.candidates > 0
    assert bound.recall == exact.recall
    shown = invoke("-w", tmp_path / "w", "tune")
    assert "\t<=" in shown.stdout
