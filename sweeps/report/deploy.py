"""Reports for deciding what to deploy (issue 23): energy and cost per inference, break-even.

- energy: every trial's throughput ([its interval], as in ``bsr``), cost per million inferences
  (``price_per_hour`` from the inventory, ``ngb.devices.pricing``; the throughput's interval
  carried over), energy per sample measured on the device around the timed loops ([its
  interval] over worker processes, ``ngb.core.energy``), above-idle energy, samples per joule,
  mean and idle watts, and the meter. Trials without a meter show "-" and the notes say why,
  once per device ("no power meter: RAPL not readable ...").
- breakeven: for every compiler against the baseline (same device, model, batch, optimisation),
  the inferences after which its extra one-time cost -- export + compile (tuning included) minus
  the baseline's -- is paid back by its per-inference saving 1/T_base - 1/T_c:
  N = extra / (1/T_base - 1/T_c), with a 95 % interval over both throughputs' intervals and the
  spread of the one-time seconds where the point was compiled in several stored runs
  (``ngb.core.breakeven``: a seeded Monte Carlo); from one run they are taken as exact, and the
  table's header says so.
  "never" where the compiler is not significantly faster (the speed-up's interval includes 1, the
  test every report uses) or slower; "at once" where it costs no more to prepare. "at full load"
  is N at the compiler's throughput, in hours.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ngb.core.breakeven import Uncertain, interval, pays_back_after, repeated
from ngb.sweeps.report import derived
from ngb.sweeps.report.data import (
    Cell,
    Report,
    ReportData,
    Table,
    finite,
    group_by,
    mean_throughput,
    precision_of,
)
from ngb.sweeps.report.paper import UNCERTAINTY_NOTE, compiler_order, throughput_cell
from ngb.sweeps.report.paper import cell as derived_cell
from ngb.sweeps.rows import TrialRow


def _same_point(r: TrialRow) -> tuple[str, str, object, object, int, object, object, object]:
    """The point a compiler's break-even is computed at: everything but the compiler."""
    return (
        r["device"], r["model"], r.get("width"), r.get("depth"), r["batch"], r.get("target"),
        r.get("input_size"), r.get("optimisation"),
    )  # fmt: skip


def cost_cell(data: ReportData, row: TrialRow) -> Cell:
    """Cost per million inferences [its interval, carried over from the throughput's]."""
    price = data.prices.get(row["device"])
    if price is None:
        return Cell(None)
    return derived_cell(derived.cost(row, price.per_hour)) or Cell(None)


def energy_cell(row: TrialRow, scale: float = 1000.0) -> Cell:
    """Energy per sample in mJ [its interval over processes] (None without a meter)."""
    if _scaled(row.get("energy_j_per_sample"), scale) is None:
        return Cell(None)
    value = derived.energy(row, scale)
    if derived.UNKNOWN in value.flags:  # a meter reading without an interval: the value alone
        return Cell(value.value)
    return derived_cell(value) or Cell(None)


def _scaled(value: object, scale: float = 1.0) -> float | None:
    return float(value) * scale if finite(value) else None


