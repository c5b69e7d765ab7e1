"""When a trial stops repeating, and whether its number can be trusted (VALID / INVALID).

Two modes, chosen by ``MeasureSettings.repetitions``:

- **adaptive** (``repetitions = None``, the default): keep timing repetitions until the Student-t
  confidence interval of the mean throughput (``confidence``, default 95 %) is within
  ``ci_target`` of the mean (default ±2 %), with at least ``min_repetitions`` and at most
  ``max_repetitions`` in all, and no more than ``max_measure_s`` seconds of timed loops. This is
  pyperf's and MLPerf LoadGen's idea: a run ends on what it has learnt, not on a count.
- **fixed** (``repetitions = N``, e.g. the paper's 100): exactly N repetitions.

The repetitions are spread over ``workers`` processes (see ``ngb.core.workers``); each process gets
a ``Plan`` for its share. In adaptive mode a worker stops once it has its minimum share and the
interval over *every* repetition so far (earlier workers' included, ``Plan.prior``) meets the
target, so a process whose mean differs from the others' widens the pooled interval and keeps the
trial going -- process-level variance is inside the interval, not hidden from it.

Either way the trial ends with a verdict (``judge``): VALID when it has >= 2 repetitions, was not
disturbed by other processes, and its interval is within the target; otherwise INVALID with the
reason. A fixed count is judged the same way, so a 100-repetition run still says how sure it is.

``settle`` is the warm-up for devices whose clocks ramp (GPUs): warm-up windows repeat until both
throughput and the clock reading of the last two windows agree within a tolerance, or a time cap.

The t quantile uses scipy where installed and a Cornish-Fisher expansion otherwise (devices carry
no scipy; the expansion is within 0.13 % of scipy for a 95 % interval, exact below 3 degrees of
freedom).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

from ngb.core.serial import inflation, lag1, long_run_factor

VALID = "VALID"
INVALID = "INVALID"

# Why a worker stopped (recorded per worker; the verdict names the last one).
STOP_CI = "ci target met"
STOP_MAX = "maximum repetitions"
STOP_TIME = "time cap"
STOP_FIXED = "fixed count"


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    try:
        from scipy import stats

        return float(stats.t.ppf(p, df))
    except ImportError:
        return _t_quantile_approx(p, df)


def _t_quantile_approx(p: float, df: int) -> float:
    if df == 1:  # Cauchy: exact
        return math.tan(math.pi * (p - 0.5))
    if df == 2:  # exact closed form
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z = NormalDist().inv_cdf(p)
    v = float(df)
    return (
        z
        + (z**3 + z) / (4 * v)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
        + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * v**4)
    )


@dataclass(frozen=True)
class Interval:
    """Mean and confidence-interval half-width of a sample (NaN half-width when n < 2), with the
    lag-1 autocorrelation and variance inflation it was widened by (``ngb.core.serial``)."""

    n: int
    mean: float
    half_width: float
    rho: float = 0.0
    inflation: float = 1.0

    @property
    def relative(self) -> float:
        """Half-width over the mean (0.02 = ±2 %); inf when it cannot be known."""
        if self.n < 2 or not math.isfinite(self.half_width) or self.mean <= 0:
            return math.inf
        return self.half_width / self.mean


def interval(values: Sequence[float], confidence: float = 0.95, *, serial: bool = True) -> Interval:
    """Student-t interval of the mean of the finite values, in the order they were measured.

    ``serial`` (the default) widens it for the values' serial correlation (``ngb.core.serial``):
    repetitions of a trial are a time series, and on a machine whose speed wanders they are not
    independent. ``serial=False`` treats them as independent (kept for comparison:
    ``benchmarks/coverage.py``).
    """
    data = [float(v) for v in values if math.isfinite(v)]
    n = len(data)
    if n == 0:
        return Interval(0, math.nan, math.nan)
    mean = math.fsum(data) / n
    if n == 1:
        return Interval(1, mean, math.nan)
    var = math.fsum((v - mean) ** 2 for v in data) / (n - 1)
    rho, factor = inflation(data) if serial else (0.0, 1.0)
    half = t_quantile((1 + confidence) / 2, n - 1) * math.sqrt(var * factor / n)
    return Interval(n, mean, half, rho, factor)


# Past this many, "needs ~N repetitions" says "more than" instead of a count.
_NEEDED_CAP = 10_000


def repetitions_needed(values: Sequence[float], target: float, confidence: float = 0.95) -> int:
    """Repetitions a sample with this spread needs for its interval to be within ``target``.

    Why: an INVALID verdict should say whether more time would help (a few more repetitions) or
    not (hundreds: the device itself is too noisy for the target -- quiet it or widen the target).
    """
    data = [float(v) for v in values if math.isfinite(v)]
    if len(data) < 2:
        return _NEEDED_CAP + 1
    mean = math.fsum(data) / len(data)
    if mean <= 0:
        return _NEEDED_CAP + 1
    cov = math.sqrt(math.fsum((v - mean) ** 2 for v in data) / (len(data) - 1)) / mean
    # Correlated repetitions carry less information each: for many of them the variance of the
    # mean grows by (1 + rho) / (1 - rho) (ngb.core.serial), as if the spread were that much wider.
    return repetitions_for_cov(cov * math.sqrt(long_run_factor(lag1(data))), target, confidence)


def repetitions_for_cov(cov: float, target: float, confidence: float = 0.95) -> int:
    """The smallest n with t(n-1) * cov / sqrt(n) <= target: the repetitions whose interval meets
    ``target`` when they spread like ``cov`` (coefficient of variation); ``_NEEDED_CAP`` + 1 means
    "more than the cap"."""
    if not math.isfinite(cov) or cov < 0:
        return _NEEDED_CAP + 1
    if cov == 0:
        return 2
    p = (1 + confidence) / 2

    def meets(n: int) -> bool:
        return t_quantile(p, n - 1) * cov / math.sqrt(n) <= target

    # t(n-1)/sqrt(n) falls with n: start from the normal approximation and walk to the exact n.
    n = max(2, math.ceil((NormalDist().inv_cdf(p) * cov / target) ** 2))
    if n > _NEEDED_CAP:
        return _NEEDED_CAP + 1
    while n > 2 and meets(n - 1):
        n -= 1
    while n <= _NEEDED_CAP and not meets(n):
        n += 1
    return n


def _needed_text(values: Sequence[float], target: float, confidence: float) -> str:
    needed = repetitions_needed(values, target, confidence)
    if needed > _NEEDED_CAP:
        return f"; at this spread the target needs more than {_NEEDED_CAP} repetitions"
    return f"; at this spread the target needs ~{needed} repetitions"


def split(total: int, parts: int) -> list[int]:
    """``total`` as ``parts`` near-equal shares, larger ones first (10, 3 -> 4, 3, 3)."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


