"""One truth on every surface (issue 20): the same value, interval and verdict for every derived
number in the console's data layer, ``ngb report`` (markdown, CSV, LaTeX, HTML) and the figures.

A real DuckDB store is seeded with trials as ``timing.merge`` writes them (mean, stored 95 %
half-width, ``extra.measure.df``), some quiet, some noisy enough to be "n.s.", one at another
precision. Each surface is rendered the way a user meets it (the CLI for the reports, the
Results screen's data layer, the figure builders) and its printed text is parsed back.
"""

from __future__ import annotations

import csv
import html
import io
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from ngb.core.records.types import MeasureSettings, Stats, TrialResult, TrialSpec
from ngb.core.statistics.student_t import t_two_sided
from ngb.sweeps.cli import cli
from ngb.sweeps.figures.catalog import build_figure
from ngb.sweeps.figures.data import FigureData
from ngb.sweeps.report.numbers import format_interval, format_with_interval, round_with_interval
from ngb.sweeps.store.database import Store
from ngb.tui import results_data as rd

MEASURE = MeasureSettings(repetitions=6, min_iters=5, min_duration_s=0.3)
#: (model, width, compiler) -> (precision, relative 95 % half-width, {batch: throughput})
SEED: dict[tuple[str, int | None, str], tuple[str, float, dict[int, float]]] = {
    ("resnet18", None, "identity"): ("fp32", 0.02, {1: 100.0, 8: 480.0}),
    ("resnet18", None, "openvino"): ("bf16", 0.03, {1: 230.0, 8: 1500.0}),
    ("resnet18", None, "onnxruntime"): ("fp32", 0.9, {1: 105.0, 8: 520.0}),  # noisy: n.s.
    ("conv", 64, "identity"): ("fp32", 0.01, {1: 900.0, 8: 4000.0}),
    ("conv", 64, "onnxruntime"): ("fp32", 0.02, {1: 1500.0, 8: 7800.0}),
    ("conv", 64, "openvino"): ("fp32", 0.8, {1: 1300.0, 8: 9100.0}),  # noisy: n.s.
}


def _result(model: str, width: int | None, compiler: str, batch: int) -> TrialResult:
    precision, rel, tputs = SEED[(model, width, compiler)]
    spec = TrialSpec(model=model, compiler=compiler, batch=batch, width=width, measure=MEASURE)
    mean = tputs[batch]
    half = rel * mean
    df = 3  # four worker processes
    std = half / t_two_sided(0.95, df) * 2  # what 4 process means with this half-width would show
    reps = [mean + d * std for d in (-1.0, 1.0, -0.5, 0.5, 0.0, 0.0)]
    result = TrialResult(
        key=spec.key, spec=spec.to_dict(), started_at=1_700_000_000.0,
        finished_at=1_700_000_010.0, throughput=Stats(n=6, mean=mean, std=std),
        repetitions=[{"iters": 10, "elapsed_s": 1.0, "throughput": v} for v in reps],
        cpu_percent_mean=80.0, compile_s=0.5, versions={"ngb": "0.1.0"}, precision=precision,
    )  # fmt: skip
    result.ci_half_width = half
    result.verdict = "VALID"
    result.extra["measure"] = {"interval": "processes", "df": df, "confidence": 0.95}
    return result


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    store = Store(tmp_path_factory.mktemp("truth") / "results.duckdb")
    results = [
        _result(model, width, compiler, batch)
        for (model, width, compiler), (_, _, tputs) in SEED.items()
        for batch in tputs
    ]
    store.create_run("r1", "truth", "", ["dev1"], len(results))
    assert store.ingest_results("r1", "dev1", results) == len(results)
    return store


# ---------------------------------------------------------------- parsing what is printed

_NUM = r"-?\d+(?:\.\d+)?"
NUMBER = re.compile(rf"^\s*({_NUM})(?:\s*\[\s*({_NUM}),\s*({_NUM})\s*\])?\s*(.*)$")
Bounds = tuple[str, str] | None


