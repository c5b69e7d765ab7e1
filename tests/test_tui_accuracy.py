"""The console shows accuracy beside throughput (issue 42): the Results table's top-1 and
agreement columns, at 80x24 and 120x40, from stored ``extra["accuracy"]`` records that are real
``accuracy_stats.compare`` output; absent where no row carries one.

The store: digits-resnet at batches 1 and 8 under identity, ONNX Runtime and OpenVINO, which ran
both fp32 and bf16 (the AMX CPU's pick) at each batch. 540 labelled samples; eager fp32 right on
530. Each compiled model's answers are eager's with a few samples flipped, so every percentage
is known: OpenVINO bf16 loses 3 and gains 1 (top-1 528/540 = 97.8 %, agreement 536/540 =
99.26 %), the rest answer as eager (98.1 %, agreement 100 %).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from ngb.core.records.types import MeasureSettings, Stats, TrialResult, TrialSpec
from ngb.core.statistics import accuracy_stats
from ngb.sweeps.report.numbers import format_interval
from ngb.sweeps.store.database import Store
from ngb.tui import narrow_table
from ngb.tui import results_data as rd
from ngb.tui.app import NgbApp
from ngb.tui.backend import Backend
from ngb.tui.widgets.data_grid import DataGrid
from textual.widgets import Label

from tests.test_tui_fit import screen_text, shown_whole
from tests.test_tui_support import wait_for


def binomtest(k: int, n: int):  # noqa: ANN201 - scipy's result
    """scipy's test, imported when a test asks for it: ``scipy.stats`` is ~0.7 CPU-s, and every
    xdist worker imports each test module to collect it, not only the one that runs it."""
    from scipy.stats import binomtest as scipy_binomtest

    return scipy_binomtest(k, n)


SIZES = {"80x24": (80, 24), "120x40": (120, 40)}
RUN = "dlas-digits-20261201-090000-ab12"
SAMPLES, CLASSES = 540, 10
LABELS = np.arange(SAMPLES) % CLASSES
EAGER = np.arange(SAMPLES) >= 10
BF16 = EAGER.copy()
BF16[[10, 11, 12]] = False
BF16[0] = True
#: (compiler, precision) -> (throughput at batch 1, the compiled model's correctness)
COMPILERS = {
    ("identity", "fp32"): (300.0, EAGER),
    ("onnxruntime", "fp32"): (600.0, EAGER),
    ("openvino", "fp32"): (700.0, EAGER),
    ("openvino", "bf16"): (1100.0, BF16),
}


def scores(correct: np.ndarray) -> np.ndarray:
    predicted = np.where(correct, LABELS, (LABELS + 1) % CLASSES)
    return np.eye(CLASSES)[predicted]


def trial(
    compiler: str,
    precision: str,
    batch: int,
    accuracy: bool,
    optimisation: str = "none",
    scale: float = 1.0,
) -> TrialResult:
    base, correct = COMPILERS[(compiler, precision)]
    tput = base * (1 if batch == 1 else 4) * scale
    measure = MeasureSettings(
        repetitions=5, precision="default" if compiler == "identity" else precision
    )
    spec = TrialSpec(
        model="digits-resnet", compiler=compiler, batch=batch, measure=measure,
        optimisation=optimisation,
    )  # fmt: skip
    reps = [tput * (1 + n) for n in (-0.01, 0.01, -0.005, 0.005, 0.0)]
    extra: dict[str, object] = {}
    if accuracy:
        record = accuracy_stats.compare(scores(EAGER), scores(correct), LABELS)
        extra["accuracy"] = {"data": "digits-test", **record}
    return TrialResult(
        key=spec.key,
        spec=spec.to_dict(),
        host="lab",
        started_at=1.7e9,
        finished_at=1.7e9 + 1,
        throughput=Stats(n=5, mean=tput, std=float(np.std(reps, ddof=1))),
        repetitions=[{"iters": 10, "elapsed_s": 1.0, "throughput": v} for v in reps],
        precision=precision,
        verdict="VALID",
        extra=extra,
    )


def store_at(path: Path, accuracy: bool = True) -> Path:
    store = Store(path)
    results = [trial(c, p, b, accuracy) for (c, p) in COMPILERS for b in (1, 8)]
    store.create_run(RUN, "dlas-digits", "", ["localhost"], len(results), {})
    store.ingest_results(RUN, "localhost", results)
    store.set_run_status(RUN, "done")
    return path


def app_on(tmp_path: Path, accuracy: bool = True) -> NgbApp:
    inventory = tmp_path / "devices.toml"
    inventory.write_text("[devices.localhost]\n")
    db = store_at(tmp_path / "r.duckdb", accuracy)
    backend = Backend(db_path=db, inventory_path=inventory)
    return NgbApp(backend, start_screen="results", attach_on_start=False)


def wilson(k: int) -> str:
    """k of 540 with Wilson's interval (scipy's), in percent, as the reports print it."""
    ci = binomtest(k, SAMPLES).proportion_ci(0.95, method="wilson")
    return format_interval(100 * k / SAMPLES, 100 * float(ci.low), 100 * float(ci.high))


def test_the_independent_numbers() -> None:
    assert wilson(528) == "97.8 [96.1, 98.8]"  # OpenVINO bf16's top-1
    assert wilson(530) == "98.1 [96.6, 99.0]"  # eager's, and every fp32 row's
    assert wilson(536) == "99.26 [98.11, 99.72]"  # bf16's agreement with eager fp32
    assert wilson(540) == "100.00 [99.29, 100.00]"


def test_the_table_has_the_columns_where_rows_carry_accuracy(tmp_path: Path) -> None:
    rows = rd.ok_rows(Store(store_at(tmp_path / "r.duckdb")).trials(run_id=RUN))
    columns, table = rd.results_table(rows, rd.Selection("digits"))
    at = columns.index("speed-up [95%]")
    assert columns[at + 1 : at + 3] == ("top-1 [95%]", "agree [95%]")
    cells = {(r[1], r[2]): dict(zip(columns, r, strict=True)) for r in table}
    assert len(cells) == 8
    for batch in ("1", "8"):
        bf16 = cells[("openvino bf16", batch)]
        assert bf16["top-1 [95%]"] == wilson(528) and bf16["agree [95%]"] == wilson(536)
        for name in ("identity", "onnxruntime", "openvino fp32"):
            assert cells[(name, batch)]["top-1 [95%]"] == wilson(530)
            assert cells[(name, batch)]["agree [95%]"] == wilson(540)
    # the other columns are metrics_table's, unchanged
    plain = rd.metrics_table(rows, rd.Selection("digits"))
    assert [tuple(c for c, name in zip(r, columns, strict=True) if name not in rd.ACCURACY_COLUMNS)
            for r in table] == plain  # fmt: skip


def test_no_accuracy_no_columns(tmp_path: Path) -> None:
    rows = rd.ok_rows(Store(store_at(tmp_path / "r.duckdb", accuracy=False)).trials(run_id=RUN))
    columns, table = rd.results_table(rows, rd.Selection("digits"))
    assert columns == rd.TABLE_COLUMNS and len(table) == 8
    assert all(len(r) == len(rd.TABLE_COLUMNS) for r in table)


def test_a_row_without_a_pass_says_so_beside_those_with_one(tmp_path: Path) -> None:
    rows = rd.ok_rows(Store(store_at(tmp_path / "r.duckdb")).trials(run_id=RUN))
    for r in rows:
        if r["compiler"] == "onnxruntime":
            r["extra"] = {}
    columns, table = rd.results_table(rows, rd.Selection("digits"))
    ort = [dict(zip(columns, r, strict=True)) for r in table if r[1] == "onnxruntime"]
    assert [(c["top-1 [95%]"], c["agree [95%]"]) for c in ort] == [("--", "--")] * 2


@pytest.mark.parametrize("size", SIZES)
async def test_the_console_shows_accuracy_beside_throughput(tmp_path: Path, size: str) -> None:
    app = app_on(tmp_path)
    async with app.run_test(size=SIZES[size]) as pilot:
        screen = app.screen
        await wait_for(pilot, lambda: len(screen.rows) == 8, timeout=20)
        await screen.show_tab("table")
        table = screen.query_one("#results-table", DataGrid)
        # every row, the bf16 ones included (the compiler filter dropped "openvino bf16")
        await wait_for(pilot, lambda: table.row_count == 8, timeout=20)
        await pilot.pause(0.2)
        labels = [str(c.label) for c in table.columns.values()]
        top1 = next(i for i, name in enumerate(labels) if name.startswith("top-1"))
        agree = next(i for i, name in enumerate(labels) if name.startswith("agree"))
        assert labels[top1 - 1].startswith("speed-up") and agree == top1 + 1
        widths = [c.get_render_width(table) for c in table.columns.values()]
        room = table.scrollable_content_region.width
        # the accuracy columns in view at both sizes, beside the speed-up; at 120 columns the
        # whole table (at 80 a run at two precisions scrolls: its flags and BSR's ≠prec)
        assert sum(widths[: agree + 1]) <= room, (widths, screen_text(app))
        if size == "120x40":
            assert sum(widths) <= room, (widths, screen_text(app))
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        comp = labels.index("comp")
        bare = narrow_table.without_interval
        for row in rows:
            bf16 = row[comp] == "OV bf16"
            want = (wilson(528), wilson(536)) if bf16 else (wilson(530), wilson(540))
            if "[95%]" not in labels[top1]:
                want = (bare(want[0]), want[1])
            if "[95%]" not in labels[agree]:
                want = (want[0], bare(want[1]))
            assert (row[top1], row[agree]) == want, (row, labels)
        assert sum(row[comp] == "OV bf16" for row in rows) == 2
        # on the screen as the operator sees it: the bf16 row's accuracy beside its speed-up
        at = next(i for i, row in enumerate(rows) if row[comp] == "OV bf16")
        table.move_cursor(row=at, column=0)
        await pilot.pause(0.2)
        bf16 = rows[at]
        line = next(ln for ln in screen_text(app).splitlines() if "OV bf16" in ln)
        shown = f"{re.escape(bf16[top1])} +{re.escape(bf16[agree])}"
        assert re.search(f"{re.escape(bf16[3])} +{shown}", line), (line, bf16)
        note = screen.query_one("#results-table-note", Label)
        said = str(note.render())
        assert said.endswith("agree=% same top-1 as eager fp32"), said
        assert shown_whole(note, app, said), screen_text(app)


async def test_no_accuracy_no_columns_on_the_screen(tmp_path: Path) -> None:
    app = app_on(tmp_path, accuracy=False)
    async with app.run_test(size=SIZES["120x40"]) as pilot:
        screen = app.screen
        await wait_for(pilot, lambda: len(screen.rows) == 8, timeout=20)
        await screen.show_tab("table")
        table = screen.query_one("#results-table", DataGrid)
        await wait_for(pilot, lambda: table.row_count == 8, timeout=20)
        labels = [str(c.label) for c in table.columns.values()]
        assert not any(name.startswith(("top-1", "agree")) for name in labels), labels
        assert "agree=" not in str(screen.query_one("#results-table-note", Label).render())


def test_each_optimisation_is_a_model_of_its_own_in_the_selector(tmp_path: Path) -> None:
    """DLAS rows (issue 42): the console once kept only un-optimised rows, so a dlas-digits run
    showed none of its elbows. Each optimisation is now its own entry, its compilers compared
    with identity under the same optimisation, its accuracy beside its speed."""
    store = Store(tmp_path / "r.duckdb")
    results = [
        trial(compiler, "fp32", 1, True, optimisation, factor)
        for optimisation, factor in (("none", 1.0), ("int8-cal", 2.0))
        for compiler in ("identity", "onnxruntime")
    ]
    store.create_run(RUN, "dlas-digits", "", ["localhost"], len(results), {})
    store.ingest_results(RUN, "localhost", results)
    rows = rd.ok_rows(store.trials(run_id=RUN))
    assert len(rows) == 4
    entries = rd.variants(rows, rd.family_of(rows[0]))
    assert entries == ["digits-resnet", "digits-resnet · int8-cal"]
    assert rd.model_part(entries[1]) == "digits-resnet"
    columns, table = rd.results_table(rows, rd.Selection(rd.family_of(rows[0])))
    cells = {(r[0], r[1]): dict(zip(columns, r, strict=True)) for r in table}
    int8 = cells[("digits-resnet · int8-cal", "onnxruntime")]
    # 1,200/s over identity int8-cal's 600/s, not over identity none's 300/s
    assert int8["speed-up [95%]"].startswith("2.000") and int8["top-1 [95%]"] == wilson(530)
    assert cells[("digits-resnet · int8-cal", "identity")]["speed-up [95%]"].startswith("1.000")
