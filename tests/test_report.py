"""The HTML report (issue 21) without a browser: one self-contained file, whose data equal the JSONL results,
byte-identical for the same input, with the shared passages marked in the original text."""
from __future__ import annotations

import importlib.util
import itertools
import json
import random
import re
import shutil
import subprocess
import sys
import unicodedata
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from nearDup.cli import cli
from nearDup.config import ShingleParams
from nearDup.report import figures, html
from nearDup.store.workdir import WorkDir

from conftest import SAMPLE, reference_shingles

extra = pytest.mark.skipif(not importlib.util.find_spec("jinja2"),
                           reason="the report needs nearDup[report] (jinja2): pip install '.[report]'")


def invoke(*args):
    jobs = [] if args[0] == "compare" else ["-j", "1"]  # (compare runs no stage: -j is refused there)
    return CliRunner().invoke(cli, [*jobs, *map(str, args)])


class Page(HTMLParser):
    """Every tag with its attributes, and the text of the inline JSON data."""

    def __init__(self, text: str):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.data = ""
        self._in_data = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        self._in_data = tag == "script" and attrs.get("id") == "data"

    def handle_endtag(self, tag):
        self._in_data = False

    def handle_data(self, data):
        if self._in_data:
            self.data += data

    def blob(self) -> dict:
        return json.loads(self.data)


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """sample_corpus run once with --report; the work dir, the report and the corpus."""
    root = tmp_path_factory.mktemp("report")
    docs = root / "docs"
    shutil.copytree(SAMPLE, docs)
    report = root / "run.html"
    r = invoke("-w", root / "w", "run", docs, "--report", report, "--format", "jsonl")
    assert r.exit_code == 0, r.output
    return {"root": root, "docs": docs, "w": root / "w", "report": report, "stdout": r.stdout}


@extra
def test_report_is_one_file_that_requests_nothing(sample):
    page = Page(sample["report"].read_text(encoding="utf-8"))
    urls = [(tag, name, value) for tag, attrs in page.tags for name, value in attrs.items()
            if name in ("src", "href", "xlink:href", "action", "data", "poster", "srcset") and value]
    assert urls, "the figures' internal references are there"
    assert all(value.startswith("#") for _, _, value in urls), urls  # only links inside the page
    assert not [t for t, a in page.tags if t in ("link", "iframe", "object", "embed", "img", "base")]
    assert [t for t, a in page.tags if t == "script" and "src" in a] == []
    csp = [a["content"] for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0]
    assert sum(t == "svg" for t, _ in page.tags) == 3  # S-curve, Jaccard histogram, group sizes


def _as_printed(record: dict, kind: str) -> dict:
    """A stored record (the page holds them as the work dir does) as `--format jsonl` prints it: with its type,
    and members without their document number."""
    out = {"type": kind, **record}
    if "members" in out:
        out["members"] = [{k: v for k, v in m.items() if k != "doc"} for m in out["members"]]
    return out


@extra
def test_report_data_equal_the_jsonl_results(sample):
    blob = Page(sample["report"].read_text(encoding="utf-8")).blob()
    printed = [json.loads(line) for line in sample["stdout"].splitlines()]
    assert [_as_printed(p, "pair") for p in blob["pairs"]] == [r for r in printed if r["type"] == "pair"]
    assert len(blob["pairs"]) == 10
    r = invoke("-w", sample["w"], "cluster", "--format", "jsonl")
    assert r.exit_code == 0
    groups = [json.loads(line) for line in r.stdout.splitlines() if '"type": "group"' in line]
    assert [_as_printed(g, "group") for g in blob["groups"]] == groups and len(groups) == 6
    # each member's size and date are its file's
    for g in blob["groups"]:
        for m in g["members"]:
            assert blob["docs"][str(m["doc"])][0] == Path(m["id"]).stat().st_size


@extra
def test_a_page_holds_at_most_max_pairs_pair_records_and_says_so(sample, monkeypatch):
    monkeypatch.setattr(html, "MAX_PAIRS", 4)
    data = html.load(WorkDir(sample["w"], create=False))
    printed = [json.loads(line) for line in sample["stdout"].splitlines()]
    assert [_as_printed(p, "pair") for p in json.loads(data.pairs_json)] == \
        [r for r in printed if r["type"] == "pair"][:4]
    assert any("first 4 of the 10 verified pairs" in note for note in data.notes)
    assert sum(data.verified_counts) == 10  # the figures still hold every pair (copies: one entry, many)


