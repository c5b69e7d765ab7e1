"""The peak search (issue 43) against simulated servers in virtual time: the interval holds the
true QPS* of an M/M/1 queue in at least 90 of 100 seeded searches, at most 5 % half-width, in at
most 10 probes; the search's phases; a bracket where no line can be read; bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from ngb.core.base.errors import ConfigError
from ngb.core.records import arrivals
from ngb.core.serving import peak, serve_sim, serve_stats

MU, LIMIT_MS = 100.0, 100.0
#: the probes' seconds in the calibration (virtual time; ``ngb bench serving`` prints others)
PROBE_S = 300.0


def mm1_probe(seed: int, mu: float = MU) -> peak.ProbeFn:
    def probe(qps: float, seconds: float, index: int) -> serve_stats.Summary:
        trace = serve_sim.mm1(qps, mu, seconds, seed=seed * 1000 + index)
        return serve_stats.summarize(trace, LIMIT_MS, tails=("p99",))

    return probe


def test_the_true_peak_of_mm1() -> None:
    assert serve_sim.mm1_peak(MU, LIMIT_MS / 1000) == pytest.approx(53.95, abs=0.01)


def test_the_interval_holds_the_true_peak_in_90_of_100_searches() -> None:
    truth = serve_sim.mm1_peak(MU, LIMIT_MS / 1000)
    covered, halves, probes = 0, [], []
    for seed in range(100):
        found = peak.find_peak(mm1_probe(seed), LIMIT_MS, MU / 2, probe_s=PROBE_S)
        covered += found.low is not None and found.low <= truth <= found.high
        halves.append(found.half_width)
        probes.append(len(found.probes))
        assert found.method == "line"
    assert covered >= 90, covered
    assert max(probes) <= 10
    # the search stops at a 5 % half-width; where its ten probes did not reach it, close by
    assert np.median(halves) <= 0.05
    assert np.mean(np.array(halves) <= 0.05) >= 0.9, sorted(halves)[-10:]


def test_a_search_brackets_bisects_then_probes_the_boundary() -> None:
    shown: list[peak.Probe] = []
    found = peak.find_peak(mm1_probe(7), LIMIT_MS, 10.0, probe_s=PROBE_S, on_probe=shown.append)
    assert shown == found.probes
    phases = [p.phase for p in found.probes]
    # from 10 QPS: doubled while the p99 came out within 100 ms, then bisected
    assert phases[:3] == ["bracket"] * 3
    assert [p.qps for p in found.probes[:3]] == [10.0, 20.0, 40.0]
    assert "bisect" in phases and phases[-1] == "boundary"
    first = phases.index("boundary")
    assert set(phases[first:]) == {"boundary"}  # the boundary's probes come last, all of them
    boundary = [p for p in found.probes if p.phase == "boundary"]
    assert len(boundary) >= peak.BOUNDARY_MIN
    # bracket probes are short, boundary ones at least probe_s
    assert all(p.duration_s < PROBE_S for p in found.probes if p.phase != "boundary")
    assert all(p.duration_s >= PROBE_S for p in boundary)
    assert found.verified_qps is None or found.verified_qps < found.high
    assert "QPS*" in found.describe() and "probes" in found.describe()


def test_a_faster_server_has_a_higher_peak() -> None:
    slow = peak.find_peak(mm1_probe(1), LIMIT_MS, 50, probe_s=PROBE_S)
    fast = peak.find_peak(mm1_probe(1, mu=200.0), LIMIT_MS, 100, probe_s=PROBE_S)
    assert fast.low is not None and fast.low > slow.high
    assert fast.low <= serve_sim.mm1_peak(200.0, 0.1) <= fast.high


def test_without_a_line_the_interval_is_the_bracket() -> None:
    """A server whose p99 jumps from far within the limit to far above it (no rate near the
    boundary sees a late request at a share the line can use): the interval is the highest rate
    that met the limit and the lowest that missed it."""

    def cliff(qps: float, seconds: float, index: int) -> serve_stats.Summary:
        service = 0.001 if qps < 60 else 0.5
        plan = arrivals.schedule(qps, seconds, seed=index)
        trace = serve_sim.fifo(plan, np.full(plan.count, service))
        return serve_stats.summarize(trace, LIMIT_MS, tails=("p99",))

    found = peak.find_peak(cliff, LIMIT_MS, 40.0, probe_s=30.0)
    assert found.method == "bracket"
    assert found.low is not None and 0 < found.low < 60 <= found.high
    assert math.isfinite(found.high)
    assert found.verified_qps == found.low


def _slow(service_s: float, verdict: str | None = None) -> peak.ProbeFn:
    """Every request takes ``service_s`` (its rate never matters much); ``verdict`` forced."""

    def probe(qps: float, seconds: float, index: int) -> serve_stats.Summary:
        plan = arrivals.schedule(qps, seconds, seed=index)
        trace = serve_sim.fifo(plan, np.full(plan.count, service_s))
        summary = serve_stats.summarize(trace, LIMIT_MS, tails=("p99",))
        if verdict is not None:
            summary.verdict, summary.reasons = verdict, ["forced by the test"]
        return summary

    return probe


def test_without_a_verified_rate_there_is_no_lower_bound() -> None:
    """Every request takes 150 ms against a 100 ms limit: every probe misses, none verifies a
    rate, so QPS* has no lower bound -- None, said in words, never a bracket from 0."""
    found = peak.find_peak(_slow(0.15), LIMIT_MS, 4.0, probe_s=60.0, max_probes=6)
    assert found.method == "bracket" and found.verified_qps is None
    assert found.low is None and math.isnan(found.half_width)
    lowest = min(p.qps for p in found.probes)
    missed = [p.qps for p in found.probes if p.outcome == peak.MISSES]
    assert found.high == min(missed) and math.isfinite(found.high)
    text = found.describe()
    assert f"QPS* below {found.high:.4g}" in text and "[0" not in text
    assert "no VALID probe met p99 <= 100 ms" in text
    assert f"down to the lowest probe at {lowest:.4g} QPS" in text
    assert found.to_dict()["low"] is None


def test_a_probe_that_meets_the_limit_but_is_invalid_verifies_nothing() -> None:
    """Fast requests, well within the limit, from runs that do not count (INVALID: say the load
    generator fell behind): no rate is verified, and no probe missed, so nothing is bracketed."""
    found = peak.find_peak(_slow(0.001, serve_stats.INVALID), LIMIT_MS, 40.0, probe_s=30.0,
                           max_probes=5)  # fmt: skip
    assert all(p.outcome == peak.MEETS and not p.verified for p in found.probes)
    assert found.low is None and found.high == math.inf and found.verified_qps is None
    assert "QPS* not bracketed" in found.text() and "none missed it" in found.text()


def test_star_text_says_each_missing_bound_in_words() -> None:
    assert peak.star_text(6.9, 6.1, 7.8, 30.0) == "QPS* 6.9 [6.1, 7.8] for p99 <= 30 ms"
    assert peak.star_text(6.9, None, 7.8, 30.0, lowest=5.0) == (
        "QPS* below 7.8 (estimate 6.9, no lower bound): no VALID probe met p99 <= 30 ms, down "
        "to the lowest probe at 5 QPS"
    )
    # a row stored before the fix holds 0: the same statement, not a bracket from 0
    assert peak.star_text(6.9, 0.0, 7.8, 30.0) == peak.star_text(6.9, None, 7.8, 30.0)
    assert peak.star_text(6.9, 6.1, None, 30.0).endswith("[6.1, unbounded] for p99 <= 30 ms: no "
                                                         "probe missed it")  # fmt: skip

    # after a value its caller prints (a report's cell): the same words, without "QPS*" and the
    # estimate, going on from the number
    for low, high in ((None, 7.8), (0.0, 7.8), (6.1, None), (None, None)):
        whole = peak.star_text(6.9, low, high, 30.0)
        after = peak.star_text(6.9, low, high, 30.0, value_shown=True)
        assert "QPS*" not in after and "estimate" not in after
        assert whole.split(": ", 1)[1] == after.split(": ", 1)[1]  # the one reason
    assert peak.star_text(6.9, None, 7.8, 30.0, value_shown=True) == (
        "below 7.8 (no lower bound): no VALID probe met p99 <= 30 ms"
    )
    assert peak.star_text(6.9, 6.1, None, 30.0, value_shown=True) == (
        "[6.1, unbounded] for p99 <= 30 ms: no probe missed it"
    )


def test_bad_input_is_one_line() -> None:
    with pytest.raises(ConfigError, match="start rate"):
        peak.find_peak(mm1_probe(0), LIMIT_MS, 0.0)
    with pytest.raises(ConfigError, match="at least 4 probes"):
        peak.find_peak(mm1_probe(0), LIMIT_MS, 10.0, max_probes=3)
