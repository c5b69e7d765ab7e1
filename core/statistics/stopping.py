"""When a trial stops repeating, and whether its number can be trusted (VALID / INVALID).

Two modes, chosen by ``MeasureSettings.repetitions``:

- **adaptive** (``repetitions = None``, the default): keep timing repetitions until the Student-t
  confidence interval of the mean throughput (``confidence``, default 95 %) is within
  ``ci_target`` of the mean (default ±2 %), with at least ``min_repetitions`` and at most
  ``max_repetitions`` in all, and no more than ``max_measure_s`` seconds of timed loops. This is
  pyperf's and MLPerf LoadGen's idea: a run ends on what it has learnt, not on a count.
- **fixed** (``repetitions = N``, e.g. the paper's 100): exactly N repetitions.

The repetitions are spread over ``workers`` processes (see ``ngb.core.trial.workers``); each process
gets a ``Plan`` for its share. In adaptive mode a worker stops once it has its minimum share and the
interval over *every* repetition so far (earlier workers' included, ``Plan.prior``) meets the
target, so a process whose mean differs from the others' widens the pooled interval and keeps the
trial going -- process-level variance is inside the interval, not hidden from it.

Either way the trial ends with a verdict (``judge``): VALID when it has >= 2 repetitions, was not
disturbed by other processes, and its interval is within the target; otherwise INVALID with the
reason. A fixed count is judged the same way, so a 100-repetition run still says how sure it is.

Time adds to the interval what one trial's processes cannot see (the machine's speed wanders
between minutes): ``ngb.core.statistics.reruns`` widens it by the design effect this host's re-runs
showed, and ``judge`` and ``next_worker`` take that factor, so a trial stops and is judged on the
interval it states.

The t quantile is ``ngb.core.statistics.student_t.t_quantile``, in plain Python and exact to ~1e-12:
importing scipy for it cost every trial process and worker 0.2-0.3 s of CPU, and a device without
scipy got a Cornish-Fisher approximation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Protocol

from ngb.core.statistics.autocorrelation import inflation, lag1, long_run_factor
from ngb.core.statistics.student_t import t_quantile

VALID = "VALID"
INVALID = "INVALID"

# Why a worker stopped (recorded per worker; the verdict names the last one).
STOP_CI = "ci target met"
STOP_MAX = "maximum repetitions"
STOP_TIME = "time cap"
STOP_FIXED = "fixed count"


class Rule(Protocol):
    """What the stopping rule reads of a trial's settings
    (``ngb.core.records.types.MeasureSettings`` is one): named here, below the trial records, so
    the statistics import nothing above them."""

    @property
    def repetitions(self) -> int | None: ...
    @property
    def workers(self) -> int: ...
    @property
    def max_workers(self) -> int: ...
    @property
    def values_per_worker(self) -> int: ...
    @property
    def min_repetitions(self) -> int: ...
    @property
    def max_repetitions(self) -> int: ...
    @property
    def ci_target(self) -> float: ...
    @property
    def confidence(self) -> float: ...
    @property
    def max_measure_s(self) -> float: ...


@dataclass(frozen=True)
class Interval:
    """Mean and confidence-interval half-width of a sample (NaN half-width when n < 2), with the
    lag-1 autocorrelation and variance inflation it was widened by
    (``ngb.core.statistics.autocorrelation``)."""

    n: int
    mean: float
    half_width: float
    rho: float = 0.0
    inflation: float = 1.0
    workers: int = 1  # processes the values came from (>= 2: a process-level interval)

    @property
    def relative(self) -> float:
        """Half-width over the mean (0.02 = ±2 %); inf when it cannot be known."""
        if self.n < 2 or not math.isfinite(self.half_width) or self.mean <= 0:
            return math.inf
        return self.half_width / self.mean


def interval(values: Sequence[float], confidence: float = 0.95, *, serial: bool = True) -> Interval:
    """Student-t interval of the mean of the finite values, in the order they were measured.

    ``serial`` (the default) widens it for the values' serial correlation
    (``ngb.core.statistics.autocorrelation``):
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

