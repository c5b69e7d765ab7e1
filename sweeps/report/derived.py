"""Every derived number with its interval and verdict, computed once from stored results.

The console (``ngb.tui.results_data``), ``ngb report`` in every format, the HTML report and the
figures only render what this module returns, so one speed-up has one value, one interval and one
verdict wherever it is shown. Inputs are trial rows as the store gives them (``Store.trials`` or
``ReportData.trials``): the mean throughput, the stored half-width of its 95 % interval
(``throughput_ci_half``), its degrees of freedom (``extra["measure"]["df"]``), the run/device/key
that identify it and its recorded precision. The arithmetic is ``ngb.core.statistics.intervals``
(parametric, see there); the rounding is ``ngb.sweeps.report.numbers``.

A ``Derived`` carries its verdict flags:

- ``n.s.``: the printed (rounded) interval ``[low, high]`` includes the null (1 for ratios, 0
  for a slope) -- decided on the bounds a reader sees, one rule for every comparison (speed-up,
  cost, energy, across devices), so "n.s." is exactly where the printed interval includes it;
- ``n<2``: a result it is made of has no interval, so neither has it;
- ``baseline``: a speed-up of a result over itself (exactly 1, no interval; RTR/ASE/BSR at
  batch 1 are exact too, without a flag);
- ``≠prec``: the two results compared ran at different recorded precisions (the ratio then
  measures the number format too).
A trial's own flags (INVALID, disturbed, unstable) are ``result_flags``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass
from typing import Generic, TypeVar

from ngb.core.records.trial_extra import from_json
from ngb.core.statistics import intervals, student_t
from ngb.core.statistics.intervals import Estimate, Mean
from ngb.sweeps.report.numbers import Printed, format_interval, format_value, printed_bounds
from ngb.sweeps.rows import mapping, number

ResultRow = Mapping[str, object]  # a store row (``rows.StoreRow``) or one a caller built

NS = "n.s."
UNKNOWN = "n<2"
BASELINE_FLAG = "baseline"
PRECISION_MARK = "≠prec"


_number = number


def _measure(row: ResultRow) -> Mapping[str, object]:
    return mapping(from_json(row.get("extra")).get("measure"))


def degrees_of_freedom(row: ResultRow) -> float:
    """The stored interval's df (k - 1 processes, n - 1 for one), else n - 1 of the repetitions."""
    stored = _number(_measure(row).get("df"))
    if stored is not None:
        return stored
    n = _number(row.get("repetitions"))
    samples = row.get("samples")
    if n is None and isinstance(samples, Sized):
        n = float(len(samples))
    return max((n or 0.0) - 1, 0.0)


def half_width(row: ResultRow, df: float) -> float | None:
    """The stored 95 % half-width; for rows stored without one, t * std / sqrt(n) from the
    stored std (or, where a caller attached them as ``samples``, the per-repetition values)."""
    stored = _number(row.get("throughput_ci_half"))
    if stored is not None:
        return stored
    std, n = _number(row.get("throughput_std")), _number(row.get("repetitions"))
    listed = row.get("samples")
    values = listed if isinstance(listed, Iterable) and not isinstance(listed, str) else ()
    samples = [v for v in map(_number, values) if v is not None]
    if std is None and len(samples) >= 2:
        std, n = statistics.stdev(samples), float(len(samples))
    if std is None or n is None or n < 2 or df < 1:
        return None
    return student_t.t_two_sided(0.95, df) * std / math.sqrt(n)


def mean_of(row: ResultRow) -> Mean:
    """One stored result as a ``Mean`` (identified by run, device and key)."""
    value = _number(row.get("throughput_mean"))
    df = degrees_of_freedom(row)
    # a row without a trial key (built by hand) is only ever itself
    key = (row.get("run_id"), row.get("device"), row["key"]) if row.get("key") else ("row", id(row))
    level = _number(_measure(row).get("confidence")) or intervals.LEVEL
    return Mean(value if value is not None else math.nan, half_width(row, df), df, key, level=level)


def result_flags(row: ResultRow) -> tuple[str, ...]:
    """The trial's own warnings: its verdict when not VALID, unstable, disturbed."""
    out = []
    verdict = row.get("verdict")
    if isinstance(verdict, str) and verdict and verdict.upper() != "VALID":
        out.append(verdict.upper())
    if row.get("unstable"):
        out.append("unstable")
    if row.get("disturbed"):
        out.append("disturbed")
    return tuple(out)


def precision_of(row: ResultRow) -> str | None:
    value = row.get("precision")
    return str(value) if value else None


def precision_differs(a: ResultRow, b: ResultRow) -> bool:
    """Both precisions recorded and different (an unrecorded one differs from nothing)."""
    pa, pb = precision_of(a), precision_of(b)
    return pa is not None and pb is not None and pa != pb


