"""Worker processes: every timed share of a trial runs in a process of its own.

Why processes are the unit (``ngb.core.statistics.stopping.process_interval``): consecutive
processes measuring the same model differ far more than one process's repetitions do (placement,
allocation, thread start-up, address-space layout), so the interval is built over process means, as
pyperf builds its numbers over 20 processes x 3 values. For that each process must be an independent
draw of the level a process runs at, so by default each worker is its own newly started interpreter
(``ngb.core.trial.worker_start``: workers forked from one trial process share its level, and their
interval did not hold re-runs -- issue 30). The trial's process starts the first ``workers``
interpreters, one a core at a time, and hands worker 0 the first as soon as it has imported torch
(and timm); worker 0 builds its model while the others import, and then waits at the gate
(``BESIDE_IMPORTS``) until they all have, so no import runs while a worker compiles or measures
(issue 44). The trial's process never builds, runs or holds a model itself -- and on a GPU never
creates a CUDA context -- so nothing of ngb's sits on the device or in the measured process while a
worker measures: the parent only reads the worker's events and samples CPU/GPU from outside
(``ngb.core.trial.telemetry``). ``NGB_WORKER_START=auto`` (the test suite) forks the workers from
the trial's process instead, after importing the heavy libraries once (``preload``).

Worker 0 verifies the output against eager fp32 and its compile is the one recorded
(``compile_s``); later workers recompile (compilers' own caches keep that cheap: TVM tuning
databases, Inductor's FX graph cache) and their compile times are kept under
``extra["workers"]``. Workers run one after another, never side by side.

Protocol: a ``multiprocessing`` pipe. The worker sends ``ngb.core.records.events`` dicts (forwarded,
tagged with ``worker``) and last a ``WorkerReport``: its ``Part``, the result fields it recorded,
or its ``error`` and ``error_kind``. A worker that dies without a result
(a segfault, ``os._exit``, an OOM kill) is a failed worker with its exit status. Workers inherit
the trial's process group, so the agent's timeout or cancel kills them with the trial.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import TYPE_CHECKING

from ngb.core.base.errors import NgbError, one_line
from ngb.core.records import events
from ngb.core.records.types import TrialResult, TrialSpec
from ngb.core.statistics.stopping import Plan, worker_count
from ngb.core.statistics.student_t import t_quantile
from ngb.core.trial.budget import SlowPlan
from ngb.core.trial.telemetry import LiveMeter, WorkerWatch
from ngb.core.trial.timing import Part
from ngb.core.trial.versions import library_versions
from ngb.core.trial.worker_start import (
    FRESH,
    Interpreter,
    Interpreters,
    _die_with_parent,
    import_parallel,
    start_method,
    worker_context,
)

if TYPE_CHECKING:
    from ngb.core.records.trial_extra import WorkerStart

# Event types a worker's output may pass on to the trial's listener.
_FORWARD = {events.PHASE, events.PROGRESS, events.TUNING, events.LOG}
# How often the parent looks at the clock while waiting for a worker's next event (and, while
# interpreters import beside the worker's build, whether the next one may start).
_POLL_S = 0.25
_IMPORT_POLL_S = 0.05
# Progress events are passed on at most this often while a worker measures: each one wakes the
# agent, the event log's reader and the console, and on a localhost sweep those share the cores
# with the timed loop (the worker's last repetition is always passed on).
PROGRESS_PERIOD_S = 1.0
# Libraries imported once before forking (``_torch_imports``) are the expensive imports that are
# safe to fork after (no thread pool, no device context until first use). Compiler runtimes
# (OpenVINO, TVM, ONNX Runtime) may start threads at import, so each worker imports those itself.
# The phases a fresh worker may run while other interpreters of its trial still import (issue 44):
# the model's build (with worker 0's MAC count and eager reference) and its rewrites. At the first
# other phase -- its compile, whose time is a recorded figure, then the timed loops -- it stops
# until the trial's process says every interpreter has imported (``_GO``).
BESIDE_IMPORTS = frozenset({"build", "optimise", "algorithm"})
_GO = "go"
# Compilers whose compile and run import no torch._dynamo (checked with a block on the CPU): their
# workers' interpreters leave it out (~1.3 s of CPU each on the VM). Only worker 0 counts MACs,
# whose torch counter imports it; a timm model imports it anyway (timm -> torchvision.ops).
_NO_DYNAMO = frozenset({"identity", "torchscript", "onnxruntime", "noop"})


#: an event as it crosses the pipe (``ngb.core.records.events``: JSON-like fields)
Event = dict[str, object]
Emit = Callable[[Event], None]


class WorkerFailed(NgbError):
    """A worker process crashed or reported an error."""

    def __init__(
        self, message: str, kind: str = "error", result: dict[str, object] | None = None
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.result = result or {}  # what the worker had recorded (a failed compile's time)


@dataclass(frozen=True)
class ShareJob:
    """What a forked worker runs, handed in by the trial (``ngb.core.trial.measure``) so this module
    needs nothing from it: time the share into the result (under the trial's slow-call plan,
    ``ngb.core.trial.budget``, once worker 0 has made one), name a failure's kind, and pick the
    result fields worth sending back. Forked, not pickled: plain functions are fine."""

    run: Callable[[TrialSpec, Plan, Emit, Path, Path | None, TrialResult, SlowPlan | None], Part]
    classify: Callable[[BaseException], str]
    recorded: Callable[[TrialResult], dict[str, object]]


@dataclass
class WorkerReport:
    """A worker's last message: its part, or why it failed; and the result fields it recorded
    (a failed compile's time, worker 0's check and facts)."""

    part: Part | None
    recorded: dict[str, object] = field(default_factory=dict)
    error: str | None = None
    error_kind: str | None = None


@dataclass
class Outcome:
    """What one worker sent back."""

    part: Part
    result: dict[str, object] = field(default_factory=dict)


def preload(spec: TrialSpec, needs_torch: bool) -> None:
    """Import what every worker of ``spec`` needs, once, before the first fork (a fresh
    interpreter imports for itself: ``_fresh_preload``)."""
    global _need_torch
    _need_torch = needs_torch  # a fresh interpreter or a fork server imports accordingly
    if spec.measure.threads:
        # OpenMP reads this once, when the first library that uses it loads.
        os.environ.setdefault("OMP_NUM_THREADS", str(spec.measure.threads))
    method = start_method()
    if method == FRESH:
        return  # nothing forks from here (``_fresh_preload``): torch would only cost its import
    # the interval's t quantile (cached): once, here, not in every worker between its repetitions
    t_quantile(0.975, 2)
    library_versions()  # read once (cached): every forked worker records them
    # psutil: each worker's CPU facts read it (``interference``); imported after the fork it
    # cost every forked worker ~10 ms of CPU (the parent's meter imported it only then)
    with contextlib.suppress(ImportError):
        importlib.import_module("psutil")
    if not needs_torch or method == "forkserver":
        # a fork server's workers fork from it, and it imported for them when it started
        # (``_server_preload``): torch here would be ~2 s of CPU that no worker inherits
        return
    # torch._dynamo always: worker 0's MAC count (torch's FlopCounterMode) imports it, once here
    # rather than in every trial's worker 0 of a process that runs many (an in-process agent)
    for name in dict.fromkeys([*_torch_imports(spec), "torch._dynamo"]):
        with contextlib.suppress(Exception):
            importlib.import_module(name)


def _torch_imports(spec: TrialSpec) -> list[str]:
    """The expensive imports a worker of ``spec`` makes: torch; timm only for a timm model (~2 s
    more of CPU on the VM: it imports torchvision and with it torch._dynamo); torch._dynamo (and
    sympy, ~1.3 s) only where the compile, an optimisation, an algorithm or a user's model may
    import it. A forked worker inherits them from ``preload``; a fresh interpreter imports them
    before it says ready (``_fresh_preload``)."""
    from ngb.core.models.blocks import BLOCK_KINDS

    names = ["torch"]
    if spec.source is None and spec.model not in BLOCK_KINDS:
        names.append("timm")
    plain = (
        spec.compiler in _NO_DYNAMO
        and spec.optimisation == "none"
        and spec.algorithm == "default"
        and spec.source is None
    )
    if not plain:
        names.append("torch._dynamo")
    return names


def _fresh_preload(spec: TrialSpec) -> list[str]:
    """What a fresh worker interpreter imports before it says ready: the worker's code path and,
    where the workers need torch, ``_torch_imports`` (no scipy: the t quantile is plain Python,
    ``ngb.core.statistics.student_t``). Worker 0's MAC count imports torch._dynamo in its build,
    beside the other interpreters' imports (issue 44)."""
    names = ["ngb.core.trial.workers", "ngb.core.trial.measure"]
    if _need_torch:
        names += ["ngb.core.models.models", *_torch_imports(spec)]
    return names