def energy(data: ReportData) -> Report:
    rows = [r for r in data.trials() if finite(r.get("throughput_mean"))]
    rows.sort(key=lambda r: (r["device"], r["label"], compiler_order(r["compiler"]), r["batch"]))
    table = Table(
        "Energy and cost per inference",
        ["device", "model", "compiler", "batch", "optimisation", "precision", "samples/s",
         "cost / 1M", "mJ/sample", "mJ above idle", "samples/J", "W", "idle W", "meter"],
    )  # fmt: skip
    for r in rows:
        table.rows.append(
            [r["device"], r["label"], r["compiler"], r["batch"], r.get("optimisation") or "none",
             precision_of(r), throughput_cell(data, r), cost_cell(data, r), energy_cell(r),
             _scaled(r.get("energy_above_idle_j_per_sample"), 1000.0),
             _scaled(r.get("samples_per_j")), _scaled(r.get("power_w_mean")),
             _scaled(r.get("idle_power_w")), r.get("energy_source") or "-"]
        )  # fmt: skip
    table.notes.append(
        "mJ/sample: measured on the device around the timed loops, idle included ([95 % "
        "interval] over worker processes); mJ above idle subtracts the idle power measured before "
        "the warm-up; cost / 1M = price_per_hour / 3600 / samples/s x 1e6 (price from the "
        "inventory, in its own units; its interval carried over from the throughput's)"
    )
    table.notes.append(UNCERTAINTY_NOTE)
    report = Report("energy", "Energy and cost per inference", [table])
    without = [r for r in rows if not finite(r.get("energy_j_per_sample"))]
    for device, missing in group_by(without, lambda r: r["device"]).items():
        reasons = sorted(
            {str(r.get("energy_note") or "no power meter: not recorded") for r in missing}
        )
        report.notes.append(
            f"{device}: {len(missing)} trial(s) without energy: {'; '.join(reasons)}"
        )
    unpriced = sorted({r["device"] for r in rows} - set(data.prices))
    if unpriced:
        report.notes.append(
            f"no price_per_hour in the inventory for {', '.join(unpriced)}: no cost "
            "(set it per device or group in devices.toml)"
        )
    return report


def one_time_s(row: TrialRow) -> float | None:
    """Export + compile (tuning included) seconds; None when neither was recorded."""
    parts = [_scaled(row.get("export_s")), _scaled(row.get("compile_s"))]
    known = [p for p in parts if p is not None]
    return math.fsum(known) if known else None


class BreakEven:
    """N inferences with its interval (``ngb.core.breakeven``) for one compiler row against its
    baseline row; ``runs`` holds each point's one-time seconds over every stored run."""

    def __init__(
        self,
        data: ReportData,
        row: TrialRow,
        base: TrialRow,
        runs: Mapping[tuple[str, str], list[float]] | None = None,
    ) -> None:
        self.row, self.base = row, base
        self.extra_s: float | None = None
        self.value: float | None = None
        self.low = self.high = math.nan
        self.status = "-"  # never | at once | a number | - (unknown)
        self.compile_runs = (0, 0)  # runs the compiler's and the baseline's one-time s are from
        once, base_once = _one_time(row, runs), _one_time(base, runs)
        t_c, t_b = mean_throughput(row), mean_throughput(base)
        if once is None or base_once is None or not (t_b > 0 and t_c > 0):
            return
        self.compile_runs = (once[1], base_once[1])
        self.extra_s = extra_s = once[0].value - base_once[0].value
        speedup = derived.speedup(row, base)
        faster = t_c > t_b and (speedup.interval is None or speedup.significant is True)
        if not faster:
            self.status = "never"
            return
        if extra_s <= 0:
            self.status, self.value = "at once", 0.0
            return
        self.value = pays_back_after(extra_s, t_b, t_c)
        self.status = "number"
        tc, tb = _throughput(row), _throughput(base)
        if tc is None or tb is None:
            return  # a throughput without an interval: none for N either ("n<2")
        self.low, self.high = interval(once[0], base_once[0], tc, tb)

    @property
    def hours(self) -> float | None:
        """N at the compiler's throughput, in hours."""
        if self.value is None:
            return None
        return self.value / mean_throughput(self.row) / 3600

    def cell(self) -> Cell | str:
        """``N [low, high]`` as a cell; the word where there is no number (never, at once, -);
        an upper bound at infinity (some plausible throughputs never pay back) in the note."""
        if self.status != "number" or self.value is None:
            return self.status
        if not math.isfinite(self.low):
            return Cell(self.value, note="n<2")
        if not math.isfinite(self.high):
            return Cell(self.value, note=f"[{self.low:.3g}, unbounded]")
        return Cell(self.value, low=self.low, high=self.high)

    def runs_text(self) -> str:
        return "-" if self.compile_runs == (0, 0) else "{} / {}".format(*self.compile_runs)


