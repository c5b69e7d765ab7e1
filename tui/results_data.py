"""Trial rows from the store -> the Results screen's chart and table data (pure, no Textual).

The arithmetic is ``ngb.core.metrics`` (the paper's definitions); this module only selects and
groups rows. A "variant" is what one line of a batch chart compares across compilers: a timm model
(``resnet18``) or a block at one width (``conv w64``). Charts that need data the run does not have
(no batch 1 for BSR, a single depth for the depth chart, no identity baseline) come back as a
``Chart`` with ``note`` set, which the screen shows instead of an empty plot.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ngb.core import metrics
from ngb.core.errors import NgbError
from ngb.core.metrics import BASELINE
from ngb.core.types import BLOCK_MODELS


@dataclass
class Chart:
    title: str
    xlabel: str = ""
    ylabel: str = ""
    xticks: list[Any] = field(default_factory=list)  # the x values (batches or depths), in order
    series: dict[str, list[float | None]] = field(default_factory=dict)  # name -> y per xtick
    matrix: list[list[float]] | None = None  # heatmap rows x cols
    row_labels: list[str] = field(default_factory=list)
    subtitle: str = ""
    note: str = ""  # set when there is nothing to draw, saying why


@dataclass
class Selection:
    family: str = ""
    variant: str = ""
    compilers: list[str] = field(default_factory=list)


def throughput(row: Mapping[str, Any]) -> float | None:
    for key in ("throughput_mean", "throughput"):
        value = row.get(key)
        if isinstance(value, int | float) and value == value and value > 0:
            return float(value)
    return None


def family_of(row: Mapping[str, Any]) -> str:
    if row.get("model") in BLOCK_MODELS:
        return str(row["model"])
    return str(row.get("family") or row.get("model") or "?")


def variant_of(row: Mapping[str, Any]) -> str:
    if row.get("model") in BLOCK_MODELS:
        return f"{row['model']} w{row.get('width')}"
    return str(row.get("model"))


def ok_rows(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [
        r
        for r in rows
        if r.get("status", "ok") == "ok"
        and throughput(r) is not None
        and (r.get("optimisation") or "none") == "none"
    ]


def families(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    return sorted({family_of(r) for r in rows})


def variants(rows: Sequence[Mapping[str, Any]], family: str) -> list[str]:
    found = {
        variant_of(r): (r.get("width") or 0, str(r.get("model")))
        for r in rows
        if family_of(r) == family
    }
    return sorted(found, key=lambda v: (found[v][1], found[v][0]))


def compilers(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    names = {str(r.get("compiler")) for r in rows}
    return sorted(names, key=lambda c: (c != BASELINE, c))


def _depth(row: Mapping[str, Any]) -> int:
    return int(row.get("depth") or 1)


def by_batch(
    rows: Sequence[Mapping[str, Any]], variant: str, depth: int | None = None
) -> dict[str, dict[int, float]]:
    """{compiler: {batch: throughput}} for one variant at one depth (the shallowest by default)."""
    mine = [r for r in rows if variant_of(r) == variant]
    if not mine:
        return {}
    depth = depth if depth is not None else min(_depth(r) for r in mine)
    out: dict[str, dict[int, float]] = {}
    for r in mine:
        if _depth(r) == depth:
            out.setdefault(str(r["compiler"]), {})[int(r["batch"])] = throughput(r) or 0.0
    return out


def by_depth(
    rows: Sequence[Mapping[str, Any]], variant: str, batch: int
) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    for r in rows:
        if variant_of(r) == variant and int(r["batch"]) == batch:
            out.setdefault(str(r["compiler"]), {})[_depth(r)] = throughput(r) or 0.0
    return out


def _keep(per: Mapping[str, Any], chosen: Sequence[str]) -> dict[str, Any]:
    return {c: per[c] for c in per if not chosen or c in chosen}


def _xticks(per: Mapping[str, Mapping[int, Any]]) -> list[int]:
    return sorted({x for series in per.values() for x in series})


def _align(values: Mapping[int, float], xs: Sequence[int]) -> list[float | None]:
    return [values.get(x) for x in xs]


def throughput_chart(rows: Sequence[Mapping[str, Any]], sel: Selection) -> Chart:
    per = _keep(by_batch(rows, sel.variant), sel.compilers)
    chart = Chart(f"Throughput vs batch: {sel.variant}", "batch", "samples/s")
    if not per:
        chart.note = "no successful trials for this selection"
        return chart
    chart.xticks = _xticks(per)
    chart.series = {c: _align(v, chart.xticks) for c, v in per.items()}
    return chart


def _with_baseline(
    rows: Sequence[Mapping[str, Any]], sel: Selection
) -> tuple[dict[str, dict[int, float]], dict[int, float] | None]:
    per = by_batch(rows, sel.variant)
    return _keep(per, sel.compilers), per.get(BASELINE)


def speedup_chart(rows: Sequence[Mapping[str, Any]], sel: Selection) -> Chart:
    per, base = _with_baseline(rows, sel)
    chart = Chart(f"Speed-up over {BASELINE}: {sel.variant}", "batch", "x identity")
    if not base:
        chart.note = f"no {BASELINE} (torch eager) trials to compare with"
        return chart
    tables = {c: metrics.speedup_table(v, base) for c, v in per.items()}
    chart.xticks = _xticks(tables)
    chart.series = {c: _align(v, chart.xticks) for c, v in tables.items() if v}
    return chart


def bsr_chart(rows: Sequence[Mapping[str, Any]], sel: Selection) -> Chart:
    per, base = _with_baseline(rows, sel)
    chart = Chart(f"BSR vs batch: {sel.variant}", "batch", "BSR")
    if not base:
        chart.note = f"no {BASELINE} (torch eager) trials to compare with"
        return chart
    try:
        tables = {c: metrics.bsr_table(v, base, c) for c, v in per.items()}
    except NgbError as exc:
        chart.note = str(exc)
        return chart
    chart.xticks = _xticks(tables)
    chart.series = {c: _align(v, chart.xticks) for c, v in tables.items()}
    return chart


def ase_heatmap(rows: Sequence[Mapping[str, Any]], sel: Selection) -> Chart:
    """ASE of one compiler, rows = widths (blocks) or models (timm family), columns = batches."""
    chosen = [c for c in sel.compilers if c != BASELINE] or sel.compilers or [BASELINE]
    compiler = chosen[0]
    chart = Chart(f"ASE heatmap ({compiler}): {sel.family}", "batch", "")
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
    chart.matrix = [[table[v].get(b, 0.0) for b in chart.xticks] for v in table]
    chart.subtitle = "rows: " + ", ".join(chart.row_labels)
    return chart


def depth_chart(rows: Sequence[Mapping[str, Any]], sel: Selection) -> Chart:
    """Speed-up vs depth per compiler at the largest batch, with slope and retention."""
    mine = [r for r in rows if variant_of(r) == sel.variant]
    chart = Chart(f"Speed-up vs depth: {sel.variant}", "depth", "x identity")
    depths = {_depth(r) for r in mine}
    if len(depths) < 2:
        chart.note = "depth scaling needs a block sweep with at least two depths"
        return chart
    batch = max(int(r["batch"]) for r in mine)
    per = by_depth(rows, sel.variant, batch)
    base = per.get(BASELINE)
    if not base:
        chart.note = f"no {BASELINE} (torch eager) trials to compare with"
        return chart
    notes = []
    for c, tps in _keep(per, sel.compilers).items():
        try:
            result = metrics.depth_metrics(tps, base)
        except NgbError as exc:
            notes.append(f"{c}: {exc}")
            continue
        speedups: dict[int, float] = result["speedups"]  # type: ignore[assignment]
        if not chart.xticks:
            chart.xticks = sorted(depths)
        chart.series[c] = _align(speedups, chart.xticks)
        kept = result["retention"]
        kept_text = f"{kept:.2f}" if isinstance(kept, float) else "--"
        notes.append(f"{c}: slope {result['slope']:+.3f}/block, retention {kept_text}")
    chart.title += f" (batch {batch})"
    chart.subtitle = "; ".join(notes)
    if not chart.series:
        chart.note = chart.subtitle or "nothing to plot"
    return chart


TABLE_COLUMNS = (
    "model",
    "compiler",
    "batch",
    "depth",
    "throughput",
    "speed-up",
    "RTR",
    "ASE",
    "BSR",
)


def metrics_table(rows: Sequence[Mapping[str, Any]], sel: Selection) -> list[tuple[str, ...]]:
    """The same numbers as the charts, one row per (variant, depth, compiler, batch)."""
    out: list[tuple[str, ...]] = []
    for variant in variants(rows, sel.family):
        depths = sorted({_depth(r) for r in rows if variant_of(r) == variant})
        for depth in depths:
            per = by_batch(rows, variant, depth)
            try:
                table = metrics.batch_metrics(per)
            except NgbError:
                table = {c: {b: {"throughput": t} for b, t in v.items()} for c, v in per.items()}
            for c in sorted(table, key=lambda c: (c != BASELINE, c)):
                if sel.compilers and c not in sel.compilers:
                    continue
                for b, m in sorted(table[c].items()):
                    out.append(
                        (
                            variant,
                            c,
                            str(b),
                            str(depth),
                            _fmt(m.get("throughput"), 1),
                            _fmt(m.get("speedup")),
                            _fmt(m.get("rtr")),
                            _fmt(m.get("ase")),
                            _fmt(m.get("bsr")),
                        )
                    )
    return out


def _fmt(value: Any, digits: int = 3) -> str:
    return f"{value:.{digits}f}" if isinstance(value, int | float) else "--"


@dataclass(frozen=True)
class ChartKind:
    """One chart tab of the Results screen: its tab title and how to build it from trial rows."""

    title: str
    build: Callable[[Sequence[Mapping[str, Any]], Selection], Chart]


#: The Results screen's chart tabs, in order (tab id -> kind). Adding a chart is one entry here.
CHARTS: dict[str, ChartKind] = {
    "throughput": ChartKind("Throughput", throughput_chart),
    "speedup": ChartKind("Speed-up", speedup_chart),
    "bsr": ChartKind("BSR", bsr_chart),
    "ase": ChartKind("ASE heatmap", ase_heatmap),
    "depth": ChartKind("Depth", depth_chart),
}
