"""Serially correlated repetitions widen the interval of the mean
(ngb.core.statistics.autocorrelation)."""

from __future__ import annotations

import math
from types import ModuleType

import numpy as np
import pytest
from ngb.core.records.types import MeasureSettings
from ngb.core.statistics import autocorrelation, stopping

from tests.script_modules import load_script


def ar1(rho: float, n: int, rng: np.random.Generator, mean: float = 100.0) -> list[float]:
    """n values of a stationary AR(1) series with unit variance around ``mean``."""
    x = rng.standard_normal()
    out = []
    for _ in range(n):
        x = rho * x + math.sqrt(1 - rho**2) * rng.standard_normal()
        out.append(mean + x)
    return out


def test_independent_repetitions_keep_their_interval() -> None:
    rng = np.random.default_rng(0)
    values = list(100 + rng.standard_normal(2000))
    rho, factor = autocorrelation.inflation(values)
    assert rho < 0.1
    assert factor < 1.25
    assert autocorrelation.inflation([1.0, 2.0, 3.0]) == (0.0, 1.0)  # too few to estimate anything
    assert autocorrelation.inflation([5.0] * 10) == (0.0, 1.0)  # no spread, nothing to widen


def test_lag1_finds_the_correlation_of_a_long_series() -> None:
    rng = np.random.default_rng(1)
    assert autocorrelation.lag1(ar1(0.7, 4000, rng)) == pytest.approx(0.7, abs=0.05)
    # An alternating series is negatively correlated: it never narrows the interval.
    assert autocorrelation.lag1([90.0, 110.0] * 10) == 0.0


def test_variance_factor_is_the_ar1_mean_variance() -> None:
    assert autocorrelation.variance_factor(0.0, 12) == 1.0
    # long series: (1 + rho) / (1 - rho)
    assert autocorrelation.variance_factor(0.5, 100_000) == pytest.approx(3.0, rel=1e-3)
    # n = 2: Var((x1 + x2) / 2) = (2 + 2 rho) / 4 sigma^2 -> factor 1 + rho
    assert autocorrelation.variance_factor(0.6, 2) == pytest.approx(1.6)


def test_widened_interval_holds_the_true_mean_far_more_often() -> None:
    """The point of the module: on correlated repetitions the independent interval misses the
    mean about half the time; the widened one comes near its level."""
    rng = np.random.default_rng(2)
    trials = [ar1(0.7, 12, rng) for _ in range(600)]

    def coverage(serial_: bool) -> float:
        hits = 0
        for values in trials:
            ci = stopping.interval(values, serial=serial_)
            hits += abs(ci.mean - 100.0) <= ci.half_width
        return hits / len(trials)

    independent, widened = coverage(False), coverage(True)
    assert independent < 0.70
    assert widened > 0.78
    # and on independent repetitions it costs little: still about 95 %
    plain = [list(100 + rng.standard_normal(12)) for _ in range(600)]
    hits = sum(abs((ci := stopping.interval(v)).mean - 100) <= ci.half_width for v in plain) / len(
        plain
    )
    assert 0.93 <= hits <= 0.995


def test_verdict_says_how_much_it_widened_and_needs_more_repetitions() -> None:
    rng = np.random.default_rng(3)
    values = [v * 1.0 for v in ar1(0.8, 24, rng, mean=100.0)]
    settings = MeasureSettings(ci_target=0.02)
    verdict = stopping.judge([values], settings)  # one process: the serial widening
    assert verdict.rho > 0.3
    assert verdict.inflation > 1.5
    assert "for serial correlation" in verdict.reason
    plain = stopping.interval(values, serial=False)
    assert verdict.ci_half_width == pytest.approx(plain.half_width * math.sqrt(verdict.inflation))
    # "needs ~N repetitions" counts correlated repetitions as the less they are worth
    shuffled = list(np.random.default_rng(4).permutation(values))
    assert stopping.repetitions_needed(values, 0.005) > stopping.repetitions_needed(shuffled, 0.005)


def coverage_bench() -> ModuleType:
    return load_script("benchmarks/coverage.py")


def test_coverage_benchmark_scores_stated_and_old_intervals_on_the_same_trials() -> None:
    """benchmarks/coverage.py: leave-one-out coverage and width ratio of each method."""
    bench = coverage_bench()

    rng = np.random.default_rng(6)
    trials = []
    for _ in range(80):
        groups = [list(ar1(0.8, 6, rng)) for _ in range(2)]
        mean = float(np.mean([v for g in groups for v in g]))
        trials.append({"mean": mean, "half": 0.0, "groups": groups})
    plain_share, plain_ratio = bench.coverage(trials, bench.end_to_end(False))
    serial_share, serial_ratio = bench.coverage(trials, bench.end_to_end(True))
    assert plain_share < serial_share and serial_ratio > 1.5 * plain_ratio
    # a stated half-width of zero holds nothing; an infinite one (no interval) holds everything
    assert bench.coverage(trials, bench.stated)[0] == 0.0
    unknown = [{**t, "half": None} for t in trials]
    assert bench.coverage(unknown, bench.stated)[0] == 1.0


def test_coverage_benchmark_removes_a_drift_its_probe_saw() -> None:
    """benchmarks/coverage.py: a host that steps from one speed to another between trials (seen
    on the development VM: MHA-128 b1 at ~12,200/s, then ~16,000/s) fails every trial's interval
    against the others' mean; scaled by a probe that saw the same step, the intervals hold."""
    bench = coverage_bench()

    rng = np.random.default_rng(8)
    trials = []
    for i in range(12):
        level = 12_200.0 if i < 5 else 16_000.0  # the host's speed during this trial
        mean = level * (1 + 0.005 * rng.standard_normal())
        windows = [level * 1.3 * (1 + 0.002 * rng.standard_normal()) for _ in range(6)]
        trials.append({"mean": mean, "half": 0.012 * mean, "groups": [[mean]],
                       "probe": float(np.mean(windows)), "probe_windows": windows})  # fmt: skip
    raw_share, _ = bench.coverage(trials, bench.stated)
    adjusted = bench.drift_adjusted(trials)
    share, ratio = bench.coverage(adjusted, bench.stated)
    assert raw_share == 0.0 and share >= 0.9 and 0.8 <= ratio <= 3.0
    between, within = bench.probe_spread(trials)
    assert between > 0.1 and within < 0.002  # the probe tells drift from its own noise
