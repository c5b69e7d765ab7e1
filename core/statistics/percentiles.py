"""Latency percentiles with a distribution-free interval from order statistics.

For n calls sorted ``x(1) <= ... <= x(n)``, the number B of calls below the true q-quantile is
Binomial(n, q) whatever the latency distribution (continuous), so ``[x(l), x(u)]`` covers it with
probability ``P(l <= B <= u - 1)``. ``interval`` takes the largest ``l`` and smallest ``u`` whose
upper tail is at most ``(1 - level) / 2`` and whose lower tail takes what that leaves of
``1 - level``: coverage is at least ``level`` (95.0-96.5 % at the sizes ngb sees, the binomial's
steps; ``tests/test_percentiles.py``), and the upper bound alone holds at ``1 - (1 - level) / 2``.

A percentile is *claimed* only when the upper bound exists, i.e. when even the largest call is an
upper bound at the one-sided level: ``q ** n <= (1 - level) / 2``, so ``n >= min_calls(q)``:
6 calls for p50, 36 for p90, 368 for p99 at 95 %. This is MLPerf LoadGen's early-stopping rule
(``loadgen/early_stopping.cc``: the fewest queries for which the binomial odds of seeing no more
than t over-latency queries fall below 1 - confidence) with t = 0 and LoadGen's one-sided 99 %
replaced by the one-sided half of ngb's two-sided 95 %; with more calls the bound moves from the
maximum inwards exactly as LoadGen's allowed over-latency count grows. Below the minimum, a
sample "p99" is the maximum of a few calls: the upper bound is None and surfaces say so.

Why an order-statistic interval rather than a bootstrap: it is exact for i.i.d. calls of any
distribution, needs no resampling of millions of calls, and fails visibly (no upper bound) where
a bootstrap of the maximum would print a confident, wrong, interval. It treats calls as
independent draws; calls of one process share its speed level, so a trial's interval is
``over_processes``: widened where its worker processes differ more than independent calls would.

Pure functions, no numpy: the binomial CDF is summed in log space over the window of +-12
standard deviations around n*q that holds all but ~1e-30 of its mass (n of a million: ~2,400
terms), so a trial's three percentiles cost milliseconds.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

LEVEL = 0.95
#: the percentiles every trial reports, as (name, q)
TAILS = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99))


def min_calls(q: float, level: float = LEVEL) -> int:
    """The fewest calls for which the q-quantile has an upper bound at ``level`` (two-sided):
    ``q ** n <= (1 - level) / 2``."""
    return math.ceil(math.log((1 - level) / 2) / math.log(q) - 1e-12)


def _binom_cdf_table(n: int, q: float) -> tuple[int, list[float]]:
    """``(start, cdf)`` with ``cdf[i] = P(B <= start + i)`` for B ~ Binomial(n, q) over the window
    that holds its mass; below ``start`` the CDF is ~0, at and above the end ~1."""
    mean, sd = n * q, math.sqrt(n * q * (1 - q))
    lo, hi = max(0, math.floor(mean - 12 * sd - 2)), min(n, math.ceil(mean + 12 * sd + 2))
    log_q, log_1q = math.log(q), math.log1p(-q)
    lg_n = math.lgamma(n + 1)
    cdf, total = [], 0.0
    for k in range(lo, hi + 1):
        log_pmf = lg_n - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * log_q + (n - k) * log_1q
        total += math.exp(log_pmf)
        cdf.append(min(total, 1.0))
    return lo, cdf


def rank_bounds(n: int, q: float, level: float = LEVEL) -> tuple[int | None, int | None]:
    """1-based ranks ``(l, u)`` of the order statistics that bound the q-quantile of ``n`` calls
    at ``level``; None where no order statistic is a bound (too few calls on that side)."""
    if n <= 0:
        return None, None
    alpha = (1 - level) / 2
    start, cdf = _binom_cdf_table(n, q)

    def cdf_at(k: int) -> float:  # P(B <= k)
        if k < start:
            return 0.0
        return cdf[k - start] if k - start < len(cdf) else 1.0

    # upper: the smallest u with P(B >= u) = 1 - P(B <= u - 1) <= alpha (the one-sided bound
    # ``advise --p99-ms`` filters on keeps its full 1 - alpha)
    high = next((k for k in range(max(start, 1), n + 1) if 1 - cdf_at(k - 1) <= alpha), None)
    # lower: the largest l with P(B <= l - 1) <= what the upper tail leaves of 1 - level (the
    # binomial's steps leave the upper tail below alpha; giving the rest to the lower one brings
    # coverage from up to 98 % down to 95-96.5 %); P(B <= l - 1) grows with l, past the window ~1
    upper_tail = 1 - cdf_at(high - 1) if high is not None else alpha
    budget = max(alpha, (1 - level) - upper_tail)
    low = next(
        (
            k
            for k in range(min(n, start + len(cdf)), max(start, 1) - 1, -1)
            if cdf_at(k - 1) <= budget
        ),
        None,
    )
    return low, high


@dataclass(frozen=True)
class PercentileInterval:
    """One percentile of a sample: the sample quantile and its bounds (None: not bounded on that
    side with this many calls). ``claimed`` when the upper bound exists (``min_calls``)."""

    name: str
    q: float
    value: float
    low: float | None
    high: float | None
    n: int
    level: float = LEVEL

    @property
    def claimed(self) -> bool:
        return self.high is not None

    @property
    def needed(self) -> int:
        return min_calls(self.q, self.level)


def why_unclaimed(n: int, q: float, level: float = LEVEL) -> str:
    """Why a percentile of ``n`` calls has no upper bound: too few calls, or (enough calls) the
    worker processes differ too much (``over_processes``)."""
    needed = min_calls(q, level)
    if n < needed:
        return f"{n} calls, {needed} needed"
    return f"the worker processes differ too much for an upper bound ({n} calls)"


def _sample_quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default), as ``core.stats`` does."""
    pos = q * (len(ordered) - 1)
    i = math.floor(pos)
    if i + 1 >= len(ordered):
        return float(ordered[-1])
    return float(ordered[i] + (ordered[i + 1] - ordered[i]) * (pos - i))


