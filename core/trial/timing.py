"""One worker process's share of a trial: warm-up until steady, quiet check, timed loops.

``time_share`` takes a compiled model and a ``stopping.Plan`` and returns a ``Part``: the
repetitions it timed, every call's latency and why it stopped. Nothing samples inside the measured
process: the trial's parent process watches the worker from outside (``ngb.core.trial.telemetry``)
and adds CPU, GPU and board telemetry and the disturbance check to the part. ``merge`` folds every
worker's part into the result: statistics, the process-level interval and the verdict.

Order inside a share: warm-up (``warmup.settle``: windows until the last three agree, after a
floor of ``warmup_s`` on a CPU or ``gpu_warmup_min_s`` on a GPU, where the SM clock must settle
too), with the quiet check (others' CPU) read over it -> the ``measure`` phase event (the parent
starts its samplers) -> timed repetitions, with nothing in between. A warm-up floor shorter than
``quiet_check_s`` gets the check as a sleep of its own before it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from ngb.core.compilers.base import Compiled
from ngb.core.records import events
from ngb.core.records.types import TrialResult, TrialSpec
from ngb.core.statistics import percentiles, reruns, stopping
from ngb.core.statistics.percentiles import TAILS
from ngb.core.trial import budget, energy, interference, page_faults, warmup
from ngb.core.trial.cpu import CpuTick
from ngb.core.trial.memory import PhaseMemory
from ngb.core.trial.stats import concat_ns_to_ms, is_unstable, summarize

#: seconds between two ``cpu`` events (samples are kept at ``cpu_interval_s`` in the result)
CPU_EVENT_PERIOD_S = 1.0
#: a warm-up window lasts at least this long (shorter windows only measure timer noise)
WARMUP_WINDOW_S = 0.1
#: per-call latencies kept in a result (and the store): every call up to this many, beyond it a
#: systematic 1-in-k sample in call order (a fast call gives millions; the percentiles and their
#: intervals are computed from every call before thinning)
LATENCY_KEEP = 4096


@dataclass
class Part:
    """What one worker process measured (and, filled in by its parent, what ran beside it)."""

    worker: int = 0
    repetitions: list[dict[str, float]] = field(default_factory=list)
    latencies_ns: Any = field(default_factory=list)  # int64 ndarray (or list) of per-call ns
    stopped: str | None = None
    disturbed: str | None = None
    retries: int = 0
    measure_s: float = 0.0  # seconds spent in timed loops
    warmup_s: float = 0.0  # seconds of warm-up and quiet check before them
    cpu_samples: list[list[float]] = field(default_factory=list)
    cpu: dict[str, Any] = field(default_factory=dict)  # sampler summary + extras
    telemetry: dict[str, Any] = field(default_factory=dict)
    compile_s: float | None = None
    first_call_s: float | None = None
    peak_rss_mb: float | None = None
    pid: int | None = None
    memory: dict[str, Any] = field(
        default_factory=dict
    )  # ngb.core.trial.memory.PhaseMemory.to_dict
    minor_faults: int | None = None  # the process's minor page faults over its timed loops

    @property
    def throughputs(self) -> list[float]:
        return [r["throughput"] for r in self.repetitions]

    @property
    def calls(self) -> int:
        return int(sum(r.get("iters", 0) for r in self.repetitions))


def time_share(
    spec: TrialSpec,
    compiled: Compiled,
    plan: stopping.Plan,
    sync: Callable[[], None],
    ctx_emit: Callable[..., None],
    memory: PhaseMemory | None = None,
) -> Part:
    """Warm up and time ``plan``'s share of repetitions; see the module docstring.
    ``memory`` (started before the build, marked after the compile) is marked at the end of the
    warm-up and of the timed loops."""
    part = Part(worker=plan.worker)
    meter = energy.measure_during(spec.device, spec.measure)  # counters: read between loops only
    try:
        meter.idle()
        started = time.perf_counter()
        # The quiet check reads others' CPU over the warm-up, which is just before the timed
        # loops: as a sleep of its own it cost 0.3 s of every worker's share of max_measure_s
        # (issue 44). Only a warm-up shorter than the check still sleeps, and then before the
        # warm-up, not between it and the timed loops: after 0.3 s asleep the first timed value
        # ran cold (thread pool parked, caches cold), which a user's loop never sees.
        ctx_emit(events.PHASE, phase="warmup")  # the quiet check is part of it (run_writer)
        facts = interference.cpu_facts()  # before: nothing but the span's read after the warm-up
        asleep = budget.quiet_check_apart_s(spec.measure, spec.device)
        if asleep or spec.measure.quiet_check_s <= 0:  # a sleep of its own, or none asked for
            before = interference.quiet_check(asleep)
            _warm_up(spec, compiled, sync, part)
        else:
            span = interference.OthersCpu()
            _warm_up(spec, compiled, sync, part)
            before = span.read()
        part.telemetry["cpu_before"] = {**facts, "others_percent": before}
        part.warmup_s = time.perf_counter() - started
        if memory is not None:
            memory.mark("warmup")
        _timed(spec, compiled, plan, sync, ctx_emit, part, meter)
        if memory is not None:
            memory.mark("timed")
        part.telemetry["energy"] = meter.reading
    finally:
        meter.close()
    return part


def _warm_up(
    spec: TrialSpec,
    compiled: Compiled,
    sync: Callable[[], None],
    part: Part,
) -> None:
    settings = spec.measure
    gpu = spec.device == "cuda"
    monitor = interference.GpuMonitor(settings.cpu_interval_s) if gpu else None
    floor = budget.warmup_floor_s(settings, spec.device)
    if floor == 0:  # asked for no warm-up time: just the calls asked for, if any
        if settings.warmup_iters:
            compiled.timed_loop(settings.warmup_iters, 0.0)
            sync()
        return

    first = [True]

    def window() -> float:
        # The first window runs at least ``warmup_iters`` calls; later ones at least one call:
        # on a 0.15 s call (resnet18 b8 here) three 3-call windows cost 1.35 s a worker process
        # before the warm-up could even be judged steady.
        calls = settings.warmup_iters if first[0] else 1
        if first[0] and calls > 1:
            # the first calls fit the warm-up's cap too (a call of seconds: one is enough)
            one = compiled.timed_loop(1, 0.0)
            sync()
            cap = max(settings.warmup_max_s, floor)
            calls = max(1, min(calls - 1, int(cap / max(one.elapsed_s, 1e-9)) - 1))
            if one.elapsed_s >= cap:
                first[0] = False
                return one.iters / one.elapsed_s if one.elapsed_s > 0 else 0.0
        first[0] = False
        loop = compiled.timed_loop(calls, max(floor / 5, WARMUP_WINDOW_S))
        sync()
        return loop.iters / loop.elapsed_s if loop.elapsed_s > 0 else 0.0

    settled = warmup.settle(
        window,
        clock=monitor.sm_clock if monitor is not None and monitor.available else None,
        tolerance=settings.warmup_tolerance,
        max_s=max(settings.warmup_max_s, 3 * floor if gpu else floor),
        min_s=floor,
    )
    part.telemetry["warmup"] = settled.to_dict()


def _timed(
    spec: TrialSpec,
    compiled: Compiled,
    plan: stopping.Plan,
    sync: Callable[[], None],
    ctx_emit: Callable[..., None],
    part: Part,
    meter: energy.Meter,
) -> None:
    ctx_emit(events.PHASE, phase="measure")
    settings = spec.measure
    throughputs: list[float] = []
    latencies: list[np.ndarray] = []
    faults_before = (
        page_faults.minor_faults()
    )  # outside the timed calls (ngb.core.trial.page_faults)
    start = time.perf_counter()
    call_s = _warmup_call_s(part)
    while (reason := plan.stop_reason(throughputs, time.perf_counter() - start)) is None:
        meter.begin()
        loop = compiled.timed_loop(
            loop_iters(settings.min_iters, plan, call_s), settings.min_duration_s
        )
        sync()
        call_s = loop.elapsed_s / loop.iters if loop.iters else call_s
        meter.mark(loop.iters * spec.batch)
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
            fixed=not plan.adaptive,  # a fixed count: the target judges the end, never ends it
            worker=plan.worker,
        )
    part.measure_s = time.perf_counter() - start
    faults_after = page_faults.minor_faults()
    if faults_before is not None and faults_after is not None:
        part.minor_faults = faults_after - faults_before
    part.stopped = reason
    # an array, not a list: a fast call gives millions of latencies, and they cross a pipe
    part.latencies_ns = np.concatenate(latencies) if latencies else np.empty(0, np.int64)


def loop_iters(min_iters: int, plan: stopping.Plan, call_s: float | None) -> int:
    """Calls a timed loop must make: ``min_iters``, fewer where they would not fit the worker's
    time budget (``max_measure_s`` shared out), never fewer than one. A call of seconds (untuned
    TVM on a large block) made each 5-call loop take 28-63 s against a 10 s budget."""
    if call_s is None or call_s <= 0 or not plan.adaptive or not math.isfinite(plan.budget_s):
        return min_iters
    per_loop = plan.budget_s / max(1, plan.reps)
    return max(1, min(min_iters, int(per_loop / call_s)))


def _warmup_call_s(part: Part) -> float | None:
    """Seconds per call in the last warm-up window (None without a warm-up)."""
    rates = (part.telemetry.get("warmup") or {}).get("throughputs") or []
    return 1.0 / rates[-1] if rates and rates[-1] > 0 else None


def cpu_event_fields(tick: CpuTick) -> dict[str, object]:
    """The ``cpu`` event's fields (documented in ``ngb.core.records.events``)."""
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