def parse(text: str) -> tuple[str, Bounds, frozenset[str]]:
    """``"1.95 [1.87, 2.04] n.s. ≠prec"`` -> ("1.95", ("1.87", "2.04"), {"n.s.", "≠prec"})."""
    # LaTeX may stack a cell's value over its interval in a one-column tabular
    text = re.sub(r"\\begin\{tabular\}(\[\w\])?\{@\{\}\w@\{\}\}", "", text)
    text = text.replace("\\end{tabular}", "").replace("\\\\", " ")
    text = re.sub(r"\{\\(?:footnotesize|scriptsize|small)\s*(.*?)\}", r"\1", text)
    for tex, plain in (
        ("\\textless{}", "<"), ("$\\neq$", "≠"), ("(baseline)", "baseline"), ("$-$", "-"),
        ("\\,", " "), ("{[}", "["), ("{]}", "]"),
    ):  # fmt: skip
        text = text.replace(tex, plain)  # LaTeX's escapes and the console's parentheses
    match = NUMBER.match(text)
    assert match, f"not a number: {text!r}"
    value, low, high, rest = match.groups()
    return value, ((low, high) if low is not None else None), frozenset(rest.split())


Key = tuple[str, str, int]  # (model label, compiler, batch)
METRICS = ("speedup", "rtr", "ase", "bsr")
POSITIVE = ("throughput", *METRICS)  # quantities that cannot be zero or negative


def _report_csv(store: Store) -> dict[Key, dict[str, tuple[str, str | None, frozenset[str]]]]:
    out = CliRunner().invoke(
        cli, ["report", "bsr", "--db", str(store.path), "--run", "r1", "--format", "csv"]
    )
    assert out.exit_code == 0, out.output
    table: dict[Key, dict[str, Any]] = {}
    for row in csv.DictReader(io.StringIO(out.output)):
        cells = {}
        for m in POSITIVE:
            if row[m] == "":
                continue
            value = row[m]
            low, high = row.get(f"{m} 95% lo") or None, row.get(f"{m} 95% hi") or None
            bounds = (low, high) if low is not None and high is not None else None
            cells[m] = (value, bounds, frozenset((row.get(f"{m} note") or "").split()))
        table[(row["model"], row["compiler"], int(row["batch"]))] = cells
    return table


