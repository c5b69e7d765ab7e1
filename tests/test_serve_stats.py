"""How a serving run is summed up and judged (issue 43): LoadGen's early-stopping count, the
percentiles over stretches of time, the exceedance's batch-means error, and the verdict's rules
(achieved rate within 1 %, issue lag, failed calls, the claimed percentile)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from ngb.core.records import arrivals
from ngb.core.serving import serve_sim, serve_stats
from ngb.core.serving.loadgen import Trace
from ngb.core.statistics import percentiles


@pytest.mark.parametrize("over", [0, 1, 10, 100, 1000])
def test_needed_is_loadgens_count(over: int) -> None:
    """The fewest requests for which seeing ``over`` late ones has odds <= 2.5 % were the late
    share really 1 %: the binomial CDF at ``needed`` is within, one request fewer is not."""
    from scipy import stats

    n = serve_stats.needed(over, 0.99)
    assert stats.binom.cdf(over, n, 0.01) <= 0.025 < stats.binom.cdf(over, n - 1, 0.01)


def test_needed_without_late_requests_is_the_claim_minimum() -> None:
    assert serve_stats.needed(0, 0.99) == percentiles.min_calls(0.99) == 368
    assert serve_stats.needed(0, 0.90) == percentiles.min_calls(0.90)


def test_the_count_agrees_with_the_binomial_upper_bound() -> None:
    """For independent latencies the LoadGen count is met exactly where the order-statistic
    upper bound of the p99 is within the limit (the same statement)."""
    rng = np.random.default_rng(5)
    for n in (400, 1000, 3000):
        lat = np.sort(rng.exponential(10.0, n))
        high = percentiles.interval(lat.tolist(), 0.99).high
        for limit in np.quantile(lat, [0.97, 0.985, 0.99, 0.995, 0.999]):
            over = int(np.sum(lat > limit))
            met = n >= serve_stats.needed(over, 0.99)
            assert met == (high is not None and high <= limit), (n, limit)


def _trace(lat_ms: np.ndarray, qps: float = 100.0, lag_ms: float = 0.05) -> Trace:
    plan = arrivals.schedule(qps, len(lat_ms) / qps, seed=0)
    sched = np.round(plan.times_s * 1e9).astype(np.int64)
    issued = sched + int(lag_ms * 1e6)
    done = sched + np.round(lat_ms * 1e6).astype(np.int64)
    n = len(lat_ms)
    return Trace(
        "server", sched, issued, issued, done, np.arange(n), np.ones(n, dtype=np.int64),
        wall_s=float(done.max()) / 1e9, issue_s=float(issued.max()) / 1e9, concurrency=1,
        schedule=plan,
    )  # fmt: skip


def test_a_steady_run_is_valid_with_every_tail_claimed() -> None:
    lat = np.random.default_rng(1).exponential(5.0, 5000) + 1.0
    s = serve_stats.summarize(_trace(lat), limit_ms=100.0)
    assert s.verdict == "VALID", s.reasons
    assert all(p.claimed for p in s.latency.values())
    assert s.latency["p99"].value == pytest.approx(np.percentile(lat, 99), rel=1e-3)
    assert s.issued_qps == pytest.approx(100.0, rel=1e-3)
    assert s.meets is True and s.over_limit == 0 and s.needed == 368


@pytest.mark.parametrize(
    ("lag_ms", "qps", "words"),
    [(3.0, 100.0, "issue lag p99"), (0.5, 100.0, None), (40.0, 1.0, None), (80.0, 1.0, "lag")],
)
def test_issue_lag_is_held_to_1_ms_or_5_percent_of_the_gap(
    lag_ms: float, qps: float, words: str | None
) -> None:
    lat = np.full(2000, 3.0) + np.random.default_rng(2).exponential(1.0, 2000)
    s = serve_stats.summarize(_trace(lat, qps, lag_ms))
    if words is None:
        assert not any("lag" in r for r in s.reasons), s.reasons
    else:
        assert any(words in r for r in s.reasons), s.reasons
        assert s.verdict == "INVALID"


def test_a_load_generator_that_fell_behind_is_invalid() -> None:
    trace = _trace(np.full(3000, 2.0))
    trace.issue_s *= 1.03  # the last request queued 3 % late: the rate it achieved is lower
    s = serve_stats.summarize(trace)
    assert s.verdict == "INVALID"
    assert any("off the target" in r for r in s.reasons)


def test_failed_calls_and_too_few_requests_are_invalid() -> None:
    trace = _trace(np.full(200, 2.0))
    trace.errors, trace.first_error = 3, "RuntimeError: boom"
    s = serve_stats.summarize(trace)
    assert any("3 call(s) failed: RuntimeError: boom" in r for r in s.reasons)
    assert any("p99 not claimed: 200 requests, 368 needed" in r for r in s.reasons)


def test_a_queue_widens_the_p99_interval_beyond_the_binomial() -> None:
    """Latencies of an M/M/1 queue are correlated in time: the interval over stretches of the
    run is wider than the order-statistic one of the same latencies taken as independent."""
    trace = serve_sim.mm1(54.0, 100.0, 120.0, seed=3)
    lat = trace.query_latency_ms()
    s = serve_stats.summarize(trace)
    binomial = percentiles.interval(np.sort(lat).tolist(), 0.99)
    p99 = s.latency["p99"]
    assert p99.high is not None and binomial.high is not None and binomial.low is not None
    assert p99.low is not None and p99.low <= binomial.low and p99.high >= binomial.high
    assert (p99.high - p99.low) > 1.2 * (binomial.high - binomial.low)


def test_the_exceedance_error_follows_the_spread_between_runs() -> None:
    """The batch-means standard error of the share over the limit matches the spread of that
    share over 200 seeded M/M/1 runs (root mean square within 25 %)."""
    shares, ses = [], []
    for seed in range(200):
        ex = serve_stats.exceedance(serve_sim.mm1(54.0, 100.0, 60.0, seed).query_latency_ms(), 100)
        shares.append(ex.share)
        ses.append(ex.se)
    assert math.sqrt(np.mean(np.square(ses))) == pytest.approx(np.std(shares), rel=0.25)
    assert np.mean(shares) == pytest.approx(0.01, rel=0.15)  # exp(-(100 - 54) * 0.1)


def test_multistream_latency_is_the_querys_last_request() -> None:
    n = 16
    sched = np.repeat(np.arange(2) * 10_000_000, 8).astype(np.int64)
    done = sched + np.arange(1, n + 1, dtype=np.int64) * 1_000_000
    trace = Trace(
        "multistream", sched, sched, sched, done, np.repeat(np.arange(2), 8),
        np.ones(n, dtype=np.int64), wall_s=0.03, issue_s=0.01,
    )  # fmt: skip
    assert trace.query_latency_ms().tolist() == [8.0, 16.0]
