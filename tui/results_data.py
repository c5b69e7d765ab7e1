"""Trial rows from the store -> the Results screen's chart and table data (pure, no Textual).

Every derived number (speed-up, RTR, ASE, BSR, depth slope and retention), its interval and its
verdict ("n.s.", "≠prec") come from ``ngb.sweeps.report.derived``, the module ``ngb report`` and the
figures render too, and are written with ``ngb.sweeps.report.numbers`` (only the digits the interval
supports); this module only selects and groups rows. A "variant" is what one line of a batch
chart compares across compilers: a timm model (``resnet18``) or a block at one width
(``conv w64``). Charts that need data the run does not have (no batch 1 for BSR, a single depth
for the depth chart, no identity baseline) come back as a ``Chart`` with ``note`` set, which the
screen shows instead of an empty plot. Speed-up needs only the baseline at the same batch, so it
is shown wherever identity ran that batch, batch 1 or not.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from ngb.core.records.types import BLOCK_MODELS
from ngb.core.trial.metrics import BASELINE
from ngb.sweeps.report import derived
from ngb.sweeps.report.data import series_names
from ngb.sweeps.report.derived import Derived
from ngb.tui.backend import TrialRow

V = TypeVar("V")


@dataclass
class Chart:
    title: str
    xlabel: str = ""
    ylabel: str = ""
    xticks: list[int] = field(default_factory=list)  # the x values (batches or depths), in order
    series: dict[str, list[float | None]] = field(default_factory=dict)  # name -> y per xtick
    # the printed 95 % interval (low, high) of each point, as ``ngb report`` prints it
    errors: dict[str, list[tuple[float, float] | None]] = field(default_factory=dict)
    reference: float | None = None  # a horizontal line (speed-up and BSR: 1 = as fast as eager)
    matrix: list[list[float | None]] | None = None  # heatmap rows x cols
    row_labels: list[str] = field(default_factory=list)
    cells: list[list[str | None]] | None = None  # heatmap: each cell's text (value [interval])
    subtitle: str = ""
    note: str = ""  # set when there is nothing to draw, saying why
    log_y: bool = False


@dataclass
class Selection:
    family: str = ""
    variant: str = ""
    compilers: list[str] = field(default_factory=list)
    heat_compiler: str = ""  # the ASE heatmap's compiler ("" = the first chosen one)
    log_y: bool | None = None  # None: logarithmic where the values span more than WIDE_RANGE


def throughput(row: TrialRow) -> float | None:
    value = row.get("throughput_mean")
    if isinstance(value, int | float) and value == value and value > 0:
        return float(value)
    return None


def family_of(row: TrialRow) -> str:
    if row.get("model") in BLOCK_MODELS:
        return str(row["model"])
    return str(row.get("family") or row.get("model") or "?")


#: between a model and its DLAS optimisation in the model selector ("digits-vgg · int8-cal")
OPTIMISATION_JOIN = " · "


def model_of(row: TrialRow) -> str:
    """The model as the selector names it, without the optimisation."""
    if row.get("model") in BLOCK_MODELS:
        return f"{row['model']} w{row.get('width')}"
    return str(row.get("model"))


def variant_of(row: TrialRow) -> str:
    """The selector's entry of a row: the model, and its optimisation where it has one (each
    DLAS optimisation is a model of its own here: its compilers side by side, identity under
    the same optimisation as the baseline, its accuracy beside its speed)."""
    optimisation = str(row.get("optimisation") or "none")
    name = model_of(row)
    return name if optimisation == "none" else f"{name}{OPTIMISATION_JOIN}{optimisation}"


def model_part(variant: str) -> str:
    """The model of a selector entry (what ``ngb advise`` answers are keyed by)."""
    return variant.split(OPTIMISATION_JOIN, 1)[0]


def ok_rows(rows: Iterable[TrialRow]) -> list[TrialRow]:
    return [r for r in rows if r.get("status", "ok") == "ok" and throughput(r) is not None]


def families(rows: Sequence[TrialRow]) -> list[str]:
    return sorted({family_of(r) for r in rows})


def variants(rows: Sequence[TrialRow], family: str) -> list[str]:
    found = {
        variant_of(r): (str(r.get("model")), r.get("width") or 0, _optimisation_order(r))
        for r in rows
        if family_of(r) == family
    }
    return sorted(found, key=lambda v: found[v])


def _optimisation_order(row: TrialRow) -> tuple[bool, str]:
    """The model itself first, then its optimisations by name."""
    optimisation = str(row.get("optimisation") or "none")
    return (optimisation != "none", optimisation)


def baseline_first(names: Iterable[str]) -> list[str]:
    """Compiler names in the console's one order: the baseline first, then by name."""
    return sorted(names, key=lambda c: (c != BASELINE, c))


