"""The tuning ETA from the search's recent batches, one figure on every surface (issue 46)."""

from __future__ import annotations

import io

from ngb.core.base.clock_text import clock
from ngb.core.compilers import tvm_tuning
from ngb.core.compilers.tvm_tuning import TuningProgress
from ngb.sweeps.run.events import RunEvent


def searched(monkeypatch, batches: list[float], per_batch: int = 16) -> TuningProgress:
    """A 64-trial search whose batches took ``batches`` seconds each (a fake clock)."""
    now = [0.0]
    monkeypatch.setattr(tvm_tuning.time, "monotonic", lambda: now[0])
    progress = TuningProgress(["conv"], [1.0], budget=64, early_stop=None)
    for seconds in batches:
        now[0] += seconds
        progress.record(0, [0.001] * per_batch)
    return progress


def test_the_rate_leaves_the_slow_first_batch_out_once_a_second_is_measured(monkeypatch) -> None:
    """The issue's job: the first batch 12 minutes (the search space, the first builds), the
    later ones 2-3.5. Averaged since the start, the ETA at 50 % was 3.1x too long."""
    progress = searched(monkeypatch, [720.0, 180.0])
    assert progress.recent_s_per_trial == 180.0 / 16  # the second batch alone
    assert progress.search_left_s == 32 * 180.0 / 16  # 6 minutes, not 2 * 7.5 = 15
    progress = searched(monkeypatch, [720.0, 120.0, 210.0])
    assert progress.recent_s_per_trial == 210.0 / 16  # the latest batch spans the window
    event = progress.event()
    assert event["s_per_trial"] == round(210.0 / 16, 3) and event["search_left_s"] == 210.0


def test_small_batches_take_a_window_of_trials_not_one_noisy_batch(monkeypatch) -> None:
    progress = searched(monkeypatch, [100.0, 8.0, 12.0, 9.0, 11.0], per_batch=4)
    # 20 trials: the window is the 16 behind the last (batches 2-5), the first batch left out
    assert progress.recent_s_per_trial == (8.0 + 12.0 + 9.0 + 11.0) / 16
    assert searched(monkeypatch, []).recent_s_per_trial is None  # nothing measured yet
    only_one = searched(monkeypatch, [720.0])
    assert only_one.recent_s_per_trial == 45.0  # one batch: what there is


def test_the_set_up_before_the_first_batch_is_no_part_of_the_rate(monkeypatch) -> None:
    """MetaSchedule sets each task up (``PreTuning``) before the loop asks for its first batch;
    the scheduler's first ``next_task_id`` marks that moment (``search_began``), so a rate from
    the first batch alone is that batch's, not the set-up's too."""
    now = [0.0]
    monkeypatch.setattr(tvm_tuning.time, "monotonic", lambda: now[0])
    progress = TuningProgress(["conv"], [1.0], budget=64, early_stop=None)
    now[0] = 30.0  # set-up
    progress.search_began()
    now[0] = 78.0  # the first batch: 48 s
    progress.search_began()  # later calls (every batch asks) move nothing
    progress.record(0, [0.001] * 16)
    assert progress.recent_s_per_trial == 48.0 / 16 and progress.search_left_s == 48 * 3.0
    now[0] = 118.0
    progress.search_began()
    progress.record(0, [0.001] * 16)
    assert progress.recent_s_per_trial == 40.0 / 16  # the first batch left out, as before


def test_the_console_panel_and_device_eta_count_down_from_the_agents_figure() -> None:
    from ngb.tui.live_run import tuning_state

    state = tuning_state(
        {"ts": 1000.0, "trials_done": 32, "budget": 64, "elapsed_s": 900.0,
         "s_per_trial": 11.25, "search_left_s": 360.0},
        1000.0,
    )  # fmt: skip
    assert state.seconds_per_trial == 11.25  # the recent rate, not 900 / 32
    assert state.search_left_s(1000.0) == 360.0
    assert state.search_left_s(1100.0) == 260.0  # counts down between events
    older = tuning_state({"ts": 1000.0, "trials_done": 32, "budget": 64, "elapsed_s": 960.0}, 0)
    assert older.search_left_s(1010.0) == 32 * 30.0 - 10.0  # an older agent: its own average


def test_the_cli_prints_tuning_progress_eta_and_reuse_as_the_console_does() -> None:
    from ngb.sweeps.cli.runs import _Progress
    from rich.console import Console

    out = io.StringIO()
    display = _Progress(Console(file=out, width=120, force_terminal=False))

    def agent(event: dict[str, object]) -> None:
        display.handle(RunEvent("r", "orin", "agent", "", event=event))

    agent({"type": "trial_started", "label": "conv32x1/tvm-ms/b1"})
    agent({"type": "tuning", "trials_done": 32, "budget": 64, "s_per_trial": 11.25,
           "search_left_s": 360.0})  # fmt: skip
    task = display.progress.tasks[display.tasks["orin"]]
    assert task.fields["current"] == "conv32x1/tvm-ms/b1 tuning 32/64 5.3/min search ETA 0:06:00"
    agent({"type": "log", "level": "info", "msg": "tuning 50%: 32/64 trials, 900 s, best 1.2 ms"})
    for _ in range(2):  # a reused search is said once
        agent({"type": "tuning", "reused": True, "provenance": "tuning reused from run r0"})
    text = out.getvalue()
    assert "orin: tuning 50%: 32/64 trials" in text
    assert text.count("orin: TVM tuning reused from run r0") == 1


def test_ngb_attach_mid_search_shows_the_trial_and_its_search_from_the_first_snapshot() -> None:
    """Attached mid-trial, the CLI saw no trial_started: the agent's snapshot names the trial
    and its search at once (seen 2026-11-28: `0/1 0:00:27` and nothing else until the next
    batch of a 64-trial search, minutes later)."""
    from ngb.sweeps.cli.runs import _Progress
    from rich.console import Console

    display = _Progress(Console(file=io.StringIO(), width=120, force_terminal=False))
    snapshot = {"type": "state", "trial": {"key": "k1", "label": "conv32x1/tvm-ms/b1"},
                "phase": "tune", "tuning": {"trials_done": 16, "budget": 64, "s_per_trial": 30.0,
                                            "search_left_s": 1440.0}}  # fmt: skip
    display.handle(RunEvent("r", "orin", "agent", "", event=snapshot))
    task = display.progress.tasks[display.tasks["orin"]]
    assert task.fields["current"] == "conv32x1/tvm-ms/b1 tuning 16/64 2.0/min search ETA 0:24:00"
    display.handle(RunEvent("r", "orin", "agent", "", event={**snapshot, "tuning": None}))
    assert task.fields["current"].endswith("search ETA 0:24:00")  # a later snapshot: no change
    display.handle(
        RunEvent(
            "r", "orin", "agent", "", event={"type": "trial_started", "label": "conv32x1/tvm-ms/b2"}
        )
    )
    assert task.fields["current"] == "conv32x1/tvm-ms/b2"


def test_clock_writes_hours_minutes_seconds_and_never_a_negative() -> None:
    assert clock(330.4) == "0:05:30" and clock(3 * 3600 + 61) == "3:01:01"
    assert clock(-5) == clock(float("nan")) == "0:00:00"
