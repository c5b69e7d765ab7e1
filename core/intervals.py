"""Confidence intervals for derived metrics, propagated from each trial's repetitions by bootstrap.

A derived metric (speed-up, RTR, ASE, BSR, depth slope, retention, a Table VI mean) is a function
of several trials' mean throughputs. Each trial's mean is uncertain; its repetitions say by how
much. ``propagate`` resamples every trial's repetitions independently (``n_boot`` times, with
replacement), recomputes the metric on each set of resampled means, and reports the percentile
interval of the results around the metric of the actual means (percentile bootstrap, as
``scipy.stats.bootstrap(method="percentile")`` would give one sample at a time). Why bootstrap and
not the delta method: a slope over four depths of ratios, or a retention, is a non-linear function
of eight means; the bootstrap needs no derivative and no normality of the ratio.

Small samples: a plain percentile bootstrap of a mean is too narrow twice over -- its variance is
(n-1)/n of s^2/n, and its tails are normal where Student's t applies -- which matters because a
trial stopped by the time cap can have 3 or 4 repetitions (a "significant" ranking reversal on
3-repetition trials was seen this way). So each trial's resampled means are spread about its mean
by ``widening(n) = sqrt(n/(n-1)) * t_{n-1} / z``: alone, a mean's interval is then its Student-t
interval, and the same caution carries into ratios, slopes and retentions (x2.7 at n = 3, x1.4 at
n = 6, x1.1 at n = 20).

Serial correlation: resampling repetitions one by one assumes they are independent; consecutive
repetitions on a machine whose speed wanders are not (``ngb.core.autocorrelation``). The draws are
spread
further by the square root of the trial's variance inflation, so a mean alone gets exactly the
widened Student-t interval ``ngb.core.stopping.interval`` gives it, and ratios and slopes inherit
it. The samples must be in the order they were measured (the store keeps ``rep`` order).

What it cannot know: a trial with fewer than 2 repetitions has no spread, so any metric that uses
it gets a NaN interval (shown as "n<2"), never a falsely tight one. Resampling is seeded, so the
same database always gives the same report.

``Estimate.excludes(x)`` is the test the reports use: a slope "differs from zero" and a speed-up
"differs from 1" only when the interval excludes it; otherwise the reports print "n.s.".
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from ngb.core.autocorrelation import inflation

N_BOOT = 2000
LEVEL = 0.95


@dataclass(frozen=True)
class Estimate:
    """A metric with its interval (NaN bounds when it cannot be known)."""

    value: float
    low: float = math.nan
    high: float = math.nan
    level: float = LEVEL

    @property
    def known(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)

    @property
    def half_width(self) -> float | None:
        """Half the interval's width (the ``±`` shown beside a number); None when unknown."""
        return (self.high - self.low) / 2 if self.known else None

    def excludes(self, x: float) -> bool:
        """True when the interval is known and lies entirely on one side of ``x``."""
        return self.known and (self.low > x or self.high < x)


def _finite(values: Sequence[float] | np.ndarray) -> np.ndarray:
    arr = np.asarray(list(values), dtype=np.float64)
    return arr[np.isfinite(arr)]


@functools.lru_cache(maxsize=256)  # the same few (n, level) pairs, for every trial of a report
def widening(n: int, level: float = LEVEL) -> float:
    """How far to spread a mean's bootstrap draws so its interval is the Student-t one (n >= 2)."""
    from statistics import NormalDist

    from ngb.core.stopping import t_quantile

    p = (1 + level) / 2
    return math.sqrt(n / (n - 1)) * t_quantile(p, n - 1) / NormalDist().inv_cdf(p)


def resampled_means(
    values: Sequence[float] | np.ndarray,
    n_boot: int = N_BOOT,
    rng: np.random.Generator | None = None,
    level: float = LEVEL,
) -> np.ndarray:
    """``n_boot`` means of resamples (with replacement) of ``values``, spread by ``widening``."""
    arr = _finite(values)
    rng = rng or np.random.default_rng(0)
    picks = rng.integers(0, arr.size, size=(n_boot, arr.size))
    means = np.asarray(arr[picks].mean(axis=1))
    if arr.size < 2:
        return means
    centre = float(arr.mean())
    # Resampling treats the repetitions as independent; a trial's are a time series, so the
    # draws are spread further by its serial-correlation inflation too (ngb.core.autocorrelation).
    _, factor = inflation(arr.tolist())
    return centre + widening(int(arr.size), level) * math.sqrt(factor) * (means - centre)