def _throughput(row: TrialRow) -> Uncertain | None:
    """A row's mean throughput with its standard error and df (None without an interval)."""
    mean = derived.mean_of(row)
    return Uncertain(mean.value, mean.se, mean.df) if mean.known else None


def _one_time(
    row: TrialRow, runs: Mapping[tuple[str, str], list[float]] | None
) -> tuple[Uncertain, int] | None:
    """The point's mean one-time seconds over its stored runs (exact from one), and how many."""
    values = (runs or {}).get((str(row["device"]), str(row["key"]))) or []
    if not values:
        once = one_time_s(row)
        values = [once] if once is not None else []
    return (repeated(values), len(values)) if values else None


def one_time_runs(data: ReportData) -> dict[tuple[str, str], list[float]]:
    """Every stored run's export + compile seconds per (device, key): repeated compiles of one
    point, from which the break-even interval takes the compile-time spread. (The workers of one
    trial recompile too, but through compilers' caches and without the export: not a cold
    compile's spread.)"""
    where = "status = 'ok' AND (export_s IS NOT NULL OR compile_s IS NOT NULL)"
    params: list[str] = []
    if data.device is not None:
        where += " AND device = ?"
        params.append(data.device)
    _, rows = data.store.query(
        f"SELECT device, key, export_s, compile_s FROM trials WHERE {where}",  # noqa: S608
        params,
    )
    out: dict[tuple[str, str], list[float]] = {}
    for device, key, export_s, compile_s in rows:
        parts = [float(v) for v in (export_s, compile_s) if finite(v)]
        if parts:
            out.setdefault((str(device), str(key)), []).append(math.fsum(parts))
    return out


def breakeven(data: ReportData) -> Report:
    rows = [r for r in data.trials() if finite(r.get("throughput_mean"))]
    base_name = data.baseline
    table = Table(
        f"Break-even against {base_name}: inferences that pay back export + compile + tuning",
        ["device", "model", "compiler", "batch", "optimisation", "extra one-time s",
         "compile runs", "speed-up", "break-even (inferences)", "at full load (h)"],
    )  # fmt: skip
    runs = one_time_runs(data)
    one_run = 0
    for _key, cell in sorted(
        group_by(rows, _same_point).items(),
        key=lambda kv: (kv[0][0], str(kv[0][1]), kv[0][4], str(kv[0][7])),
    ):
        base = next((r for r in cell if r["compiler"] == base_name), None)
        if base is None:
            continue
        for r in sorted(cell, key=lambda r: compiler_order(r["compiler"])):
            if r is base:
                continue
            even = BreakEven(data, r, base, runs)
            speed = derived_cell(derived.speedup(r, base))
            one_run += even.status == "number" and 1 in even.compile_runs
            table.rows.append(
                [r["device"], r["label"], r["compiler"], r["batch"],
                 r.get("optimisation") or "none", even.extra_s, even.runs_text(), speed,
                 even.cell(), even.hours]
            )  # fmt: skip
    if one_run:
        # the header says it, as the issue asks: one run's compile time may be off by 4x
        table.title += (
            f" -- compile time from one run for {one_run} row(s): its spread is unknown and "
            "their intervals cover the throughputs only"
        )
    table.notes.append(
        "break-even N = (export + compile + tuning s of the compiler - the baseline's) / "
        "(1/T_base - 1/T_compiler); never = not significantly faster (speed-up interval includes "
        "1) or slower; at once = no extra one-time cost; [low, high] = 95 % interval by a "
        "seeded Monte Carlo over both throughputs' intervals and, where a point was compiled in "
        "several stored runs (compile runs: compiler / baseline), the spread of its one-time "
        "seconds (one run: taken as exact); unbounded = in some plausible draws the compiler is "
        "not faster; at full load = N / T_compiler"
    )
    report = Report("breakeven", f"Break-even against {base_name}", [table])
    if data.baseline_note:
        report.notes.append(data.baseline_note)
    if not table.rows:
        report.notes.append(f"no compiler measured beside the baseline ({base_name})")
    return report