def _report_text(store: Store, fmt: str) -> dict[Key, dict[str, Any]]:
    """markdown, latex or html: the bsr table's printed cells, parsed back."""
    out = CliRunner().invoke(
        cli, ["report", "bsr", "--db", str(store.path), "--run", "r1", "--format", fmt]
    )
    assert out.exit_code == 0, out.output
    rows: list[list[str]] = []
    if fmt == "markdown":
        rows = [
            [c.strip() for c in line.strip("|").split("|")]
            for line in out.output.splitlines()
            if line.startswith("| ")
        ][1:]
    elif fmt == "latex":
        body = out.output.split("\\midrule")[1].split("\\bottomrule")[0]
        rows = [[c.strip() for c in line.rstrip("\\ ").split("&")]
                for line in body.strip().splitlines()]  # fmt: skip
        rows = [[c.replace("\\_", "_") for c in r] for r in rows]
    else:
        body = out.output.split("<tbody>")[1].split("</tbody>")[0]
        rows = [[html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", tr)]
                for tr in re.findall(r"<tr>(.*?)</tr>", body)]  # fmt: skip
    columns = ["device", "model", "compiler", "precision", "batch", "throughput", "rtr", "ase",
               "bsr", "speedup"]  # fmt: skip
    table = {}
    for r in rows:
        named = dict(zip(columns, r, strict=False))
        cells = {m: parse(named[m]) for m in POSITIVE if named[m] not in ("-", "")}
        table[(named["model"], named["compiler"], int(named["batch"]))] = cells
    return table


def _console(store: Store) -> dict[Key, dict[str, Any]]:
    """The Results screen's table, built from the rows the console's backend reads."""
    rows = rd.ok_rows(store.trials(run_id="r1"))
    table = {}
    for family in rd.families(rows):
        for r in rd.metrics_table(rows, rd.Selection(family)):
            label = r[0].replace(" w", "").replace("conv64", "conv64x1")
            cells = dict(zip(POSITIVE, r[5:10], strict=True))
            parsed = {m: parse(v) for m, v in cells.items() if v != "--"}
            table[(label, r[1], int(r[2]))] = parsed
    return table


Printed = tuple[str, Bounds, frozenset[str]]


def _floats(bounds: Bounds) -> tuple[float, float] | None:
    return (float(bounds[0]), float(bounds[1])) if bounds is not None else None


def _same(a: Printed, b: Printed, where: object = "") -> None:
    """Same printed value, interval and verdict (the CSV keeps numbers numeric: 1.0 == 1.000)."""
    assert float(a[0]) == float(b[0]), (where, a, b)
    assert _floats(a[1]) == _floats(b[1]), (where, a, b)
    assert a[2] == b[2], (where, a, b)


def test_every_surface_prints_the_same_number_interval_and_verdict(store: Store) -> None:
    surfaces = {
        "csv": _report_csv(store),
        "markdown": _report_text(store, "markdown"),
        "latex": _report_text(store, "latex"),
        "html": _report_text(store, "html"),
        "console": _console(store),
    }
    reference = surfaces["markdown"]
    assert len(reference) == 12
    compared = 0
    for name, table in surfaces.items():
        assert set(table) == set(reference), name
        for key, cells in reference.items():
            assert set(table[key]) == set(cells), (name, key)
            for metric, printed in cells.items():
                _same(table[key][metric], printed, (name, key, metric))
                compared += 1
    assert compared == 5 * sum(len(c) for c in reference.values())
    # what the seed was built to show, so the comparison is not between empty cells
    ov8 = reference[("resnet18", "openvino", 8)]
    assert "≠prec" in ov8["speedup"][2] and "≠prec" in ov8["bsr"][2]
    assert "n.s." in reference[("resnet18", "onnxruntime", 8)]["speedup"][2]
    assert reference[("resnet18", "identity", 8)]["speedup"] == ("1.000", None, {"baseline"})
    # no bound of a positive quantity at or below zero, on any surface (the noisy seeds' 90 %
    # intervals once printed as "105 ± 190")
    for name, table in surfaces.items():
        for key, cells in table.items():
            for metric, (_, bounds, _) in cells.items():
                low_high = _floats(bounds)
                assert low_high is None or low_high[0] > 0, (name, key, metric, bounds)
    assert reference[("conv64x1", "identity", 8)]["bsr"] == ("1.000", None, frozenset())


def test_ns_exactly_where_the_printed_interval_includes_one(store: Store) -> None:
    seen = {True: 0, False: 0}
    for cells in _report_csv(store).values():
        for metric in ("speedup", "bsr"):
            value, bounds, flags = cells.get(metric, ("", None, frozenset()))
            low_high = _floats(bounds)
            if low_high is None:
                continue
            includes = low_high[0] <= 1.0 <= low_high[1]
            assert includes == ("n.s." in flags), (metric, value, bounds, flags)
            seen[includes] += 1
    assert seen[True] >= 2 and seen[False] >= 4  # both verdicts occur in the seed


def test_figures_draw_what_the_reports_print(store: Store) -> None:
    printed = _report_text(store, "markdown")
    data = FigureData(store, run_id="r1")
    # Fig. 6: every speed-up point, its bar and its hollow/cross marks
    fig6 = build_figure("fig06", data)
    points = 0
    for panel in fig6.panels:
        label = panel.title.split(" ")[0]
        for line in panel.lines:
            for x, y, err, weak, mismatch in zip(
                line.xs, line.ys, line.errs, line.weak, line.mismatch, strict=True
            ):
                value, bounds, flags = printed[(label, line.label, int(x))]["speedup"]
                low_high = _floats(bounds)
                assert err is not None and err[1] > 0 and low_high is not None
                # the bar runs between the printed bounds, above zero
                assert y - err[0] == pytest.approx(low_high[0]) and low_high[0] > 0
                assert y + err[1] == pytest.approx(low_high[1])
                assert weak == bool({"n.s.", "n<2"} & flags) and mismatch == ("≠prec" in flags)
                points += 1
    assert points == 8
    # Fig. 12: the seed's CPU is the same everywhere: a non-effect, drawn hollow and hatched on
    # an axis of at least ±5 points, not as bars filling a tiny axis
    reduction = build_figure("fig12", data).panels[1]
    assert reduction.min_span == 5.0 and reduction.series
    assert all(all(s.weak) for s in reduction.series)
    # Figs. 10 and 11: the heatmaps print the reports' cells, intervals and verdicts included
    for name, metric in (("fig10", "ase"), ("fig11", "bsr")):
        for panel in build_figure(name, data).panels:
            for model, texts in zip(panel.rows, panel.texts or [], strict=True):
                for col, text in zip(panel.cols, texts, strict=True):
                    if text is None:
                        continue
                    key = (model, panel.title, int(col.lstrip("b")))
                    _same(parse(text), printed[key][metric])


def test_intervals_print_their_bounds_with_the_digits_they_support() -> None:
    assert format_interval(6.3, 4.14, 9.51) == "6.3 [4.1, 9.6]"  # bounds rounded outwards
    assert format_interval(1.38, 1.046, 1.814) == "1.38 [1.04, 1.82]"  # excludes 1: no tie
    assert format_interval(79.841, 67.3, 92.3) == "80 [67, 93]"
    # a wide interval of a positive quantity: the lower bound keeps its own digits, never 0
    assert format_interval(700.0, 26.8, 18800.0) == "700 [26, 18800]"
    assert format_interval(0.25, 0.001, 60.0) == "0.25 [0.0010, 60]"
    assert format_interval(1344.656, 1.2, 1.5e6) == "1300 [1.2, 1500000]"
    assert format_interval(-0.0001, -0.3, 0.2) == "-0.00010 [-0.30, 0.20]"  # never "-0"
    assert format_interval(1.0, None, None) == "1.000"
    # the estimate keeps two significant digits of its own (issue 46: a speed-up of 6.7 printed
    # as `10 [0.086, 520] n.s.`), the bounds the digits the interval supports
    assert format_interval(6.7, 0.0861, 519.2) == "6.7 [0.086, 520]"
    assert format_interval(0.93, 0.21, 41.0) == "0.93 [0.21, 41]"


def test_values_keep_only_the_digits_their_interval_supports() -> None:
    assert format_with_interval(79.841, 12.5) == "80 ± 13"
    assert format_with_interval(203.0, 232.3) == "200 ± 230"
    assert format_with_interval(0.0505, 0.229) == "0.051 ± 0.23"  # two digits of its own
    assert format_with_interval(0.252, 0.463) == "0.25 ± 0.46"
    assert format_with_interval(1234.5678, 0.996) == "1234.6 ± 1.0"  # 0.996 rounds up a digit
    assert format_with_interval(1.0, None) == "1.000"
    assert round_with_interval(2.2754, 0.0521) == (2.275, 0.052, 3)


def test_console_and_report_agree_without_a_stored_interval(tmp_path: Path) -> None:
    """Rows stored before intervals and df were recorded: both fall back to n - 1 of the
    repetitions and the stored std, the same way."""
    store = Store(tmp_path / "old.duckdb")
    results = []
    for (model, width, compiler), (_, _, tputs) in list(SEED.items())[:3]:
        for batch in tputs:
            r = _result(model, width, compiler, batch)
            r.ci_half_width = None
            r.extra.pop("measure")
            results.append(r)
    store.create_run("r1", "old", "", ["dev1"], len(results))
    store.ingest_results("r1", "dev1", results)
    report, console = _report_csv(store), _console(store)
    assert set(report) == set(console)
    for key, cells in report.items():
        for metric, printed in cells.items():
            _same(console[key][metric], printed)
    assert report[("resnet18", "openvino", 8)]["speedup"][1] is not None


def test_a_throughput_whose_interval_reaches_zero_prints_a_positive_bound(tmp_path: Path) -> None:
    """700 samples/s with a stored half-width of 2300 (two processes far apart): every surface
    shows a lower bound above zero and the console draws it on a log axis."""
    from ngb.sweeps.report import derived

    row = {"throughput_mean": 700.0, "throughput_ci_half": 2300.0, "key": "k",
           "extra": {"measure": {"df": 1}}}  # fmt: skip
    shown = derived.throughput(row)
    assert shown.low is not None and 0 < shown.low < 700 < (shown.high or 0)
    printed = parse(shown.text())
    assert printed[1] is not None and float(printed[1][0]) > 0
