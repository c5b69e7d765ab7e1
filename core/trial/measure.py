"""The measurement protocol: one trial from spec to ``TrialResult``.

A trial is a series of worker processes (``ngb.core.trial.workers``), run one after another, each a
fresh interpreter (``ngb.core.trial.worker_start``; ``NGB_WORKER_START=auto`` forks them from here);
the trial's own process only starts them, watches and decides. In each worker
(each step timed apart, as the paper reports them apart): build model -> optimisation -> eager
reference output (worker 0 only) -> compile (export and tuning phases split out by the compiler
through ``ctx.phase``) -> first call -> warm-up, quiet check and timed repetitions
(``ngb.core.trial.timing``). After each worker ``ngb.core.statistics.stopping.next_worker`` decides
whether the interval over the process means needs another; then statistics, interval and verdict
over all.

``run_trial`` never raises for a trial failure: whatever goes wrong becomes a failed result with a
one-line ``error`` and an ``error_kind`` the store and the TUI can group by. Only interpreter-level
exits (KeyboardInterrupt, SystemExit, the agent's cancel signal) propagate.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import socket
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from ngb.core.base.errors import (
    CompilerUnavailable,
    UnsupportedOptimisation,
    UnsupportedTrial,
    one_line,
)
from ngb.core.base.scratch import scratch_dir
from ngb.core.compilers import (
    CompileContext,
    Compiled,
    check_compiler_takes,
    get_compiler,
    unsupported_error_names,
)
from ngb.core.compilers.base import Compiler, CompilerConfig
from ngb.core.models import algorithms
from ngb.core.models.model_basics import to_numpy
from ngb.core.records import algorithm_names, events, trial_extra
from ngb.core.records.types import TrialResult, TrialSpec
from ngb.core.statistics import accuracy_stats, reruns, stopping
from ngb.core.trial import allocator, budget
from ngb.core.trial.memory import PhaseMemory, ru_maxrss_mb
from ngb.core.trial.timing import Part, merge, time_share
from ngb.core.trial.versions import library_versions
from ngb.core.trial.workers import Emit, Outcome, ShareJob, WorkerFailed, preload, run_worker

# accuracy_pass and profile_pass are imported where a trial asks for them (labelled data, model
# building, profilers): every agent and every fresh worker imports this module, and a plain timed
# trial uses neither
if TYPE_CHECKING:
    from ngb.core.models.model_types import Array, Example, Model
    from ngb.core.trial.accuracy_pass import Prepared

_UNSUPPORTED_WORDS = ("not supported", "unsupported", "not implemented", "no conversion rule")
_OOM_WORDS = ("out of memory", "cannot allocate memory", "std::bad_alloc", "failed to allocate")


@functools.cache
def _unsupported_types() -> frozenset[str]:
    """Exception type names that mean "this model/op cannot go through this compiler" rather than
    a bug: NotImplementedError anywhere, plus what each compiler declares
    (``Compiler.unsupported_errors``). Read at the first failure, not when this module is
    imported. It imports every compiler's module (~25 ms on the 2-core VM); a trial that records
    its library versions (``library_versions``) loads them too, so this defers that cost."""
    return frozenset({"NotImplementedError"} | unsupported_error_names())


def classify_error(exc: BaseException) -> str:
    """Map an exception to ``error_kind``: unavailable | unsupported | oom | error."""
    if isinstance(exc, CompilerUnavailable):
        return "unavailable"
    if isinstance(exc, UnsupportedTrial):
        return "unsupported"
    names = {cls.__name__ for cls in type(exc).__mro__}
    message = str(exc).lower()
    if isinstance(exc, MemoryError) or "OutOfMemoryError" in names:
        return "oom"
    if any(word in message for word in _OOM_WORDS):
        return "oom"
    if names & _unsupported_types() or any(word in message for word in _UNSUPPORTED_WORDS):
        return "unsupported"
    return "error"


def preload_trial_harness() -> None:
    """Import, once, what every trial loads on first use, in a process that forks its trials
    (the agent: ``ngb.core.trial.forked_trial``), so that no forked trial imports it again:
    ~0.05 CPU-s a trial on the 2-core VM. No compiler library: only ngb's compiler modules,
    which ``library_versions`` loads to ask each for its versions (read once, cached)."""
    import multiprocessing.popen_fork  # noqa: F401 -- a trial's first worker fork

    import numpy.ma  # noqa: F401 -- np.percentile's first call loads it

    with contextlib.suppress(ImportError):
        importlib.import_module("psutil")
    from ngb.core.base import device_state  # noqa: F401
    from ngb.core.trial import provenance  # noqa: F401

    library_versions()


def run_trial(
    spec: TrialSpec,
    *,
    emit: Emit | None = None,
    workdir: Path | str | None = None,
    cache_dir: Path | str | None = None,
) -> TrialResult:
    """Measure one trial here; see the module docstring for the protocol.

    Call it from a process that has not run parallel torch ops yet (the agent's trial process,
    ``ngb measure``): the workers are forked, and OpenMP's pool does not survive a fork
    (``ngb.sweeps.api.notebook.measure`` moves to a fresh process where that is not so)."""

    sink: Emit = emit or (lambda event: None)
    result = TrialResult(
        key=spec.key, spec=spec.to_dict(), host=socket.gethostname(), started_at=time.time()
    )
    deadline = time.monotonic() + spec.measure.timeout_s
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = stack.enter_context(scratch_dir("trial"))
        Path(workdir).mkdir(parents=True, exist_ok=True)
        cache = Path(cache_dir) if cache_dir else None
        try:
            compiler = _refuse_early(spec)
            from ngb.core.base import device_state

            # governor, boost, GPU clocks: a number is comparable only under the same state
            result.extra["device_state"] = device_state.read()
            from ngb.core.trial import provenance

            # packages (hashed), kernel, container: what else may explain a change (issue 35)
            result.extra["provenance"] = dict(provenance.read())
            preload(spec, compiler.needs_model or spec.device == "cuda")
            # this host's re-runs: what time adds to the interval (ngb.core.statistics.reruns)
            allow = reruns.allowance(reruns.load(cache, result.host), spec.key)
            parts, stopped = _run_workers(
                spec, result, sink, Path(workdir), cache, deadline, allow.design_effect
            )
            merge(result, parts, spec, stopped, allow)
            now = reruns.log_spread([p.throughputs for p in parts if p.repetitions])
            # a disturbed trial is INVALID for that already; in the history it would widen every
            # later trial's interval (on the VM: one mha run at 933/s among 5,000-9,500/s ones)
            if now is not None and not result.disturbed:
                reruns.append(cache, result.host, spec.key, now)
            # after the timing, never beside it: one more process under the runtime's profiler
            if spec.measure.profile:
                from ngb.core.trial import profile_pass

                profile_pass.run_pass(spec, result, Path(workdir), cache, deadline, sink)
        except WorkerFailed as exc:
            result.status = "failed"
            result.error = one_line(exc)
            result.error_kind = exc.kind
            result.verdict = result.verdict_reason = None
        except Exception as exc:  # the whole point: a failure is a result, not a crash
            result.status = "failed"
            result.error = one_line(exc)
            result.error_kind = classify_error(exc)
            result.verdict = result.verdict_reason = None
        finally:
            result.finished_at = time.time()
            if result.peak_rss_mb is None:
                result.peak_rss_mb = peak_rss_mb()
            if not result.threads:
                result.threads = thread_counts(spec.measure.threads)
            if not result.versions:
                result.versions = library_versions()
    return result


def _refuse_early(spec: TrialSpec) -> Compiler[CompilerConfig]:
    """What can be refused without a worker: an unknown, unavailable or unfit compiler."""
    compiler = get_compiler(spec.compiler, spec.compiler_options)
    _check_fit(spec, compiler)
    _check_optimisation(spec)
    how_it_runs(spec, compiler)
    return compiler


def _check_fit(spec: TrialSpec, compiler: Compiler[CompilerConfig]) -> None:
    """The compiler is available here, targets the trial's device and runs its precision. Asked
    before any worker starts (``_refuse_early``) and again in each worker (``_measure``): a
    worker is another interpreter (``ngb.core.trial.worker_start``), which may not find a library
    the trial's process found."""
    ok, reason = compiler.available()
    if not ok:
        raise CompilerUnavailable(f"{spec.compiler} is unavailable here: {reason}")
    if spec.device not in compiler.devices:
        raise UnsupportedTrial(
            f"{spec.compiler} cannot target {spec.device!r} "
            f"(targets: {', '.join(compiler.devices)})"
        )
    compiler.check_precision(spec.measure.precision, spec.device)  # unsupported: one line


