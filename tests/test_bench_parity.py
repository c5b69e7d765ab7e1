"""benchmarks/parity.py and benchmarks/fidelity.py (issue 30): parity sets as many plain-loop
processes as ngb ran workers beside ngb's mean and states the ratio with the reports' speed-up
interval; both scripts refuse bad counts in one line and still run end to end (slow tier)."""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from ngb.core.records.types import MeasureSettings
from ngb.core.statistics import intervals, student_t

from tests.cli_helpers import scaled
from tests.script_modules import ROOT, load_script

BENCH = ROOT / "benchmarks"


def _script(name: str) -> Iterator[ModuleType]:
    # the script imports its neighbour ``_args`` as a script run from that folder does
    sys.path.insert(0, str(BENCH))
    try:
        yield load_script(f"benchmarks/{name}.py")
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture(scope="module")
def parity() -> Iterator[ModuleType]:
    yield from _script("parity")


@pytest.fixture(scope="module")
def fidelity() -> Iterator[ModuleType]:
    yield from _script("fidelity")


def test_fidelity_prints_ngbs_interval_as_the_reports_do(fidelity: ModuleType) -> None:
    """A loaded machine's 7.04 +- 27.44 samples/s (1 df) was printed as such: a throughput
    bound below zero. It is the reports' positive interval now."""
    text = fidelity.fmt({"value": 7.04, "ci": 27.44, "df": 1})
    low, high = (float(v) for v in text.split("[")[1].rstrip("]").split(","))
    assert 0 < low < 7.04 < high and "±" not in text
    assert fidelity.fmt({"value": 7.04, "ci": None, "df": None}).strip() == "7.04"


# one `ngb measure` of conv:64:16 on the 2-core VM (2026-11-27): its processes at two levels
NGB_WORKERS = [230.0, 235.0, 330.0, 334.0, 369.0]


def test_one_plain_process_cannot_stand_beside_a_mean_over_two_levels(parity: ModuleType) -> None:
    """The old design: one plain process (it landed on the low level) against ngb's mean of
    five read as ngb 1.3x faster. Plain processes that sample both levels as ngb's do give a
    ratio near 1 whose interval holds 1; a single process on a side gives no interval."""
    lone = parity.ratio(NGB_WORKERS, [229.0])
    assert lone.value > 1.25 and not lone.known
    both = parity.ratio(NGB_WORKERS, [229.0, 240.0, 325.0, 338.0, 360.0])
    assert both.known and both.lo < 1.0 < both.hi
    assert 0.97 < both.value < 1.03


def test_the_ratio_is_the_reports_speed_up_of_the_two_means(parity: ModuleType) -> None:
    """One computation: ``intervals.speedup`` of the two Student-t means over processes."""
    ours, theirs = [100.0, 104.0, 98.0, 101.0], [90.0, 92.0, 91.0, 95.0, 89.0]
    est = parity.ratio(ours, theirs)
    mean = parity.mean_over(ours)
    assert mean.df == 3 and mean.value == pytest.approx(100.75)
    assert est == intervals.speedup(mean, parity.mean_over(theirs))
    assert est.lo < est.value < est.hi and est.value == pytest.approx(100.75 / 91.4)
    assert "[" in parity.describe(est, "one process on a side")
    assert "no interval: one process" in parity.describe(
        parity.ratio(ours, [90.0]), "one process on a side"
    )


# mha:128:1's rounds in two runs of `ngb bench parity --rounds 3` on the 2-core VM, same code
# (2026-11-28, 20:00 and 23:15): over processes they read 1.112 [1.045, 1.183] and 0.903
# [0.776, 1.051], two intervals of one quantity that do not overlap
EVENING = [1.121, 1.125, 1.098]
NIGHT = [0.822, 1.038, 0.803]


def test_the_figure_is_the_rounds_geometric_mean_with_a_t_interval_over_rounds(
    parity: ModuleType,
) -> None:
    """The round is the unit: the interval is Student-t on the rounds' log ratios, rounds - 1
    df. Rounds that disagree (the night's) give an interval as wide as their spread; one round
    gives no interval."""
    night = parity.over_rounds(NIGHT)
    logs = [math.log(r) for r in NIGHT]
    assert night.value == pytest.approx(math.exp(statistics.fmean(logs)))
    assert night.df == 2
    half = student_t.t_quantile(0.975, 2) * statistics.stdev(logs) / math.sqrt(3)
    assert math.log(night.hi) - math.log(night.value) == pytest.approx(half)
    assert night.lo < 0.803 and night.hi > 1.038  # wider than the rounds' own range
    assert night.lo < 1.0 < night.hi
    # the evening's rounds agree closely, and their interval says ngb read higher then
    evening = parity.over_rounds(EVENING)
    assert evening.lo > 1.0
    one = parity.over_rounds([0.95])
    assert one.value == pytest.approx(0.95) and not one.known
    assert "no interval: one round" in parity.describe(one, "one round")


