"""Confidence intervals for derived metrics, computed from each result's own stored interval.

Every result carries its mean throughput, the half-width of its 95 % interval and the interval's
degrees of freedom (``extra["measure"]["df"]``: k - 1 over k worker processes, n - 1 for one
process; rows stored before it fall back to n - 1 of their repetitions). That is a Student-t
interval, so its standard error is ``half / t_{df}``. A derived metric (speed-up, RTR, ASE, BSR,
depth slope, retention, a Table VI mean) is computed from those three numbers per result, nothing
else: no surface resamples raw repetitions, so the console, the reports and the figures cannot
arrive at different intervals for the same number.

Ratios (speed-up, RTR, ASE, BSR, retention) are products of powers of independent means, so the
delta method is applied on the log scale: ``var(log R) = sum c_i^2 (se_i / m_i)^2``, degrees of
freedom by Welch-Satterthwaite, and ``R * exp(+-t * sd)``. Chosen over Fieller because it extends
to four means (BSR, retention) with one formula and never gives an unbounded interval; over the
linear delta method because a ratio's sampling distribution is skewed and a linear interval
crosses zero once the relative error nears 1 (a negative speed-up was printed that way). The
log-scale interval is asymmetric, and every surface prints its two bounds as they are,
``6.3 [4.1, 9.6]`` (``ngb.sweeps.report.numbers``); "n.s." is decided on those printed bounds.
(Until 2026-11 the larger side was printed as ``value ± half``; that widening, not the interval,
then decided verdicts: 1.38 ± 0.44 read as a tie while [1.046, 1.814] excludes 1.) A result's own
mean -- a throughput, an energy per sample -- is positive too: ``positive`` carries its stored
Student-t half-width to the log scale with the same relative standard error, so no bound of a
positive quantity is at or below zero. A result that appears in both numerator and denominator
cancels before anything is computed: the baseline over itself, or RTR/ASE/BSR at batch 1, is
exactly 1 with no interval (``Estimate.exact``).

Linear combinations (the least-squares slope over depth of speed-ups, a Table VI mean of means)
add variances, with Satterthwaite's degrees of freedom, and a symmetric t interval.

A result without an interval (no half-width, or fewer than 2 repetitions) makes every metric
that uses it unknown (shown "n<2"), never falsely tight.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from ngb.core.statistics.student_t import t_two_sided

LEVEL = 0.95


@dataclass(frozen=True)
class Mean:
    """One result's mean with its ``level`` interval half-width and degrees of freedom.

    ``key`` identifies the result, so a result that is both numerator and denominator of a
    metric cancels exactly (None: never equal to another)."""

    value: float
    half: float | None = None
    df: float = 0.0
    key: Hashable | None = None
    level: float = LEVEL

    @property
    def known(self) -> bool:
        return (
            self.half is not None
            and math.isfinite(self.half)
            and self.half >= 0
            and self.df >= 1
            and math.isfinite(self.value)
        )

    @property
    def se(self) -> float:
        """Standard error (only meaningful when ``known``)."""
        return float(self.half or 0.0) / t_two_sided(self.level, self.df)


@dataclass(frozen=True)
class Estimate:
    """A derived value with its ``level`` interval ``[lo, hi]``, the bounds printed as they are.

    Bounds NaN: unknown ("n<2"); ``exact``: the value holds by definition (a result over
    itself), no interval at all. Build one with ``around`` (a symmetric interval), ``between``
    (given bounds) or ``exactly``."""

    value: float
    lo: float = math.nan
    hi: float = math.nan
    df: float = math.nan
    exact: bool = False
    level: float = LEVEL

    @classmethod
    def around(
        cls, value: float, half: float | None, df: float = math.nan, level: float = LEVEL
    ) -> Estimate:
        """``value -+ half`` (unknown when ``half`` is None or not finite)."""
        if half is None or not math.isfinite(half):
            return cls(value, df=df, level=level)
        return cls(value, value - half, value + half, df, level=level)

    @classmethod
    def exactly(cls, value: float) -> Estimate:
        return cls(value, value, value, exact=True)

    @property
    def known(self) -> bool:
        return math.isfinite(self.lo) and math.isfinite(self.hi)

    @property
    def low(self) -> float:
        return self.lo

    @property
    def high(self) -> float:
        return self.hi

    @property
    def half_width(self) -> float | None:
        """Half the interval's width (the scale its digits are rounded to); None when unknown."""
        return (self.hi - self.lo) / 2 if self.known else None

    def excludes(self, x: float) -> bool:
        """True when the interval is known and lies entirely on one side of ``x``."""
        return self.known and not self.exact and (self.lo > x or self.hi < x)


def _satterthwaite(variances: Sequence[float], dfs: Sequence[float]) -> float:
    total = math.fsum(variances)
    denom = math.fsum(v * v / d for v, d in zip(variances, dfs, strict=True) if v > 0)
    return total * total / denom if denom > 0 else math.inf


def power_product(terms: Sequence[tuple[Mean, float]], scale: float = 1.0) -> Estimate:
    """``scale * prod(m_i ** c_i)`` with the log-scale delta-method interval (see module).

    Terms with the same ``key`` are merged first, so a result over itself cancels exactly."""
    merged: dict[Hashable, tuple[Mean, float]] = {}
    for i, (mean, power) in enumerate(terms):
        ident = mean.key if mean.key is not None else ("#", i)
        prior = merged.get(ident)
        merged[ident] = (mean, power + (prior[1] if prior else 0.0))
    live = [(m, c) for m, c in merged.values() if c != 0]
    if any(not math.isfinite(m.value) or m.value <= 0 for m, _ in live):
        return Estimate(math.nan)
    value = scale * math.prod(m.value**c for m, c in live)
    if not live:
        return Estimate.exactly(value)
    if not all(m.known for m, _ in live):
        return Estimate(value)
    variances = [(c * m.se / m.value) ** 2 for m, c in live]
    df = _satterthwaite(variances, [m.df for m, _ in live])
    level = live[0][0].level
    sd = math.sqrt(math.fsum(variances))
    q = t_two_sided(level, df) * sd if math.isfinite(df) else 0.0
    return Estimate(value, value * math.exp(-q), value * math.exp(q), df, level=level)