def interval(
    ordered: Sequence[float], q: float, name: str = "", level: float = LEVEL
) -> PercentileInterval:
    """The q-quantile of an ascending sample with its order-statistic interval."""
    n = len(ordered)
    if n == 0:
        return PercentileInterval(name, q, math.nan, None, None, 0, level)
    low_rank, high_rank = rank_bounds(n, q, level)
    return PercentileInterval(
        name or f"p{q * 100:g}",
        q,
        _sample_quantile(ordered, q),
        float(ordered[low_rank - 1]) if low_rank is not None else None,
        float(ordered[high_rank - 1]) if high_rank is not None else None,
        n,
        level,
    )


def tails(ordered: Sequence[float], level: float = LEVEL) -> dict[str, PercentileInterval]:
    """p50, p90 and p99 of an ascending sample, each with its interval."""
    return {name: interval(ordered, q, name, level) for name, q in TAILS}


def over_processes(
    groups: Sequence[Sequence[float]], q: float, name: str = "", level: float = LEVEL
) -> PercentileInterval:
    """The q-quantile of the calls of several processes (each group ascending), with an interval
    that also holds when the processes differ: the order-statistic interval of the pooled calls,
    widened to Woodruff's where the processes disagree more than independent calls would.

    Why: calls of one process share its speed level, so with process levels 3 % apart (calls 10 %
    apart) the order-statistic interval of the pooled calls held the mixture's p99 in 81 % of
    simulated trials, with 10 % apart in 33 %. Woodruff's interval (survey sampling's for a
    quantile under cluster sampling) takes the variance of the share of calls below the sample
    quantile, turns ``q -+ t * se`` into ranks of the pooled calls, and the interval is the union
    with the order-statistic one. That variance is the binomial's of independent calls (known)
    plus a part *between processes*, estimated from k processes (``k - 1`` degrees of freedom);
    the t takes Welch-Satterthwaite's df of that sum, so a between part near zero gives the
    order-statistic interval back and no process sameness is paid for twice.

    The between part is the larger of two estimates: the spread of the processes' own shares
    below the quantile (Woodruff's, cluster-robust), and the spread those shares have when the
    processes are one shape shifted by normal levels whose variance is read from the processes'
    medians (``_shifted_levels``). Why both: near a tail, the share is skewed across processes --
    at the p99 of 10 processes whose levels are 10 % apart most contribute no call above it, and
    a rare slow one contributes dozens -- so the spread of 10 observed shares is mostly too
    small (median 3.8e-5 against 1.2e-4 for the mean share at the true p99): a sample with no
    slow process missed high, one with a slow process moved the quantile up to where its shares
    agree and missed low (31 + 50 of 600 trials, 86.5 % coverage). The medians' spread is read
    well from 10 processes and says how far the unseen levels reach. Simulated
    (``tests/test_percentiles.py``; 4 or 10 processes of 250 calls, levels 0-10 % apart):
    coverage 95-97 %, and processes that do not differ get the order-statistic interval as
    often as before and no wider; the price is that a p99 of processes that differ is often not
    claimed -- on a machine whose processes differ, the honest interval is wide."""
    pooled = sorted(itertools.chain.from_iterable(groups))
    base = interval(pooled, q, name, level)
    kept = [g for g in groups if len(g)]
    k, n = len(kept), len(pooled)
    if k < 2 or not math.isfinite(base.value):
        return base
    within = q * (1 - q) / n  # the binomial's: independent calls
    between = max(_woodruff(kept, base.value, n) - within, _shifted_levels(kept, base.value, level))
    if between <= 0:  # no more spread than independent calls: the binomial holds
        return base
    from ngb.core.statistics.student_t import t_quantile

    df = (within + between) ** 2 / (between**2 / (k - 1))  # Welch-Satterthwaite
    reach = t_quantile((1 + level) / 2, df) * math.sqrt(within + between)
    low_rank = math.floor((q - reach) * n)  # 0-based
    high_rank = math.ceil((q + reach) * n)  # 1-based
    low = pooled[low_rank] if q - reach > 0 else None
    high = pooled[high_rank - 1] if high_rank <= n else None
    return PercentileInterval(
        base.name,
        q,
        base.value,
        None if low is None or base.low is None else min(low, base.low),
        None if high is None or base.high is None else max(high, base.high),
        n,
        level,
    )


