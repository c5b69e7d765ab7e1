"""benchmarks/parity.py and benchmarks/fidelity.py (issue 30): parity sets as many plain-loop
processes as ngb ran workers beside ngb's mean and states the ratio with the reports' speed-up
interval; both scripts refuse bad counts in one line and still run end to end (slow tier)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from ngb.core.statistics import intervals

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
    assert "[" in parity.describe(est) and "no interval" in parity.describe(
        parity.ratio(ours, [90.0])
    )


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
    """Two rounds (ngb first, then plain first with ngb's previous count): 2 + 2 processes a
    side, and the ratio over all of them with its interval."""
    out = _run(
        "parity",
        ["--rounds", "2", "--workload", "mha:64:1", "--warmup", "0", "--windows", "2",
         "--window", "0.05", "--", *TINY_NGB],
        tmp_path,
    )  # fmt: skip
    rounds = [line for line in out.splitlines() if " round " in line]
    assert len(rounds) == 2, out
    assert all("ngb 2 processes" in r and "plain 2 processes" in r for r in rounds), out
    assert "mha:64:1: ngb / plain " in out and "over 4 ngb and 4 plain processes" in out, out
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
