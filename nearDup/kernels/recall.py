"""LSH recall from the pairs it found, and the choice of (b, r) for a recall target.

Every candidate is verified exactly, so nearDup's precision is 1 and its recall is what the S-curve leaves:
a pair of Jaccard similarity s becomes a candidate with probability P(s) = 1 - (1 - s^r)^b (MMDS 3.4.2).

Estimating the misses (Horvitz & Thompson, "A generalization of sampling without replacement from a finite
universe", JASA 1952). The pairs with J >= t are a finite population of unknown size N; LSH "samples" each with
inclusion probability P_i = P(s_i), known once its exact similarity s_i is. From the n pairs found,

    N_hat = sum_i 1 / P_i            (unbiased: E[N_hat] = N)
    M_hat = N_hat - n = sum_i (1 - P_i) / P_i      the estimated number of pairs with J >= t that were missed
    recall_hat = n / N_hat
    Var(N_hat) = sum_{population} (1 - P_i) / P_i,  estimated without bias by  V_hat = sum_{found} (1 - P_i) / P_i^2.

The variance formula assumes that pairs become candidates independently given their similarities. That holds for
each pair on its own (the hash functions are random and P_i is the probability over them), not jointly: two pairs
that share a document share its signature, so their events are correlated, and a corpus with large clusters of
near-copies has a larger variance than this. The point estimate is unbiased either way (it needs only the marginal
P_i).

The interval. Conditionally on the found pairs, M_hat and V_hat are exactly the mean and the variance of
M = sum_i G_i with G_i independent geometric variables (failures before the first success, success probability
P_i): each found pair stands for the pairs of its similarity that were tried and missed before it. A sum of
geometrics is skewed (a few pairs at low P_i can stand for many misses) and discrete, so a normal interval on
N_hat undercovers exactly where it matters, with few misses or few found pairs near t. We take the quantiles of
M from a gamma distribution with M's mean and variance (shape k = M_hat^2 / V_hat, scale V_hat / M_hat, the
continuous counterpart of the negative binomial that a sum of equal-p geometrics is), by the Wilson-Hilferty
cube-root approximation (Johnson, Kotz, Balakrishnan, Continuous Univariate Distributions 1, 18.8), which needs
no scipy. For the upper limit one more pair is counted as found at the threshold itself (P(t), the smallest
inclusion probability above t): pairs just above t are the ones most likely to be missed, and having found none
of them is weak evidence that there are none (the "+1" of Clopper-Pearson's upper limit, or a flat prior on
the count at t, whose posterior for n found is a negative binomial with n + 1). The recall interval is
n / (n + M_high) .. n / (n + M_low), as recall falls with M, with M_low and M_high rounded down and up to whole
pairs (the true M is an integer; without this, a run expecting one miss gets a lower limit of 0.2 misses and
the interval excludes the 37% of runs that missed none). tests/test_kernels_recall.py measures the coverage on
simulated corpora: at least nominal where many pairs are missed, conservative (discreteness) where few are.

Weighted draws. Documents with identical shingle sets have identical signatures, so the w pairs that one verified
entry of two classes of copies stands for (pipeline.copies) are candidates together or not at all: one draw with
inclusion probability P standing for w pairs. Its Horvitz-Thompson terms are w (1 - P) / P (mean) and
w^2 (1 - P) / P^2 (variance); weights = 1 is the formula above.
"""
from __future__ import annotations

import math
import statistics
from typing import NamedTuple

import numpy as np

from .lsh import error_areas, s_curve

_P_FLOOR = 1e-12


class RecallEstimate(NamedTuple):
    """found: pairs with J >= t among the verified ones; missed, missed_low, missed_high: estimated pairs with
    J >= t that were not candidates, and its interval; recall, recall_low, recall_high: found / (found + missed)
    and its interval, None when nothing at J >= t was found (the recall is then undefined: no pair stands for
    the misses; missed_high still bounds them, from the phantom pair at t)."""
    found: int
    missed: float
    missed_low: float
    missed_high: float
    recall: float | None
    recall_low: float | None
    recall_high: float | None
    confidence: float


def _gamma_quantile(mean: float, var: float, z: float) -> float:
    """Wilson-Hilferty quantile of the gamma distribution with this mean and variance at standard normal z:
    k*theta * (1 - 1/(9k) + z * sqrt(1/(9k)))^3, clipped at 0; 0 for a degenerate (zero-mean) variable."""
    if mean <= 0.0 or var <= 0.0:
        return 0.0
    k = mean * mean / var
    c = 1.0 / (9.0 * k)
    return max(0.0, mean * (1.0 - c + z * math.sqrt(c)) ** 3)


