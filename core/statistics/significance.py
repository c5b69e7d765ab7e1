"""Confidence intervals and "is A really faster than B?" from a trial's repetitions.

The samples are per-repetition throughputs (the store's ``measurements`` table; one value per timed
loop), so a trial with 100 repetitions gives 100 independent-ish throughput readings.

- ``confidence_interval``: the mean with a Student-t interval, ``mean +- t_{(1+level)/2, n-1} *
  s / sqrt(n)`` (``s`` the sample std, ddof=1), with ``ngb.core.statistics.student_t.t_two_sided``.
- ``compare``: Welch's unequal-variance t-test (``scipy.stats.ttest_ind(equal_var=False)``) at
  ``alpha`` (default 0.05, two-sided). p < alpha names the faster side by its mean, otherwise the
  verdict is "no significant difference". Welch rather than "do the CIs overlap": overlapping 95 %
  intervals can still hide a significant difference (the overlap rule is conservative), and Welch
  copes with compilers whose run-to-run spread differs a lot. ``method="overlap"`` gives the
  simpler interval-overlap rule for those who want it.
- Degenerate samples: fewer than 2 values on a side cannot be tested ("not enough repetitions");
  two zero-variance samples (e.g. a noiseless fake) are different exactly when their means differ.

scipy is imported inside the functions (core stays stdlib + numpy at import time).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from ngb.core.base.errors import ConfigError
from ngb.core.statistics.student_t import t_two_sided

A_FASTER = "a faster"
B_FASTER = "b faster"
NOT_SIGNIFICANT = "no significant difference"
INSUFFICIENT = "not enough repetitions"
METHODS = ("welch", "overlap")


@dataclass(frozen=True)
class Interval:
    """Mean of a sample with a two-sided confidence interval (NaN bounds when n < 2)."""

    n: int
    mean: float
    std: float
    low: float
    high: float
    level: float

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def overlaps(self, other: Interval) -> bool:
        return self.low <= other.high and other.low <= self.high


@dataclass(frozen=True)
class Comparison:
    """Outcome of ``compare(a, b)``; ``significant`` is False for "n.s." and for too few samples."""

    verdict: str
    p_value: float
    a: Interval
    b: Interval
    method: str

    @property
    def significant(self) -> bool:
        return self.verdict in (A_FASTER, B_FASTER)

    @property
    def flag(self) -> str:
        """Short marker for tables: "" when significant, "n.s." or "n<2" otherwise."""
        if self.significant:
            return ""
        return "n<2" if self.verdict == INSUFFICIENT else "n.s."


def _sample(values: Iterable[float]) -> np.ndarray:
    arr = np.asarray(list(values), dtype=np.float64)
    return arr[np.isfinite(arr)]


def _check_level(level: float, what: str = "confidence level") -> None:
    if not 0.0 < level < 1.0:
        raise ConfigError(f"{what} must be between 0 and 1 (exclusive), got {level!r}")


def confidence_interval(values: Iterable[float], level: float = 0.95) -> Interval:
    """Mean and Student-t confidence interval of a sample (non-finite values are dropped)."""
    _check_level(level)
    arr = _sample(values)
    n = int(arr.size)
    if n == 0:
        return Interval(0, math.nan, math.nan, math.nan, math.nan, level)
    mean = float(arr.mean())
    if n == 1:
        return Interval(1, mean, math.nan, math.nan, math.nan, level)
    std = float(arr.std(ddof=1))
    half = t_two_sided(level, n - 1) * std / math.sqrt(n)
    return Interval(n, mean, std, mean - half, mean + half, level)


def compare(
    a_samples: Iterable[float],
    b_samples: Iterable[float],
    *,
    alpha: float = 0.05,
    method: str = "welch",
) -> Comparison:
    """Which of two samples (throughputs: higher is faster) is faster, if either; see module doc."""
    from scipy import stats

    if method not in METHODS:
        raise ConfigError(f"unknown comparison method {method!r}; valid: {', '.join(METHODS)}")
    _check_level(alpha, "alpha")
    a, b = _sample(a_samples), _sample(b_samples)
    ci_a = confidence_interval(a, 1 - alpha)
    ci_b = confidence_interval(b, 1 - alpha)

    def verdict(significant: bool) -> str:
        if not significant or ci_a.mean == ci_b.mean:
            return NOT_SIGNIFICANT
        return A_FASTER if ci_a.mean > ci_b.mean else B_FASTER

    if a.size < 2 or b.size < 2:
        return Comparison(INSUFFICIENT, math.nan, ci_a, ci_b, method)
    if ci_a.std == 0 and ci_b.std == 0:
        p = 0.0 if ci_a.mean != ci_b.mean else 1.0
        return Comparison(verdict(p < alpha), p, ci_a, ci_b, method)
    if method == "overlap":
        return Comparison(verdict(not ci_a.overlaps(ci_b)), math.nan, ci_a, ci_b, method)
    p = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
    return Comparison(verdict(p < alpha), p, ci_a, ci_b, method)
