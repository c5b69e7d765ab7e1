"""One serving measurement here: build, compile, warm up, then serve (``ngb serve``, issue 43).

The model is built and compiled as a trial's worker does it (``ngb.core.models.models``, the
compiler registry, the same checks, ``CompileContext``), then driven by the load generator
(``ngb.core.serving.loadgen``) through ``Compiled.serving_runners``. With dynamic batching the model
is compiled for ``max_batch`` (static shapes; a short batch is padded), and a request is one sample;
without it a request is one call at the trial's batch.

The warm-up runs every runner at once for ``warmup_s``: besides the first-call costs it measures
the closed-loop capacity (calls answered per second with all runners busy), which a peak search
without ``qps`` starts from (half of it: a server with a p99 budget runs well below saturation).

Call it in a process of its own (``ngb serve`` forks one per compiler, ``ngb.serve`` a fresh
interpreter where torch is loaded): it starts the runtime's threads and the serving threads.
"""

from __future__ import annotations

import contextlib
import math
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ngb.core.base.errors import CompilerUnavailable, UnsupportedTrial
from ngb.core.base.scratch import scratch_dir
from ngb.core.compilers import CompileContext, get_compiler
from ngb.core.records import arrivals
from ngb.core.records.serve_settings import ServeSettings as ServeSettings  # re-exported
from ngb.core.records.types import TrialSpec
from ngb.core.serving import loadgen, peak, serve_stats
from ngb.core.statistics import percentiles

#: what ``ngb serve`` says while it runs: one line each
Say = Callable[[str], None]


@dataclass(frozen=True)
class ServingProgress:
    """A serving's progress, as ``serve``'s ``progress`` callback is given it: at the start of
    each run (a probe's, between probes) and then every ``loadgen.PROGRESS_PERIOD_S`` from the
    load generator's watching thread (never its issuing thread). ``offered_qps``: the rate this
    run offers (server; None for the closed loops and offline); ``duration_s``: its planned
    seconds; ``probe``: a peak search's probe (0-based) of at most ``max_probes``."""

    scenario: str
    so_far: loadgen.SoFar
    offered_qps: float | None
    duration_s: float
    limit_ms: float | None = None
    probe: int | None = None
    max_probes: int | None = None

    def fields(self) -> dict[str, object]:
        """The ``serving`` event's fields (``ngb.core.records.events.SERVING``)."""
        so_far = self.so_far
        achieved = so_far.answered / so_far.seconds if so_far.seconds > 0 else None
        return {
            "scenario": self.scenario, "elapsed_s": round(so_far.seconds, 2),
            "duration_s": self.duration_s, "offered_qps": self.offered_qps,
            "achieved_qps": None if achieved is None else round(achieved, 3),
            "issued": so_far.issued, "answered": so_far.answered,
            "p99_ms": None if so_far.p99_ms is None else round(so_far.p99_ms, 4),
            "limit_ms": self.limit_ms, "probe": self.probe, "max_probes": self.max_probes,
        }  # fmt: skip


#: ``serve``'s progress callback
OnProgress = Callable[[ServingProgress], None]
#: the closed loops' fewest queries, whatever the duration (LoadGen's SingleStream minimum; twice
#: the claim minimum where that is more): enough for the claimed percentile's upper bound to
#: survive the widening over stretches of the run
CLOSED_MIN_QUERIES = 1024


@dataclass
class ServeOutcome:
    """One compiler served: the run summed up (or the peak search and its probes) and what
    ran. Plain data, so it crosses from the serving process and is stored as JSON."""

    spec: TrialSpec
    settings: ServeSettings
    host: str
    started_at: float
    finished_at: float = 0.0
    summary: serve_stats.Summary | None = None
    peak: peak.Peak | None = None
    capacity_qps: float | None = None
    compile_s: float | None = None
    precision: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    # Any: the compiled model's facts (plain JSON from each runtime)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.spec.label

    def to_dict(self) -> dict[str, object]:
        return {
            "spec": self.spec.to_dict(),
            "settings": self.settings.to_dict(),
            "host": self.host,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "summary": self.summary.to_dict() if self.summary is not None else None,
            "peak": self.peak.to_dict() if self.peak is not None else None,
            "capacity_qps": self.capacity_qps,
            "compile_s": self.compile_s,
            "precision": self.precision,
            "versions": self.versions,
            "extra": self.extra,
        }


def compiled_spec(spec: TrialSpec, settings: ServeSettings) -> TrialSpec:
    """The spec the model is compiled at: ``max_batch`` with dynamic batching."""
    return replace(spec, batch=settings.max_batch) if settings.max_batch > 1 else spec


