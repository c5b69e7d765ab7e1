"""Reports against hand-computed values on a small fixed dataset in a real DuckDB file.

The dataset (device ``dev1``, run ``r1``), throughputs in samples/s, each trial with 5 repetitions
spread symmetrically around the mean (so the mean is exact):

    model          compiler   b1   b2   b4   b8     noise
    resnet18       identity   10   18   32   56     ±1 %
    resnet18       openvino   20   40   88  176     ±1 %
    resnet50       identity    5    9   16   24     ±1 %
    resnet50       openvino    8   14   30   48     ±1 %
    convnext_tiny  identity        20               ±1 %
    convnext_tiny  openvino        30               ±1 %
    resnet101      identity        17.9             ±30 % (too noisy to call)
    resnet101      openvino        41               ±30 %
    conv64 b8      identity   d1 100  d2 90  d3 80  ±1 %
    conv64 b8      openvino   d1 150  d2 162 d3 168 (d1 ±60 %: not significant, others ±1 %)
    resnet18 openvino b8 fp16          264 (expected speed-up 2.0)
    resnet18 openvino b8 prune-l1-0.5  176 (expected 1.98)

A second run ``r2`` re-measures resnet18/identity/b1 at 12 later: the default (all runs) view uses
it, ``--run r1`` does not.
"""

from __future__ import annotations

import csv
import io
import re
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner
from ngb.core.base.errors import NgbError, UnknownNameError
from ngb.core.records.types import MeasureSettings, Stats, TrialResult, TrialSpec
from ngb.sweeps.cli import cli
from ngb.sweeps.report.catalog import build_report, list_reports, render
from ngb.sweeps.report.data import Cell, ReportData
from ngb.sweeps.store.database import Store

from tests.script_modules import load_script

# Zig-zag order: no serial correlation, so intervals are the plain Student-t ones (a ramp would
# read as a trend and be widened, ngb.core.statistics.autocorrelation).
NARROW = (-0.01, 0.01, -0.005, 0.005, 0.0)
WIDE = (-0.3, 0.3, -0.15, 0.15, 0.0)
VERY_WIDE = (-0.6, 0.6, -0.3, 0.3, 0.0)
FAST = MeasureSettings(repetitions=5)


def _result(
    model: str,
    compiler: str,
    batch: int,
    tput: float,
    *,
    noise: tuple[float, ...] = NARROW,
    width: int | None = None,
    depth: int = 1,
    optimisation: str = "none",
    cpu: float = 50.0,
    compile_s: float | None = None,
    export_s: float | None = None,
    expected: float | None = None,
    finished_at: float = 1_700_000_000.0,
) -> TrialResult:
    spec = TrialSpec(
        model=model, compiler=compiler, batch=batch, width=width, depth=depth,
        optimisation=optimisation, measure=FAST,
    )  # fmt: skip
    reps = [tput * (1 + n) for n in noise]
    extra = {}
    if expected is not None:
        extra["optimisation"] = {"name": optimisation, "expected_speedup": expected}
    return TrialResult(
        key=spec.key,
        spec=spec.to_dict(),
        started_at=finished_at - 10,
        finished_at=finished_at,
        throughput=Stats(n=5, mean=tput, std=statistics.stdev(reps)),
        repetitions=[{"iters": 10, "elapsed_s": 1.0, "throughput": v} for v in reps],
        cpu_percent_mean=cpu,
        compile_s=compile_s,
        export_s=export_s,
        extra=extra,
    )


