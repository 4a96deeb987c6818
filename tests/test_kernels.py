"""Kernels against the textbook (MMDS ch. 3), slow pure-Python references, and statistical bounds."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nearDup.config import ShingleParams
from nearDup.kernels import lsh, minhash, sets
from nearDup.kernels.hashing import fmix64
from nearDup.kernels.sets import csr_lists, csr_sets, gather_sets
from nearDup.kernels.shingle import CodePointHasher, kgram_hashes, word_characters, word_hashes
from nearDup.text.normalise import normalise


def csr(list_of_sets):
    values = np.concatenate([np.array(sorted(s), dtype=np.uint32) for s in list_of_sets]) if list_of_sets else []
    offsets = np.r_[0, np.cumsum([len(s) for s in list_of_sets])].astype(np.int64)
    return np.asarray(values, dtype=np.uint32), offsets


def exact_jaccard_kernel(a: set, b: set) -> float:
    values, offsets = csr([a, b])
    parts = [(values, offsets)]
    va, la = sets.gather_sets(parts, np.array([0]), [0])
    vb, lb = sets.gather_sets(parts, np.array([0]), [1])
    return float(sets.jaccard(sets.intersection_sizes(va, la, vb, lb), la, lb)[0])


def shingle_set(text: str, unit: str, k: int) -> set:
    params = ShingleParams(unit=unit, k=k)
    norm = normalise(text, params)
    th = word_hashes([norm])[0] if unit == "word" else CodePointHasher().hash_text(norm)
    _, hashes = kgram_hashes(th, np.array([len(th)]), k)
    return set(hashes.tolist())


# ------------------------------------------------------------------------------------------ MMDS examples

def test_mmds_jaccard_example_3_1():
    # MMDS Example 3.1: {a,b,c,d} and {c,d,e,f} share 2 of 6 elements.
    a, b, c, d, e, f = range(1, 7)
    assert exact_jaccard_kernel({a, b, c, d}, {c, d, e, f}) == pytest.approx(2 / 6)


def test_mmds_document_monument_char_3_shingles():
    # 'document' and 'monument' share the 3-shingles ume, men, ent: 3 of 9.
    assert exact_jaccard_kernel(shingle_set("document", "char", 3), shingle_set("monument", "char", 3)) == \
        pytest.approx(3 / 9)


def test_mmds_signature_matrix_example_3_8():
    # Figure 3.4's matrix: S1={0,3}, S2={2}, S3={1,3,4}, S4={0,2,3}; h1 = x+1 mod 5, h2 = 3x+1 mod 5.
    values, offsets = csr([{0, 3}, {2}, {1, 3, 4}, {0, 2, 3}])
    sig = minhash.affine_signatures(values, offsets, np.array([1, 3]), np.array([1, 1]), prime=5)
    assert sig.T.tolist() == [[1, 3, 0, 1], [0, 2, 0, 0]]


def test_mmds_figure_3_8_s_curve():
    s = [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
    expected = [0.006, 0.047, 0.186, 0.470, 0.802, 0.975, 0.9996]
    got = lsh.s_curve(s, 20, 5)
    for g, e in zip(got, expected):
        assert round(float(g), len(str(e)) - 2) == e


def test_threshold_and_inflection_formulas():
    assert lsh.approximate_threshold(20, 5) == pytest.approx((1 / 20) ** (1 / 5))
    b, r = 20, 5
    s = lsh.inflection_point(b, r)
    # P''(s) changes sign at the inflection point (numerical second difference).
    h = 1e-4
    second = lambda x: lsh.s_curve(x + h, b, r) - 2 * lsh.s_curve(x, b, r) + lsh.s_curve(x - h, b, r)
    assert second(s - 0.01) > 0 > second(s + 0.01)


# ------------------------------------------------------------------------------------------ choosing (b, r)

def _error_midpoint(t, b, r, steps=2000):
    """Independent integration (midpoint rule, plain Python) of the FP area below t and FN area above t."""
    p = lambda s: 1 - (1 - s ** r) ** b
    fp = sum(p((i + 0.5) * t / steps) for i in range(steps)) * t / steps
    fn = sum(1 - p(t + (i + 0.5) * (1 - t) / steps) for i in range(steps)) * (1 - t) / steps
    return lsh.FP_WEIGHT * fp + lsh.FN_WEIGHT * fn


@pytest.mark.parametrize("threshold,num_perm", [(0.5, 64), (0.8, 128), (0.9, 32)])
def test_optimal_bands_minimises_the_weighted_error(threshold, num_perm):
    b, r = lsh.optimal_bands(threshold, num_perm)
    assert b * r <= num_perm and lsh.s_curve(threshold + 0.02, b, r) > 0.8  # recall just above t
    assert lsh.optimal_bands(0.8, 128, 0.5, 0.5) == (9, 13)  # datasketch's choice with its equal weights
    best = _error_midpoint(threshold, b, r)
    for bb in range(1, num_perm + 1):
        for rr in range(1, num_perm // bb + 1):
            assert best <= _error_midpoint(threshold, bb, rr) + 1e-4


# ------------------------------------------------------------------------------------------ references

def test_word_table_is_pythons_backslash_w():
    import re

    table = word_characters()
    for cp in range(0x110000):
        if not 0xD800 <= cp <= 0xDFFF:
            assert table[cp] == (re.fullmatch(r"\w", chr(cp)) is not None), hex(cp)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",))), max_size=6))
def test_word_hashes_tokenise_like_re_findall(texts):
    import re

    hashes, counts, (starts, ends) = word_hashes(texts)
    joined = "\0".join(texts)
    words = [joined[a:b] for a, b in zip(starts.tolist(), ends.tolist())]
    assert words == [w for t in texts for w in re.findall(r"\w+", t)]
    assert counts.tolist() == [len(re.findall(r"\w+", t)) for t in texts]
    by_word = {}
    for w, h in zip(words, hashes.tolist()):
        assert by_word.setdefault(w, h) == h  # equal words, equal hashes


def test_word_table_fills_the_blocks_texts_use(monkeypatch):
    import re

    from nearDup.kernels import shingle

    monkeypatch.setattr(shingle, "_WORD_TABLE", np.zeros(0x110000, dtype=bool))
    monkeypatch.setattr(shingle, "_WORD_BLOCKS_DONE", np.zeros(0x110000 >> 12, dtype=bool))
    texts = ["caf\u00e9 \u201cquoted\u201d", "\u0436\u0443\u043a \u4e2d\u6587\u5b57 x\u0301y",
             "\U0001d400\U0001d401 \u00bd_1"]  # Latin-1, punctuation, Cyrillic, CJK, a combining mark, maths
    _, _, (starts, ends) = word_hashes(texts)
    joined = "\0".join(texts)
    assert [joined[a:b] for a, b in zip(starts.tolist(), ends.tolist())] == re.findall(r"\w+", joined)
    touched = sorted({ord(c) >> 12 for c in joined} | {0})
    assert np.flatnonzero(shingle._WORD_BLOCKS_DONE).tolist() == touched  # only what the texts needed


def test_word_hashes_rarely_collide():
    words = [f"w{i}" for i in range(200_000)] + ["a" * n for n in range(1, 300)]
    hashes = word_hashes([" ".join(words)])[0]
    assert len(set(hashes.tolist())) >= len(words) - 20  # 32-bit: ~5 expected collisions among 200k

def test_csr_sets_matches_python_sets():
    rng = np.random.default_rng(1)
    doc = np.sort(rng.integers(0, 50, 3000))
    h = rng.integers(0, 400, 3000).astype(np.uint32)  # many repeats
    values, offsets = csr_sets(doc, h, 52)
    for d in range(52):
        assert values[offsets[d]:offsets[d + 1]].tolist() == sorted(set(h[doc == d].tolist()))


def test_stored_lists_keep_order_and_repeats_and_gather_gives_sorted_sets():
    """Shards keep each document's hashes as a list (text order, repeats); gather_sets, across partitions and in
    any requested order (repeats and empty documents too), gives each one as its sorted set."""
    rng = np.random.default_rng(5)
    lists = [rng.integers(0, 300, rng.integers(0, 400)).astype(np.uint32).tolist() for _ in range(60)]
    lists[7] = [0xFFFFFFFF, 5, 0xFFFFFFFF]
    doc = np.repeat(np.arange(60), [len(x) for x in lists])
    values, offsets = csr_lists(doc, np.concatenate([np.asarray(x, np.uint32) for x in lists]), 60)
    assert [values[offsets[d]:offsets[d + 1]].tolist() for d in range(60)] == lists
    shuffled = rng.permutation(len(doc))  # documents given in any order: each keeps its own order
    values, offsets = csr_lists(doc[shuffled], np.concatenate(lists).astype(np.uint32)[shuffled], 60)
    assert [sorted(values[offsets[d]:offsets[d + 1]].tolist()) for d in range(60)] == [sorted(x) for x in lists]
    parts = [csr_lists(np.repeat(np.arange(len(chunk)), [len(x) for x in chunk]),
                       np.concatenate([np.asarray(x, np.uint32) for x in chunk]), len(chunk))
             for chunk in (lists[:25], lists[25:])]
    wanted = rng.integers(0, 60, 200)
    got, lengths = gather_sets(parts, np.array([0, 25]), wanted)
    assert [x.tolist() for x in np.split(got, np.cumsum(lengths)[:-1])] == [sorted(set(lists[d])) for d in wanted]


def test_word_hashes_do_not_depend_on_the_batching():
    """Narrow (code points < 256) and wide texts are hashed in separate batches, then put back in order."""
    import re

    texts = ["plain ascii words", "café naïve", "wide 中文 Ωmega", "", "more plain", "x\u2019s é", "last one"] * 3
    hashes, counts, (starts, ends) = word_hashes(texts)
    joined = "\0".join(texts)
    assert [joined[a:b] for a, b in zip(starts.tolist(), ends.tolist())] == re.findall(r"\w+", joined)
    alone = [word_hashes([t])[0] for t in texts]
    assert hashes.tolist() == np.concatenate(alone).tolist()
    assert counts.tolist() == [len(h) for h in alone]


def test_csr_sets_any_order_and_the_largest_hash():
    """Documents in any order, of very different sizes; 0xFFFFFFFF (the row padding) as a real value."""
    rng = np.random.default_rng(3)
    doc = np.r_[rng.integers(0, 20, 5000), np.full(3000, 7), [19, 19]]
    h = rng.integers(0, 2**32, len(doc), dtype=np.uint64).astype(np.uint32)
    h[::7] = 0xFFFFFFFF
    h[::5] = 3
    values, offsets = csr_sets(doc, h, 21)
    for d in range(21):
        assert values[offsets[d]:offsets[d + 1]].tolist() == sorted(set(h[doc == d].tolist()))


def test_kgram_hashes_never_cross_documents_and_are_order_sensitive():
    th = np.array([1, 2, 3, 4, 5, 6], dtype=np.uint32)
    doc, _h = kgram_hashes(th, np.array([2, 1, 3]), 2)  # docs [1,2], [3], [4,5,6]
    assert doc.tolist() == [0, 2, 2]
    ab = kgram_hashes(np.array([7, 8], np.uint32), np.array([2]), 2)[1]
    ba = kgram_hashes(np.array([8, 7], np.uint32), np.array([2]), 2)[1]
    assert ab[0] != ba[0]


def test_affine_signatures_match_slow_reference():
    rng = np.random.default_rng(2)
    groups = [set(rng.integers(0, 2**32, rng.integers(0, 40)).tolist()) for _ in range(20)]
    values, offsets = csr(groups)
    a, b = minhash.draw_affine_parameters(16, seed=3)
    sig = minhash.affine_signatures(values, offsets, a, b)
    p = minhash.AFFINE_PRIME
    for d, s in enumerate(groups):
        for i in range(16):
            expected = min(((int(a[i]) * (x % p) + int(b[i])) % p for x in s), default=int(minhash.EMPTY))
            assert sig[d, i] == expected


def test_oph_matches_slow_reference_before_densification():
    rng = np.random.default_rng(4)
    groups = [set(rng.integers(0, 2**32, 300).tolist()) for _ in range(5)]
    values, offsets = csr(groups)
    n_perm = 32
    sig = minhash.oph_signatures(values, offsets, n_perm, seed=9)
    for d, s in enumerate(groups):
        permuted = minhash.permute32(np.array(sorted(s), dtype=np.uint32), 9).tolist()
        for i in range(n_perm):
            in_bin = [v for v in permuted if (v * n_perm) >> 32 == i]
            if in_bin:  # densified bins are checked by the collision tests below
                assert sig[d, i] == min(in_bin)


def test_permute32_is_a_bijection_on_a_sample():
    x = np.arange(1 << 20, dtype=np.uint32)
    assert len(np.unique(minhash.permute32(x, 5))) == len(x)


def test_empty_sets_get_empty_rows():
    values, offsets = csr([set(), {1, 2}])
    for sig in (minhash.oph_signatures(values, offsets, 8, 1),
                minhash.affine_signatures(values, offsets, *minhash.draw_affine_parameters(8, 1))):
        assert (sig[0] == minhash.EMPTY).all() and (sig[1] != minhash.EMPTY).all()


def test_intersection_sizes_match_python_sets():
    rng = np.random.default_rng(5)
    groups = [set(rng.integers(0, 60, rng.integers(0, 30)).tolist()) for _ in range(30)]
    values, offsets = csr(groups)
    parts = [(values[:offsets[10]], offsets[:11]), (values[offsets[10]:], offsets[10:] - offsets[10])]
    starts = np.array([0, 10])
    pairs = np.array(list(itertools.combinations(range(30), 2)))
    va, la = sets.gather_sets(parts, starts, pairs[:, 0])
    vb, lb = sets.gather_sets(parts, starts, pairs[:, 1])
    inter = sets.intersection_sizes(va, la, vb, lb)
    for (a, b), got in zip(pairs.tolist(), inter.tolist()):
        assert got == len(groups[a] & groups[b])


def test_bucket_pairs_match_brute_force_grouping():
    rng = np.random.default_rng(6)
    keys = rng.integers(0, 40, 200).astype(np.uint64)
    ids = np.arange(200, dtype=np.int64) * 3
    pairs, large = lsh.bucket_pairs(*lsh.band_index(keys, ids), max_bucket=10**6)
    expected = {(int(ids[i]), int(ids[j])) for i, j in itertools.combinations(range(200), 2) if keys[i] == keys[j]}
    assert {tuple(p) for p in pairs.tolist()} == expected and len(large) == 0


def test_large_buckets_become_stars_and_are_reported():
    keys = np.zeros(500, dtype=np.uint64)
    pairs, large = lsh.bucket_pairs(*lsh.band_index(keys, np.arange(500, dtype=np.int64)), max_bucket=100)
    assert len(pairs) == 499 and set(pairs[:, 0].tolist()) == {0}
    assert large.tolist()[0][:2] == [0, 500]
    rank = np.arange(500)[::-1].copy()  # the anchor is the first document by rank (id order), not by number
    pairs, large = lsh.bucket_pairs(*lsh.band_index(keys, np.arange(500, dtype=np.int64)), 100, rank)
    assert set(pairs[:, 1].tolist()) == {499} and large.tolist()[0][:2] == [499, 500]


@pytest.mark.parametrize("seed", range(4))
def test_bucket_members_are_the_whole_buckets_of_the_keys_asked(seed):
    """Against brute force, with buckets of 1 to 12 documents (past the steps that count a bucket before a second
    search), keys in no bucket, below the first key and above the last (the end of the index)."""
    rng = np.random.default_rng(seed)
    keys = np.repeat(rng.choice(1000, 60, replace=False).astype(np.uint64) * 2 + 1, rng.integers(1, 13, 60))
    numbers = rng.permutation(len(keys)).astype(np.int64)
    sorted_keys, sorted_numbers = lsh.band_index(keys, numbers)
    asked = np.unique(np.r_[rng.choice(keys, 30), rng.integers(0, 2200, 30).astype(np.uint64), 0, 2**64 - 1])
    got_keys, got_numbers = lsh.bucket_members(sorted_keys, sorted_numbers, asked)
    wanted = np.isin(sorted_keys, asked)
    assert np.array_equal(got_keys, sorted_keys[wanted]) and np.array_equal(got_numbers, sorted_numbers[wanted])


@given(st.lists(st.integers(0, 12), max_size=300), st.booleans())
@settings(max_examples=200, deadline=None)
def test_stable_argsort_is_numpys_stable_argsort(small, spread):
    """Against np.argsort(kind="stable") on keys with many ties (few distinct values), spread over 64 bits or not."""
    keys = np.array(small, np.uint64)
    if spread:
        keys = fmix64(keys)
    assert np.array_equal(sets.stable_argsort(keys), np.argsort(keys, kind="stable"))


def test_stable_argsort_of_large_hash_keys_with_copies():
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 2**63, 200_000, dtype=np.int64).astype(np.uint64)
    keys[rng.integers(0, len(keys), 20_000)] = keys[rng.integers(0, len(keys), 20_000)]  # copies: tied keys
    assert np.array_equal(sets.stable_argsort(keys), np.argsort(keys, kind="stable"))


@pytest.mark.parametrize("n", [0, 1, 5, 1000, 70_000])
def test_key_filter_holds_every_key_and_passes_absent_ones_at_the_rate_of_its_words(n):
    """Against brute force over Python ints: each word of the filter is the OR of its keys' bits (the word: a key's
    top L - 6 bits; the bits: its low 6-bit groups), so no key of the index is ever filtered out; an absent uniform
    key passes with probability mean over words of (set bits / 64)^FILTER_HASHES, which the sizing keeps under 3.5%
    (at least FILTER_BITS bits a key), checked on 200,000 keys within 5 standard deviations. A filter stored before
    (one hash: bit key >> (64 - L) of bytes) still reads as it did."""
    rng = np.random.default_rng(n)
    keys = np.unique(np.r_[rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True),
                           np.array([0, 2**64 - 1][:min(n, 2)], np.uint64)])
    bitmap = lsh.key_filter(keys)
    log = (len(bitmap) * 64).bit_length() - 1
    assert bitmap.dtype == np.uint64 and 1 << log == len(bitmap) * 64
    assert (1 << log) >= max(len(keys) * lsh.FILTER_BITS, 1 << lsh.FILTER_MIN_LOG)
    words = [0] * len(bitmap)
    for k in keys.tolist():
        for i in range(lsh.FILTER_HASHES):
            words[k >> (64 - (log - 6))] |= 1 << ((k >> (6 * i)) & 63)
    assert bitmap.tolist() == words
    assert lsh.may_hold(bitmap, keys).all()
    absent = rng.integers(0, 2**64 - 1, 200_000, dtype=np.uint64, endpoint=True)
    absent = absent[~np.isin(absent, keys)]
    share = float(np.mean([(bin(w).count("1") / 64) ** lsh.FILTER_HASHES for w in words]))
    assert share <= 0.035
    passed = lsh.may_hold(bitmap, absent).mean()
    assert abs(passed - share) <= 5 * np.sqrt(share * (1 - share) / len(absent)) + 1e-9
    asked = np.unique(np.r_[absent[:500], rng.choice(keys, min(n, 50)) if n else []]).astype(np.uint64)
    numbers = np.arange(len(keys))
    assert all(np.array_equal(a, b) for a, b in zip(lsh.bucket_members(keys, numbers, asked, bitmap),
                                                    lsh.bucket_members(keys, numbers, asked)))
    old = np.zeros(max(len(keys) * 8, 1 << 10) // 8, np.uint8)  # the one-hash filter of an index stored before
    old_log = (len(old) * 8).bit_length() - 1
    slots = np.array(sorted({k >> (64 - old_log) for k in keys.tolist()}), np.uint64)
    np.bitwise_or.at(old, (slots >> np.uint64(3)).astype(np.int64),
                     np.left_shift(1, slots & np.uint64(7)).astype(np.uint8))
    assert lsh.may_hold(old, keys).all()
    assert np.array_equal(lsh.may_hold(old, absent), np.isin(absent >> np.uint64(64 - old_log), slots))


def band_pairs_with_counts(keys, numbers, rank, max_bucket):
    """Candidate pairs of an index computed from nothing: every band's pairs, counted over the bands."""
    found = [lsh.bucket_pairs(*lsh.band_index(keys[:, j], numbers), max_bucket, rank)[0] for j in range(keys.shape[1])]
    pairs = np.concatenate(found)
    return lsh.count_pairs(pairs, np.ones(len(pairs), np.int64))