#: result fields worker 0 records for the whole trial (the compile, the check, the facts)
_RECORDED = (
    "params", "macs", "compile_s", "export_s", "tune_s", "first_call_s", "max_abs_err",
    "precision", "precision_flags", "versions", "gpu_mem_mb", "gpu_mem_source", "threads",
)  # fmt: skip


def _run_workers(
    spec: TrialSpec,
    result: TrialResult,
    emit: Emit,
    workdir: Path,
    cache_dir: Path | None,
    deadline: float,
    design_effect: float = 1.0,
) -> tuple[list[Part], str | None]:
    """Fork workers until ``stopping.next_worker`` says the interval is settled (or a cap)."""
    settings = spec.measure
    parts: list[Part] = []
    errors: list[str] = []
    spent = 0.0
    stopped: str | None = None
    worker = 0
    slow: budget.SlowPlan | None = None  # worker 0's calibration found slow calls (core.budget)
    while True:
        groups = [p.throughputs for p in parts]
        share = stopping.plan(slow.settings(settings) if slow else settings, worker, groups, spent)
        outcome: Outcome | None = None
        for attempt in range(settings.disturbed_retries + 1):
            if attempt and outcome is not None:
                why = f"worker {worker} disturbed ({outcome.part.disturbed}); measuring it again"
                emit(events.make_event(events.LOG, key=spec.key, level="warning", msg=why))
                time.sleep(settings.disturbed_wait_s)
            try:
                outcome = run_worker(
                    SHARE_JOB,
                    spec,
                    share,
                    emit,
                    workdir / f"worker{worker}",
                    cache_dir,
                    deadline=deadline,
                    slow=slow,
                )
            except WorkerFailed as exc:
                if worker == 0:  # the build or compile failed: the trial failed
                    copy_recorded(result, exc.result)
                    raise
                errors.append(f"worker {worker}: {exc}")
                outcome = None
                break
            outcome.part.retries = attempt
            if outcome.part.disturbed is None:
                break
        if outcome is not None:
            if worker == 0:
                copy_recorded(result, outcome.result)
                slow = budget.recorded(result.extra)
            parts.append(outcome.part)
            spent += outcome.part.measure_s + outcome.part.warmup_s
        groups = [p.throughputs for p in parts]
        in_force = slow.settings(settings) if slow else settings
        more, stopped = stopping.next_worker(in_force, groups, spent, design_effect, _next_s(parts))
        worker += 1
        if not more or time.monotonic() > deadline or len(errors) > 2:
            break
    if errors:
        result.extra["worker_errors"] = errors
    if slow is not None and isinstance(result.extra.get("budget"), dict):
        result.extra["budget"]["spent_s"] = round(spent, 3)  # beside what it planned
        if stopped == stopping.STOP_MAX:  # the verdict says which maximum: the plan's
            stopped = f"slow calls: the {slow.workers} x {slow.reps} planned"
    return parts, stopped or (stopping.STOP_TIME if time.monotonic() > deadline else None)