def _dataset() -> list[TrialResult]:
    out = []
    table = {
        ("resnet18", "identity"): {1: 10, 2: 18, 4: 32, 8: 56},
        ("resnet18", "openvino"): {1: 20, 2: 40, 4: 88, 8: 176},
        ("resnet50", "identity"): {1: 5, 2: 9, 4: 16, 8: 24},
        ("resnet50", "openvino"): {1: 8, 2: 14, 4: 30, 8: 48},
    }
    cpu = {("resnet18", "identity", 8): 60.0, ("resnet50", "identity", 8): 40.0}
    for (model, compiler), per_batch in table.items():
        for batch, tput in per_batch.items():
            out.append(
                _result(model, compiler, batch, tput, cpu=cpu.get((model, compiler, batch), 50.0),
                        compile_s=3.0 if compiler == "openvino" else 0.1,
                        export_s=2.0 if compiler == "openvino" else None)
            )  # fmt: skip
    out += [
        _result("convnext_tiny", "identity", 2, 20),
        _result("convnext_tiny", "openvino", 2, 30),
        _result("resnet101", "identity", 2, 17.9, noise=WIDE),
        _result("resnet101", "openvino", 2, 41, noise=WIDE),
    ]
    for d, (ident, ov) in {1: (100, 150), 2: (90, 162), 3: (80, 168)}.items():
        out.append(_result("conv", "identity", 8, ident, width=64, depth=d))
        out.append(
            _result("conv", "openvino", 8, ov, width=64, depth=d,
                    noise=VERY_WIDE if d == 1 else NARROW)
        )  # fmt: skip
    out.append(_result("resnet18", "openvino", 8, 264, optimisation="fp16", expected=2.0))
    out.append(_result("resnet18", "openvino", 8, 176, optimisation="prune-l1-0.5", expected=1.98))
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    path = tmp_path_factory.mktemp("reports") / "results.duckdb"
    s = Store(path)
    s.create_run("r1", "fixture", "", ["dev1"], 28)
    assert s.ingest_results("r1", "dev1", _dataset()) == 28
    s.create_run("r2", "fixture", "", ["dev1"], 1)
    s.ingest_results("r2", "dev1", [_result("resnet18", "identity", 1, 12, finished_at=1.8e9)])
    s.record_probe(
        "dev1",
        {
            "hostname": "box", "cpu_model": "Test CPU", "cores_logical": 2, "ram_mb": 24576,
            "os": "Debian 13", "python": "3.11.2",
            "versions": {"torch": "2.15.0", "openvino": "2026.4.1"},
            "compilers": {"identity": {"available": True}, "tensorrt": {"available": False}},
        },
    )  # fmt: skip
    return s


def _rows(report, table: int = 0) -> list[list]:
    return report.tables[table].rows


def _value(v):
    return v.value if isinstance(v, Cell) else v


def _row_map(report, *key_cols: str, table: int = 0) -> dict[tuple, dict[str, object]]:
    t = report.tables[table]
    idx = [t.columns.index(c) for c in key_cols]
    return {tuple(r[i] for i in idx): dict(zip(t.columns, r, strict=True)) for r in t.rows}


def test_list_reports_names() -> None:
    names = [n for n, _ in list_reports()]
    for name in ("testbed", "compile-times", "families", "depth", "bsr", "ase", "dlas",
                 "reversals"):  # fmt: skip
        assert name in names