@extra
def test_report_is_byte_identical_for_the_same_input(sample, tmp_path):
    again = tmp_path / "again.html"
    assert invoke("-w", tmp_path / "w", "run", sample["docs"], "--report", again).exit_code == 0
    later = tmp_path / "later.html"
    assert invoke("-w", sample["w"], "report", "-o", later).exit_code == 0
    first = sample["report"].read_bytes()
    assert again.read_bytes() == first and later.read_bytes() == first
    assert b"<dc:date>" not in first and b"metadata" not in first


@extra
def test_members_sizes_and_summary_are_found_in_groups_whose_paths_look_like_their_keys(tmp_path):
    """The report finds each member's document, role and group size in the stored groups' text without parsing
    it: paths that spell those keys, with quotes and backslashes, and a reference, must not fool it."""
    rng = random.Random(7)
    docs, ref = tmp_path / "docs", tmp_path / "ref"
    docs.mkdir()
    ref.mkdir()
    names = ['a "doc": 7', 'b \\"size\\": 99', '"role": "duplicate"', "d \u00e9\\"]
    for n, name in enumerate(names):
        words = [f"w{rng.randrange(5000)}" for _ in range(60 + 10 * n)]
        (docs / f"{name}.txt").write_text(" ".join(words), encoding="utf-8")
        words[n] = "changed"
        (docs / f"{name} copy.txt").write_text(" ".join(words), encoding="utf-8")
        if n == 0:  # two references: one keeps the group, the other is a member of role reference
            (ref / "kept.txt").write_text(" ".join(words), encoding="utf-8")
            (ref / "kept too.txt").write_text(" ".join(words) + " more", encoding="utf-8")
    report = tmp_path / "r.html"
    r = invoke("-w", tmp_path / "w", "run", docs, "--reference", ref, "--groups", "--format", "jsonl",
               "--report", report)
    assert r.exit_code == 0, r.output
    groups = [g for g in map(json.loads, r.stdout.splitlines()) if g["type"] == "group"]
    assert len(groups) == 4 and {m["role"] for g in groups for m in g["members"]} == {"keeper", "duplicate",
                                                                                      "reference"}
    blob = Page(report.read_text(encoding="utf-8")).blob()
    assert [[m["id"] for m in g["members"]] for g in blob["groups"]] == [[m["id"] for m in g["members"]]
                                                                         for g in groups]
    assert {int(d): size for d, (size, _) in blob["docs"].items()} == {
        m["doc"]: Path(m["id"]).stat().st_size for g in blob["groups"] for m in g["members"]}
    data = html.load(WorkDir(tmp_path / "w", create=False))
    assert data.sizes == tuple(len(g["members"]) for g in groups)
    summary = r.stderr.splitlines()[-1].removeprefix("summary: ")
    assert dict(data.summary)["groups"] == summary and summary.startswith("4 groups, ")


@extra
def test_summary_and_histogram_hold_what_verify_and_cluster_found(sample):
    data = html.load(WorkDir(sample["w"], create=False))
    summary = dict(data.summary)
    assert summary["candidate pairs"] == "13" and summary["verified pairs"] == "10"
    assert summary["groups"].startswith("6 groups, 8 duplicates")
    # the rejected candidates' Jaccard (not stored by verify, recomputed) are pairs' true Jaccard, below 0.8
    texts = {p.name: p.read_text(encoding="utf-8") for p in sample["docs"].iterdir()}
    shingles = {name: reference_shingles(text) for name, text in texts.items()}
    truth = sorted(len(shingles[a] & shingles[b]) / len(shingles[a] | shingles[b])
                   for a, b in itertools.combinations(sorted(shingles), 2) if shingles[a] and shingles[b])
    assert sum(data.rejected_counts) == 3 and all(j < 0.8 for j in data.rejected)  # 3 pairs, as entries
    assert all(any(abs(j - t) < 1e-12 for t in truth) for j in data.rejected)
    expanded = [j for j, n in zip(data.verified, data.verified_counts) for _ in range(n)]  # entries -> pairs
    assert sorted(expanded) == sorted(p["jaccard"] for p in json.loads(data.pairs_json))
    assert (data.bands, data.rows, data.threshold) == (14, 9, 0.8)


