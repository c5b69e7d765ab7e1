"""Repetitions are a time series: how far their serial correlation widens the interval of a mean.

Why: a Student-t interval of the mean assumes the repetitions are independent. On a machine whose
own speed wanders -- a VM whose host is shared, clocks that step, a neighbour on the same cores --
a slow stretch lasts several repetitions, so consecutive repetitions are correlated. Measured on
the 2-core development VM (a plain loop of the conv block, nothing of ngb around it): lag-1
autocorrelation 0.5-0.84 between windows of 0.25-2 s, and the ratio of two runtimes timed in
alternating windows spread as much as either alone (the wander is not common to both, so pairing
does not cancel it). An interval that ignores this is too narrow by about sqrt((1+rho)/(1-rho)):
x2.4 at rho = 0.7. That is what two back-to-back runs of the cpu-repro sweep showed (only 58 of 89
per-trial 95 % intervals overlapped, where honest intervals of the same quantity overlap ~99 %).

Model: the repetitions (in the order they ran, the workers' one after another, so a shift between
processes counts as persistence too) as a stationary AR(1) series. ``lag1`` estimates the lag-1
autocorrelation, corrected for its small-sample bias (E[rho_hat] ~ rho - (1 + 3 rho) / n,
Kendall) and clipped to [0, ``RHO_MAX``]: a negative estimate never narrows an interval, and the
cap keeps one short, unlucky sample from making it infinite. ``variance_factor`` is the exact
finite-n factor of the mean's variance, 1 + 2 sum_k (1 - k/n) rho^k; ``inflation`` multiplies it
by the sample variance's own downward bias under correlation ((n - 1) / (n - factor)), and the
Student-t half-width (n - 1 degrees of freedom) is multiplied by its square root. Independent
repetitions give rho ~ 0 and keep the interval as it was.

How honest it is (simulated AR(1) series, 1000 trials each, ``tests/test_autocorrelation.py``
checks one
case): at rho = 0.7 the plain interval holds the true mean in 55-58 % of trials, the widened one
in 83 % (n = 12) to 88 % (n = 24); at rho = 0 both hold it 94-97 % of the time. It stays below
95 % for strong correlation over few repetitions because a short series under-reads its own
correlation; a t with "effective" degrees of freedom gained only 4-8 points there at the price
of intervals up to 4x wider, so it is not used. On a real machine ``benchmarks/coverage.py``
(``ngb bench coverage``) measures how often an interval holds a re-run's mean.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: the largest lag-1 autocorrelation used (x4.4 on the half-width at n = 40)
RHO_MAX = 0.9
#: below this many repetitions there is no estimate: the interval is left as it was
MIN_N = 4


def lag1(values: Sequence[float]) -> float:
    """Bias-corrected lag-1 autocorrelation of ``values`` in [0, RHO_MAX]; 0 when n < MIN_N or
    the values do not vary."""
    data = [float(v) for v in values if math.isfinite(v)]
    n = len(data)
    if n < MIN_N:
        return 0.0
    mean = math.fsum(data) / n
    dev = [v - mean for v in data]
    denom = math.fsum(d * d for d in dev)
    if denom <= 0:
        return 0.0
    raw = math.fsum(a * b for a, b in zip(dev, dev[1:], strict=False)) / denom
    corrected = (n * raw + 1) / (n - 3)  # solves E[raw] = rho - (1 + 3 rho) / n for rho
    return min(RHO_MAX, max(0.0, corrected))


def variance_factor(rho: float, n: int) -> float:
    """Var(mean of n AR(1) values) over Var(mean of n independent ones)."""
    if n < 2 or rho <= 0:
        return 1.0
    return 1 + 2 * math.fsum((1 - k / n) * rho**k for k in range(1, n))


def long_run_factor(rho: float) -> float:
    """(1 + rho) / (1 - rho): how many times more repetitions correlated ones need than
    independent ones, for long series (what "needs ~N repetitions" scales by)."""
    return (1 + rho) / (1 - rho) if rho < 1 else math.inf


def inflation(values: Sequence[float]) -> tuple[float, float]:
    """(rho, factor): multiply the independent-sample variance of the mean by ``factor``."""
    data = [float(v) for v in values if math.isfinite(v)]
    n = len(data)
    rho = lag1(data)
    factor = variance_factor(rho, n)
    if factor <= 1:
        return rho, 1.0
    # s^2 under-reads the variance when values are correlated: E[s^2] = sigma^2 (n - f) / (n - 1).
    # f < n always for rho < 1; the floor keeps the division finite at the cap.
    bias = (n - 1) / max(n - factor, 1.0)
    return rho, factor * bias