def test_bsr_against_hand_computed(store: Store) -> None:
    rep = build_report("bsr", store, run_id="r1")
    rows = _row_map(rep, "model", "compiler", "batch")
    ov8 = rows[("resnet18", "openvino", 8)]
    assert _value(ov8["rtr"]) == pytest.approx(176 / 20)  # 8.8
    assert _value(ov8["ase"]) == pytest.approx(1.1)
    assert _value(ov8["bsr"]) == pytest.approx(1.1 / 0.7)  # identity ASE(8) = 56 / 80
    assert _value(ov8["speedup"]) == pytest.approx(176 / 56)
    r50 = rows[("resnet50", "openvino", 4)]
    assert _value(r50["ase"]) == pytest.approx(30 / (4 * 8))
    assert _value(r50["bsr"]) == pytest.approx((30 / 32) / (16 / 20))
    assert _value(rows[("resnet18", "identity", 8)]["bsr"]) == pytest.approx(1.0)
    # Intervals: ±1 % repetitions give a narrow, significant speed-up; identity against itself
    # has a BSR of exactly 1 by definition: no interval, no verdict (it is not a measurement).
    speed = ov8["speedup"]
    assert speed.low is not None and speed.high is not None
    assert 0 < speed.high - speed.low < 0.1 * speed.value and speed.note == ""
    own = rows[("resnet18", "identity", 8)]
    assert own["bsr"].value == 1.0 and own["bsr"].interval is None and own["bsr"].note == ""
    assert own["speedup"].value == 1.0 and own["speedup"].interval is None
    assert own["speedup"].note == "baseline"
    tput = ov8["throughput"]
    assert tput.value == pytest.approx(176) and tput.interval is not None
    assert 0 < tput.interval[0] < 176 < tput.interval[1]
    assert ov8["verdict"] == "-"  # the fixture's results predate verdicts
    # convnext/resnet101 have no batch 1: left out with a note, not a crash
    assert not any(k[0] == "convnext_tiny" for k in rows)
    assert any("convnext_tiny" in n and "batch-1" in n for n in rep.notes)


def test_newest_result_per_point_unless_run_given(store: Store) -> None:
    newest = _row_map(build_report("bsr", store), "model", "compiler", "batch")
    only_r1 = _row_map(build_report("bsr", store, run_id="r1"), "model", "compiler", "batch")
    assert _value(newest[("resnet18", "identity", 1)]["throughput"]) == pytest.approx(12)
    assert _value(only_r1[("resnet18", "identity", 1)]["throughput"]) == pytest.approx(10)
    assert _value(newest[("resnet18", "identity", 8)]["rtr"]) == pytest.approx(56 / 12)


def test_ase_grid(store: Store) -> None:
    rep = build_report("ase", store, run_id="r1")
    t = rep.tables[0]
    assert t.columns[-4:] == ["b1", "b2", "b4", "b8"]
    rows = _row_map(rep, "compiler", "model")
    assert _value(rows[("openvino", "resnet18")]["b2"]) == pytest.approx(40 / (2 * 20))
    assert _value(rows[("identity", "resnet50")]["b8"]) == pytest.approx(24 / 40)
    b8 = rows[("identity", "resnet50")]["b8"]
    assert b8.interval is not None and 0 < b8.interval[0] < b8.value < b8.interval[1]


def test_families_table_vi(store: Store) -> None:
    rep = build_report("families", store, run_id="r1")
    rows = _row_map(rep, "family", "compiler")
    ident = rows[("resnet", "identity")]
    # batch 2-4 cells: resnet18 b2/b4, resnet50 b2/b4, resnet101 b2
    small = [18, 32, 9, 16, 17.9]
    assert ident["T b2-4"].value == pytest.approx(sum(small) / 5)  # 18.58
    assert ident["T b2-4"].std == pytest.approx(statistics.stdev(small))
    assert ident["T b8-16"].value == pytest.approx(40.0)  # (56 + 24) / 2
    assert ident["T b8-16"].std == pytest.approx(22.627417, rel=1e-6)  # sqrt(2) * 16
    assert ident["CPU% b8-16"].value == pytest.approx(50.0)
    assert ident["CPU% b8-16"].std == pytest.approx(14.142136, rel=1e-6)
    conv = rows[("convnext", "openvino")]
    assert conv["T b2-4"].value == pytest.approx(30) and conv["T b2-4"].std is None
    assert conv["T b8-16"].value is None
    assert ("block", "identity") not in rows  # blocks are not a family here