#: the targets offered where the asked one was not reached (a fraction of the mean): round figures
#: an operator would write down. On a machine whose processes spread by 6-22 % the default +-2 %
#: needs dozens of processes, so every trial read INVALID (issue 44); "VALID at +-8 %" is
#: something to act on. A trial disturbed, drifting or on two levels is offered nothing.
OFFERED_TARGETS = (0.01, 0.02, 0.03, 0.05, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5)


def offered_target(relative: float, asked: float) -> float | None:
    """The smallest of ``OFFERED_TARGETS`` above ``asked`` that holds an interval of
    ``relative`` half-width, or None (none does, or it was within ``asked``)."""
    if relative <= asked:
        return None
    return next((t for t in OFFERED_TARGETS if asked < t and relative <= t), None)


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
    # mean grows by (1 + rho) / (1 - rho) (ngb.core.statistics.autocorrelation), as if the spread
    # were that much wider.
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


def split(total: int, parts: int) -> list[int]:
    """``total`` as ``parts`` near-equal shares, larger ones first (10, 3 -> 4, 3, 3)."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


# ------------------------------------------------------------------ processes as the unit


def _finite(values: Sequence[float]) -> list[float]:
    return [float(v) for v in values if math.isfinite(v)]


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def _var(values: Sequence[float]) -> float:
    m = _mean(values)
    return math.fsum((v - m) ** 2 for v in values) / (len(values) - 1)


def process_interval(groups: Sequence[Sequence[float]], confidence: float = 0.95) -> Interval:
    """Interval of a trial's mean throughput from its worker processes' repetitions.

    Why processes are the unit: a process keeps its speed for its whole life (thread placement,
    memory layout, a clock state), so its repetitions are one draw of that level, not several.
    The draws must be independent: workers forked from one interpreter share its layout and
    heap and agree with each other more than with a re-run (mha:128:1 on the 2-core VM: 50 %
    coverage at width ratio 0.35), so each worker is its own interpreter by default
    (``ngb.core.trial.worker_start``) and ``judge`` says when they were not.
    Measured: five fresh processes of the same conv block on a quiet 16-core server spread by
    2.6 % while each one's repetitions were tight, and a lag-1 autocorrelation estimated over
    the processes' repetitions laid end to end read the level shift as "serial correlation 0.90"
    (intervals of +-5.6 % to +-37.7 %). So, as pyperf does, the interval is a Student-t over the
    k process means (k - 1 degrees of freedom) -- it sees exactly the variance a re-run meets --
    centred on their mean (each process weighs the same). It is never narrower than the spread
    inside the processes alone implies (two process means can land close by chance).
    One process: the interval over its repetitions, widened for their serial correlation
    (``ngb.core.statistics.autocorrelation``); it cannot see the between-process variance and the
    verdict says so.
    """
    kept = [g for g in (_finite(g) for g in groups) if g]
    if not kept:
        return Interval(0, math.nan, math.nan)
    if len(kept) == 1:
        return interval(kept[0], confidence)
    k = len(kept)
    n = sum(len(g) for g in kept)
    means = [_mean(g) for g in kept]
    grand = _mean(means)
    p = (1 + confidence) / 2
    between = t_quantile(p, k - 1) * math.sqrt(_var(means) / k)
    within_groups = [g for g in kept if len(g) >= 2]
    floor = 0.0
    if within_groups:
        df = sum(len(g) - 1 for g in within_groups)
        pooled = math.fsum(_var(g) * (len(g) - 1) for g in within_groups) / df
        # Var(mean of the k process means) from the within-process noise alone
        var_mean = math.fsum(pooled / len(g) for g in kept) / k**2
        floor = t_quantile(p, df) * math.sqrt(var_mean)
    return Interval(n, grand, max(between, floor), workers=k)


@dataclass(frozen=True)
class Levels:
    """Process means that fall into two separate levels (e.g. 4,404 vs 8,253 samples/s)."""

    low: float
    low_processes: int
    high: float
    high_processes: int

    def text(self) -> str:
        return (
            f"two levels between processes: {self.low:,.0f}/s ({self.low_processes} process"
            f"{'es' if self.low_processes > 1 else ''}) and {self.high:,.0f}/s "
            f"({self.high_processes} process{'es' if self.high_processes > 1 else ''})"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "low": round(self.low, 3),
            "low_processes": self.low_processes,
            "high": round(self.high, 3),
            "high_processes": self.high_processes,
        }


#: two process levels must differ by at least this much of the mean ...
LEVEL_GAP = 0.08
#: ... and by this many times the larger of the spread inside a level and a process mean's noise
LEVEL_SEPARATION = 4.0


def two_levels(groups: Sequence[Sequence[float]]) -> Levels | None:
    """The two levels the process means split into, or None when they form one level.

    A bimodal trial (the same bf16 model at 4,404/s in one process and 8,253/s in the next) has no
    single mean worth an interval: averaging the levels gives a number no process ran at. The split
    is at the widest gap between sorted process means; it counts when the gap is at least
    ``LEVEL_GAP`` of the mean and ``LEVEL_SEPARATION`` times both the spread inside each side and
    the noise of one process mean.
    """
    kept = [g for g in (_finite(g) for g in groups) if g]
    if len(kept) < 2:
        return None
    means = sorted((_mean(g), len(g)) for g in kept)
    values = [m for m, _ in means]
    gaps = [b - a for a, b in zip(values, values[1:], strict=False)]
    cut = max(range(len(gaps)), key=gaps.__getitem__)
    gap = gaps[cut]
    grand = _mean(values)
    if grand <= 0 or gap < LEVEL_GAP * grand:
        return None
    low, high = values[: cut + 1], values[cut + 1 :]
    spread = max(max(low) - min(low), max(high) - min(high))
    noisy = [g for g in kept if len(g) >= 2]
    noise = max((math.sqrt(_var(g) / len(g)) for g in noisy), default=0.0)
    if gap < LEVEL_SEPARATION * max(spread, noise):
        return None
    return Levels(_mean(low), len(low), _mean(high), len(high))


def drift(groups: Sequence[Sequence[float]], confidence: float = 0.95) -> float | None:
    """Relative change from the first half of the processes to the second when it is significant
    (a Welch t-test over process means), else None. Needs four processes."""
    kept = [g for g in (_finite(g) for g in groups) if g]
    if len(kept) < 4:
        return None
    means = [_mean(g) for g in kept]
    half = len(means) // 2
    first, second = means[:half], means[half:]
    grand = _mean(means)
    if grand <= 0:
        return None
    se = math.sqrt(_var(first) / len(first) + _var(second) / len(second))
    diff = _mean(second) - _mean(first)
    if se == 0:
        return diff / grand if diff else None
    df = max(1, len(means) - 2)
    significant = abs(diff) > t_quantile((1 + confidence) / 2, df) * se
    return diff / grand if significant else None


def processes_needed(groups: Sequence[Sequence[float]], target: float, confidence: float) -> int:
    """Worker processes whose interval would meet ``target`` at the spread between these ones."""
    kept = [g for g in (_finite(g) for g in groups) if g]
    if len(kept) < 2:
        return _NEEDED_CAP + 1
    means = [_mean(g) for g in kept]
    grand = _mean(means)
    if grand <= 0:
        return _NEEDED_CAP + 1
    return repetitions_for_cov(math.sqrt(_var(means)) / grand, target, confidence)


@dataclass(frozen=True)
class Plan:
    """One worker process's share of a trial: how many repetitions, within what time."""

    worker: int = 0
    adaptive: bool = False
    reps: int = 3  # repetitions this worker times
    budget_s: float = math.inf  # seconds of timed loops this worker may spend
    target: float = 0.02
    confidence: float = 0.95
    prior: tuple[tuple[float, ...], ...] = ()  # the earlier workers' throughputs, one per worker
    total_max: int = 5  # the trial's planned maximum of repetitions (for progress events)

    @property
    def rep_offset(self) -> int:
        """Repetitions done by earlier workers (for progress events)."""
        return sum(len(g) for g in self.prior)

    def stop_reason(self, own: Sequence[float], elapsed_s: float) -> str | None:
        """Why to stop after ``own`` repetitions taking ``elapsed_s``; None to go on."""
        if len(own) >= self.reps:
            return STOP_MAX if self.adaptive else STOP_FIXED
        if self.adaptive and own and elapsed_s >= self.budget_s:
            return STOP_TIME
        return None

    def pooled(self, own: Sequence[float]) -> Interval:
        """The trial's interval so far: earlier workers and this one's repetitions."""
        return process_interval([*self.prior, tuple(own)], self.confidence)