@pytest.mark.parametrize("seed", range(6))
def test_updating_a_band_index_gives_the_pairs_and_counts_of_one_built_from_nothing(seed):
    """An index kept as runs (a base, a segment, documents that left earlier still in them), then documents
    deleted, new ones appended as one more run, ids reordered (renames): the pairs of the touched buckets, added
    to the old pairs, equal what a fresh index gives, large buckets and anchors included; the runs compacted are
    the fresh index. Odd seeds look the runs up through their key filters."""
    rng = np.random.default_rng(seed)
    n_old, n_new, bands, max_bucket = 300, 40, 3, 4
    # buckets of ~5: many too large; keys spread over 64 bits as band keys are (fmix64: a bijection)
    keys = fmix64(rng.integers(0, 60, (n_old + n_new, bands)).astype(np.uint64))
    left = np.zeros(n_old, bool)
    left[rng.choice(n_old, 20, replace=False)] = True  # left before the last run: in the runs, not indexed
    old = np.flatnonzero(~left)
    old_rank = np.full(n_old, -1)
    old_rank[rng.permutation(old)] = np.arange(len(old))
    old_pairs, old_counts = band_pairs_with_counts(keys[old], old, old_rank, max_bucket)
    dead = np.zeros(n_old, bool)
    dead[rng.choice(old, 25, replace=False)] = True
    now = np.r_[np.flatnonzero(~left & ~dead), np.arange(n_old, n_old + n_new)]
    rank = np.full(n_old + n_new, -1)
    rank[rng.permutation(now)] = np.arange(len(now))  # renames move documents in id order
    want_pairs, want_counts = band_pairs_with_counts(keys[now], now, rank, max_bucket)
    found, counts = [old_pairs], [old_counts]
    new = np.arange(n_old, n_old + n_new)
    for j in range(bands):
        runs = [lsh.band_index(keys[lo:hi, j], np.arange(lo, hi)) for lo, hi in ((0, 200), (200, n_old))]
        large_keys = lsh.bucket_pairs(*lsh.band_index(keys[old, j], old), max_bucket, old_rank)[1][:, 2]
        filtered = [(k, n, lsh.key_filter(k)) for k, n in runs] if seed % 2 else runs
        new_run, lost, gained, large = lsh.update_band(filtered, old_rank, large_keys, keys[:n_old][dead, j],
                                                       keys[new, j], new, rank, max_bucket)
        fresh = lsh.band_index(keys[now, j], now)
        assert all(np.array_equal(a, b) for a, b in zip(lsh.merge_runs([*runs, new_run], rank), fresh))
        assert np.array_equal(large, lsh.bucket_pairs(*fresh, max_bucket, rank)[1])
        found += [lost, gained]
        counts += [-np.ones(len(lost), np.int64), np.ones(len(gained), np.int64)]
    pairs, counts = lsh.count_pairs(np.concatenate(found), np.concatenate(counts))
    assert (counts >= 0).all()
    assert np.array_equal(pairs[counts > 0], want_pairs) and np.array_equal(counts[counts > 0], want_counts)