def test_depth_slope_retention_and_significance(store: Store) -> None:
    rep = build_report("depth", store, run_id="r1")
    rows = _row_map(rep, "block", "width", "batch", "compiler")
    ov = rows[("conv", 64, 8, "openvino")]
    assert ov["d1"].value == pytest.approx(1.5)
    assert ov["d2"].value == pytest.approx(1.8)
    assert ov["d3"].value == pytest.approx(2.1)
    assert ov["slope"].value == pytest.approx(0.3)
    assert ov["retention"].value == pytest.approx(2.1 / 1.5)

    # Depth 1 is noisy (±60 % over 5 repetitions): its t interval alone is ±59 %, so the slope's
    # interval (0.3 ± 0.6, delta method with Satterthwaite's df) includes 0 -- a plain
    # percentile bootstrap once said ±0.27 and "significant".
    def width(c: Cell) -> float:
        assert c.interval is not None
        return c.interval[1] - c.interval[0]

    assert 0.6 < width(ov["slope"]) < 1.6 and ov["slope"].note == "n.s."
    assert width(ov["retention"]) > width(ov["d2"])  # retention inherits depth 1's noise
    assert ov["d1"].note == "n.s."  # ±60 % noise on openvino depth 1
    assert ov["d2"].note == "" and ov["d3"].note == ""


def test_depth_leaves_out_series_measured_at_one_depth(tmp_path) -> None:
    """A block measured at one depth (a batch-scaling or DLAS trial) says nothing about depth:
    once some series has two depths, the one-depth ones are counted in a note, not listed."""
    store = Store(tmp_path / "d.duckdb")
    store.create_run("d1", "fixture", "", ["dev1"], 8)
    rows = [_result("conv", c, 8, t, width=64, depth=d)
            for d, (ti, to) in {1: (100, 150), 2: (90, 162)}.items()
            for c, t in (("identity", ti), ("openvino", to))]  # fmt: skip
    rows += [_result("conv", "identity", 1, 40, width=64, depth=1),  # batch 1: depth 1 only
             _result("conv", "openvino", 1, 60, width=64, depth=1),
             _result("conv", "identity", 8, 85, width=64, depth=4),  # identity alone at depth 4
             _result("conv", "onnxruntime", 8, 95, width=64, depth=2)]  # fmt: skip
    assert store.ingest_results("d1", "dev1", rows) == 8
    rep = build_report("depth", store)
    table = rep.tables[0]
    assert [c for c in table.columns if c.startswith("d")] == ["device", "d1", "d2"]
    listed = _row_map(rep, "batch", "compiler")
    assert set(listed) == {(8, "openvino")}
    assert listed[(8, "openvino")]["slope"].value == pytest.approx(162 / 90 - 1.5)
    assert any("2 compiler/batch series measured at one depth only" in n for n in table.notes)
    # With no series deeper than one depth, the table keeps them all (speed-ups at that depth).
    shallow = Store(tmp_path / "s.duckdb")
    shallow.create_run("s1", "fixture", "", ["dev1"], 2)
    shallow.ingest_results("s1", "dev1", rows[4:6])
    flat = build_report("depth", shallow)
    assert len(flat.tables[0].rows) == 1 and not any("left out" in n for n in flat.tables[0].notes)


def test_reversals_found_with_significance(store: Store) -> None:
    rep = build_report("reversals", store, run_id="r1")
    rows = _row_map(rep, "batch", "compiler", "A (faster eager)", "B")
    assert set(rows) == {
        (2, "openvino", "convnext_tiny", "resnet18"),
        (2, "openvino", "resnet18", "resnet101"),
        (2, "openvino", "convnext_tiny", "resnet101"),
        # same block kind only: deeper conv stacks overtake shallower ones under openvino
        (8, "openvino", "conv64x1", "conv64x2"),
        (8, "openvino", "conv64x1", "conv64x3"),
        (8, "openvino", "conv64x2", "conv64x3"),
    }
    flip = rows[(2, "openvino", "convnext_tiny", "resnet18")]
    assert (flip["T_id A"], flip["T_id B"], flip["T_c A"], flip["T_c B"]) == (20, 18, 30, 40)
    assert flip["flip"] == "significant"
    assert rows[(2, "openvino", "resnet18", "resnet101")]["flip"] == "n.s."
    assert rows[(2, "openvino", "convnext_tiny", "resnet101")]["flip"] == "n.s."
    assert rows[(8, "openvino", "conv64x1", "conv64x2")]["flip"] == "n.s."  # d1: ±60 %
    assert rows[(8, "openvino", "conv64x2", "conv64x3")]["flip"] == "significant"