def worker_count(settings: Rule) -> int:
    """Processes a fixed-count trial uses: ``workers``, never more than its repetitions."""
    if settings.repetitions is not None:
        return max(1, min(settings.workers, settings.repetitions))
    return settings.workers


def plan(settings: Rule, worker: int, prior: Sequence[Sequence[float]], spent_s: float) -> Plan:
    """The plan of worker ``worker`` given what earlier workers measured and spent."""
    common = Plan(
        worker=worker,
        target=settings.ci_target,
        confidence=settings.confidence,
        prior=tuple(tuple(g) for g in prior),
    )
    if settings.repetitions is not None:
        share = split(settings.repetitions, worker_count(settings))[worker]
        return replace(common, reps=share, total_max=settings.repetitions)
    left = max(0.0, settings.max_measure_s - spent_s)
    # a worker may take what is left shared over the fewest workers still to come
    to_come = max(1, settings.workers - worker)
    return replace(
        common,
        adaptive=True,
        reps=settings.values_per_worker,
        budget_s=left / to_come,
        total_max=max_total(settings),
    )


def max_total(settings: Rule) -> int:
    """The most repetitions an adaptive trial can take."""
    workers = max(settings.max_workers, settings.workers)
    return min(settings.max_repetitions, workers * settings.values_per_worker)


