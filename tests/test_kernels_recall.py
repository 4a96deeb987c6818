"""Issue 22's kernels against independent truth: the recall estimate on simulated LSH runs (statistical, fixed
seeds), the S-curve on nearDup's own MinHash, the choice of (b, r) for a recall target by enumeration, and the
exact joins against brute force (hypothesis)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from nearDup.kernels import lsh, minhash, recall

# ------------------------------------------------------------------------------------------ estimated recall


def _simulate(threshold, bands, rows, draw, trials, seed, confidence=0.95):
    """trials simulated LSH runs: a population of pairs with similarities draw(rng) (those >= threshold count),
    each found with probability P(s); returns (covered, estimated misses, true misses) over the runs where
    something was found."""
    rng = np.random.default_rng(seed)
    covered, estimated, true = [], [], []
    for _ in range(trials):
        s = draw(rng)
        s = s[s >= threshold]
        found = rng.random(len(s)) < lsh.s_curve(s, bands, rows)
        below = rng.uniform(0, threshold, 20)  # verified pairs under the threshold must not count
        est = recall.estimate_recall(np.r_[below, s[found]], bands, rows, threshold, confidence)
        assert est.found == found.sum()
        if est.recall is None:
            continue
        measured = found.sum() / len(s)
        covered.append(est.recall_low <= measured <= est.recall_high)
        estimated.append(est.missed)
        true.append(len(s) - found.sum())
    return np.array(covered), np.array(estimated), np.array(true)


SCENARIOS = [  # (threshold, (b, r), similarity distribution of the pairs, trials)
    (0.5, lsh.optimal_bands(0.5, 128), lambda rng: rng.uniform(0.4, 1.0, 2000), 500),
    (0.5, lsh.optimal_bands(0.5, 128), lambda rng: rng.beta(2, 5, 3000), 500),
    (0.8, lsh.optimal_bands(0.8, 128), lambda rng: rng.uniform(0.7, 1.0, 2000), 500),
    (0.9, lsh.optimal_bands(0.9, 128), lambda rng: rng.uniform(0.8, 1.0, 2000), 500),
    (0.8, (4, 8), lambda rng: rng.uniform(0.7, 1.0, 1000), 500),     # a poor band choice: ~100 misses a run
    (0.8, (2, 16), lambda rng: rng.uniform(0.7, 1.0, 300), 500),     # P(t) = 0.05: found pairs stand for many
    # few misses: a handful of pairs just above t, the rest near-copies
    (0.8, lsh.optimal_bands(0.8, 128), lambda rng: np.r_[rng.uniform(0.8, 0.83, 30), np.full(500, 0.999)], 500),
    (0.5, lsh.optimal_bands(0.5, 128), lambda rng: rng.uniform(0.4, 1.0, 100), 500),
]


@pytest.mark.parametrize("threshold,br,draw,trials", SCENARIOS)
def test_recall_interval_covers_the_measured_recall(threshold, br, draw, trials):
    covered, _, _ = _simulate(threshold, *br, draw, trials, seed=int(threshold * 100) + br[0] * 7 + br[1])
    # nominal 0.95; 500 runs put the observed coverage within ~0.03 of the true one (3 standard errors)
    assert covered.mean() >= 0.95 - 0.03
    assert len(covered) >= 0.9 * trials


@pytest.mark.parametrize("threshold,br,draw,trials", SCENARIOS[:6])
def test_estimated_misses_are_unbiased(threshold, br, draw, trials):
    """Horvitz-Thompson: E[missed] = E[true misses]; the mean difference over runs lies within 4 standard
    errors of 0."""
    _, est, true = _simulate(threshold, *br, draw, trials, seed=1000 + br[1])
    diff = est - true
    assert abs(diff.mean()) <= 4 * diff.std(ddof=1) / np.sqrt(len(diff)) + 1e-9


def test_recall_at_a_lower_confidence_is_narrower_and_still_covers():
    draw = lambda rng: rng.uniform(0.7, 1.0, 1000)
    covered, _, _ = _simulate(0.8, 4, 8, draw, 500, seed=5, confidence=0.8)
    assert covered.mean() >= 0.8 - 0.05
    wide = recall.estimate_recall(np.linspace(0.8, 1, 200), 4, 8, 0.8, 0.95)
    narrow = recall.estimate_recall(np.linspace(0.8, 1, 200), 4, 8, 0.8, 0.8)
    assert wide.recall_low < narrow.recall_low <= narrow.recall_high < wide.recall_high


def test_recall_hand_computed():
    b, r, t = 20, 5, 0.5
    s = np.array([0.3, 0.5, 0.6, 0.9, 1.0])  # 0.3 is below t: ignored
    p = [1 - (1 - x ** r) ** b for x in (0.5, 0.6, 0.9, 1.0)]
    est = recall.estimate_recall(s, b, r, t)
    missed = sum((1 - q) / q for q in p)
    assert est.found == 4
    assert est.missed == pytest.approx(missed)
    assert est.recall == pytest.approx(4 / (4 + missed))
    assert est.missed_low <= est.missed <= est.missed_high
    assert est.recall_low <= est.recall <= est.recall_high
    assert est.missed_low == int(est.missed_low) and est.missed_high == int(est.missed_high)


def test_recall_estimate_is_the_same_bits_in_any_order_of_the_pairs():
    """An index run verifies its pairs in another order than a run from scratch, and both must print the same
    bytes: the estimate is of the set of (Jaccard, weight) pairs, whatever their order."""
    rng = np.random.default_rng(7)
    s = np.round(rng.uniform(0.5, 1.0, 5000), 4)  # ties in s, so the weights' order counts too
    w = rng.integers(1, 4, 5000)
    base = recall.estimate_recall(s, 9, 13, 0.8, weights=w)
    for _ in range(5):
        p = rng.permutation(len(s))
        assert recall.estimate_recall(s[p], 9, 13, 0.8, weights=w[p]) == base  # exactly, not approximately


def test_recall_edge_cases():
    nothing = recall.estimate_recall(np.array([0.1, 0.2]), 20, 5, 0.5)
    assert nothing.found == 0 and nothing.recall is None and nothing.recall_low is None and nothing.missed == 0
    assert nothing.missed_high >= 1  # P(0.5) = 0.47: a pair at t could well have been missed
    identical = recall.estimate_recall(np.ones(50), 20, 5, 0.5)  # P(1) = 1: no misses
    assert identical.missed == 0 and identical.recall == 1 and identical.recall_high == 1
    at_one = recall.estimate_recall(np.ones(3), 4, 4, 1.0)  # t = 1: only identical sets count, P = 1
    assert at_one.recall == 1 and at_one.missed_high == 0
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError):
            recall.estimate_recall(np.ones(3), 4, 4, bad)
    tiny = recall.estimate_recall(np.array([0.02, 0.5]), 4, 30, 0.01)  # 0.02^30 underflows P to 0
    assert tiny.found == 2 and np.isfinite(tiny.missed_high) and 0 < tiny.recall < 1e-11


# ------------------------------------------------------------------------------------------ the S-curve holds


def _pairs_near(rng, j, size, count):
    """count pairs of random sets of `size` values sharing round(2 size j / (1 + j)): Jaccard about j (exact
    values computed from the sets), as CSR, documents 2i and 2i + 1 forming pair i."""
    inter = round(2 * size * j / (1 + j))
    rows = rng.integers(0, 2**32, size=(count, 2 * size - inter), dtype=np.uint64).astype(np.uint32)
    sets_, truth = [], []
    for row in rows:
        a, b = set(row[:size].tolist()), set(row[size - inter:].tolist())
        sets_ += [sorted(a), sorted(b)]
        truth.append(len(a & b) / len(a | b))
    values = np.concatenate([np.array(s, dtype=np.uint32) for s in sets_])
    offsets = np.r_[0, np.cumsum([len(s) for s in sets_])].astype(np.int64)
    return values, offsets, np.array(truth)


@pytest.mark.parametrize("bands,rows", [(32, 4), (14, 9), (8, 16)])
def test_candidate_fraction_follows_the_s_curve_on_nearDups_minhash(bands, rows):
    """Pairs at controlled Jaccard through oph_signatures and band_keys become candidates (a band key in common)
    as often as P(s) says, within 4 binomial standard errors, at similarities across the curve."""
    rng = np.random.default_rng(bands * 100 + rows)
    mid = lsh.approximate_threshold(bands, rows)
    for j in (mid - 0.15, mid - 0.05, mid, mid + 0.05, mid + 0.15):
        values, offsets, truth = _pairs_near(rng, float(np.clip(j, 0.05, 0.98)), 200, 400)
        keys = lsh.band_keys(minhash.oph_signatures(values, offsets, 128, seed=3), bands, rows)
        candidate = (keys[0::2] == keys[1::2]).any(axis=1)
        p = lsh.s_curve(truth, bands, rows)
        se = np.sqrt((p * (1 - p)).sum()) / len(p)
        assert abs(candidate.mean() - p.mean()) <= 4 * se + 0.01, (j, candidate.mean(), p.mean())


# ------------------------------------------------------------------------------------------ a recall target


def _p(t, b, r):
    return 1 - (1 - t ** r) ** b


def _bands_for_recall_brute(t, target, num_perm):
    """Every (b, r) with b r <= num_perm and P(t) >= target (plain Python), minimising the FP area."""
    ok = [(b, r) for b in range(1, num_perm + 1) for r in range(1, num_perm // b + 1) if _p(t, b, r) >= target]
    if not ok:
        return None
    fp, _ = lsh.error_areas(t, np.array([b for b, _ in ok]), np.array([r for _, r in ok]))
    return ok[int(np.argmin(fp))]


@pytest.mark.parametrize("t,target,num_perm", [
    (0.5, 0.9, 64), (0.5, 0.99, 128), (0.8, 0.95, 128), (0.9, 0.9, 32), (0.9, 0.999, 64), (0.3, 0.75, 16),
    (0.95, 0.99, 8), (0.5, 0.75, 2), (0.99, 0.5, 40), (1.0, 0.9, 4)])
def test_bands_for_recall_matches_enumeration(t, target, num_perm):
    got = recall.bands_for_recall(t, target, num_perm)
    assert got == _bands_for_recall_brute(t, target, num_perm)
    if got is not None:
        assert got[0] * got[1] <= num_perm and _p(t, *got) >= target


@pytest.mark.parametrize("t,target", [(0.5, 0.9), (0.8, 0.999), (0.9, 0.9999), (0.95, 0.99), (0.2, 0.5)])
def test_min_num_perm_for_recall_is_the_smallest_that_reaches_it(t, target):
    m = recall.min_num_perm_for_recall(t, target)
    assert recall.bands_for_recall(t, target, m) is not None
    assert m == 1 or recall.bands_for_recall(t, target, m - 1) is None
    brute = next(n for n in itertools.count(1)
                 if any(_p(t, b, r) >= target for b in range(1, n + 1) for r in range(1, n // b + 1)))
    assert m == brute


def test_bands_for_recall_uses_the_permutations_it_is_given():
    """More permutations can only lower the false-positive area at the same recall."""
    fp = [lsh.error_areas(0.8, *map(np.array, zip(recall.bands_for_recall(0.8, 0.95, n))))[0][0]
          for n in (32, 64, 128, 256)]
    assert fp == sorted(fp, reverse=True)
    with pytest.raises(ValueError):
        recall.bands_for_recall(0.8, 1.0, 128)


# ------------------------------------------------------------------------------------------ exact joins

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from nearDup.kernels import allpairs  # noqa: E402


def _csr(list_of_sets):
    values = [np.array(sorted(s), dtype=np.uint32) for s in list_of_sets]
    values = np.concatenate(values) if values else np.empty(0, np.uint32)
    return values.astype(np.uint32), np.r_[0, np.cumsum([len(s) for s in list_of_sets])].astype(np.int64)


def _brute_jaccard(list_of_sets, t):
    return [(a, b, len(list_of_sets[a] & list_of_sets[b]))
            for a, b in itertools.combinations(range(len(list_of_sets)), 2)
            if list_of_sets[a] and list_of_sets[b]
            and len(list_of_sets[a] & list_of_sets[b]) / len(list_of_sets[a] | list_of_sets[b]) >= t]


def _brute_containment(list_of_sets, t):
    return [(a, b, len(list_of_sets[a] & list_of_sets[b]))
            for a, b in itertools.permutations(range(len(list_of_sets)), 2)
            if list_of_sets[a] and len(list_of_sets[a] & list_of_sets[b]) / len(list_of_sets[a]) >= t]


def _triples(result, list_of_sets):
    pairs = result.pairs.tolist()
    assert result.size_a.tolist() == [len(list_of_sets[a]) for a, _ in pairs]
    assert result.size_b.tolist() == [len(list_of_sets[b]) for _, b in pairs]
    assert pairs == sorted(pairs) and len(set(map(tuple, pairs))) == len(pairs)
    return [(a, b, i) for (a, b), i in zip(pairs, result.intersection.tolist())]


# small vocabularies, so that many pairs are similar; thresholds that equal common ratios hit the boundary
corpora = st.integers(1, 24).flatmap(
    lambda vocab: st.lists(st.sets(st.integers(0, vocab - 1)), max_size=24))
thresholds = st.sampled_from([1 / 3, 0.5, 2 / 3, 0.7, 0.75, 0.8, 0.9, 1.0, 0.1]) | st.floats(0.001, 1.0)
budgets = st.sampled_from([1, 300, 1 << 28])  # 1: a batch per document and a verification per pair


@settings(max_examples=300, deadline=None)
@given(corpora, thresholds, budgets)
def test_jaccard_join_equals_brute_force(list_of_sets, t, budget):
    got = allpairs.jaccard_join(*_csr(list_of_sets), t, max_memory=budget)
    assert _triples(got, list_of_sets) == _brute_jaccard(list_of_sets, t)


@settings(max_examples=300, deadline=None)
@given(corpora, thresholds, budgets)
def test_containment_join_equals_brute_force(list_of_sets, t, budget):
    got = allpairs.containment_join(*_csr(list_of_sets), t, max_memory=budget)
    assert _triples(got, list_of_sets) == _brute_containment(list_of_sets, t)


@settings(max_examples=100, deadline=None)
@given(corpora, thresholds)
def test_join_cost_bounds_the_pairs(list_of_sets, t):
    """join_cost counts records: at least one per pair found, at most sum over tokens of C(df_prefix, 2)."""
    values, offsets = _csr(list_of_sets)
    cost = allpairs.join_cost(values, offsets, t)
    assert cost >= len(_brute_jaccard(list_of_sets, t))
    frequency = {}
    for s in list_of_sets:
        for v in s:
            frequency[v] = frequency.get(v, 0) + 1
    prefix_df = {}
    for s in list_of_sets:
        ordered = sorted(s, key=lambda v: (frequency[v], v))
        for v in ordered[:len(s) - int(np.ceil(t * len(s) - 1e-6)) + 1]:
            prefix_df[v] = prefix_df.get(v, 0) + 1
    assert cost <= sum(d * (d - 1) // 2 for d in prefix_df.values())
    assert allpairs.join_cost(values, offsets, t, "containment") >= len(_brute_containment(list_of_sets, t))


def test_mmds_example_3_1_and_hand_cases():
    a, b, c, d, e, f = range(1, 7)
    sets_ = [{a, b, c, d}, {c, d, e, f}, set(), {a, b, c, d}, {c}, set(range(100, 400)), set(range(100, 399))]
    values, offsets = _csr(sets_)
    j = allpairs.jaccard_join(values, offsets, 1 / 3)  # J({a,b,c,d}, {c,d,e,f}) = 2/6 exactly
    assert _triples(j, sets_) == [(0, 1, 2), (0, 3, 4), (1, 3, 2), (5, 6, 299)]
    assert _triples(allpairs.jaccard_join(values, offsets, 1.0), sets_) == [(0, 3, 4)]  # duplicates only
    assert len(allpairs.jaccard_join(values, offsets, 0.34).pairs) == 2  # just above 1/3: the 2/6 pairs go
    contained = _triples(allpairs.containment_join(values, offsets, 1.0), sets_)
    # {c} is in three sets; the empty set is in every set but never paired; equal sets both ways; 6 is in 5
    assert contained == [(0, 3, 4), (3, 0, 4), (4, 0, 1), (4, 1, 1), (4, 3, 1), (6, 5, 299)]
    half = _triples(allpairs.containment_join(values, offsets, 0.5), sets_)
    assert (0, 1, 2) in half and (1, 0, 2) in half and (5, 6, 299) in half and (0, 4, 1) not in half


def test_joins_on_larger_random_sets_match_brute_force():
    """Sets of hundreds of values with planted near-copies, beyond what hypothesis draws."""
    rng = np.random.default_rng(7)
    base = [set(rng.choice(3000, size=rng.integers(1, 400), replace=False).tolist()) for _ in range(40)]
    sets_ = base + [set(list(s)[:int(len(s) * rng.uniform(0.5, 1))]) | {5000 + i} for i, s in enumerate(base)]
    values, offsets = _csr(sets_)
    for t in (0.3, 0.6, 0.9):
        assert _triples(allpairs.jaccard_join(values, offsets, t), sets_) == _brute_jaccard(sets_, t)
        assert _triples(allpairs.containment_join(values, offsets, t), sets_) == _brute_containment(sets_, t)


def test_join_inputs_are_checked():
    values, offsets = _csr([{1, 2}, {2, 3}])
    with pytest.raises(ValueError, match="threshold"):
        allpairs.jaccard_join(values, offsets, 0.0)
    with pytest.raises(ValueError, match="sorted"):
        allpairs.jaccard_join(np.array([2, 1, 3], np.uint32), np.array([0, 2, 3]), 0.5)
    with pytest.raises(ValueError, match="offsets"):
        allpairs.containment_join(values, np.array([0, 1]), 0.5)
    with pytest.raises(ValueError, match="metric"):
        allpairs.join_cost(values, offsets, 0.5, "cosine")
    assert len(allpairs.jaccard_join(np.empty(0, np.uint32), np.zeros(1, np.int64), 0.5).pairs) == 0
    assert len(allpairs.containment_join(np.empty(0, np.uint32), np.zeros(4, np.int64), 0.5).pairs) == 0


def test_rounding_in_the_threshold_arithmetic_loses_no_pair():
    """Floating point can put t |x| above the whole number it equals for the pair: 0.28 * 25 is
    7.000000000000001, and a naive ceiling asks 8 common tokens of a pair that has the 7 it needs (its prefix
    then holds only the 18 tokens x alone has); t / (1 + t) (|x| + |y|) is 1.0000000000000002 for
    J({0}, {0..12}) = 1/13. The reference accepts both (7 / 25 >= 0.28, 1 / 13 >= 1 / 13)."""
    assert 0.28 * 25 > 7 and 1 / 13 / (1 + 1 / 13) * 14 > 1
    x, y = set(range(25)), set(range(18, 25)) | {100}
    values, offsets = _csr([x, y])
    assert _triples(allpairs.containment_join(values, offsets, 0.28), [x, y]) == [(0, 1, 7), (1, 0, 7)]
    x, y = {0}, set(range(13))
    values, offsets = _csr([x, y])
    assert _triples(allpairs.jaccard_join(values, offsets, 1 / 13), [x, y]) == [(0, 1, 1)]