@dataclass(frozen=True)
class Plan:
    """One worker process's share of a trial's repetitions."""

    worker: int = 0
    workers: int = 1
    adaptive: bool = False
    min_reps: int = 1
    max_reps: int = 5
    budget_s: float = math.inf  # seconds of timed loops this worker may spend
    target: float = 0.02
    confidence: float = 0.95
    prior: tuple[float, ...] = ()  # throughputs of the earlier workers
    rep_offset: int = 0  # repetitions done by earlier workers (for progress events)
    total_max: int = 5  # the trial's planned maximum (for progress events)

    def stop_reason(self, own: Sequence[float], elapsed_s: float) -> str | None:
        """Why to stop after ``own`` repetitions taking ``elapsed_s``; None to go on."""
        n = len(own)
        if not self.adaptive:
            return STOP_FIXED if n >= self.max_reps else None
        if n >= self.min_reps and self.pooled(own).relative <= self.target:
            return STOP_CI
        if n >= self.max_reps:
            return STOP_MAX
        if n >= 1 and elapsed_s >= self.budget_s:
            return STOP_TIME
        return None

    def pooled(self, own: Sequence[float]) -> Interval:
        return interval([*self.prior, *own], self.confidence)

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        data = dict(data)
        data["prior"] = tuple(float(v) for v in data.get("prior", ()))
        if data.get("budget_s") is None:  # inf travels as JSON null
            data["budget_s"] = math.inf
        return cls(**data)


def worker_count(settings: Any) -> int:
    """Processes a trial uses: ``workers``, but never more than a fixed count of repetitions."""
    if settings.repetitions is not None:
        return max(1, min(settings.workers, settings.repetitions))
    return settings.workers