def _server_preload(spec: TrialSpec) -> list[str]:
    """What this process's fork server imports when the first trial that forks from it starts
    it (it lives as long as the process): the worker's code path and psutil (``preload``),
    torch and torch._dynamo (a worker that builds a model needs torch, ~2 s of CPU each
    otherwise, and worker 0's MAC count imports torch._dynamo, ~1.1 s), and timm where this
    trial's workers build a timm model (``_torch_imports``). A later trial's worker imports the
    rest itself. timm was always preloaded before: ~0.3 s of CPU more in each of the test
    suite's nine fork servers, whose workers never built a timm model (2026-11-30)."""
    extra = _torch_imports(spec) if _need_torch else []
    base = ["ngb.core.trial.measure", "psutil", "torch", "torch._dynamo"]
    return list(dict.fromkeys([*base, *extra]))


# whether the trial's workers need torch (``preload`` is told, before the first worker)
_need_torch = True


# The fresh interpreters of the trial now running: (trial, its pool). A trial is told apart by
# its key and its deadline (``run_trial`` computes that once per trial).
_trial_pool: tuple[tuple[str, float], Interpreters] | None = None


def _interpreter(spec: TrialSpec, share: Plan, deadline: float, emit: Emit) -> Interpreter:
    """A ready fresh interpreter for ``share``; the trial's first worker starts the pool.

    While interpreters import (seconds to minutes on a loaded board) nothing else writes an
    event, and the agent's ``state`` snapshots ride on events (``ngb.core.trial.live_state``): a
    console re-attached then showed nothing for minutes (issue 46). So this process's CPU
    samples go out every second meanwhile -- the machine's meters, and a snapshot with each.
    No fork happens here (fresh interpreters are started with ``exec``): the sampler thread is
    safe."""
    global _trial_pool
    trial = (spec.key, deadline)
    waiting = LiveMeter(os.getpid(), spec.key, share.worker, emit)
    waiting.start()
    try:
        if _trial_pool is None or _trial_pool[0] != trial:
            close_interpreters()
            pool = Interpreters(
                _fresh_preload(spec), batch=min(2, os.cpu_count() or 1), parallel=import_parallel()
            )
            _trial_pool = (trial, pool)
            # the processes the trial will need at least, all imported before anything is timed
            settings = spec.measure
            first = worker_count(settings) if settings.repetitions is not None else settings.workers
            pool.prestart(max(1, first - share.worker))
        return _trial_pool[1].take()
    finally:
        waiting.stop()