class NoTimedCalls(Exception):
    """The timed loops ran no call at all: there is no number to report."""


def merge(
    result: TrialResult,
    parts: list[Part],
    spec: TrialSpec,
    stopped: str | None,
    allowance: reruns.Allowance | None = None,
) -> None:
    """Fold every worker's part into ``result``: stats, verdict, CPU and telemetry.
    ``allowance``: what this host's re-runs say about the interval (``ngb.core.statistics.reruns``;
    without one, the default design effect)."""
    settings = spec.measure
    if not parts or sum(p.calls for p in parts) == 0:
        raise NoTimedCalls(
            "the timed loops ran no call (min_iters and min_duration_s are both 0?): no throughput"
        )
    groups = [p.throughputs for p in parts if p.repetitions]
    result.repetitions = [r for p in parts for r in p.repetitions]
    result.throughput = summarize([t for g in groups for t in g])
    calls_ns = [np.asarray(p.latencies_ns, dtype=np.int64) for p in parts]
    result.latency_ms = summarize(concat_ns_to_ms(calls_ns))
    _latency_tails(result, calls_ns, settings.confidence)
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
    # worker 0 recorded how the workers started (ngb.core.trial.worker_start): forked ones share a
    # level
    started = result.extra.get("worker_start")
    forked = isinstance(started, dict) and started.get("method") in ("fork", "forkserver")
    ci = stopping.process_interval(groups, settings.confidence)
    allow = allowance or reruns.Allowance()
    stated = reruns.widen(ci, allow, reruns.log_spread(groups), settings.confidence)
    verdict = stopping.judge(
        groups, settings, disturbed="; ".join(disturbed) or None, stopped=stopped,
        one_interpreter=forked, design_effect=allow.design_effect,
        stated_half=stated.half_width if stated else None,
        stated_note=stated.note if stated else "",
    )  # fmt: skip
    if ci.workers >= 2:  # each process weighs the same: the interval is centred on this mean
        result.throughput.mean = ci.mean
    result.verdict, result.verdict_reason = verdict.verdict, verdict.reason
    _page_faults(result, parts, spec)
    result.ci_half_width = verdict.ci_half_width
    result.extra["measure"] = {
        "mode": "fixed" if settings.repetitions is not None else "adaptive",
        "confidence": settings.confidence,
        "ci_target": settings.ci_target,
        "ci_relative": verdict.ci_relative,
        "interval": "processes" if ci.workers >= 2 else "one process",
        # the interval's degrees of freedom: derived metrics (ngb.core.statistics.intervals) rebuild
        # it from the stored mean and half-width with the same t, so every surface prints one
        # interval
        "df": stated.df if stated else max(ci.n - 1, 0),
        # what time added: the design effect of this host's re-runs, or this trial's own re-runs
        "reruns": stated.to_dict() if stated else allow.to_dict(),
        "stopped": stopped,
        # one process only: the lag-1 autocorrelation and the variance factor its CI was widened by
        "serial_rho": round(verdict.rho, 4),
        "serial_inflation": round(verdict.inflation, 4),
        "levels": verdict.levels.to_dict() if verdict.levels else None,
        "drift": None if verdict.drift is None else round(verdict.drift, 4),
        "retries": sum(p.retries for p in parts),
        "warmup_s": round(sum(p.warmup_s for p in parts), 3),
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
            "warmup_s": round(p.warmup_s, 3),
            "compile_s": p.compile_s,
            "first_call_s": p.first_call_s,
            "faults_per_call": _rounded(page_faults.per_call(p.minor_faults, p.calls)),
            "cpu": p.cpu,
        }
        for p in parts
    ]
    result.extra["telemetry"] = [p.telemetry for p in parts]
    peaks = [p.peak_rss_mb for p in parts if p.peak_rss_mb is not None]
    if peaks:
        result.peak_rss_mb = max(peaks)
    _memory(result, parts)
    energy.apply(result, [p.telemetry.get("energy") for p in parts], settings.confidence)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _page_faults(result: TrialResult, parts: list[Part], spec: TrialSpec) -> None:
    """Each process's minor faults per call; when its speed follows them, the verdict says so
    (``ngb.core.trial.page_faults``: the allocator's state, not the model, set the spread)."""
    timed = [p for p in parts if p.repetitions]
    per_call = [page_faults.per_call(p.minor_faults, p.calls) for p in timed]
    if all(f is None for f in per_call):
        return
    allocator = str(result.extra.get("allocator") or "system")
    means = [summarize(p.throughputs).mean for p in timed]
    note = page_faults.allocator_note(means, per_call, allocator, spec.batch)
    result.extra["page_faults"] = {
        "per_call": [_rounded(f) for f in per_call],
        "source": page_faults.SOURCE,
        "speed_follows_faults": note is not None,
    }
    if note is not None:
        result.verdict_reason = f"{result.verdict_reason}; {note}"


