"""Is the process-level interval calibrated? Simulated trials and replays of recorded series.

The goal (issue 19): a 95 % interval holds the between-process truth in 90-97 % of trials and is
at most 1.5x the width that would do so (half-width / (1.96 x SD of trial means) in 0.8-1.5),
with the stopping rule in the loop (stopping when an interval happens to be narrow biases
coverage down). Real machines are checked by ``ngb bench coverage``; these tests check the method
on series whose truth is known: simulated processes, and processes replayed from what a quiet
16-core server and an H100 recorded (``tests/data/h100-box-2026-11-25``, copied from shared/).
"""

from __future__ import annotations

import csv
import json
import statistics
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from ngb.core.records.types import MeasureSettings
from ngb.core.statistics import stopping

DATA = Path(__file__).parent / "data" / "h100-box-2026-11-25"
Process = Callable[[np.random.Generator], list[float]]


def run_adaptive(draw: Process, settings: MeasureSettings, rng: np.random.Generator) -> tuple:
    """One simulated trial through ngb's own stopping rule: (mean, half-width, processes)."""
    groups: list[list[float]] = []
    while True:
        groups.append(draw(rng)[: settings.values_per_worker])
        more, _ = stopping.next_worker(settings, groups, spent_s=0.0)
        if not more:
            break
    ci = stopping.process_interval(groups, settings.confidence)
    return ci.mean, ci.half_width, len(groups)


def calibration(draw: Process, truth: float, settings: MeasureSettings, trials: int, seed: int):
    rng = np.random.default_rng(seed)
    runs = [run_adaptive(draw, settings, rng) for _ in range(trials)]
    means = [m for m, _, _ in runs]
    coverage = sum(abs(m - truth) <= h for m, h, _ in runs) / trials
    ratio = statistics.median(h for _, h, _ in runs) / (1.96 * statistics.stdev(means))
    return coverage, ratio, statistics.median(k for _, _, k in runs)


def simulated(level_sd: float, noise_sd: float, rho: float) -> Process:
    """A process: its own level (between-process spread) and AR(1) noise around it."""

    def draw(rng: np.random.Generator) -> list[float]:
        level = 100.0 * (1 + level_sd * rng.standard_normal())
        noise, out = 0.0, []
        for _ in range(3):
            noise = rho * noise + np.sqrt(1 - rho**2) * noise_sd * rng.standard_normal()
            out.append(level * (1 + noise))
        return out

    return draw


@pytest.mark.parametrize(
    ("level_sd", "noise_sd", "rho"),
    [(0.03, 0.01, 0.0), (0.01, 0.03, 0.7), (0.05, 0.05, 0.5), (0.005, 0.002, 0.0)],
)
def test_the_interval_is_calibrated_on_simulated_processes(
    level_sd: float, noise_sd: float, rho: float
) -> None:
    settings = MeasureSettings()  # ngb's defaults: 4-10 processes x 2 values, target ±2 %
    coverage, ratio, _ = calibration(simulated(level_sd, noise_sd, rho), 100.0, settings, 600, 7)
    assert 0.90 <= coverage <= 0.985, coverage
    assert 0.8 <= ratio <= 1.5, ratio


def interpreters(interp_sd: float, fork_sd: float, noise_sd: float, fresh: bool):
    """A trial's process drawer when a process's level has an interpreter part (layout, heap:
    what a fork inherits) and a part of its own. Forked workers (``fresh=False``) share the
    trial interpreter's part; fresh interpreters (``ngb.core.trial.worker_start``) each draw
    theirs."""

    def trial(rng: np.random.Generator) -> Process:
        shared = interp_sd * rng.standard_normal()

        def draw(rng: np.random.Generator) -> list[float]:
            level = interp_sd * rng.standard_normal() if fresh else shared
            base = 100.0 * (1 + level + fork_sd * rng.standard_normal())
            return [base * (1 + noise_sd * rng.standard_normal()) for _ in range(3)]

        return draw

    return trial


def trial_calibration(make_trial, settings: MeasureSettings, trials: int, seed: int):
    """``calibration`` for processes whose level may be shared within a trial."""
    rng = np.random.default_rng(seed)
    runs = [run_adaptive(make_trial(rng), settings, rng) for _ in range(trials)]
    means = [m for m, _, _ in runs]
    coverage = sum(abs(m - 100.0) <= h for m, h, _ in runs) / trials
    ratio = statistics.median(h for _, h, _ in runs) / (1.96 * statistics.stdev(means))
    return coverage, ratio, statistics.median(k for _, _, k in runs)