def next_worker(
    settings: Rule,
    groups: Sequence[Sequence[float]],
    spent_s: float,
    design_effect: float = 1.0,
    next_s: float = 0.0,
) -> tuple[bool, str | None]:
    """After the workers that produced ``groups``: (start another?, why the trial stopped).
    ``design_effect``: the factor time adds to the interval's variance
    (``ngb.core.statistics.reruns``); ``next_s``: the seconds of the cap a further worker needs
    for its warm-up and one value, as the earlier ones spent them."""
    k = len(groups)
    if settings.repetitions is not None:
        more = k < worker_count(settings)
        return more, None if more else STOP_FIXED
    n = sum(len(g) for g in groups)
    enough = k >= settings.workers and n >= settings.min_repetitions
    relative = process_interval(groups, settings.confidence).relative * math.sqrt(design_effect)
    if enough and relative <= settings.ci_target:
        return False, STOP_CI
    most = max(settings.max_workers, settings.workers)
    if k >= most or n + settings.values_per_worker > max_total(settings):
        return False, STOP_MAX
    # the time cap ends a trial only once it has its ``workers`` processes: on a GPU a worker's
    # warm-up alone takes 3-9 s, and a cap at two processes left t(1) = 12.7 and a +-29 %
    # interval (deit3_small bf16 on an H200)
    # and once it has them, a process starts only where what is left of the cap holds its warm-up
    # and a value: on the 2-core VM the sixth worker of an mha:128:1 trial cost a fresh
    # interpreter's imports and a 1.8 s warm-up for one value of 0.3 s (issue 44)
    if spent_s + next_s >= settings.max_measure_s and k >= max(2, settings.workers):
        return False, STOP_TIME
    return True, None


@dataclass
class Verdict:
    verdict: str
    reason: str
    ci_half_width: float | None  # samples/s; None when n < 2
    ci_relative: float | None
    rho: float = (
        0.0  # lag-1 autocorrelation (one process only: ngb.core.statistics.autocorrelation)
    )
    inflation: float = 1.0  # the variance factor applied (one process only)
    workers: int = 1
    levels: Levels | None = None
    drift: float | None = None


