"""Budgets that hold when one call takes seconds (issue 32).

``max_measure_s`` (10 s by default) is the time a trial's warm-ups and timed loops may take over
all its worker processes. The normal plan (``ngb.core.statistics.stopping.plan``) keeps it by
shrinking each timed loop to the calls that fit (``ngb.core.trial.timing.loop_iters``), but never
below one call a loop, one warm-up and ``workers`` processes: untuned TVM on ``conv --width 64
--depth 3 -b 16`` (3-7 s a call on the 2-core VM) took 4 processes x (1 warm-up call + 2 timed
calls) = 12 calls, 40-80 s against the 10 s asked, and said nothing beforehand.

So the trial calibrates. Worker 0's first call is timed anyway; where it says the timed calls
alone (``workers`` x ``values_per_worker`` one-call loops) would not fit, worker 0 makes one
**calibration call** and plans on that. Not on the first call: a first call is cold and may
carry one-time work (cuDNN's algorithm search, a lazy JIT) that makes a 5 ms model look like a
2 s one -- planning on it would time single calls of milliseconds. Where the calibration call
confirms slow calls, ``plan`` returns a ``SlowPlan`` that every worker of the trial follows, and
worker 0 says it before its warm-up (a ``log`` event: the ``ngb measure`` line and the console's
log) with the seconds the trial will still take:

1. **One warm-up call** where a call runs at least the warm-up's own cap (``warmup_max_s``; on a
   GPU three times ``gpu_warmup_min_s``): the warm-up would stop after one call anyway. Worker
   0's calibration call is its warm-up call. Below the cap the warm-up runs as always (by time).
2. **One call a loop**, no ``min_duration_s``: a call of seconds is its own timing window.
3. **Repetitions before processes**: the interval is over process means (``stopping.
   process_interval``), so its width is set by how many processes there are, and a call of
   seconds is itself a long average -- a second value from the same process adds little. So
   ``values_per_worker`` falls to 1 first, then processes from ``workers`` towards 2, until the
   calls fit (a time-bounded warm-up never costs a process: as on a GPU, whose 3 s floor x 4
   processes is over 10 s already).
4. **The floor is 2 processes x 1 call** (a single process, when ``workers = 1`` was asked, gets
   2 calls): two processes are the fewest whose interval samples the spread between processes
   that a re-run meets; a single process can only say "not sampled". The interval at 2 is wide
   (t(1) = 12.7) and the verdict says so -- a true wide interval, not a narrow false one. Where
   even the floor does not fit, the budget is raised to what the floor takes, and the line says
   so and what ``max_measure_s`` would buy ``workers`` x ``values_per_worker``.

No processes are added beyond the plan (``max_workers`` = the planned count): the seconds said
beforehand hold. A fixed ``repetitions`` count is a count and is never cut.
``result.extra["budget"]`` records the plan (what ran and why, beside the settings asked for in
``spec.measure``) and, at the end, the seconds it spent.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

from ngb.core.statistics import stopping

if TYPE_CHECKING:
    from ngb.core.records.types import MeasureSettings, TrialSpec
    from ngb.core.statistics.stopping import Plan

#: the fewest processes a slow plan keeps (see the module docstring, point 4)
MIN_PROCESSES = 2


def warmup_cap_s(settings: MeasureSettings, device: str) -> float:
    """The most a warm-up runs (``ngb.core.trial.timing``'s rule: ``warmup_max_s``, on a GPU at
    least three times its floor)."""
    if device == "cuda":
        return max(settings.warmup_max_s, 3 * settings.gpu_warmup_min_s)
    return max(settings.warmup_max_s, settings.warmup_s)


def warmup_floor_s(settings: MeasureSettings, device: str) -> float:
    """The least a warm-up lasts: ``gpu_warmup_min_s`` on a GPU, ``warmup_s`` on a CPU."""
    return settings.gpu_warmup_min_s if device == "cuda" else settings.warmup_s


def quiet_check_apart_s(settings: MeasureSettings, device: str) -> float:
    """Seconds a worker's quiet check adds to its warm-up: none where others' CPU is read over a
    warm-up whose floor lasts at least ``quiet_check_s`` (``ngb.core.trial.timing``), else the
    check's own sleep before the warm-up."""
    floor = warmup_floor_s(settings, device)
    return 0.0 if floor >= settings.quiet_check_s else settings.quiet_check_s


def warmup_estimate_s(settings: MeasureSettings, device: str, call_s: float) -> float:
    """Seconds the normal warm-up takes at ``call_s`` a call: its floor, or the first window's
    calls and two more, whichever is longer, up to its cap; whole calls, at least one."""
    floor = warmup_floor_s(settings, device)
    seconds = max(floor, min(warmup_cap_s(settings, device), (settings.warmup_iters + 2) * call_s))
    return max(1, math.ceil(seconds / call_s - 1e-9)) * call_s