def test_dlas_percent_of_expected(store: Store) -> None:
    rep = build_report("dlas", store, run_id="r1")
    rows = _row_map(rep, "model", "compiler", "batch", "optimisation")
    fp16 = rows[("resnet18", "openvino", 8, "fp16")]
    assert fp16["T none"] == pytest.approx(176)
    assert fp16["achieved"].value == pytest.approx(1.5)
    assert fp16["achieved"].note == ""
    assert fp16["% of expected"] == pytest.approx(75.0)
    pruned = rows[("resnet18", "openvino", 8, "prune-l1-0.5")]
    assert pruned["achieved"].value == pytest.approx(1.0)
    assert pruned["achieved"].note == "n.s."  # same samples as the baseline
    assert pruned["% of expected"] == pytest.approx(100 / 1.98)


def test_compile_times_table_iii(store: Store) -> None:
    rep = build_report("compile-times", store, run_id="r1")
    t = rep.tables[0]
    assert t.columns[3:] == ["identity", "openvino"]  # registry order
    rows = _row_map(rep, "model", "batch")
    assert rows[("resnet18", 1)]["openvino"] == pytest.approx(5.0)  # export 2 + compile 3
    assert rows[("resnet18", 1)]["identity"] == pytest.approx(0.1)
    assert rows[("convnext_tiny", 2)]["openvino"] is None  # no compile time recorded


def test_testbed_from_probes(store: Store) -> None:
    rep = build_report("testbed", store)
    hw = _row_map(rep, "device")["dev1",]
    assert (hw["hostname"], hw["cpu"], hw["cores"]) == ("box", "Test CPU", 2)
    assert hw["ram_gb"] == pytest.approx(24.0)
    sw = _row_map(rep, "device", table=1)["dev1",]
    assert sw["torch"] == "2.15.0" and sw["tvm"] == "-"
    assert sw["compilers"] == "identity"


def test_render_formats(store: Store) -> None:
    rep = build_report("dlas", store, run_id="r1")
    text = render(rep, "table")
    assert "DLAS" in text and "75.000" in text and "n.s." in text
    md = render(rep, "markdown")
    assert "| device | model |" in md and "|---|" in md
    rows = list(csv.reader(io.StringIO(render(rep, "csv"))))
    header = rows[0]
    assert "achieved note" in header and "achieved" in header
    fp16 = next(r for r in rows[1:] if r[header.index("optimisation")] == "fp16")
    assert float(fp16[header.index("% of expected")]) == pytest.approx(75.0)
    fam = render(build_report("families", store, run_id="r1"), "table")
    assert "18.6 ± 8.4" in fam  # std 8.39: two significant digits, the mean to the same place


def test_unknown_names_are_one_line_errors(store: Store) -> None:
    with pytest.raises(UnknownNameError, match="unknown report 'bsrr'"):
        build_report("bsrr", store)
    with pytest.raises(UnknownNameError, match="unknown run 'r9'"):
        build_report("bsr", store, run_id="r9")
    with pytest.raises(UnknownNameError, match="unknown device"):
        build_report("bsr", store, device="nowhere")
    with pytest.raises(NgbError, match="no results database"):
        build_report("bsr", Store(store.path.parent / "missing.duckdb"))


