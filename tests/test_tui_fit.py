"""Issue 46's console at 80x24 and 120x40: a legend on every chart, one style per compiler,
sentences that wrap instead of being cut, the device selector under a long run name, a Depth
tab that says why it is empty, and log lines whose INVALID flag survives the right edge.

The store is the demo's shape: a conv block at depths 1 and 2 and an MHA block at one depth,
over eager, TorchScript, ONNX Runtime and tvm-ms (the pair that once shared a style).
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from ngb.core.compilers import list_compilers
from ngb.core.records.types import Stats, TrialResult, TrialSpec
from ngb.sweeps.run.events import RunEvent
from ngb.sweeps.store.database import Store
from ngb.tui import ops_view
from ngb.tui import results_data as rd
from ngb.tui.app import NgbApp
from ngb.tui.backend import Backend, TrialRow
from ngb.tui.live_run import DeviceState, LogLine, RunModel, trial_line
from ngb.tui.screens.results import advice_text
from ngb.tui.widgets.data_grid import DataGrid
from ngb.tui.widgets.device_panel import current_line
from ngb.tui.widgets.result_chart import STYLES, ResultChart, style_of
from ngb.tui.widgets.tuning_panel import best_steps, curve_lines
from rich.console import Console
from textual.widgets import Label, Select, Static
from textual_plotext import PlotextPlot

from tests.test_tui_support import wait_for

SIZES = {"80x24": (80, 24), "120x40": (120, 40)}
RUN = "paper-blocks-depth-20261128-061200-ab12"  # sweeps.run.state.new_run_id's shape
COMPILERS = {"identity": 1.0, "torchscript": 1.3, "onnxruntime": 1.6, "tvm-ms": 2.1}
#: (model, width, depth, batch) -> eager's throughput
POINTS = {
    ("conv", 32, 1, 1): 900.0,
    ("conv", 32, 1, 8): 4000.0,
    ("conv", 32, 2, 1): 500.0,
    ("conv", 32, 2, 8): 2100.0,
    ("mha", 64, 1, 8): 3000.0,
}


def demo_store(path: Path) -> Path:
    store = Store(path)
    results = []
    for (model, width, depth, batch), base in POINTS.items():
        for compiler, factor in COMPILERS.items():
            spec = TrialSpec(model=model, width=width, depth=depth, compiler=compiler, batch=batch)
            tput = base * factor
            results.append(
                TrialResult(
                    key=spec.key,
                    spec=spec.to_dict(),
                    host="lab",
                    started_at=1.7e9,
                    finished_at=1.7e9 + 1,
                    throughput=Stats(n=3, mean=tput, std=tput * 0.01),
                    repetitions=[
                        {"iters": 100, "elapsed_s": 1.0, "throughput": tput * (1 + k)}
                        for k in (-0.01, 0.0, 0.01)
                    ],
                )  # fmt: skip
            )
    store.create_run(RUN, "paper-blocks-depth", "", ["localhost"], len(results), {})
    store.ingest_results(RUN, "localhost", results)
    store.set_run_status(RUN, "done")
    return path


def app_on(tmp_path: Path, screen: str = "results") -> NgbApp:
    inventory = tmp_path / "devices.toml"
    inventory.write_text("[devices.localhost]\n")
    db = demo_store(tmp_path / "r.duckdb")
    return NgbApp(
        Backend(db_path=db, inventory_path=inventory), start_screen=screen, attach_on_start=False
    )


def screen_text(app: NgbApp) -> str:
    """The screen as the operator sees it, one string per row (what a snapshot shows)."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True)
    console.print(app.screen._compositor.render_update(full=True))
    return console.export_text()


def flat(text: str) -> str:
    return " ".join(text.split())


def shown_whole(widget: Label | Static, app: NgbApp, sentence: str) -> bool:
    """``sentence`` is on the screen whole, wrapped or not (nothing past the right edge, no
    row cut off): the widget is as tall as its wrapped text and inside the screen."""
    screen = app.screen.region
    inside = widget.region.right <= screen.right and widget.region.bottom <= screen.bottom
    return inside and flat(sentence) in flat(screen_text(app))


