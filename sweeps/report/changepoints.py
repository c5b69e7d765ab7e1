"""Change points in a series of runs' results: where the level moved, and how sure that is.

The method is binary segmentation with a weighted two-sample t-test on the log scale at every
split, its largest |t| compared with a threshold simulated for the segment's length
(``changepoint_thresholds``):

1. ``y_i = log(value_i)``; a run's own variance ``se_i^2`` comes from its stored 95 % interval
   (passed in as ``rel_se``; unknown: the median of the others). Weights use it *moderated*: the
   segment's median, except where a run states more than 4x that (an interval twice as wide),
   which keeps a quarter of its own. A run's variance comes from 2-4 df (its processes) and
   varies 20-fold by chance; weighting by it as stated made stable 12-run series alarm 1.5 %
   instead of 1 %, while a run that really was disturbed still counts less;
2. for each split, ``Q`` = the weighted squared residuals about the two segments' means, with
   n - 2 degrees of freedom. Where ``Q > n - 2`` the runs spread more than their intervals say:
   the excess is variance between runs (a reboot, a memory layout, another core: ``ngb bench
   coverage`` sees re-runs' means outside their intervals), ``tau^2`` solved from
   ``sum (y_i - mean)^2 / (se_i^2 + tau^2) = n - 2`` (Paule-Mandel), each run weighing
   ``1 / (se_i^2 + tau^2)``. Where ``Q <= n - 2`` the runs agree better than they state: the
   intervals keep the runs' relative weights and the spread sets the scale (``Q / (n - 2)``);
3. ``t = (mean_right - mean_left) / sqrt(1/W_left + 1/W_right)``: either way the residuals match
   their df, so with equal intervals this is exactly the pooled two-sample t with n - 2 df;
4. the largest |t| over the splits with ``MIN_SEGMENT`` runs on each side is a change point
   when it exceeds the simulated ``1 - ALPHA`` quantile of that maximum for the segment's length
   (n = 6: 4.64, 8: 4.65, 12: 4.26, 40: 3.74) and the step is at least ``min_effect``; both
   sides are then searched again.

Why the spread and not the stated intervals sets the scale: intervals are conservative where
ngb widens them for re-runs (x1.73 before a host has re-run history) or builds them from 3
processes (t = 4.3): a sleeping no-op under load stated +-10-50 % per run while its runs agreed
within 1 %, and a detector that trusted the intervals there found no 5 % step at all. And a
lower, z-like threshold where the intervals seem to cover the spread cannot be calibrated:
whether they do is itself judged from a few runs, and such a rule alarmed 3 % of the time where
the two noises are alike. Why this threshold: the maximum over correlated splits is much less
extreme than Bonferroni says, and the old rule (a Bonferroni t with a MAD's 37 % efficiency:
|z| > 16.6 at n = 7) hid a 5-sigma step. Measured (``tests/test_history.py``): about 1 % false
alarms on 8, 12 and 40 stable runs for every mix of stated and unstated noise, a 5 % step under
1 % run-to-run noise found at the right run in ~94 % of 4+4-run histories and ~99 % of 6+6.

Against the anchors: asv's ``step_detect`` (L1 Potts, penalty by information criterion) states
no false-alarm level; Hunter / Apache Otava's e-divisive means uses permutations (random, weak on
short series). This one is deterministic, uses each run's interval, and states its level and the
runs it needs (``MIN_SEGMENT`` on each side). Pure Python: O(n^2) per level.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ngb.sweeps.report.changepoint_thresholds import ALPHA, MIN_SEGMENT, threshold

__all__ = ["ALPHA", "MIN_SEGMENT", "ChangePoint", "detect", "split_evidence", "split_statistic"]

_FLOOR = 1e-12  # a variance floor (a relative se of 1e-6) for series stated as exact


@dataclass(frozen=True)
class ChangePoint:
    """The level moved between run ``index - 1`` and run ``index`` (``index`` is the first run
    of the new level)."""

    index: int
    before: float  # weighted geometric mean of the segment before
    after: float  # and of the segment after
    z: float  # the test statistic (log scale, signed: > 0 is an increase)
    threshold: float  # the |z| it had to exceed

    @property
    def ratio(self) -> float:
        """after / before (for throughput: < 1 is a slowdown)."""
        return self.after / self.before


def _weighted(y: Sequence[float], w: Sequence[float]) -> tuple[float, float, float]:
    """(sum of weights, weighted mean, weighted squared residual sum)."""
    total = math.fsum(w)
    mean = math.fsum(wi * yi for wi, yi in zip(w, y, strict=True)) / total
    residual = math.fsum(wi * (yi - mean) ** 2 for wi, yi in zip(w, y, strict=True))
    return total, mean, residual


def _between_variance(sides: Sequence[tuple[Sequence[float], Sequence[float]]], df: int) -> float:
    """``tau^2`` with ``sum (y_i - mean_side)^2 / (se_i^2 + tau^2) = df`` (Paule-Mandel: the
    between-run variance that makes the weighted residuals as large as their df ask), for a
    series whose residuals exceed that at ``tau^2 = 0``. Safeguarded Newton on a decreasing
    function: a handful of steps."""

    def excess(tau2: float) -> tuple[float, float]:
        q = slope = 0.0
        for ys, vs in sides:
            w = [1 / (v + tau2) for v in vs]
            _, mean, _ = _weighted(ys, w)
            for wi, yi in zip(w, ys, strict=True):
                q += wi * (yi - mean) ** 2
                slope += wi * wi * (yi - mean) ** 2
        return q - df, slope

    lo, hi = 0.0, math.inf
    # start from the unweighted moment estimate (the answer when the stated part is small)
    n = sum(len(ys) for ys, _ in sides)
    residual = math.fsum(_weighted(ys, [1.0] * len(ys))[2] for ys, _ in sides)
    stated = math.fsum(v for _, vs in sides for v in vs) / n
    tau2 = max(residual / df - stated, 0.0)
    for _ in range(60):
        value, slope = excess(tau2)
        if value > 0:
            lo = tau2
        else:
            hi = tau2
        if abs(value) <= 1e-9 * df or (math.isfinite(hi) and hi - lo <= 1e-12 * hi):
            break
        step = tau2 + value / slope if slope > 0 else math.inf
        tau2 = step if lo < step < hi else (lo + hi) / 2 if math.isfinite(hi) else 2 * lo + 1e-12
    return tau2


def _ratio(step: float, variance: float) -> float:
    """``step / sqrt(variance)``; a noise-free series (variance 0) has an infinite t where it
    steps by more than rounding, and none where it does not."""
    if variance > 0:
        return step / math.sqrt(variance)
    return 0.0 if abs(step) < 1e-12 else math.copysign(math.inf, step)


def split_statistic(y: Sequence[float], own: Sequence[float], k: int) -> tuple[float, float, float]:
    """The weighted t for a change before ``y[k]`` (see module): (t, left mean, right mean).

    ``own``: each run's stated variance on the log scale, already moderated."""
    n = len(y)
    sides = ((y[:k], own[:k]), (y[k:], own[k:]))
    fixed = [_weighted(ys, [1 / v for v in vs]) for ys, vs in sides]
    q = fixed[0][2] + fixed[1][2]  # weighted residuals around the two means, n - 2 df
    if q <= n - 2:  # the runs agree better than they state: their stated scale is too wide
        (w_l, mean_l, _), (w_r, mean_r, _) = fixed
        scale = q / (n - 2)
        return _ratio(mean_r - mean_l, scale * (1 / w_l + 1 / w_r)), mean_l, mean_r
    tau2 = _between_variance(sides, n - 2)
    (w_l, mean_l, _), (w_r, mean_r, _) = (
        _weighted(ys, [1 / (v + tau2) for v in vs]) for ys, vs in sides
    )
    return _ratio(mean_r - mean_l, 1 / w_l + 1 / w_r), mean_l, mean_r