def _open_gate(proc: Interpreter) -> None:
    """Worker ``proc`` stopped before its compile: let it go once no interpreter imports."""
    if _trial_pool is not None:
        try:
            _trial_pool[1].settle()
        except NgbError as exc:
            raise WorkerFailed(one_line(exc), "crash") from exc
    with contextlib.suppress(OSError):  # a worker that died meanwhile: its EOF says how
        proc.conn.send(_GO)


def _pump_interpreters() -> bool:
    """Start the trial's next interpreters as slots free; whether any is still importing."""
    if _trial_pool is None or not _trial_pool[1].importing:
        return False
    try:
        _trial_pool[1].pump()
    except NgbError as exc:
        raise WorkerFailed(one_line(exc), "crash") from exc
    return _trial_pool[1].importing


def close_interpreters() -> None:
    """Take down the unused interpreters of the last trial (atexit does it anyway)."""
    global _trial_pool
    if _trial_pool is not None:
        _trial_pool[1].close()
        _trial_pool = None


atexit.register(close_interpreters)


def interpreter_facts() -> WorkerStart:
    """How this trial's workers were started, for ``result.extra["worker_start"]`` (fresh: the
    pool's own dict, which goes on counting the interpreters started after worker 0)."""
    method = start_method()
    if method == FRESH and _trial_pool is not None:
        return _trial_pool[1].facts
    return {"method": method}