def test_band_keys_equal_exactly_when_bands_equal():
    sig = np.array([[1, 2, 3, 4], [1, 2, 9, 4], [5, 2, 3, 4]], dtype=np.uint32)
    keys = lsh.band_keys(sig, 2, 2)
    assert keys[0, 0] == keys[1, 0] and keys[0, 1] != keys[1, 1]
    assert keys[0, 0] != keys[2, 0] and keys[0, 1] == keys[2, 1]


# ------------------------------------------------------------------------------------------ statistics

def _pairs_with_jaccard(rng, j: float, size: int, count: int):
    """count pairs of random sets with |A| = |B| = size and Jaccard exactly j (up to rounding of |A ∩ B|)."""
    inter = round(2 * size * j / (1 + j))
    groups, truth = [], []
    for _ in range(count):
        pool = rng.choice(2**32, size=2 * size - inter, replace=False).astype(np.uint32)
        groups += [set(pool[:size].tolist()), set(pool[size - inter:].tolist())]
        truth.append(inter / (2 * size - inter))
    return groups, float(np.mean(truth))


@pytest.mark.parametrize("method", ["oph", "permutation"])
@pytest.mark.parametrize("j,size", [(0.2, 400), (0.5, 30), (0.8, 150), (0.9, 2000)])
def test_minhash_estimate_is_unbiased(method, j, size):
    """The mean estimate over independent pairs lies within 4 standard errors of the true mean Jaccard."""
    rng = np.random.default_rng(int(j * 100) + size)
    groups, truth = _pairs_with_jaccard(rng, j, size, 300)
    values, offsets = csr(groups)
    num_perm = 128
    if method == "oph":
        sig = minhash.oph_signatures(values, offsets, num_perm, seed=11)
    else:
        sig = minhash.affine_signatures(values, offsets, *minhash.draw_affine_parameters(num_perm, 11))
    estimates = (sig[0::2] == sig[1::2]).mean(axis=1)
    se = estimates.std(ddof=1) / np.sqrt(len(estimates))
    assert abs(estimates.mean() - truth) < 4 * se + 1e-3
    # and the spread is what a binomial over num_perm rows predicts, within a factor (densification adds some)
    assert estimates.std() < 2 * np.sqrt(truth * (1 - truth) / num_perm) + 1e-3