def _latency_tails(result: TrialResult, calls_ns: list[np.ndarray], level: float) -> None:
    """p50/p90/p99 of every call with their intervals
    (``ngb.core.statistics.percentiles.over_processes``: order statistics, widened where the worker
    processes differ), each worker's own p99 beside them, and the kept sample of calls."""
    every_call = np.concatenate(calls_ns) if calls_ns else np.empty(0, np.int64)
    groups = [(np.sort(c).astype(np.float64) / 1e6).tolist() for c in calls_ns if c.size]
    tails = {name: percentiles.over_processes(groups, q, name, level) for name, q in TAILS}
    result.latency_ci_ms = {name: [p.low, p.high] for name, p in tails.items()}
    result.latency_calls = int(every_call.size)
    result.extra["latency"] = {
        "interval": "order statistics of all calls, widened to Woodruff's over worker processes",
        "level": level,
        "min_calls": {name: p.needed for name, p in tails.items()},
        "worker_p99_ms": [round(percentiles.interval(g, 0.99).value, 6) for g in groups],
    }
    every = max(1, -(-every_call.size // LATENCY_KEEP))  # ceil: at most LATENCY_KEEP kept
    result.latency_sample_every = every
    result.latency_sample_ns = every_call[::every].tolist()


def _memory(result: TrialResult, parts: list[Part]) -> None:
    """Per phase, the largest figure over the worker processes; GPU memory from NVML where a
    worker read it (every runtime's allocations), else what worker 0 recorded (torch's)."""
    memories = [p.memory for p in parts if p.memory]
    if not memories:
        return
    rss: dict[str, float] = {}
    gpu: dict[str, float] = {}
    for m in memories:
        for phase, mb in (m.get("rss_mb") or {}).items():
            rss[phase] = max(rss.get(phase, 0.0), float(mb))
        for phase, mb in (m.get("gpu_mb") or {}).items():
            gpu[phase] = max(gpu.get(phase, 0.0), float(mb))
    result.peak_rss_phase_mb = rss
    result.rss_source = next((m["rss_source"] for m in memories if m.get("rss_source")), None)
    if gpu:
        result.gpu_mem_phase_mb = gpu
        result.gpu_mem_mb = max(gpu.values())
        result.gpu_mem_source = next(
            (m["gpu_source"] for m in memories if m.get("gpu_source")), None
        )