def serve(
    spec: TrialSpec,
    settings: ServeSettings,
    *,
    say: Say | None = None,
    progress: OnProgress | None = None,
    cache_dir: Path | None = None,
) -> ServeOutcome:
    """Build and compile ``spec`` here, then serve it as ``settings`` say."""
    tell: Say = say or (lambda line: None)
    spec = compiled_spec(spec, settings)
    outcome = ServeOutcome(spec, settings, socket.gethostname(), time.time())
    compiler = get_compiler(spec.compiler, spec.compiler_options)
    ok, reason = compiler.available()
    if not ok:
        raise CompilerUnavailable(f"{spec.compiler} is unavailable here: {reason}")
    if spec.device not in compiler.devices:
        raise UnsupportedTrial(f"{spec.compiler} cannot target {spec.device!r}")
    precision = spec.measure.precision
    compiler.check_precision(precision, spec.device)
    from ngb.core.trial.versions import library_versions

    outcome.versions = {**library_versions(), **compiler.versions()}
    # Any: None where the compiler takes no model (noop), else what ``create_model`` built
    model: Any = None
    example: Any = None
    if compiler.needs_model:
        import torch
        from ngb.core.models import models

        if settings.threads:
            torch.set_num_threads(settings.threads)
        tell(f"building {spec.model_label} b{spec.batch}")
        model, example = models.create_model(spec, cache_dir)
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(scratch_dir("serve")))
        ctx = CompileContext(
            workdir=workdir, device=spec.device, threads=settings.threads,
            cache_dir=cache_dir, precision=precision, trial_dir=workdir,
        )  # fmt: skip
        tell(f"compiling with {spec.compiler}")
        began = time.perf_counter()
        compiled = compiler.compile(model, example, ctx)
        outcome.compile_s = time.perf_counter() - began
        del model, example
        stack.callback(compiled.close)
        # the same serving threads for the warm-up and every run (``loadgen.Workers``)
        workers = stack.enter_context(
            loadgen.Workers(compiled.serving_runners(settings.concurrency))
        )
        outcome.capacity_qps = loadgen.warm_up(workers, settings.warmup_s)
        tell(
            f"warmed up: {len(workers)} in flight, {outcome.capacity_qps:.4g} calls/s with all "
            "busy (closed loop)"
        )
        if settings.find_peak:
            outcome.peak = _find_peak(workers, settings, outcome.capacity_qps, tell, progress)
        else:
            outcome.summary = _serve_once(workers, settings, outcome.capacity_qps, progress)
        outcome.precision = compiled.precision
        outcome.extra = dict(compiled.extra)
    outcome.finished_at = time.time()
    return outcome


def _watched(
    progress: OnProgress | None,
    scenario: str,
    offered_qps: float | None,
    duration_s: float,
    limit_ms: float | None,
    probe: int | None = None,
    max_probes: int | None = None,
) -> loadgen.Progress | None:
    """The load generator's callback for one run, told the run's start at once (here, between
    runs: the issuing thread has not started)."""
    if progress is None:
        return None

    def tell(so_far: loadgen.SoFar) -> None:
        progress(
            ServingProgress(scenario, so_far, offered_qps, duration_s, limit_ms, probe, max_probes)
        )

    tell(loadgen.SoFar(0, 0, 0.0, None))
    return tell


def _serve_once(
    runners: loadgen.Workers,
    s: ServeSettings,
    capacity: float,
    on_progress: OnProgress | None,
) -> serve_stats.Summary:
    batching = s.batching()
    offered = s.qps if s.scenario == "server" else None
    progress = _watched(on_progress, s.scenario, offered, s.duration_s, s.p99_ms)
    if s.scenario == "server":
        assert s.qps is not None  # ServeSettings checked it
        plan = arrivals.schedule(s.qps, s.duration_s, s.seed, s.burstiness)
        trace = loadgen.run(runners, "server", plan=plan, batching=batching, progress=progress)
    elif s.scenario == "offline":
        count = max(1, math.ceil(capacity * s.duration_s * s.max_batch))
        trace = loadgen.run(runners, "offline", count=count, batching=batching, progress=progress)
    else:
        q = dict(percentiles.TAILS)[serve_stats.CLAIMED[s.scenario] or "p99"]
        trace = loadgen.run(
            runners, s.scenario, duration_s=s.duration_s,
            samples_per_query=s.samples_per_query,
            min_queries=max(CLOSED_MIN_QUERIES, 2 * percentiles.min_calls(q)),
            batching=batching, progress=progress,
        )  # fmt: skip
    return serve_stats.summarize(trace, s.p99_ms)


def _find_peak(
    runners: loadgen.Workers,
    s: ServeSettings,
    capacity: float,
    tell: Say,
    on_progress: OnProgress | None,
) -> peak.Peak:
    assert s.p99_ms is not None  # ServeSettings checked it
    limit = s.p99_ms
    start = s.qps or max(capacity * s.max_batch / 2, 0.1)
    batching = s.batching()

    def probe(qps: float, seconds: float, index: int) -> serve_stats.Summary:
        plan = arrivals.schedule(qps, seconds, s.seed + index, s.burstiness)
        progress = _watched(on_progress, "server", qps, seconds, limit, index, s.max_probes)
        trace = loadgen.run(runners, "server", plan=plan, batching=batching, progress=progress)
        return serve_stats.summarize(trace, limit)

    def shown(p: peak.Probe) -> None:
        tail = p.summary.latency["p99"]
        low = f"{tail.low:.3g}" if tail.low is not None else "-"
        high = f"{tail.high:.3g}" if tail.high is not None else "-"
        # the rest of an INVALID probe's reasons (the bounds already show an unclaimed p99)
        why = [r for r in p.summary.reasons if not r.startswith("p99 not claimed")]
        tell(
            f"probe {p.index + 1} ({p.phase}): {p.qps:.4g} QPS for {p.duration_s:.3g} s -> "
            f"p99 {tail.value:.3g} [{low}, {high}] ms: {p.outcome} {limit:g} ms"
            + (f" [INVALID: {'; '.join(why)}]" if why else "")
        )

    tell(f"peak search for p99 <= {limit:g} ms from {start:.4g} QPS")
    return peak.find_peak(
        probe, limit, start, probe_s=s.probe_s, max_probes=s.max_probes, target=s.target,
        max_probe_s=s.max_probe_s, on_probe=shown,
    )  # fmt: skip
