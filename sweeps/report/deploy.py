"""Reports for deciding what to deploy (issue 23): energy and cost per inference, break-even.

- energy: every trial's throughput ([its interval], as in ``bsr``), cost per million inferences
  (``price_per_hour`` from the inventory, ``ngb.devices.pricing``; the throughput's interval
  carried over), energy per sample measured on the device around the timed loops ([its
  interval] over worker processes, ``ngb.core.trial.energy``), above-idle energy, samples per joule,
  mean and idle watts, and the meter. Trials without a meter show "-" and the notes say why,
  once per device ("no power meter: RAPL not readable ...").
- breakeven: for every compiler against the baseline (same device, model, batch, optimisation),
  the inferences after which its extra one-time cost -- export + compile (tuning included) minus
  the baseline's -- is paid back by its per-inference saving 1/T_base - 1/T_c:
  N = extra / (1/T_base - 1/T_c), with a 95 % interval over both throughputs' intervals and the
  spread of the one-time seconds where the point was compiled in several stored runs
  (``ngb.core.statistics.breakeven``: a seeded Monte Carlo); from one run they are taken as exact,
  and the table's header says so. "never" where the compiler is not significantly faster (the
  speed-up's interval includes 1, the test every report uses) or slower; "at once" where it costs no
  more to prepare. "at full load" is N at the compiler's throughput, in hours.

The price is the one of the inventory entry a result ran under (``ReportData.price_for``): a
result stored under the Slurm node that ran it (``gpu07@a100``) is priced as its Slurm entry.

Both reports list every point. Built for a streamed rendering (``ReportData.streaming``: ``ngb
report`` as a table, Markdown or CSV) they read the trials a batch at a time, sorted by the
store (``ReportData.streamed``), and keep their rows on disk (``RowSpool``): one loop, fed by
``each_trial`` either way, and the same numbers from ``derived`` -- only where the rows wait
differs. On a store of 480,000 distinct points the whole way took the report far over its
300 MB goal.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, cast

from ngb.core.statistics.breakeven import Uncertain, interval, pays_back_after, repeated
from ngb.sweeps.report import derived
from ngb.sweeps.report.data import (
    Cell,
    Report,
    ReportData,
    Table,
    finite,
    mean_throughput,
    precision_of,
)
from ngb.sweeps.report.paper import UNCERTAINTY_NOTE, compiler_order, throughput_cell
from ngb.sweeps.report.paper import cell as derived_cell
from ngb.sweeps.report.spool import RowSpool
from ngb.sweeps.rows import TrialRow

if TYPE_CHECKING:
    from ngb.devices.pricing import Price


def _same_point(r: TrialRow) -> tuple[str, str, object, object, int, object, object, object]:
    """The point a compiler's break-even is computed at: everything but the compiler."""
    return (
        r["device"], r["model"], r.get("width"), r.get("depth"), r["batch"], r.get("target"),
        r.get("input_size"), r.get("optimisation"),
    )  # fmt: skip


def cost_cell(data: ReportData, row: TrialRow, price: Price | None = None) -> Cell:
    """Cost per million inferences [its interval, carried over from the throughput's], at the
    price of the device the row ran on (``ReportData.price_for``; ``price`` where the caller
    looked it up already)."""
    price = price if price is not None else data.price_for(row)
    if price is None:
        return Cell(None)
    return derived_cell(derived.cost(row, price.per_hour)) or Cell(None)


#: a column ``each_trial`` adds for the sort: the compiler's place in the registry
COMPILER_RANK = "compiler_rank"


def _rank(row: Mapping[str, object]) -> tuple[int, str]:
    return compiler_order(str(row["compiler"]))


@contextlib.contextmanager
def each_trial(
    data: ReportData,
    order: Sequence[str],
    key: Callable[[TrialRow], tuple[object, ...]],
    select: str = "",
) -> Iterator[Iterator[TrialRow]]:
    """The trials of a report of every point, in order: a batch at a time from the store where
    ``data.streaming`` (sorted there by ``order``; ``COMPILER_RANK`` is the compiler's place),
    else ``data.trials()`` sorted by ``key``, the same order -- one loop either way.
    ``select``: more SQL columns, read only where streaming."""
    if not data.streaming:
        yield iter(sorted(data.trials(), key=key))
        return
    keys = {COMPILER_RANK: lambda r: _rank(r)[0]}
    with data.streamed(order, keys, select) as batches:
        yield (row for batch in batches for row in batch)


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
    table = Table(
        "Energy and cost per inference",
        ["device", "model", "compiler", "batch", "optimisation", "precision", "samples/s",
         "cost / 1M", "mJ/sample", "mJ above idle", "samples/J", "W", "idle W", "meter"],
        spool=RowSpool() if data.streaming else None,
    )  # fmt: skip
    without: dict[str, tuple[int, set[str]]] = {}  # device -> trials without energy, why
    unpriced: set[str] = set()
    order = ("device", "label", COMPILER_RANK, "compiler", "batch")

    def key(r: TrialRow) -> tuple[object, ...]:
        return (r["device"], r["label"], *_rank(r), r["batch"])  # ``order`` in Python

    with each_trial(data, order, key) as rows:
        for r in rows:
            if not finite(r.get("throughput_mean")):
                continue
            price = data.price_for(r)
            if price is None:
                unpriced.add(r["device"])
            table.add(
                [r["device"], r["label"], r["compiler"], r["batch"],
                 r.get("optimisation") or "none", precision_of(r), throughput_cell(data, r),
                 cost_cell(data, r, price), energy_cell(r),
                 _scaled(r.get("energy_above_idle_j_per_sample"), 1000.0),
                 _scaled(r.get("samples_per_j")), _scaled(r.get("power_w_mean")),
                 _scaled(r.get("idle_power_w")), r.get("energy_source") or "-"]
            )  # fmt: skip
            if not finite(r.get("energy_j_per_sample")):
                count, reasons = without.get(r["device"], (0, set()))
                reasons.add(str(r.get("energy_note") or "no power meter: not recorded"))
                without[r["device"]] = (count + 1, reasons)
    table.notes.append(
        "mJ/sample: measured on the device around the timed loops, idle included ([95 % "
        "interval] over worker processes); mJ above idle subtracts the idle power measured before "
        "the warm-up; cost / 1M = price_per_hour / 3600 / samples/s x 1e6 (price from the "
        "inventory, in its own units; its interval carried over from the throughput's)"
    )
    table.notes.append(UNCERTAINTY_NOTE)
    report = Report("energy", "Energy and cost per inference", [table])
    for device, (count, reasons) in without.items():
        report.notes.append(
            f"{device}: {count} trial(s) without energy: {'; '.join(sorted(reasons))}"
        )
    if unpriced:
        report.notes.append(
            f"no price_per_hour in the inventory for {', '.join(sorted(unpriced))}: no cost "
            "(set it per device or group in devices.toml)"
        )
    return report


