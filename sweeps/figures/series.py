"""The numbers behind each figure, as ``FigureSpec`` objects (nothing is drawn here).

Definitions follow the reports (``report_paper``): only trials without an optimisation, the newest
result per point, speed-up = T_c / T_identity at the same point, ASE = T(b) / (b T(1)),
BSR = ASE_c / ASE_identity. Where a report already computes a figure's numbers (ASE grid, BSR
table, ranking reversals) the figure is built from that report's rows, so a figure and its table
cannot disagree.

Error bars are 95 % confidence intervals, exactly the printed ``[low, high]`` of
``ngb.sweeps.report.derived`` that the reports and the console print (``derived_bar``): a
throughput's own interval, an energy per sample's, a speed-up's, ASE's and BSR's -- all positive
quantities whose lower bound is above zero, so a log axis draws every bar. Points drawn hollow
("weak") are not significantly different from the baseline (the printed interval includes 1: the
reports' "n.s.") or were judged INVALID by the stopping rule; a cross over a point marks a ratio
between results of different precisions (the reports' "≠prec").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence

from ngb.sweeps.figures.data import FigureData, derived_bar
from ngb.sweeps.figures.spec import (
    BarPanel,
    BarSeries,
    ErrorBar,
    FigureSpec,
    FigureTrial,
    HeatPanel,
    Line,
    LinePanel,
    Panel,
)
from ngb.sweeps.report import derived
from ngb.sweeps.report import dlas as report_dlas
from ngb.sweeps.report import paper as report_paper
from ngb.sweeps.report.data import Cell, finite, group_by, known, mean_throughput, positive
from ngb.sweeps.report.paper import compiler_order
from ngb.sweeps.rows import integer, number

BLOCKS = ("conv", "mha")
MAX_REVERSAL_PANELS = 12


#: ``(device, label, target)``: one model's panel
ModelKey = tuple[str, str, str | None]


def _usable(data: FigureData) -> list[FigureTrial]:
    """Plain trials with a positive throughput (what every figure starts from)."""
    return [t for t in report_paper.plain(data.trials()) if positive(t.get("throughput_mean"))]


def _invalid(trial: FigureTrial) -> bool:
    return str(trial.get("verdict") or "").upper().startswith("INVALID")


def _weak(value: derived.Derived, *trials: FigureTrial) -> bool:
    """Hollow: not significant (or no interval), or a trial behind it is INVALID."""
    return bool({derived.NS, derived.UNKNOWN} & set(value.flags)) or any(map(_invalid, trials))


def _sym(trial: FigureTrial | None) -> ErrorBar:
    """A throughput's own interval (``derived.throughput``, on the log scale) as an error bar."""
    return derived_bar(derived.throughput(trial)) if trial is not None else None


def _scope_title(base: str, rows: Sequence[FigureTrial], device: str, target: str | None) -> str:
    """Add the device / target to a panel title only when the figure has several of them."""
    extra = []
    if len({r["device"] for r in rows}) > 1:
        extra.append(device)
    if len({r.get("target") for r in rows}) > 1:
        extra.append(str(target))
    return base + (f" [{', '.join(extra)}]" if extra else "")


def _by_model(rows: Sequence[FigureTrial]) -> list[tuple[ModelKey, list[FigureTrial]]]:
    """Rows per (device, label, target), ordered by family then label."""
    keyed = group_by(rows, lambda r: (r["device"], r["label"], r.get("target")))
    order = sorted(keyed, key=lambda k: (str(keyed[k][0].get("family")), k[0], k[1], str(k[2])))
    return [(k, keyed[k]) for k in order]


def _compilers(rows: Iterable[FigureTrial]) -> list[str]:
    return sorted({r["compiler"] for r in rows}, key=compiler_order)


# ---------------------------------------------------------------- Fig. 5 and 6


def throughput(data: FigureData) -> FigureSpec:
    rows = _usable(data)
    spec = FigureSpec(
        "fig05-throughput",
        "Fig. 5: throughput vs batch size",
        "Mean throughput (samples/s) per model and compiler against batch size, log-log axes.",
        trials=rows,
    )
    _batch_panels(spec, rows, "samples/s", mean_throughput, _sym)
    return spec