def compilers(rows: Sequence[TrialRow]) -> list[str]:
    return baseline_first({str(r.get("compiler")) for r in rows})


def _depth(row: TrialRow) -> int:
    return int(row.get("depth") or 1)


def shallowest(rows: Sequence[TrialRow], variant: str) -> int:
    return min((_depth(r) for r in rows if variant_of(r) == variant), default=1)


def rows_by_batch(
    rows: Sequence[TrialRow], variant: str, depth: int | None = None
) -> dict[str, dict[int, TrialRow]]:
    """{compiler: {batch: row}} for one variant at one depth (the shallowest by default); a
    compiler measured at two precisions for one batch is two series, "openvino bf16" and
    "openvino fp32" (``report_data.series_names``, as the reports name them)."""
    depth = depth if depth is not None else shallowest(rows, variant)
    mine = [r for r in rows if variant_of(r) == variant and _depth(r) == depth]
    names = series_names(mine, BASELINE)
    out: dict[str, dict[int, TrialRow]] = {}
    for r in mine:
        out.setdefault(names[id(r)], {})[int(r["batch"])] = r
    return out


def rows_by_depth(
    rows: Sequence[TrialRow], variant: str, batch: int
) -> dict[str, dict[int, TrialRow]]:
    mine = [r for r in rows if variant_of(r) == variant and int(r["batch"]) == batch]
    names = series_names(mine, BASELINE, x=_depth)
    out: dict[str, dict[int, TrialRow]] = {}
    for r in mine:
        out.setdefault(names[id(r)], {})[_depth(r)] = r
    return out


def _keep(per: Mapping[str, V], chosen: Sequence[str]) -> dict[str, V]:
    """The chosen series, the baseline first and the rest by name: a chart's series and legend
    keep one order whatever order the store returned the rows in."""
    return {c: per[c] for c in baseline_first(per) if not chosen or c.split(" ")[0] in chosen}


def _xticks(per: Mapping[str, Mapping[int, object]]) -> list[int]:
    return sorted({x for series in per.values() for x in series})


#: a chart whose positive values span more than this factor is drawn on a log axis unless the
#: operator chose (``l``): on a linear axis, series 50x apart sit on one row and hide each other
WIDE_RANGE = 20.0


def _bounds(value: Derived) -> tuple[float, float] | None:
    printed = value.printed
    return (printed.low, printed.high) if printed is not None else None


def _fill(chart: Chart, per: Mapping[str, Mapping[int, Derived]], log_y: bool | None) -> None:
    """Series and their error bars (the printed interval of each value), aligned on the union
    of x values (None where missing); the axis is logarithmic as chosen, or where wide."""
    chart.xticks = _xticks(per)
    for name, values in per.items():
        chart.series[name] = [values[x].value if x in values else None for x in chart.xticks]
        chart.errors[name] = [_bounds(values[x]) if x in values else None for x in chart.xticks]
    chart.log_y = wide(chart) if log_y is None else log_y


def wide(chart: Chart) -> bool:
    """Whether the chart's positive values span more than ``WIDE_RANGE``."""
    values = [y for ys in chart.series.values() for y in ys if y is not None and y > 0]
    return bool(values) and max(values) / min(values) > WIDE_RANGE


def _fixed(sel: Selection, depth: int | None = None, batch: int | None = None) -> str:
    """The axes held fixed, for the title: what this chart does not vary."""
    parts = [sel.variant]
    if depth is not None:
        parts.append(f"depth {depth}")
    if batch is not None:
        parts.append(f"batch {batch}")
    return ", ".join(p for p in parts if p)