# -- styles ------------------------------------------------------------------------------------


def test_every_registered_compiler_has_a_style_of_its_own() -> None:
    """tvm-ms had no fixed style and its hash gave it TorchScript's vermillion diamond. A
    compiler added to the registry without a style fails here, as do two sharing one."""
    names = list_compilers(include_internal=True)
    assert "tvm-ms" in names and "noop" in names
    missing = [n for n in names if n not in STYLES]
    assert not missing, f"no chart style for {missing}: declare `style` on their classes"
    colours = [style_of(n)[0] for n in names]
    markers = [style_of(n)[1] for n in names]
    assert len(set(colours)) == len(names), dict(zip(names, colours, strict=True))
    assert len(set(markers)) == len(names), dict(zip(names, markers, strict=True))
    assert style_of("tvm-ms") != style_of("torchscript")
    # a compiler's series at another precision: its colour, another shape
    (ov, ov_marker), (bf16, bf16_marker) = style_of("openvino"), style_of("openvino bf16")
    assert bf16 == ov and bf16_marker != ov_marker and bf16_marker not in markers
    assert style_of("openvino fp32") == style_of("openvino")


# -- the Results screen ------------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
async def test_every_chart_has_its_legend_and_every_sentence_is_whole(
    tmp_path: Path, size: str
) -> None:
    app = app_on(tmp_path)
    async with app.run_test(size=SIZES[size]) as pilot:
        screen = app.screen
        await wait_for(pilot, lambda: len(screen.rows) == len(POINTS) * len(COMPILERS))
        await wait_for(pilot, lambda: screen.advice)
        app.set_focus(None)
        await pilot.pause(0.2)
        # the run's long name keeps to one row: the device selector under it stays in view
        controls = screen.query_one("#results-controls")
        device = screen.query_one("#results-device", Select)
        assert device.region.height == 3 and device.region.bottom <= controls.region.bottom
        assert "(all)" in screen_text(app)
        # `ngb advise`'s answer, whole at both widths
        advice = screen.query_one("#results-advice", Label)
        sentence = str(advice.render())
        assert sentence.startswith("advise: conv32x1 on localhost: deploy tvm-ms b8")
        assert shown_whole(advice, app, sentence), screen_text(app)
        for tab, kind in rd.CHARTS.items():
            if kind.heatmap:
                continue
            await screen.show_tab(tab)
            await pilot.pause(0.2)
            view = screen.query_one(f"#chart-{tab}", ResultChart)
            chart = kind.build(screen.rows, screen.selection())
            drawn = [n for n, ys in chart.series.items() if any(y is not None for y in ys)]
            assert drawn, tab
            legend = view.query_one(".chart-legend", Static)
            assert legend.region.height >= 1 and legend.region.bottom <= screen.region.bottom
            text = screen_text(app)
            for name in drawn:  # each series named beside its marker, on screen
                assert f"{style_of(name)[1]} {name}" in text, (tab, name, text)
            caption = view.query_one(".chart-caption", Static)
            assert shown_whole(caption, app, str(caption.render())), (tab, text)


async def test_a_long_caution_at_80x24_scrolls_and_leaves_the_chart_in_view(tmp_path: Path) -> None:
    """A real demo run on the 2-core VM made the answer 11 rows at 80x24 (an INVALID caution, a
    precision change) and the chart had no row left: below 36 rows the answer keeps 3 rows and
    scrolls, the note 2, and the plot keeps its rows and legend."""
    app = app_on(tmp_path)
    async with app.run_test(size=SIZES["80x24"]) as pilot:
        screen = app.screen
        await wait_for(pilot, lambda: len(screen.rows) == len(POINTS) * len(COMPILERS))
        await wait_for(pilot, lambda: screen.advice)
        long = "advise: conv32x1 on localhost: deploy openvino bf16 b8 -- " + "caution: " * 90
        screen.query_one("#results-advice", Label).update(long)
        await pilot.pause(0.3)
        box = screen.query_one("#results-advice-box")
        assert box.region.height == 3 and box.max_scroll_y > 0  # the rest scrolls
        view = screen.query_one("#chart-throughput", ResultChart)
        plot = view.query_one(PlotextPlot)
        legend = view.query_one(".chart-legend", Static)
        assert plot.region.height >= 6, screen_text(app)
        assert legend.region.bottom <= screen.region.bottom, screen_text(app)