def test_the_first_rounds_plain_count_is_the_workers_ngb_will_start(parity: ModuleType) -> None:
    assert parity.first_count(["--workers", "2", "--repetitions", "2"]) == 2
    assert parity.first_count(["--workers=3"]) == 3
    default = MeasureSettings().workers
    assert parity.first_count([]) == default
    for bad in (["--workers", "nan"], ["--workers", "0"], ["--workers"], ["--workers=-1"]):
        assert parity.first_count(bad) == default  # ngb measure refuses it in its own line


def test_worker_means_group_ngbs_repetitions_by_process(parity: ModuleType) -> None:
    result = {
        "repetitions": [
            {"worker": 1, "throughput": 10.0},
            {"worker": 0, "throughput": 4.0},
            {"worker": 1, "throughput": 12.0},
            {"worker": 0, "throughput": 6.0},
        ]
    }
    assert parity.worker_means(result) == [5.0, 11.0]
    assert parity.worker_means({}) == []


@pytest.mark.parametrize(
    "script, argv, said",
    [
        ("parity", ["--plain-processes", "0"], "--plain-processes: '0' must be at least 1"),
        ("parity", ["--rounds", "nan"], "--rounds: 'nan' is not a whole number"),
        ("parity", ["--workload", "mha:128"], "want MODEL:WIDTH:BATCH"),
        ("fidelity", ["--rounds", "0"], "--rounds: '0' must be at least 1"),
        ("fidelity", ["--seconds", "-1"], "--seconds: '-1' must be at least 1"),
    ],
)
def test_bad_counts_are_refused_in_one_line_before_anything_runs(
    script: str, argv: list[str], said: str
) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH / f"{script}.py"), *argv],
        capture_output=True,
        text=True,
        timeout=scaled(120),
    )
    assert proc.returncode != 0
    assert said in proc.stderr.strip().splitlines()[-1], proc.stderr
    assert "Traceback" not in proc.stderr


def _run(script: str, argv: list[str], tmp_path: Path) -> str:
    """The script as a user runs it, with a throwaway ngb home (no re-run history of ours left
    in the user's cache)."""
    proc = subprocess.run(
        [sys.executable, str(BENCH / f"{script}.py"), *argv],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NGB_HOME": str(tmp_path / "home")},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


# ngb measure at the smallest settings that still start fresh worker interpreters
TINY_NGB = ["--repetitions", "2", "--workers", "2", "--min-duration", "0.05", "--warmup-s", "0.1"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_parity_runs_as_many_plain_processes_as_ngb_ran_workers(tmp_path: Path) -> None:
    """Two rounds, each a plain process before ngb measure and one after (the first with the
    workers ngb is asked for, the second with ngb's previous count): 2 + 2 processes a side,
    and the ratio over the rounds with its interval."""
    out = _run(
        "parity",
        ["--rounds", "2", "--workload", "mha:64:1", "--warmup", "0", "--windows", "2",
         "--window", "0.05", "--", *TINY_NGB],
        tmp_path,
    )  # fmt: skip
    rounds = [line for line in out.splitlines() if " round " in line]
    assert len(rounds) == 2, out
    assert all("ngb 2 processes" in r and "plain 2 processes" in r for r in rounds), out
    assert "mha:64:1: ngb / plain " in out and "over 2 rounds (4 ngb and 4 plain processes" in out
    assert "counting every process as independent: " in out, out
    assert "lowest ratio" in out


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_fidelity_runs_its_cpu_cases_end_to_end(tmp_path: Path) -> None:
    """OpenVINO's benchmark_app and torch's Timer beside ngb measure, tiny settings: every path
    of the script (export, both references, ngb's JSON) against the current code."""
    pytest.importorskip("openvino")
    out = _run(
        "fidelity",
        ["--rounds", "1", "--seconds", "1", "--cases", "ov-latency,eager-cpu", "--",
         "--repetitions", "2", "--workers", "1", "--warmup-s", "0.1"],
        tmp_path,
    )  # fmt: skip
    rounds = [line for line in out.splitlines() if line.startswith("round 1 ")]
    assert [r.split()[2] for r in rounds] == ["ov-latency", "eager-cpu"], out
    assert all("ngb " in r and " ratio " in r for r in rounds), out
    assert "median ratio ngb / reference" in out
