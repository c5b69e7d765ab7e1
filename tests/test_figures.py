"""Figures, LaTeX tables and the HTML run report, from a small fixed dataset in a real DuckDB file.

The dataset (device ``dev1``, run ``r1``; throughputs in samples/s, 5 repetitions spread
symmetrically by ±1 % around the mean, so means are exact and every difference is significant):

    model        compiler   b1   b4     CPU %
    resnet18     identity   10   32     90
    resnet18     openvino   20   88     60
    deit3_small  identity   12   30     90      <- faster than resnet18 at b1 under eager ...
    deit3_small  openvino   18   70     60      <- ... slower under OpenVINO: one ranking reversal
    conv64 d1    identity  100  300     90
    conv64 d2    identity   60  170     90
    conv64 d1    openvino  150  600     60
    conv64 d2    openvino  120  400     60
    resnet18     tvm        (failed: "TVM build exploded")

and serving runs of resnet18 b1 under identity and openvino at 20, 40, 70 and 95 QPS, simulated
M/M/1 servers held to p99 <= 100 ms (``tests/serving_store.py``; identity's run at 95 QPS is
INVALID: its p99 has no upper bound), and digits-resnet b1 under identity at the DLAS
optimisations with their stored accuracy facts (``tests/dlas_rows.py``; DLAS Fig. 3).

Drawing is headless (matplotlib's Agg/SVG/PDF canvases; no display is ever opened).
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner
from ngb.core.base.errors import ConfigError, NgbError, UnknownNameError
from ngb.core.records.types import MeasureSettings, Stats, TrialResult, TrialSpec
from ngb.core.statistics.student_t import t_two_sided
from ngb.sweeps.cli import cli
from ngb.sweeps.figures.catalog import FIGURES, build_figure, caption, save_figure, write_figures
from ngb.sweeps.figures.data import FigureData, derived_bar
from ngb.sweeps.figures.spec import HeatPanel, LinePanel
from ngb.sweeps.report.catalog import build_report, render
from ngb.sweeps.report.latex import escape, inline
from ngb.sweeps.report.numbers import printed_bounds
from ngb.sweeps.report.paper import UNCERTAINTY_NOTE
from ngb.sweeps.store.database import Store
from ngb.sweeps.store.serving import save_serving

from tests.cli_helpers import scaled
from tests.dlas_rows import trial as dlas_trial
from tests.serving_store import LIMIT_MS, RATES, add_serving, unverified_peak

NOISE = (
    -0.01,
    0.01,
    -0.005,
    0.005,
    0.0,
)  # zig-zag: no serial correlation (ngb.core.statistics.autocorrelation)
MEASURE = MeasureSettings(repetitions=5, min_iters=5, min_duration_s=0.3)
TABLE = {
    ("resnet18", None, 1, "identity"): {1: 10, 4: 32},
    ("resnet18", None, 1, "openvino"): {1: 20, 4: 88},
    ("deit3_small_patch16_224", None, 1, "identity"): {1: 12, 4: 30},
    ("deit3_small_patch16_224", None, 1, "openvino"): {1: 18, 4: 70},
    ("conv", 64, 1, "identity"): {1: 100, 4: 300},
    ("conv", 64, 2, "identity"): {1: 60, 4: 170},
    ("conv", 64, 1, "openvino"): {1: 150, 4: 600},
    ("conv", 64, 2, "openvino"): {1: 120, 4: 400},
}


def _result(model: str, width: int | None, depth: int, compiler: str, batch: int, tput: float):
    spec = TrialSpec(
        model=model, compiler=compiler, batch=batch, width=width, depth=depth, measure=MEASURE
    )
    reps = [tput * (1 + n) for n in NOISE]
    return TrialResult(
        key=spec.key,
        spec=spec.to_dict(),
        started_at=1_700_000_000.0,
        finished_at=1_700_000_010.0,
        throughput=Stats(n=5, mean=tput, std=statistics.stdev(reps)),
        repetitions=[{"iters": 10, "elapsed_s": 1.0, "throughput": v} for v in reps],
        cpu_percent_mean=90.0 if compiler == "identity" else 60.0,
        compile_s=0.5,
        versions={"ngb": "0.1.0"},
        # a meter read on dev1 (ngb.core.trial.energy): 40 W while running
        energy_j_per_sample=40.0 / tput,
        energy_j_per_sample_ci=0.4 / tput,
        power_w_mean=40.0,
        energy_source="rapl",
    )


def _build_store(path: Path) -> Store:
    store = Store(path)
    results = [
        _result(model, width, depth, compiler, batch, tput)
        for (model, width, depth, compiler), per_batch in TABLE.items()
        for batch, tput in per_batch.items()
    ]
    failed_spec = TrialSpec(model="resnet18", compiler="tvm", batch=1, measure=MEASURE)
    results.append(
        TrialResult(
            key=failed_spec.key, spec=failed_spec.to_dict(), status="failed",
            error="RuntimeError: TVM build exploded", error_kind="crash",
        )
    )  # fmt: skip
    # a DLAS zoo model's optimised trials, with their facts (DLAS Fig. 3); no plain trial, so
    # the paper's figures keep their panels
    results += [
        dlas_trial("digits-resnet", "identity", o, 0.0, batch=1)
        for o in ("elbow-prune-l1", "elbow-prune-ch", "fp16", "int8", "int8-cal")
    ]
    store.create_run("r1", "fixture", "", ["dev1"], len(results))
    assert store.ingest_results("r1", "dev1", results) == len(results)
    add_serving(store, "r1", "dev1")
    store.record_probe(
        "dev1",
        {
            "hostname": "box", "cpu_model": "Test CPU", "cores_logical": 2, "ram_mb": 24576,
            "os": "Debian 12", "python": "3.11.7",
            "versions": {"torch": "2.15.0", "openvino": "2026.4.1"},
            "compilers": {"identity": {"available": True}, "openvino": {"available": True}},
        },
    )  # fmt: skip
    return store


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return _build_store(tmp_path_factory.mktemp("figures") / "results.duckdb")


@pytest.fixture(scope="module")
def written(store: Store, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("figures-out")
    results = write_figures(FigureData(store, run_id="r1"), out)
    assert [r.name for r in results] == list(FIGURES)
    assert all(not r.skipped for r in results), [(r.name, r.skipped) for r in results]
    return out


# ---------------------------------------------------------------- files


@pytest.mark.parametrize("name", list(FIGURES))
def test_every_figure_is_a_valid_png_svg_pdf_with_caption(written: Path, name: str) -> None:
    from PIL import Image

    png = (written / f"{name}.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    with Image.open(io.BytesIO(png)) as image:
        image.verify()
    with Image.open(io.BytesIO(png)) as image:
        assert image.width > 300 and image.height > 200
        lo, hi = image.convert("L").getextrema()
        assert hi - lo > 100  # something was drawn, not a blank canvas

    root = ET.fromstring((written / f"{name}.svg").read_bytes())
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert len(list(root.iter())) > 50

    pdf = (written / f"{name}.pdf").read_bytes()
    assert pdf.startswith(b"%PDF-") and pdf.rstrip().endswith(b"%%EOF")

    caption = (written / f"{name}.caption.txt").read_text()
    assert caption.startswith("DLAS Fig. 3: " if name == "dlas-accuracy" else "Fig. ")
    assert "Device: dev1" in caption
    if name == "dlas-accuracy":  # eager models on a labelled set, not timed trials
        assert "Labelled set: digits-test (540 samples)" in caption
        assert "Error bars: 95% Wilson interval of each top-1" in caption
        assert "Repetitions" not in caption and "Models: 1. Source: run r1." in caption
        return
    if name == "fig14-serving-latency":  # drawn from serving runs, not trials
        assert "Precision: fp32" in caption and "Repetitions" not in caption
        assert "Each point: one server-scenario run at its offered rate" in caption
        assert "Error bars: 95 % interval of the percentile over 10 stretches" in caption
        assert "Runs: 8 (1 INVALID, drawn hollow)" in caption
        assert re.search(r"Source: run r1\. Made by ngb \S+\.$", caption.strip())
        return
    assert "Precision: not recorded by this store" in caption
    assert "Repetitions: 5 per point (fixed count, each repetition >= 5 calls and >= 0.3 s)" in (
        caption
    )
    if name in ("fig10-ase-heatmap", "fig11-block-bsr"):  # heatmaps print intervals, no bars
        assert "Cells: value ± 95 % interval" in caption and "Error bars" not in caption
    elif name == "fig13-energy":
        assert "Error bars: 95% interval of the energy" in caption
    else:
        assert "Error bars: 95% Student-t CI" in caption
    assert re.search(r"Made by ngb \S+ \(measured with 0\.1\.0\)", caption)


def test_same_data_gives_the_same_svg_and_pdf(store: Store, written: Path, tmp_path: Path) -> None:
    write_figures(FigureData(store, run_id="r1"), tmp_path, ["fig06"], ["svg", "pdf"])
    for ext in ("svg", "pdf"):
        again = (tmp_path / f"fig06-speedup-batch.{ext}").read_bytes()
        assert again == (written / f"fig06-speedup-batch.{ext}").read_bytes()


# ---------------------------------------------------------------- numbers


def _line(panel: LinePanel, label: str):
    return next(line for line in panel.lines if line.label == label)


def _panel(spec, title: str):
    return next(p for p in spec.panels if p.title.startswith(title))


def test_speedup_values_and_error_bars(store: Store) -> None:
    data = FigureData(store, run_id="r1")
    spec = build_figure("fig06", data)
    ov = _line(_panel(spec, "resnet18"), "openvino")
    assert ov.xs == [1, 4]
    assert ov.ys == pytest.approx([2.0, 88 / 32])
    # both throughputs have the same relative half-width h with the same df: the log-scale delta
    # method over 2 (n - 1) df gives R exp(-+t sqrt(2) h / t_{n-1}); the bar runs between those
    # bounds as printed (rounded outwards), asymmetric around R
    resnet_id = next(t for t in data.trials() if t["label"] == "resnet18" and t["batch"] == 1
                     and t["compiler"] == "identity")  # fmt: skip
    h = resnet_id["ci_half"] / resnet_id["throughput_mean"]
    df = resnet_id["repetitions"] - 1
    delta = math.sqrt(2) * h * t_two_sided(0.95, 2 * df) / t_two_sided(0.95, df)
    printed = printed_bounds(2.0, 2.0 * math.exp(-delta), 2.0 * math.exp(delta))
    assert printed is not None and ov.errs[0] == pytest.approx(
        (2.0 - printed.low, printed.high - 2.0)
    )
    assert ov.errs[0][0] < ov.errs[0][1]  # the log interval reaches further up than down
    assert ov.weak == [False, False]  # ±1 % noise: every difference is significant


def test_derived_bars_never_cross_zero_and_need_an_interval() -> None:
    from ngb.core.statistics.intervals import Estimate
    from ngb.sweeps.report.derived import Derived

    bar = derived_bar(Derived(Estimate(0.25, 0.0012, 52.0, 4.0)))  # a huge log-scale interval
    assert bar is not None
    below, above = bar
    assert 0 < below < 0.25 and above == pytest.approx(52.0 - 0.25)  # never down to zero
    assert derived_bar(Derived(Estimate(2.0))) is None  # unknown interval: no bar
    assert derived_bar(Derived(Estimate.exactly(1.0))) == (0.0, 0.0)


def test_family_ase_bsr_depth_and_cpu(store: Store) -> None:
    data = FigureData(store, run_id="r1")
    ase = _panel(build_figure("fig08", data), "resnet")
    assert _line(ase, "identity").ys == pytest.approx([1.0, 32 / 40])
    bsr = _panel(build_figure("fig09", data), "resnet")
    assert _line(bsr, "openvino").ys == pytest.approx([1.0, (88 / 80) / (32 / 40)])
    assert _line(bsr, "openvino").errs[0] == (0.0, 0.0)  # a trial divided by itself
    depth = build_figure("fig07", data)
    assert [p.title for p in depth.panels] == ["conv64 b1", "conv64 b4"]
    assert _line(depth.panels[1], "openvino").ys == pytest.approx([2.0, 400 / 170])
    cpu = build_figure("fig12", data)
    usage, saved = cpu.panels
    assert usage.groups == ["block", "deit", "resnet"]
    assert next(s for s in saved.series if s.label == "openvino").values == pytest.approx(
        [30.0, 30.0, 30.0]
    )


def test_depth_figure_draws_the_series_the_depth_table_prints(store: Store) -> None:
    """Fig. 7 and Tables VII/VIII group the block trials in one place
    (``report.paper.depth_series``): the same series, the same speed-ups, in the same order."""
    table = build_report("depth", store, run_id="r1").tables[0]
    depths = [int(c[1:]) for c in table.columns if re.fullmatch(r"d\d+", c)]
    printed = [
        (f"{r[1]}{r[2]} b{r[3]}", r[4], depths, [c.value for c in r[5 : 5 + len(depths)]])
        for r in table.rows
    ]
    figure = build_figure("fig07", FigureData(store, run_id="r1"))
    drawn = [(p.title, ln.label, ln.xs, ln.ys) for p in figure.panels for ln in p.lines]
    assert drawn == printed and len(drawn) == 2


def test_heatmaps_reuse_the_report_rows(store: Store) -> None:
    data = FigureData(store, run_id="r1")
    heat = build_figure("fig10", data).panels
    assert all(isinstance(p, HeatPanel) for p in heat)
    ident = next(p for p in heat if p.title == "identity")
    row = ident.rows.index("resnet18")
    assert ident.values[row] == pytest.approx([1.0, 0.8])
    blocks = build_figure("fig11", data).panels
    assert [p.title for p in blocks] == ["openvino"]
    assert (blocks[0].rows, blocks[0].cols) == (["conv64x1", "conv64x2"], ["b1", "b4"])
    assert blocks[0].values == [
        pytest.approx([1.0, (600 / 600) / (300 / 400)]),
        pytest.approx([1.0, (400 / 480) / (170 / 240)]),
    ]


def test_reversal_pair(store: Store) -> None:
    spec = build_figure("fig01", FigureData(store, run_id="r1"))
    (panel,) = spec.panels
    assert panel.title == "b1: openvino, significant"
    assert panel.xticklabels == ["identity", "openvino"]
    deit, resnet = panel.lines
    assert (deit.label, deit.ys) == ("deit3_small_patch16_224", [12, 18])
    assert (resnet.label, resnet.ys) == ("resnet18", [10, 20])


# ---------------------------------------------------------------- filters and stored columns


def test_family_filter_and_unknown_names(store: Store) -> None:
    spec = build_figure("fig05", FigureData(store, run_id="r1", family="resnet"))
    assert [p.title for p in spec.panels] == ["resnet18 (resnet)"]
    conv = build_figure("fig05", FigureData(store, run_id="r1", family="conv"))  # a block kind
    assert [p.title for p in conv.panels] == ["conv64x1 (block)", "conv64x2 (block)"]
    with pytest.raises(UnknownNameError, match="unknown model family 'vgg'"):
        FigureData(store, family="vgg")
    with pytest.raises(ConfigError, match="none of these results records the precision"):
        FigureData(store, precision="fp32")
    with pytest.raises(UnknownNameError, match="unknown figure 'fig99'"):
        build_figure("fig99", FigureData(store))


def test_stored_interval_verdict_and_precision_columns_are_used(tmp_path: Path) -> None:
    """Stored CI half-width, verdict and precision columns are used when present (the CI and
    verdict columns came with schema 2; a precision column is added as a later schema would)."""
    import duckdb

    store = _build_store(tmp_path / "newer.duckdb")
    with duckdb.connect(str(store.path)) as conn:
        for column, sql_type in (("precision", "VARCHAR"), ("throughput_ci_half", "DOUBLE"),
                                 ("verdict", "VARCHAR")):  # fmt: skip
            conn.execute(f"ALTER TABLE trials ADD COLUMN IF NOT EXISTS {column} {sql_type}")
        conn.execute("UPDATE trials SET precision = 'fp32', throughput_ci_half = 0.1 * "
                     "throughput_mean, verdict = 'VALID'")  # fmt: skip
        conn.execute("UPDATE trials SET precision = 'bf16', verdict = 'INVALID: noisy' "
                     "WHERE compiler = 'openvino' AND model = 'conv'")  # fmt: skip
    data = FigureData(store, run_id="r1", precision="fp32")
    assert {t["precision"] for t in data.trials()} == {"fp32"}
    assert all(t["ci_source"] == "stored" for t in data.trials())
    line = _line(_panel(build_figure("fig05", data), "resnet18"), "identity")
    # the stored ±10 % carried to the log scale: 10 [9.0, 11.1] and 32 [28.9, 35.4] as printed
    assert line.errs == [(pytest.approx(1.0), pytest.approx(1.1)),
                         (pytest.approx(3.1), pytest.approx(3.4))]  # fmt: skip
    everything = FigureData(store, run_id="r1")
    conv = _line(_panel(build_figure("fig05", everything), "conv64x1"), "openvino")
    assert conv.weak == [True, True]  # INVALID trials are drawn hollow
    from ngb.sweeps.figures.catalog import caption

    text = caption(build_figure("fig05", everything), everything)
    assert "Precision: bf16, fp32" in text and "Error bars: stored 95% CI" in text
    assert "4 INVALID" in text
    with pytest.raises(UnknownNameError, match="unknown precision 'fp8'"):
        FigureData(store, precision="fp8")


def test_adaptive_stopping_rule_in_words() -> None:
    from ngb.sweeps.figures.data import stopping_rule

    adaptive = {
        "repetitions": None, "confidence": 0.95, "ci_target": 0.02, "min_repetitions": 6,
        "max_repetitions": 40, "max_measure_s": 60.0, "min_iters": 5, "min_duration_s": 0.5,
        "workers": 2,
    }  # fmt: skip
    text = stopping_rule([{"n_reps": 8, "measure": adaptive}, {"n_reps": 12, "measure": adaptive}])
    assert text == (
        "Repetitions: 8-12 per point (stop when the 95% CI is within ±2% of the mean, 6-40 "
        "repetitions, <= 60.0 s; each repetition >= 5 calls and >= 0.5 s, over 2 worker processes)"
    )


def test_save_figure_for_a_tui_tab(store: Store, tmp_path: Path) -> None:
    paths = save_figure("speedup", store, tmp_path, run_id="r1", formats=["png"])
    assert [p.name for p in paths] == ["fig06-speedup-batch.png", "fig06-speedup-batch.caption.txt"]
    with pytest.raises(ConfigError, match="nothing to draw"):
        save_figure("depth", store, tmp_path, run_id="r1", family="resnet")


def test_serving_figure_plots_each_stored_run(store: Store) -> None:
    """Fig. 14 from the serving table: a panel for resnet18 b1, per compiler a p99 line (solid,
    its printed 95 % interval as the bar) and a p50 line (dashed), at the offered rates stored;
    the INVALID run hollow, its p99 (no upper bound) without a bar; the limit as the reference."""
    spec = build_figure("fig14", FigureData(store, run_id="r1"))
    (panel,) = spec.panels
    assert isinstance(panel, LinePanel) and panel.title == "resnet18/b1"
    assert panel.reference == LIMIT_MS and panel.logx and panel.logy
    _, rows = store.select(
        "SELECT compiler, offered_qps, latency_p99_ms, latency_p99_lo_ms, latency_p99_hi_ms, "
        "latency_p50_ms, latency_p50_lo_ms, latency_p50_hi_ms, verdict FROM serving "
        "WHERE run_id = 'r1' ORDER BY compiler, offered_qps"
    )
    assert [ln.label for ln in panel.lines] == [
        "identity p99", "identity p50", "openvino p99", "openvino p50",
    ]  # fmt: skip
    for compiler in ("identity", "openvino"):
        mine = [r for r in rows if r[0] == compiler]
        assert len(mine) == len(RATES)
        p99, p50 = _line(panel, f"{compiler} p99"), _line(panel, f"{compiler} p50")
        assert not p99.dashed and p50.dashed and p99.colour_key == p50.colour_key == compiler
        assert p99.xs == p50.xs == [r[1] for r in mine]
        assert p99.ys == [r[2] for r in mine] and p50.ys == [r[5] for r in mine]
        for line, (value, lo, hi) in ((p99, (2, 3, 4)), (p50, (5, 6, 7))):
            for r, err in zip(mine, line.errs, strict=True):
                if r[hi] is None:
                    assert err is None
                    continue
                printed = printed_bounds(r[value], r[lo], r[hi])
                assert printed is not None
                assert err == pytest.approx((r[value] - printed.low, printed.high - r[value]))
        assert p99.weak == p50.weak == [r[8] != "VALID" for r in mine]
    # identity at 95 QPS: INVALID, its p99 unbounded above -- hollow and without a bar
    identity = _line(panel, "identity p99")
    assert identity.weak == [False, False, False, True] and identity.errs[-1] is None
    assert identity.ys[-1] > LIMIT_MS > identity.ys[0]
    # openvino's server is twice as fast: below identity's p99 at every rate
    assert all(o < i for o, i in zip(_line(panel, "openvino p99").ys, identity.ys, strict=True))


def test_serving_figure_notes_a_peak_search_as_every_surface_prints_it(tmp_path: Path) -> None:
    """A peak search in which no probe verified a rate: the caption says QPS* is below the
    lowest rate that missed, with no lower bound -- never a bracket from 0."""
    store = Store(tmp_path / "served.duckdb")
    store.create_run("s", "fixture", "", ["dev1"], 0)
    outcome = unverified_peak()
    save_serving(store, "s", outcome, "dev1")
    assert outcome.peak is not None
    data = FigureData(store, run_id="s")
    spec = build_figure("fig14", data)
    assert len(spec.panels) == 1
    text = caption(spec, data)
    high = outcome.peak.high
    assert f"resnet18/b1 identity: QPS* below {high:.4g} (no lower bound): no VALID probe met " in (
        text
    )
    assert "p99 <= 100 ms (6 probes)" in text and "[0" not in text
    assert "Runs: 6, 6 of them peak-search probes (6 INVALID, drawn hollow)" in text


def test_serving_figure_without_serving_runs_is_skipped_with_the_reason(tmp_path: Path) -> None:
    blind = Store(tmp_path / "blind.duckdb")
    blind.create_run("b", "fixture", "", ["dev1"], 1)
    blind.ingest_results("b", "dev1", [_result("resnet18", None, 1, "identity", 1, 10)])
    written = write_figures(FigureData(blind), tmp_path, ["fig14"], ["png"])
    assert written[0].skipped == (
        "no serving runs in scope (`ngb serve MODEL -c A,B --db PATH` adds them)"
    )


# ---------------------------------------------------------------- LaTeX

ASE_LATEX = r"""% ngb report ase: Average scaling efficiency (ASE heatmap as a table)
% needs \usepackage{booktabs,graphicx}
% source: run r1
\providecommand{\ngbfit}[1]{\sbox0{#1}%
  \ifdim\wd0>\linewidth\resizebox{\linewidth}{!}{\usebox0}\else\usebox0\fi}

\begin{table*}[htbp]
  \centering
  \caption{ASE by model/width and batch}
  \label{tab:ngb-ase-1}
  \ngbfit{\begin{tabular}{lllrr}
    \toprule
    device & compiler & model & b1 & b4 \\
    \midrule
    dev1 & identity & conv64x1 & 1.000 & 0.7500 [0.7414, 0.7587] \\
    dev1 & identity & conv64x2 & 1.000 & 0.7083 [0.7002, 0.7166] \\
    dev1 & identity & deit3\_small\_patch16\_224 & 1.000 & 0.6250 [0.6178, 0.6323] \\
    dev1 & identity & resnet18 & 1.000 & 0.8000 [0.7908, 0.8093] \\
    dev1 & openvino & conv64x1 & 1.000 & 1.000 [0.988, 1.012] \\
    dev1 & openvino & conv64x2 & 1.000 & 0.8333 [0.8237, 0.8430] \\
    dev1 & openvino & deit3\_small\_patch16\_224 & 1.000 & 0.972 [0.961, 0.984] \\
    dev1 & openvino & resnet18 & 1.000 & 1.100 [1.087, 1.113] \\
    \bottomrule
  \end{tabular}}
  \par\smallskip{\footnotesize\raggedright ASE = T(b) / (b $\cdot$ T(1)); 1.0 = perfect scaling\par}
  \par\smallskip{\footnotesize\raggedright UNCERTAINTY\par}
\end{table*}
""".replace("UNCERTAINTY", inline(UNCERTAINTY_NOTE))


def test_latex_ase_exact(store: Store) -> None:
    assert render(build_report("ase", store, run_id="r1"), "latex") == ASE_LATEX


def test_latex_escapes_and_every_report_renders(store: Store) -> None:
    assert escape("a_b & 5 % ± {x} #1 ~ ^ \\") == (
        r"a\_b \& 5 \% $\pm$ \{x\} \#1 \textasciitilde{} \textasciicircum{} \textbackslash{}"
    )
    # the reports' own marks: "n<2" and "≠prec" (a bare "<" prints as "¡" in OT1 text mode)
    assert escape("n<2, ≠prec, >1") == r"n\textless{}2, $\neq$prec, \textgreater{}1"
    out = CliRunner().invoke(cli, ["report", "all", "--format", "latex", "--db", str(store.path),
                                   "--run", "r1"])  # fmt: skip
    assert out.exit_code == 0, out.output
    text = out.output
    floats = re.findall(r"\\begin\{(table\*?)\}", text)
    assert len(floats) == len(re.findall(r"\\end\{table\*?\}", text)) >= 9
    assert text.count(r"\toprule") == text.count(r"\bottomrule") == text.count(r"\midrule")
    assert r"\label{tab:ngb-testbed-2}" in text and "\\caption{Compile time (s)}" in text
    # every row of every table has as many cells as the header (a cell's stacked interval is a
    # tabular of its own: [t]{@{}r@{}}, one column)
    for spec, body in re.findall(
        r"\\ngbfit\{\\begin\{tabular\}\{(\w+)\}(.*?)\\bottomrule", text, re.S
    ):
        rows = [ln for ln in body.splitlines() if ln.strip().endswith("\\\\")]
        for row in rows:
            if "multicolumn" not in row:
                assert row.count(" & ") == len(spec) - 1, row


# ---------------------------------------------------------------- CLI


def test_cli_figures(store: Store, tmp_path: Path) -> None:
    runner = CliRunner()
    listing = runner.invoke(cli, ["figures", "--list"])
    assert listing.exit_code == 0 and "fig12-cpu" in listing.output
    out = runner.invoke(cli, ["figures", "fig05", "fig10", "--db", str(store.path), "--run", "r1",
                              "-o", str(tmp_path), "--format", "png,svg"])  # fmt: skip
    assert out.exit_code == 0, out.output
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "fig05-throughput.caption.txt", "fig05-throughput.png", "fig05-throughput.svg",
        "fig10-ase-heatmap.caption.txt", "fig10-ase-heatmap.png", "fig10-ase-heatmap.svg",
    ]  # fmt: skip
    empty = runner.invoke(cli, ["figures", "fig07", "--db", str(store.path), "--family", "resnet",
                                "-o", str(tmp_path / "none")])  # fmt: skip
    assert empty.exit_code == 1 and "skip fig07-speedup-depth" in empty.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["figures", "fig99"], "unknown figure 'fig99'"),
        (["figures", "--format", "gif"], "unknown figure format 'gif'"),
        (["figures", "--family", "vgg"], "unknown model family 'vgg'"),
        (["figures", "--precision", "fp32"], "none of these results records the precision"),
        (["figures", "--run", "nope"], "unknown run 'nope'"),
        (["report", "bsr", "--format", "html", "--family", "resnet"], "whole-run report only"),
    ],
)
def test_bad_input_is_one_line(store: Store, tmp_path: Path, args: list[str], message: str) -> None:
    out = CliRunner().invoke(cli, [*args, "--db", str(store.path)])
    assert out.exit_code == 1, out.output
    assert message in out.output and "Traceback" not in out.output
    assert len(out.output.strip().splitlines()) == 1


# ---------------------------------------------------------------- HTML


@pytest.fixture(scope="module")
def run_html(store: Store, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("html") / "run.html"
    out = CliRunner().invoke(cli, ["report", "--format", "html", "-o", str(path), "--db",
                                   str(store.path), "--run", "r1"])  # fmt: skip
    assert out.exit_code == 0, out.output
    return path


def test_html_report_is_self_contained(run_html: Path) -> None:
    text = run_html.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["'](?!data:|#)""", text)  # no external files
    assert "<script" not in text
    assert text.count("<figure") == len(FIGURES)
    assert text.count('src="data:image/svg+xml;base64,') == len(FIGURES)
    for needle in ("Table I: devices", "Table II: software and compilers", "Test CPU",
                   "Table III: compile time (s)", "Failed trials (1)", "TVM build exploded",
                   "Ranking reversals"):  # fmt: skip
        assert needle in text, needle