def _next_s(parts: list[Part]) -> float:
    """Seconds of ``max_measure_s`` a further worker would take for its warm-up and one value:
    the median of what the earlier ones took."""
    if not parts:
        return 0.0
    return statistics.median(p.warmup_s + p.measure_s / max(1, len(p.throughputs)) for p in parts)


def run_share(
    spec: TrialSpec,
    share: stopping.Plan,
    emit: Emit,
    workdir: Path,
    cache_dir: Path | None,
    result: TrialResult,
    slow: budget.SlowPlan | None = None,
) -> Part:
    """A worker process's job: build, compile and time ``share`` into ``result`` (raises on
    failure, leaving in ``result`` what it had recorded: a failed compile's time). ``slow``:
    the trial's plan for calls of seconds (``ngb.core.trial.budget``), from worker 0's
    calibration."""
    workdir.mkdir(parents=True, exist_ok=True)
    memory = _phase_memory(spec)
    try:
        part = _measure(spec, result, emit, workdir, cache_dir, share, memory, slow)
    finally:
        memory.close()
    part.memory = memory.to_dict()
    part.compile_s, part.first_call_s = result.compile_s, result.first_call_s
    part.peak_rss_mb = peak_rss_mb()
    part.pid = os.getpid()
    return part


def recorded_fields(result: TrialResult) -> dict[str, object]:
    """What a worker sends back of its result: ``_RECORDED`` and ``extra``."""
    result.threads = thread_counts(result.spec.get("measure", {}).get("threads"))
    data = result.to_dict()
    return {name: data.get(name) for name in (*_RECORDED, "extra")}