@dataclass(frozen=True)
class Derived:
    """A derived value, its interval and its verdict flags (see module)."""

    estimate: Estimate
    flags: tuple[str, ...] = ()
    null: float | None = None

    @property
    def value(self) -> float:
        return self.estimate.value

    @property
    def interval(self) -> tuple[float, float] | None:
        """The interval's bounds (None: unknown, and for exact values)."""
        e = self.estimate
        return (e.lo, e.hi) if e.known and not e.exact else None

    @property
    def low(self) -> float | None:
        return self.interval[0] if self.interval else None

    @property
    def high(self) -> float | None:
        return self.interval[1] if self.interval else None

    @property
    def printed(self) -> Printed | None:
        """The value and bounds as every surface prints them (None without an interval)."""
        bounds = self.interval
        return printed_bounds(self.value, *bounds) if bounds else None

    @property
    def significant(self) -> bool | None:
        """Whether the printed interval excludes the null (None: no null, or unknown)."""
        if self.null is None or self.interval is None:
            return None
        return NS not in self.flags

    def number(self) -> str:
        """The value and its printed interval, without flags."""
        bounds = self.interval
        return format_interval(self.value, *bounds) if bounds else format_value(self.value)

    def text(self, with_flags: bool = True) -> str:
        body = self.number()
        notes = [f"({f})" if f == BASELINE_FLAG else f for f in self.flags]
        return " ".join([body, *notes]) if with_flags and notes else body


def judge(estimate: Estimate, null: float | None, extra: Sequence[str] = ()) -> Derived:
    """Wrap an estimate with its verdict, decided on the printed (rounded) interval."""
    flags: list[str] = []
    if estimate.exact or not math.isfinite(estimate.value):
        pass  # exact by definition, or nothing to judge
    elif not estimate.known:
        flags.append(UNKNOWN)
    elif null is not None:
        printed = printed_bounds(estimate.value, estimate.lo, estimate.hi)
        if printed is None or printed.includes(null):
            flags.append(NS)
    flags.extend(extra)
    return Derived(estimate, tuple(flags), null)


def throughput(row: ResultRow) -> Derived:
    """A result's own mean throughput with its stored interval on the log scale (positive)."""
    return judge(intervals.positive(mean_of(row)), None)


def batch_time_ms(row: ResultRow, batch: int) -> Derived:
    """The time one batch takes (ms): ``1000 * batch / T``, the throughput's stored interval
    carried over on the log scale (its bounds swap): DLAS's "inference time" cells."""
    return judge(intervals.power_product([(mean_of(row), -1.0)], scale=1000.0 * batch), None)


def of_expected(achieved: Derived, expected: float) -> Derived | None:
    """DLAS's "% of expected": ``100 * achieved / expected`` (a speed-up over a stated, exact
    expectation), the speed-up's interval scaled with it; n.s. where the printed interval
    includes 100 (the expected speed-up was reached). None without a positive expectation."""
    if not (math.isfinite(expected) and expected > 0):
        return None
    k, e = 100.0 / expected, achieved.estimate
    scaled = Estimate(e.value * k, e.lo * k, e.hi * k, e.df, e.exact, e.level)
    kept = tuple(f for f in achieved.flags if f not in (NS, UNKNOWN))
    return judge(scaled, 100.0, kept)


def energy_mean(row: ResultRow) -> Mean:
    """A result's energy per sample (J) with its interval over the same processes (their df)."""
    value = _number(row.get("energy_j_per_sample"))
    half = _number(row.get("energy_j_per_sample_ci_half"))
    base = mean_of(row)
    key = ("energy", base.key)
    return Mean(value if value is not None else math.nan, half, base.df, key, level=base.level)


def energy(row: ResultRow, scale: float = 1.0) -> Derived:
    """Energy per sample (J, times ``scale``) with its interval on the log scale (positive)."""
    return judge(intervals.power_product([(energy_mean(row), 1.0)], scale=scale), None)


def cost(row: ResultRow, price_per_hour: float) -> Derived:
    """Cost per million inferences at the result's throughput (``pricing.cost_per_million``:
    ``price / 3600 * 1e6 / T``), the throughput's interval carried over (its bounds swap)."""
    from ngb.devices.pricing import cost_per_million

    tput = intervals.positive(mean_of(row))
    low, high = (tput.lo, tput.hi) if tput.known else (None, None)
    return judge(cost_per_million(price_per_hour, tput.value, low, high), None)


def ratio(a: Mean, b: Mean, scale: float = 1.0) -> Derived:
    """``scale * a / b`` judged against 1: the one test for every comparison that is not a
    speed-up of two rows (energy, cost, across devices)."""
    return judge(intervals.power_product([(a, 1.0), (b, -1.0)], scale=scale), 1.0)


def speedup(row: ResultRow, base: ResultRow) -> Derived:
    """T_row / T_base; exactly 1 ("baseline") when they are the same result."""
    marks = (PRECISION_MARK,) if precision_differs(row, base) else ()
    estimate = intervals.speedup(mean_of(row), mean_of(base))
    return judge(estimate, 1.0, (BASELINE_FLAG,) if estimate.exact else marks)


def rtr(row_b: ResultRow, row_1: ResultRow) -> Derived:
    """T(b) / T(1) of one compiler (exactly 1 at batch 1)."""
    return judge(intervals.rtr(mean_of(row_b), mean_of(row_1)), None)