def throughput_chart(rows: Sequence[TrialRow], sel: Selection) -> Chart:
    depth = shallowest(rows, sel.variant)
    per = _keep(rows_by_batch(rows, sel.variant, depth), sel.compilers)
    chart = Chart(f"Throughput vs batch ({_fixed(sel, depth)})", "batch", "samples/s [95% CI]")
    if not per:
        chart.note = "no successful trials for this selection"
        return chart
    _fill(
        chart,
        {c: {b: derived.throughput(r) for b, r in v.items()} for c, v in per.items()},
        sel.log_y,
    )
    return chart


def speedups(
    per: Mapping[str, Mapping[int, TrialRow]], base: Mapping[int, TrialRow]
) -> dict[str, dict[int, Derived]]:
    """Speed-up over the baseline at every batch both have (no batch 1 needed)."""
    return {
        c: {b: derived.speedup(r, base[b]) for b, r in v.items() if b in base}
        for c, v in per.items()
    }


def speedup_chart(rows: Sequence[TrialRow], sel: Selection) -> Chart:
    depth = shallowest(rows, sel.variant)
    every = rows_by_batch(rows, sel.variant, depth)
    base = every.get(BASELINE)
    chart = Chart(
        f"Speed-up over {BASELINE} vs batch ({_fixed(sel, depth)})", "batch", "x identity [95% CI]"
    )
    chart.reference = 1.0
    if not base:
        chart.note = f"no {BASELINE} (torch eager) trials to compare with"
        return chart
    per = {c: v for c, v in speedups(_keep(every, sel.compilers), base).items() if v}
    _fill(chart, per, sel.log_y)
    return chart


def batch_points(
    per: Mapping[str, Mapping[int, TrialRow]],
) -> dict[str, dict[int, derived.BatchPoint]]:
    """{compiler: {batch: every batch-scaling number}}
    (``ngb.sweeps.report.derived.batch_points``)."""
    out: dict[str, dict[int, derived.BatchPoint]] = {}
    for point in derived.batch_points(per, BASELINE):
        out.setdefault(point.compiler, {})[point.batch] = point
    return out


def bsr_chart(rows: Sequence[TrialRow], sel: Selection) -> Chart:
    depth = shallowest(rows, sel.variant)
    per = rows_by_batch(rows, sel.variant, depth)
    base = per.get(BASELINE)
    chart = Chart(f"BSR vs batch ({_fixed(sel, depth)})", "batch", "BSR [95% CI] (1 = as eager)")
    chart.reference = 1.0
    if not base:
        chart.note = f"no {BASELINE} (torch eager) trials to compare with"
        return chart
    if 1 not in base:
        chart.note = f"BSR needs a batch-1 throughput of {BASELINE}"
        return chart
    points = batch_points(_keep(per, sel.compilers) | {BASELINE: base})
    values = {
        c: {b: p.bsr for b, p in v.items() if p.bsr is not None}
        for c, v in points.items()
        if not sel.compilers or c in sel.compilers
    }
    missing = [c for c in _keep(per, sel.compilers) if 1 not in per[c]]
    values = {c: v for c, v in values.items() if v}
    if not values:
        chart.note = "BSR needs a batch-1 throughput of " + (", ".join(missing) or "a compiler")
        return chart
    _fill(chart, values, sel.log_y)
    if missing:
        chart.subtitle = f"no batch-1 throughput: {', '.join(missing)}"
    return chart


def heat_compiler(rows: Sequence[TrialRow], sel: Selection) -> str:
    if sel.heat_compiler:
        return sel.heat_compiler
    chosen = [c for c in sel.compilers if c != BASELINE] or sel.compilers
    return (chosen or [c for c in compilers(rows) if c != BASELINE] or [BASELINE])[0]