def copy_recorded(result: TrialResult, fields: Mapping[str, object]) -> None:
    """Worker 0's record becomes the trial's: its compile, its check, its facts."""
    for name in _RECORDED:
        if fields.get(name) is not None:
            setattr(result, name, fields[name])
    extra = fields.get("extra")
    if isinstance(extra, dict):
        result.extra.update(trial_extra.from_json(extra))


# what each forked worker runs (``ngb.core.trial.workers`` takes it from here, so it imports nothing
# of this module)
SHARE_JOB = ShareJob(run=run_share, classify=classify_error, recorded=recorded_fields)


def _measure(
    spec: TrialSpec,
    result: TrialResult,
    emit: Emit,
    workdir: Path,
    cache_dir: Path | None,
    share: stopping.Plan,
    memory: PhaseMemory,
    slow: budget.SlowPlan | None = None,
) -> Part:
    settings = spec.measure
    began = time.perf_counter()  # what a later worker spends before it times: the budget's
    checked = 0.0  # ... overhead, less worker 0's own check against eager
    # Worker 0 is the trial's own process: it verifies and its compile is the one recorded.
    verify = settings.verify and share.worker == 0
    # Before anything allocates: the model's weights and every call's buffers follow the setting.
    result.extra["allocator"] = allocator.apply(settings.allocator)

    last_phase: list[object] = [None]

    def ctx_emit(type_: str, **fields: object) -> None:
        if type_ == events.PHASE:
            # The harness announces "compile" and a compiler may too: report a phase once.
            if fields.get("phase") == last_phase[0]:
                return
            last_phase[0] = fields.get("phase")
        emit(events.make_event(type_, key=spec.key, **fields))

    compiler = get_compiler(spec.compiler, spec.compiler_options)
    result.extra["compiler_config"] = compiler.config.to_dict()
    _check_fit(spec, compiler)  # unavailable or unsupported: one line, no work
    from ngb.core.models.model_sources import source_of

    check_compiler_takes(source_of(spec), compiler, spec)  # e.g. an ONNX file under identity

    uses_torch = compiler.needs_model or spec.device == "cuda"
    if spec.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise CompilerUnavailable("device 'cuda' asked for, but torch sees no CUDA GPU")
    if uses_torch and settings.threads:
        import torch

        torch.set_num_threads(settings.threads)
    result.versions = {**library_versions(), **compiler.versions()}

    # None where the compiler takes no torch model (noop, a user's ONNX file)
    model: Any = None
    example: Any = None
    reference: Array | None = None
    _check_optimisation(spec)
    runs = how_it_runs(spec, compiler)  # refused before the build; recorded with the facts
    memory.start()  # the compile phase's memory counts from here: build, reference, compile
    if compiler.needs_model:
        ctx_emit(events.PHASE, phase="build")
        model, example = _build_model(spec, result, cache_dir, with_macs=share.worker == 0)
    if spec.optimisation != "none":
        ctx_emit(events.PHASE, phase="optimise")
        model, example = _apply_optimisation(model, example, spec, result)
    if compiler.needs_model and verify:
        # Eager output of the (optimised) model, taken before compile can touch the module, in
        # strict fp32 whatever the trial's precision: the error is measured against real fp32.
        from ngb.core.models.precision import strict_fp32

        checked = time.perf_counter()
        with strict_fp32():
            reference = _eager_output(model, example, spec.model)
        checked = time.perf_counter() - checked
    # the accuracy pass's first half, before compile can touch the module
    # (ngb.core.trial.accuracy_pass)
    accuracy = (
        _prepare_accuracy(spec, result, model, example, cache_dir) if share.worker == 0 else None
    )
    checked += accuracy.load_s + accuracy.eager_s if accuracy is not None else 0.0
    if spec.algorithm != "default":
        # After the reference: the verify pass checks the rewritten model against the model as
        # built, so a wrong im2col or sparse product shows as an error, not as a speed-up.
        ctx_emit(events.PHASE, phase="algorithm")
        model = _apply_algorithm(model, spec, runs, result)

    if spec.device == "cuda":
        import torch

        torch.cuda.reset_peak_memory_stats()

    ctx = CompileContext(
        workdir=workdir,
        device=spec.device,
        threads=settings.threads,
        emit=ctx_emit,
        cache_dir=cache_dir,
        precision=settings.precision,
        worker=share.worker,
        trial_dir=workdir.parent,  # the workers' dirs are <trial workdir>/worker<N>
    )
    ctx_emit(events.PHASE, phase="compile")
    start = time.perf_counter()
    try:
        compiled = compiler.compile(model, example, ctx)
    except Exception:
        # A compile that fails after hours of tuning should still say how long it ran.
        result.compile_s = time.perf_counter() - start
        result.export_s, result.tune_s = ctx.phases.get("export"), ctx.phases.get("tune")
        raise
    total = time.perf_counter() - start
    # The workers build their own copy; this one must not hold memory while they run.
    del model, example
    memory.mark("compile")
    try:
        export_s = ctx.phases.get("export")
        result.export_s = export_s
        result.compile_s = total - (export_s or 0.0)
        result.tune_s = ctx.phases.get("tune")
        setup_s = time.perf_counter() - began - checked - (result.tune_s or 0.0)
        part = _time_compiled(
            spec, result, compiled, reference, share, ctx_emit, memory, slow, setup_s
        )
        if accuracy is not None:  # after the timed loops, never inside them
            ctx_emit(events.PHASE, phase="accuracy")
            _run_accuracy(accuracy, compiled, result, settings.confidence)
        # CompilerFacts are TrialExtra's own keys (its base): no key here is undeclared
        result.extra.update(cast(trial_extra.TrialExtra, compiled.extra))
        result.precision, result.precision_flags = compiled.precision, compiled.precision_flags
    finally:
        compiled.close()
        del compiled
    if spec.device == "cuda":
        import torch

        # torch's allocator only: TensorRT, ONNX Runtime's arena, TVM and the CUDA context are
        # not in it. Kept beside NVML's figure (ngb.core.trial.memory), used only without NVML.
        allocated = torch.cuda.max_memory_allocated() / 2**20
        result.extra["torch_max_allocated_mb"] = round(allocated, 1)
        result.gpu_mem_mb = memory.peak_gpu_mb if memory.gpu else allocated
        result.gpu_mem_source = memory.gpu_source if memory.gpu else "torch-allocator"
    return part