def energy(data: FigureData) -> FigureSpec:
    """Energy per sample (mJ, measured on the device, ± its interval over processes) vs batch."""
    rows = [
        _with_source(r, "energy")  # the caption then names the energy's interval
        for r in _usable(data)
        if finite(r.get("energy_j_per_sample"))
    ]
    spec = FigureSpec(
        "fig13-energy",
        "Fig. 13: energy per sample vs batch size",
        "Energy per sample (mJ, idle included) measured on the device around the timed loops, "
        "per model and compiler against batch size, log-log axes; bars: 95 % interval over "
        "worker processes.",
        trials=rows,
    )
    if not rows:
        notes = sorted({str(r.get("energy_note")) for r in _usable(data) if r.get("energy_note")})
        spec.notes.append("no energy measured" + (f" ({'; '.join(notes)})" if notes else ""))
    _batch_panels(
        spec,
        rows,
        "mJ/sample",
        lambda r: known(r.get("energy_j_per_sample")) * 1000,
        lambda r: derived_bar(derived.energy(r, 1000.0)),
    )
    return spec


def _batch_panels(
    spec: FigureSpec,
    rows: list[FigureTrial],
    unit: str,
    value: Callable[[FigureTrial], float],
    bar: Callable[[FigureTrial], ErrorBar],
) -> None:
    """One log-log panel per model against batch size: a line per compiler (Fig. 5, Fig. 13)."""
    for (device, label, target), cell in _by_model(rows):
        lines = []
        for compiler in _compilers(cell):
            mine = sorted((r for r in cell if r["compiler"] == compiler), key=lambda r: r["batch"])
            lines.append(
                Line(
                    compiler,
                    [r["batch"] for r in mine],
                    [value(r) for r in mine],
                    [bar(r) for r in mine],
                    [_invalid(r) for r in mine],
                    compiler,
                )
            )
        title = _scope_title(f"{label} ({cell[0].get('family')})", rows, device, target)
        spec.panels.append(LinePanel(title, lines, "batch", unit, logx=True, logy=True))


def _with_source(trial: FigureTrial, source: str) -> FigureTrial:
    out: FigureTrial = {**trial, "ci_source": source}
    return out


def _speedup_line(
    data: FigureData,
    compiler: str,
    mine: Mapping[int, FigureTrial],
    base: Mapping[int, FigureTrial],
) -> Line | None:
    xs = sorted(set(mine) & set(base))
    if not xs:
        return None
    ys: list[float] = []
    errs: list[ErrorBar] = []
    weak: list[bool] = []
    mismatch: list[bool] = []
    for x in xs:
        c, i = mine[x], base[x]
        speed = derived.speedup(c, i)
        ys.append(speed.value)
        errs.append(derived_bar(speed))
        weak.append(_weak(speed, c, i))
        mismatch.append(derived.PRECISION_MARK in speed.flags)
    return Line(compiler, [float(x) for x in xs], ys, errs, weak, compiler, mismatch)


def speedup_batch(data: FigureData) -> FigureSpec:
    rows = _usable(data)
    spec = FigureSpec(
        "fig06-speedup-batch",
        "Fig. 6: speed-up over the baseline vs batch size",
        f"Speed-up T_compiler / T_baseline per model at each batch size (baseline: "
        f"{data.baseline_label}); 1 = as fast as the baseline. Hollow points: not significant "
        "(95 % interval includes 1).",
        trials=rows,
    )
    for (device, label, target), cell in _by_model(rows):
        base = {r["batch"]: r for r in cell if r["compiler"] == data.baseline}
        if not base:
            spec.notes.append(f"{label}: no identity baseline")
            continue
        lines = []
        for compiler in _compilers(cell):
            if compiler != data.baseline:
                mine = {r["batch"]: r for r in cell if r["compiler"] == compiler}
                line = _speedup_line(data, compiler, mine, base)
                if line is not None:
                    lines.append(line)
        if lines:
            title = _scope_title(label, rows, device, target)
            spec.panels.append(
                LinePanel(title, lines, "batch", "speed-up", logx=True, logy=True, reference=1.0)
            )
    return spec


# ---------------------------------------------------------------- Fig. 7: depth


def speedup_depth(data: FigureData) -> FigureSpec:
    rows = report_paper.depth_rows(data.trials())
    spec = FigureSpec(
        "fig07-speedup-depth",
        "Fig. 7: speed-up over the baseline vs depth (stacked blocks)",
        f"Speed-up T_compiler / T_baseline (baseline: {data.baseline_label}) of the synthetic "
        "blocks against the number of stacked blocks, per block kind, width and batch. Hollow "
        "points: not significant (95 % interval includes 1).",
        trials=rows,
    )
    # the series Tables VII/VIII print; a line needs two depths under both compilers
    series, _ = report_paper.depth_series(rows, data.baseline)
    for entries in group_by(series, lambda e: e.point).values():
        lines = []
        for entry in entries:
            if len(entry.shared()) >= 2:
                line = _speedup_line(data, entry.compiler, entry.mine, entry.identity)
                if line is not None:
                    lines.append(line)
        if lines:
            head = entries[0]
            name = f"{head.block}{head.width} b{head.batch}"
            title = _scope_title(name, rows, head.device, head.target)
            spec.panels.append(
                LinePanel(title, lines, "depth (blocks)", "speed-up", logy=True, reference=1.0)
            )
    if not spec.panels:
        spec.notes.append("needs blocks measured at two or more depths under identity")
    return spec