def test_stored_numbers_are_int32_while_they_fit():
    assert lsh.stored_numbers(np.array([0, 2**31 - 1])).dtype == np.int32
    assert lsh.stored_numbers(np.array([0, 2**31 - 1])).tolist() == [0, 2**31 - 1]
    beyond = np.array([5, 2**31])
    assert lsh.stored_numbers(beyond).dtype == np.int64 and lsh.stored_numbers(beyond).tolist() == [5, 2**31]
    assert lsh.stored_numbers(np.empty((4, 0), np.int64)).shape == (4, 0)  # (a band index of no documents)


def test_merge_sorted_is_the_stable_sort_of_the_concatenation():
    """Two sorted runs merged (either one the smaller), many keys tied within and across them: as a stable sort
    of a's entries then b's would order them; _merged folds any number of runs the same way."""
    rng = np.random.default_rng(12)
    for n_a, n_b in ((0, 5), (5, 0), (3, 400), (400, 3), (250, 250)):
        runs = []
        for n in (n_a, n_b, rng.integers(0, 50)):
            keys = np.sort(rng.integers(0, 40, n).astype(np.uint64))
            runs.append((keys, rng.integers(0, 10**6, n)))
        concatenated = [np.concatenate(x) for x in zip(*runs)]
        order = np.argsort(concatenated[0], kind="stable")
        keys, numbers = lsh._merged(runs)
        assert keys.tolist() == concatenated[0][order].tolist() and numbers.tolist() == concatenated[1][order].tolist()
        keys, numbers = lsh.merge_sorted(*runs[0], *runs[1])
        two = np.argsort(np.r_[runs[0][0], runs[1][0]], kind="stable")
        assert numbers.tolist() == np.r_[runs[0][1], runs[1][1]][two].tolist()


