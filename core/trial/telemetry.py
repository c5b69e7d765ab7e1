"""Watching a worker process's timed loops from outside it: CPU, GPU, board telemetry.

Why outside: a sampler thread inside the measured process takes the GIL from the thread that
launches the kernels. On an H100, launch-bound work (deit3_small tf32 b32, ~4 ms a call) ran
5-25 % below a plain loop under ngb's in-process samplers. The trial's own process is idle while
a worker measures (it waits for the worker's events), so it samples there: system CPU, the
worker's CPU with its descendants (psutil by pid: a compiler's helper processes are the worker's
work), others' share -- system minus the worker's family minus this sampler, so ngb's own
processes never count as "others" -- NVML and tegrastats. ``WorkerWatch`` runs between
the worker's ``measure`` phase event and its result, and fills the part's ``cpu``,
``cpu_samples``, ``telemetry`` and ``disturbed``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ngb.core.records import events
from ngb.core.records.types import MeasureSettings
from ngb.core.trial import interference
from ngb.core.trial.cpu import CpuSampler, CpuTick
from ngb.core.trial.timing import CPU_EVENT_PERIOD_S, Part, cpu_event_fields

Emit = Callable[[dict[str, object]], None]


def cpu_events(key: str, worker: int, emit: Emit) -> Callable[[CpuTick], None]:
    """A sampler callback that sends the worker's ``cpu`` event at most once a
    ``CPU_EVENT_PERIOD_S`` (the samples themselves are kept at the sampler's own period)."""
    last_event = [0.0]

    def on_tick(tick: CpuTick) -> None:
        now = time.monotonic()
        if now - last_event[0] >= CPU_EVENT_PERIOD_S:
            last_event[0] = now
            emit(events.make_event(events.CPU, key=key, worker=worker, **cpu_event_fields(tick)))

    return on_tick


class WorkerWatch:
    """Samplers on one worker process for the length of its timed loops."""

    def __init__(
        self, pid: int, settings: MeasureSettings, device: str, key: str, worker: int, emit: Emit
    ) -> None:
        self.settings = settings
        self.cpu = CpuSampler(settings.cpu_interval_s, cpu_events(key, worker, emit), pid=pid)
        self.gpu = interference.GpuMonitor(settings.cpu_interval_s) if device == "cuda" else None
        self.tegra = interference.TegraStats()
        self.running = False

    def start(self) -> None:
        self.cpu.start()
        self.tegra.start()
        if self.gpu is not None:
            self.gpu.start()
        self.running = True

    def stop(self) -> None:
        if not self.running:
            return
        self.running = False
        self.cpu.stop()
        self.tegra.stop()
        if self.gpu is not None:
            self.gpu.stop()

    def fill(self, part: Part) -> None:
        """Put what was seen into the worker's ``part`` and judge whether it was disturbed."""
        self.stop()
        part.cpu_samples = self.cpu.samples
        part.cpu = {**self.cpu.summary(), **self.cpu.extras()}
        part.telemetry["cpu_after"] = interference.cpu_facts()
        if self.gpu is not None and self.gpu.available:
            part.telemetry["gpu"] = self.gpu.summary()
        if self.tegra.available:
            part.telemetry["jetson"] = self.tegra.summary()
        before = (part.telemetry.get("cpu_before") or {}).get("others_percent")
        part.disturbed = interference.disturbance(
            threshold=self.settings.disturbance_threshold,
            before=before,
            during=part.cpu.get("others_percent_mean"),
            gpu_others=sorted(self.gpu.others) if self.gpu is not None else (),
        )


class LiveMeter:
    """CPU events for the live display while a worker builds, compiles and warms up: the console's
    meters stay live through those phases. Nothing here is judged or kept; ``WorkerWatch``
    takes over at the timed loops. One psutil read a second in this (otherwise idle) process."""

    def __init__(self, pid: int, key: str, worker: int, emit: Emit) -> None:
        self.cpu = CpuSampler(CPU_EVENT_PERIOD_S, cpu_events(key, worker, emit), pid=pid)
        self.running = False

    def start(self) -> None:
        self.cpu.start()
        self.running = True

    def stop(self) -> None:
        if self.running:
            self.running = False
            self.cpu.stop()