def test_cli_report(store: Store) -> None:
    runner = CliRunner()
    listing = runner.invoke(cli, ["report"])
    assert listing.exit_code == 0 and "reversals" in listing.output
    out = runner.invoke(cli, ["report", "bsr", "--db", str(store.path), "--run", "r1",
                              "--format", "csv"])  # fmt: skip
    assert out.exit_code == 0, out.output
    rows = list(csv.DictReader(io.StringIO(out.output)))
    ov8 = next(r for r in rows if (r["model"], r["compiler"], r["batch"]) ==
               ("resnet18", "openvino", "8"))  # fmt: skip
    # the bounds in their own columns, named for what they hold; the value rounded to what the
    # interval supports, as every surface prints it
    low, high = float(ov8["bsr 95% lo"]), float(ov8["bsr 95% hi"])
    assert 0 < low < float(ov8["bsr"]) < high
    assert abs(float(ov8["bsr"]) - 1.1 / 0.7) <= (high - low) / 20
    bad = runner.invoke(cli, ["report", "nope", "--db", str(store.path)])
    assert bad.exit_code == 1
    assert "unknown report 'nope'" in bad.output and "Traceback" not in bad.output


# ---------------------------------------------------------------- presets

PRESET_TRIALS = {
    # 15 models x 5 compilers x 5 batches + tvm-ms 75 + (identity, tensorrt) on cuda 150
    "paper-families": 375 + 75 + 150,
    # (conv 2 widths + mha 2 widths) x 6 depths x 2 batches x (5 + tvm-ms + 2 on cuda)
    "paper-blocks-depth": 4 * 6 * 2 * 8,
    # 8 block widths x 6 batches x (5 + tvm-ms + 2 on cuda)
    "paper-batch-width": 8 * 6 * 8,
    # 5 models x 3 batches x (6 cpu compilers + tensorrt)
    "paper-compile-times": 5 * 3 * 7,
    # (3 models + 2 conv widths) x 6 optimisations x 4 compilers x 2 batches
    "dlas": 5 * 6 * 4 * 2,
}


@pytest.mark.parametrize("name", sorted(PRESET_TRIALS))
def test_paper_presets_expand(name: str) -> None:
    from ngb.sweeps.spec.sweep import load_sweep

    sweep = load_sweep(name)
    trials = sweep.trials()
    assert len(trials) == PRESET_TRIALS[name]
    tuned = [t for t in trials if t.compiler == "tvm-ms"]
    if name.startswith("paper-"):
        assert all(t.measure.repetitions == 100 for t in trials if name != "paper-compile-times")
        assert tuned and all(t.compiler_options["max_trials_global"] == 1500 for t in tuned)
        assert all(t.compiler_options["early_stop"] == 150 for t in tuned)
    assert all(t.device == "cuda" for t in trials if t.compiler == "tensorrt")


def test_cpu_repro_preset_is_cpu_only_and_small() -> None:
    from ngb.sweeps.spec.sweep import load_sweep

    trials = load_sweep("cpu-repro").trials()
    assert {t.device for t in trials} == {"cpu"}
    assert "tensorrt" not in {t.compiler for t in trials}
    assert len(trials) == 122
    assert {t.optimisation for t in trials} == {"none", "fp16", "int8", "prune-l1-0.5",
                                                "prune-ch-0.3"}  # fmt: skip
    tuned = [t for t in trials if t.compiler == "tvm-ms"]
    assert len(tuned) == 1 and tuned[0].compiler_options["max_trials_global"] == 64
    # It stops on confidence, within a bound that keeps the sweep's wall time in check.
    assert all(t.measure.repetitions is None and t.measure.max_measure_s <= 20 for t in trials)


def test_preset_models_exist_in_timm() -> None:
    pytest.importorskip("timm")
    from ngb.sweeps.spec.sweep import load_sweep

    for name in (*PRESET_TRIALS, "cpu-repro"):
        load_sweep(name).check_models()


def test_sweep_rejects_unknown_optimisation() -> None:
    from ngb.core.base.errors import ConfigError
    from ngb.sweeps.spec.sweep import loads_sweep

    text = (
        '[[matrix]]\nmodels = ["conv"]\nwidths = [8]\ncompilers = ["identity"]\n'
        'batches = [1]\noptimisations = ["fp16", "prune-x"]\n'
    )
    with pytest.raises(ConfigError, match=r"matrix\[0\].optimisations: unknown optimisation"):
        loads_sweep(text)