def _moderated(own: Sequence[float]) -> list[float]:
    """The stated variances as weights use them: the median of the segment, except where a run
    states more than 4x it (an interval twice as wide), which keeps a quarter of its own (see
    module: step 1)."""
    floor = max(statistics.median(own), _FLOOR)
    return [max(floor, v / 4) for v in own]


def _best_split(
    y: Sequence[float], own: Sequence[float], lo: int, hi: int
) -> tuple[int, float, float, float] | None:
    """The split of ``[lo, hi)`` with the largest |t|: (index, t, left mean, right mean)."""
    if hi - lo < 2 * MIN_SEGMENT:
        return None
    floored = _moderated(own[lo:hi])
    best: tuple[int, float, float, float] | None = None
    for k in range(MIN_SEGMENT, hi - lo - MIN_SEGMENT + 1):
        t, mean_l, mean_r = split_statistic(y[lo:hi], floored, k)
        if best is None or abs(t) > abs(best[1]):
            best = (lo + k, t, mean_l, mean_r)
    return best


def _own_variances(n: int, rel_se: Sequence[float | None] | None) -> list[float]:
    """Each run's stated variance on the log scale; unknown ones get the median of the rest."""
    given = list(rel_se) if rel_se is not None else [None] * n
    if len(given) != n:
        raise ValueError(f"{n} values but {len(given)} standard errors")
    known = [s * s for s in given if s is not None and math.isfinite(s) and s >= 0]
    fill = statistics.median(known) if known else 0.0
    return [s * s if s is not None and math.isfinite(s) and s >= 0 else fill for s in given]