PROBE = """<script>addEventListener("load", () => {
  const imgs = [...document.images];
  document.body.dataset.images = imgs.length;
  document.body.dataset.broken = imgs.filter(i => !(i.complete && i.naturalWidth > 0)).length;
  document.body.dataset.tables = document.querySelectorAll("table").length;
});</script>"""


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _headless(browser: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Chromium's answer for a page. Its headless mode can hang on its own: a ``--screenshot``
    of the report that takes 6-9 s ran past 247 s once, in a fresh-clone CI run (2026-11-30),
    and ran in 9 s five times after. So a browser past its time is killed with its helper
    processes (its own session) and asked once more; a second hang fails the test."""
    argv = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
            "--virtual-time-budget=5000", *args]  # fmt: skip
    for attempt in (1, 2):
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True,
        )  # fmt: skip
        try:
            out, err = proc.communicate(timeout=scaled(60))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            if attempt == 2:
                raise
            continue
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)
    raise AssertionError("unreachable")


def _console(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


@pytest.mark.skipif(_chromium() is None, reason="chromium not installed (scripts/setup.sh does)")
def test_html_report_in_headless_chromium(run_html: Path, tmp_path: Path) -> None:
    from PIL import Image

    browser = _chromium()
    assert browser is not None
    # The check itself can fail: a broken image and a script error are seen on a bad page.
    bad = tmp_path / "bad.html"
    bad.write_text(f'<html><body><img src="gone.png"><script>throw Error("x")</script>{PROBE}')
    seen = _headless(browser, "--dump-dom", bad.as_uri())
    assert 'data-broken="1"' in seen.stdout and _console(seen.stderr)

    probe = tmp_path / "probe.html"
    probe.write_text(run_html.read_text().replace("</body>", PROBE + "</body>"))
    dom = _headless(browser, "--dump-dom", probe.as_uri())
    assert f'data-images="{len(FIGURES)}"' in dom.stdout
    assert 'data-broken="0"' in dom.stdout  # every figure decoded
    assert re.search(r'data-tables="(\d+)"', dom.stdout).group(1) == str(  # type: ignore[union-attr]
        run_html.read_text().count("<table>")
    )
    shot = tmp_path / "shot.png"
    page = _headless(browser, f"--screenshot={shot}", "--window-size=1280,1600", run_html.as_uri())
    assert _console(page.stderr) == []
    with Image.open(shot) as image:
        assert image.size == (1280, 1600)
        lo, hi = image.convert("L").getextrema()
        assert hi - lo > 150  # the page's tables and text, not a blank or error page


# ---------------------------------------------------------------- the console's "save figure"


async def test_console_results_screen_saves_the_figure_of_its_tab(tmp_path: Path) -> None:
    from textual.widgets import TabbedContent

    from tests.test_tui_support import SIZE, make_app, wait_for

    app = make_app(tmp_path, screen="results")
    db = app.backend.db_path
    assert db is not None
    _build_store(db)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        await wait_for(pilot, lambda: screen.run_id == "r1" and screen.rows)
        out = db.parent / "figures" / "r1"
        app.set_focus(None)
        screen.query_one("#results-tabs", TabbedContent).active = "tab-table"
        await pilot.press("f")  # the table tab has no figure: nothing is written
        await pilot.pause(0.5)
        assert not out.exists()
        screen.query_one("#results-tabs", TabbedContent).active = "tab-speedup"
        await pilot.press("f")
        caption = out / "fig06-speedup-batch.caption.txt"
        await wait_for(pilot, caption.exists, timeout=120)
        family = screen.selection().family
        assert f"family {family}" in caption.read_text()
        for ext in ("png", "svg", "pdf"):
            assert (out / f"fig06-speedup-batch.{ext}").stat().st_size > 1000


def test_missing_matplotlib_is_one_line(monkeypatch) -> None:
    """A workstation without matplotlib gets a sentence naming the fix, not a traceback."""
    import importlib.util as iu

    from ngb.sweeps.figures import plot as figures_plot

    real = iu.find_spec
    monkeypatch.setattr(
        figures_plot.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "matplotlib" else real(name, *a),
    )
    with pytest.raises(NgbError, match="figures need matplotlib.*make setup"):
        figures_plot.require_matplotlib()


def test_energy_figure_in_millijoules_or_skipped_with_the_reason(store: Store, tmp_path) -> None:
    spec = build_figure("fig13-energy", FigureData(store, run_id="r1"))
    r18 = next(p for p in spec.panels if p.title.startswith("resnet18"))
    ov = next(line for line in r18.lines if line.label == "openvino")
    assert ov.xs == [1, 4] and ov.ys == pytest.approx([40_000 / 20, 40_000 / 88])
    # 2000 mJ ± 20 (1 %): 2000 [1980, 2021] as printed, on the log scale
    assert ov.errs[0] == pytest.approx((20.0, 21.0))
    text = caption(spec, FigureData(store, run_id="r1"))
    assert "Error bars: 95% interval of the energy per sample over worker processes" in text
    blind = Store(tmp_path / "blind.duckdb")
    blind.create_run("b", "fixture", "", ["dev1"], 1)
    result = _result("resnet18", None, 1, "identity", 1, 10)
    result.energy_j_per_sample = result.energy_j_per_sample_ci = None
    result.energy_note = "no power meter: RAPL not present"
    blind.ingest_results("b", "dev1", [result])
    skipped = build_figure("fig13-energy", FigureData(blind))
    assert not skipped.panels
    assert skipped.notes == ["no energy measured (no power meter: RAPL not present)"]