def _prepare_accuracy(
    spec: TrialSpec,
    result: TrialResult,
    model: Model | None,
    example: Example | None,
    cache_dir: Path | None = None,
) -> Prepared | None:
    """The labelled set and eager's scores on it, where the trial asks for accuracy; a pass
    that cannot run leaves one line in ``extra["accuracy_error"]`` and the trial goes on."""
    wanted = spec.measure.accuracy
    if wanted is None:
        return None
    try:
        if model is None or example is None:
            raise UnsupportedTrial(f"{spec.compiler} runs no model, so it has no accuracy")
        from ngb.core.trial import accuracy_pass

        return accuracy_pass.prepare(wanted, model, example, spec.model, cache_dir)
    except Exception as exc:  # the timed trial stands without its accuracy
        result.extra["accuracy_error"] = one_line(exc)
        return None


def _run_accuracy(
    prepared: Prepared, compiled: Compiled, result: TrialResult, confidence: float
) -> None:
    from ngb.core.trial import accuracy_pass

    try:
        result.extra["accuracy"] = accuracy_pass.run_compiled(prepared, compiled, confidence)
    except Exception as exc:  # the timed trial stands without its accuracy
        result.extra["accuracy_error"] = one_line(exc)


def _phase_memory(spec: TrialSpec) -> PhaseMemory:
    """Memory per phase of this worker; on a GPU through NVML where it loads."""
    if spec.device != "cuda":
        return PhaseMemory()
    # the GPU monitor's NVML loader and device index: one way to find the GPU torch uses
    from ngb.core.trial.interference import _device_index, _load_nvml

    return PhaseMemory(_load_nvml(), _device_index())


