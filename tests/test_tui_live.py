"""The Run screen's live state says what is true (issue 20, points 5 and 6): the ETA comes from
this run's measured trial durations (none until one was timed, right after a re-attach), the CPU
meter names the unsampled phase instead of holding the last sample, and a cancelled run ends
"cancelled" even when its devices report a plain end first."""

from __future__ import annotations

from ngb.sweeps.orchestrator import RunEvent
from ngb.tui.live_run import RunModel
from ngb.tui.widgets.device_panel import eta_text, meter_lines


def agent(type_: str, ts: float, **fields: object) -> RunEvent:
    event = {"type": type_, "ts": ts, **fields}
    return RunEvent(run_id="r", device="d", kind="agent", state="running", event=event, ts=ts)


def test_eta_comes_from_measured_trial_durations_even_after_a_reattach() -> None:
    m = RunModel()
    # A re-attach: the store says 8 of 20 done, and the next events are the live ones.
    m.apply(RunEvent("r", "d", "connection", state="running", ts=5000.0, done=8, total=20))
    s = m.device("r", "d")
    m.apply(agent("trial_started", 5000.0, key="k9", label="k9"))
    assert eta_text(s, 5001.0) == "ETA ?"  # no trial timed yet: no guess (it said 0:00:01)
    m.apply(agent("trial_done", 5030.0, key="k9"))  # 30 s a trial
    assert s.done == 9 and s.trial_seconds == [30.0]
    assert eta_text(s, 5030.0) == "ETA 0:05:30"  # 11 left x 30 s
    m.apply(agent("trial_started", 5030.0, key="k10", label="k10"))
    m.apply(agent("trial_failed", 5050.0, key="k10", error="boom"))  # failures take time too
    assert eta_text(s, 5050.0) == "ETA 0:04:10"  # 10 left x 25 s
    m.apply(agent("trial_started", 5050.0, key="k11", label="k11"))
    assert eta_text(s, 5060.0) == "ETA 0:04:00"  # 10 s into the one in flight
    m.apply(agent("trial_done", 5200.0, key="unseen"))  # its start was never seen: not timed
    assert len(s.trial_seconds) == 2


def test_cpu_meter_names_the_unsampled_phase_instead_of_the_last_sample() -> None:
    m = RunModel()
    s = m.device("r", "d")
    m.apply(agent("trial_started", 1.0, key="k", label="conv/noop/b1"))
    m.apply(agent("phase", 1.0, key="k", phase="measure"))
    m.apply(agent("cpu", 2.0, key="k", percent=100.0, proc_percent=99.0))
    assert "100%" in meter_lines(s, 80)[0]
    m.apply(agent("phase", 3.0, key="k", phase="build"))  # the next worker builds: no samples
    line = meter_lines(s, 80)[0]
    assert "100%" not in line and "-- building" in line
    m.apply(agent("phase", 4.0, key="k", phase="warmup"))
    assert "-- warm-up" in meter_lines(s, 80)[0]
    m.apply(agent("phase", 5.0, key="k", phase="measure"))
    m.apply(agent("cpu", 6.0, key="k", percent=42.0))
    assert " 42%" in meter_lines(s, 80)[0]
    m.apply(agent("trial_done", 7.0, key="k"))
    assert "idle" in meter_lines(s, 80)[0]


def test_a_run_whose_agent_says_cancelled_ends_cancelled() -> None:
    m = RunModel()
    m.apply(agent("run_started", 1.0, total=4))
    m.apply(agent("run_done", 2.0, ok=1, failed=0, skipped=0, cancelled=True))
    assert m.derived_state("r") == "cancelled"
