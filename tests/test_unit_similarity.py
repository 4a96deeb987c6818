"""pipeline.similarity (the one exact-similarity path of verify, cluster, query and compare) against Python sets,
and the tokens that text.shingles.shingle_documents gives compare --explain against a re-based reference."""
from __future__ import annotations

import random
import re
import unicodedata

import numpy as np
import pytest

from nearDup.config import ShingleParams
from nearDup.kernels import sets
from nearDup.pipeline.similarity import agreement, containment, jaccard, one_shard, pair_records, set_overlap
from nearDup.text.read import Document
from nearDup.text.shingles import shingle_documents


def random_lists(rng: random.Random, n: int) -> list[list[int]]:
    """n shingle lists as a shard stores them (text order, repeats): small values so that sets overlap, some empty,
    some copies of another list in another order (equal sets, the path that skips the intersection)."""
    lists: list[list[int]] = []
    for _ in range(n):
        if lists and rng.random() < 0.25:
            copy = rng.choice(lists)[:]
            rng.shuffle(copy)
            lists.append(copy)
        else:
            size = rng.choice([0, 1, 3, 20, 200])
            lists.append([rng.randrange(300) for _ in range(size)] + [0xFFFFFFFF] * (rng.random() < 0.1))
    return lists


def store_of(lists: list[list[int]], shards: int) -> tuple[list, np.ndarray]:
    """lists cut into `shards` consecutive shards of CSR lists: (shards, starts)."""
    cuts = sorted({0, *(len(lists) * s // shards for s in range(1, shards))})
    parts = []
    for lo, hi in zip(cuts, cuts[1:] + [len(lists)]):
        chunk = lists[lo:hi]
        values = np.array([v for one in chunk for v in one], np.uint32)
        parts.append((values, np.r_[0, np.cumsum([len(one) for one in chunk])].astype(np.int64)))
    return parts, np.array(cuts, np.int64)


def brute(sa: set, sb: set) -> tuple[int, int, int, float, float, float]:
    inter = len(sa & sb)
    union = len(sa | sb)
    return (inter, len(sa), len(sb), inter / union if union else 0.0, inter / len(sa) if sa else 0.0,
            inter / len(sb) if sb else 0.0)


def check(inter, la, lb, truth) -> None:
    got = list(zip(inter.tolist(), la.tolist(), lb.tolist(), jaccard(inter, la, lb).tolist(),
                   containment(inter, la).tolist(), containment(inter, lb).tolist()))
    assert got == truth  # exact: the same integer divisions


@pytest.mark.parametrize("seed,shards", [(0, 1), (1, 3), (2, 7)])
def test_set_overlap_of_one_store_is_python_set_arithmetic(seed, shards):
    rng = random.Random(seed)
    lists = random_lists(rng, 60)
    a = np.array([rng.randrange(60) for _ in range(400)], np.int64)
    b = np.array([rng.randrange(60) for _ in range(400)], np.int64)
    inter, la, lb = set_overlap(*store_of(lists, shards), a, b)
    check(inter, la, lb, [brute(set(lists[x]), set(lists[y])) for x, y in zip(a.tolist(), b.tolist())])


@pytest.mark.parametrize("seed", [3, 4])
def test_set_overlap_of_sets_held_apart_is_python_set_arithmetic(seed):
    """A query's documents in memory (one shard) against an index's stored sets (several shards)."""
    rng = random.Random(seed)
    mine, stored = random_lists(rng, 5), random_lists(rng, 50)
    mine[2] = [5, 9, 9, 1]
    stored[7] = [9, 1, 5]  # a copy of a query document in the index
    a = np.array([rng.randrange(5) for _ in range(300)] + [2], np.int64)
    b = np.array([rng.randrange(50) for _ in range(300)] + [7], np.int64)
    values, offsets = store_of(mine, 1)[0][0]
    inter, la, lb = set_overlap(*one_shard((values, offsets)), a, b, other=store_of(stored, 4))
    check(inter, la, lb, [brute(set(mine[x]), set(stored[y])) for x, y in zip(a.tolist(), b.tolist())])
    assert inter[-1] == la[-1] == lb[-1] > 0


def test_set_overlap_of_no_pairs_is_empty():
    none = np.empty(0, np.int64)
    for other in (None, store_of([[1, 2]], 1)):
        inter, la, lb = set_overlap(*store_of([[1, 2], [2, 3]], 1), none, none, other=other)
        assert len(inter) == len(la) == len(lb) == 0


def test_agreement_is_the_share_of_equal_signature_entries():
    rng = np.random.default_rng(5)
    rows = rng.integers(0, 4, size=(30, 16), dtype=np.uint32)  # few values: many entries agree
    query = rng.integers(0, 4, size=(3, 16), dtype=np.uint32)
    a, b = rng.integers(0, 30, 100), rng.integers(0, 30, 100)
    stored = ([rows[:10], rows[10:25], rows[25:]], np.array([0, 10, 25]))
    truth = [sum(x == y for x, y in zip(rows[i].tolist(), rows[j].tolist())) / 16 for i, j in zip(a, b)]
    assert agreement(*stored, a, b).tolist() == truth
    q = rng.integers(0, 3, 100)
    truth = [sum(x == y for x, y in zip(query[i].tolist(), rows[j].tolist())) / 16 for i, j in zip(q, b)]
    assert agreement(*one_shard(query), q, b, other=stored).tolist() == truth
    assert agreement(*stored, np.empty(0, np.int64), np.empty(0, np.int64)).shape == (0,)


def test_pair_records_are_the_jsonl_fields_as_python_values():
    scores, sizes = np.array([[0.5, 0.25], [1.0, 1.0]]), np.array([[1, 2], [3, 3]], np.int64)
    records = list(pair_records(["x", "y"], ["z", "w"], scores, sizes))
    assert records == [{"a": "x", "b": "z", "jaccard": 0.5, "estimate": 0.25, "intersection": 1, "union": 2},
                       {"a": "y", "b": "w", "jaccard": 1.0, "estimate": 1.0, "intersection": 3, "union": 3}]
    assert all(type(r["intersection"]) is int and type(r["jaccard"]) is float for r in records)


# ------------------------------------------------------------------------ shingle_documents(tokens=...)

TEXTS = ["Der Bär läuft; the bear runs, ﬁne naïve café.", "", "one", "日本語 text mixed in", "plain ascii words here"]


def document(number: int, text: str, pieces=None) -> tuple[Document, dict]:
    return Document(f"d{number}", None if pieces else text, len(text), 0, "", False, pieces), {}


def reference_tokens(text: str, params: ShingleParams) -> list[str]:
    text = unicodedata.normalize("NFKC", text).casefold()
    if params.strip_punct:
        text = "".join(c for c in text if not unicodedata.category(c).startswith("P"))
    return re.findall(r"\w+", text) if params.unit == "word" else list(" ".join(text.split()))


@pytest.mark.parametrize("params", [ShingleParams("word", 2), ShingleParams("word", 3, strip_punct=True),
                                    ShingleParams("char", 3)])
def test_tokens_are_the_normalised_words_or_characters_and_leave_the_shingles_alone(params):
    plain = shingle_documents((document(i, t) for i, t in enumerate(TEXTS)), params, {})
    tokens: list = []
    records, values, offsets = shingle_documents((document(i, t) for i, t in enumerate(TEXTS)), params, {}, tokens)
    assert records == plain[0] and np.array_equal(values, plain[1]) and np.array_equal(offsets, plain[2])
    assert tokens == [reference_tokens(t, params) for t in TEXTS]
    for d, words in enumerate(tokens):  # shingle i of a document read whole starts at its token i
        hashes = values[offsets[d]:offsets[d + 1]].tolist()
        grams = [tuple(words[i:i + params.k]) for i in range(len(words) - params.k + 1)]
        assert len(hashes) == len(grams)
        assert len(set(zip(hashes, grams))) == len(set(hashes)) == len(set(grams))  # equal shingle, equal hash


def test_a_streamed_document_has_no_tokens():
    params, tokens = ShingleParams("word", 2), []
    text = "a streamed text of some words, " * 4
    shingle_documents([document(0, TEXTS[0]), document(1, text, iter([text[:31], text[31:]]))], params, {}, tokens)
    assert tokens == [reference_tokens(TEXTS[0], params), None]


def test_sets_of_a_document_equal_its_reference_set():
    """What compare counts (gather_sets of the CSR lists) is the set of its distinct shingles."""
    params = ShingleParams("word", 2)
    _, values, offsets = shingle_documents([document(0, "a b a b a b c")], params, {})
    assert sets.gather_sets([(values, offsets)], np.zeros(1, np.int64), [0])[1].tolist() == [3]  # ab, ba, bc
