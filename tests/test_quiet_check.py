"""The quiet check reads other processes' CPU over the worker's warm-up (issue 44).

As a sleep of its own it cost 0.3 s of every worker's share of ``max_measure_s``. Where the
warm-up's floor lasts at least ``quiet_check_s`` the check is read over the warm-up instead; a
shorter warm-up keeps the sleep (before the warm-up), and ``quiet_check_s = 0`` reads nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from ngb.core.compilers.base import Compiled
from ngb.core.records.types import MeasureSettings, TrialSpec
from ngb.core.statistics.stopping import Plan
from ngb.core.trial import budget, interference
from ngb.core.trial.timing import time_share


class Spinning(Compiled):
    """~1 ms of Python work a call, on one core."""

    def run(self) -> object:
        end = time.perf_counter() + 0.001
        while time.perf_counter() < end:
            pass
        return None


def _share(
    monkeypatch: pytest.MonkeyPatch, **settings: float
) -> tuple[dict[str, object], list[float]]:
    """(the worker's ``cpu_before``, the sleeps ``quiet_check`` was asked for)."""
    slept: list[float] = []
    real = interference.quiet_check

    def counted(seconds: float) -> float | None:
        slept.append(seconds)
        return real(seconds)

    monkeypatch.setattr(interference, "quiet_check", counted)
    measure = MeasureSettings(
        warmup_max_s=0.5, min_iters=5, min_duration_s=0.05, **settings
    )  # fmt: skip
    spec = TrialSpec(model="m", compiler="identity", batch=1, measure=measure)
    plan = Plan(worker=0, target=0.02, confidence=0.95, reps=2, total_max=2)
    part = time_share(spec, Spinning(), plan, lambda: None, lambda *a, **k: None)
    return part.telemetry["cpu_before"], slept


def test_the_check_has_no_sleep_of_its_own_where_the_warm_up_lasts_as_long(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before, slept = _share(monkeypatch, warmup_s=0.3, quiet_check_s=0.3)
    assert slept == []
    others = before["others_percent"]
    assert isinstance(others, float) and 0.0 <= others <= 100.0
    assert "loadavg_1m" in before  # the machine's facts beside it, as before


def test_a_warm_up_shorter_than_the_check_keeps_its_sleep_and_zero_reads_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before, slept = _share(monkeypatch, warmup_s=0.1, quiet_check_s=0.3)
    assert slept == [0.3] and isinstance(before["others_percent"], float)
    before, _ = _share(monkeypatch, warmup_s=0.3, quiet_check_s=0.0)
    assert before["others_percent"] is None


def test_what_the_check_adds_to_a_worker_in_the_budget() -> None:
    cpu = MeasureSettings(warmup_s=0.3, quiet_check_s=0.3)
    assert budget.quiet_check_apart_s(cpu, "cpu") == 0.0
    assert budget.quiet_check_apart_s(MeasureSettings(warmup_s=0.1), "cpu") == 0.3
    # a GPU's warm-up floor (3 s) always covers it, even with no CPU floor
    assert budget.quiet_check_apart_s(MeasureSettings(warmup_s=0.0), "cuda") == 0.0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reparenting to init: Linux")
def test_a_process_busy_during_the_warm_up_is_read_as_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # not a descendant of this (the worker's) process, which would count as ngb's own: the shell
    # leaves the spinner to init and prints its pid
    spinner = subprocess.run(
        ["sh", "-c", f"{sys.executable} -c 'while True: pass' >/dev/null 2>&1 & echo $!"],
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    pid = int(spinner.stdout.strip())
    try:
        time.sleep(0.3)  # the spinner is running before the warm-up starts
        before, slept = _share(monkeypatch, warmup_s=0.5, quiet_check_s=0.3)
    finally:
        os.kill(pid, signal.SIGKILL)
    assert slept == []
    # one core of the machine's (100 / cores %), less what the scheduler shares out with us
    share = 100.0 / (os.cpu_count() or 1)
    others = before["others_percent"]
    assert isinstance(others, float) and others > share / 3, (others, share)
