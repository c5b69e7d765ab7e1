"""Trial rows from the store -> the Results screen's chart and table data (pure, no Textual).

The arithmetic is ``ngb.core.metrics`` (the paper's definitions); this module only selects and
groups rows, and keeps each number's spread beside it (``ngb.tui.uncertainty``). A "variant" is
what one line of a batch chart compares across compilers: a timm model (``resnet18``) or a block at
one width (``conv w64``). Charts that need data the run does not have (no batch 1 for BSR, a single
depth for the depth chart, no identity baseline) come back as a ``Chart`` with ``note`` set, which
the screen shows instead of an empty plot. Speed-up needs only the baseline at the same batch, so
it is shown wherever identity ran that batch, batch 1 or not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ngb.core import metrics
from ngb.core.errors import NgbError
from ngb.core.metrics import BASELINE
from ngb.core.types import BLOCK_MODELS
from ngb.sweeps.report_data import PRECISION_MARK
from ngb.tui.uncertainty import (
    Measured,
    digits_for,
    fmt,
    fmt_pm,
    measured,
    precision_differs,
    ratio,
)
from ngb.tui.uncertainty import significance_flag as ns_flag

Row = Mapping[str, Any]


@dataclass
class Chart:
    title: str
    xlabel: str = ""
    ylabel: str = ""
    xticks: list[Any] = field(default_factory=list)  # the x values (batches or depths), in order
    series: dict[str, list[float | None]] = field(default_factory=dict)  # name -> y per xtick
    errors: dict[str, list[float | None]] = field(default_factory=dict)  # 95 % half-widths
    reference: float | None = None  # a horizontal line (speed-up and BSR: 1 = as fast as eager)
    matrix: list[list[float | None]] | None = None  # heatmap rows x cols
    row_labels: list[str] = field(default_factory=list)
    subtitle: str = ""
    note: str = ""  # set when there is nothing to draw, saying why
    log_y: bool = False


@dataclass
class Selection:
    family: str = ""
    variant: str = ""
    compilers: list[str] = field(default_factory=list)
    heat_compiler: str = ""  # the ASE heatmap's compiler ("" = the first chosen one)
    log_y: bool = False


def throughput(row: Row) -> float | None:
    for key in ("throughput_mean", "throughput"):
        value = row.get(key)
        if isinstance(value, int | float) and value == value and value > 0:
            return float(value)
    return None


def value_of(row: Row) -> Measured:
    return measured(row, throughput(row) or 0.0)


def family_of(row: Row) -> str:
    if row.get("model") in BLOCK_MODELS:
        return str(row["model"])
    return str(row.get("family") or row.get("model") or "?")


def variant_of(row: Row) -> str:
    if row.get("model") in BLOCK_MODELS:
        return f"{row['model']} w{row.get('width')}"
    return str(row.get("model"))


def ok_rows(rows: Iterable[Row]) -> list[Row]:
    return [
        r
        for r in rows
        if r.get("status", "ok") == "ok"
        and throughput(r) is not None
        and (r.get("optimisation") or "none") == "none"
    ]


def families(rows: Sequence[Row]) -> list[str]:
    return sorted({family_of(r) for r in rows})


def variants(rows: Sequence[Row], family: str) -> list[str]:
    found = {
        variant_of(r): (r.get("width") or 0, str(r.get("model")))
        for r in rows
        if family_of(r) == family
    }
    return sorted(found, key=lambda v: (found[v][1], found[v][0]))


def compilers(rows: Sequence[Row]) -> list[str]:
    names = {str(r.get("compiler")) for r in rows}
    return sorted(names, key=lambda c: (c != BASELINE, c))


def _depth(row: Row) -> int:
    return int(row.get("depth") or 1)


def shallowest(rows: Sequence[Row], variant: str) -> int:
    return min((_depth(r) for r in rows if variant_of(r) == variant), default=1)


def measured_by_batch(
    rows: Sequence[Row], variant: str, depth: int | None = None
) -> dict[str, dict[int, Measured]]:
    """{compiler: {batch: Measured}} for one variant at one depth (the shallowest by default)."""
    depth = depth if depth is not None else shallowest(rows, variant)
    out: dict[str, dict[int, Measured]] = {}
    for r in rows:
        if variant_of(r) == variant and _depth(r) == depth:
            out.setdefault(str(r["compiler"]), {})[int(r["batch"])] = value_of(r)
    return out


def by_batch(
    rows: Sequence[Row], variant: str, depth: int | None = None
) -> dict[str, dict[int, float]]:
    """{compiler: {batch: throughput}} (the means of ``measured_by_batch``)."""
    per = measured_by_batch(rows, variant, depth)
    return {c: {b: m.mean for b, m in v.items()} for c, v in per.items()}


def by_depth(rows: Sequence[Row], variant: str, batch: int) -> dict[str, dict[int, Measured]]:
    out: dict[str, dict[int, Measured]] = {}
    for r in rows:
        if variant_of(r) == variant and int(r["batch"]) == batch:
            out.setdefault(str(r["compiler"]), {})[_depth(r)] = value_of(r)
    return out


def _keep(per: Mapping[str, Any], chosen: Sequence[str]) -> dict[str, Any]:
    return {c: per[c] for c in per if not chosen or c in chosen}


def _xticks(per: Mapping[str, Mapping[int, Any]]) -> list[int]:
    return sorted({x for series in per.values() for x in series})


def _fill(chart: Chart, per: Mapping[str, Mapping[int, Measured]]) -> None:
    """Series and their error bars, aligned on the union of x values (None where missing)."""
    chart.xticks = _xticks(per)
    for name, values in per.items():
        chart.series[name] = [values[x].mean if x in values else None for x in chart.xticks]
        chart.errors[name] = [values[x].half if x in values else None for x in chart.xticks]


def _fixed(sel: Selection, depth: int | None = None, batch: int | None = None) -> str:
    """The axes held fixed, for the title: what this chart does not vary."""
    parts = [sel.variant]
    if depth is not None:
        parts.append(f"depth {depth}")
    if batch is not None:
        parts.append(f"batch {batch}")
    return ", ".join(p for p in parts if p)


def throughput_chart(rows: Sequence[Row], sel: Selection) -> Chart:
    depth = shallowest(rows, sel.variant)
    per = _keep(measured_by_batch(rows, sel.variant, depth), sel.compilers)
    chart = Chart(f"Throughput vs batch ({_fixed(sel, depth)})", "batch", "samples/s ±95% CI")
    chart.log_y = sel.log_y
    if not per:
        chart.note = "no successful trials for this selection"
        return chart
    _fill(chart, per)
    return chart


def speedups(
    per: Mapping[str, Mapping[int, Measured]], base: Mapping[int, Measured]
) -> dict[str, dict[int, Measured]]:
    """Speed-up over the baseline at every batch both have (no batch 1 needed)."""
    return {c: {b: ratio(m, base[b]) for b, m in v.items() if b in base} for c, v in per.items()}


def speedup_chart(rows: Sequence[Row], sel: Selection) -> Chart:
    depth = shallowest(rows, sel.variant)
    every = measured_by_batch(rows, sel.variant, depth)
    base = every.get(BASELINE)
    chart = Chart(
        f"Speed-up over {BASELINE} vs batch ({_fixed(sel, depth)})", "batch", "x identity ±95%"
    )
    chart.reference, chart.log_y = 1.0, sel.log_y
    if not base:
        chart.note = f"no {BASELINE} (torch eager) trials to compare with"
        return chart
    per = {c: v for c, v in speedups(_keep(every, sel.compilers), base).items() if v}
    _fill(chart, per)
    return chart


def bsr_chart(rows: Sequence[Row], sel: Selection) -> Chart:
    depth = shallowest(rows, sel.variant)
    per = by_batch(rows, sel.variant, depth)
    base = per.get(BASELINE)
    chart = Chart(f"BSR vs batch ({_fixed(sel, depth)})", "batch", "BSR (1 = scales as eager)")
    chart.reference, chart.log_y = 1.0, sel.log_y
    if not base:
        chart.note = f"no {BASELINE} (torch eager) trials to compare with"
        return chart
    try:
        tables = {c: metrics.bsr_table(v, base, c) for c, v in _keep(per, sel.compilers).items()}
    except NgbError as exc:
        chart.note = str(exc)
        return chart
    _fill(chart, {c: {b: Measured(v) for b, v in t.items()} for c, t in tables.items()})
    chart.errors = {}  # BSR is a ratio of ratios of means: no interval is claimed for it
    return chart


def heat_compiler(rows: Sequence[Row], sel: Selection) -> str:
    if sel.heat_compiler:
        return sel.heat_compiler
    chosen = [c for c in sel.compilers if c != BASELINE] or sel.compilers
    return (chosen or [c for c in compilers(rows) if c != BASELINE] or [BASELINE])[0]


def ase_heatmap(rows: Sequence[Row], sel: Selection) -> Chart:
    """ASE of one compiler, rows = widths (blocks) or models (timm family), columns = batches."""
    compiler = heat_compiler(rows, sel)
    chart = Chart(f"ASE of {compiler}: {sel.family} (rows) x batch (columns)", "batch", "")
    table: dict[str, dict[int, float]] = {}
    try:
        for variant in variants(rows, sel.family):
            tps = by_batch(rows, variant).get(compiler)
            if tps:
                table[variant] = metrics.ase_table(tps, f"{compiler} on {variant}")
    except NgbError as exc:
        chart.note = str(exc)
        return chart
    if not table:
        chart.note = f"no {compiler} trials for {sel.family}"
        return chart
    chart.xticks = _xticks(table)
    chart.row_labels = list(table)
    chart.matrix = [[table[v].get(b) for b in chart.xticks] for v in table]
    depths = sorted({shallowest(rows, v) for v in table})
    chart.subtitle = f"shallowest depth ({', '.join(map(str, depths))}); 1 = linear scaling"
    return chart


def depth_chart(rows: Sequence[Row], sel: Selection) -> Chart:
    """Speed-up vs depth per compiler at the largest batch, with slope and retention."""
    mine = [r for r in rows if variant_of(r) == sel.variant]
    chart = Chart(f"Speed-up vs depth ({sel.variant})", "depth", "x identity ±95%")
    chart.reference, chart.log_y = 1.0, sel.log_y
    depths = {_depth(r) for r in mine}
    if len(depths) < 2:
        chart.note = "depth scaling needs a block sweep with at least two depths"
        return chart
    batch = max(int(r["batch"]) for r in mine)
    chart.title = f"Speed-up vs depth ({_fixed(sel, batch=batch)})"
    per = by_depth(rows, sel.variant, batch)
    base = per.get(BASELINE)
    if not base:
        chart.note = f"no {BASELINE} (torch eager) trials to compare with"
        return chart
    notes, plotted = [], {}
    for c, values in _keep(per, sel.compilers).items():
        try:
            result = metrics.depth_metrics(
                {d: m.mean for d, m in values.items()}, {d: m.mean for d, m in base.items()}
            )
        except NgbError as exc:
            notes.append(f"{c}: {exc}")
            continue
        plotted[c] = {d: ratio(m, base[d]) for d, m in values.items() if d in base}
        kept = result["retention"]
        kept_text = f"{kept:.2f}" if isinstance(kept, float) else "--"
        notes.append(f"{c}: slope {result['slope']:+.3f}/block, retention {kept_text}")
    _fill(chart, plotted)
    chart.subtitle = "; ".join(notes)
    if not chart.series:
        chart.note = chart.subtitle or "nothing to plot"
    return chart


@dataclass(frozen=True)
class ChartKind:
    """One chart tab of the Results screen: its tab title and how to build it from trial rows."""

    title: str
    build: Callable[[Sequence[Row], Selection], Chart]
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
    "throughput ±95%",
    "speed-up ±95%",
    "RTR",
    "ASE",
    "BSR",
    "flags",
)
#: columns whose cells are numbers (right-aligned, sorted numerically)
NUMERIC_COLUMNS = frozenset(TABLE_COLUMNS[2:10])


def _ratios(per: Mapping[str, Mapping[int, float]]) -> dict[str, dict[int, dict[str, float]]]:
    """RTR / ASE / BSR per compiler and batch where batch 1 was measured (else left out)."""
    out: dict[str, dict[int, dict[str, float]]] = {}
    base = per.get(BASELINE)
    for c, tps in per.items():
        try:
            table = metrics.batch_metrics({c: tps, BASELINE: base} if base else {c: tps})[c]
        except NgbError:
            continue  # no batch 1 for this compiler: RTR/ASE/BSR cannot be told
        out[c] = {b: {k: v for k, v in m.items() if v is not None} for b, m in table.items()}
    return out


def metrics_table(rows: Sequence[Row], sel: Selection) -> list[tuple[str, ...]]:
    """The same numbers as the charts with their spread, one row per (variant, depth, compiler,
    batch); "n.s." marks a speed-up not significantly different from 1 (its 95 % bootstrap
    interval includes 1), "≠prec" one between results of different precisions."""
    out: list[tuple[str, ...]] = []
    for variant in variants(rows, sel.family):
        depths = sorted({_depth(r) for r in rows if variant_of(r) == variant})
        for depth in depths:
            per = measured_by_batch(rows, variant, depth)
            base = per.get(BASELINE, {})
            ratios = _ratios({c: {b: m.mean for b, m in v.items()} for c, v in per.items()})
            digits = digits_for([m.mean for v in per.values() for m in v.values()])
            for c in sorted(per, key=lambda c: (c != BASELINE, c)):
                if sel.compilers and c not in sel.compilers:
                    continue
                for b, m in sorted(per[c].items()):
                    extra = ratios.get(c, {}).get(b, {})
                    speed, flags = "", list(m.flags)
                    if b in base and c != BASELINE:
                        note = ns_flag(m, base[b])
                        if precision_differs(m, base[b]):
                            # the speed-up includes the number format: say so beside it
                            note = f"{note} {PRECISION_MARK}".strip()
                            flags.append(f"{m.precision} vs {base[b].precision}")
                        speed = fmt_pm(ratio(m, base[b]), 3, note)
                    out.append(
                        (
                            variant,
                            c,
                            str(b),
                            str(depth),
                            str(m.n or "?"),
                            fmt_pm(m, digits),
                            speed or ("1 (baseline)" if c == BASELINE else "--"),
                            fmt(extra.get("rtr"), 3),
                            fmt(extra.get("ase"), 3),
                            fmt(extra.get("bsr"), 3),
                            " ".join(flags),
                        )
                    )
    return out
