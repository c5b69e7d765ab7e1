"""Energy per inference, measured on the device around the timed loops (issue 23).

Inside a worker (``ngb.core.trial.timing``)::

    meter = measure_during(spec.device, settings)   # picks the device's power meter, if any
    meter.idle()                                    # idle power, settings.energy_idle_s long
    for each timed repetition:
        meter.begin(); <timed loop>; meter.mark(samples)
    part.telemetry["energy"] = meter.reading        # plain JSON

and in the parent ``apply(result, readings, confidence)`` folds the workers' readings into the
result's energy fields. Counters (RAPL, NVML's total energy) are read only between loops: the
timed loop itself runs untouched. Sources without a counter (older GPUs, Jetson rails) are
integrated by a sampler thread in the measured process, and the result's ``energy_note`` says so.
Where nothing is readable the result says "no power meter: <why>" -- never a guess.

The interval, as for throughput (``ngb.core.statistics.stopping.process_interval``): one
joules-per-sample value per worker process, Student-t over the k process values with k - 1 degrees
of freedom; with one process, over its repetitions.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypedDict

from ngb.core.records.types import MeasureSettings, TrialResult
from ngb.core.statistics.stopping import interval, process_interval
from ngb.core.trial import energy_sources
from ngb.core.trial.energy_sources import EnergySource

NO_METER = "no power meter"
TEGRA_RELEASE = Path("/etc/nv_tegra_release")


class EnergyRep(TypedDict):
    """The meter around one timed repetition."""

    joules: float
    seconds: float
    samples: float


class EnergyReading(TypedDict, total=False):
    """What one worker measured (``Meter.reading``, sent to the parent as JSON): the source,
    its note, idle watts and one record per repetition; without a meter only the note."""

    source: str
    note: str
    idle_w: float | None
    reps: list[EnergyRep]


def find_source(device: str) -> tuple[EnergySource | None, str]:
    """The meter for a trial on ``device`` ("cpu" or "cuda"), or None and why there is none."""
    tried: list[Callable[[], EnergySource]] = []
    if device == "cuda" and not TEGRA_RELEASE.exists():
        tried.append(lambda: energy_sources.NvmlSource(_cuda_index()))
    elif device != "cuda":
        tried.append(energy_sources.RaplSource)
    tried.append(energy_sources.JetsonRails)  # a Jetson: the board's input rail, CPU or GPU
    reasons = []
    for make in tried:
        source = make()
        if source.available():
            return source, ""
        source.close()
        reasons.append(source.why_not)
    return None, f"{NO_METER}: " + "; ".join(reasons)


def _cuda_index() -> int:
    """The physical GPU behind cuda:0 (NVML numbers GPUs ignoring CUDA_VISIBLE_DEVICES)."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


