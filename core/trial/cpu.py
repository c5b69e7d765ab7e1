"""CPU utilisation sampler: a side thread that polls psutil while the timed loops run.

It records system-wide utilisation (0..100, where 100 means every logical core busy) and the
measured process's utilisation (psutil's convention: 100 per busy core) -- the process *with its
descendants* (``ProcessFamily``): a compiler's helper processes (TVM's ``popen_worker`` pool
tuning at 125 % while its worker idled at 0-1 %) are ngb's own work, never "others";
``samples`` keeps those three
numbers per tick (what the store's ``cpu_samples`` table holds). Each tick also reads per-core
utilisation, CPU steal time (the hypervisor running someone else: Linux VMs report it, elsewhere
it is None) and system memory; the callback gets all of it as a ``CpuTick`` for live display, and
``summary()`` adds the steal mean and the memory peak. ``others_percent`` -- system-wide use minus
the measured family's and the sampler's own, on the same 0..100 scale -- is what
``ngb.core.trial.interference`` judges.

The judged figure (``extras()["others_percent_mean"]``) is taken over the whole window from
cumulative counters read at its start and end, not averaged over ticks: a sampler thread that is
preempted between reading the clock and reading the measured process's CPU time sees that process
at 400 % on a 2-core machine for one tick and far below for the next, and clipping each tick's
"others" at zero turned that pair into 20-30 % of phantom others (every worker 0 of a localhost
sweep on the 2-core VM was flagged "disturbed" so, 2026-11-25). Counters over a 1 s window are
off by a clock tick at each end, about 1 %.
psutil is imported when a sampler is created, not at module import, so ``ngb.core`` stays stdlib
+ numpy at import time.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ngb.core.trial.descendants import descendants

if TYPE_CHECKING:
    from psutil import Process
    from psutil._common import pcputimes


@dataclass
class CpuTick:
    """One sampler tick, everything it read (percentages 0..100 unless said otherwise)."""

    t: float  # seconds since the sampler started
    percent: float  # system-wide, 100 = every logical core busy
    proc_percent: float  # the measured process and its descendants, 100 per busy core
    others_percent: float  # system-wide minus ngb's processes, 0..100 of the whole machine
    per_cpu: list[float] = field(default_factory=list)  # per logical core
    steal_percent: float | None = None  # None where the kernel does not report steal
    mem_percent: float | None = None
    mem_used_mb: float | None = None
    mem_total_mb: float | None = None


@dataclass(frozen=True)
class _Counters:
    """Cumulative CPU seconds at one instant: the system's (all cores), the measured family's and
    the sampler's own process's."""

    busy_s: float
    total_s: float
    proc_s: float
    own_s: float


#: called from the sampler thread with each tick
SampleCallback = Callable[[CpuTick], None]

#: how often a family's member list is read again (``ngb.core.trial.descendants``; where the kernel
#: does not list children, a scan of every process, ~ms, so not per tick); a child born in
#: between is counted at the next look with all of its CPU time since birth
FAMILY_REFRESH_S = 1.0
#: the shortest window a sample may cover. The kernel counts CPU time in clock ticks (10 ms at
#: USER_HZ=100), so a window of a few ms reads 0 % or thousands: the console showed "ngb 1857 %"
#: on a 2-core machine, "sys 0 %", for a warm-up shorter than its 1 s meter period (2026-11-29).
MIN_SAMPLE_S = 0.05


def _seconds(times: pcputimes, reaped: bool) -> float:
    """User + system CPU seconds of a psutil ``pcputimes``; with ``reaped``, also what its ended
    (waited-for) children spent, which the kernel folds into ``children_user``/``_system``."""
    total = float(times.user) + float(times.system)
    if reaped:
        total += float(getattr(times, "children_user", 0.0) or 0.0)
        total += float(getattr(times, "children_system", 0.0) or 0.0)
    return total


class ProcessFamily:
    """A process and every process below it, whose CPU time is one figure: ngb's own.

    ``below_seconds`` is what the root's descendants spent: the live ones' own time plus, through
    each member's ``children_*`` counters, every ended child that a member has waited for. An
    ended child's time moves from its own counters to its parent's when it is reaped, so the sum
    keeps growing smoothly across a helper pool's restarts. (A helper that ended unreaped is
    missed for a moment; an orphan reaped by init is missed for good.)
    """

    def __init__(self, root: Process, error: type[BaseException]) -> None:
        self.root = root
        self._error = error  # psutil.Error
        self._members: list[Process] = []
        self._at = -math.inf

    def _descendants(self) -> list[Process]:
        now = time.monotonic()
        if now - self._at >= FAMILY_REFRESH_S:
            self._at = now
            try:
                self._members = descendants(self.root)
            except Exception:  # noqa: BLE001 - psutil.Error, or a stand-in without children()
                self._members = []
        return self._members

    def below_seconds(self, root_times: pcputimes | None = None) -> float:
        """CPU seconds of the descendants (``root_times``: the root's, when just read)."""
        total = 0.0
        try:
            times = root_times if root_times is not None else self.root.cpu_times()
            total += _seconds(times, True) - _seconds(times, False)
        except self._error:
            return 0.0
        for member in self._descendants():
            with contextlib.suppress(self._error):
                total += _seconds(member.cpu_times(), True)
        return total


def others_percent(system: float, proc: float, ncpu: int) -> float:
    """Other processes' share of the machine (0..100) from system-wide % and this process's %."""
    return max(0.0, system - proc / max(1, ncpu))


class CpuSampler:
    """Samples every ``interval_s`` between ``start()`` and ``stop()``; usable as a context manager.

    psutil's ``cpu_percent(None)`` reports usage since its previous call, so the first call only
    primes the counters; each later sample covers exactly one interval of the measured window.
    """

    def __init__(
        self,
        interval_s: float = 0.1,
        on_sample: SampleCallback | None = None,
        pid: int | None = None,
    ) -> None:
        import psutil

        self._psutil = psutil
        # ``pid``: sample that (measured) process from outside; this process's own use -- the
        # sampler itself -- is then taken off "others" too, as ngb's own.
        self._proc = psutil.Process(pid)
        self._family = ProcessFamily(self._proc, psutil.Error)  # its helpers are ngb's too
        self._me = psutil.Process() if pid is not None and pid != os.getpid() else None
        self._below: tuple[float, float] | None = None  # (monotonic, family's below seconds)
        self.interval_s = interval_s
        self.on_sample = on_sample
        self.samples: list[list[float]] = []  # [t_offset_s, system %, process %]
        self.others: list[float] = []  # others_percent per tick
        self.steal: list[float] = []  # steal % per tick, where reported
        self.mem_percent_max: float | None = None
        self.ncpu = os.cpu_count() or 1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._window_start: _Counters | None = None
        self._window_end: _Counters | None = None

    def start(self) -> CpuSampler:
        self._t0 = time.perf_counter()
        self._stop.clear()
        primed = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, args=(primed,), name="ngb-cpu-sampler", daemon=True
        )
        self._thread.start()
        primed.wait()
        return self

    def _loop(self, primed: threading.Event) -> None:
        # psutil keeps the "previous reading" of cpu_percent(None) per calling thread, so every
        # call, priming included, happens in this thread.
        self._psutil.cpu_percent(None)
        self._psutil.cpu_percent(None, percpu=True)
        self._psutil.cpu_times_percent(None)
        self._proc_percent()
        if self._me is not None:
            self._me.cpu_percent(None)
        self._window_start = self._counters()
        self._below_percent()
        primed_at = time.perf_counter()
        primed.set()
        while not self._stop.wait(self.interval_s):
            self._take()
        # a window shorter than one interval still yields one sample, if it can say anything
        if not self.samples and time.perf_counter() - primed_at >= MIN_SAMPLE_S:
            self._take()
        self._window_end = self._counters()

    def _counters(self) -> _Counters | None:
        """System busy/total and the measured and own processes' CPU seconds, read together."""
        try:
            system = self._psutil.cpu_times()
            proc = self._proc.cpu_times()
            own = self._me.cpu_times() if self._me is not None else None
        except self._psutil.Error:  # the measured process has ended
            return None
        # Linux counts guest time inside user/nice as well: take it out once, as psutil does
        total = sum(system) - getattr(system, "guest", 0.0) - getattr(system, "guest_nice", 0.0)
        idle = system.idle + getattr(system, "iowait", 0.0)
        return _Counters(
            busy_s=total - idle,
            total_s=total,
            proc_s=proc.user + proc.system + self._family.below_seconds(proc),
            own_s=own.user + own.system if own is not None else 0.0,
        )

    def window_own_percent(self) -> float | None:
        """The sampling process's own CPU over the window, 100 per busy core: ngb's trial
        process while a worker measures, which should idle (kept apart from others)."""
        a, b = self._window_start, self._window_end
        if self._me is None or a is None or b is None or b.total_s - a.total_s <= 0:
            return None
        wall_s = (b.total_s - a.total_s) / self.ncpu
        return max(0.0, 100.0 * (b.own_s - a.own_s) / wall_s)

    def window_others_percent(self) -> float | None:
        """Others' share of the machine (0..100) over the whole window, from the counters."""
        a, b = self._window_start, self._window_end
        if a is None or b is None or b.total_s - a.total_s <= 0:
            return None
        others_s = (b.busy_s - a.busy_s) - (b.proc_s - a.proc_s) - (b.own_s - a.own_s)
        return max(0.0, min(100.0, 100.0 * others_s / (b.total_s - a.total_s)))

    def _take(self) -> None:
        psutil = self._psutil
        system = float(psutil.cpu_percent(None))
        proc = self._proc_percent() + self._below_percent()
        own = float(self._me.cpu_percent(None)) if self._me is not None else 0.0
        tick = CpuTick(
            t=round(time.perf_counter() - self._t0, 4),
            percent=system,
            proc_percent=proc,
            others_percent=others_percent(system, proc + own, self.ncpu),
        )
        with contextlib.suppress(Exception):  # the extras are nice-to-have on exotic kernels
            tick.per_cpu = [float(v) for v in psutil.cpu_percent(None, percpu=True)]
            steal = getattr(psutil.cpu_times_percent(None), "steal", None)
            tick.steal_percent = None if steal is None else float(steal)
            mem = psutil.virtual_memory()
            tick.mem_percent = float(mem.percent)
            tick.mem_used_mb = round((mem.total - mem.available) / 2**20, 1)
            tick.mem_total_mb = round(mem.total / 2**20, 1)
        self.samples.append([tick.t, system, proc])
        self.others.append(tick.others_percent)
        if tick.steal_percent is not None:
            self.steal.append(tick.steal_percent)
        if tick.mem_percent is not None:
            self.mem_percent_max = max(self.mem_percent_max or 0.0, tick.mem_percent)
        if self.on_sample is not None:
            # A broken listener (e.g. a closed event pipe) must not kill the measurement.
            with contextlib.suppress(Exception):
                self.on_sample(tick)

    def _below_percent(self) -> float:
        """The measured process's descendants since the previous call, 100 per busy core."""
        now, seconds = time.monotonic(), self._family.below_seconds()
        previous, self._below = self._below, (now, seconds)
        if previous is None or now <= previous[0]:
            return 0.0
        return max(0.0, 100.0 * (seconds - previous[1]) / (now - previous[0]))

    def _proc_percent(self) -> float:
        try:
            return float(self._proc.cpu_percent(None))
        except self._psutil.Error:  # the measured process has ended
            return 0.0

    def stop(self) -> list[list[float]]:
        """Stop sampling and return the samples."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        return self.samples

    def __enter__(self) -> CpuSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def summary(self) -> dict[str, float | None]:
        """Mean/max of system-wide %, mean of process % (``None`` when there are no samples)."""
        if not self.samples:
            return {
                "cpu_percent_mean": None,
                "cpu_percent_max": None,
                "proc_cpu_percent_mean": None,
            }
        sys_pct = [s[1] for s in self.samples]
        proc_pct = [s[2] for s in self.samples]
        return {
            "cpu_percent_mean": sum(sys_pct) / len(sys_pct),
            "cpu_percent_max": max(sys_pct),
            "proc_cpu_percent_mean": sum(proc_pct) / len(proc_pct),
        }

    def extras(self) -> dict[str, float | None]:
        """Others' CPU share (mean/max), steal (mean, None if unreported), memory peak %."""
        others = self.others
        window = self.window_others_percent()
        if window is None and others:
            window = sum(others) / len(others)
        return {
            # over the window from counters (see the module docstring); ticks only for the max
            "others_percent_mean": window,
            "others_percent_max": max(others) if others else None,
            "harness_percent": self.window_own_percent(),
            "steal_percent_mean": sum(self.steal) / len(self.steal) if self.steal else None,
            "mem_percent_max": self.mem_percent_max,
        }
