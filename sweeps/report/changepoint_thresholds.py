"""How large a change-point statistic must be before ``changepoints.detect`` names a change.

The statistic is the largest two-sample t over every split of a series that leaves
``MIN_SEGMENT`` runs on each side (see ``changepoints``). Its null distribution is not a t: it is
the maximum of several correlated t's, each with ``n - 2`` df, and a Bonferroni bound over the
splits is far too strict for short series (the old detector asked |z| > 16.6 at n = 7, which hid
a 5-sigma step). So the ``1 - ALPHA`` quantile is simulated here, once, for the pure-noise series
that the statistic's worst case is (all noise between runs, none stated: the stated intervals
then only raise the variance, see ``changepoints``), and stored, so that detection is
deterministic, needs no numpy and costs nothing at run time.

``THRESHOLDS`` holds n -> quantile for n = 6..40 (400,000 series each) and a sparser grid up to
200 (100,000 each); between grid points it is interpolated linearly in log n, and beyond 200 the
Bonferroni t bound over the splits is used (conservative, and within 0.3 of the simulated value
there). Regenerate with ``python -m ngb.sweeps.report.changepoint_thresholds`` (numpy; about a
minute): the printed table replaces ``THRESHOLDS`` below. ``tests/test_history.py`` measures the
false-alarm and detection rates that follow from it.
"""

from __future__ import annotations

import math

from ngb.core.statistics.student_t import t_quantile

ALPHA = 0.01  # false-alarm level per series search
MIN_SEGMENT = 3  # runs on each side of a change: one or two odd runs are not a change
SEED = 20250045

# n -> the 1 - ALPHA quantile of max |t| over the splits (simulated, see module)
THRESHOLDS: dict[int, float] = {
    6: 4.636, 7: 4.744, 8: 4.654, 9: 4.556, 10: 4.458, 11: 4.326, 12: 4.258, 13: 4.193, 14: 4.124,
    15: 4.085, 16: 4.039, 17: 4.007, 18: 3.984, 19: 3.950, 20: 3.924, 21: 3.914, 22: 3.886,
    23: 3.871, 24: 3.846, 25: 3.844, 26: 3.830, 27: 3.809, 28: 3.798, 29: 3.801, 30: 3.797,
    31: 3.781, 32: 3.774, 33: 3.767, 34: 3.771, 35: 3.760, 36: 3.764, 37: 3.751, 38: 3.745,
    39: 3.750, 40: 3.736, 50: 3.692, 60: 3.679, 80: 3.674, 100: 3.678, 150: 3.666, 200: 3.689,
}  # fmt: skip


def bonferroni(n: int, min_segment: int = MIN_SEGMENT, alpha: float = ALPHA) -> float:
    """The Bonferroni t bound over the candidate splits of ``n`` runs (conservative)."""
    candidates = max(n - 2 * min_segment + 1, 1)
    return t_quantile(1 - alpha / (2 * candidates), max(n - 2, 1))


def threshold(n: int) -> float:
    """The |t| a split of ``n`` runs must exceed (``n >= 2 * MIN_SEGMENT``; see module)."""
    if n < 2 * MIN_SEGMENT:
        raise ValueError(f"a change point needs {2 * MIN_SEGMENT} runs, got {n}")
    if n in THRESHOLDS:
        return THRESHOLDS[n]
    grid = sorted(THRESHOLDS)
    if n > grid[-1]:
        return bonferroni(n)
    upper = next(g for g in grid if g > n)
    lower = max(g for g in grid if g < n)
    share = (math.log(n) - math.log(lower)) / (math.log(upper) - math.log(lower))
    return THRESHOLDS[lower] + share * (THRESHOLDS[upper] - THRESHOLDS[lower])


def simulate(n: int, series: int, seed: int = SEED) -> float:
    """The simulated ``1 - ALPHA`` quantile of max |t| for ``n`` pure-noise runs (numpy)."""
    import numpy as np

    rng = np.random.default_rng([seed, n])
    splits = np.arange(MIN_SEGMENT, n - MIN_SEGMENT + 1)
    found = []
    for _ in range(20):  # in chunks: 400,000 x 40 doubles at once is more than needed
        y = rng.standard_normal((series // 20, n))
        c1, c2 = np.cumsum(y, 1), np.cumsum(y * y, 1)
        l1, l2 = c1[:, splits - 1], c2[:, splits - 1]
        r1, r2 = c1[:, -1:] - l1, c2[:, -1:] - l2
        residual = (l2 - l1**2 / splits + r2 - r1**2 / (n - splits)) / (n - 2)
        step = r1 / (n - splits) - l1 / splits
        t = np.abs(step) / np.sqrt(residual * (1 / splits + 1 / (n - splits)))
        found.append(t.max(1))
    return float(np.quantile(np.concatenate(found), 1 - ALPHA))


def main() -> None:
    """Print a fresh ``THRESHOLDS`` table (see module)."""
    grid = [*range(6, 41), 50, 60, 80, 100, 150, 200]
    table = {n: simulate(n, 400_000 if n <= 40 else 100_000) for n in grid}
    print("THRESHOLDS = {" + ", ".join(f"{n}: {q:.3f}" for n, q in table.items()) + "}")


if __name__ == "__main__":
    main()