class Meter:
    """Energy around one worker's timed repetitions (see the module docstring)."""

    def __init__(
        self,
        source: EnergySource | None,
        reason: str = "",
        idle_s: float = 0.5,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.source, self.reason, self.idle_s = source, reason, idle_s
        self.clock, self.sleep = clock, sleep
        self.idle_w: float | None = None
        self.reps: list[EnergyRep] = []
        self._start: tuple[float, float] | None = None
        if source is not None and hasattr(source, "begin_sampling"):
            source.begin_sampling()

    def idle(self) -> None:
        """Idle power over ``idle_s`` seconds of sleep, before the warm-up."""
        if self.source is None or self.idle_s <= 0:
            return
        t0, e0 = self.clock(), self.source.read()
        self.sleep(self.idle_s)
        t1, e1 = self.clock(), self.source.read()
        if t1 > t0:
            self.idle_w = (e1 - e0) / (t1 - t0)

    def begin(self) -> None:
        if self.source is not None:
            self._start = (self.clock(), self.source.read())

    def mark(self, samples: int) -> None:
        if self.source is None or self._start is None:
            return
        t1, e1 = self.clock(), self.source.read()
        t0, e0 = self._start
        self.reps.append({"joules": e1 - e0, "seconds": t1 - t0, "samples": float(samples)})
        self._start = None

    @property
    def reading(self) -> EnergyReading:
        """Plain JSON: what this worker measured, or why it measured nothing."""
        if self.source is None:
            return {"note": self.reason or NO_METER}
        return {
            "source": self.source.name,
            "note": self.source.note,
            "idle_w": self.idle_w,
            "reps": list(self.reps),
        }

    def close(self) -> None:
        if self.source is not None:
            self.source.close()


def measure_during(device: str, settings: MeasureSettings) -> Meter:
    """A meter for one worker's share of a trial on ``device``."""
    source, reason = find_source(device)
    return Meter(source, reason, idle_s=settings.energy_idle_s)


def _worker_values(reading: EnergyReading) -> dict[str, float] | None:
    reps = [r for r in reading.get("reps") or [] if r.get("samples", 0) > 0]
    if not reps:
        return None
    joules = math.fsum(r["joules"] for r in reps)
    seconds = math.fsum(r["seconds"] for r in reps)
    samples = math.fsum(r["samples"] for r in reps)
    out = {"j_per_sample": joules / samples, "watts": joules / seconds if seconds > 0 else math.nan}
    idle = reading.get("idle_w")
    if idle is not None:
        out["above_idle"] = (joules - idle * seconds) / samples
        out["idle_w"] = float(idle)
    return out


def apply(result: TrialResult, readings: Sequence[EnergyReading | None], confidence: float) -> None:
    """Fold the workers' readings (``Meter.reading``, None where a worker took none) into
    ``result``: energy per sample with its interval over processes, samples per joule, mean and
    idle watts, above-idle energy, the source and a note."""
    measured = [r for r in readings if r and r.get("source")]
    values = [v for v in (_worker_values(r) for r in measured) if v is not None]
    if not values:
        notes = [r.get("note") for r in readings if r and r.get("note")]
        result.energy_note = notes[0] if notes else f"{NO_METER}: nothing was read"
        return
    result.energy_source = str(measured[0]["source"])
    result.energy_note = measured[0].get("note") or None
    if len(values) >= 2:
        ci = process_interval([[v["j_per_sample"]] for v in values], confidence)
    else:  # one process: its repetitions are the sample
        reps = [r for r in measured[0]["reps"] if r.get("samples", 0) > 0]
        ci = interval([r["joules"] / r["samples"] for r in reps], confidence)
    result.energy_j_per_sample = ci.mean
    result.energy_j_per_sample_ci = ci.half_width if math.isfinite(ci.half_width) else None
    result.samples_per_j = 1.0 / ci.mean if ci.mean > 0 else None
    result.power_w_mean = _mean([v["watts"] for v in values])
    result.idle_power_w = _mean([v["idle_w"] for v in values if "idle_w" in v])
    result.energy_above_idle_j_per_sample = _mean(
        [v["above_idle"] for v in values if "above_idle" in v]
    )


def _mean(values: Sequence[float]) -> float | None:
    kept = [v for v in values if math.isfinite(v)]
    return math.fsum(kept) / len(kept) if kept else None


def summary(result: TrialResult) -> str:
    """One line for the CLI: energy per sample with its interval, or why there is none."""
    if result.energy_j_per_sample is None:
        return result.energy_note or f"{NO_METER}: not measured"
    ci = result.energy_j_per_sample_ci
    text = f"energy {result.energy_j_per_sample * 1000:.3g} mJ/sample"
    if ci is not None:
        text += f" ± {ci * 1000:.2g}"
    if result.power_w_mean is not None:
        text += f", {result.power_w_mean:.1f} W mean"
    if result.idle_power_w is not None:
        text += f" (idle {result.idle_power_w:.1f} W)"
    return text + f" [{result.energy_source}]"