# ---------------------------------------------------------------- Fig. 8 and 9: by family


def _family_metric(data: FigureData, which: str) -> FigureSpec:
    """Mean ASE (or BSR) over each family's models per compiler and batch."""
    rows = _usable(data)
    is_ase = which == "ase"
    if is_ase:
        name, title = "fig08-ase-family", "Fig. 8: average scaling efficiency (ASE) by family"
        text = "ASE = T(b) / (b T(1)), averaged over the family's models; 1 = perfect scaling."
    else:
        name, title = "fig09-bsr-family", "Fig. 9: batch scaling ratio (BSR) by family"
        text = (
            "BSR = ASE_compiler / ASE_identity, averaged over the family's models; above 1 the "
            "compiler gains more from batching than eager does."
        )
    spec = FigureSpec(name, title, text, trials=rows)
    spec.description += " Error bars propagate each model's intervals (not the spread of models)."
    keyed = group_by(rows, lambda r: (r["device"], r.get("family"), r.get("target")))
    for key in sorted(keyed, key=lambda k: (str(k[1]), k[0], str(k[2]))):
        device, family, target = key
        # {compiler: {batch: [(value, error bar, weak)]}} over the family's models
        acc: dict[str, dict[int, list[tuple[float, ErrorBar, bool]]]] = {}
        for label, per_model in group_by(keyed[key], lambda r: r["label"]).items():
            per_c = {
                c: {r["batch"]: r for r in per_model if r["compiler"] == c}
                for c in _compilers(per_model)
            }
            base = per_c.get(data.baseline, {})
            for compiler, by_batch in per_c.items():
                if 1 not in by_batch or (
                    not is_ase and (compiler == data.baseline or 1 not in base)
                ):
                    if 1 not in by_batch:
                        spec.notes.append(f"{label} {compiler}: no batch-1 throughput, left out")
                    continue
                one = by_batch[1]
                for b, r in by_batch.items():
                    if is_ase:
                        value = derived.ase(r, one, b)
                        weak = _invalid(r) or _invalid(one)
                    elif b in base:
                        value = derived.bsr(r, one, base[b], base[1])
                        weak = _weak(value, r, one, base[b], base[1])
                    else:
                        continue
                    bar = derived_bar(value)
                    acc.setdefault(compiler, {}).setdefault(b, []).append((value.value, bar, weak))
        lines = []
        for compiler in sorted(acc, key=compiler_order):
            batches = sorted(acc[compiler])
            ys: list[float] = []
            errs: list[ErrorBar] = []
            marks: list[bool] = []
            for b in batches:
                points = acc[compiler][b]
                ys.append(statistics.fmean(p[0] for p in points))
                errs.append(_mean_bar([p[1] for p in points]))
                marks.append(any(p[2] for p in points))
            lines.append(Line(compiler, [float(b) for b in batches], ys, errs, marks, compiler))
        if lines:
            title = _scope_title(str(family), rows, device, target)
            spec.panels.append(
                LinePanel(
                    title,
                    lines,
                    "batch",
                    "ASE" if is_ase else "BSR",
                    logx=True,
                    logy=not is_ase,
                    reference=None if is_ase else 1.0,
                )
            )
    return spec


def _mean_bar(bars: list[ErrorBar]) -> ErrorBar:
    """Error bar of a mean of independent values: sqrt(sum of squares) / n on each side."""
    if not bars or any(b is None for b in bars):
        return None
    n = len(bars)
    below = math.sqrt(sum(b[0] ** 2 for b in bars if b is not None)) / n
    above = math.sqrt(sum(b[1] ** 2 for b in bars if b is not None)) / n
    return below, above


def ase_family(data: FigureData) -> FigureSpec:
    return _family_metric(data, "ase")


def bsr_family(data: FigureData) -> FigureSpec:
    return _family_metric(data, "bsr")


# ---------------------------------------------------------------- Fig. 10 and 11: heatmaps