def judge(
    groups: Sequence[Sequence[float]],
    settings: Rule,
    *,
    disturbed: str | None = None,
    stopped: str | None = None,
    one_interpreter: bool = False,
    stated_half: float | None = None,
    design_effect: float = 1.0,
    stated_note: str = "",
) -> Verdict:
    """VALID or INVALID (with the reason) for a trial's repetitions, one group per worker process;
    see the module docstring. ``one_interpreter``: the workers were forked from one interpreter
    (``NGB_WORKER_START=auto``), so they share its level and the verdict says that the interval
    has not sampled the spread between interpreters that a re-run meets. ``stated_half``: the
    interval the trial states with time's part added (``ngb.core.statistics.reruns.widen``: the
    process interval's variance x ``design_effect``, or its own re-runs' spread), ``stated_note``
    why."""
    ci = process_interval(groups, settings.confidence)
    half = ci.half_width if ci.n >= 2 and math.isfinite(ci.half_width) else None
    if half is not None and stated_half is not None and math.isfinite(stated_half):
        half = max(half, stated_half)
    rel = half / ci.mean if half is not None and ci.mean > 0 else None
    levels = two_levels(groups)
    moved = drift(groups, settings.confidence)

    def verdict(which: str, reason: str) -> Verdict:
        return Verdict(which, reason, half, rel, ci.rho, ci.inflation, ci.workers, levels, moved)

    level = f"{settings.confidence:.0%} CI"
    if ci.workers >= 2:
        level += f" over {ci.workers} processes"
    elif (
        ci.inflation > 1
    ):  # say that, and how much, the interval was widened (ngb.core.statistics.autocorrelation)
        level += f" (x{math.sqrt(ci.inflation):.1f} for serial correlation {ci.rho:.2f})"
    if stated_note:
        level += f", {stated_note},"
    if ci.n < 2:
        return verdict(INVALID, f"{ci.n} repetition(s): no interval")
    if disturbed:
        return verdict(INVALID, f"disturbed: {disturbed}")
    if rel is None:
        return verdict(INVALID, "mean throughput is not positive")
    if levels is not None:
        return verdict(INVALID, levels.text())
    if moved is not None:
        return verdict(
            INVALID, f"drift: the later processes ran {moved:+.1%} against the earlier ones"
        )
    if rel > settings.ci_target:
        why = f" (stopped: {stopped})" if stopped else ""
        if ci.workers >= 2:
            target = settings.ci_target / math.sqrt(max(1.0, design_effect))
            needed = processes_needed(groups, target, settings.confidence)
            unit = "processes"
        else:
            needed = repetitions_needed(
                next(g for g in groups if g), settings.ci_target, settings.confidence
            )
            unit = "repetitions"
        more = f"more than {_NEEDED_CAP}" if needed > _NEEDED_CAP else f"~{needed}"
        # why it is wide: the processes differ (the level a re-run meets), or each one is noisy
        spread = process_spread(groups)
        differ = f"; process means spread {spread:.1%} (CoV)" if spread is not None else ""
        offer = offered_target(rel, settings.ci_target)
        reached = f"; VALID at ±{offer:.0%} (ci_target = {offer:g})" if offer else ""
        return verdict(
            INVALID,
            f"{level} ±{rel:.1%} wider than the target ±{settings.ci_target:.1%} "
            f"after {ci.n} repetitions{why}{differ}; at this spread the target needs {more} "
            f"{unit}{_shared_note(one_interpreter, ci.workers)}{reached}",
        )
    within = f"within ±{settings.ci_target:.1%} ({ci.n} repetitions)"
    single = "; one process: the spread between processes is not sampled" if ci.workers < 2 else ""
    shared = _shared_note(one_interpreter, ci.workers)
    return verdict(VALID, f"{level} ±{rel:.1%} {within}{single}{shared}")


def _shared_note(one_interpreter: bool, workers: int) -> str:
    if not one_interpreter or workers < 2:
        return ""
    return (
        "; workers forked from one interpreter: the spread between interpreters that a re-run "
        "meets is not sampled"
    )


def process_spread(groups: Sequence[Sequence[float]]) -> float | None:
    """Coefficient of variation of the process means (None below two processes)."""
    kept = [g for g in (_finite(g) for g in groups) if g]
    if len(kept) < 2:
        return None
    means = [_mean(g) for g in kept]
    grand = _mean(means)
    return math.sqrt(_var(means)) / grand if grand > 0 else None