def run_worker(
    job: ShareJob,
    spec: TrialSpec,
    share: Plan,
    emit: Emit,
    workdir: Path,
    cache_dir: Path | None,
    *,
    deadline: float,
    slow: SlowPlan | None = None,
) -> Outcome:
    """Start a worker for ``share`` (``ngb.core.trial.worker_start``), forward its events, watch it
    from outside; its outcome. ``slow``: the trial's plan for calls of seconds, which a later
    worker follows (worker 0 makes it: ``ngb.core.trial.budget``)."""
    args = (spec, share, str(workdir), cache_dir, slow)
    fresh = start_method() == FRESH
    proc: Interpreter | BaseProcess
    if fresh:
        try:
            proc = _interpreter(spec, share, deadline, emit)
        except NgbError as exc:
            close_interpreters()
            raise WorkerFailed(one_line(exc), "crash") from exc
        receiver = sender = proc.conn
    else:
        # fork, or a fork server when other threads are alive
        context = worker_context(_server_preload(spec))
        receiver, sender = context.Pipe(duplex=False)
        proc = context.Process(
            target=_worker_main, args=(job, sender, *args), name=f"ngb-worker-{share.worker}"
        )
    live: LiveMeter | None = None
    watch: WorkerWatch | None = None
    message: WorkerReport | None = None
    last_progress = 0.0
    gated = fresh  # a fresh worker stops before its compile until the imports are done
    # From the fork on, any exit takes the worker along: a cancel (the agent's SIGTERM raises in
    # this thread) that left it alive would leave it blocked on a full pipe nobody reads, and
    # multiprocessing joins live children at interpreter exit -- the agent would never end.
    try:
        if isinstance(proc, Interpreter):
            proc.run(_worker_main, (job, *args, True))
        else:
            proc.start()
            sender.close()
        assert proc.pid is not None
        live = _display_meter(proc.pid, spec.key, share.worker, emit)  # until the timed loops
        if live is not None:
            live.start()
        while message is None:
            if time.monotonic() > deadline:  # the trial's own clock: on a loaded machine its
                # verdict can reach the agent before the agent's kill does, so it says the same
                raise WorkerFailed(
                    f"timed out: the trial exceeded timeout_s={spec.measure.timeout_s:g}s with "
                    f"worker {share.worker} still running",
                    "timeout",
                )
            importing = gated and _pump_interpreters()  # the next start as soon as a slot frees
            if not receiver.poll(_IMPORT_POLL_S if importing else _POLL_S):
                continue
            try:
                event = receiver.recv()
            except EOFError:
                break
            if isinstance(event, WorkerReport):
                message = event
                continue
            kind = event.get("type")
            if gated and kind == events.PHASE and event.get("phase") not in BESIDE_IMPORTS:
                gated = False
                if isinstance(proc, Interpreter):
                    _open_gate(proc)
            if kind in _FORWARD:
                event.setdefault("worker", share.worker)
                if kind == events.PROGRESS:
                    rep = event.get("rep")
                    last = isinstance(rep, int) and rep - share.rep_offset >= share.reps
                    now = time.monotonic()
                    if not last and now - last_progress < PROGRESS_PERIOD_S:
                        continue
                    last_progress = now
                emit(event)
                if kind == events.PHASE and event.get("phase") == "measure" and watch is None:
                    if live is not None:
                        live.stop()
                    watch = _measure_watch(proc.pid, spec, share.worker, emit)
                    if watch is not None:
                        watch.start()
                elif (
                    kind == events.PHASE and event.get("phase") == "accuracy" and watch is not None
                ):
                    watch.stop()  # the accuracy pass follows the timed loops, outside their window
        _stop_meters(live, watch)
    except BaseException:  # cancelled, timed out: take the worker along
        _stop_meters(live, watch)
        if proc.pid is not None:  # started
            proc.kill()
            proc.join()
        if fresh:
            close_interpreters()  # the trial is over: its idle interpreters too
        raise
    finally:
        receiver.close()
        sender.close()  # closed already unless the fork failed
    proc.join(timeout=min(60.0, max(1.0, deadline - time.monotonic())))  # it has sent all
    if proc.is_alive():
        proc.kill()
        proc.join()
    try:
        outcome = _outcome(message, proc.exitcode, share)
    except WorkerFailed:
        if fresh and share.worker == 0:  # the trial failed with its first worker
            close_interpreters()
        raise
    if watch is not None:
        watch.fill(outcome.part)
    if share.worker == 0:  # worker 0's record is the trial's: say how its workers started
        extra = outcome.result.get("extra")
        outcome.result["extra"] = {
            **(extra if isinstance(extra, dict) else {}),
            "worker_start": interpreter_facts(),
        }
    return outcome