def _woodruff(groups: Sequence[Sequence[float]], x: float, n: int) -> float:
    """Cluster-robust variance of the share of calls at or below ``x`` (processes as clusters)."""
    sizes = [len(g) for g in groups]
    k = len(sizes)
    below = [bisect.bisect_right(g, x) / len(g) for g in groups]
    share = math.fsum(m * f for m, f in zip(sizes, below, strict=True)) / n
    var = k / (k - 1) * math.fsum((m * (f - share)) ** 2 for m, f in zip(sizes, below, strict=True))
    return var / (n * n)


#: a normal level's grid for ``_shifted_levels``: z from -5 to 5 in steps of 1/8, normal weights
_GRID = [i / 8 for i in range(-40, 41)]
_DENSITY = [math.exp(-z * z / 2) for z in _GRID]
_WEIGHTS = [d / math.fsum(_DENSITY) for d in _DENSITY]
#: calls kept for the shared shape (a stride through each process's sorted calls): its CDF to 1e-5
_SHAPE_CALLS = 100_000


def _shifted_levels(groups: Sequence[Sequence[float]], x: float, level: float) -> float:
    """Variance of the mean share of calls at or below ``x`` over k processes when each process
    is one shape (its calls over its median, pooled) times a level, log-normal between
    processes with the variance of the log medians less what the medians' own noise explains
    (one-way random effects). 0 where that variance is not positive or a call is not."""
    k = len(groups)
    if x <= 0 or any(g[0] <= 0 for g in groups):
        return 0.0
    z = NormalDist().inv_cdf((1 + level) / 2)
    levels, noise = [], 0.0
    for g in groups:
        m = len(g)
        levels.append(math.log(_sample_quantile(g, 0.5)))
        # the median's standard error from the order statistics around it (normal ranks)
        reach = z * math.sqrt(m) / 2
        lo, hi = max(0, math.floor(m / 2 - reach)), min(m - 1, math.ceil(m / 2 + reach))
        noise += (math.log(g[hi] / g[lo]) / (2 * z)) ** 2 / k
    centre = math.fsum(levels) / k
    spread = math.fsum((v - centre) ** 2 for v in levels) / (k - 1) - noise
    if spread <= 0:
        return 0.0
    sd = math.sqrt(spread)
    stride = max(1, sum(len(g) for g in groups) // _SHAPE_CALLS)
    # in numpy: up to 100,000 logs and a sort, per tail and per trial or serving probe (in
    # Python, 8 of the 9 s a hundred simulated peak searches took)
    shape = np.sort(
        np.concatenate(
            [
                np.log(np.asarray(g[::stride], dtype=float)) - lv
                for g, lv in zip(groups, levels, strict=True)
            ]
        )
    )
    at = math.log(x) - centre
    below = np.searchsorted(shape, [at - sd * zi for zi in _GRID], side="right")
    first = second = 0.0
    for count, w in zip(below.tolist(), _WEIGHTS, strict=True):
        share = count / len(shape)
        first += w * share
        second += w * share * share
    return max(0.0, second - first * first) / k


def describe(p: PercentileInterval, unit: str = "ms") -> str:
    """``p99 4.1 [3.9, 4.6] ms`` with three significant digits; where the upper bound is missing,
    the sample value and why it is not claimed."""
    if p.n == 0 or not math.isfinite(p.value):
        return f"{p.name} -"
    if p.high is None:
        why = why_unclaimed(p.n, p.q, p.level)
        return f"{p.name} not claimed: {why} (sample: {p.value:.3g} {unit})"
    low = f"{p.low:.3g}" if p.low is not None else "-"
    return f"{p.name} {p.value:.3g} [{low}, {p.high:.3g}] {unit}"


def stored(
    name: str, value: float, bounds: Sequence[float | None] | None, n: int, level: float = LEVEL
) -> PercentileInterval:
    """A percentile as a result stores it (``TrialResult.latency_ci_ms[name]``: ``[low, high]``)."""
    q = dict(TAILS)[name]
    low, high = (list(bounds or []) + [None, None])[:2]
    return PercentileInterval(name, q, value, low, high, n, level)


def describe_all(
    values: Mapping[str, float], bounds: Mapping[str, Sequence[float | None]], n: int
) -> str:
    """``p50 ... ; p90 ...; p99 ...`` of a result (``describe`` each)."""
    return "; ".join(
        describe(stored(name, values.get(name, math.nan), bounds.get(name), n)) for name, _ in TAILS
    )
