"""The Python API (issue 22): ngb.measure / open_results / compare, and the example that uses it."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import ngb
import pytest
from ngb.core.errors import NgbError
from ngb.core.intervals import speedup
from ngb.sweeps import api, derived
from ngb.sweeps.numbers import printed_interval

ROOT = Path(__file__).resolve().parents[1]
QUICK = {"repetitions": 4, "workers": 2, "min_duration_s": 0.02, "warmup_s": 0.0,
         "quiet_check_s": 0.0, "verify": False}  # fmt: skip


def test_import_ngb_loads_no_heavy_library() -> None:
    code = (
        "import sys, ngb; heavy = {'torch', 'duckdb', 'pandas', 'timm'} & set(sys.modules); "
        "print(sorted(heavy)); assert callable(ngb.measure) and callable(ngb.compare)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_unknown_api_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'mesure'"):
        ngb.mesure  # noqa: B018


def test_measure_stores_and_open_results_reads_back(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    r = ngb.measure("conv", compiler="noop", width=8, db=db, run="api-test", **QUICK)
    assert r.ok and r.throughput > 0 and len(r.samples) == 4
    low, high = r.interval
    assert low < r.throughput < high
    assert r.verdict is not None and r.verdict.split(":")[0] in ("VALID", "INVALID")
    assert r.to_dict()["key"] == r.trial.key
    results, samples = ngb.open_results(db)  # the newest run
    assert list(results["key"]) == [r.trial.key]
    assert results["throughput_mean"][0] == pytest.approx(r.throughput)
    assert sorted(samples["throughput"]) == pytest.approx(sorted(r.samples))
    assert set(samples["worker"]) == {0, 1}


def test_measure_refuses_bad_arguments_in_one_line() -> None:
    with pytest.raises(NgbError, match="noopp"):
        ngb.measure("conv", compiler="noopp", width=8)
    with pytest.raises(NgbError, match="repetition"):
        ngb.measure("conv", compiler="noop", width=8, repetitionz=3)


def test_open_results_without_a_database_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(NgbError, match="no results database"):
        ngb.open_results(tmp_path / "none.duckdb")


def test_compare_is_the_reports_speedup() -> None:
    fast, slow = [210.0, 205.0, 208.0, 212.0], [100.0, 101.0, 99.0, 102.0]
    c = ngb.compare(fast, slow)
    # the reports' computation: ratio of means, delta-method interval, printed (rounded) ends
    ratio = derived.judge(speedup(api._mean(fast), api._mean(slow)), 1.0)
    assert c.speedup == pytest.approx(sum(fast) / sum(slow)) == pytest.approx(ratio.value)
    assert ratio.half is not None and c.interval == printed_interval(ratio.value, ratio.half)
    assert c.significant and "n.s." not in str(c)
    same = ngb.compare([100.0, 103.0, 98.0], [101.0, 99.0, 102.0])
    assert not same.significant and str(same).endswith("n.s.")
    assert same.interval[0] < 1 < same.interval[1]
    with pytest.raises(NgbError, match="two repetitions"):
        ngb.compare([1.0], [1.0, 2.0])


def test_failed_trial_is_a_result_not_an_exception() -> None:
    r = ngb.measure("conv", compiler="tensorrt", width=8, **QUICK)  # not installed here
    assert not r.ok and r.error and math.isnan(r.interval[0]) and r.verdict is None


def test_example_notebook_script_runs(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "notebook_api.py"), str(tmp_path / "x.duckdb")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "noop over eager:" in out.stdout and "conv identity b1" in out.stdout
    assert "throughput_mean" in out.stdout


def test_measure_after_the_notebook_ran_torch_on_two_threads() -> None:
    """A notebook that ran torch ops has OpenMP's pool started; a worker forked from it would hang
    at its first parallel op (libgomp does not survive a fork). ngb.measure must still answer."""
    code = (
        "import torch, ngb\n"
        "torch.set_num_threads(2)\n"
        "torch.nn.Conv2d(3, 16, 3)(torch.ones(4, 3, 64, 64))  # starts the OpenMP pool\n"
        f"r = ngb.measure('conv', compiler='identity', width=8, batch=1, **{QUICK!r})\n"
        "print('ok' if r.ok else r.error)\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "OMP_NUM_THREADS"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=env
    )
    assert out.stdout.strip().splitlines()[-1:] == ["ok"], out.stderr[-2000:]
