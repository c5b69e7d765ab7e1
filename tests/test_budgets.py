"""Budgets that hold (issue 32): the timed loops of a slow call stay within ``max_measure_s``
whatever the compiler (untuned TVM's 5-call loops took 28-63 s against a 10 s budget), and
``ngb measure`` says up front what it will spend."""

from __future__ import annotations

import math

from ngb.core.measure import run_trial
from ngb.core.stopping import Plan
from ngb.core.timing import loop_iters
from ngb.core.types import MeasureSettings, TrialSpec


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
