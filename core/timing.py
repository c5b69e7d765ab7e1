"""One process's share of a trial's timed repetitions: warm-up, quiet check, timed loops, checks.

``time_share`` takes a compiled model and a ``stopping.Plan`` and returns a ``Part``: the
repetitions it timed, every call's latency, why it stopped, whether other processes disturbed it
(``ngb.core.interference``), and the telemetry taken while it ran (CPU sampler, CPU facts, NVML or
tegrastats where present). ``ngb.core.measure`` runs the first share in the trial's own process and
``ngb.core.workers`` the others in fresh processes; ``merge`` folds all parts into the result.

Order inside a share: warm-up (on a GPU: until throughput and SM clock settle) -> quiet check
(``quiet_check_s`` of sleep while sampling others' CPU) -> timed repetitions with the samplers on.
A disturbed share with ``disturbed_retries`` left waits ``disturbed_wait_s`` and runs again from
the warm-up; only its last attempt is kept (the discarded attempts are counted in ``retries``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from ngb.core import events, interference, stopping
from ngb.core.compilers.base import Compiled
from ngb.core.cpu import CpuSampler, CpuTick
from ngb.core.stats import concat_ns_to_ms, is_unstable, summarize
from ngb.core.types import TrialResult, TrialSpec

#: seconds between two ``cpu`` events (samples are kept at ``cpu_interval_s`` in the result)
CPU_EVENT_PERIOD_S = 1.0


@dataclass
class Part:
    """What one worker process measured."""

    worker: int = 0
    repetitions: list[dict[str, float]] = field(default_factory=list)
    latencies_ns: list[int] = field(default_factory=list)
    stopped: str | None = None
    disturbed: str | None = None
    retries: int = 0
    measure_s: float = 0.0  # seconds spent in timed loops
    cpu_samples: list[list[float]] = field(default_factory=list)
    cpu: dict[str, Any] = field(default_factory=dict)  # sampler summary + extras
    telemetry: dict[str, Any] = field(default_factory=dict)
    compile_s: float | None = None
    first_call_s: float | None = None

    @property
    def throughputs(self) -> list[float]:
        return [r["throughput"] for r in self.repetitions]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Part:
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in known})


def time_share(
    spec: TrialSpec,
    compiled: Compiled,
    plan: stopping.Plan,
    sync: Callable[[], None],
    ctx_emit: Callable[..., None],
) -> Part:
    """Warm up and time ``plan``'s share of repetitions; see the module docstring."""
    settings = spec.measure
    gpu = interference.GpuMonitor(settings.cpu_interval_s) if spec.device == "cuda" else None
    part = Part(worker=plan.worker)
    for attempt in range(settings.disturbed_retries + 1):
        if attempt:
            ctx_emit(events.LOG, level="warning", msg=f"disturbed ({part.disturbed}); retrying")
            time.sleep(settings.disturbed_wait_s)
            part = Part(worker=plan.worker, retries=attempt)
        _warm_up(spec, compiled, sync, ctx_emit, gpu, part)
        _timed(spec, compiled, plan, sync, ctx_emit, gpu, part)
        if part.disturbed is None:
            break
    return part


def _warm_up(
    spec: TrialSpec,
    compiled: Compiled,
    sync: Callable[[], None],
    ctx_emit: Callable[..., None],
    gpu: interference.GpuMonitor | None,
    part: Part,
) -> None:
    settings = spec.measure
    ctx_emit(events.PHASE, phase="warmup")
    if spec.device != "cuda":
        compiled.timed_loop(settings.warmup_iters, settings.warmup_s)
        sync()
        return

    def window() -> float:
        loop = compiled.timed_loop(settings.warmup_iters, max(settings.warmup_s, 0.05))
        sync()
        return loop.iters / loop.elapsed_s if loop.elapsed_s > 0 else 0.0

    settled = stopping.settle(
        window,
        clock=gpu.sm_clock if gpu is not None and gpu.available else None,
        tolerance=settings.warmup_tolerance,
        max_s=settings.warmup_max_s,
    )
    part.telemetry["warmup"] = settled.to_dict()