def _heat_panels(
    rows: Sequence[Sequence[object]], batches: list[str], centre: float | None, label: str
) -> list[Panel]:
    """rows: report rows (device, compiler, model, one cell per batch); each heatmap cell shows
    the report's own text for it (value ± interval and its verdict)."""
    from ngb.sweeps.report.render import fmt_cell

    panels: list[Panel] = []
    for (device, compiler), mine in group_by(rows, lambda r: (str(r[0]), str(r[1]))).items():
        models = [str(m[2]) for m in mine]
        numbers = [[_number(m[3 + i]) for i in range(len(batches))] for m in mine]
        texts = [
            [fmt_cell(m[3 + i]) if v is not None else None for i, v in enumerate(vs)]
            for m, vs in zip(mine, numbers, strict=True)
        ]
        values = [list(vs) for vs in numbers]
        several = len({r[0] for r in rows}) > 1
        title = f"{compiler}" + (f" [{device}]" if several else "")
        panels.append(HeatPanel(title, models, batches, values, label, centre, texts))
    return panels


def _number(value: object) -> float | None:
    """A report cell's finite number (reports give ``Cell(value ± interval)`` for derived
    metrics), else None."""
    return number(value.value if isinstance(value, Cell) else value)


def ase_heatmap(data: FigureData) -> FigureSpec:
    table = report_paper.ase(data).tables[0]
    batches = [c for c in table.columns[3:]]
    spec = FigureSpec(
        "fig10-ase-heatmap",
        "Fig. 10: ASE by model/width and batch",
        "ASE = T(b) / (b T(1)) per compiler, one row per model or block (the `ngb report ase` "
        "table as heatmaps); each cell is ASE ± its 95 % interval; 1 = perfect scaling, blank = "
        "not measured.",
        trials=_usable(data),
    )
    spec.panels = _heat_panels(table.rows, batches, None, "ASE")
    return spec


def block_bsr(data: FigureData) -> FigureSpec:
    report = report_paper.bsr(data)
    table = report.tables[0]
    # rows as {column: cell}: the figure reads the report by column name, not position
    named = [dict(zip(table.columns, r, strict=True)) for r in table.rows]
    blocks = {t["label"] for t in _usable(data) if t["model"] in BLOCKS}
    rows = [r for r in named if r["model"] in blocks and r["compiler"] != data.baseline]
    batches = sorted({b for r in rows if (b := integer(r["batch"])) is not None})
    grid: dict[tuple[str, str, str], dict[int | None, object]] = {}
    for r in rows:
        device, label, compiler = str(r["device"]), str(r["model"]), str(r["compiler"])
        grid.setdefault((device, compiler, label), {})[integer(r["batch"])] = r["bsr"]
    # the report lists rows by device and label (widths numerically); keep that order per compiler
    order = sorted(grid, key=lambda k: (k[0], compiler_order(k[1])))
    table_rows = [[d, c, m, *(grid[(d, c, m)].get(b) for b in batches)] for d, c, m in order]
    spec = FigureSpec(
        "fig11-block-bsr",
        "Fig. 11: BSR of the synthetic blocks by block and batch",
        "BSR = ASE_compiler / ASE_identity for the conv and MHA blocks, one row per block "
        "(kind, width and depth: conv64x3 = width 64, 3 blocks deep); each cell is BSR ± its "
        "95 % interval (n.s.: the interval includes 1); red above 1 (the compiler gains more "
        "from batching than eager), blue below.",
        trials=[t for t in _usable(data) if t["model"] in BLOCKS],
    )
    spec.panels = _heat_panels(table_rows, [f"b{b}" for b in batches], 1.0, "BSR")
    spec.notes += [n for n in report.notes if any(b in n for b in blocks)]
    return spec


# ---------------------------------------------------------------- Fig. 12: CPU