def _time_compiled(
    spec: TrialSpec,
    result: TrialResult,
    compiled: Compiled,
    reference: np.ndarray | None,
    share: stopping.Plan,
    ctx_emit: Callable[..., None],
    memory: PhaseMemory,
    slow: budget.SlowPlan | None = None,
    setup_s: float = 0.0,
) -> Part:
    sync = _synchronizer(spec.device)

    ctx_emit(events.PHASE, phase="first_call")
    start = time.perf_counter()
    out = compiled.run()
    sync()
    result.first_call_s = time.perf_counter() - start
    if reference is not None:
        result.max_abs_err = _max_abs_err(reference, out, result)
    del out

    def call() -> float:
        begin = time.perf_counter()
        compiled.run()
        sync()
        return time.perf_counter() - begin

    # a slow first call asks for a calibration call: calls of seconds get a plan that holds the
    # budget, said before anything is warmed up or timed (ngb.core.trial.budget)
    overhead_s = setup_s + result.first_call_s
    timed = budget.timed_share(spec, share, slow, result.first_call_s, overhead_s, call)
    if timed.calibration_s is not None:
        result.extra["calibration_call_s"] = round(timed.calibration_s, 6)
    if timed.slow is not None and share.worker == 0:
        result.extra["budget"] = timed.slow.to_dict()
        ctx_emit(events.LOG, level="info", msg=timed.slow.line, worker=0)
    part = time_share(timed.spec, compiled, timed.share, sync, ctx_emit, memory)
    part.warmup_s += timed.calibration_s or 0.0  # a warm-up call too: in the budget's seconds
    return part


def _build_model(
    spec: TrialSpec, result: TrialResult, cache_dir: Path | None, with_macs: bool = True
) -> tuple[Model, Example]:
    from ngb.core.models import models

    # cache_dir: where a device keeps users' model files
    # (ngb.core.models.model_sources.artifact_dir)
    model, example = models.create_model(spec, cache_dir)
    result.params = models.count_params(model)
    if not with_macs:  # worker 0's count is the trial's; torch's counter imports torch._dynamo
        return model, example
    try:  # MACs (batch 1) are a nice-to-have: a counter that chokes must not fail the trial
        macs = models.model_info_for(spec, cache_dir).macs
        if macs is not None:
            result.macs = int(macs)
    except Exception as exc:
        result.extra["macs_error"] = one_line(exc)
    return model, example


def _apply_optimisation(
    model: Model | None, example: Example | None, spec: TrialSpec, result: TrialResult
) -> tuple[Model | None, Example | None]:
    """Apply ``spec.optimisation`` (ngb.core.trial.optimise) and record its facts in the result.

    Known-bad optimisation/compiler pairs are refused first, so they fail as ``unsupported``
    with a clear reason instead of deep inside a compiler's importer.
    """
    optimisation = spec.optimisation
    if optimisation == "none":
        return model, example
    optimise = _optimise_module()
    if optimise is None:
        raise UnsupportedOptimisation(f"unsupported optimisation {optimisation!r} in this build")
    model, example, facts = optimise.apply_with_facts(model, example, optimisation)
    result.extra["optimisation"] = facts
    return model, example