def _timed(
    spec: TrialSpec,
    compiled: Compiled,
    plan: stopping.Plan,
    sync: Callable[[], None],
    ctx_emit: Callable[..., None],
    gpu: interference.GpuMonitor | None,
    part: Part,
) -> None:
    settings = spec.measure
    before = interference.quiet_check(settings.quiet_check_s)
    part.telemetry["cpu_before"] = {**interference.cpu_facts(), "others_percent": before}
    ctx_emit(events.PHASE, phase="measure")
    last_event = [0.0]

    def on_tick(tick: CpuTick) -> None:
        now = time.monotonic()
        if now - last_event[0] >= CPU_EVENT_PERIOD_S:
            last_event[0] = now
            ctx_emit(events.CPU, **cpu_event_fields(tick))

    throughputs: list[float] = []
    latencies: list[np.ndarray] = []
    tegra = interference.TegraStats()
    sampler = CpuSampler(settings.cpu_interval_s, on_tick)
    with sampler, tegra:
        if gpu is not None:
            gpu.start()
        try:
            start = time.perf_counter()
            while (reason := plan.stop_reason(throughputs, time.perf_counter() - start)) is None:
                loop = compiled.timed_loop(settings.min_iters, settings.min_duration_s)
                sync()
                tput = loop.iters * spec.batch / loop.elapsed_s if loop.elapsed_s > 0 else math.nan
                throughputs.append(tput)
                part.repetitions.append(
                    {"iters": loop.iters, "elapsed_s": loop.elapsed_s, "throughput": tput,
                     "worker": plan.worker}
                )  # fmt: skip
                latencies.append(np.asarray(loop.latencies_ns, dtype=np.int64))
                del loop
                pooled = plan.pooled(throughputs)
                ctx_emit(
                    events.PROGRESS,
                    rep=plan.rep_offset + len(throughputs),
                    reps=plan.total_max,
                    throughput=tput,
                    ci_relative=pooled.relative if math.isfinite(pooled.relative) else None,
                    ci_target=plan.target,
                    worker=plan.worker,
                )
            part.measure_s = time.perf_counter() - start
        finally:
            if gpu is not None:
                gpu.stop()
    part.stopped = reason
    part.latencies_ns = np.concatenate(latencies).tolist() if latencies else []
    part.cpu_samples = sampler.samples
    part.cpu = {**sampler.summary(), **sampler.extras()}
    part.telemetry["cpu_after"] = interference.cpu_facts()
    if gpu is not None and gpu.available:
        part.telemetry["gpu"] = gpu.summary()
    if tegra.available:
        part.telemetry["jetson"] = tegra.summary()
    part.disturbed = interference.disturbance(
        threshold=settings.disturbance_threshold,
        before=before,
        during=part.cpu.get("others_percent_mean"),
        gpu_others=sorted(gpu.others) if gpu is not None else (),
    )


def cpu_event_fields(tick: CpuTick) -> dict[str, Any]:
    """The ``cpu`` event's fields (documented in ``ngb.core.events``)."""
    return {
        "percent": tick.percent,
        "proc_percent": tick.proc_percent,
        "others_percent": round(tick.others_percent, 1),
        "per_cpu": tick.per_cpu,
        "steal_percent": tick.steal_percent,
        "mem_percent": tick.mem_percent,
        "mem_used_mb": tick.mem_used_mb,
        "mem_total_mb": tick.mem_total_mb,
    }


def merge(result: TrialResult, parts: list[Part], spec: TrialSpec) -> None:
    """Fold every worker's part into ``result``: stats, verdict, CPU and telemetry."""
    settings = spec.measure
    result.repetitions = [r for p in parts for r in p.repetitions]
    throughputs = [r["throughput"] for r in result.repetitions]
    result.throughput = summarize(throughputs)
    result.latency_ms = summarize(
        concat_ns_to_ms([np.asarray(p.latencies_ns, dtype=np.int64) for p in parts])
    )
    result.unstable = is_unstable(result.throughput, settings.cov_threshold)
    result.workers = len(parts)
    result.cpu_samples = [s for p in parts for s in p.cpu_samples]
    for name in ("cpu_percent_mean", "proc_cpu_percent_mean"):
        values = [p.cpu[name] for p in parts if p.cpu.get(name) is not None]
        setattr(result, name, sum(values) / len(values) if values else None)
    maxima = [p.cpu["cpu_percent_max"] for p in parts if p.cpu.get("cpu_percent_max") is not None]
    result.cpu_percent_max = max(maxima) if maxima else None
    disturbed = [f"worker {p.worker}: {p.disturbed}" for p in parts if p.disturbed]
    result.disturbed = bool(disturbed)
    verdict = stopping.judge(
        throughputs,
        settings,
        disturbed="; ".join(disturbed) or None,
        stopped=parts[-1].stopped if parts else None,
    )
    result.verdict, result.verdict_reason = verdict.verdict, verdict.reason
    result.ci_half_width = verdict.ci_half_width
    result.extra["measure"] = {
        "mode": "fixed" if settings.repetitions is not None else "adaptive",
        "confidence": settings.confidence,
        "ci_target": settings.ci_target,
        "ci_relative": verdict.ci_relative,
        # the repetitions' lag-1 autocorrelation and the variance factor the CI was widened by
        "serial_rho": round(verdict.rho, 4),
        "serial_inflation": round(verdict.inflation, 4),
        "retries": sum(p.retries for p in parts),
    }
    result.extra["workers"] = [
        {
            "worker": p.worker,
            "repetitions": len(p.repetitions),
            "mean": summarize(p.throughputs).mean,
            "stopped": p.stopped,
            "disturbed": p.disturbed,
            "retries": p.retries,
            "measure_s": round(p.measure_s, 3),
            "compile_s": p.compile_s,
            "first_call_s": p.first_call_s,
            "cpu": p.cpu,
        }
        for p in parts
    ]
    result.extra["telemetry"] = [p.telemetry for p in parts]