@pytest.mark.parametrize("size", SIZES)
async def test_the_depth_tab_says_why_it_is_empty(tmp_path: Path, size: str) -> None:
    """The demo's MHA block ran at one depth: the tab said nothing (its reason was a plotext
    title wider than the plot, which plotext drops) above an empty frame."""
    app = app_on(tmp_path)
    async with app.run_test(size=SIZES[size]) as pilot:
        screen = app.screen
        await wait_for(pilot, lambda: len(screen.rows) == len(POINTS) * len(COMPILERS))
        screen.query_one("#results-family", Select).value = "mha"
        await wait_for(pilot, lambda: screen.selection().variant == "mha w64")
        await screen.show_tab("depth")
        await pilot.pause(0.2)
        view = screen.query_one("#chart-depth", ResultChart)
        caption = view.query_one(".chart-caption", Static)
        said = str(caption.render())
        assert "no depth series in this run: mha w64 ran at depth 1 only" in said
        assert "two depths or more" in said
        assert shown_whole(caption, app, said), screen_text(app)
        assert not view.query_one(PlotextPlot).display  # no empty frame under the reason


@pytest.mark.parametrize("size", SIZES)
async def test_the_tables_and_their_notes_fit(tmp_path: Path, size: str) -> None:
    app = app_on(tmp_path)
    async with app.run_test(size=SIZES[size]) as pilot:
        screen = app.screen
        await wait_for(pilot, lambda: len(screen.rows) == len(POINTS) * len(COMPILERS))
        await screen.show_tab("table")
        table = screen.query_one("#results-table", DataGrid)
        await wait_for(pilot, lambda: table.row_count > 0)
        await pilot.pause(0.2)
        # every column in view: ASE, BSR and the flags ran past the edge at 80 columns
        widths = sum(c.get_render_width(table) for c in table.columns.values())
        assert widths <= table.scrollable_content_region.width, (widths, screen_text(app))
        labels = [str(c.label) for c in table.columns.values()]
        assert {"ASE", "BSR", "flags"} <= set(labels)
        note = screen.query_one("#results-table-note", Label)
        said = str(note.render())
        assert said.startswith("to fit: model, n hidden; no interval on RTR")  # what gave way
        assert shown_whole(note, app, said), screen_text(app)
        await screen.show_tab("ops")
        await pilot.pause(0.2)
        note = screen.query_one("#results-ops-note", Label)
        # whole, "[measure]" included (it was read as markup and vanished)
        assert "[measure]" in ops_view.NO_PROFILES
        assert shown_whole(note, app, ops_view.NO_PROFILES), screen_text(app)


def test_the_advice_shown_is_the_charts_depth_with_the_others_named() -> None:
    one = {1: "advise: conv32x1 on localhost: deploy tvm-ms b8"}
    assert advice_text(one, "r") == one[1]
    three = {4: "advise: deep", 1: one[1], 2: "advise: two"}
    assert advice_text(three, "r") == f"{one[1]} (depth 2, 4: `ngb advise --sweep r`)"
    assert advice_text({}, "r") == ""


def test_a_model_without_blocks_is_told_where_depth_is_measured() -> None:
    rows: list[TrialRow] = [{"model": "resnet18", "compiler": "identity", "batch": 1, "depth": 1}]
    note = rd.depth_chart(rows, rd.Selection("resnet", "resnet18")).note
    assert note.startswith("no depth series for resnet18") and "conv and mha blocks" in note