def test_verdicts_reach_the_reports(tmp_path) -> None:
    store = Store(tmp_path / "v.duckdb")
    store.create_run("v1", "fixture", "", ["dev1"], 2)
    valid = _result("resnet18", "identity", 1, 10.0)
    valid.verdict, valid.verdict_reason, valid.ci_half_width = "VALID", "95% CI ±1%", 0.1
    bad = _result("resnet18", "openvino", 1, 20.0, noise=WIDE)
    bad.verdict, bad.verdict_reason, bad.disturbed = "INVALID", "disturbed: a hog", True
    assert store.ingest_results("v1", "dev1", [valid, bad]) == 2
    rep = build_report("bsr", store)
    rows = _row_map(rep, "model", "compiler", "batch")
    assert rows[("resnet18", "identity", 1)]["verdict"] == "VALID"
    assert rows[("resnet18", "openvino", 1)]["verdict"] == "INVALID (disturbed)"
    assert any(n.startswith("1 of 2 trials are INVALID (1 disturbed") for n in rep.notes)
    text = render(rep, "markdown")
    assert re.search(r"\d \[\d", text) and "INVALID (disturbed)" in text


def _precision_store(tmp_path) -> Store:
    """resnet18 at b1/b8: identity in fp32, openvino in bf16 at b8 only (fp32 at b1); resnet50:
    identity without a recorded precision, openvino in bf16."""
    store = Store(tmp_path / "p.duckdb")
    store.create_run("p1", "fixture", "", ["dev1"], 6)
    rows = []
    for model, compiler, batch, tput, precision in (
        ("resnet18", "identity", 1, 10.0, "fp32"),
        ("resnet18", "identity", 8, 56.0, "fp32"),
        ("resnet18", "openvino", 1, 20.0, "fp32"),
        ("resnet18", "openvino", 8, 176.0, "bf16"),
        ("resnet50", "identity", 1, 5.0, None),
        ("resnet50", "openvino", 1, 9.0, "bf16"),
    ):
        r = _result(model, compiler, batch, tput)
        r.precision = precision
        rows.append(r)
    assert store.ingest_results("p1", "dev1", rows) == 6
    return store


def test_speedups_between_precisions_are_marked(tmp_path) -> None:
    store = _precision_store(tmp_path)
    rep = build_report("bsr", store)
    rows = _row_map(rep, "model", "compiler", "batch")
    bf16, fp32 = rows[("resnet18", "openvino", 8)], rows[("resnet18", "openvino", 1)]
    assert bf16["precision"] == "bf16" and fp32["precision"] == "fp32"
    # b8: bf16 openvino against fp32 eager -- the ratio carries the mark, the note names both
    assert "≠prec" in bf16["speedup"].note and "≠prec" in bf16["bsr"].note
    assert "≠prec" not in fp32["speedup"].note  # same precision at b1: no mark
    # an unrecorded precision is no known difference: no mark (as in the console)
    unknown = rows[("resnet50", "openvino", 1)]
    assert unknown["precision"] == "bf16" and "≠prec" not in unknown["speedup"].note
    notes = " ".join(rep.tables[0].notes)
    assert "openvino ran bf16, identity fp32" in notes and "identity ?" not in notes
    assert "≠prec" in render(rep, "markdown")


def test_same_precision_gives_no_precision_note(store: Store) -> None:
    rep = build_report("bsr", store, run_id="r1")  # the fixture records no precision at all
    assert not any("≠prec" in n for n in rep.tables[0].notes)
    assert all(row[3] == "?" for row in rep.tables[0].rows)  # unrecorded, said as such


