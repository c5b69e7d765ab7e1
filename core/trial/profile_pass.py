"""The profile pass of a trial (``MeasureSettings.profile``): where its time goes, per operator.

After the timed workers have finished and the trial's numbers are merged, ONE more process (a
fork of the trial's process, which has run no model) builds and compiles the model again with
the runtime's own profiler on and runs it (``profile_trial`` below; the records are
``ngb.core.compilers.profiling``'s). It runs after the timing, never beside it, so the timed numbers
are the same with profiling on or off; what it costs is the trial's wall time. Its answer goes into
``result.extra["profile"]`` (``Profile.to_dict`` with the trial's timed ms per call beside the
profiled one); the store takes it out of ``extra`` into ``profiles`` / ``profile_kernels`` keyed by
run and trial key (``ngb.sweeps.store.profile_rows.take_profiles``).

A pass that fails, or has no profiler wired for its runtime, leaves ``{"error": "one line"}``
and the trial stays what its timing made it: a profile is an explanation, never a verdict. The
pass is bounded by what is left of the trial's ``timeout_s`` (at most ``PASS_CAP_S``): the
agent kills a trial past its timeout and a hung profiler must not take the timed result with it.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ngb.core.base.capture import silenced
from ngb.core.base.errors import CompilerUnavailable, UnknownNameError, UnsupportedTrial, one_line
from ngb.core.base.isolate import call_in_child
from ngb.core.compilers import compiler_class
from ngb.core.compilers.profiling import Profile, requests_in_flight, torch_records, wall_ms
from ngb.core.records import events

if TYPE_CHECKING:
    from ngb.core.compilers.base import Compiled, Profiler
    from ngb.core.records.types import TrialResult, TrialSpec
    from ngb.core.trial.workers import Emit

#: the pass's own limit (build, two compiles for ONNX Runtime/OpenVINO, the calls)
PASS_CAP_S = 600.0
#: what is kept of the trial's timeout for sending its result after the pass
_MARGIN_S = 10.0
#: seconds of profiled calls aimed at (then 5..20 calls, from the timed latency)
_TARGET_S = 2.0
#: a call this long or longer is profiled twice after one warm-up call. The pass runs its warm-up
#: and calls twice (unprofiled for the reference latency, then profiled): at the old floor of
#: 5 + 2, untuned TVM on deit3 b8 (~100 s a call) needed 1,400 s of calls and the trial ran past
#: its 1,200 s timeout. An operator's share of a call of seconds is steady over two calls.
SLOW_CALL_MS = 1000.0


def calls_for(timed_ms: float | None) -> tuple[int, int]:
    """(profiled calls, warm-up calls): about ``_TARGET_S`` of calls, 5 to 20 of them; a call
    of ``SLOW_CALL_MS`` or more gets 2 and 1."""
    if not timed_ms or timed_ms <= 0:
        return 20, 5
    if timed_ms >= SLOW_CALL_MS:
        return 2, 1
    calls = max(5, min(20, round(_TARGET_S * 1000.0 / timed_ms)))
    return calls, max(2, calls // 4)


def timed_ms_of(result: TrialResult, batch: int) -> float | None:
    """The trial's timed milliseconds per call: batch / mean throughput (what the reports use)."""
    mean = result.throughput.mean
    return 1000.0 * batch / mean if mean and mean > 0 else None


def run_pass(
    spec: TrialSpec,
    result: TrialResult,
    workdir: Path,
    cache_dir: Path | None,
    deadline: float,
    emit: Emit,
) -> None:
    """Profile ``spec`` in one more process when its settings ask and its timing succeeded;
    the answer (or its one-line error) goes into ``result.extra["profile"]``. Never raises."""
    if not spec.measure.profile or result.status != "ok":
        return
    timed = timed_ms_of(result, spec.batch)
    limit = min(PASS_CAP_S, deadline - time.monotonic() - _MARGIN_S)
    if limit < 1.0:
        result.extra["profile"] = {"error": "no time left in timeout_s for the profile pass"}
        return
    calls, warmup = calls_for(timed)
    emit(
        events.make_event(
            events.LOG, key=spec.key, level="info",
            msg=f"profile pass: {calls} calls under {spec.compiler}'s profiler (timing done)",
        )
    )  # fmt: skip
    try:
        found = call_in_child(
            f"profile pass of {spec.label}", _bounded, limit, spec, workdir / "profile",
            calls, warmup, cache_dir, workdir,
        )  # fmt: skip
    except Exception as exc:  # the timed result stands; the profile says why it is missing
        result.extra["profile"] = {"error": one_line(exc)}
        return
    found.timed_ms = timed
    found.timed_in_flight = requests_in_flight(result.extra)
    result.extra["profile"] = found.to_dict()