def propagate(
    metric: Callable[..., np.ndarray | float],
    samples: Sequence[Sequence[float]],
    *,
    level: float = LEVEL,
    n_boot: int = N_BOOT,
    seed: int = 0,
) -> Estimate:
    """``metric(mean_1, ..., mean_k)`` with a bootstrap interval from each trial's repetitions.

    ``metric`` must work elementwise on numpy arrays (plain arithmetic does). ``samples`` holds
    each trial's per-repetition throughputs, in the metric's argument order.
    """
    arrays = [_finite(s) for s in samples]
    if any(a.size == 0 for a in arrays):
        return Estimate(math.nan, level=level)
    value = float(metric(*(float(a.mean()) for a in arrays)))
    if any(a.size < 2 for a in arrays):
        return Estimate(value, level=level)
    rng = np.random.default_rng(seed)
    draws = np.asarray(
        metric(*(resampled_means(a, n_boot, rng, level) for a in arrays)), dtype=float
    )
    draws = draws[np.isfinite(draws)]
    if draws.size < n_boot // 2:  # the metric is undefined for most resamples
        return Estimate(value, level=level)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return Estimate(value, float(low), float(high), level)


def mean_interval(values: Sequence[float], level: float = LEVEL) -> Estimate:
    """A trial's own mean with its Student-t interval (what the stopping rule used)."""
    from ngb.core.stopping import interval

    ci = interval(list(values), level)
    if ci.n < 2:
        return Estimate(ci.mean, level=level)
    return Estimate(ci.mean, ci.mean - ci.half_width, ci.mean + ci.half_width, level)


# ---- the paper's metrics, vectorised for ``propagate`` -----------------------------------------


def speedup(samples_c: Sequence[float], samples_identity: Sequence[float]) -> Estimate:
    """T_c / T_identity."""
    return propagate(lambda c, i: c / i, [samples_c, samples_identity])


def rtr(samples_b: Sequence[float], samples_1: Sequence[float]) -> Estimate:
    """T(b) / T(1)."""
    return propagate(lambda tb, t1: tb / t1, [samples_b, samples_1])


def ase(samples_b: Sequence[float], samples_1: Sequence[float], batch: int) -> Estimate:
    """T(b) / (b * T(1))."""
    return propagate(lambda tb, t1: tb / (batch * t1), [samples_b, samples_1])


def bsr(
    c_b: Sequence[float], c_1: Sequence[float], i_b: Sequence[float], i_1: Sequence[float]
) -> Estimate:
    """ASE_c(b) / ASE_identity(b) = (T_c(b) / T_c(1)) / (T_i(b) / T_i(1)); the batch cancels."""
    return propagate(lambda cb, c1, ib, i1: (cb / c1) / (ib / i1), [c_b, c_1, i_b, i_1])


def _slope(depths: np.ndarray, speedups: list[np.ndarray | float]) -> np.ndarray | float:
    d = depths - depths.mean()
    stacked = np.stack([np.asarray(s, dtype=float) for s in speedups], axis=-1)
    centred = stacked - stacked.mean(axis=-1, keepdims=True)
    out = (centred * d).sum(axis=-1) / float((d * d).sum())
    return float(out) if np.ndim(out) == 0 else out


def depth_trend(
    depths: Sequence[int],
    compiler: Sequence[Sequence[float]],
    identity: Sequence[Sequence[float]],
) -> tuple[Estimate, Estimate | None]:
    """Least-squares slope of speed-up over depth, and retention (deepest / depth 1; None without
    a depth-1 point), each with its interval. ``compiler[i]``/``identity[i]`` are the repetitions
    at ``depths[i]``."""
    d = np.asarray(depths, dtype=float)
    k = len(depths)

    def slope(*means: np.ndarray | float) -> np.ndarray | float:
        return _slope(d, [means[i] / means[k + i] for i in range(k)])

    trend = propagate(slope, [*compiler, *identity])
    if 1 not in depths:
        return trend, None
    first, last = list(depths).index(1), int(np.argmax(d))
    kept = propagate(
        lambda c_last, i_last, c_1, i_1: (c_last / i_last) / (c_1 / i_1),
        [compiler[last], identity[last], compiler[first], identity[first]],
    )
    return trend, kept


def mean_of_means(samples: Sequence[Sequence[float]]) -> Estimate:
    """The mean of several trials' means (a Table VI cell) with its measurement interval."""
    return propagate(lambda *means: sum(means) / len(means), list(samples))
