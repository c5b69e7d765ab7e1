"""Reports for deciding what to deploy (issue 23): energy and cost per inference, break-even.

- energy: every trial's throughput (± its interval, as in ``bsr``), cost per million inferences
  (``price_per_hour`` from the inventory, ``ngb.devices.pricing``; the throughput's interval
  carried over), energy per sample measured on the device around the timed loops (± its
  interval over worker processes, ``ngb.core.energy``), above-idle energy, samples per joule,
  mean and idle watts, and the meter. Trials without a meter show "-" and the notes say why,
  once per device ("no power meter: RAPL not readable ...").
- breakeven: for every compiler against the baseline (same device, model, batch, optimisation),
  the inferences after which its extra one-time cost -- export + compile (tuning included) minus
  the baseline's -- is paid back by its per-inference saving 1/T_base - 1/T_c:
  N = extra / (1/T_base - 1/T_c), with an interval: N at the ends of the printed 95 % speed-up
  interval (``ngb.sweeps.derived``, the one every surface shows), at the baseline's mean;
  compile times are single measurements, taken as exact.
  "never" where the compiler is not significantly faster (the speed-up's interval includes 1, the
  test every report uses) or slower; "at once" where it costs no more to prepare. "at full load"
  is N at the compiler's throughput, in hours.
"""

from __future__ import annotations

import math

from ngb.sweeps import derived
from ngb.sweeps.numbers import printed_interval
from ngb.sweeps.report_data import (
    Cell,
    Report,
    ReportData,
    Table,
    finite,
    group_by,
    mean_throughput,
    precision_of,
)
from ngb.sweeps.report_paper import UNCERTAINTY_NOTE, compiler_order, throughput_cell
from ngb.sweeps.report_paper import cell as derived_cell
from ngb.sweeps.rows import TrialRow

#: the upper end of a break-even interval whose speed-up interval reaches 1: never pays back
_NEVER = 1e30


def _same_point(r: TrialRow) -> tuple[str, str, object, object, int, object, object, object]:
    """The point a compiler's break-even is computed at: everything but the compiler."""
    return (
        r["device"], r["model"], r.get("width"), r.get("depth"), r["batch"], r.get("target"),
        r.get("input_size"), r.get("optimisation"),
    )  # fmt: skip


def cost_cell(data: ReportData, row: TrialRow) -> Cell:
    """Cost per million inferences ± the half-width carried over from the throughput's interval."""
    from ngb.devices.pricing import cost_per_million

    price = data.prices.get(row["device"])
    if price is None:
        return Cell(None)
    tput = throughput_cell(data, row)
    if tput is None or tput.value is None:
        return Cell(None)
    est = cost_per_million(price.per_hour, tput.value, tput.std)
    return Cell(est.value, est.half_width, "" if tput.std is not None else "n<2")


def energy_cell(row: TrialRow, scale: float = 1000.0) -> Cell:
    """Energy per sample in mJ ± its interval over processes (None without a meter)."""
    value = _scaled(row.get("energy_j_per_sample"), scale)
    if value is None:
        return Cell(None)
    return Cell(value, _scaled(row.get("energy_j_per_sample_ci_half"), scale))


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
        "mJ/sample: measured on the device around the timed loops, idle included (± = 95 % "
        "interval over worker processes); mJ above idle subtracts the idle power measured before "
        "the warm-up; cost / 1M = price_per_hour / 3600 / samples/s x 1e6 (price from the "
        "inventory, in its own units; ± carried over from the throughput's interval)"
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
    """N inferences (with its interval) for one compiler row against its baseline row."""

    def __init__(self, data: ReportData, row: TrialRow, base: TrialRow) -> None:
        self.row, self.base = row, base
        self.extra_s: float | None = None
        self.value: float | None = None
        self.low = self.high = math.nan
        self.status = "-"  # never | at once | a number | - (unknown)
        once, base_once = one_time_s(row), one_time_s(base)
        t_c, t_b = mean_throughput(row), mean_throughput(base)
        if once is None or base_once is None or not (t_b > 0 and t_c > 0):
            return
        self.extra_s = extra_s = once - base_once
        speedup = derived.speedup(row, base)
        faster = t_c > t_b and (speedup.half is None or speedup.significant is True)
        if not faster:
            self.status = "never"
            return
        if extra_s <= 0:
            self.status, self.value = "at once", 0.0
            return
        self.value = extra_s / (1 / t_b - 1 / t_c)
        self.status = "number"
        if speedup.half is None:
            return
        # N = extra * T_base * s / (s - 1) falls as the speed-up s rises: its interval comes from
        # the printed speed-up interval (the one every surface shows), at the baseline's mean;
        # where that interval reaches 1 the pay-back is unbounded
        s_low, s_high = printed_interval(speedup.value, speedup.half)

        def pays_back_after(s: float) -> float:
            return extra_s * t_b * s / (s - 1) if s > 1 else _NEVER

        self.low, self.high = pays_back_after(s_high), pays_back_after(s_low)

    @property
    def hours(self) -> float | None:
        """N at the compiler's throughput, in hours."""
        if self.value is None:
            return None
        return self.value / mean_throughput(self.row) / 3600

    def text(self) -> str:
        if self.status != "number" or self.value is None:
            return self.status
        return f"{self.value:.3g}"

    def interval_text(self) -> str:
        if self.status != "number" or not math.isfinite(self.low):
            return "-" if self.status != "number" else "n<2"
        high = "unbounded" if self.high >= _NEVER / 10 else f"{self.high:.3g}"
        return f"[{self.low:.3g}, {high}]"


def breakeven(data: ReportData) -> Report:
    rows = [r for r in data.trials() if finite(r.get("throughput_mean"))]
    base_name = data.baseline
    table = Table(
        f"Break-even against {base_name}: inferences that pay back export + compile + tuning",
        ["device", "model", "compiler", "batch", "optimisation", "extra one-time s",
         "speed-up", "break-even (inferences)", "95 % interval", "at full load (h)"],
    )  # fmt: skip
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
            even = BreakEven(data, r, base)
            speed = derived_cell(derived.speedup(r, base))
            hours = even.hours
            table.rows.append(
                [r["device"], r["label"], r["compiler"], r["batch"],
                 r.get("optimisation") or "none", even.extra_s, speed,
                 even.text(), even.interval_text(), hours]
            )  # fmt: skip
    table.notes.append(
        "break-even N = (export + compile + tuning s of the compiler - the baseline's) / "
        "(1/T_base - 1/T_compiler); never = not significantly faster (speed-up interval includes "
        "1) or slower; at once = no extra one-time cost; interval: N at the ends of the printed "
        "95 % speed-up interval, at the baseline's mean (compile times taken as exact); at full "
        "load = N / T_compiler"
    )
    report = Report("breakeven", f"Break-even against {base_name}", [table])
    if data.baseline_note:
        report.notes.append(data.baseline_note)
    if not table.rows:
        report.notes.append(f"no compiler measured beside the baseline ({base_name})")
    return report
