"""What stands beside each number the console shows: the 95 % interval, the verdict, and "n.s.".

Pure functions over trial rows (no Textual). A row's spread comes from, in order of preference:
the stored interval half-width (the stopping rule's column, when the store has it), a Student-t
interval over the per-repetition throughputs (``measurements``, attached to the row as
``samples``), or the stored ``throughput_std`` with ``repetitions``. Two values are compared with
the test the CLI reports use (the 95 % bootstrap interval of their ratio,
``ngb.core.intervals.speedup``, must exclude 1), so the console and ``ngb report`` never disagree
on what is "n.s."; only rows stored without repetitions fall back to Welch's test on the summary
statistics.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

LEVEL = 0.95
#: stored interval half-width columns, newest name first (absent in older stores)
HALF_WIDTH_COLUMNS = ("throughput_ci_half", "ci_half_width", "throughput_ci_half_width")


@dataclass(frozen=True)
class Measured:
    """A throughput with its 95 % interval half-width (None when it cannot be told)."""

    mean: float
    half: float | None = None
    n: int = 0
    samples: tuple[float, ...] = ()
    std: float | None = None
    flags: tuple[str, ...] = ()  # "unstable", "INVALID", "disturbed": shown beside the number
    precision: str | None = None  # as it ran (fp32, bf16, ...); None when not recorded

    @property
    def relative(self) -> float | None:
        return self.half / self.mean if self.half is not None and self.mean else None


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _t_half(std: float, n: int) -> float:
    from scipy import stats

    return float(stats.t.ppf((1 + LEVEL) / 2, n - 1)) * std / math.sqrt(n)


def flags_of(row: Mapping[str, Any]) -> tuple[str, ...]:
    """The trial's own warnings: the stored verdict when not VALID, unstable, disturbed."""
    out = []
    verdict = row.get("verdict")
    if isinstance(verdict, str) and verdict and verdict.upper() != "VALID":
        out.append(verdict.upper())
    if row.get("unstable"):
        out.append("unstable")
    if row.get("disturbed"):
        out.append("disturbed")
    return tuple(out)


def measured(row: Mapping[str, Any], mean: float) -> Measured:
    samples = tuple(float(v) for v in row.get("samples") or () if _number(v) is not None)
    std = _number(row.get("throughput_std"))
    n = len(samples) or int(_number(row.get("repetitions")) or 0)
    half = next((h for c in HALF_WIDTH_COLUMNS if (h := _number(row.get(c))) is not None), None)
    if half is None and len(samples) >= 2:
        from ngb.core.intervals import mean_interval  # widened for serial correlation

        half = mean_interval(samples, LEVEL).half_width
    elif half is None and std is not None and n >= 2:
        half = _t_half(std, n)
    precision = row.get("precision")
    return Measured(
        mean, half, n, samples, std, flags_of(row), str(precision) if precision else None
    )


def precision_differs(a: Measured, b: Measured) -> bool:
    """True when both precisions are recorded and differ: a ratio of the two then measures the
    number format too (OpenVINO's bf16 against eager's fp32, say), not only the compiler."""
    return a.precision is not None and b.precision is not None and a.precision != b.precision


def ratio(a: Measured, b: Measured) -> Measured:
    """a / b with the half-width propagated from both relative half-widths (first order)."""
    value = a.mean / b.mean
    ra, rb = a.relative, b.relative
    half = value * math.hypot(ra, rb) if ra is not None and rb is not None else None
    return Measured(value, half, min(a.n, b.n), flags=tuple(dict.fromkeys(a.flags + b.flags)))


def significance_flag(a: Measured, b: Measured) -> str:
    """ "" when a and b differ significantly, "n.s." when not, "n<2" when it cannot be told."""
    from ngb.core.intervals import speedup

    if len(a.samples) >= 2 and len(b.samples) >= 2:
        return "" if speedup(a.samples, b.samples).excludes(1.0) else "n.s."
    if a.std is None or b.std is None or a.n < 2 or b.n < 2:
        return "n<2"
    # No per-repetition samples stored: the same Welch test from the summary statistics.
    from scipy import stats

    if a.std == 0 and b.std == 0:
        return "" if a.mean != b.mean else "n.s."
    p = stats.ttest_ind_from_stats(a.mean, a.std, a.n, b.mean, b.std, b.n, equal_var=False).pvalue
    return "" if float(p) < 0.05 else "n.s."


def digits_for(values: Sequence[float]) -> int:
    """Decimals that keep a column's numbers comparable (one precision per column)."""
    finite = [abs(v) for v in values if math.isfinite(v)]
    top = max(finite, default=0.0)
    return 1 if top >= 100 else 2 if top >= 10 else 3


def fmt(value: float | None, digits: int) -> str:
    return f"{value:.{digits}f}" if value is not None and math.isfinite(value) else "--"


def fmt_pm(m: Measured | None, digits: int, note: str = "") -> str:
    """``1200.0 ±12.3`` (``±?`` when the spread is unknown), then any note such as ``n.s.``."""
    if m is None:
        return "--"
    spread = f"±{m.half:.{digits}f}" if m.half is not None else "±?"
    return " ".join(part for part in (f"{m.mean:.{digits}f}", spread, note) if part)
