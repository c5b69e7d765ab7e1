"""The stopping rule: t quantiles, plans per worker, when to stop, verdicts, GPU warm-up settle."""

from __future__ import annotations

import itertools
import math

import pytest
from ngb.core import stopping
from ngb.core.errors import ConfigError
from ngb.core.measure import run_trial
from ngb.core.stopping import INVALID, VALID, Plan, interval, judge, plan, settle, split
from ngb.core.types import MeasureSettings, TrialSpec

QUICK = {"warmup_iters": 1, "warmup_s": 0.0, "min_iters": 1, "min_duration_s": 0.01}


@pytest.mark.parametrize("df", [1, 2, 3, 5, 10, 30, 120])
@pytest.mark.parametrize("p", [0.95, 0.975, 0.995])
def test_t_quantile_without_scipy_matches_scipy(p: float, df: int) -> None:
    from scipy import stats

    exact = float(stats.t.ppf(p, df))
    assert stopping.t_quantile(p, df) == pytest.approx(exact)
    assert stopping._t_quantile_approx(p, df) == pytest.approx(exact, rel=1e-2 if df < 5 else 2e-3)


def test_interval_by_hand() -> None:
    ci = interval([10.0, 12.0, 11.0, 13.0], 0.95)
    sd = math.sqrt(((10 - 11.5) ** 2 + 0.25 + 0.25 + 1.5**2) / 3)
    assert ci.mean == 11.5 and ci.half_width == pytest.approx(3.182446 * sd / 2, rel=1e-6)
    assert ci.relative == pytest.approx(ci.half_width / 11.5)
    assert math.isinf(interval([5.0]).relative) and interval([]).n == 0
    assert interval([1.0, math.nan, 1.0]).n == 2


def test_split_shares() -> None:
    assert split(10, 3) == [4, 3, 3] and split(100, 2) == [50, 50] and split(2, 2) == [1, 1]


def test_fixed_plan_splits_the_count_and_never_uses_idle_workers() -> None:
    settings = MeasureSettings(repetitions=5, workers=2)
    shares = [plan(settings, k, (), 0.0) for k in range(2)]
    assert [s.max_reps for s in shares] == [3, 2] and not any(s.adaptive for s in shares)
    assert shares[1].stop_reason([1.0, 1.0], 0.0) == stopping.STOP_FIXED
    assert shares[1].stop_reason([1.0], 1e9) is None  # a fixed count ignores the time cap
    assert stopping.worker_count(MeasureSettings(repetitions=1, workers=4)) == 1


def test_adaptive_plan_bounds_and_budget() -> None:
    settings = MeasureSettings(min_repetitions=6, max_repetitions=40, workers=2, max_measure_s=60)
    first = plan(settings, 0, (), 0.0)
    assert (first.min_reps, first.max_reps, first.budget_s) == (3, 20, 30.0)
    second = plan(settings, 1, [100.0] * 7, 10.0)
    assert second.budget_s == 50.0 and second.prior == (100.0,) * 7 and second.rep_offset == 7
    assert Plan.from_dict(second.to_dict()) == second


def test_adaptive_stop_reasons() -> None:
    share = Plan(adaptive=True, min_reps=3, max_reps=6, budget_s=10.0, target=0.02)
    assert share.stop_reason([100.0, 100.0], 0.1) is None  # below the minimum
    assert share.stop_reason([100.0, 100.5, 99.5], 0.1) == stopping.STOP_CI
    noisy = [100.0, 150.0, 80.0]
    assert share.stop_reason(noisy, 0.1) is None
    assert share.stop_reason([*noisy, 120.0, 70.0, 130.0], 0.1) == stopping.STOP_MAX
    assert share.stop_reason(noisy, 10.0) == stopping.STOP_TIME
    # A later worker pools the earlier ones: its own steady values cannot hide a different mean.
    later = Plan(adaptive=True, min_reps=3, max_reps=6, prior=(60.0, 61.0, 60.5), target=0.02)
    assert later.stop_reason([100.0, 100.0, 100.0], 0.1) is None


def test_judge_verdicts() -> None:
    settings = MeasureSettings()
    ok = judge([100.0, 100.5, 99.5, 100.2], settings)
    assert ok.verdict == VALID and "within ±2.0%" in ok.reason and ok.ci_half_width > 0
    wide = judge([100.0, 150.0, 80.0], settings, stopped=stopping.STOP_MAX)
    assert wide.verdict == INVALID and "wider than the target" in wide.reason
    assert "maximum repetitions" in wide.reason
    assert judge([100.0], settings).verdict == INVALID
    busy = judge([100.0, 100.0], settings, disturbed="a hog")
    assert busy.verdict == INVALID and busy.reason == "disturbed: a hog"