@pytest.mark.parametrize(
    ("interp_sd", "fork_sd", "noise_sd"),
    # mha-like (the interpreter's level dominates), resnet-like, and nearly no interpreter part
    [(0.05, 0.005, 0.01), (0.02, 0.01, 0.01), (0.003, 0.01, 0.02)],
)
def test_fresh_interpreters_hold_re_runs_where_forked_workers_do_not(
    interp_sd: float, fork_sd: float, noise_sd: float
) -> None:
    """Issue 30's design: each worker its own interpreter, the interval over their means (the
    level that varies). Forked from one interpreter, the same processes agree with each other
    and not with a re-run: mha:128:1 measured 50 % coverage at width ratio 0.35 that way."""
    settings = MeasureSettings()
    fresh = trial_calibration(interpreters(interp_sd, fork_sd, noise_sd, True), settings, 600, 5)
    assert 0.90 <= fresh[0] <= 0.985, fresh
    assert 0.8 <= fresh[1] <= 1.5, fresh
    forked = trial_calibration(interpreters(interp_sd, fork_sd, noise_sd, False), settings, 600, 5)
    if interp_sd >= 0.02:  # where the interpreter's level matters, forks under-cover
        assert forked[0] < 0.8 and forked[1] < 0.7, forked


def test_the_old_end_to_end_interval_was_not() -> None:
    """The same processes through the interval ngb used before (every repetition end to end,
    widened for AR(1)): it under-covers when processes differ and is far too wide when a level
    shift is read as serial correlation."""
    rng = np.random.default_rng(11)
    draw = simulated(0.03, 0.01, 0.0)
    trials = [[draw(rng) for _ in range(2)] for _ in range(400)]  # the old default: 2 processes
    old = [stopping.interval([v for g in t for v in g]) for t in trials]
    covered = sum(abs(ci.mean - 100.0) <= ci.half_width for ci in old) / len(old)
    assert covered < 0.85


def _agreement_processes() -> list[list[float]]:
    """Every worker of the two recorded 16-core sweep runs, relative to its trial's mean."""
    series: dict[tuple[str, ...], dict[tuple[str, str], list[float]]] = defaultdict(dict)
    for run in ("a", "b"):
        with open(DATA / f"agree-run-{run}-measurements.csv") as f:
            for row in csv.DictReader(f):
                trial = (row["model"], row["compiler"], row["depth"])
                series[trial].setdefault((run, row["worker"]), []).append(float(row["throughput"]))
    processes = []
    for workers in series.values():
        grand = statistics.fmean(statistics.fmean(v) for v in workers.values())
        processes += [[v / grand for v in values] for values in workers.values()]
    return processes


def test_replayed_16_core_processes_are_calibrated() -> None:
    """Processes replayed from two back-to-back localhost sweeps on the 16-core server (64
    recorded worker series of 6-8 repetitions, 0 of 16 trials VALID then): a trial draws whole
    recorded processes and takes each one's first values, through ngb's stopping rule."""
    processes = _agreement_processes()
    assert len(processes) == 64
    truth = statistics.fmean(statistics.fmean(p[:3]) for p in processes)

    def draw(rng: np.random.Generator) -> list[float]:
        return processes[int(rng.integers(len(processes)))]

    settings = MeasureSettings(ci_target=0.05)
    coverage, ratio, workers = calibration(draw, truth, settings, 600, 3)
    assert 0.90 <= coverage <= 0.985, coverage
    assert 0.8 <= ratio <= 1.5, ratio
    assert workers >= 4


def _h100_trials() -> list[dict]:
    lines = (DATA / "gpu-deit3-precision-trials.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _groups(trial: dict) -> list[list[float]]:
    groups: dict[int, list[float]] = defaultdict(list)
    for rep in trial["repetitions"]:
        groups[int(rep["worker"])].append(float(rep["throughput"]))
    return [groups[k] for k in sorted(groups)]


def test_h100_bimodal_trials_are_two_levels_not_one_wide_interval() -> None:
    """bf16: worker 0 ran 3 repetitions at 4,404/s, worker 1 at ~8,200/s; Inductor tf32: 3,232
    vs ~7,100. Averaged they made a number no process ran at, with a huge interval."""
    by_name = {
        (t["spec"]["compiler"], t["spec"]["measure"].get("precision")): t for t in _h100_trials()
    }
    for key in (("identity", "bf16"), ("inductor", "tf32")):
        verdict = stopping.judge(_groups(by_name[key]), MeasureSettings())
        assert verdict.levels is not None and verdict.verdict == "INVALID", key
        assert verdict.reason.startswith("two levels between processes"), key
        assert verdict.levels.high > 1.8 * verdict.levels.low
    steady = stopping.judge(_groups(by_name[("identity", "fp32")]), MeasureSettings())
    assert steady.levels is None  # 3,021 vs 2,996: one level


def test_h100_trials_were_flagged_by_ngbs_own_parent() -> None:
    """What the recorded results say: the only 'others' on the GPU were seen by worker 1 -- the
    trial's own parent (worker 0's process, holding its CUDA context) or the previous worker.
    The CPU was quiet (others' share well under the threshold) in every one."""
    for trial in _h100_trials():
        telemetry = trial["extra"]["telemetry"]
        seen = [(t.get("gpu") or {}).get("other_pids") for t in telemetry]
        assert seen[0] == [] and len(seen[1]) == 1
        assert "other processes on the GPU" in trial["verdict_reason"]
