"""Budgets that hold (issue 32): the timed loops of a slow call stay within ``max_measure_s``
whatever the compiler (untuned TVM's 5-call loops took 28-63 s against a 10 s budget), and
``ngb measure`` says up front what it will spend."""

from __future__ import annotations

import math

import pytest
from ngb.core.records.types import MeasureSettings, TrialSpec
from ngb.core.statistics.stopping import Plan
from ngb.core.trial import budget
from ngb.core.trial.measure import run_trial
from ngb.core.trial.timing import loop_iters


def test_loop_iters_fit_the_workers_budget() -> None:
    adaptive = Plan(adaptive=True, reps=2, budget_s=2.5)
    assert loop_iters(5, adaptive, 0.01) == 5  # fast calls: min_iters as asked
    assert loop_iters(5, adaptive, 0.5) == 2  # 1.25 s a loop
    assert loop_iters(5, adaptive, 6.0) == 1  # a call longer than the loop's share: one
    assert loop_iters(5, adaptive, None) == 5  # nothing known yet
    assert loop_iters(5, Plan(adaptive=False, reps=3), 6.0) == 5  # a fixed count is a count
    assert loop_iters(5, Plan(adaptive=True, reps=2, budget_s=math.inf), 6.0) == 5


def test_a_slow_call_keeps_the_timed_loops_within_the_budget() -> None:
    call_s = 0.4
    measure = MeasureSettings(workers=2, max_workers=2, max_measure_s=2.0, quiet_check_s=0.0)
    result = run_trial(
        TrialSpec(model="m", compiler="noop", compiler_options={"sleep_s": call_s}, measure=measure)
    )
    assert result.ok, result.error
    workers = result.extra["workers"]
    assert len(workers) == 2
    # each worker's share of the 2 s (1 s each): before, 2 loops x 5 calls x 0.4 s = 4 s each
    for worker in workers:
        # one call may start before the share runs out, and a loaded machine stretches each
        # sleep: bounded well below the 4 s the loops took before the cap
        assert worker["measure_s"] <= 1.0 + 2 * call_s + 0.7, workers
    assert sum(r["iters"] for r in result.repetitions) < 2 * 2 * 5


# ------------------------------------------------------------------ calls of seconds (budget.py)


def test_the_plan_for_calls_of_seconds_cuts_repetitions_then_processes() -> None:
    # 4 processes x 2 values in 10 s, a warm-up of 2 s at most (the defaults before issue 44)
    asked = MeasureSettings(max_measure_s=10.0, warmup_max_s=2.0)
    assert budget.plan(asked, "cpu", 0.2) is None  # one-call loops fit: the normal plan
    assert budget.plan(asked, "cpu", 1.2) is None  # 4 x 2 x 1.2 s = 9.6 s of calls fit
    assert budget.plan(MeasureSettings(repetitions=8), "cpu", 30.0) is None  # a count is a count
    # 1.5 s is under the warm-up's 2 s cap: the warm-up by time stays and costs no process
    p = budget.plan(asked, "cpu", 1.5)
    assert p is not None and (p.workers, p.reps, p.warmup) == (4, 1, True)
    assert p.warmup_s == pytest.approx(3.0) and "warm-ups come on top" in p.line
    # 2.2 s: one warm-up call; 3 processes x (1 + 1) calls do not fit 10 s, 2 do
    p = budget.plan(asked, "cpu", 2.2, overhead_s=10.0, first_s=5.0)
    assert p is not None and (p.workers, p.reps, p.warmup) == (2, 1, False)
    assert p.planned_s == pytest.approx(2 * (0.3 + 2.2 + 2.2)) and not p.over
    assert "2 processes x 1 call, one warm-up call" in p.line and "the first took 5.00 s" in p.line
    # worker 0 is past its warm-up (calibration) call: its loop, then one process in full
    assert p.left_s == pytest.approx(0.3 + 2.2 + 10.0 + 0.3 + 2.2 + 2.2)
    # 6 s: the floor, 2 processes x 1 call, over the asked 10 s -- raised and said
    p = budget.plan(asked, "cpu", 6.0)
    assert p is not None and (p.workers, p.reps) == (2, 1) and p.over
    assert p.budget_s == p.planned_s == pytest.approx(2 * (0.3 + 12.0))
    assert "over max_measure_s 10 s" in p.line and "would allow 4 x 2" in p.line
    # on a GPU the warm-up's cap is 3 x its 3 s floor: a 6 s call still warms up by time
    gpu = budget.plan(asked, "cuda", 6.0)
    assert gpu is not None and gpu.warmup and gpu.workers == 2
    # one process asked for: it keeps two calls (an interval needs two values)
    one = budget.plan(MeasureSettings(workers=1), "cpu", 6.0)
    assert one is not None and (one.workers, one.reps) == (1, 2)
    # a budget that holds the full plan: nothing is cut
    assert budget.plan(MeasureSettings(max_measure_s=60.0), "cpu", 6.0) is None