def _outcome(message: WorkerReport | None, exitcode: int | None, share: Plan) -> Outcome:
    """The worker's part, or why it has none."""
    if message is None:  # died: a segfault, an abort, os._exit, the OOM killer
        code = exitcode or 0
        how = (
            f"killed by signal {_signal_name(-code)}" if code < 0 else f"exited with status {code}"
        )
        raise WorkerFailed(f"worker process {how} without a result", "crash")
    part = message.part
    if message.error or part is None:
        raise WorkerFailed(
            message.error or "worker sent no part", message.error_kind or "error", message.recorded
        )
    if part.calls == 0 and not part.repetitions:
        raise WorkerFailed(f"worker {share.worker} timed no repetition")
    return Outcome(part, dict(message.recorded))


def _display_meter(pid: int, key: str, worker: int, emit: Emit) -> LiveMeter | None:
    """The worker's display-only CPU meter, or None where the worker has already ended and been
    reaped (a build that raised at once: its report, EOF or exit status says why, not psutil's
    "process PID not found", which a fresh-clone CI run once gave as the trial's error)."""
    import psutil

    try:
        return LiveMeter(pid, key, worker, emit)
    except psutil.NoSuchProcess:
        return None


def _measure_watch(pid: int, spec: TrialSpec, worker: int, emit: Emit) -> WorkerWatch | None:
    """The samplers on the worker's timed loops, or None where the worker has already ended and
    been reaped: loops that timed nothing end at once (``--min-iters 0``), and a worker of the
    fork server is its child, not ours, so no zombie keeps its pid. Its report or exit status
    then says what happened; psutil's "process PID not found" was once all a run said
    (``test_bad_inputs.py[ed-measure-zero-calls-json]`` in ``make test``, 2026-11-30)."""
    import psutil

    try:
        return WorkerWatch(pid, spec.measure, spec.device, spec.key, worker, emit)
    except psutil.NoSuchProcess:
        return None


def _stop_meters(live: LiveMeter | None, watch: WorkerWatch | None) -> None:
    for meter in (live, watch):
        if meter is not None:
            meter.stop()


def _signal_name(num: int) -> str:
    try:
        return f"{signal.Signals(num).name} ({num})"
    except ValueError:
        return str(num)


def _worker_main(
    job: ShareJob, conn: Connection, spec: TrialSpec, share: Plan, workdir: str,
    cache_dir: Path | None, slow: SlowPlan | None = None, gated: bool = False,
) -> None:  # fmt: skip
    """The worker: time one share, send everything back, exit. ``gated`` (a fresh interpreter,
    whose connection goes both ways): at its first phase outside ``BESIDE_IMPORTS`` it waits for
    the trial's process to say that no interpreter imports any more."""
    _die_with_parent()
    # Compiler chatter on fd 1 must not land in the parent's stdout (ngb measure --json prints
    # one JSON object there): send it to stderr.
    with contextlib.suppress(OSError):
        sys.stdout.flush()
        os.dup2(2, 1)

    waiting = [gated]

    def send(message: Event | WorkerReport) -> None:
        with contextlib.suppress(OSError, ValueError):
            conn.send(message)  # pickled: NaN and numpy arrays travel as they are
        if (
            waiting[0]
            and isinstance(message, dict)
            and message.get("type") == events.PHASE
            and message.get("phase") not in BESIDE_IMPORTS
        ):
            waiting[0] = False
            _wait_for_go(conn)

    result = TrialResult(key=spec.key, spec=spec.to_dict())
    try:
        part = job.run(spec, share, send, Path(workdir), cache_dir, result, slow)
        report = WorkerReport(part, job.recorded(result))
    except Exception as exc:  # run_share's failures: one line and a kind, like a trial's
        report = WorkerReport(None, job.recorded(result), one_line(exc), job.classify(exc))
    send(report)
    conn.close()


def _wait_for_go(conn: Connection) -> None:
    """The gate, on the worker's side: block until the trial's process says go (a trial that
    ended meanwhile closes the pipe: nobody will read this worker's result)."""
    try:
        message = conn.recv()
    except (EOFError, OSError):
        os._exit(1)
    if message != _GO:
        os._exit(1)