def _figure(page: str, name: str) -> str:
    (svg,) = re.findall(rf'<svg [^>]*aria-labelledby="fig-{name}".*?</svg>', page, re.DOTALL)
    return svg


@extra
def test_figures_draw_the_brute_force_numbers(sample):
    """The figures' bars and points, read back from pygal's SVG, against numbers made here from the data: the
    histogram's bars (their titles) against the verified and rejected Jaccard, binned by hand, and their heights
    proportional to the stacked counts; the group sizes against the JSONL groups; the S-curve's points are the
    verified Jaccard on 1 - (1 - s^r)^b, and drawn on the curve."""
    page = sample["report"].read_text(encoding="utf-8")
    data = html.load(WorkDir(sample["w"], create=False))
    jaccard = _figure(page, "jaccard")
    bars = re.findall(r'<title>([\d.]+)-([\d.]+): (\d+) (verified|rejected)</title><rect [^>]*height="([\d.]+)"',
                      jaccard)
    drawn = {(kind, lo): int(n) for lo, _hi, n, kind, _h in bars}
    expected: dict = {}
    for kind, scores, counts in (("rejected", data.rejected, data.rejected_counts),
                                 ("verified", data.verified, data.verified_counts)):
        for j, n in zip(scores, counts or [1] * len(scores)):
            b = min(int(j * 50), 49)  # 50 bins of 0.02; 1.0 falls in the last one (numpy's closed last bin)
            expected[kind, f"{b / 50:.2f}"] = expected.get((kind, f"{b / 50:.2f}"), 0) + n
    assert drawn == expected and sum(n for (k, _), n in drawn.items() if k == "verified") == 10
    # stacked: a verified bar reaches rejected + verified of its bin, a rejected bar its own count
    tops = [(drawn.get(("rejected", lo), 0) + (int(n) if kind == "verified" else 0), float(h))
            for lo, _hi, n, kind, h in bars]
    assert len({round(h / top, 6) for top, h in tops}) == 1
    sizes = _figure(page, "sizes")
    r = invoke("-w", sample["w"], "cluster", "--format", "jsonl")
    groups = [json.loads(line) for line in r.stdout.splitlines() if '"type": "group"' in line]
    assert len(groups) == 6
    counted = {str(s): sum(g["size"] == s for g in groups) for s in {g["size"] for g in groups}}
    assert dict(re.findall(r"<title>(\d+) documents: (\d+) groups</title>", sizes)) == \
        {k: str(v) for k, v in counted.items()}
    curve = _figure(page, "scurve")
    points = re.findall(r'<title>s = ([\d.]+): P = ([\d.]+)</title><circle cx="([\d.]+)" cy="([\d.]+)"', curve)
    assert [float(s) for s, *_ in points] == sorted({round(j, 3) for j in data.verified}) and len(points) > 1
    (line,) = re.findall(r'<path d="M([\d. L]+)" class="line reactive nofill"', curve)[:1]
    xy = np.array(line.replace("L", "").split(), dtype=float).reshape(-1, 2)
    for s, p, x, y in points:
        assert float(p) == pytest.approx(1 - (1 - float(s) ** 9) ** 14, abs=6e-4)
        assert float(y) == pytest.approx(np.interp(float(x), xy[:, 0], xy[:, 1]), abs=1.0)  # on the drawn curve
    for svg in (jaccard, sizes, curve):  # nothing that changes between calls, nothing fetched
        assert "<!--" not in svg and "<script" not in svg and not re.search(r"[0-9a-f]{8}-[0-9a-f]{4}-", svg)


def test_nice_ticks_cover_the_largest_count_in_steps_of_1_2_or_5():
    for top in (0, 1, 3, 4.3, 7, 10, 11, 99, 1234, 10**6 + 1):
        ticks = figures.nice_ticks(top)
        step = ticks[1] - ticks[0]
        assert ticks[0] == 0 and ticks[-1] >= top and ticks[-2] < max(top, 1) and 2 <= len(ticks) <= 7
        assert step >= 1 and step / 10 ** len(str(int(step))[1:]) in (1, 2, 5)
        assert all(b - a == step for a, b in itertools.pairwise(ticks))


