"""Break-even with all its uncertainty (issue 30, item 4): both throughputs' intervals and, where
a point was compiled in several runs, the compile-time spread
(``ngb.core.statistics.breakeven``)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from ngb.core.records.types import MeasureSettings, Stats, TrialResult, TrialSpec
from ngb.core.statistics import breakeven
from ngb.core.statistics.breakeven import Uncertain
from ngb.sweeps.report.catalog import build_report
from ngb.sweeps.report.data import Cell
from ngb.sweeps.store.database import Store


def _throughput(rng: np.random.Generator, mean: float, cv: float, workers: int) -> Uncertain:
    """What a trial stores: the mean of ``workers`` process means and its standard error."""
    x = mean * (1 + cv * rng.standard_normal(workers))
    return Uncertain(float(x.mean()), float(x.std(ddof=1)) / math.sqrt(workers), workers - 1)


def _coverage(runs: int, sigma: float, trials: int = 500, seed: int = 4) -> float:
    """A world with known means: T_b = 200, T_c = 260 samples/s (4 processes each, 3 % apart),
    one-time seconds lognormal with mean 6 s (compiler) and 0.1 s (baseline), ``sigma`` on the
    log scale (0.45: the spread of 6.0, 3.0 and 1.6 s the issue saw for one OpenVINO export),
    ``runs`` stored runs of each. Truth: N at the true means."""
    rng = np.random.default_rng(seed)
    t_b, t_c, once_c, once_b = 200.0, 260.0, 6.0, 0.1
    truth = breakeven.pays_back_after(once_c - once_b, t_b, t_c)

    def compiles(mean: float) -> Uncertain:
        if runs == 1:
            return Uncertain(mean)  # one run: exact, and so is the truth's
        mu = math.log(mean) - sigma**2 / 2
        return breakeven.repeated(list(np.exp(mu + sigma * rng.standard_normal(runs))))

    hits = 0
    for _ in range(trials):
        low, high = breakeven.interval(
            compiles(once_c), compiles(once_b), _throughput(rng, t_c, 0.03, 4),
            _throughput(rng, t_b, 0.03, 4),
        )  # fmt: skip
        hits += low <= truth <= high
    return hits / trials


@pytest.mark.parametrize(
    "runs, sigma, measured",
    [(1, 0.0, 0.964), (3, 0.45, 0.930), (5, 0.45, 0.930)],
    ids=["one-run", "three-runs", "five-runs"],
)
def test_the_interval_covers_the_true_break_even(runs: int, sigma: float, measured: float) -> None:
    """90-97 % of simulated trials (500 each, seeded; ``measured`` is what they gave on
    2026-11-26). Two runs of a compile spread this wide cover 88-91 % (seed-dependent): two
    values say little about a skewed spread."""
    coverage = _coverage(runs, sigma)
    assert 0.90 <= coverage <= 0.97
    assert coverage == pytest.approx(measured, abs=0.015)


def test_never_pays_back_where_not_faster_and_at_once_without_extra_cost() -> None:
    assert breakeven.pays_back_after(5.0, 200.0, 200.0) == math.inf
    assert breakeven.pays_back_after(-1.0, 200.0, 300.0) == 0.0
    assert breakeven.pays_back_after(6.0, 200.0, 300.0) == pytest.approx(6 * 200 * 300 / 100)
    # a speed-up whose draws reach 1: the upper bound is unbounded
    low, high = breakeven.interval(Uncertain(6.0), Uncertain(0.1), Uncertain(210.0, 5.0, 3),
                                   Uncertain(200.0, 5.0, 3))  # fmt: skip
    assert 0 < low < math.inf and high == math.inf
    # the same inputs give the same digits: a seeded simulation
    again = breakeven.interval(Uncertain(6.0), Uncertain(0.1), Uncertain(210.0, 5.0, 3),
                               Uncertain(200.0, 5.0, 3))  # fmt: skip
    assert again == (low, high)


# ---------------------------------------------------------------- the report


def _trial(compiler: str, tput: float, compile_s: float, finished: float) -> TrialResult:
    spec = TrialSpec(model="resnet18", compiler=compiler, batch=1,
                     measure=MeasureSettings(repetitions=4))  # fmt: skip
    return TrialResult(
        key=spec.key,
        spec=spec.to_dict(),
        finished_at=finished,
        throughput=Stats(n=4, mean=tput, std=tput * 0.03),
        repetitions=[{"iters": 5, "elapsed_s": 1.0, "throughput": tput}] * 4,
        ci_half_width=tput * 0.03,
        compile_s=compile_s,
        verdict="VALID",
        extra={"measure": {"df": 3, "confidence": 0.95}},
    )


def _breakeven_row(store: Store) -> dict[str, object]:
    report = build_report("breakeven", store)
    (table,) = report.tables
    (row,) = [dict(zip(table.columns, r, strict=True)) for r in table.rows]
    return {**row, "title": table.title}


def test_repeated_compiles_widen_the_interval_and_the_header_says_which(tmp_path: Path) -> None:
    """The issue's OpenVINO export: 6.0 s, 3.0 s and 1.6 s in three runs. From the newest run
    alone the interval covers the throughputs only and the header says so; with all three runs
    stored, the one-time seconds are their mean and the interval takes in their spread."""
    store = Store(tmp_path / "r.duckdb")
    times = (6.0, 3.0, 1.6)
    widths: list[float] = []
    for i, compile_s in enumerate(times):
        run = f"run{i}"
        store.create_run(run, "be", 'baseline = "identity"\n', ["box"], 2)
        store.ingest_results(run, "box", [
            _trial("identity", 200.0, 0.1, 1_700_000_000.0 + i),
            _trial("openvino", 300.0, compile_s, 1_700_000_000.0 + i),
        ])  # fmt: skip
        row = _breakeven_row(store)
        cell = row["break-even (inferences)"]
        assert isinstance(cell, Cell) and cell.low is not None and cell.high is not None
        widths.append((cell.high - cell.low) / cell.value)  # type: ignore[operator]
        if i == 0:
            assert row["compile runs"] == "1 / 1"
            assert "compile time from one run" in str(row["title"])
            assert cell.value == pytest.approx(5.9 * 200 * 300 / 100)
    assert row["compile runs"] == "3 / 3" and "from one run" not in str(row["title"])
    assert row["extra one-time s"] == pytest.approx(sum(times) / 3 - 0.1)
    assert widths[-1] > 2 * widths[0]  # the compile-time spread is in the interval