def ase_heatmap(rows: Sequence[TrialRow], sel: Selection) -> Chart:
    """ASE of one compiler, rows = widths (blocks) or models (timm family), columns = batches;
    each cell carries its interval (``Chart.cells``: the text the cell prints)."""
    compiler = heat_compiler(rows, sel)
    chart = Chart(f"ASE of {compiler}: {sel.family} (rows) x batch (columns)", "batch", "")
    table: dict[str, dict[int, Derived]] = {}
    missing = []
    for variant in variants(rows, sel.family):
        mine = rows_by_batch(rows, variant).get(compiler)
        if not mine:
            continue
        if 1 not in mine:
            missing.append(variant)
            continue
        table[variant] = {b: derived.ase(r, mine[1], b) for b, r in mine.items()}
    if not table:
        chart.note = (
            f"ASE needs a batch-1 throughput of {compiler} on {', '.join(missing)}"
            if missing
            else f"no {compiler} trials for {sel.family}"
        )
        return chart
    chart.xticks = _xticks(table)
    chart.row_labels = list(table)
    chart.matrix = [[table[v][b].value if b in table[v] else None for b in chart.xticks]
                    for v in table]  # fmt: skip
    chart.cells = [[table[v][b].text() if b in table[v] else None for b in chart.xticks]
                   for v in table]  # fmt: skip
    depths = sorted({shallowest(rows, v) for v in table})
    chart.subtitle = (
        f"shallowest depth ({', '.join(map(str, depths))}); [95% interval]; 1 = linear scaling"
    )
    return chart


def no_depth_series(variant: str, mine: Sequence[TrialRow], depths: set[int]) -> str:
    """Why the Depth tab has nothing to draw for ``variant``: a model is not a stack of blocks,
    or the blocks ran at one depth (the demo's MHA block)."""
    blocks = " and ".join(BLOCK_MODELS)
    if not mine or str(mine[0].get("model")) not in BLOCK_MODELS:
        return (
            f"no depth series for {variant or 'this model'}: depth scaling is measured on the "
            f"{blocks} blocks at two depths or more (`depths = [1, 2]` in a [[matrix]])"
        )
    only = ", ".join(map(str, sorted(depths)))
    return (
        f"no depth series in this run: {variant} ran at depth {only} only; depth scaling needs "
        f"the {blocks} blocks at two depths or more (`depths = [1, 2]` in a [[matrix]])"
    )


def depth_chart(rows: Sequence[TrialRow], sel: Selection) -> Chart:
    """Speed-up vs depth per compiler at the largest batch, with slope and retention."""
    mine = [r for r in rows if variant_of(r) == sel.variant]
    chart = Chart(f"Speed-up vs depth ({sel.variant})", "depth", "x identity [95% CI]")
    chart.reference = 1.0
    depths = {_depth(r) for r in mine}
    if len(depths) < 2:
        chart.note = no_depth_series(sel.variant, mine, depths)
        return chart
    batch = max(int(r["batch"]) for r in mine)
    chart.title = f"Speed-up vs depth ({_fixed(sel, batch=batch)})"
    per = rows_by_depth(rows, sel.variant, batch)
    base = per.get(BASELINE)
    if not base:
        chart.note = f"no {BASELINE} (torch eager) trials to compare with"
        return chart
    notes, plotted = [], {}
    for c, values in _keep(per, sel.compilers).items():
        if c == BASELINE:  # itself: exactly 1 at every depth (the reference line)
            continue
        shared = sorted(set(values) & set(base))
        if len(shared) < 2:
            notes.append(f"{c}: measured at one depth shared with {BASELINE}")
            continue
        slope, kept = derived.depth_trend(
            shared, [values[d] for d in shared], [base[d] for d in shared]
        )
        plotted[c] = {d: derived.speedup(values[d], base[d]) for d in shared}
        kept_text = kept.text() if kept is not None else "--"
        verdict = "".join(f" {f}" for f in slope.flags)
        notes.append(f"{c}: slope {slope.text(False)}/block{verdict}, retention {kept_text}")
    _fill(chart, plotted, sel.log_y)
    chart.subtitle = "; ".join(notes)
    if not chart.series:
        chart.note = chart.subtitle or "nothing to plot"
    return chart


@dataclass(frozen=True)
class ChartKind:
    """One chart tab of the Results screen: its tab title and how to build it from trial rows."""

    title: str
    build: Callable[[Sequence[TrialRow], Selection], Chart]
    heatmap: bool = False  # drawn as a grid of values with a colour scale, not as a plot


#: The Results screen's chart tabs, in order (tab id -> kind). Adding a chart is one entry here.
CHARTS: dict[str, ChartKind] = {
    "throughput": ChartKind("Throughput", throughput_chart),
    "speedup": ChartKind("Speed-up", speedup_chart),
    "bsr": ChartKind("BSR", bsr_chart),
    "ase": ChartKind("ASE heatmap", ase_heatmap, heatmap=True),
    "depth": ChartKind("Depth", depth_chart),
}