def test_identical_sets_labels_equal_exactly_the_equal_sets():
    rng = np.random.default_rng(5)
    for _ in range(20):
        distinct = [np.sort(rng.choice(500, rng.integers(0, 15), replace=False)).astype(np.uint32) for _ in range(25)]
        chosen = [distinct[i] for i in rng.integers(0, 25, 80)]
        labels = sets.identical_sets(np.concatenate(chosen), np.array([len(c) for c in chosen]))
        for i, j in itertools.combinations(range(80), 2):
            assert (labels[i] == labels[j]) == (chosen[i].tolist() == chosen[j].tolist())


def test_identical_sets_are_exact_when_fingerprints_collide():
    """Sets are grouped by a fingerprint (length, sum) and confirmed against their group's first, element by
    element. Small sets of small values collide often ({1, 4} and {2, 3}): a shared label must still mean equal
    sets (an equal set outside its group's first may then keep a label of its own: a missed shortcut, never a
    wrong one)."""
    rng = np.random.default_rng(8)
    distinct = {tuple(sorted(rng.choice(12, rng.integers(1, 4), replace=False).tolist())) for _ in range(60)}
    distinct = [np.array(d, np.uint32) for d in sorted(distinct)]
    chosen = [distinct[i] for i in rng.integers(0, len(distinct), 150)]
    fingerprints = {(len(c), int(c.sum())) for c in chosen}
    assert len(fingerprints) < len({c.tobytes() for c in chosen})  # (unequal sets do collide here)
    labels = sets.identical_sets(np.concatenate(chosen), np.array([len(c) for c in chosen]))
    shared = 0
    for i, j in itertools.combinations(range(150), 2):
        if labels[i] == labels[j]:
            assert chosen[i].tolist() == chosen[j].tolist()
            shared += 1
    assert shared > 0  # (the sets equal to their group's first still share its label)