# -- the Run screen's log and trial line -------------------------------------------------------


def _result(verdict: str, disturbed: bool = False) -> dict[str, object]:
    return {
        "key": "k1",
        "spec": {"model": "conv", "compiler": "tvm-ms", "batch": 8},
        "throughput": {"mean": 1234.5},
        "ci_half_width": 12.0,
        "verdict": verdict,
        "disturbed": disturbed,
        "tune_s": 1941.0,
        "extra": {"measure": {"warmup_s": 0.4}, "workers": [{"measure_s": 1.5}]},
    }


@pytest.mark.parametrize("width", [80, 120])
def test_the_invalid_flag_leads_the_log_line(width: int) -> None:
    """The flag stood last and a log tail 80 columns wide cut it off."""
    label = "conv32x2/tvm-ms/b8 a label as long as a real one"
    line = LogLine(1.7e9, "jetson-orin-1", trial_line(label, _result("INVALID", True)))
    seen = line.render()[: width - 4]  # the log's border and padding
    assert "INVALID, disturbed: done conv32x2/tvm-ms/b8" in seen
    valid = trial_line(label, _result("VALID"))
    assert valid.startswith("done ") and "[VALID]" in valid and "INVALID" not in valid


def test_a_fixed_count_trial_is_not_held_to_a_target_it_cannot_stop_at() -> None:
    """``±810.0% (target ±2%)`` after 2 of 6 fixed repetitions read as a trial far from done."""
    model = RunModel()

    def progress(**fields: object) -> None:
        event = {"type": "progress", "rep": 2, "reps": 6, "ci_relative": 8.1, "ci_target": 0.02}
        model.apply(RunEvent("r", "d", "agent", state="running", ts=1.0,
                             event={**event, **fields}))  # fmt: skip

    progress(fixed=True)
    state: DeviceState = model.device("r", "d")
    state.current = "conv32x1/identity/b8"
    assert current_line(state).endswith("95% CI ±810.0% (fixed count; VALID within ±2%)")
    progress()  # an adaptive trial (or an older agent): the target ends the trial
    assert current_line(state).endswith("95% CI ±810.0% (target ±2%)")


def test_the_tuning_curve_is_drawn_as_steps_with_its_units() -> None:
    history = [(16.0, 9.0), (32.0, 6.0), (48.0, 6.0), (64.0, 4.0)]
    assert best_steps(history) == [
        (16.0, 9.0), (32.0, 9.0), (32.0, 6.0), (48.0, 6.0), (48.0, 6.0), (64.0, 6.0),
        (64.0, 4.0),
    ]  # fmt: skip
    text = "\n".join(curve_lines(history, 80))
    assert "trials measured" in text and "best ms" in text


def test_the_early_stop_is_not_promised_past_the_budget() -> None:
    """The log said "early stop after 150 trials" for a 64-trial job."""
    from ngb.core.compilers.tvm_ms import early_stop_words

    assert early_stop_words(150, 64) == (
        "no early stop within 64 trials (it needs 150 without a better one)"
    )
    assert early_stop_words(150, 500) == "early stop after 150 trials without a better one"
    assert early_stop_words(None, 64) == "no early stop"


async def test_the_runs_list_says_it_is_being_read_when_shown_again(tmp_path: Path) -> None:
    """The list looked current for ~5 s on entry while it still showed the last read."""
    app = app_on(tmp_path, "runs")
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.screen
        note = screen.query_one("#runs-note", Label)
        await wait_for(pilot, lambda: "1 run(s)" in str(note.render()))
        screen.on_screen_resume()  # shown again: the rows are the last read's until this one
        assert str(note.render()).startswith("reading the store...; the list below is as of ")
        await wait_for(pilot, lambda: "1 run(s)" in str(note.render()))