def test_agreement_benchmark_compares_two_runs(tmp_path) -> None:
    """benchmarks/agreement.py: share within ±5 %, interval overlap and slope overlap."""
    agreement = load_script("benchmarks/agreement.py")

    def run_db(name: str, scale: dict[tuple[str, int], float]) -> Path:
        store = Store(tmp_path / f"{name}.duckdb")
        store.create_run(name, "fixture", "", ["dev1"], 8)
        rows = []
        for d, (ident, ov) in {1: (100, 150), 2: (90, 162), 3: (80, 168)}.items():
            rows.append(_result("conv", "identity", 8, ident, width=64, depth=d))
            rows.append(_result("conv", "openvino", 8, ov * scale.get(("ov", d), 1.0),
                                width=64, depth=d))  # fmt: skip
        rows.append(_result("resnet18", "identity", 1, 10.0 * scale.get(("r18", 1), 1.0)))
        for row in rows:  # VALID at +-2 %: the pairs the agreement goal is about
            row.verdict, row.ci_half_width = "VALID", 0.02 * row.throughput.mean
        store.ingest_results(name, "dev1", rows)
        return store.path

    same = agreement.Run(run_db("a", {}), None), agreement.Run(run_db("b", {}), None)
    assert agreement.compare(*same) is True
    # openvino's deep stacks 20 % slower in the second run: 2 of 7 trials off, slope flips side
    off = agreement.Run(run_db("c", {("ov", 2): 0.8, ("ov", 3): 0.8}), None)
    assert agreement.compare(same[0], off) is False


def test_the_baseline_label_names_the_allocator_it_ran_under(tmp_path) -> None:
    """Issue 19: eager under glibc's defaults and under 'retain' are different baselines."""
    store = Store(tmp_path / "alloc.duckdb")
    store.create_run("r", "fixture", "", ["dev1"], 4)
    rows = [_result("conv", "identity", 8, 100.0, width=64), _result("conv", "openvino", 8, 150.0,
                                                                      width=64)]  # fmt: skip
    rows[0].extra["allocator"] = "glibc retain (M_MMAP_MAX=0, M_TRIM_THRESHOLD=2^31-1)"
    rows[1].extra["allocator"] = "system"
    store.ingest_results("r", "dev1", rows)
    assert ReportData(store, run_id="r").baseline_label == "identity (allocator: retain)"
    text = render(build_report("bsr", store, run_id="r"), "markdown")
    assert "baseline: identity (allocator: retain)" in text


def test_two_precisions_of_one_point_are_two_points(tmp_path) -> None:
    """openvino b1 at fp32 and at bf16 (two runs): neither hides the other in the tables, the
    energy report or ``ngb advise`` (the point key once had no precision: the bf16 row
    vanished)."""
    from ngb.sweeps.report import advise

    store = Store(tmp_path / "two.duckdb")
    for run, precision, tput, when in (("p1", "fp32", 20.0, 1.0), ("p2", "bf16", 31.0, 2.0)):
        store.create_run(run, "fixture", "", ["dev1"], 2)
        rows = []
        for compiler, t in (("identity", 10.0), ("openvino", tput)):
            r = _result("resnet18", compiler, 1, t, finished_at=1_700_000_000.0 + when)
            r.precision = "fp32" if compiler == "identity" else precision
            rows.append(r)
        assert store.ingest_results(run, "dev1", rows) == 2
    energy = build_report("energy", store).tables[0]
    ran = {(r[2], r[5]) for r in energy.rows}
    assert ("openvino", "fp32") in ran and ("openvino", "bf16") in ran
    bsr = _row_map(build_report("bsr", store), "model", "compiler", "batch")
    assert ("resnet18", "openvino bf16", 1) in bsr and ("resnet18", "openvino fp32", 1) in bsr
    assert bsr[("resnet18", "openvino bf16", 1)]["speedup"].value == pytest.approx(3.1)
    answer = advise.advise(ReportData(store), ["resnet18"], ["dev1"], advise.Constraints())[0]
    assert answer.choice is not None and answer.choice.label == "openvino bf16 b1"
    assert "changes precision: runs bf16" in "\n".join(answer.lines)