def ase(row_b: ResultRow, row_1: ResultRow, batch: int) -> Derived:
    """T(b) / (b T(1)); 1 = perfect scaling (no null: efficiency is a scale, not a test)."""
    return judge(intervals.ase(mean_of(row_b), mean_of(row_1), batch), None)


def bsr(c_b: ResultRow, c_1: ResultRow, i_b: ResultRow, i_1: ResultRow) -> Derived:
    """ASE_c(b) / ASE_baseline(b); 1 = scales as the baseline."""
    estimate = intervals.bsr(mean_of(c_b), mean_of(c_1), mean_of(i_b), mean_of(i_1))
    # exact by definition (batch 1, the baseline itself): no precision effect to point out
    mismatch = precision_differs(c_b, i_b) and not estimate.exact
    return judge(estimate, 1.0, (PRECISION_MARK,) if mismatch else ())


def depth_trend(
    depths: Sequence[int], compiler: Sequence[ResultRow], identity: Sequence[ResultRow]
) -> tuple[Derived, Derived | None]:
    """Slope of speed-up over depth (null 0) and retention (null 1; None without depth 1)."""
    slope, kept = intervals.depth_trend(
        depths, [mean_of(r) for r in compiler], [mean_of(r) for r in identity]
    )
    return judge(slope, 0.0), (judge(kept, 1.0) if kept is not None else None)


def mean_of_means(rows: Sequence[ResultRow]) -> Derived:
    """A Table VI cell: the mean of several results' means with its measurement interval."""
    return judge(intervals.mean_of_means([mean_of(r) for r in rows]), None)


# ---- the batch-scaling table (RTR, ASE, BSR, speed-up per compiler and batch) ---------------


R = TypeVar("R", bound=ResultRow)  # the caller's row type, handed back as ``BatchPoint.row``


@dataclass(frozen=True)
class BatchPoint(Generic[R]):
    """One compiler at one batch of one model: every batch-scaling number of the ``bsr`` table,
    the console's Results table and Figs. 6/8/9/11."""

    compiler: str
    batch: int
    row: R
    throughput: Derived
    rtr: Derived | None  # None without a batch-1 result of this compiler
    ase: Derived | None
    bsr: Derived | None  # None without the baseline at batch 1 and at this batch
    speedup: Derived | None  # None without the baseline at this batch


def batch_points(per_compiler: Mapping[str, Mapping[int, R]], baseline: str) -> list[BatchPoint[R]]:
    """``{compiler: {batch: row}}`` of one model -> every batch point, compilers in given order."""
    base = per_compiler.get(baseline, {})
    out = []
    for compiler, rows in per_compiler.items():
        one = rows.get(1)
        for batch, row in sorted(rows.items()):
            have_one = one is not None
            both = have_one and batch in base and 1 in base
            out.append(
                BatchPoint(
                    compiler,
                    batch,
                    row,
                    throughput(row),
                    rtr(row, one) if one is not None else None,
                    ase(row, one, batch) if one is not None else None,
                    bsr(row, one, base[batch], base[1]) if both and one is not None else None,
                    speedup(row, base[batch]) if batch in base else None,
                )
            )
    return out


# ---------------------------------------------------------------- accuracy (issue 42)


def _accuracy(row: ResultRow) -> Mapping[str, object]:
    """The trial's accuracy pass (``extra["accuracy"]``, ``ngb.core.trial.accuracy_pass``)."""
    return mapping(from_json(row.get("extra")).get("accuracy"))


def _points(row: ResultRow, name: str, null: float | None) -> Derived | None:
    """A stored fraction and its stored bounds, in percent (points); None where not recorded."""
    record = _accuracy(row)
    value = _number(record.get(name))
    if value is None:
        return None
    bounds = record.get(f"{name}_ci")
    low, high = (
        (_number(bounds[0]), _number(bounds[1]))
        if isinstance(bounds, Sequence) and not isinstance(bounds, str) and len(bounds) == 2
        else (None, None)
    )
    if low is None or high is None:
        return judge(Estimate(100 * value), null)
    if low == high == value:  # no discordant pair: the same answers, nothing to judge
        return judge(Estimate.exactly(100 * value), null, [NS] if null is not None else [])
    return judge(Estimate(100 * value, 100 * low, 100 * high), null)


def top1(row: ResultRow) -> Derived | None:
    """The compiled model's top-1 accuracy (%) on the labelled set, its Wilson interval."""
    return _points(row, "top1", None)


def top5(row: ResultRow) -> Derived | None:
    """Top-5 accuracy (%), recorded where the model scores more than 5 classes."""
    return _points(row, "top5", None)


def eager_top1(row: ResultRow) -> Derived | None:
    """Eager fp32's top-1 (%) on the same inputs: the baseline of the drop."""
    return _points(row, "eager_top1", None)


def agreement(row: ResultRow) -> Derived | None:
    """The share (%) of samples whose top-1 is eager's."""
    return _points(row, "agreement", None)


def accuracy_drop(row: ResultRow) -> Derived | None:
    """Eager top-1 minus the compiled model's, in points, with the exact conditional interval
    of McNemar's test; n.s. where the printed interval includes 0, as every comparison."""
    return _points(row, "drop", 0.0)