@dataclass(frozen=True)
class SlowPlan:
    """How a trial whose calls take seconds is measured, from worker 0's calibration call."""

    call_s: float  # seconds per call: worker 0's calibration call
    first_s: float  # worker 0's first call (cold), which asked for the calibration
    asked_s: float  # max_measure_s as set
    workers: int  # processes
    reps: int  # timed loops (values) per process
    warmup: bool  # True: the usual warm-up (by time); False: one warm-up call
    warmup_s: float  # estimated warm-up per process
    planned_s: float  # seconds of warm-up + timed loops the plan takes (estimate)
    budget_s: float  # max_measure_s in force: the asked one, or planned_s where that is more
    overhead_s: float  # per later process, outside the budget: build, compile, first call
    left_s: float  # estimated seconds from worker 0's first call to the trial's end
    full_s: float  # what the normal plan (workers x values_per_worker) would have taken
    line: str  # what is said beforehand and recorded

    @property
    def over(self) -> bool:
        """The floor did not fit: the budget was raised to what it takes."""
        return self.budget_s > self.asked_s + 1e-9

    def settings(self, asked: MeasureSettings) -> MeasureSettings:
        """The settings the trial runs under (``asked`` with the plan's counts and budget)."""
        settings = replace(
            asked,
            workers=self.workers,
            max_workers=self.workers,  # none added beyond the plan: the time said holds
            values_per_worker=self.reps,
            min_repetitions=2,
            max_repetitions=max(2, asked.max_repetitions),
            max_measure_s=self.budget_s,
            min_iters=1,  # a call of seconds is its own timing window
            min_duration_s=0.0,
        )
        if self.warmup:
            return settings
        return replace(settings, warmup_s=0.0, gpu_warmup_min_s=0.0, warmup_iters=1)

    def to_dict(self) -> dict[str, object]:
        data: dict[str, object] = {
            k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()
        }
        data["calibration"] = "worker 0's second call"
        data["over"] = self.over
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> SlowPlan:
        def number(name: str) -> float:
            value = data.get(name)
            return float(value) if isinstance(value, int | float) else 0.0

        return cls(
            call_s=number("call_s"), first_s=number("first_s"), asked_s=number("asked_s"),
            workers=int(number("workers")), reps=int(number("reps")),
            warmup=bool(data.get("warmup")), warmup_s=number("warmup_s"),
            planned_s=number("planned_s"), budget_s=number("budget_s"),
            overhead_s=number("overhead_s"), left_s=number("left_s"), full_s=number("full_s"),
            line=str(data.get("line") or ""),
        )  # fmt: skip


def slow_enough(settings: MeasureSettings, call_s: float) -> bool:
    """Whether calls of ``call_s`` would overrun the budget in the timed loops alone (a count of
    ``repetitions`` is never cut)."""
    if settings.repetitions is not None or not math.isfinite(call_s) or call_s <= 0:
        return False
    return call_s > slow_call_s(settings)


def plan(
    settings: MeasureSettings,
    device: str,
    call_s: float,
    overhead_s: float = 0.0,
    first_s: float | None = None,
) -> SlowPlan | None:
    """The slow plan for calls of ``call_s`` seconds, or None when the normal plan's one-call
    loops fit ``max_measure_s`` (the module docstring says what is cut, in which order, and
    why). ``overhead_s``: what each later process spends outside the budget (build, compile,
    first call), for the time said beforehand; ``first_s``: worker 0's first call, recorded."""
    if not slow_enough(settings, call_s):
        return None
    asked = settings.max_measure_s
    workers, values = settings.workers, settings.values_per_worker
    warm = call_s < warmup_cap_s(settings, device)
    warm_s = warmup_estimate_s(settings, device, call_s) if warm else call_s
    # a warm-up by time holds the quiet check; one warm-up call (no floor) sleeps it apart
    quiet_s = quiet_check_apart_s(settings, device) if warm else settings.quiet_check_s
    per_process = quiet_s + warm_s
    floor_k = min(MIN_PROCESSES, workers)
    floor_r = 2 if floor_k == 1 else 1
    choices = [(workers, r) for r in range(values, 0, -1)]
    choices += [(k, 1) for k in range(workers - 1, floor_k - 1, -1)]
    choices = [(k, r) for k, r in choices if k * r >= 2]
    # the calls decide how many (the one warm-up call is a call; a warm-up by time is not)
    calls = 0 if warm else 1
    k, r = next(
        ((k, r) for k, r in choices if k * (calls + r) * call_s <= asked), (floor_k, floor_r)
    )
    planned_s = k * (per_process + r * call_s)
    budget_s = max(asked, planned_s)
    # worker 0 is past its calibration call (its warm-up call): its quiet check and loops, then
    # the later processes in full
    left_s = per_process - (0.0 if warm else call_s) + r * call_s
    left_s += (k - 1) * (overhead_s + per_process + r * call_s)
    full_s = workers * (per_process + values * call_s)
    partial = SlowPlan(
        call_s=call_s, first_s=call_s if first_s is None else first_s, asked_s=asked,
        workers=k, reps=r, warmup=warm, warmup_s=warm_s, planned_s=planned_s,
        budget_s=budget_s, overhead_s=overhead_s, left_s=left_s, full_s=full_s, line="",
    )  # fmt: skip
    return replace(partial, line=describe(partial, workers, values))