def _bounded(
    limit: float,
    spec: TrialSpec,
    workdir: Path,
    calls: int,
    warmup: int,
    cache_dir: Path | None,
    trial_dir: Path,
) -> Profile:
    """In the pass's process: the kernel ends it at ``limit`` seconds (SIGALRM's default
    action), even inside a runtime's C code that never returns to Python."""
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(max(1, int(limit)))
    return profile_trial(spec, workdir, calls, warmup, cache_dir, trial_dir)


def profiler_of(compiler: str) -> Profiler | None:
    """How this pass reads ``compiler``'s kernels, as the compiler declares it
    (``Compiler.profiler``: torch.profiler, its ``Compiled.profile_records`` hook on the model
    built, or that hook on a second build with the profiler on); None: none is wired to it."""
    try:
        return compiler_class(compiler).profiler
    except (UnknownNameError, ImportError):
        return None


def profile_compiled(
    compiler: str, compiled: Compiled, calls: int, warmup: int, plain: Compiled | None = None
) -> Profile:
    """Profile one compiled model (built with ``CompileContext.profile`` for ONNX Runtime and
    OpenVINO); ``plain`` (the same model compiled without the profiler) gives the latency the
    profiler is compared against, else ``compiled``'s own calls before profiling do."""
    reference = plain or compiled
    for _ in range(warmup):
        reference.run()
    plain_ms = wall_ms(reference.run, calls)
    hook = getattr(compiled, "profile_records", None)
    if callable(hook):
        for _ in range(warmup):
            compiled.run()
        records, profiled_ms, tool = hook(calls)
        return Profile(compiler, tool, calls, plain_ms, profiled_ms, list(records))
    if profiler_of(compiler) != "torch":
        raise UnsupportedTrial(f"{compiler}: no profiler is wired to this runtime yet")
    folded = compiled.extra.get("folded_ops")
    records, profiled_ms = torch_records(
        compiled.run, calls, folded if isinstance(folded, Mapping) else None
    )
    return Profile(compiler, "torch.profiler", calls, plain_ms, profiled_ms, records)


def profile_trial(
    spec: TrialSpec,
    workdir: Path,
    calls: int = 20,
    warmup: int = 5,
    cache_dir: Path | None = None,
    trial_dir: Path | None = None,
) -> Profile:
    """The profile pass of one trial in this process (call it in a child: it builds and runs
    the model): build, compile without and with the profiler, profile (see module). The trial's
    threads and optimisation apply as in its timed workers; ``trial_dir`` (the timed trial's
    scratch) lets a tuning compiler build from what its worker 0 searched instead of searching
    again."""
    from ngb.core.compilers import CompileContext, check_compiler_takes, get_compiler
    from ngb.core.models import models
    from ngb.core.models.model_sources import source_of

    compiler = get_compiler(spec.compiler, spec.compiler_options)
    profiler = compiler.profiler  # how it is profiled, as it declares
    if profiler is None:
        raise UnsupportedTrial(f"{spec.compiler}: no profiler is wired to this runtime yet")
    ok, why = compiler.available()
    if not ok:
        raise CompilerUnavailable(f"{spec.compiler} is unavailable here: {why}")
    compiler.check_precision(spec.measure.precision, spec.device)
    check_compiler_takes(source_of(spec), compiler, spec)
    threads = spec.measure.threads
    if threads and compiler.needs_model:  # as the timed workers run (ngb.core.trial.measure)
        import torch

        torch.set_num_threads(threads)
    model, example = models.create_model(spec, cache_dir)
    if spec.optimisation != "none":  # the DLAS question: where int8 or pruning changed the time
        import torch
        from ngb.core.trial import optimise

        optimise.check_supported(spec.optimisation, spec.compiler, spec.device)
        if not isinstance(model, torch.nn.Module):  # a user's ONNX file: nothing to transform
            raise UnsupportedTrial(f"{spec.optimisation} applies to a torch model only")
        changed, changed_example = optimise.apply(model, example, spec.optimisation)
        if changed is None or changed_example is None:
            raise UnsupportedTrial(f"{spec.optimisation} left no model to profile")
        model, example = changed, changed_example

    def build(profiled: bool) -> Compiled:
        where = workdir / ("profiled" if profiled else "plain")
        where.mkdir(parents=True, exist_ok=True)
        ctx = CompileContext(
            workdir=where, device=spec.device, cache_dir=cache_dir, threads=threads,
            precision=spec.measure.precision, profile=profiled,
            # not worker 0: a tuning compiler builds from the trial's search, never searches
            worker=1 if trial_dir is not None else 0, trial_dir=trial_dir,
        )  # fmt: skip
        return compiler.compile(model, example, ctx)

    with silenced():  # the profilers' own prints stay off the terminal (``capture.silenced``)
        plain = build(False)
        try:
            compiled = build(True) if profiler == "rebuild" else plain
            try:
                result = profile_compiled(spec.compiler, compiled, calls, warmup, plain)
                result.precision = compiled.precision or ""
                return result
            finally:
                if compiled is not plain:
                    compiled.close()
        finally:
            plain.close()