def estimate_recall(jaccard: np.ndarray, bands: int, rows: int, threshold: float,
                    confidence: float = 0.95, weights: np.ndarray | None = None) -> RecallEstimate:
    """Horvitz-Thompson estimate of the pairs LSH with (bands, rows) missed at J >= threshold, from the exact
    Jaccard of the verified pairs (float (m,), any order; pairs below the threshold are ignored). See the
    module docstring for the maths, the independence assumption and the interval.

    weights: int (m,), the pairs each entry stands for, found or missed together (None: one each).
    A found pair with P(s) = 1 (s = 1) stands for itself only. The interval is two-sided at `confidence`."""
    if not 0.0 < threshold <= 1.0:
        raise ValueError("threshold must be in (0, 1]")
    if not 0.0 < confidence < 1.0:
        raise ValueError("confidence must be in (0, 1)")
    s = np.asarray(jaccard, dtype=np.float64)
    w = np.ones(len(s)) if weights is None else np.asarray(weights, dtype=np.float64)
    # summed in one order whatever order the pairs come in (an index run verifies them in another order than a
    # run from scratch, and a float sum's last digit depends on its order): the estimate is of the pairs' set
    order = np.lexsort((w, s))
    s, w = s[order], w[order]
    at = s >= threshold
    # a pair that was found had P > 0, though s^r can underflow (t = 0.01, r = 30): each pair stands for at
    # most 1e12 others, which keeps the sums finite
    p, w = np.maximum(s_curve(s[at], bands, rows), _P_FLOOR), w[at]
    n = int(w.sum())
    odds = (1.0 - p) / p  # mean misses each found pair stands for
    mean, var = float((w * odds).sum()), float((w * w * odds / p).sum())
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2.0)
    low = _gamma_quantile(mean, var, -z)
    p_t = max(float(s_curve(threshold, bands, rows)), _P_FLOOR)
    phantom = (1.0 - p_t) / p_t
    high = _gamma_quantile(mean + phantom, var + phantom / p_t, z)
    # the misses are a whole number: the integer interval around the continuous one
    low, high = float(math.floor(low)), float(math.ceil(max(high, mean)))
    if n == 0:
        return RecallEstimate(0, 0.0, 0.0, high, None, None, None, confidence)
    return RecallEstimate(n, mean, low, high, n / (n + mean), n / (n + high), n / (n + low), confidence)


def recall_under(jaccard: np.ndarray, weights: np.ndarray, found_with: tuple[int, int] | None,
                 bands: int, rows: int, threshold: float) -> float | None:
    """The recall another choice (bands, rows) would have at J >= threshold on the same corpus, estimated from the
    pairs one run found with found_with = (b, r) (None: an exact join, which found every pair).

    Each found pair at similarity s stands for 1 / P_run(s) pairs of its similarity (Horvitz-Thompson, as in
    estimate_recall), of which the other choice would find the share P(s):

        recall_hat = sum_i w_i P(s_i) / P_run(s_i)  /  sum_i w_i / P_run(s_i)     (s_i >= t)

    a ratio of two unbiased estimates (the expected found and the total). With an exact join, P_run = 1 and it is
    the exact expected recall over the known pairs. None when no pair at J >= t was found."""
    s = np.asarray(jaccard, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    at = s >= threshold
    s, w = s[at], w[at]
    if not len(s):
        return None
    run = np.ones(len(s)) if found_with is None else np.maximum(s_curve(s, *found_with), _P_FLOOR)
    total = float((w / run).sum())
    return float((w * s_curve(s, bands, rows) / run).sum()) / total


def min_num_perm_for_recall(threshold: float, recall: float) -> int:
    """The smallest b*r with P(threshold) >= recall: ceil(log(1 - R) / log(1 - t)), reached by r = 1.

    No (b, r) does better: t^r + (1 - t)^r <= 1 for r >= 1, so (1 - t^r)^b >= (1 - t)^(b r), i.e. the S-curve
    of (b, r) at t is at most that of (b r, 1). Checked in floating point against s_curve and corrected by one
    step either way, so the answer agrees with the comparison bands_for_recall makes."""
    _check_recall_target(threshold, recall)
    if threshold == 1.0:
        return 1
    m = max(1, math.ceil(math.log1p(-recall) / math.log1p(-threshold)))
    while m > 1 and s_curve(threshold, m - 1, 1) >= recall:
        m -= 1
    while s_curve(threshold, m, 1) < recall:
        m += 1
    return m


def _check_recall_target(threshold: float, recall: float) -> None:
    if not 0.0 < threshold <= 1.0:
        raise ValueError("threshold must be in (0, 1]")
    if not 0.0 < recall < 1.0:
        raise ValueError("recall must be strictly between 0 and 1")


def bands_for_recall(threshold: float, recall: float, num_perm: int) -> tuple[int, int] | None:
    """(b, r) with b*r <= num_perm and P(threshold) >= recall that minimises the false-positive area
    FP = integral_0^t P(s) ds (lsh.error_areas): the expected share of dissimilar pairs that become candidates,
    i.e. the verification cost, under the recall constraint at t. Ties go to the first (b, r) in (b, r) order.
    None when no (b, r) within num_perm reaches the target (min_num_perm_for_recall says how many would).

    For each r only the smallest b reaching the target can be optimal (FP grows with b), so the search is over
    r = 1 .. num_perm, b_r = ceil(log(1 - R) / log(1 - t^r)) corrected against s_curve, not over every pair."""
    _check_recall_target(threshold, recall)
    if num_perm < 1:
        raise ValueError("num_perm must be at least 1")
    rows = np.arange(1, num_perm + 1)
    tr = threshold ** rows.astype(np.float64)
    with np.errstate(divide="ignore"):
        b = np.ceil(np.log1p(-recall) / np.log1p(-np.minimum(tr, 1.0 - 1e-300)))
    b = np.maximum(np.nan_to_num(b, nan=1.0, posinf=num_perm + 1.0), 1.0)
    b = np.minimum(b, num_perm + 1).astype(np.int64)
    # float correction: the smallest b with s_curve >= recall, as the comparison below is made
    b = np.where((b > 1) & (s_curve(threshold, b - 1, rows) >= recall), b - 1, b)
    b = np.where(s_curve(threshold, b, rows) < recall, b + 1, b)
    ok = (b * rows <= num_perm) & (s_curve(threshold, b, rows) >= recall)
    if not ok.any():
        return None
    b, rows = b[ok], rows[ok]
    fp, _ = error_areas(min(threshold, 1.0), b, rows)
    order = np.lexsort((rows, b))  # (b, r) order, so the tie rule does not depend on the search order
    best = order[np.argmin(fp[order])]
    return int(b[best]), int(rows[best])