def describe(p: SlowPlan, workers: int, values: int) -> str:
    """The one line said before worker 0 warms up: what runs, what it takes, why."""
    calls = f"{p.reps} call{'s' if p.reps > 1 else ''}"
    warm = f"a warm-up of ~{_secs(p.warmup_s)}" if p.warmup else "one warm-up call"
    what = f"{p.workers} process{'es' if p.workers > 1 else ''} x {calls}, {warm}"
    if p.over:
        why = (
            "quiet checks and warm-ups come on top"
            if p.workers * (p.reps + (0 if p.warmup else 1)) * p.call_s <= p.asked_s
            else "the fewest that sample the spread between processes"
        )
        fits = (
            f"{_secs(p.planned_s)} of warm-up and timed calls, over max_measure_s "
            f"{_secs(p.asked_s)} ({why})"
        )
        if (p.workers, p.reps) != (workers, values):
            fits += f"; max_measure_s {_secs(p.full_s)} would allow {workers} x {values}"
    else:
        fits = (
            f"{_secs(p.planned_s)} of max_measure_s {_secs(p.asked_s)} (the full {workers} x "
            f"{values} takes {_secs(p.full_s)})"
        )
    return (
        f"slow calls: {p.call_s:.2f} s each (calibration call; the first took "
        f"{p.first_s:.2f} s), so {what}: {fits}; "
        f"about {_secs(p.left_s)} more for this trial"
    )


def _secs(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"


@dataclass(frozen=True)
class Timed:
    """What a worker times after its first call: the spec with the settings in force (its key,
    which the events carry, stays the asked spec's: only the timing sees them), its share, the
    trial's slow plan, and worker 0's calibration call (seconds; None where none was made)."""

    spec: TrialSpec
    share: Plan
    slow: SlowPlan | None
    calibration_s: float | None = None


def timed_share(
    spec: TrialSpec,
    share: Plan,
    slow: SlowPlan | None,
    first_s: float,
    overhead_s: float,
    call: Callable[[], float],
) -> Timed:
    """After a worker's first call (``first_s``): worker 0 makes the calibration call (``call``
    runs one and returns its seconds) where the first call says the calls may be slow, and
    re-plans its own share on it; a later worker follows the trial's ``slow`` plan."""
    calibration_s = None
    if slow is None and share.worker == 0 and slow_enough(spec.measure, first_s):
        calibration_s = call()
        slow = plan(spec.measure, spec.device, calibration_s, overhead_s, first_s)
        if slow is not None:
            share = stopping.plan(slow.settings(spec.measure), 0, share.prior, 0.0)
    if slow is None:
        return Timed(spec, share, None, calibration_s)
    settings = slow.settings(spec.measure)
    if calibration_s is not None and not slow.warmup:
        settings = replace(settings, warmup_iters=0)  # the calibration call was its warm-up call
    return Timed(replace(spec, measure=settings), share, slow, calibration_s)


def recorded(extra: Mapping[str, object]) -> SlowPlan | None:
    """The trial's slow plan from worker 0's record (``result.extra["budget"]``), if it made one."""
    data = extra.get("budget")
    return SlowPlan.from_dict(data) if isinstance(data, Mapping) else None


def slow_call_s(settings: MeasureSettings) -> float:
    """The first call (seconds) above which a trial calibrates and may plan for slow calls: the
    budget over the normal plan's one-call timed loops (``slow_enough``)."""
    return settings.max_measure_s / (settings.workers * settings.values_per_worker)


def upfront(settings: MeasureSettings) -> str:
    """What ``ngb measure`` says before a trial of ``settings`` (no fixed ``repetitions``): the
    budget and the processes decided now, and that a slow first call may cut them -- ``plan``
    decides that only after worker 0's calls, and says it in a line of its own then."""
    workers, most = settings.workers, max(settings.workers, settings.max_workers)
    more = f" (up to {most} while the interval is wider than ci_target)" if most > workers else ""
    floor_k = min(MIN_PROCESSES, workers)
    floor = f"{_count(floor_k, 'process', 'es')} x {_count(2 if floor_k == 1 else 1, 'call')}"
    return (
        f"budget: {settings.max_measure_s:g} s of warm-up and timed loops over "
        f"{_count(workers, 'process', 'es')}{more}; a first call over "
        f"{slow_call_s(settings):.3g} s plans for slow calls, which may cut this to {floor}"
    )


def _count(n: int, word: str, plural: str = "s") -> str:
    return f"{n} {word}{plural if n != 1 else ''}"