def detect(
    values: Sequence[float],
    rel_se: Sequence[float | None] | None = None,
    *,
    min_effect: float = 0.0,
) -> list[ChangePoint]:
    """Change points of a positive series (oldest first), in index order.

    ``rel_se``: each value's relative standard error (its stored interval on the log scale;
    None where unknown: the median of the others). ``min_effect``: smallest step to report, as
    a fraction (0.02: 2 %). Non-positive or non-finite values must be left out by the caller.
    A series needs ``2 * MIN_SEGMENT`` values before any change can be found."""
    n = len(values)
    if any(not (math.isfinite(v) and v > 0) for v in values):
        raise ValueError("change points need positive, finite values")
    own = _own_variances(n, rel_se)
    y = [math.log(v) for v in values]
    found: list[ChangePoint] = []
    pending = [(0, n)]
    while pending:
        lo, hi = pending.pop()
        split = _best_split(y, own, lo, hi)
        if split is None:
            continue
        k, t, mean_l, mean_r = split
        limit = threshold(hi - lo)
        if not abs(t) > limit or abs(math.expm1(mean_r - mean_l)) < min_effect:
            continue
        found.append(ChangePoint(k, math.exp(mean_l), math.exp(mean_r), t, limit))
        pending += [(lo, k), (k, hi)]
    found.sort(key=lambda c: c.index)
    return _segment_levels(found, y, own)


def split_evidence(
    values: Sequence[float], rel_se: Sequence[float | None] | None, k: int
) -> tuple[float, float]:
    """``detect``'s statistic for one change before ``values[k]`` over the whole series, and
    the threshold it must pass: (|t|, threshold). Where |t| stays below, the runs' spread hides
    a step there, and "no change point" is the data's answer, not a miss."""
    own = _moderated(_own_variances(len(values), rel_se))
    t, _, _ = split_statistic([math.log(v) for v in values], own, k)
    return abs(t), threshold(len(values))


def _segment_levels(
    points: list[ChangePoint], y: Sequence[float], own: Sequence[float]
) -> list[ChangePoint]:
    """Each change's before/after as the levels of the final segments beside it (the search
    measured them over wider spans, which still held other changes), weighted by the runs'
    stated precision."""
    bounds = [0, *(p.index for p in points), len(y)]
    w = [1 / v for v in _moderated(own)] if own else []

    def level(lo: int, hi: int) -> float:
        return math.exp(_weighted(y[lo:hi], w[lo:hi])[1])

    return [
        ChangePoint(p.index, level(bounds[i], p.index), level(p.index, bounds[i + 2]), p.z,
                    p.threshold)
        for i, p in enumerate(points)
    ]  # fmt: skip
