"""The paper's tables, regenerated from the results database.

Each builder takes a ``ReportData`` and returns a ``Report``. Definitions (where the paper leaves a
choice, the choice is written here and in the table's notes):

- testbed (Tables I/II): the newest probe of each device; hardware, then library versions and
  which compilers are available there.
- compile-times (Table III): seconds from the exported model to a runnable one, export included
  (``export_s + compile_s``; MetaSchedule tuning is part of ``compile_s``), per model, batch and
  compiler.
- families (Table VI): per device, family and compiler, over the family's models at batch 2..4 and
  at batch 8..16: mean ± sample std (ddof=1) of the per-trial mean throughputs, and the same for
  the system-wide CPU % -- i.e. the spread across the (model, batch) cells of the group; beside it
  "CI x [low, high]", the 95 % interval of that mean from the trials' own intervals.
- depth (Tables VII/VIII): speed-up over the baseline (identity unless the sweep names another)
  at each depth for every block kind, width, batch and compiler, the least-squares slope of
  speed-up over depth and retention (deepest / depth 1).
- bsr: throughput, RTR, ASE, BSR and speed-up per model, compiler and batch, with each trial's
  verdict (VALID / INVALID from the stopping rule; "-" for results stored before it existed).
- ase: ASE as a grid of (model/width) × batch per compiler, the paper's heatmaps in table form.
Only trials without an optimisation (``optimisation = 'none'``) enter these tables.

Uncertainty (``ngb.sweeps.report.derived``, the one place every surface takes derived numbers from):
every derived number carries the bounds ``[low, high]`` of its 95 % interval, computed from the
stored interval (mean, half-width, degrees of freedom) of every result it is made of. A speed-up,
BSR or retention whose interval includes 1, or a slope whose interval includes 0, is marked "n.s."
(not significant: the data do not say it differs from "no effect"); "n<2" where a trial has fewer
than two repetitions and no interval can be known. A throughput's interval is its own t interval
carried to the log scale.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from ngb.core.records.types import BLOCK_MODELS
from ngb.sweeps.report import derived
from ngb.sweeps.report.data import (
    Cell,
    PrecisionMarks,
    Report,
    ReportData,
    Table,
    finite,
    group_by,
    positive,
    precision_of,
    series_names,
)
from ngb.sweeps.report.derived import Derived
from ngb.sweeps.rows import TrialRow, mapping

R = TypeVar("R", bound=Mapping[str, object])
Row = TypeVar("Row", bound=TrialRow)  # a report's row or a figure's (which adds columns)
#: ``(device, label, target, input_size)`` -> ``{compiler: {batch: trial row}}``
BatchKey = tuple[str, str, str | None, int | None]
PerCompiler = dict[str, dict[int, TrialRow]]
#: ``(device, block kind, width, batch, target, input_size)``: one block series' point
DepthPoint = tuple[str, str, int, int, str | None, int | None]

FAMILY_BATCH_GROUPS: dict[str, tuple[int, int]] = {"2-4": (2, 4), "8-16": (8, 16)}
BLOCK_FAMILY = "block"
#: Table II's version columns around the compilers' own: the models' libraries first, CUDA last
MODEL_LIBRARIES = ("torch", "timm")
PLATFORM_LIBRARIES = ("cuda",)


def version_libraries() -> tuple[str, ...]:
    """Table II's version columns: the models' libraries, then each compiler's own
    (``Compiler.version_libraries``, in the registry's order, each once), then CUDA."""
    from ngb.core.compilers import compiler_classes

    own = [lib for cls in compiler_classes().values() for lib in cls.version_libraries]
    return tuple(dict.fromkeys((*MODEL_LIBRARIES, *own, *PLATFORM_LIBRARIES)))


def compiler_order(name: str) -> tuple[int, str]:
    """Sort key: the registry's order (identity first), unknown names last."""
    from ngb.core.compilers import list_compilers

    names = list_compilers(include_internal=True)
    compiler = name.split(" ")[0]  # "openvino bf16": a compiler's series at one precision
    return (names.index(compiler) if compiler in names else len(names), name)


def plain(rows: Sequence[R]) -> list[R]:
    """Trials without an optimisation applied."""
    return [r for r in rows if (r.get("optimisation") or "none") == "none"]


def mean_std(values: Sequence[float | None]) -> Cell:
    known = [v for v in values if finite(v)]
    if not known:
        return Cell(None)
    std = statistics.stdev(known) if len(known) > 1 else None
    return Cell(statistics.fmean(known), std)


def significance_note(data: ReportData, a: Mapping[str, object], b: Mapping[str, object]) -> str:
    """ "" when T_a / T_b differs from 1 (its printed interval excludes 1, the tables' "n.s."
    test, ``ngb.sweeps.report.derived``), "n.s." when it does not, "n<2" when it cannot be known."""
    flags = derived.speedup(a, b).flags
    for flag in (derived.UNKNOWN, derived.NS):
        if flag in flags:
            return flag
    return ""


def cell(value: Derived | None) -> Cell | None:
    """A derived number as a report cell: its value, interval and verdict flags as the note."""
    if value is None:
        return None
    if not math.isfinite(value.value):
        return Cell(None)
    return Cell(value.value, None, " ".join(value.flags), value.low, value.high)


def throughput_cell(data: ReportData, row: Mapping[str, object]) -> Cell | None:
    """A trial's mean throughput [its own stored interval]."""
    return cell(derived.throughput(row))


UNCERTAINTY_NOTE = (
    "[low, high] = 95 % interval (from each result's stored interval, on the log scale for "
    "ratios and throughputs, so its bounds are positive); "
    "n.s. = the printed interval includes 1 (0 for a slope): no significant effect; "
    "n<2 = too few repetitions for an interval; baseline = the baseline over itself (exactly 1)"
)


# ---------------------------------------------------------------- testbed


def testbed(data: ReportData) -> Report:
    probes = data.probes()
    hardware = Table(
        "Table I: devices",
        ["device", "hostname", "cpu", "cores", "ram_gb", "gpu", "os", "python"],
    )
    libraries = version_libraries()
    software = Table("Table II: software and compilers", ["device", *libraries, "compilers"])
    for p in probes:
        raw = mapping(p.get("probe"))
        cores = p.get("cpu_cores") or raw.get("cores_logical")
        ram = p.get("ram_gb")
        ram_mb = raw.get("ram_mb")
        if ram is None and finite(ram_mb):
            ram = ram_mb / 1024
        gpus = p.get("gpu") if p.get("gpu") is not None else raw.get("gpus")
        if isinstance(gpus, list):  # the probe's list of GPUs (empty on CPU-only devices)
            gpus = ", ".join(str(g.get("name", g) if isinstance(g, dict) else g) for g in gpus)
        gpu = gpus or ""
        hardware.rows.append(
            [p["device"], p.get("hostname"), p.get("cpu_model") or raw.get("cpu_model"), cores,
             ram, gpu or "-", p.get("os"), p.get("python")]
        )  # fmt: skip
        versions = mapping(p.get("versions"))
        compilers = mapping(p.get("compilers"))
        available = [n for n, info in compilers.items() if mapping(info).get("available")]
        software.rows.append(
            [p["device"], *(versions.get(lib, "-") for lib in libraries),
             ", ".join(available) or "-"]
        )  # fmt: skip
    report = Report("testbed", "Testbed (Tables I and II)", [hardware, software])
    if not probes:
        report.notes.append("no probes stored; run `ngb devices probe` first")
    return report


# ---------------------------------------------------------------- compile times


def compile_times(data: ReportData) -> Report:
    rows = plain(data.trials())
    compilers = sorted({r["compiler"] for r in rows}, key=compiler_order)
    table = Table("Table III: compile time (s)", ["device", "model", "batch", *compilers])
    table.notes.append("export + compile seconds (MetaSchedule tuning included in compile)")
    cells = group_by(rows, lambda r: (r["device"], r["label"], r["batch"]))
    for (device, label, batch), cell_rows in cells.items():
        by_compiler = {r["compiler"]: r for r in cell_rows}
        values: list[float | None] = []
        for name in compilers:
            r = by_compiler.get(name)
            compile_s = r.get("compile_s") if r is not None else None
            if r is None or not finite(compile_s):
                values.append(None)
                continue
            export = r.get("export_s")
            values.append((export if finite(export) else 0.0) + compile_s)
        table.rows.append([device, label, batch, *values])
    table.rows.sort(key=lambda row: (row[0], row[1], row[2]))
    return Report("compile-times", "Compile and tuning time (Table III)", [table])


# ---------------------------------------------------------------- families


def families(data: ReportData) -> Report:
    rows = [r for r in plain(data.trials()) if r.get("family") and r["family"] != BLOCK_FAMILY]
    groups = list(FAMILY_BATCH_GROUPS)
    table = Table(
        "Table VI: throughput and CPU by family",
        ["device", "family", "compiler", *(f"T b{g}" for g in groups),
         *(f"CPU% b{g}" for g in groups)],
    )  # fmt: skip
    table.notes.append(
        "mean ± std over the family's (model, batch) cells; T in samples/s, CPU % system-wide; "
        "CI = the mean T [its 95 % interval] from the trials' own intervals"
    )
    keyed = group_by(rows, lambda r: (r["device"], r.get("family") or "", r["compiler"]))
    for device, family, compiler in sorted(keyed, key=lambda k: (k[0], k[1], compiler_order(k[2]))):
        cells = keyed[(device, family, compiler)]
        tput, cpu = [], []
        for lo, hi in FAMILY_BATCH_GROUPS.values():
            inside = [r for r in cells if lo <= r["batch"] <= hi]
            spread = mean_std([r["throughput_mean"] for r in inside])
            if spread.value is not None:
                ci = derived.mean_of_means(inside)
                note = f"CI {ci.number()}" if ci.interval is not None else "CI n<2"
                spread = Cell(spread.value, spread.std, note)
            tput.append(spread)
            cpu.append(mean_std([r["cpu_percent_mean"] for r in inside]))
        table.rows.append([device, family, compiler, *tput, *cpu])
    return Report("families", "Aggregate by model family (Table VI)", [table])


# ---------------------------------------------------------------- depth


@dataclass(frozen=True)
class DepthSeries(Generic[Row]):
    """One compiler's block series at one point (device, block kind, width, batch, target, input
    size): its trials and the baseline's, by depth. Tables VII/VIII and Fig. 7 both read these,
    so the figure and the table cannot group the same trials differently."""

    device: str
    block: str
    width: int
    batch: int
    target: str | None
    input_size: int | None
    compiler: str
    mine: dict[int, Row]
    identity: dict[int, Row]

    @property
    def point(self) -> DepthPoint:
        return (self.device, self.block, self.width, self.batch, self.target, self.input_size)

    def shared(self) -> list[int]:
        """The depths measured under both the compiler and the baseline."""
        return sorted(set(self.mine) & set(self.identity))


def _depth_of(row: TrialRow) -> int:
    """A block trial's depth (one without it ran at depth 1, as its label says)."""
    return row.get("depth") or 1


def _by_depth(rows: Sequence[Row]) -> dict[int, Row]:
    return {_depth_of(r): r for r in rows}


def _depth_point(r: TrialRow) -> DepthPoint:
    """Where a block series is measured: (device, block, width, batch, target, input size)."""
    width, target, size = r.get("width") or 0, r.get("target"), r.get("input_size")
    return (r["device"], r["model"], width, r["batch"], target, size)


def depth_rows(rows: Sequence[Row]) -> list[Row]:
    """The trials the depth tables and figure read: plain blocks with a width and a throughput."""
    return [
        r
        for r in plain(rows)
        if r["model"] in BLOCK_MODELS and r.get("width") and positive(r.get("throughput_mean"))
    ]


def depth_series(rows: Sequence[Row], base: str) -> tuple[list[DepthSeries[Row]], list[str]]:
    """Every compiler's series against ``base`` per point, points by device, block, width and
    batch, compilers in the registry's order; and a line for each point without a baseline."""
    skipped: list[str] = []
    series: list[DepthSeries[Row]] = []
    keyed = group_by(depth_rows(rows), _depth_point)
    for key in sorted(keyed, key=lambda k: (k[0], k[1], k[2], k[3])):
        device, block, width, batch = key[:4]
        by_compiler = group_by(keyed[key], lambda r: r["compiler"])
        identity = _by_depth(by_compiler.get(base, []))
        if not identity:
            skipped.append(f"{device} {block}{width} b{batch}: no {base} baseline")
            continue
        for compiler in sorted(by_compiler, key=compiler_order):
            if compiler != base:
                mine = _by_depth(by_compiler[compiler])
                series.append(DepthSeries(*key, compiler, mine, identity))
    return series, skipped


def depth(data: ReportData) -> Report:
    base = data.baseline
    series, skipped = depth_series(data.trials(), base)
    # A series measured at one depth says nothing about depth (its speed-up is in `bsr`): once
    # some series has two depths or more, the one-depth ones are left out, and counted.
    deep = [e for e in series if len(e.shared()) >= 2]
    single = len(series) - len(deep) if deep else 0
    series = deep or series
    depths = sorted({d for e in series for d in e.shared()})
    table = Table(
        f"Tables VII/VIII: speed-up over {base} by depth",
        ["device", "block", "width", "batch", "compiler", *(f"d{d}" for d in depths),
         "slope", "retention"],
    )  # fmt: skip
    table.notes.append(
        f"speed-up = T_c / T_{base} at the same depth (baseline: {data.baseline_label}); "
        "slope = least-squares slope over depth; retention = speed-up at deepest / at depth 1"
    )
    table.notes.append(UNCERTAINTY_NOTE)
    if single:
        table.notes.append(
            f"{single} compiler/batch series measured at one depth only are left out "
            "(their speed-ups are in `ngb report bsr`)"
        )
    marks = PrecisionMarks(base)
    for entry in series:
        device, block, width, batch = entry.device, entry.block, entry.width, entry.batch
        compiler, mine, identity = entry.compiler, entry.mine, entry.identity
        both = entry.shared()
        cells: list[Cell | None] = []
        for d in depths:
            if d not in both:
                cells.append(None)
                continue
            speed = cell(derived.speedup(mine[d], identity[d]))
            cells.append(marks.mark(speed, mine[d], identity[d]))
        slope: Cell | None = None
        kept: Cell | None = None
        if len(both) >= 2:
            trend, retained = derived.depth_trend(
                both, [mine[d] for d in both], [identity[d] for d in both]
            )
            slope, kept = cell(trend), cell(retained)
        table.rows.append([device, block, width, batch, compiler, *cells, slope, kept])
    marks.add_note(table)
    report = Report("depth", "Depth scaling (Tables VII and VIII)", [table])
    report.notes.extend([n for n in (data.baseline_note,) if n] + skipped)
    return report


# ---------------------------------------------------------------- batch scaling


def _batch_groups(data: ReportData) -> dict[BatchKey, PerCompiler]:
    """``{(device, label, target, input_size): {compiler: {batch: trial row}}}``."""
    groups: dict[BatchKey, list[TrialRow]] = {}
    for r in plain(data.trials()):
        if positive(r.get("throughput_mean")):
            key = (r["device"], r["label"], r.get("target"), r.get("input_size"))
            groups.setdefault(key, []).append(r)
    out: dict[BatchKey, PerCompiler] = {}
    for key, rows in groups.items():
        names = series_names(rows, data.baseline)  # a compiler at two precisions: two series
        for r in rows:
            out.setdefault(key, {}).setdefault(names[id(r)], {})[r["batch"]] = r
    return out


def verdict_text(row: Mapping[str, object]) -> str:
    """VALID / INVALID (+ "disturbed"), "-" for results stored before verdicts existed."""
    verdict = row.get("verdict")
    if not verdict:
        return "-"
    return f"{verdict} (disturbed)" if row.get("disturbed") else str(verdict)


def bsr(data: ReportData) -> Report:
    table = Table(
        "Batch scaling: RTR, ASE, BSR",
        ["device", "model", "compiler", "precision", "batch", "throughput", "rtr", "ase", "bsr",
         "speedup", "verdict"],
    )  # fmt: skip
    baseline = data.baseline
    table.notes.append(
        f"RTR = T(b)/T(1); ASE = RTR/b; BSR = ASE_c/ASE_{baseline}; speed-up = T_c/T_{baseline} "
        f"(baseline: {data.baseline_label})"
    )
    table.notes.append(UNCERTAINTY_NOTE)
    marks = PrecisionMarks(baseline)
    report = Report("bsr", "Batch scaling ratio (BSR) and efficiency (ASE)", [table])
    report.notes.extend([n for n in (data.baseline_note,) if n])
    for (device, label, _, _), per_compiler in sorted(_batch_groups(data).items(), key=_gkey):
        usable = {c: rows for c, rows in per_compiler.items() if 1 in rows}
        for name in sorted(set(per_compiler) - set(usable)):
            report.notes.append(f"{device} {label} {name}: no batch-1 throughput, left out")
        ordered = {c: usable[c] for c in sorted(usable, key=compiler_order)}
        base = usable.get(baseline, {})
        for point in derived.batch_points(ordered, baseline):
            row = point.row
            bsr_cell, speedup_cell = cell(point.bsr), cell(point.speedup)
            # derived decided where the mark stands; marks names the pairs in the notes
            if point.bsr is not None and derived.PRECISION_MARK in point.bsr.flags:
                bsr_cell = marks.mark(bsr_cell, row, base[point.batch])
            if point.speedup is not None and derived.PRECISION_MARK in point.speedup.flags:
                speedup_cell = marks.mark(speedup_cell, row, base[point.batch])
            table.rows.append(
                [device, label, point.compiler, precision_of(row), point.batch,
                 cell(point.throughput), cell(point.rtr), cell(point.ase), bsr_cell,
                 speedup_cell, verdict_text(row)]
            )  # fmt: skip
    marks.add_note(table)
    return report


def ase(data: ReportData) -> Report:
    groups = _batch_groups(data)
    batches = sorted({b for per in groups.values() for t in per.values() for b in t})
    table = Table(
        "ASE by model/width and batch", ["device", "compiler", "model", *(f"b{b}" for b in batches)]
    )
    table.notes.append("ASE = T(b) / (b · T(1)); 1.0 = perfect scaling")
    table.notes.append(UNCERTAINTY_NOTE)
    rows: list[tuple[str, str, str, list[Cell | None]]] = []
    for (device, label, _, _), per_compiler in groups.items():
        for compiler, trials in per_compiler.items():
            if 1 not in trials:
                continue
            cells: list[Cell | None] = [
                cell(derived.ase(trials[b], trials[1], b)) if b in trials else None for b in batches
            ]
            rows.append((device, compiler, label, cells))
    rows.sort(key=lambda r: (r[0], compiler_order(r[1]), _label_key(r[2])))
    table.rows = [[device, compiler, label, *cells] for device, compiler, label, cells in rows]
    return Report("ase", "Average scaling efficiency (ASE heatmap as a table)", [table])


def _label_key(label: str) -> tuple[str, int, int]:
    """Order block labels by kind, width, depth numerically (conv64x1 < conv96x1 < conv128x1)."""
    import re

    match = re.match(r"(conv|mha)(\d+)x(\d+)", label)
    if match:
        return (match.group(1), int(match.group(2)), int(match.group(3)))
    return (label, 0, 0)


def _gkey(item: tuple[BatchKey, PerCompiler]) -> tuple[str, tuple[str, int, int]]:
    device, label, _, _ = item[0]
    return (device, _label_key(label))