def _marked(segments) -> list[tuple[int, int]]:
    """The character ranges of the marked segments in the text they join into."""
    out, at = [], 0
    for text, n in segments:
        if n >= 0:
            out.append((at, at + len(text)))
        at += len(text)
    return out


def _covered_words(text: str, other: str, k: int) -> list[tuple[int, int]]:
    """Independently: the words of text (as positions in it) inside a k-shingle that other has too."""
    words = list(re.finditer(r"\w+", text))
    keys = [unicodedata.normalize("NFKC", w.group()).casefold() for w in words]
    theirs = reference_shingles(other, "word", k)
    covered = set()
    for i in range(len(keys) - k + 1):
        if tuple(keys[i:i + k]) in theirs:
            covered.update(range(i, i + k))
    return [(words[i].start(), words[i].end()) for i in sorted(covered)]


@extra
def test_pair_view_marks_the_shared_passages_in_the_original_text(tmp_path):
    shared = "The ﬁrst Straße of Café Naïve, said Mr. O'Brien (twice): \"Keep it!\"  Then  all went home"
    a_text = f"Unrelated opening words here today.\n{shared}. Alpha beta gamma delta epsilon zeta eta."
    b_text = f"Other start: one two three four five six.\n{shared.upper()}; and a different ending follows now."
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text(a_text, encoding="utf-8")
    b.write_text(b_text, encoding="utf-8")
    view = html.pair_view(str(a), str(b), "a", "b", ShingleParams(k=3))
    for text, other, segments in ((a_text, b_text, view.segments_a), (b_text, a_text, view.segments_b)):
        assert "".join(t for t, _ in segments) == text  # the original, whole, with its case and punctuation
        marked = _marked(segments)
        words = _covered_words(text, other, 3)
        assert words
        # every shared word is inside a mark, every mark starts and ends on a shared word
        assert all(any(lo <= s and e <= hi for lo, hi in marked) for s, e in words)
        starts, ends = {s for s, _ in words}, {e for _, e in words}
        assert all(lo in starts and hi in ends for lo, hi in marked)
    assert "Café Naïve" in "".join(t for t, n in view.segments_a if n >= 0)
    assert view.peers_a == [0] and view.peers_b == [0]  # one passage each, aligned with each other
    assert view.scores["shared"] > 0 and view.note == ""


def test_pair_views_are_explained_together_as_compare_explains_each_pair_each_way(tmp_path):
    """compare.explain_pairs (the pair views': each document read once, all shingled in one call) against
    compare.run each way, pair by pair, and each side's passages against a brute-force cover of the tokens by
    shared k-grams: repeated words, a text shorter than k; a binary or missing file refuses its pairs only."""
    from nearDup.errors import NearDupError
    from nearDup.pipeline import compare

    rng = random.Random(5)
    vocab = ["alpha", "beta", "gamma", "delta", "eps"]  # few words: shingles repeat within a text
    texts = [" ".join(rng.choices(vocab, k=n)) for n in (40, 35, 2, 60)]
    paths = []
    for n, text in enumerate(texts):
        paths.append(str(tmp_path / f"{n}.txt"))
        Path(paths[-1]).write_text(text, encoding="utf-8")
    binary, missing = tmp_path / "binary.txt", str(tmp_path / "missing.txt")
    binary.write_bytes(b"alpha\0beta")
    pairs = list(itertools.permutations(range(len(texts)), 2))
    for k in (1, 3, 5):
        params = ShingleParams(k=k)
        explained = compare.explain_pairs([(paths[a], paths[b]) for a, b in pairs]
                                          + [(paths[0], str(binary)), (missing, paths[1])], params)
        assert [str(e).split(":")[0] for e in explained[-2:]] == [str(binary), missing]
        assert all(isinstance(e, NearDupError) for e in explained[-2:])
        for (a, b), (ab, ba) in zip(pairs, explained):
            assert (ab, ba) == (compare.run(paths[a], paths[b], params, explain=True),
                                compare.run(paths[b], paths[a], params, explain=True))
            for side, other, result in ((a, b, ab), (b, a, ba)):
                mine, theirs = texts[side].split(), texts[other].split()
                grams = {tuple(theirs[i:i + k]) for i in range(max(1, len(theirs) - k + 1))}
                covered = np.zeros(len(mine), bool)
                for i in range(max(1, len(mine) - k + 1)):
                    if tuple(mine[i:i + k]) in grams:
                        covered[i:i + k] = True
                assert [i for s, e in result["passages"] for i in range(s, e)] == np.flatnonzero(covered).tolist()


