"""Copies of one text pair, verify and group once (issue 17 item 12): the listing and the groups are what pairing
every document gives, checked against brute force and against the document-by-document bucket kernel."""
from __future__ import annotations

import io
import itertools
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nearDup.kernels import lsh
from nearDup.pipeline import copies

from conftest import brute_force_pairs, reference_shingles

WORDS = [f"w{i}" for i in range(5000)]


def neardup(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nearDup", *map(str, args)], capture_output=True)


def corpus(folder: Path, copies_of_base: int, rng: random.Random) -> dict[str, str]:
    """copies_of_base copies of one text; 3 edits of it (one of them copied 4 times); two copies of another text;
    unrelated texts. Every file has the same mtime, so keepers follow centrality, then names."""
    base = [rng.choice(WORDS) for _ in range(200)]
    texts = {f"c{i:04d}.txt": " ".join(base) for i in range(copies_of_base)}
    for e in range(3):
        edited = list(base)
        for at in rng.sample(range(200), 1 + e):
            edited[at] = rng.choice(WORDS)
        for c in range(4 if e == 1 else 1):
            texts[f"edit{e}-{c}.txt"] = " ".join(edited)
    other = " ".join(rng.choice(WORDS) for _ in range(150))
    texts.update({"other-a.txt": other, "other-b.txt": other})
    texts.update({f"u{i}.txt": " ".join(rng.choice(WORDS) for _ in range(100)) for i in range(5)})
    folder.mkdir()
    for name, text in texts.items():
        (folder / name).write_text(text)
    return {str(folder / name): text for name, text in texts.items()}


def distinct(texts: dict[str, str], threshold: float) -> tuple[dict[str, list[str]], dict]:
    """(names of each distinct text (equal strings), brute_force_pairs of the distinct texts): the pairs of every
    name, computed once per text instead of intersecting 4.5 million pairs of equal sets in Python."""
    names: dict[str, list[str]] = {}
    for name, text in sorted(texts.items()):
        names.setdefault(text, []).append(name)
    return names, brute_force_pairs({text: text for text in names}, threshold)


def all_pairs(texts: dict[str, str], threshold: float) -> dict:
    """brute_force_pairs(texts, threshold), through distinct()."""
    names, found = distinct(texts, threshold)
    out = {pair: 1.0 for group in names.values() for pair in itertools.combinations(group, 2)}
    for (x, y), j in found.items():
        out.update({(min(a, b), max(a, b)): j for a, b in itertools.product(names[x], names[y])})
    return out


def expected_listing(texts: dict[str, str], threshold: float) -> list[str]:
    """Every pair at Jaccard >= threshold, best first, then by ids, as `--print pairs` prints it."""
    found = all_pairs(texts, threshold)
    return [f"{j:.4f}\t{a}\t{b}" for (a, b), j in sorted(found.items(), key=lambda kv: (-kv[1], kv[0]))]


def test_thousands_of_copies_group_as_brute_force_says(tmp_path):
    """3,000 identical copies and near-duplicates with --max-bucket 100000: 4.5 million pairs, which took 88 s and
    1.2 GB; one entry now. The group is brute force's: its members, each one's Jaccard against the keeper, and the
    keeper the most central document (the copies tie; then the name)."""
    texts = corpus(tmp_path / "docs", 3000, random.Random(5))
    r = neardup("-w", tmp_path / "w", "run", tmp_path / "docs", "--max-bucket", 100000, "--print", "groups",
                "--format", "jsonl")
    assert r.returncode == 0, r.stderr
    groups = [g for g in map(json.loads, r.stdout.decode().splitlines()) if g["type"] == "group"]
    names, found = distinct(texts, 0.8)
    sets = {name: reference_shingles(text) for name, text in texts.items()}
    strength = {}  # each name's sum of Jaccard over its pairs: its copies' 1s, then the other texts'
    for text, group in names.items():
        near = sum(j * len(names[y if x == text else x]) for (x, y), j in found.items() if text in (x, y))
        strength.update({name: len(group) - 1 + near for name in group})
    members = {name for name, s in strength.items() if s > 0}
    keeper = min(members, key=lambda name: (-round(strength[name], 9), name))
    assert "/c0000.txt" in keeper
    near = {name for name in members if "other" not in name}  # every edit is within 0.8 of the base text
    assert all(len(sets[keeper] & sets[n]) / len(sets[keeper] | sets[n]) >= 0.8 for n in near)
    big = groups[0]
    assert big["keeper"] == keeper and big["size"] == len(near) == 3000 + 6
    assert {m["id"] for m in big["members"]} == near
    for m in big["members"]:
        a, b = sets[keeper], sets[m["id"]]
        assert m["jaccard"] == pytest.approx(len(a & b) / len(a | b), abs=1e-12)
    assert [sorted(m["id"] for m in g["members"]) for g in groups[1:]] == \
        [sorted(n for n in members if "other" in n)]
    count = sum(len(g) * (len(g) - 1) // 2 for g in names.values()) + sum(len(names[x]) * len(names[y])
                                                                         for x, y in found)
    assert f"verify: {count} of " in r.stderr.decode()  # (not all_pairs: 4.5 million tuples in pytest's memory)


def test_copies_list_every_pair_as_brute_force_says(tmp_path):
    """The pairs of 300 copies and their near-duplicates, byte for byte: the classes are expanded as they are
    printed, in the listing's order (best first, then by ids), with or without a --max-bucket that makes the
    copies' buckets stars in every band (then the anchor's pairs only, as before)."""
    texts = corpus(tmp_path / "docs", 300, random.Random(6))
    r = neardup("-w", tmp_path / "w", "run", tmp_path / "docs", "--max-bucket", 100000)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().splitlines() == expected_listing(texts, 0.8)
    jsonl = neardup("-w", tmp_path / "w", "run", tmp_path / "docs", "--max-bucket", 100000, "--format", "jsonl")
    records = [p for p in map(json.loads, jsonl.stdout.decode().splitlines()) if p.get("type", "pair") == "pair"]
    assert [(p["a"], p["b"]) for p in records] == [tuple(line.split("\t")[1:]) for line in
                                                   expected_listing(texts, 0.8)]
    # the candidate pairs verify reports are the document pairs that share a bucket in a band, by brute force
    from nearDup.store.workdir import WorkDir
    work = WorkDir(tmp_path / "w")
    manifest = work.manifest()
    keys = np.concatenate([np.load(work.part("band", n, "npy")) for n in manifest.shingle.shard_numbers])
    pairable = np.flatnonzero(copies.Pairing.load(work, manifest.candidates).pairable_mask())
    sharing = {(a, b) for a, b in itertools.combinations(pairable.tolist(), 2) if (keys[a] == keys[b]).any()}
    assert manifest.verify.stats.candidates == manifest.candidates.stats.candidates == len(sharing) > 300
    stars = neardup("-w", tmp_path / "w2", "run", tmp_path / "docs", "--max-bucket", 50)
    first = min(name for name in texts if "/c" in name)
    listed = stars.stdout.decode().splitlines()
    assert all(first in line.split("\t") for line in listed if line.startswith("1.0000") and "/c0" in line)
    assert set(listed) <= set(expected_listing(texts, 0.8))


def test_class_bucket_pairs_stand_for_exactly_the_document_pairs():
    """Against the kernel that pairs document by document: random buckets of copies, with and without buckets
    over max_bucket, expanded, are its pairs exactly."""
    rng = np.random.default_rng(3)
    for trial in range(40):
        n = int(rng.integers(2, 300))
        sets_of = rng.integers(0, max(2, n // 3), n)  # documents with equal values are copies
        label_of_doc = np.array([int(np.flatnonzero(sets_of == s)[0]) for s in sets_of])
        keys = rng.integers(0, max(2, n // 20), n).astype(np.uint64)
        keys = keys[label_of_doc]  # copies share their bucket
        numbers = np.arange(n, dtype=np.int64)
        rank = rng.permutation(n).astype(np.int64)
        max_bucket = int(rng.choice([2, 5, 40, 10**6]))
        sk, sn = lsh.band_index(keys, numbers)
        truth, truth_large = lsh.bucket_pairs(sk, sn, max_bucket, rank)
        class_pairs, stars, large = lsh.class_bucket_pairs(sk, sn, max_bucket, rank, label_of_doc)
        assert np.array_equal(large, truth_large)
        members = {c: np.flatnonzero(label_of_doc == c) for c in set(label_of_doc.tolist())}
        got = set(map(tuple, stars.tolist()))
        for a, b in class_pairs.tolist():
            expanded = itertools.combinations(members[a], 2) if a == b else itertools.product(members[a], members[b])
            got |= {(min(x, y), max(x, y)) for x, y in expanded}
        assert got == set(map(tuple, truth.tolist())), trial


def test_copies_hold_the_classes_of_several_documents_and_size_every_class():
    """Copies (the sparse form of the labels) against the labels themselves: each class's members, its label first
    and ascending, and its size, for classes of one and of several, with documents that cannot pair (-1)."""
    rng = np.random.default_rng(8)
    for _ in range(20):
        n = int(rng.integers(1, 60))
        value = rng.integers(0, max(2, n // 3), n)
        label = np.array([int(np.flatnonzero(value == v)[0]) for v in value])
        label[rng.random(n) < 0.2] = -1  # cannot pair: in no class
        label = np.where(label >= 0, label, -1)
        for c in set(label[label >= 0].tolist()):  # a class's label is its smallest member that can pair
            members = np.flatnonzero(label == c)
            label[members] = members[0]
        found = copies.Copies.of(label)
        classes = np.array(sorted(set(label[label >= 0].tolist())), np.int64)
        members, lengths = found.members(classes)
        truth = [np.flatnonzero(label == c).tolist() for c in classes.tolist()]
        assert lengths.tolist() == [len(t) for t in truth] == found.sizes(classes).tolist()
        assert members.tolist() == [m for t in truth for m in t]
        assert all(t[0] == c for t, c in zip(truth, classes.tolist()))
        assert set(found.rows[:, 1].tolist()) == {m for t in truth if len(t) > 1 for m in t}


def test_expanded_pairs_come_in_the_listing_order():
    """expanded_pairs against sorting every pair: random classes, lone documents, entries within and across."""
    rng = np.random.default_rng(4)
    old = copies.EXPAND_CHUNK
    copies.EXPAND_CHUNK = 7  # many chunks
    try:
        for trial in range(30):
            n = int(rng.integers(4, 80))
            value = rng.integers(0, max(2, n // 4), n)
            label = np.array([int(np.flatnonzero(value == v)[0]) for v in value])
            classes = sorted(set(label.tolist()))
            entries = set()
            for _ in range(int(rng.integers(1, 12))):
                a, b = sorted(rng.choice(classes, 2).tolist())
                entries.add((a, b, True))
                lone = sorted(rng.choice(n, 2, replace=False).tolist())
                if label[lone[0]] != label[lone[1]] and (min(label[lone]), max(label[lone]), True) not in entries:
                    entries.add((lone[0], lone[1], False))
            entries = sorted(entries)
            pairs = np.array([(a, b) for a, b, _ in entries], np.int64)
            is_class = np.array([c for *_, c in entries])
            score = rng.choice([1.0, 0.9, 0.85], len(entries))
            rank = rng.permutation(n).astype(np.int64)
            chunks = copies.expanded_pairs(copies.ClassPairs(pairs, is_class, copies.Copies.of(label)), rank, score)
            got = [(int(a), int(b), int(e)) for chunk in chunks for a, b, e in zip(*chunk)]
            truth = []
            for e, (a, b, is_c) in enumerate(entries):
                sa, sb = (np.flatnonzero(label == x) if is_c else np.array([x]) for x in (a, b))
                found = itertools.combinations(sa, 2) if is_c and a == b else itertools.product(sa, sb)
                truth += [(min(rank[x], rank[y]), max(rank[x], rank[y]), e) for x, y in found if x != y]
            truth.sort(key=lambda t: (-score[t[2]], t[0], t[1]))
            assert [(a, b) for a, b, _ in got] == [(a, b) for a, b, _ in truth], trial
            assert all(score[e] == score[t[2]] for (*_, e), t in zip(got, truth))
    finally:
        copies.EXPAND_CHUNK = old


def test_an_index_pairs_a_class_whose_first_document_was_deleted(tmp_path):
    """The class of copies is labelled by its first document; deleting it, adding another copy and editing one
    gives, on the index, what a run from scratch gives."""
    texts = corpus(tmp_path / "docs", 6, random.Random(7))
    assert texts
    index = tmp_path / "index"
    assert neardup("run", tmp_path / "docs", "--index", index, "--partition-docs", 4).returncode == 0
    (tmp_path / "docs" / "c0000.txt").unlink()
    shutil.copyfile(tmp_path / "docs" / "c0001.txt", tmp_path / "docs" / "b-new.txt")
    (tmp_path / "docs" / "c0003.txt").write_text((tmp_path / "docs" / "edit1-0.txt").read_text())
    for extra in ([], ["--groups", "--format", "jsonl"]):
        again = neardup("run", tmp_path / "docs", "--index", index, "--partition-docs", 4, *extra)
        scratch = neardup("-w", tmp_path / f"scratch{len(extra)}", "run", tmp_path / "docs", "--partition-docs", 4,
                          *extra)
        assert again.returncode == 0 and again.stdout == scratch.stdout, again.stderr
    files = {str(p): p.read_text() for p in (tmp_path / "docs").iterdir()}
    assert neardup("run", tmp_path / "docs", "--index", index).stdout.decode().splitlines() == \
        expected_listing(files, 0.8)


@pytest.mark.parametrize("extra", [[], ["--max-bucket", "3"]])
def test_the_summary_counts_the_documents_of_the_printed_pairs(tmp_path, extra):
    """summary: N pairs among M documents, with M counted from the stored entries (classes of copies, star pairs
    of large buckets), is the number of distinct paths in the pairs printed; with --new-only, of the new pairs."""
    texts = corpus(tmp_path / "docs", 12, random.Random(5))
    index = tmp_path / "index"
    r = neardup("run", tmp_path / "docs", "--index", index, "-t", 0.8, "-j", 1, *extra)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    names = {name for line in lines for name in line.split("\t")[1:3]}
    assert len(names) < len(texts) and r.stderr.decode().splitlines()[-1] == \
        f"summary: {len(lines)} pairs among {len(names)} documents"
    shutil.copy(tmp_path / "docs" / "edit1-0.txt", tmp_path / "docs" / "zz-new.txt")
    new = neardup("run", tmp_path / "docs", "--index", index, "-t", 0.8, "-j", 1, "--new-only", *extra)
    lines = new.stdout.decode().splitlines()
    names = {name for line in lines for name in line.split("\t")[1:3]}
    assert "zz-new.txt" in " ".join(names) and new.stderr.decode().splitlines()[-1] == \
        f"summary: {len(lines)} pairs among {len(names)} documents"


# ids a JSONL record may have: each breaks a naive line of some format (csv quoting, JSON escapes, rich markup,
# tabs and newlines in tsv, an undecodable byte, a bidi control, a terminal escape)
ODD_IDS = ['comma,"quote"', "new\nline", "tab\there", "caf\udce9", "[bold]markup[/]", "rtl\u202etxt", "üñí",
           "back\\slash", "cr\rname", "esc\x1b[2J"]


@pytest.fixture(scope="module")
def odd_runs(tmp_path_factory) -> tuple[dict[str, str], dict[str, Path]]:
    """(text of each id, work dir of each run) of one JSONL corpus: copies of a text under the ODD_IDS, 3 edits of
    it, a text with a copy and a 90% prefix, unrelated texts; run with classes of copies, with --max-bucket 5
    (the copies' buckets give star pairs, the other text's a class pair) and with --metric containment; and of
    its unrelated texts alone (no pair)."""
    root = tmp_path_factory.mktemp("odd")
    rng = random.Random(8)
    base = [rng.choice(WORDS) for _ in range(120)]
    texts = {name: " ".join(base) for name in ODD_IDS}
    for e in range(3):
        edited = list(base)
        for at in rng.sample(range(120), 1 + e):
            edited[at] = rng.choice(WORDS)
        texts[f"edit{e}"] = " ".join(edited)
    other = [rng.choice(WORDS) for _ in range(100)]
    texts.update({"other": " ".join(other), "other-copy": " ".join(other), "other-prefix": " ".join(other[:90])})
    texts.update({f"u{i}": " ".join(rng.choice(WORDS) for _ in range(80)) for i in range(4)})
    (root / "c.jsonl").write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in texts.items()))
    (root / "none.jsonl").write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in texts.items()
                                             if i.startswith("u")))
    runs = {"copies": ["c"], "stars": ["c", "--max-bucket", 5], "containment": ["c", "--metric", "containment"],
            "none": ["none"]}
    for name, (corpus_name, *extra) in runs.items():
        r = neardup("-w", root / name, "run", "--jsonl", root / f"{corpus_name}.jsonl", "-q", *extra)
        assert r.returncode == 0, r.stderr
    return texts, {name: root / name for name in runs}


@pytest.mark.parametrize("run", ["copies", "stars", "containment", "none"])
def test_stored_pairs_print_from_columns_as_their_records_do(odd_runs, run, monkeypatch):
    """Stored pairs are printed from copies.Listing's columns, without a record per pair: every format, with -0 or
    not, gives the bytes that printing the records gives (none: the csv header alone), and pairs.jsonl holds the
    records; so do the pairs involving some ids (--new-only), which count their pairs and documents as the
    records do. The records are brute force's pairs (classes of copies expanded; star pairs a subset;
    containment directed from the smaller set)."""
    from nearDup.pipeline.results import StoredPairs
    from nearDup.report.printer import Printer, text_stream
    from nearDup.store.workdir import WorkDir

    texts, dirs = odd_runs
    work = WorkDir(dirs[run])
    records = list(StoredPairs(work))
    assert records == work.load_jsonl(work.current("verify", "pairs.jsonl"), "verify")
    if run == "containment":
        shingles = {name: reference_shingles(text) for name, text in texts.items()}
        truth = {(frozenset((a, b)), len(shingles[a] & shingles[b]) / min(len(shingles[a]), len(shingles[b])))
                 for a, b in itertools.combinations(sorted(texts), 2)}
        assert {(frozenset((p["a"], p["b"])), p["containment"]) for p in records} == {t for t in truth if t[1] >= 0.8}
        assert all(len(shingles[p["a"]]) <= len(shingles[p["b"]]) for p in records)
    else:
        truth = sorted(((a, b, j) for (a, b), j in all_pairs(texts, 0.8).items()), key=lambda t: (-t[2], t[:2]))
        listed = [(p["a"], p["b"], p["jaccard"]) for p in records]
        assert listed == (truth if run == "copies" else []) if run != "stars" else \
            set(listed) < set(truth) and len(listed) > 10

    def printed(pairs, fmt: str, null: bool) -> bytes:
        out = io.BytesIO()
        stream = text_stream(out)
        Printer(stream, fmt, null=null).pairs(pairs, "containment" if run == "containment" else "jaccard")
        stream.flush()
        return out.getvalue()

    expected = {(fmt, null): printed(records, fmt, null) for fmt in ("tsv", "jsonl", "csv", "human", "fdupes")
                for null in (False, True)}

    def no_records(self):
        raise AssertionError("a record per pair")

    involving = {"edit1", "caf\udce9", "other-prefix", "u0"}  # --new-only: the pairs with an end among these
    kept = [p for p in records if p["a"] in involving or p["b"] in involving]
    assert 0 < len(kept) < len(records) or not records
    expected_kept = {(fmt, null): printed(kept, fmt, null) for fmt, null in expected}
    assert list(StoredPairs(work, involving)) == kept
    assert len(StoredPairs(work, involving)) == len(kept)
    assert StoredPairs(work, involving).documents() == len({p[end] for p in kept for end in ("a", "b")})
    assert StoredPairs(work).documents() == len({p[end] for p in records for end in ("a", "b")})

    monkeypatch.setattr(copies.Listing, "records", no_records)
    for at_once in (copies.LINES_AT_ONCE, 3):  # (3: the lines joined a few at a time give the same bytes)
        monkeypatch.setattr(copies, "LINES_AT_ONCE", at_once)
        for (fmt, null), text in expected.items():
            assert printed(StoredPairs(work), fmt, null) == text, (fmt, null)
            assert printed(StoredPairs(work, involving), fmt, null) == expected_kept[fmt, null], (fmt, null)


@pytest.mark.parametrize("run", ["copies", "stars", "containment"])
def test_the_report_of_a_run_prints_the_listing_its_verify_made_as_the_stored_files_give_it(odd_runs, run,
                                                                                           monkeypatch, tmp_path):
    """A run's report reads the Listing its verify stage made (remembered by WorkDir object and verify key), not
    the files again; every format prints what a listing read from the files prints, --new-only too. Another
    WorkDir of the same folder, and the same one once its verify record has another key, read the files."""
    from nearDup.pipeline.results import StoredPairs
    from nearDup.report.printer import Printer, text_stream
    from nearDup.store.workdir import WorkDir

    _, dirs = odd_runs
    work = WorkDir(dirs[run])

    def printed(pairs, fmt: str) -> bytes:
        out = io.BytesIO()
        stream = text_stream(out)
        Printer(stream, fmt).pairs(pairs, "containment" if run == "containment" else "jaccard")
        stream.flush()
        return out.getvalue()

    involving = {"edit1", "caf\udce9", "other-prefix", "u0"}
    from_files = {(fmt, new): printed(StoredPairs(work, involving if new else None), fmt)
                  for fmt in ("tsv", "jsonl", "csv") for new in (False, True)}
    made = copies.Listing.stored(work)  # as verify makes it: the remembered one gives the same lines
    key = work.manifest().verify.key
    made.remember(work, key)

    def no_files(*args):
        raise AssertionError("read from the files")

    with monkeypatch.context() as m:
        m.setattr(copies, "verified_entries", no_files)
        for (fmt, new), text in from_files.items():
            for _ in range(2):  # (its pairs made once and kept: the second print reads them)
                assert printed(StoredPairs(work, involving if new else None), fmt) == text, (fmt, new)
        with pytest.raises(AssertionError, match="read from the files"):
            assert StoredPairs(WorkDir(dirs[run]))._entries  # another WorkDir object
        copies.Listing.stored(work).remember(work, "another key")
        with pytest.raises(AssertionError, match="read from the files"):
            assert StoredPairs(work)._entries
