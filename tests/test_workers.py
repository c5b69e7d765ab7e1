"""Repetitions spread over worker processes: shares, forwarded events, failures, the zipapp."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ngb.core.records import events
from ngb.core.records.types import MeasureSettings, TrialResult, TrialSpec
from ngb.core.statistics.stopping import Plan
from ngb.core.trial.measure import SHARE_JOB, run_trial
from ngb.core.trial.workers import WorkerFailed, run_worker

from tests.cli_helpers import scaled

QUICK = {
    "warmup_iters": 0,
    "warmup_s": 0.0,
    "min_iters": 1,
    "min_duration_s": 0.01,
    "quiet_check_s": 0.0,
}


def test_fixed_count_is_shared_by_three_processes() -> None:
    spec = TrialSpec(
        model="m",
        compiler="noop",
        compiler_options={"sleep_s": 0.001},
        measure=MeasureSettings(**QUICK, repetitions=7, workers=3),
    )
    seen: list[dict] = []
    result = run_trial(spec, emit=seen.append)
    assert result.ok, result.error
    assert result.workers == 3 and result.throughput.n == 7
    assert [r["worker"] for r in result.repetitions] == [0, 0, 0, 1, 1, 2, 2]
    workers = result.extra["workers"]
    assert [w["repetitions"] for w in workers] == [3, 2, 2]
    assert workers[0]["compile_s"] == result.compile_s  # worker 0's compile is the trial's
    assert all(w["compile_s"] is not None for w in workers[1:])  # recompiles, recorded apart
    assert result.latency_ms.n == sum(r["iters"] for r in result.repetitions)
    # The workers' events reach the listener, tagged, with progress counted over the trial.
    # (at most one a second while a worker measures, and always each worker's last)
    progress = [e for e in seen if e["type"] == events.PROGRESS]
    reps = [e["rep"] for e in progress]
    assert reps == sorted(reps) and {3, 5, 7} <= set(reps) <= set(range(1, 8))
    assert [e["worker"] for e in progress if e["rep"] in (3, 5, 7)] == [0, 1, 2]
    assert {e.get("worker") for e in seen if e["type"] == events.PHASE} >= {0, 1, 2}
    assert all(e["key"] == spec.key for e in seen)
    assert result.verdict in ("VALID", "INVALID") and result.verdict_reason
    again = TrialResult.from_dict(json.loads(events.encode(result.to_dict())))
    assert again.workers == 3 and again.verdict == result.verdict


def test_a_failing_worker_raises_its_error(tmp_path: Path) -> None:
    spec = TrialSpec(
        model="m",
        compiler="noop",
        compiler_options={"fail": True},
        measure=MeasureSettings(**QUICK, repetitions=2),
    )
    share = Plan(worker=1, reps=1)
    with pytest.raises(WorkerFailed, match="noop compiler asked to fail"):
        run_worker(SHARE_JOB, spec, share, lambda e: None, tmp_path, None, deadline=1e18)


def test_a_cancel_right_after_the_fork_takes_the_worker_along(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent's SIGTERM raises ``Cancelled`` wherever the trial's thread is. Raised between
    the fork and the loop that reads the worker, it once left the worker alive, blocked on a pipe
    nobody read, and the agent hung at exit (multiprocessing joins live children)."""
    import multiprocessing

    from ngb.core.trial import workers

    class CancelledAtStart(workers.LiveMeter):
        def start(self) -> None:
            raise KeyboardInterrupt  # a BaseException, as the agent's Cancelled is

    monkeypatch.setattr(workers, "LiveMeter", CancelledAtStart)
    spec = TrialSpec(
        model="m", compiler="noop", compiler_options={"compile_s": 60},
        measure=MeasureSettings(**QUICK, repetitions=1),
    )  # fmt: skip
    try:
        with pytest.raises(KeyboardInterrupt):
            run_worker(SHARE_JOB, spec, Plan(worker=0, reps=1), lambda e: None, tmp_path, None,
                       deadline=1e18)  # fmt: skip
        assert multiprocessing.active_children() == []  # killed and joined, not left running
    finally:
        for child in multiprocessing.active_children():
            child.kill()


@pytest.mark.parametrize("start", ["auto", "fresh"])
def test_worker_processes_run_from_the_agent_zipapp(tmp_path: Path, start: str) -> None:
    """A device runs the agent from a zipapp: forked workers and fresh interpreters (which must
    find ngb in the archive: ``ngb.core.trial.worker_start`` hands them this process's path)."""
    import os

    from ngb.core.trial.worker_start import START_ENV
    from ngb.devices.bundle import build_agent_zipapp

    archive = build_agent_zipapp(tmp_path / "bundle")
    spec = TrialSpec(
        model="m", compiler="noop", measure=MeasureSettings(**QUICK, repetitions=4, workers=2)
    )
    proc = subprocess.run(
        [sys.executable, str(archive), "trial"],
        input=json.dumps(spec.to_dict()),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=scaled(120),
        env={**os.environ, START_ENV: start},
    )
    lines = [events.decode(line) for line in proc.stdout.splitlines()]
    final = [e for e in lines if e and e["type"] == "trial_result"]
    assert final, proc.stderr[-2000:]
    result = TrialResult.from_dict(final[0]["result"])
    assert result.ok, result.error
    assert result.workers == 2 and [r["worker"] for r in result.repetitions] == [0, 0, 1, 1]
    assert result.extra["worker_start"]["method"] == ("fork" if start == "auto" else "fresh")