@extra
def test_char_shingles_without_punctuation_are_marked_in_the_original_too(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("xyz  Hello,   World!  qrs", encoding="utf-8")
    b.write_text("hello world", encoding="utf-8")
    view = html.pair_view(str(a), str(b), "a", "b", ShingleParams(unit="char", k=4, strip_punct=True))
    assert "".join(t for t, _ in view.segments_a) == "xyz  Hello,   World!  qrs"
    assert [t for t, n in view.segments_a if n >= 0] == ["Hello,   World"]


@extra
def test_compare_writes_the_report_of_one_pair(sample, tmp_path):
    a, b = sample["docs"] / "lighthouses_original.txt", sample["docs"] / "lighthouses_reordered.txt"
    out = tmp_path / "pair.html"
    r = invoke("compare", a, b, "--report", out)
    assert r.exit_code == 0
    blob = Page(out.read_text(encoding="utf-8")).blob()
    (view,) = blob["views"]
    printed = dict(line.split("\t", 1) for line in r.stdout.splitlines())
    assert f"{view['scores']['jaccard']:.4f}" == printed["jaccard"]
    assert "".join(t for t, _ in view["sa"]) == a.read_text(encoding="utf-8")
    assert blob["groups"] == []


@extra
def test_report_of_a_work_dir_without_groups_names_the_stage_to_run(sample, tmp_path):
    w = tmp_path / "w"
    assert invoke("-w", w, "shingle", sample["docs"], "signature", "band", "candidates", "verify").exit_code == 0
    r = invoke("-w", w, "report", "-o", tmp_path / "r.html")
    assert r.exit_code == 2 and "cluster stage has not run" in r.stderr and len(r.stderr.splitlines()) == 1
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("missing", ["jinja2", "pygal"])
def test_without_the_extra_report_fails_in_one_line_before_any_work(tmp_path, missing):
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / f"{missing}.py").write_text("raise ImportError('not installed')\n")
    w = tmp_path / "w"
    r = subprocess.run([sys.executable, "-m", "nearDup", "-w", str(w), "run", str(SAMPLE), "--report",
                        str(tmp_path / "r.html")], capture_output=True, text=True,
                       env={"PYTHONPATH": str(blocker), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 2 and r.stdout == "" and r.stderr.splitlines() == [
        "neardup: error: --report needs jinja2 and pygal: pip install 'nearDup[report]'"]
    assert not w.exists() and not (tmp_path / "r.html").exists()


@extra
def test_a_moved_paragraph_is_its_own_passage_pointing_at_where_it_went(tmp_path):
    rng = random.Random(3)
    p1, p2, p3 = (" ".join(rng.choice(["alpha", "Beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "iota",
                                       "kappa", "lambda", "mu"]) + str(rng.randint(0, 99)) for _ in range(30))
                  for _ in range(3))
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text(f"{p1}\n\n{p2}\n\n{p3}\n", encoding="utf-8")
    b.write_text(f"{p2}\n\n{p1}\n\n{p3}\n", encoding="utf-8")
    view = html.pair_view(str(a), str(b), "a", "b", ShingleParams())
    assert [t for t, n in view.segments_a if n >= 0] == [p1, p2, p3]
    assert [t for t, n in view.segments_b if n >= 0] == [p2, p1, p3]
    assert view.peers_a == [1, 0, 2] and view.peers_b == [1, 0, 2]


@extra
def test_compare_report_of_stdin_is_refused_before_anything_is_printed(tmp_path):
    r = subprocess.run([sys.executable, "-m", "nearDup", "compare", "-", str(SAMPLE / "lighthouses_copy.txt"),
                        "--report", str(tmp_path / "r.html")], capture_output=True, text=True,
                       input=(SAMPLE / "lighthouses_original.txt").read_text(encoding="utf-8"))
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1 and "give files" in r.stderr
    assert not (tmp_path / "r.html").exists()