def plan(settings: Any, worker: int, prior: Sequence[float], spent_s: float) -> Plan:
    """The plan of worker ``worker`` given what earlier workers measured and spent."""
    workers = worker_count(settings)
    common = {
        "worker": worker,
        "workers": workers,
        "target": settings.ci_target,
        "confidence": settings.confidence,
        "prior": tuple(prior),
        "rep_offset": len(prior),
    }
    if settings.repetitions is not None:
        share = split(settings.repetitions, workers)[worker]
        return Plan(**common, min_reps=share, max_reps=share, total_max=settings.repetitions)
    min_share = max(2, math.ceil(settings.min_repetitions / workers))
    max_share = max(min_share, split(settings.max_repetitions, workers)[worker])
    left = max(0.0, settings.max_measure_s - spent_s)
    return Plan(
        **common,
        adaptive=True,
        min_reps=min_share,
        max_reps=max_share,
        budget_s=left / (workers - worker),
        total_max=settings.max_repetitions,
    )


@dataclass
class Verdict:
    verdict: str
    reason: str
    ci_half_width: float | None  # samples/s; None when n < 2
    ci_relative: float | None
    rho: float = 0.0  # lag-1 autocorrelation of the repetitions the interval was widened for
    inflation: float = 1.0  # the variance factor applied (ngb.core.serial)


def judge(
    throughputs: Sequence[float],
    settings: Any,
    *,
    disturbed: str | None = None,
    stopped: str | None = None,
) -> Verdict:
    """VALID or INVALID (with the reason) for a trial's repetitions; see the module docstring."""
    ci = interval(throughputs, settings.confidence)
    half = ci.half_width if ci.n >= 2 and math.isfinite(ci.half_width) else None
    rel = ci.relative if math.isfinite(ci.relative) else None

    def verdict(which: str, reason: str) -> Verdict:
        return Verdict(which, reason, half, rel, ci.rho, ci.inflation)

    level = f"{settings.confidence:.0%} CI"
    if ci.inflation > 1:  # say that, and how much, the interval was widened (ngb.core.serial)
        level += f" (x{math.sqrt(ci.inflation):.1f} for serial correlation {ci.rho:.2f})"
    if ci.n < 2:
        return verdict(INVALID, f"{ci.n} repetition(s): no interval")
    if disturbed:
        return verdict(INVALID, f"disturbed: {disturbed}")
    if rel is None:
        return verdict(INVALID, "mean throughput is not positive")
    if rel > settings.ci_target:
        why = f" (stopped: {stopped})" if stopped else ""
        needed = _needed_text(throughputs, settings.ci_target, settings.confidence)
        return verdict(
            INVALID,
            f"{level} ±{rel:.1%} wider than the target ±{settings.ci_target:.1%} "
            f"after {ci.n} repetitions{why}{needed}",
        )
    within = f"within ±{settings.ci_target:.1%} ({ci.n} repetitions)"
    return verdict(VALID, f"{level} ±{rel:.1%} {within}")


# ------------------------------------------------------------------ warm-up until clocks settle


@dataclass
class Settled:
    """How a warm-up ended: windows run, seconds, whether it settled, the readings seen."""

    windows: int = 0
    seconds: float = 0.0
    settled: bool = False
    throughputs: list[float] = field(default_factory=list)
    clocks: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "windows": self.windows,
            "seconds": round(self.seconds, 3),
            "settled": self.settled,
            "throughputs": [round(v, 3) for v in self.throughputs],
            "clocks_mhz": self.clocks,
        }


def _close(a: float, b: float, tolerance: float) -> bool:
    scale = max(abs(a), abs(b))
    return scale == 0 or abs(a - b) / scale <= tolerance


def settle(
    window: Callable[[], float],
    *,
    clock: Callable[[], float | None] | None = None,
    tolerance: float = 0.03,
    max_s: float = 30.0,
    min_windows: int = 2,
    now: Callable[[], float] = time.monotonic,
) -> Settled:
    """Run warm-up ``window``s (each returns its throughput) until the last two agree within
    ``tolerance`` in throughput and in ``clock`` (e.g. the GPU's SM clock in MHz; None readings are
    ignored), or ``max_s`` has passed."""
    out = Settled()
    start = now()
    while True:
        out.throughputs.append(float(window()))
        if clock is not None:
            reading = clock()
            if reading is not None:
                out.clocks.append(float(reading))
        out.windows += 1
        out.seconds = now() - start
        if out.windows >= min_windows:
            steady = _close(out.throughputs[-1], out.throughputs[-2], tolerance)
            if steady and len(out.clocks) >= 2:
                steady = _close(out.clocks[-1], out.clocks[-2], tolerance)
            if steady:
                out.settled = True
                return out
        if out.seconds >= max_s:
            return out