def _trial_forever(spec_data: dict) -> None:
    run_trial(TrialSpec.from_dict(spec_data))


@pytest.mark.parametrize("start", ["auto", "fresh"])
def test_a_worker_dies_with_its_trial_process(monkeypatch: pytest.MonkeyPatch, start: str) -> None:
    """kill -9 of the trial process (the OOM killer) takes its worker along -- and, started
    fresh, the interpreters still waiting for their turn: an orphan would go on loading the
    machine and hold the agent's pipe open."""
    import contextlib
    import multiprocessing
    import time

    import psutil
    from ngb.core.trial.worker_start import START_ENV

    monkeypatch.setenv(START_ENV, start)
    spec = TrialSpec(
        model="m", compiler="noop", compiler_options={"compile_s": 60},
        measure=MeasureSettings(**QUICK, repetitions=2),
    )  # fmt: skip
    trial = multiprocessing.get_context("fork").Process(
        target=_trial_forever, args=(spec.to_dict(),)
    )
    trial.start()
    workers: list[psutil.Process] = []
    try:
        end = time.monotonic() + 30
        expected = 2 if start == "fresh" else 1  # fresh: both interpreters start at once
        while len(workers) < expected and time.monotonic() < end:
            workers = psutil.Process(trial.pid).children()
            time.sleep(0.05)
        assert workers, "the trial forked no worker"
        trial.kill()
        trial.join()
        gone, alive = psutil.wait_procs(workers, timeout=10)
        assert not alive, f"worker outlived its trial: {alive}"
    finally:
        if trial.is_alive():
            trial.kill()
        for worker in workers:  # a regression must fail here, not leave a 60 s orphan behind
            with contextlib.suppress(psutil.NoSuchProcess):
                worker.kill()


def test_cpu_meter_is_live_while_a_worker_warms_up() -> None:
    """The console's CPU meter gets samples through warm-up too, not only in the timed loops:
    cpu events for the worker arrive between its warmup and measure phase events."""
    spec = TrialSpec(
        model="m",
        compiler="noop",
        compiler_options={"sleep_s": 0.001},
        measure=MeasureSettings(
            **{**QUICK, "warmup_s": 2.5, "warmup_iters": 1}, repetitions=1, workers=1
        ),
    )
    seen: list[dict] = []
    result = run_trial(spec, emit=seen.append)
    assert result.ok, result.error
    kinds = [(e["type"], e.get("phase")) for e in seen if e.get("worker") == 0]
    warmup = kinds.index((events.PHASE, "warmup"))
    measure = kinds.index((events.PHASE, "measure"))
    assert any(kind == events.CPU for kind, _ in kinds[warmup:measure]), kinds
    assert result.extra["workers"][0]["cpu"]["others_percent_mean"] is not None


def test_a_worker_gone_before_its_display_meter_starts_is_not_a_psutil_error(monkeypatch) -> None:
    # a build that raised at once can be reaped before the meter looks: the trial's error must be
    # the worker's own (its report or exit status), not "process PID not found"
    import psutil
    from ngb.core.trial import workers

    def gone(pid: int, *_: object) -> None:
        raise psutil.NoSuchProcess(pid)

    monkeypatch.setattr(workers, "LiveMeter", gone)
    assert workers._display_meter(123, "k", 0, lambda _e: None) is None
    monkeypatch.undo()
    meter = workers._display_meter(os.getpid(), "k", 0, lambda _e: None)
    assert meter is not None


def test_a_worker_reaped_before_its_timed_loops_are_watched_is_not_a_psutil_error() -> None:
    # loops that timed nothing end at once, and a fork server's worker is reaped by the server:
    # the watch on its timed loops must step aside (its report says why), not raise psutil's
    # "process PID not found" as the trial's error (make test, 2026-11-30)
    import subprocess

    from ngb.core.trial import workers
    from ngb.core.trial.telemetry import WorkerWatch

    spec = TrialSpec(model="m", compiler="noop", measure=MeasureSettings(**QUICK))
    ended = subprocess.Popen(["true"])  # noqa: S607
    ended.wait()  # reaped: its pid names no process
    assert workers._measure_watch(ended.pid, spec, 0, lambda _e: None) is None
    watch = workers._measure_watch(os.getpid(), spec, 0, lambda _e: None)
    assert isinstance(watch, WorkerWatch)