@pytest.mark.parametrize("cov", [0.005, 0.03, 0.1, 0.25])
@pytest.mark.parametrize("target", [0.01, 0.02, 0.05])
def test_repetitions_for_cov_is_the_smallest_count_that_meets_the_target(
    cov: float, target: float
) -> None:
    n = stopping.repetitions_for_cov(cov, target)

    def half(k: int) -> float:
        return stopping.t_quantile(0.975, k - 1) * cov / math.sqrt(k)

    assert half(n) <= target
    assert n == 2 or half(n - 1) > target  # two is the fewest that give an interval


def test_repetitions_needed_edges() -> None:
    assert stopping.repetitions_for_cov(0.0, 0.02) == 2
    assert stopping.repetitions_for_cov(5.0, 0.001) > 10_000  # beyond the cap: "more than"
    assert stopping.repetitions_needed([100.0], 0.02) > 10_000  # no spread can be known
    # CoV 10 %: ~99 repetitions for ±2 % (z^2 * 25 = 96, plus the t correction)
    assert stopping.repetitions_needed([90.0, 110.0] * 10, 0.02) in range(95, 105)


def test_an_invalid_verdict_says_what_the_target_would_need() -> None:
    noisy = [100.0, 120.0, 85.0, 105.0, 95.0, 110.0]
    wide = judge(noisy, MeasureSettings(), stopped=stopping.STOP_TIME)
    needed = stopping.repetitions_needed(noisy, 0.02)
    assert wide.reason.endswith(f"at this spread the target needs ~{needed} repetitions")
    assert 40 < needed < 200
    hopeless = judge([10.0, 200.0, 5.0], MeasureSettings(ci_target=0.001))
    assert "more than 10000 repetitions" in hopeless.reason


def test_settle_waits_for_the_clock() -> None:
    clocks = iter([1000.0, 1400.0, 1700.0, 1750.0, 1755.0, 1755.0])
    settled = settle(lambda: 500.0, clock=lambda: next(clocks), tolerance=0.01, max_s=100)
    assert settled.settled and settled.windows == 5 and settled.clocks[-1] == 1755.0


def test_settle_waits_for_throughput_and_gives_up_at_the_cap() -> None:
    tputs = iter([100.0, 200.0, 300.0, 302.0])
    settled = settle(lambda: next(tputs), tolerance=0.02, max_s=100)
    assert settled.settled and settled.windows == 4 and settled.clocks == []
    ticks = itertools.count(0.0, 1.0)  # a fake time source: one second per reading
    never = itertools.count(100.0, 50.0)
    capped = settle(lambda: next(never), max_s=5.0, now=lambda: next(ticks))
    assert not capped.settled and capped.seconds >= 5.0 and capped.windows == 5


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"min_repetitions": 1}, "min_repetitions must be >= 2"),
        ({"min_repetitions": 8, "max_repetitions": 4}, "max_repetitions"),
        ({"ci_target": 0.0}, "ci_target must be between 0 and 1"),
        ({"confidence": 1.5}, "confidence must be between"),
        ({"workers": 0}, "workers must be > 0"),
        ({"repetitions": 0}, "repetitions must be > 0"),
    ],
)
def test_bad_settings(bad: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        MeasureSettings(**bad)


def _undisturbed(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine is shared: keep others' CPU out of what these tests check."""
    from ngb.core import interference

    monkeypatch.setattr(interference, "disturbance", lambda **kw: None)


def test_adaptive_trial_stops_at_the_minimum_when_the_target_is_met(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _undisturbed(monkeypatch)
    measure = MeasureSettings(**QUICK, workers=1, min_repetitions=4, ci_target=0.9)
    # Sleeping calls: steady enough that 4 repetitions give a CI well inside ±90 %.
    options = {"sleep_s": 0.002}
    result = run_trial(
        TrialSpec(model="m", compiler="noop", compiler_options=options, measure=measure)
    )
    assert result.ok, result.error
    assert result.throughput.n == 4 and result.verdict == VALID and not result.disturbed
    assert result.extra["workers"][0]["stopped"] == stopping.STOP_CI
    assert result.extra["measure"]["mode"] == "adaptive" and result.ci_half_width is not None


def test_adaptive_trial_runs_to_the_maximum_and_is_invalid(monkeypatch: pytest.MonkeyPatch) -> None:
    _undisturbed(monkeypatch)
    measure = MeasureSettings(
        **QUICK, workers=1, min_repetitions=3, max_repetitions=5, ci_target=1e-9
    )
    result = run_trial(
        TrialSpec(model="m", compiler="noop", compiler_options={"sleep_s": 0.001}, measure=measure)
    )
    assert result.throughput.n == 5 and result.verdict == INVALID
    assert "wider than the target" in result.verdict_reason
    assert "maximum repetitions" in result.verdict_reason


def test_adaptive_trial_stops_at_the_time_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    _undisturbed(monkeypatch)
    measure = MeasureSettings(
        **{**QUICK, "min_duration_s": 0.03}, workers=1, ci_target=1e-9, max_measure_s=0.1
    )
    result = run_trial(TrialSpec(model="m", compiler="noop", measure=measure))
    assert 2 <= result.throughput.n <= 5 and result.extra["workers"][0]["stopped"] == "time cap"
