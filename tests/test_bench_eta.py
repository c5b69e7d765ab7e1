"""benchmarks/eta.py (issue 46): the ETA errors it prints are predicted / true - 1 at the first
second the search reached 25 / 50 / 75 % of its budget, and at 25 / 50 / 75 % of the wall time;
"ETA ?" where the console showed none. The run itself is the benchmark's (``ngb bench eta``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from types import ModuleType

import pytest

from tests.script_modules import ROOT, load_script

BENCH = ROOT / "benchmarks"


@pytest.fixture(scope="module")
def eta() -> Iterator[ModuleType]:
    sys.path.insert(0, str(BENCH))  # the script imports its neighbour ``_args``
    try:
        yield load_script("benchmarks/eta.py")
    finally:
        sys.path.remove(str(BENCH))


def test_errors_at_quarters_of_the_budget_and_of_the_wall(eta: ModuleType) -> None:
    s = eta.Sample
    # a 64-trial search from t = 10 to t = 170 (its last news), the trial ends at t = 200
    samples = [
        s(0.0, None, None, None, None, None),
        s(50.0, 180.0, 150.0, 16, 64, 50.0),  # search: 120 s left truly -> +25 %
        s(90.0, 100.0, 60.0, 32, 64, 90.0),  # 80 s left -> -25 %
        s(130.0, 70.0, 40.0, 48, 64, 130.0),  # 40 s left -> 0 %
        s(170.0, 30.0, None, None, None, 170.0),  # the search is over: building and timing
    ]
    lines = eta.report(samples, 0.0, 200.0)
    assert lines[0] == "search: 64 trials, 120 s from the first tuning news to the last"
    assert lines[2].split()[:7] == ["25%", "16/64", "150", "s", "120", "s", "+25"]
    assert "-25 %" in lines[3] and "+0 %" in lines[4]
    assert lines[2].rstrip().endswith("+20 %")  # device: 180 shown, 150 true
    assert lines[5] == "wall: 200 s; device ETA at 25 / 50 / 75 % of it:"
    assert lines[6].split()[:2] == ["25%", "shown"] and "+20 %" in lines[6]  # the t=50 sample
    assert lines[-1] == "device ETA '?' in 1 of 5 one-second samples"


def test_a_run_without_a_search_reports_the_wall_only(eta: ModuleType) -> None:
    s = eta.Sample
    lines = eta.report([s(10.0, None, None, None, None, None)], 0.0, 40.0)
    assert lines[0].startswith("wall: 40 s") and "ETA ?" in lines[1]
    assert eta.job_sweep(32, batch=4).count("batches = [4]") == 1
    assert "max_trials_global = 32" in eta.job_sweep(32)