def one_time_s(row: TrialRow) -> float | None:
    """Export + compile (tuning included) seconds; None when neither was recorded."""
    parts = [_scaled(row.get("export_s")), _scaled(row.get("compile_s"))]
    known = [p for p in parts if p is not None]
    return math.fsum(known) if known else None


class BreakEven:
    """N inferences with its interval (``ngb.core.statistics.breakeven``) for one compiler row
    against its baseline row; ``runs`` holds each point's one-time seconds over every stored run."""

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
    _, rows = data.store.select(
        f"SELECT device, key, export_s, compile_s FROM trials WHERE {where}",  # noqa: S608
        params,
    )
    pairs: dict[tuple[str, str], list[object]] = {}
    for device, key, export_s, compile_s in rows:
        pairs.setdefault((str(device), str(key)), []).append([export_s, compile_s])
    found = {point: _one_time_values(listed) for point, listed in pairs.items()}
    return {point: values for point, values in found.items() if values}


def _one_time_values(pairs: Iterable[object]) -> list[float]:
    """Each run's export + compile seconds from its ``[export_s, compile_s]``: the finite parts
    summed, a run with neither left out."""
    out = []
    for pair in pairs:
        parts = [float(v) for v in (pair if isinstance(pair, list | tuple) else ()) if finite(v)]
        if parts:
            out.append(math.fsum(parts))
    return out


#: SQL over the trial ``t``: each stored run's [export_s, compile_s] of its point
#: (``one_time_runs``, for a report read a batch at a time)
_ONE_TIME_SQL = (
    "(SELECT list([o.export_s, o.compile_s]) FROM trials o WHERE o.status = 'ok' "
    "AND o.device = t.device AND o.key = t.key "
    "AND (o.export_s IS NOT NULL OR o.compile_s IS NOT NULL)) AS one_time"
)
#: the break-even table's order: the point (all of ``_same_point``), then the compiler
_BREAKEVEN_ORDER = (
    "device", "model", "batch", "optimisation", "width", "depth", "target", "input_size",
    COMPILER_RANK, "compiler", "precision",
)  # fmt: skip


def _last(value: object) -> tuple[bool, object]:
    """A sort key that puts None last, as SQL's ``ORDER BY`` does."""
    return (value is None, value if value is not None else 0)


def _breakeven_key(r: TrialRow) -> tuple[object, ...]:
    """``_BREAKEVEN_ORDER`` in Python (``each_trial`` where nothing is streamed)."""
    point = (r.get("optimisation"), r.get("width"), r.get("depth"), r.get("target"),
             r.get("input_size"))  # fmt: skip
    return (r["device"], r["model"], r["batch"], *map(_last, point), *_rank(r),
            _last(r.get("precision")))  # fmt: skip


def _spilled_runs(rows: list[TrialRow]) -> dict[tuple[str, str], list[float]]:
    """``one_time_runs`` of these rows, from the column ``_ONE_TIME_SQL`` read with them."""
    out = {}
    for r in rows:
        pairs = cast(Mapping[str, object], r).get("one_time")
        listed = pairs if isinstance(pairs, list) else []
        out[(str(r["device"]), str(r["key"]))] = _one_time_values(listed)
    return out


def breakeven(data: ReportData) -> Report:
    base_name = data.baseline
    table = Table(
        f"Break-even against {base_name}: inferences that pay back export + compile + tuning",
        ["device", "model", "compiler", "batch", "optimisation", "extra one-time s",
         "compile runs", "speed-up", "break-even (inferences)", "at full load (h)"],
        spool=RowSpool() if data.streaming else None,
    )  # fmt: skip
    runs = None if data.streaming else one_time_runs(data)
    one_run = 0
    with each_trial(data, _BREAKEVEN_ORDER, _breakeven_key, _ONE_TIME_SQL) as trials:
        rows = (r for r in trials if finite(r.get("throughput_mean")))
        for _key, grouped in itertools.groupby(rows, key=_same_point):
            cell = list(grouped)
            base = next((r for r in cell if r["compiler"] == base_name), None)
            if base is None:
                continue
            these = runs if runs is not None else _spilled_runs(cell)
            for r in cell:
                if r is base:
                    continue
                even = BreakEven(data, r, base, these)
                speed = derived_cell(derived.speedup(r, base))
                one_run += even.status == "number" and 1 in even.compile_runs
                table.add(
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
    if not table.row_count():
        report.notes.append(f"no compiler measured beside the baseline ({base_name})")
    return report
