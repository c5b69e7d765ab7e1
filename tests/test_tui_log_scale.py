"""The Results screen's charts on a log axis (issue 30): every chart tab draws with `l` on and off,
including one whose throughput interval would have reached zero as ``value ± half`` (plotext
raised "math domain error" there and the console exited), and a chart whose series differ by 50x
starts on a log axis so no series hides on the bottom row."""

from __future__ import annotations

from pathlib import Path

import pytest
from ngb.core.records.types import MeasureSettings, Stats, TrialResult, TrialSpec
from ngb.core.statistics.student_t import t_two_sided
from ngb.sweeps.store.database import Store
from ngb.tui import results_data as rd
from ngb.tui.app import NgbApp
from ngb.tui.backend import Backend
from ngb.tui.widgets.result_chart import ResultChart, y_range

from tests.test_tui_support import wait_for

MEASURE = MeasureSettings(repetitions=4, min_iters=5, min_duration_s=0.3)
#: compiler -> (relative half-width, {batch: throughput}); onnxruntime's interval is 3x its mean
SEED = {
    "identity": (0.02, {1: 80.0, 8: 350.0}),
    "openvino": (0.02, {1: 3800.0, 8: 4000.0}),
    "onnxruntime": (3.0, {1: 320.0, 8: 370.0}),
}


def _store(path: Path) -> Path:
    store = Store(path)
    results = []
    for compiler, (rel, tputs) in SEED.items():
        for batch, mean in tputs.items():
            spec = TrialSpec(model="conv", compiler=compiler, batch=batch, width=8, measure=MEASURE)
            std = rel * mean / t_two_sided(0.95, 1) * 1.4
            r = TrialResult(
                key=spec.key, spec=spec.to_dict(), started_at=1.7e9, finished_at=1.7e9 + 10,
                throughput=Stats(n=2, mean=mean, std=std), cpu_percent_mean=50.0,
                repetitions=[{"iters": 10, "elapsed_s": 1.0, "throughput": mean}] * 2,
                precision="fp32",
            )  # fmt: skip
            r.ci_half_width = rel * mean
            r.verdict = "VALID"
            r.extra["measure"] = {"interval": "processes", "df": 1, "confidence": 0.95}
            results.append(r)
    store.create_run("r1", "log", "", ["dev1"], len(results))
    assert store.ingest_results("r1", "dev1", results) == len(results)
    return path


def test_a_wide_chart_starts_on_a_log_axis_and_no_bound_is_at_or_below_zero(
    tmp_path: Path,
) -> None:
    rows = rd.ok_rows(Store(_store(tmp_path / "r.duckdb")).trials(run_id="r1"))
    sel = rd.Selection(rd.families(rows)[0], rd.variants(rows, rd.families(rows)[0])[0])
    chart = rd.throughput_chart(rows, sel)
    assert chart.log_y  # 80 against 4000: 50x
    noisy = chart.errors["onnxruntime"]
    assert all(b is not None and b[0] > 0 for b in noisy)  # 320 ± 960 once; now [16, 6440]
    assert y_range(chart) is not None and y_range(chart)[0] > 0  # type: ignore[index]
    # the operator's choice wins over the automatic one
    flat = rd.throughput_chart(rows, rd.Selection(sel.family, sel.variant, log_y=False))
    assert not flat.log_y


@pytest.mark.parametrize("tab", [t for t, kind in rd.CHARTS.items() if not kind.heatmap])
async def test_l_draws_every_chart_on_both_axes(tmp_path: Path, tab: str) -> None:
    db = _store(tmp_path / "r.duckdb")
    inventory = tmp_path / "devices.toml"
    inventory.write_text("")
    app = NgbApp(
        Backend(db_path=db, inventory_path=inventory), start_screen="results", attach_on_start=False
    )
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        await wait_for(pilot, lambda: len(screen.rows) == 6)
        await screen.show_tab(tab)
        app.set_focus(None)
        for _ in range(3):  # on, off, on (or off, on, off): each draw must survive
            before = screen.draws
            await pilot.press("l")
            await wait_for(pilot, lambda b=before: screen.draws > b)
        await pilot.pause()
        assert app.is_running  # a math domain error in plotext would have ended the app
        assert isinstance(screen.query_one(f"#chart-{tab}"), ResultChart)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
async def test_every_series_with_data_shows_its_marker(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    """identity at 80 and openvino at 4000 samples/s on one chart: each compiler's own marker is
    on the canvas (markers are drawn after every line and whisker, so none is painted over)."""
    from ngb.tui.widgets.result_chart import style_of
    from textual_plotext import PlotextPlot

    db = _store(tmp_path / "r.duckdb")
    inventory = tmp_path / "devices.toml"
    inventory.write_text("")
    app = NgbApp(
        Backend(db_path=db, inventory_path=inventory), start_screen="results", attach_on_start=False
    )
    async with app.run_test(size=size) as pilot:
        screen = app.screen
        await wait_for(pilot, lambda: len(screen.rows) == 6)
        for tab in ("throughput", "speedup"):
            await screen.show_tab(tab)
            await pilot.pause()
            screen.redraw()
            view = screen.query_one(f"#chart-{tab}", ResultChart)
            plot = view.query_one(PlotextPlot)
            plot.plt.plotsize(plot.size.width, plot.size.height)
            canvas = plot.plt.build()
            chart = rd.CHARTS[tab].build(screen.rows, screen.selection())
            for name, ys in chart.series.items():
                if any(y is not None for y in ys):
                    assert style_of(name)[1] in canvas, (tab, name, size)