TABLE_COLUMNS = (
    "model",
    "compiler",
    "batch",
    "depth",
    "n",
    "throughput [95%]",
    "speed-up [95%]",
    "RTR",
    "ASE",
    "BSR",
    "flags",
)
#: accuracy beside throughput (issue 42), after the speed-up, where a row of the table carries
#: ``extra["accuracy"]``: the compiled model's top-1 (%) on the labelled set with its Wilson
#: interval, and its agreement (%) with eager fp32's top-1 on the same samples -- what a bf16 or
#: int8 row's speed-up needs beside it. Absent where no row of the table has an accuracy pass.
ACCURACY_COLUMNS = ("top-1 [95%]", "agree [95%]")
#: columns whose cells are numbers (right-aligned, sorted numerically)
NUMERIC_COLUMNS = frozenset(TABLE_COLUMNS[2:10]) | frozenset(ACCURACY_COLUMNS)
_AFTER = TABLE_COLUMNS.index("speed-up [95%]") + 1  # where the accuracy columns go


def _text(value: Derived | None) -> str:
    return value.text() if value is not None and math.isfinite(value.value) else "--"


def accuracy_cells(row: TrialRow) -> tuple[str, str]:
    """The row's top-1 and agreement with eager fp32 as the reports print them (``derived``);
    ``--`` where the trial ran no accuracy pass."""
    return _text(derived.top1(row)), _text(derived.agreement(row))


def results_table(
    rows: Sequence[TrialRow], sel: Selection
) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """The Results table: its columns (``TABLE_COLUMNS``, with ``ACCURACY_COLUMNS`` after the
    speed-up where a row shown carries accuracy) and ``metrics_table``'s rows to match."""
    shown = _table_rows(rows, sel)
    if not any(derived.top1(row) is not None for _, row in shown):
        return TABLE_COLUMNS, [cells for cells, _ in shown]
    columns = (*TABLE_COLUMNS[:_AFTER], *ACCURACY_COLUMNS, *TABLE_COLUMNS[_AFTER:])
    return columns, [
        (*cells[:_AFTER], *accuracy_cells(row), *cells[_AFTER:]) for cells, row in shown
    ]


def metrics_table(rows: Sequence[TrialRow], sel: Selection) -> list[tuple[str, ...]]:
    """The same numbers as the charts and ``ngb report bsr``, each with its interval and
    verdict, one row per (variant, depth, compiler, batch): "n.s." marks a value whose printed
    interval includes 1, "≠prec" a ratio between results of different precisions."""
    return [cells for cells, _ in _table_rows(rows, sel)]


def _table_rows(rows: Sequence[TrialRow], sel: Selection) -> list[tuple[tuple[str, ...], TrialRow]]:
    """``metrics_table``'s rows, each with the trial row it shows."""
    out: list[tuple[tuple[str, ...], TrialRow]] = []
    for variant in variants(rows, sel.family):
        depths = sorted({_depth(r) for r in rows if variant_of(r) == variant})
        for depth in depths:
            per = rows_by_batch(rows, variant, depth)
            ordered = {c: per[c] for c in baseline_first(per)}
            points = batch_points(ordered)
            base = per.get(BASELINE, {})
            for c, by_batch in points.items():
                if sel.compilers and c.split(" ")[0] not in sel.compilers:  # "openvino bf16"
                    continue
                for b, p in sorted(by_batch.items()):
                    flags = list(derived.result_flags(p.row))
                    if p.speedup is not None and derived.PRECISION_MARK in p.speedup.flags:
                        ran, other = derived.precision_of(p.row), derived.precision_of(base[b])
                        flags.append(f"{ran} vs {other}")
                    n = p.row.get("repetitions") or len(p.row.get("samples") or ()) or "?"
                    cells = (
                        variant,
                        c,
                        str(b),
                        str(depth),
                        str(n),
                        _text(p.throughput),
                        _text(p.speedup),
                        _text(p.rtr),
                        _text(p.ase),
                        _text(p.bsr),
                        " ".join(flags),
                    )
                    out.append((cells, p.row))
    return out