def test_the_settings_in_force_follow_the_plan_and_round_trip() -> None:
    asked = MeasureSettings()
    p = budget.plan(asked, "cpu", 6.0)
    assert p is not None
    s = p.settings(asked)
    assert (s.workers, s.max_workers, s.values_per_worker) == (2, 2, 1)
    # one warm-up call, one call a loop
    assert (s.warmup_s, s.warmup_iters, s.min_iters, s.min_duration_s) == (0.0, 1, 1, 0.0)
    assert s.max_measure_s == p.budget_s and s.ci_target == asked.ci_target
    back = budget.SlowPlan.from_dict(p.to_dict())
    assert back.settings(asked) == s
    assert (back.workers, back.reps, back.warmup, back.line) == (2, 1, False, p.line)


class _Calls:
    """A model whose first call is slow and later ones take ``later_s`` (counted, not slept)."""

    def __init__(self, later_s: float) -> None:
        self.later_s, self.calls = later_s, 0

    def __call__(self) -> float:
        self.calls += 1
        return self.later_s


def test_a_slow_first_call_is_checked_by_a_calibration_call_before_anything_is_cut() -> None:
    """A cold first call (cuDNN's search, a lazy JIT) of 2 s on a 5 ms model must not plan
    single-call loops: the calibration call says the calls are fast, and nothing changes."""
    spec = TrialSpec(model="m", compiler="noop")
    share = Plan(worker=0, adaptive=True, reps=2, budget_s=2.5)
    fast = _Calls(0.005)
    timed = budget.timed_share(spec, share, None, 2.0, 3.0, fast)
    assert fast.calls == 1 and timed.calibration_s == 0.005
    assert timed.slow is None and timed.spec == spec and timed.share == share
    slow = _Calls(6.0)
    timed = budget.timed_share(spec, share, None, 9.0, 3.0, slow)
    assert slow.calls == 1 and timed.slow is not None and timed.slow.first_s == 9.0
    assert timed.share.reps == 1 and timed.spec.measure.warmup_iters == 0  # it was the warm-up
    # a quick first call asks for nothing; a later worker follows the trial's plan, uncalibrated
    none = _Calls(1.0)
    assert budget.timed_share(spec, share, None, 0.01, 0.0, none).calibration_s is None
    later = budget.timed_share(spec, Plan(worker=1, reps=1), timed.slow, 6.0, 3.0, none)
    assert none.calls == 0 and later.spec.measure.warmup_iters == 1 and later.slow == timed.slow


def test_a_trial_of_slow_calls_says_its_plan_first_and_keeps_it() -> None:
    """Calls of 0.6 s against a 1 s budget (the 6 s calls of untuned TVM against 10 s, scaled):
    worker 0's first call asks for a calibration call, the plan (2 processes x 1 call after one
    warm-up call) is said before anything is timed, every worker follows it, and the result
    records it."""
    call_s = 0.6
    measure = MeasureSettings(
        workers=3, max_workers=6, max_measure_s=1.0, warmup_max_s=0.5, quiet_check_s=0.0
    )
    seen: list[dict] = []
    spec = TrialSpec(
        model="m", compiler="noop", compiler_options={"sleep_s": call_s}, measure=measure
    )
    result = run_trial(spec, emit=seen.append)
    assert result.ok, result.error
    said = [i for i, e in enumerate(seen) if e["type"] == "log" and "slow calls" in e["msg"]]
    timed = [i for i, e in enumerate(seen) if e["type"] == "phase" and e["phase"] == "measure"]
    assert len(said) == 1 and timed and said[0] < timed[0], seen  # said before the first loop
    assert "2 processes x 1 call, one warm-up call" in seen[said[0]]["msg"]
    plan = result.extra["budget"]
    assert (plan["workers"], plan["reps"], plan["warmup"], plan["over"]) == (2, 1, False, True)
    assert plan["asked_s"] == 1.0 and plan["calibration"] == "worker 0's second call"
    assert plan["call_s"] >= call_s and result.extra["calibration_call_s"] >= call_s
    # two sleeps may agree within the target; else the trial ends on the plan, and says so
    stopped = result.extra["measure"]["stopped"]
    assert stopped in ("ci target met", "slow calls: the 2 x 1 planned"), stopped
    workers = result.extra["workers"]
    assert len(workers) == 2 and all(w["repetitions"] == 1 for w in workers), workers
    assert [r["iters"] for r in result.repetitions] == [1, 1]
    # worker 0's warm-up was its calibration call, worker 1's one call: each >= one call's time
    assert all(w["warmup_s"] >= call_s for w in workers), workers
    assert plan["spent_s"] >= 4 * call_s
    assert result.spec["measure"]["workers"] == 3  # the settings asked stay the spec's (its key)