def how_it_runs(spec: TrialSpec, compiler: Compiler[CompilerConfig]) -> str:
    """What ``compiler`` runs for ``spec.algorithm`` (its ``algorithms`` entry), or
    ``UnsupportedTrial`` with its stated reason, before the (slow) model build."""
    kind = algorithm_names.parse(spec.algorithm).kind
    source = spec.source or {}
    if kind != "default" and source.get("kind") == "onnx":
        raise UnsupportedTrial(
            f"algorithm {spec.algorithm} rewrites a torch model's layers; an ONNX file's graph "
            "runs as it is given"
        )
    runs = compiler.algorithms.get(kind)
    if runs is None:
        reason = compiler.algorithm_refusals.get(kind, "it does not say it can")
        raise UnsupportedTrial(
            f"algorithm {spec.algorithm} is unsupported with {spec.compiler}: {reason}"
        )
    return runs


def _apply_algorithm(
    model: Model | None, spec: TrialSpec, runs: str, result: TrialResult
) -> Model | None:
    """Rewrite the model's layers for ``spec.algorithm`` (ngb.core.models.algorithms); the facts,
    with what the compiler runs for it (``runs``: ``how_it_runs``), go in
    ``result.extra["algorithm"]``."""
    import torch

    if (
        not isinstance(model, torch.nn.Module)
        or algorithm_names.parse(spec.algorithm).kind == "direct"
    ):
        facts: dict[str, object] = {"name": spec.algorithm, "layers_changed": 0}
    else:
        model, facts = algorithms.apply(model, spec.algorithm)
    result.extra["algorithm"] = {**facts, "runs": runs}
    return model


def _check_optimisation(spec: TrialSpec) -> None:
    """Refuse a known-bad optimisation/compiler pair before the (slow) model build."""
    optimise = _optimise_module() if spec.optimisation != "none" else None
    if optimise is not None:
        optimise.check_supported(spec.optimisation, spec.compiler, spec.device)


def _optimise_module() -> ModuleType | None:
    """``ngb.core.trial.optimise`` when this build has it, else None (a seam for tests, too)."""
    if importlib.util.find_spec("ngb.core.trial.optimise") is None:
        return None
    return importlib.import_module("ngb.core.trial.optimise")


def _eager_output(model: Model, example: Example, name: str = "model") -> Array:
    """Eager torch output (several inputs passed positionally); ONNX Runtime's for an ONNX file."""
    from ngb.core.models.models import reference_output

    return reference_output(model, example, name)


def _max_abs_err(reference: Array, out: object, result: TrialResult) -> float | None:
    if out is None:
        return None
    got = np.asarray(to_numpy(out), dtype=np.float64)
    if got.shape != reference.shape:
        result.extra["verify_error"] = f"output shape {got.shape} != eager {reference.shape}"
        return None
    ref = reference.astype(np.float64)
    result.extra["fidelity"] = accuracy_stats.fidelity(ref, got)
    return float(np.max(np.abs(got - ref))) if got.size else 0.0


def _synchronizer(device: str) -> Callable[[], None]:
    if device == "cuda":
        import torch

        return torch.cuda.synchronize
    return lambda: None


def thread_counts(requested: int | None) -> dict[str, object]:
    """Thread settings in force, as recorded with every result."""
    import psutil

    counts: dict[str, object] = {
        "requested": requested,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "cpu_count": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
    }
    with contextlib.suppress(AttributeError, OSError):
        counts["affinity"] = len(os.sched_getaffinity(0))
    torch = sys.modules.get("torch")
    if torch is not None:
        counts["torch_intra_op"] = torch.get_num_threads()
        counts["torch_inter_op"] = torch.get_num_interop_threads()
    return counts


def peak_rss_mb() -> float:
    """Peak resident set size of this process since it started (``ngb.core.trial.memory``)."""
    return ru_maxrss_mb()
