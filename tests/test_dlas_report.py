"""`ngb report dlas`'s accuracy half (issue 42): Table 2/5 at each technique's elbow, the compiled
model's accuracy beside its speed-up, observation I's rank correlations and DLAS Fig. 3, from the
synthetic trials of ``tests.dlas_rows`` in a real DuckDB store; hostile facts give a cell or a
note, never a traceback."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from ngb.core.records.types import TrialResult
from ngb.core.statistics.accuracy_stats import paired_drop, wilson
from ngb.sweeps.cli import cli
from ngb.sweeps.figures.catalog import build_figure, caption, write_figures
from ngb.sweeps.figures.data import FigureData
from ngb.sweeps.report import dlas_ranks
from ngb.sweeps.report.catalog import build_report, render
from ngb.sweeps.report.data import Cell, Report, Table
from ngb.sweeps.store.database import Store

from tests.dlas_rows import L1_RATIOS, L1_TOP1, SAMPLES, dlas_results, trial

ELBOWS = "DLAS: accuracy at each technique's elbow (Tables 2 and 5)"
COMPILED = "DLAS: the compiled model's accuracy beside its speed-up"
RANKS = "DLAS observation I: rank correlations of size, accuracy and time"


def _store(path: Path, results: list[TrialResult]) -> Store:
    store = Store(path)
    store.create_run("r1", "dlas-digits", "", ["dev1"], len(results))
    assert store.ingest_results("r1", "dev1", results) == len(results)
    return store


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return _store(tmp_path_factory.mktemp("dlas") / "results.duckdb", dlas_results())


def _table(report: Report, title: str) -> Table:
    return next(t for t in report.tables if t.title == title)


def _rows(table: Table, *keys: str) -> dict[tuple, dict[str, object]]:
    idx = [table.columns.index(k) for k in keys]
    return {tuple(r[i] for i in idx): dict(zip(table.columns, r, strict=True)) for r in table.rows}


def _cell(value: object) -> tuple[float | None, float | None, float | None]:
    assert isinstance(value, Cell), value
    return value.value, value.low, value.high


# ---------------------------------------------------------------- Table 2/5


def test_elbow_table_has_the_baseline_and_each_technique_at_its_elbow(store: Store) -> None:
    table = _table(build_report("dlas", store, run_id="r1"), ELBOWS)
    rows = _rows(table, "model", "technique")
    assert [k[1] for k in rows if k[0] == "digits-resnet"] == [
        "baseline (fp32)", "weight pruning elbow", "channel pruning elbow", "fp16",
        "int8 uncalibrated", "int8 calibrated",
    ]  # fmt: skip
    base = rows[("digits-resnet", "baseline (fp32)")]
    assert base["step"] == f"digits-test, {SAMPLES} samples"
    assert _cell(base["top-1 %"]) == pytest.approx((99.6, 98.9, 99.9))
    l1 = rows[("digits-resnet", "weight pruning elbow")]
    assert l1["step"] == "prune-l1-0.9" and _cell(l1["compression"])[0] == 10.0
    assert _cell(l1["top-1 %"]) == pytest.approx((99.1, 98.5, 99.4))
    assert _cell(l1["drop (points)"]) == pytest.approx((0.5, -0.4, 0.5 + 0.4 + 0.125))
    assert l1["verdict"] == "n.s."
    assert rows[("digits-resnet", "channel pruning elbow")]["step"] == "prune-ch-0.3"
    assert rows[("digits-resnet", "int8 uncalibrated")]["verdict"] == "drop"
    assert rows[("digits-resnet", "int8 calibrated")]["verdict"] == "n.s."
    assert _cell(rows[("digits-vgg", "baseline (fp32)")]["top-1 %"])[0] == pytest.approx(98.6)
    assert any(n.startswith("elbow rule: the highest compression whose drop is n.s.")
               for n in table.notes)  # fmt: skip


def test_elbow_table_renders_values_and_intervals(store: Store) -> None:
    text = render(build_report("dlas", store, run_id="r1"), "table", width=250)
    line = next(ln for ln in text.splitlines() if "weight pruning elbow" in ln)
    assert "prune-l1-0.9" in line and "99.10 [98.50, 99.40]" in line
    assert "0.50 [-0.40, 1.03]" in line and line.rstrip().endswith("n.s.")
    int8 = next(ln for ln in text.splitlines() if "int8 uncalibrated" in ln)
    assert "4.6 [3.0, 6.2]" in int8 and "drop" in int8


# ---------------------------------------------------------------- the compiled model


def test_compiled_accuracy_stands_beside_the_speedup(store: Store) -> None:
    table = _table(build_report("dlas", store, run_id="r1"), COMPILED)
    rows = _rows(table, "model", "optimisation", "compiler")
    # OpenVINO picked bf16 by itself: 2 of 540 answers moved (both wrong either way)
    bf16 = rows[("digits-resnet", "none", "openvino")]
    assert bf16["precision"] == "bf16"
    speed = _cell(bf16["speed-up vs identity"])
    assert speed[0] == pytest.approx(1.5) and speed[1] < 1.5 < speed[2]
    low, high = wilson(538, SAMPLES)
    assert _cell(bf16["agree with eager fp32 %"]) == pytest.approx(
        (100 * 538 / SAMPLES, 100 * low, 100 * high)
    )
    assert _cell(bf16["top-1 %"])[0] == pytest.approx(100 * 538 / SAMPLES)
    assert bf16["drop vs none"] is None and bf16["verdict vs none"] == "-"
    # int8 under OpenVINO: 26 more samples wrong than OpenVINO's own unoptimised model, paired
    int8 = rows[("digits-resnet", "int8", "openvino")]
    drop, lo, hi = paired_drop(26, 0, SAMPLES)
    assert _cell(int8["drop vs none"]) == pytest.approx((100 * drop, 100 * lo, 100 * hi))
    assert int8["verdict vs none"] == "drop"
    assert rows[("digits-resnet", "int8-cal", "openvino")]["verdict vs none"] == "n.s."
    assert rows[("digits-resnet", "none", "identity")]["speed-up vs identity"].note == "baseline"
    text = render(build_report("dlas", store, run_id="r1"), "table", width=250)
    line = next(ln for ln in text.splitlines() if "bf16" in ln)
    assert "1.500 [1.482, 1.518]" in line and "99.63 [98.65, 99.90]" in line


def test_a_report_of_plain_identity_accuracy_adds_no_table(tmp_path: Path) -> None:
    """Without DLAS facts or another compiler, the dlas report keeps its one table (the CSV's
    first line stays its header, as the accuracy pass's own test reads it)."""
    from tests.dlas_rows import accuracy_record

    results = [trial("digits-resnet", "identity", "none", 0.0, accuracy=accuracy_record(2))]
    report = build_report("dlas", _store(tmp_path / "r.duckdb", results), run_id="r1")
    assert [t.title for t in report.tables] == [
        "DLAS: achieved vs expected speed-up per optimisation"
    ]


# ---------------------------------------------------------------- observation I


def test_ranks_and_spearman_match_scipy_with_ties() -> None:
    from scipy.stats import rankdata, spearmanr

    rng = np.random.default_rng(3)
    xs = rng.integers(0, 5, size=(40, 9)).astype(float)  # many ties
    ys = rng.normal(size=(40, 9))
    assert np.allclose(dlas_ranks.ranks(xs), rankdata(xs, axis=1))
    ours = dlas_ranks.spearman_rows(xs, ys)
    for i in range(len(xs)):
        want = spearmanr(xs[i], ys[i]).statistic
        assert (math.isnan(want) and math.isnan(ours[i])) or ours[i] == pytest.approx(want)
    assert math.isnan(dlas_ranks.spearman_rows(np.ones((1, 5)), ys[:1, :5])[0])


def test_observation_one_correlations_with_bootstrap_intervals(store: Store) -> None:
    from scipy.stats import spearmanr

    table = _table(build_report("dlas", store, run_id="r1"), RANKS)
    rows = _rows(table, "compiler")
    ov = rows[("openvino",)]
    assert ov["n"] == 12 and ov["size"] == "non-zero params" and ov["top-1 of"] == "eager"
    # the same 12 points by hand: 2 models x (none, 2 elbows, fp16, int8, int8-cal)
    size, top1, time = [], [], []
    for shift in (0.0, 0.01):
        base = 0.996 - shift
        for ratio, t1, tput in ((1, base, 1000), (10, 0.991 - shift, 1050),
                                (1.4, 0.994 - shift, 1600), (1, base, 300),
                                (1, 0.95 - shift, 2500), (1, 0.993 - shift, 2400)):  # fmt: skip
            size.append(int(100_000 / ratio))
            top1.append(t1)
            time.append(1 / (1.5 * tput))
    for column, (a, b) in zip(("size ~ top-1", "size ~ time", "top-1 ~ time"),
                              ((size, top1), (size, time), (top1, time)), strict=True):  # fmt: skip
        rho, low, high = _cell(ov[column])
        assert rho == pytest.approx(spearmanr(a, b).statistic)
        assert low is not None and high is not None and low <= rho <= high
        assert -1 <= low < high <= 1
        assert ov[column].note == ("n.s." if low <= 0 <= high else "")
    again = _table(build_report("dlas", store, run_id="r1"), RANKS)
    assert _rows(again, "compiler")[("openvino",)]["size ~ time"] == ov["size ~ time"]  # seeded
    assert any("2,000 resamples" in n and "seed 42" in n for n in table.notes)


def test_observation_one_needs_enough_rows(tmp_path: Path) -> None:
    results = [trial("digits-resnet", "identity", o, 0.0) for o in ("none", "fp16", "int8")]
    table = _table(build_report("dlas", _store(tmp_path / "r.duckdb", results)), RANKS)
    (row,) = table.rows
    assert row[3] == 3 and row[6:] == [None, None, None]
    assert any("3 row(s)" in n and "needs 5" in n for n in table.notes)


# ---------------------------------------------------------------- Fig. 3


def test_fig3_points_bars_and_ringed_elbow_from_the_facts(store: Store, tmp_path: Path) -> None:
    from ngb.sweeps.figures.plot import draw, text_outside_canvas

    data = FigureData(store, run_id="r1")
    spec = build_figure("dlas-accuracy", data)
    assert [p.title for p in spec.panels] == ["digits-resnet", "digits-vgg"]
    panel = spec.panels[0]
    assert panel.reference == pytest.approx(99.6) and panel.logx
    l1 = next(ln for ln in panel.lines if ln.label == "weight pruning")
    assert l1.xs == pytest.approx(list(L1_RATIOS))
    assert l1.ys == pytest.approx([100 * t for t in L1_TOP1])
    assert l1.errs[4] == pytest.approx((0.6, 0.3))  # the stored [top1 - 0.006, top1 + 0.003]
    assert [x for x, r in zip(l1.xs, l1.ringed, strict=True) if r] == [10.0]
    assert [ln.label for ln in panel.lines] == [
        "weight pruning", "channel pruning", "fp16", "int8 uncalibrated", "int8 calibrated",
    ]  # fmt: skip
    # what is drawn: the ring sits on the elbow, the error bars span the stored interval
    fig = draw(spec)
    ax = fig.axes[0]
    rings = [ln for ln in ax.lines if ln.get_markersize() == 11]
    assert [tuple(xy) for r in rings for xy in r.get_xydata()] == [(10.0, 99.1), (1.4, 99.4)]
    assert ax.get_xscale() == "log"
    assert text_outside_canvas(fig) == []  # the panels' legends and the ring's entry fit
    text = caption(spec, data)
    assert "Wilson" in text and "digits-test (540 samples)" in text and "Device: dev1" in text
    (written,) = write_figures(data, tmp_path, ["dlas"], ["png"])
    assert [p.name for p in written.paths] == ["dlas-accuracy.png", "dlas-accuracy.caption.txt"]


def test_cli_report_and_figure(store: Store, tmp_path: Path) -> None:
    out = CliRunner().invoke(cli, ["report", "dlas", "--db", str(store.path), "--format", "csv"])
    assert out.exit_code == 0, out.output
    sections = out.output.split("\n\n")
    elbows = next(s for s in sections if s.startswith(f"# {ELBOWS}"))
    rows = list(csv.DictReader(io.StringIO(elbows.split("\n", 1)[1])))
    l1 = next(r for r in rows if r["technique"] == "weight pruning elbow" and
              r["model"] == "digits-vgg")  # fmt: skip
    assert (l1["step"], l1["top-1 %"], l1["verdict"]) == ("prune-l1-0.9", "98.1", "n.s.")
    fig = CliRunner().invoke(cli, ["figures", "dlas", "--db", str(store.path), "-o",
                                   str(tmp_path), "--format", "svg"])  # fmt: skip
    assert fig.exit_code == 0, fig.output
    assert (tmp_path / "dlas-accuracy.svg").stat().st_size > 1000


# ---------------------------------------------------------------- hostile facts


def _hostile(optimisation: str, model: str = "digits-resnet", **changes: object) -> TrialResult:
    result = trial(model, "identity", optimisation, 0.0)
    facts = result.extra["optimisation"]["dlas"]
    for key, value in changes.items():
        if value is None:
            facts.pop(key, None)
        else:
            facts[key] = value
    return result


def test_hostile_facts_give_a_cell_or_a_note(tmp_path: Path) -> None:
    nan_step = {"name": "fp16", "compression_ratio": 2.0, "top1": math.nan, "verdict": "n.s."}
    results = [
        _hostile("fp16", step=nan_step),  # NaN top-1
        _hostile("elbow-prune-l1", ladder=None, elbow=None, step=None),  # nothing at all
        _hostile("elbow-prune-ch", ladder=[], elbow=None),  # empty ladder, no elbow
        _hostile("int8", step="garbage", baseline=[1, 2]),  # not dicts
        _hostile("int8-cal", ladder="nope"),
        # the rule ran and found none: the elbow trial timed the trained model itself
        _hostile(
            "elbow-prune-l1",
            "digits-vgg",
            elbow={"name": None, "rule": "first drop"},
            step={"name": "none", "compression_ratio": 1.0, "top1": 0.99},
        ),
    ]
    store = _store(tmp_path / "r.duckdb", results)
    report = build_report("dlas", store, run_id="r1")
    table = _table(report, ELBOWS)
    rows = _rows(table, "model", "technique")
    assert rows[("digits-resnet", "fp16")]["top-1 %"] == Cell(None)
    assert rows[("digits-resnet", "weight pruning elbow")]["step"] == "no elbow recorded"
    # its own step still
    assert rows[("digits-resnet", "channel pruning elbow")]["step"] == "prune-ch-0.3"
    assert ("digits-resnet", "int8 uncalibrated") not in rows  # no step to show ...
    vgg = rows[("digits-vgg", "weight pruning elbow")]
    assert vgg["step"] == "none: the first step already drops" and vgg["top-1 %"] is None
    assert "elbow rule: first drop" in table.notes
    notes = " | ".join(table.notes)
    assert "fp16: top-1 not stored as a number" in notes
    assert "elbow-prune-ch: no elbow rule recorded" in notes
    assert "int8: no step" in notes  # ... said instead
    text = render(report, "table", width=250)
    assert "no elbow recorded" in text and "Traceback" not in text
    for fmt in ("markdown", "csv", "latex"):
        render(report, fmt)
    spec = build_figure("dlas-accuracy", FigureData(store, run_id="r1"))
    panel = spec.panels[0]
    assert [p.title for p in spec.panels] == ["digits-resnet", "digits-vgg"]
    assert {ln.label for ln in panel.lines} == {"channel pruning", "int8 calibrated"}
    # an elbow trial is its technique's elbow even where the rule's record is missing
    ringed = [
        (ln.label, x) for ln in panel.lines for x, r in zip(ln.xs, ln.ringed, strict=True) if r
    ]
    assert ringed == [("channel pruning", 1.4)]
    assert "digits-resnet weight pruning: no elbow recorded" in spec.notes
    assert "digits-resnet fp16: 1 step(s) without a top-1 left out" in spec.notes
    assert "digits-vgg weight pruning: no elbow (the first step already drops)" in spec.notes
    # its ladder is still drawn, nothing ringed on it
    (vgg_l1,) = spec.panels[1].lines
    assert len(vgg_l1.xs) == 7 and not any(vgg_l1.ringed)


def test_no_dlas_facts_no_figure(tmp_path: Path) -> None:
    results = [trial("digits-resnet", "identity", "none", 0.0)]
    store = _store(tmp_path / "r.duckdb", results)
    spec = build_figure("dlas-accuracy", FigureData(store))
    assert spec.panels == [] and "no DLAS facts" in spec.notes[0]
    assert [t.title for t in build_report("dlas", store).tables] == [
        "DLAS: achieved vs expected speed-up per optimisation"
    ]