def _mean_std(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    kept = [v for v in values if finite(v)]
    if not kept:
        return None, None
    return statistics.fmean(kept), (statistics.stdev(kept) if len(kept) > 1 else None)


#: Fig. 12's reduction axis spans at least this many percentage points each side of 0
CPU_MIN_SPAN = 5.0


def _mean_interval(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    """Mean and its 95 % Student-t half-width (None with fewer than 2 values)."""
    from ngb.core.statistics.student_t import t_two_sided

    mean, std = _mean_std(values)
    n = len([v for v in values if finite(v)])
    if mean is None or std is None or n < 2:
        return mean, None
    return mean, t_two_sided(0.95, n - 1) * std / math.sqrt(n)


def cpu_usage(data: FigureData) -> FigureSpec:
    rows = [r for r in _usable(data) if finite(r.get("cpu_percent_mean"))]
    spec = FigureSpec(
        "fig12-cpu",
        "Fig. 12: CPU usage and its reduction against eager",
        "Left: mean system-wide CPU % during the timed loops per family and compiler. Right: "
        "reduction against identity at the same model and batch (percentage points; positive = "
        "the compiler leaves more CPU free). Error bars: left, std across the family's "
        "(model, batch) points; right, the 95 % t interval of the mean reduction, hatched where "
        "it includes 0 (no effect); the right axis spans at least ±5 points so a small effect "
        "looks small.",
        trials=rows,
    )
    several = len({r["device"] for r in rows}) > 1
    keyed = group_by(rows, lambda r: (r["device"], r.get("family")))
    groups = sorted(keyed, key=lambda k: (str(k[1]), k[0]))
    names = [f"{f}@{d}" if several else str(f) for d, f in groups]
    compilers = _compilers(rows)
    usage, saved = [], []
    for compiler in compilers:
        u_vals, u_errs, s_vals, s_errs, s_weak = [], [], [], [], []
        for key in groups:
            cell = keyed[key]
            mean, std = _mean_std(
                [r.get("cpu_percent_mean") for r in cell if r["compiler"] == compiler]
            )
            u_vals.append(mean)
            u_errs.append(std)
            base = {
                (r["label"], r["batch"], r.get("target")): known(r.get("cpu_percent_mean"))
                for r in cell
                if r["compiler"] == data.baseline
            }
            diffs: list[float | None] = [
                base[(r["label"], r["batch"], r.get("target"))] - known(r.get("cpu_percent_mean"))
                for r in cell
                if r["compiler"] == compiler and (r["label"], r["batch"], r.get("target")) in base
            ]
            mean, half = _mean_interval(diffs)
            s_vals.append(mean)
            s_errs.append(half)
            s_weak.append(mean is not None and (half is None or abs(mean) <= half))
        usage.append(BarSeries(compiler, u_vals, u_errs, compiler))
        if compiler != data.baseline:
            saved.append(BarSeries(compiler, s_vals, s_errs, compiler, s_weak))
    if groups:
        spec.panels.append(BarPanel("CPU usage", names, usage, "CPU % (system-wide)"))
    if saved:
        spec.panels.append(
            BarPanel(
                "CPU reduction vs identity",
                names,
                saved,
                "percentage points",
                reference=0.0,
                min_span=CPU_MIN_SPAN,
            )
        )
    return spec


# ---------------------------------------------------------------- Fig. 1: ranking reversals


def reversals(data: FigureData) -> FigureSpec:
    report = report_dlas.reversals(data)
    lookup: dict[tuple[object, ...], FigureTrial] = {
        (t["device"], t["label"], t["compiler"], t["batch"]): t for t in _usable(data)
    }
    spec = FigureSpec(
        "fig01-reversals",
        "Fig. 1: ranking reversals between models",
        "Pairs of models whose order under PyTorch eager (identity) flips under a compiler: "
        "throughput of both models under each. Hollow: the flip is not significant (the 95 % "
        "interval of either order's ratio includes 1).",
    )

    def strength(row: Sequence[object]) -> tuple[bool, float]:
        ia, ib, ca, cb = (known(v) for v in row[5:9])
        return (row[9] != "significant", -(math.log(ia / ib) + math.log(cb / ca)))

    rows = sorted(report.tables[0].rows, key=strength)
    if len(rows) > MAX_REVERSAL_PANELS:
        spec.notes.append(
            f"{len(rows) - MAX_REVERSAL_PANELS} more pairs in `ngb report reversals` (the "
            f"{MAX_REVERSAL_PANELS} strongest are drawn)"
        )
    used: list[FigureTrial] = []
    for device, batch, compiler, a, b, ia, ib, ca, cb, flip in rows[:MAX_REVERSAL_PANELS]:
        lines = []
        for model, ident, comp in ((a, ia, ca), (b, ib, cb)):
            trials = [
                lookup.get((device, model, data.baseline, batch)),
                lookup.get((device, model, compiler, batch)),
            ]
            used += [t for t in trials if t is not None]
            errs = [_sym(t) for t in trials]
            ys = [known(ident), known(comp)]
            lines.append(Line(str(model), [0, 1], ys, errs, [flip != "significant"] * 2))
        several = len({r[0] for r in rows}) > 1
        title = f"b{batch}: {compiler}, {flip}" + (f" [{device}]" if several else "")
        spec.panels.append(
            LinePanel(title, lines, "", "samples/s", xticklabels=[data.baseline, str(compiler)])
        )
    spec.trials = used
    if not rows:
        spec.notes.append("no ranking reversals found")
    return spec
