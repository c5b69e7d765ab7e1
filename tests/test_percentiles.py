"""Latency tails with their own interval (issue 30, item 5): order statistics, the minimum number
of calls, coverage of the true p99 in simulation, the store's columns and ``advise --p99-ms``."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from ngb.core.records.types import MeasureSettings, Stats, TrialResult, TrialSpec
from ngb.core.statistics import percentiles
from ngb.sweeps.report import advise
from ngb.sweeps.report.data import ReportData
from ngb.sweeps.store.database import Store


def test_minimum_calls_follow_the_binomial_rule() -> None:
    """q ** n <= 2.5 %: the largest call bounds the q-quantile from above only from n on
    (LoadGen's early-stopping count with no over-latency call, at one-sided 97.5 %)."""
    assert [percentiles.min_calls(q) for q in (0.5, 0.9, 0.99)] == [6, 36, 368]
    for q in (0.5, 0.9, 0.99):
        n = percentiles.min_calls(q)
        assert q**n <= 0.025 < q ** (n - 1)
        assert percentiles.rank_bounds(n, q)[1] == n  # the maximum is the bound, just
        assert percentiles.rank_bounds(n - 1, q)[1] is None


def test_p99_of_37_calls_is_not_claimed() -> None:
    """The issue's case: 37 calls, whose "p99" is their maximum."""
    calls = sorted(float(x) for x in range(1, 38))
    p99 = percentiles.interval(calls, 0.99, "p99")
    assert not p99.claimed and p99.high is None and p99.low is not None
    assert "not claimed: 37 calls, 368 needed" in percentiles.describe(p99)
    p50 = percentiles.interval(calls, 0.5, "p50")
    assert p50.low is not None and p50.high is not None  # the median of 37 has bounds
    assert p50.claimed and p50.low < p50.value < p50.high


def test_ranks_match_the_binomial_by_hand() -> None:
    """n = 100, median: P(B <= 39) = 0.0176, P(B <= 40) = 0.0284; P(B >= 61) = 0.0176."""
    assert percentiles.rank_bounds(100, 0.5) == (41, 61)
    # a large n stays exact and fast (a window of the binomial, not all of it)
    low, high = percentiles.rank_bounds(1_000_000, 0.99)
    assert low is not None and high is not None
    assert 989_700 < low < 990_000 < high < 990_300


@pytest.mark.parametrize("n", [400, 1000, 5000])
@pytest.mark.parametrize("q", [0.5, 0.9, 0.99])
def test_coverage_is_at_least_the_level_and_close_to_it(n: int, q: float) -> None:
    """Exact coverage P(l <= B <= u - 1) from the binomial: 95-97 % at every size ngb sees."""
    low, high = percentiles.rank_bounds(n, q)
    assert low is not None and high is not None
    start, cdf = percentiles._binom_cdf_table(n, q)
    coverage = cdf[high - 1 - start] - cdf[low - 1 - start]
    assert 0.95 <= coverage <= 0.97, coverage


def test_p99_interval_covers_the_true_p99_in_simulation() -> None:
    """2000 simulated trials of 1000 calls from a skewed latency law (lognormal, sigma 0.5) with
    a known p99: the interval covers it in 95-97 % of them, and the upper bound alone in at least
    97.5 % (it is what ``advise --p99-ms`` filters on)."""
    rng = np.random.default_rng(30)
    sigma, trials, n = 0.5, 2000, 1000
    truth = math.exp(sigma * 2.3263478740408408)  # the lognormal's 0.99 quantile
    covered = upper_holds = 0
    for _ in range(trials):
        calls = np.sort(rng.lognormal(0.0, sigma, n)).tolist()
        p = percentiles.interval(calls, 0.99, "p99")
        assert p.low is not None and p.high is not None
        covered += p.low <= truth <= p.high
        upper_holds += truth <= p.high
    assert 0.95 <= covered / trials <= 0.975, covered / trials  # measured: 0.9625
    assert upper_holds / trials >= 0.975


# ---------------------------------------------------------------- a trial, the store, advise


def _result(i: int, n_calls: int, tail_ms: float, slow: int = 5) -> TrialResult:
    """A stored trial of ``n_calls`` calls near 10 ms, ``slow`` of them taking ``tail_ms``."""
    spec = TrialSpec(model="resnet18", compiler=("identity", "onnxruntime", "openvino")[i],
                     measure=MeasureSettings(repetitions=4))  # fmt: skip
    calls = sorted([10.0 + 0.0001 * k for k in range(n_calls - slow)] + [tail_ms] * slow)
    tails = percentiles.tails(calls)
    return TrialResult(
        key=spec.key,
        spec=spec.to_dict(),
        finished_at=1_700_000_000.0 + i,
        throughput=Stats(n=4, mean=100.0 * (i + 1), std=1.0),
        repetitions=[{"iters": 5, "elapsed_s": 1.0, "throughput": 100.0 * (i + 1)}] * 4,
        latency_ms=Stats(n=len(calls), p50=tails["p50"].value, p99=tails["p99"].value),
        latency_calls=len(calls),
        latency_ci_ms={name: [p.low, p.high] for name, p in tails.items()},
        latency_sample_ns=[int(c * 1e6) for c in calls],
        ci_half_width=2.0,
        verdict="VALID",
    )


def test_store_keeps_bounds_and_calls_and_advise_filters_on_the_upper_bound(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "r.duckdb")
    store.create_run("t", "tails", 'baseline = "identity"\n', ["box"], 3)
    results = [
        _result(0, 2000, 12.0),  # identity: p99 bounded well under 15 ms
        _result(1, 2000, 40.0, slow=30),  # onnxruntime: 1.5 % of calls at 40 ms
        _result(2, 100, 11.0),  # openvino: fastest, but 100 calls cannot claim a p99
    ]
    store.ingest_results("t", "box", results)
    _, rows = store.select(
        "SELECT compiler, latency_calls, latency_p99_lo_ms, latency_p99_hi_ms, "
        "latency_kept_every FROM trials ORDER BY compiler"
    )
    by = {r[0]: r[1:] for r in rows}
    assert by["openvino"][0] == 100 and by["openvino"][2] is None  # not claimed: NULL
    assert by["identity"][1] <= by["identity"][2] <= 12.0 and by["identity"][3] == 1
    _, kept = store.select("SELECT count(*), max(call) FROM latencies WHERE key = ?",
                          [results[0].key])  # fmt: skip
    assert kept == [(2000, 1999)]

    data = ReportData(store)
    answer = advise.advise_one(data, "resnet18", "box", advise.Constraints(p99_ms=15.0))
    assert answer.choice is not None and answer.choice.row["compiler"] == "identity"
    cands = {c.row["compiler"]: c for c in _candidates(data)}
    (unclaimed,) = cands["openvino"].misses
    assert unclaimed.startswith("p99 not claimed: 100 calls, 368 needed (more calls or")
    (miss,) = cands["onnxruntime"].misses
    assert miss.startswith("p99 may be 40ms > 15ms") and "upper bound" in miss


def _candidates(data: ReportData) -> list[advise.Candidate]:
    from ngb.sweeps.report.data import Cell

    out = []
    for row in data.trials():
        c = advise.Candidate(row, Cell(None), Cell(None), Cell(None))
        advise._check_p99(c, 15.0)
        out.append(c)
    return out


def test_a_real_trial_records_tails_and_keeps_a_thinned_sample() -> None:
    """noop calls are sub-microsecond: far more than ``LATENCY_KEEP`` of them, all counted in the
    percentiles, a 1-in-k sample kept in call order."""
    from ngb.core.trial.measure import run_trial
    from ngb.core.trial.timing import LATENCY_KEEP

    spec = TrialSpec(model="noop-model", compiler="noop", measure=MeasureSettings(
        warmup_iters=1, warmup_s=0.0, min_iters=3, min_duration_s=0.05, repetitions=2,
        workers=1, quiet_check_s=0.0))  # fmt: skip
    result = run_trial(spec)
    assert result.ok, result.error
    assert result.latency_calls == result.latency_ms.n > LATENCY_KEEP
    assert len(result.latency_sample_ns) <= LATENCY_KEEP and result.latency_sample_every > 1
    for name in ("p50", "p90", "p99"):
        low, high = result.latency_ci_ms[name]
        value = getattr(result.latency_ms, name)
        assert low is not None and high is not None and low <= value <= high
    assert result.extra["latency"]["min_calls"]["p99"] == 368


def test_a_p99_under_the_limit_whose_upper_bound_is_over_it_misses() -> None:
    """2000 calls evenly from 10 to 20 ms: the sample p99 (19.9) meets 19.92 ms, its 95 % upper
    bound (the 1989th call, 19.945) does not -- a p99 that may exceed the limit does not pass.
    A row stored before the bounds were (no call count) is held to its sample p99."""
    from ngb.sweeps.report.data import Cell

    calls = [10.0 + 10.0 * k / 1999 for k in range(2000)]
    p99 = percentiles.interval(calls, 0.99, "p99")
    assert p99.value < 19.92 < p99.high  # type: ignore[operator]
    row = {"compiler": "x", "latency_calls": 2000, "latency_p99_ms": p99.value,
           "latency_p99_hi_ms": p99.high}  # fmt: skip
    new = advise.Candidate(row, Cell(None), Cell(None), Cell(None))  # type: ignore[arg-type]
    advise._check_p99(new, 19.92)
    assert new.misses and new.misses[0].startswith("p99 may be 19.9ms > 19.92ms")
    old = advise.Candidate({"compiler": "x", "latency_p99_ms": p99.value},  # type: ignore[arg-type]
                           Cell(None), Cell(None), Cell(None))  # fmt: skip
    advise._check_p99(old, 19.92)
    assert old.misses == []


def _process_coverage(level_sd: float, workers: int, seed: int, trials: int = 600) -> float:
    """Trials of ``workers`` processes x 250 calls: calls lognormal (sigma 0.1) around a level
    that differs between processes by ``level_sd`` (log scale). Truth: the p99 of that mixture."""
    rng = np.random.default_rng(seed)
    law = level_sd * rng.standard_normal(400_000) + 0.1 * rng.standard_normal(400_000)
    truth = float(np.quantile(np.exp(law), 0.99))
    hits = 0
    for _ in range(trials):
        levels = level_sd * rng.standard_normal(workers)
        groups = [np.sort(np.exp(lv + 0.1 * rng.standard_normal(250))).tolist() for lv in levels]
        p = percentiles.over_processes(groups, 0.99, "p99")
        hits += (p.low is None or p.low <= truth) and (p.high is None or truth <= p.high)
    return hits / trials


@pytest.mark.parametrize(
    "level_sd, workers, measured",
    [(0.03, 4, 0.948), (0.03, 10, 0.955), (0.0, 10, 0.962), (0.10, 10, 0.970)],
    ids=["4-processes-3%-apart", "10-processes-3%-apart", "10-equal-processes",
         "10-processes-10%-apart"],
)  # fmt: skip
def test_p99_interval_holds_when_processes_differ(
    level_sd: float, workers: int, measured: float
) -> None:
    """Pooled order statistics alone held the mixture's p99 in 81 % of such trials (processes 3 %
    apart, 4 of them) and 33 % at 10 % apart. Widened to Woodruff's over processes alone, 10
    processes 10 % apart held 86.5 % (31 misses high, from samples with no slow process; 50 low):
    the spread of 10 processes' shares below a p99 is skewed and mostly too small. With the
    between-process part also read from the medians' spread (``_shifted_levels``), 90-97 %
    (``measured``: what these seeded runs gave on 2026-11-27; seeds 12-14 together: 97.1, 96.2, 96.2
    and 97.0 %). 10 processes 10 % apart are then never claimed: only their lower bound can
    miss, so they sit at the top of the range."""
    coverage = _process_coverage(level_sd, workers, seed=11)
    assert 0.90 <= coverage <= 0.97
    assert coverage == pytest.approx(measured, abs=0.02)


def test_equal_processes_are_not_paid_for() -> None:
    """10 processes at one level: the widening must not tax them. The interval is the pooled
    order-statistic one in about half the trials and 1.12x its log width on average (the
    Woodruff-only rule: 1.21x; measured 2026-11-27)."""
    rng = np.random.default_rng(11)
    ratios = []
    for _ in range(300):
        groups = [np.sort(np.exp(0.1 * rng.standard_normal(250))).tolist() for _ in range(10)]
        p = percentiles.over_processes(groups, 0.99, "p99")
        base = percentiles.interval(sorted(x for g in groups for x in g), 0.99, "p99")
        assert p.low is not None and p.high is not None and base.low and base.high
        ratios.append(math.log(p.high / p.low) / math.log(base.high / base.low))
    assert min(ratios) >= 1.0  # the union: never narrower than the order statistics
    assert float(np.mean(ratios)) <= 1.15


def test_levels_are_read_only_from_positive_calls() -> None:
    """The medians' spread is taken on the log scale; a group with a call at or below zero
    leaves the between part to Woodruff's shares alone (no error)."""
    groups = [[0.0, 1.0, 2.0, 3.0], [1.5, 2.5, 3.5, 4.5]]
    assert percentiles._shifted_levels(groups, 2.0, 0.95) == 0.0
    apart = [[lv * (1 + 0.01 * i) for i in range(200)] for lv in (1.0, 1.2, 1.4, 1.6)]
    assert percentiles._shifted_levels(apart, 1.5, 0.95) > 0.0
    p = percentiles.over_processes(groups, 0.5, "p50")
    assert p.n == 8 and p.value == pytest.approx(2.25)


def test_processes_that_differ_widen_the_interval_and_can_unclaim_the_p99() -> None:
    same = [[10.0 + 0.001 * i for i in range(500)] for _ in range(4)]
    apart = [[lv + 0.001 * i for i in range(500)] for lv in (10.0, 10.3, 10.6, 12.0)]
    alike = percentiles.over_processes(same, 0.99, "p99")
    assert alike == percentiles.interval(sorted(x for g in same for x in g), 0.99, "p99")
    wide = percentiles.over_processes(apart, 0.99, "p99")
    # 2000 calls are enough for a p99; these processes are not: one runs 20 % slower
    assert wide.high is None and wide.low is not None and wide.low < alike.low + 2.3  # type: ignore[operator]
    assert "not claimed: the worker processes differ too much" in percentiles.describe(wide)