def linear(parts: Sequence[tuple[Estimate, float]]) -> Estimate:
    """``sum(w_i * x_i)`` of independent estimates with a symmetric t interval."""
    value = math.fsum(w * e.value for e, w in parts)
    if any(not e.known for e, _ in parts):
        return Estimate(value)
    level = parts[0][0].level if parts else LEVEL
    variances, dfs = [], []
    for e, w in parts:
        if e.exact or not math.isfinite(e.df) or e.hi == e.lo:
            continue
        se = standard_error(e)
        variances.append((w * se) ** 2)
        dfs.append(e.df)
    if not variances:
        return Estimate.exactly(value)
    df = _satterthwaite(variances, dfs)
    half = t_two_sided(level, df) * math.sqrt(math.fsum(variances))
    return Estimate.around(value, half, df, level=level)


def standard_error(e: Estimate) -> float:
    """The standard error behind an estimate's interval: half its width over t, on the scale the
    interval was built on (the log scale when its bounds are asymmetric around the value)."""
    if not e.known or not math.isfinite(e.df) or e.hi == e.lo:
        return 0.0
    t = t_two_sided(e.level, e.df)
    if e.lo > 0 and not math.isclose(e.value - e.lo, e.hi - e.value, rel_tol=1e-9):
        return e.value * math.log(e.hi / e.lo) / 2 / t  # back to the value's scale (delta method)
    return (e.hi - e.lo) / 2 / t


def positive(mean: Mean) -> Estimate:
    """A positive result's own mean (a throughput, an energy per sample) with its stored
    interval carried to the log scale: ``value * exp(-+ half / value)``, the same standard error
    relative to the value. For a narrow interval the bounds are the stored ones to the digits
    printed (2 % -> [0.9802, 1.0202]); for a wide one the lower bound stays above zero where the
    symmetric one (700 +- 2300) fell below it, and the upper one grows as a ratio's does."""
    if not mean.known:
        return Estimate(mean.value)
    if not mean.value > 0:
        return Estimate(math.nan)
    q = float(mean.half or 0.0) / mean.value
    return Estimate(
        mean.value, mean.value * math.exp(-q), mean.value * math.exp(q), mean.df, level=mean.level
    )


def symmetric(mean: Mean) -> Estimate:
    """A mean that may take any sign with its stored symmetric interval."""
    if not mean.known:
        return Estimate(mean.value)
    return Estimate.around(mean.value, float(mean.half or 0.0), mean.df, level=mean.level)


# ---- the paper's metrics -------------------------------------------------------------------


def speedup(c: Mean, identity: Mean) -> Estimate:
    """T_c / T_identity."""
    return power_product([(c, 1.0), (identity, -1.0)])


def rtr(tb: Mean, t1: Mean) -> Estimate:
    """T(b) / T(1)."""
    return power_product([(tb, 1.0), (t1, -1.0)])


def ase(tb: Mean, t1: Mean, batch: int) -> Estimate:
    """T(b) / (b * T(1))."""
    return power_product([(tb, 1.0), (t1, -1.0)], scale=1.0 / batch)


def bsr(c_b: Mean, c_1: Mean, i_b: Mean, i_1: Mean) -> Estimate:
    """ASE_c(b) / ASE_identity(b) = (T_c(b) / T_c(1)) / (T_i(b) / T_i(1))."""
    return power_product([(c_b, 1.0), (c_1, -1.0), (i_b, -1.0), (i_1, 1.0)])


def depth_trend(
    depths: Sequence[int], compiler: Sequence[Mean], identity: Sequence[Mean]
) -> tuple[Estimate, Estimate | None]:
    """Least-squares slope of speed-up over depth, and retention (deepest / depth 1; None without
    a depth-1 point). ``compiler[i]`` / ``identity[i]`` are the results at ``depths[i]``."""
    ds = [float(d) for d in depths]
    centre = math.fsum(ds) / len(ds)
    sxx = math.fsum((d - centre) ** 2 for d in ds)
    speedups = [speedup(c, i) for c, i in zip(compiler, identity, strict=True)]
    if sxx == 0:
        trend = Estimate(math.nan)
    else:
        trend = linear([(s, (d - centre) / sxx) for s, d in zip(speedups, ds, strict=True)])
    if 1 not in depths:
        return trend, None
    first, last = list(depths).index(1), max(range(len(ds)), key=ds.__getitem__)
    kept = power_product(
        [(compiler[last], 1.0), (identity[last], -1.0), (compiler[first], -1.0),
         (identity[first], 1.0)]
    )  # fmt: skip
    return trend, kept


def mean_of_means(means: Sequence[Mean]) -> Estimate:
    """The mean of several results' means (a Table VI cell) with its measurement interval."""
    if not means:
        return Estimate(math.nan)
    k = len(means)
    mean = linear([(symmetric(m), 1.0 / k) for m in means])
    if not mean.known or mean.exact or not mean.value > 0:
        return mean
    # a mean of throughputs is positive: carried to the log scale as ``positive`` does
    return positive(Mean(mean.value, (mean.hi - mean.lo) / 2, mean.df, level=mean.level))
