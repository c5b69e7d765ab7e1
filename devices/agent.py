"""The device-side agent: ``python -m ngb.devices.agent {run,probe}`` (or ``python agent.pyz ...``).

``run`` reads trial specs (JSON lines), skips those already in the checkpoint, and runs the rest one
at a time. Each finished trial is appended to the checkpoint as one JSON line, flushed and fsynced
before the next trial starts, so ``kill -9`` at any moment loses at most the trial in flight. Events
(``ngb.core.records.events``) go to stdout as JSON lines, flushed per line, for the workstation to
tail.

By default every trial runs in a child process in its own session, forked from the agent after it
imported the trial harness once (``ngb.core.trial.forked_trial``; ``--trial-start exec``, or another
live thread, starts ``agent trial`` with the spec on stdin in a new interpreter instead): a compiler
that segfaults, aborts, is OOM-killed or hangs past ``timeout_s`` becomes a failed
trial (``crash``/``timeout``) and the run goes on. SIGTERM (or SIGINT) cancels: the in-flight
child's process group is killed, the cancelled trial is *not* recorded (a resume runs it again),
and the last event is ``run_done`` with ``cancelled: true``.

Exit status: 0 when every trial was attempted (failed trials included), 143 when cancelled, 2 for
bad input, 3 when another agent already holds the checkpoint (an exclusive ``flock`` on
``CHECKPOINT.lock``, so a re-attaching workstation can never start a second agent on the same run).

This module is shipped to devices: it may import only the standard library, numpy, psutil and
``ngb.core`` (a test checks ``sys.modules``).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
import zipimport
from collections.abc import Callable, Iterable
from pathlib import Path
from types import FrameType
from typing import IO, Any

from ngb.core.base.artifact_hashes import verify_shipped
from ngb.core.base.errors import NgbError
from ngb.core.records import events

# the agent's two outputs live in ngb.core (shipped with it); re-exported here, where the
# workstation's callers and the tests have always imported them
from ngb.core.records.checkpoint import append_checkpoint as append_checkpoint
from ngb.core.records.checkpoint import lock_checkpoint as lock_checkpoint
from ngb.core.records.checkpoint import read_checkpoint as read_checkpoint
from ngb.core.records.types import TrialResult, TrialSpec
from ngb.core.statistics.eta_evidence import save_evidence
from ngb.core.trial.event_stream import EventWriter as EventWriter
from ngb.core.trial.event_stream import claim_stdout as claim_stdout
from ngb.core.trial.forked_trial import ForkedTrial, can_fork
from ngb.core.trial.live_state import book_result, eta_book, eta_item
from ngb.core.trial.versions import library_versions

TRIAL_RESULT = "trial_result"  # child -> parent only: the final line of `agent trial`
EXIT_OK, EXIT_BAD_INPUT, EXIT_BUSY, EXIT_CANCELLED = 0, 2, 3, 143
_STDERR_TAIL_LINES = 20
_POLL_S = 0.2
EXIT_GRACE_S = 10.0  # a child that sent its result but hangs on exit is killed after this


class Cancelled(BaseException):
    """Raised in the main thread by SIGTERM during an in-process trial (not an ``Exception``, so
    ``run_trial``'s failure handling does not swallow it)."""


# --------------------------------------------------------------------------- trial runners


def _self_command() -> list[str]:
    """How to start this agent again: the zipapp when running from one, else ``-m``."""
    loader = globals().get("__loader__")
    if isinstance(loader, zipimport.zipimporter):
        return [sys.executable, loader.archive]
    return [sys.executable, "-m", "ngb.devices.agent"]


def run_inprocess(
    spec: TrialSpec, out: EventWriter, workdir: Path | None, cache_dir: Path | None
) -> TrialResult:
    if spec.serve is not None:  # served under load, not timed (a sweep's [serve], issue 43)
        from ngb.core.serving.serve_trial import run_serving

        return run_serving(spec, emit=out.emit, cache_dir=cache_dir)
    from ngb.core.trial.measure import run_trial

    return run_trial(spec, emit=out.emit, workdir=workdir, cache_dir=cache_dir)


def trial_timeout_s(spec: TrialSpec) -> float:
    """How long a trial may run before it is killed: ``measure.timeout_s``, and for a serving
    trial the serving's planned seconds on top (``ngb.core.serving.serve_trial.timeout_s``)."""
    if spec.serve is None:
        return spec.measure.timeout_s
    from ngb.core.serving.serve_trial import timeout_s

    return timeout_s(spec)


def run_subprocess(
    spec: TrialSpec,
    out: EventWriter,
    workdir: Path | None,
    cache_dir: Path | None,
    cancel: threading.Event,
    start: str = "exec",
) -> TrialResult | None:
    """Run one trial in a child process; ``None`` when cancelled (the trial is not recorded).

    ``start``: ``fork`` forks the child from this agent (``ngb.core.trial.forked_trial``) when
    that is safe here and now, else (and for ``exec``) starts ``agent trial`` in a new
    interpreter."""
    started = time.time()
    proc = _start_trial(spec, workdir, cache_dir, start)
    assert proc.stdout and proc.stderr

    lines: queue.Queue[bytes | None] = queue.Queue()
    stderr_tail: collections.deque[str] = collections.deque(maxlen=_STDERR_TAIL_LINES)
    readers = [
        threading.Thread(target=_pump_lines, args=(proc.stdout, lines.put), daemon=True),
        threading.Thread(target=_pump_stderr, args=(proc.stderr, stderr_tail), daemon=True),
    ]
    for t in readers:
        t.start()

    limit_s = trial_timeout_s(spec)
    deadline = time.monotonic() + limit_s
    payload: dict[str, Any] | None = None
    timed_out = ended = False
    while True:
        if cancel.is_set():
            _kill_group(proc)
            _finish(proc, readers)
            return None
        if time.monotonic() > deadline:
            timed_out = payload is None  # past the exit grace with a result: keep the result
            _kill_group(proc)
            break
        try:
            raw = lines.get(timeout=_POLL_S)
        except queue.Empty:
            if proc.poll() is not None and not ended:
                # The trial process is gone (killed from outside: the OOM killer) but a worker
                # it forked may live on and hold our pipe open: end its group, so EOF comes.
                ended = True
                _kill_group(proc)
            continue
        if raw is None:
            break
        event = events.decode(raw)
        if event is None:  # stray output; the child routes fd 1 to stderr, so this is rare
            sys.stderr.write(raw.decode(errors="replace"))
        elif event["type"] == TRIAL_RESULT:
            payload = event.get("result")
            deadline = min(deadline, time.monotonic() + EXIT_GRACE_S)
        else:
            out.forward(raw.decode(errors="replace"), event)
    _finish(proc, readers)

    if payload is not None and not timed_out:
        return TrialResult.from_dict(payload)
    tail = next((ln for ln in reversed(stderr_tail) if ln.strip()), "")
    if timed_out:
        error, kind = (
            f"trial exceeded timeout_s={spec.measure.timeout_s:g}s and was killed",
            "timeout",
        )
        if spec.serve is not None:
            error = (
                f"serving trial exceeded {limit_s:g} s (timeout_s={spec.measure.timeout_s:g} s + "
                f"the serving's {limit_s - spec.measure.timeout_s:g} s) and was killed"
            )
    elif (status := proc.wait()) < 0:
        error, kind = f"trial process killed by signal {_signal_name(-status)}", "crash"
        if -status == signal.SIGKILL:
            error += " (the kernel's OOM killer sends SIGKILL: out of memory?)"
    elif status:
        error, kind = f"trial process exited with status {status}", "crash"
    else:
        error, kind = "trial process exited without a result", "crash"
    if tail and not timed_out:
        error += f"; last stderr: {tail.strip()[:300]}"
    return TrialResult.failed(
        spec,
        error,
        kind,
        host=socket.gethostname(),
        started_at=started,
        finished_at=time.time(),
        versions=library_versions(),
    )


#: how ``agent run`` starts each trial's process (``--trial-start``)
TRIAL_STARTS = ("fork", "exec")


def _start_trial(
    spec: TrialSpec, workdir: Path | None, cache_dir: Path | None, start: str
) -> _TrialProcess:
    parent = os.getpid()
    if start == "fork" and _preloaded() and can_fork():
        return ForkedTrial(lambda: _trial_child(spec, workdir, cache_dir, parent))
    cmd = [*_self_command(), "trial", "--parent-pid", str(parent)]
    if workdir:
        cmd += ["--workdir", str(workdir)]
    if cache_dir:
        cmd += ["--cache-dir", str(cache_dir)]
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group: a kill takes the compiler's helpers too
    )
    assert proc.stdin
    with contextlib.suppress(BrokenPipeError):  # a child that died at once is reported below
        proc.stdin.write(json.dumps(spec.to_dict()).encode())
        proc.stdin.close()
    return proc


def preload() -> None:
    """What an agent imports before its first trial, for a process that forks agents
    (``ngb.devices.agent_server``): the trial harness, as the first trial would load it."""
    _preloaded()


def _preloaded() -> bool:
    """Import, once, what every forked trial would import first (numpy, psutil, the harness:
    ``preload_trial_harness``; no compiler library). False where that raised (a compiler module
    that does not import, say): the trial then starts in a new interpreter, which meets the same
    error as the trial's own and records it, instead of the error ending the agent's run."""
    try:
        from ngb.core.trial.measure import preload_trial_harness

        preload_trial_harness()
    except Exception:  # noqa: BLE001 -- any of it is the trial's to report, not the agent's
        return False
    return True


def _failed_here(spec: TrialSpec, error: str, kind: str = "error") -> TrialResult:
    now = time.time()
    return TrialResult.failed(
        spec, error, kind, host=socket.gethostname(), started_at=now, finished_at=now,
        versions=library_versions(),
    )  # fmt: skip


def _pump_lines(stream: IO[bytes], put: Callable[[bytes | None], None]) -> None:
    try:
        for raw in stream:
            put(raw)
    finally:
        put(None)


def _pump_stderr(stream: IO[bytes], tail: collections.deque[str]) -> None:
    """Forward the child's stderr to ours (the agent's error log) and keep its last lines."""
    for raw in stream:
        text = raw.decode(errors="replace")
        tail.append(text)
        try:
            sys.stderr.write(text)
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


#: a trial's process, started either way (``_start_trial``)
_TrialProcess = subprocess.Popen[bytes] | ForkedTrial


def _kill_group(proc: _TrialProcess) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(proc.pid, signal.SIGKILL)


def _finish(proc: _TrialProcess, readers: list[threading.Thread]) -> None:
    proc.wait()
    for t in readers:
        t.join(timeout=5)


def _signal_name(num: int) -> str:
    try:
        return f"{signal.Signals(num).name} ({num})"
    except ValueError:
        return str(num)


# --------------------------------------------------------------------------- the run


def load_trials(path: Path | str) -> list[TrialSpec]:
    """Trial specs from a JSON-lines file; duplicates (same key) are kept once, in order."""
    specs: dict[str, TrialSpec] = {}
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise NgbError(f"cannot read trials file {path}: {exc.strerror}") from None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            spec = TrialSpec.from_dict(json.loads(line))
        except (ValueError, TypeError, AttributeError) as exc:
            raise NgbError(f"{path}:{number}: not a trial spec: {exc}") from None
        except NgbError as exc:
            raise NgbError(f"{path}:{number}: {exc}") from None
        specs.setdefault(spec.key, spec)
    return list(specs.values())


#: what ``signal.signal`` takes and gives back
_Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None


class _CancelOnSignal:
    """SIGTERM/SIGINT set ``cancel``; during an in-process trial they also raise ``Cancelled``."""

    def __init__(self, cancel: threading.Event) -> None:
        self.cancel = cancel
        self.in_trial = False
        self._previous: dict[int, _Handler] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.cancel.set()
        if self.in_trial:
            self.in_trial = False
            raise Cancelled()

    def __enter__(self) -> _CancelOnSignal:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def run_trials(
    specs: Iterable[TrialSpec],
    checkpoint: Path | str,
    out: EventWriter,
    *,
    isolate: str = "subprocess",
    trial_start: str = "exec",
    run_id: str | None = None,
    workdir: Path | None = None,
    cache_dir: Path | None = None,
    pause_file: Path | None = None,
    cancel: threading.Event | None = None,
) -> dict[str, object]:
    """Run what the checkpoint lacks; return the ``run_done`` fields."""
    specs = list(specs)
    run_id = run_id or uuid.uuid4().hex[:12]
    cancel = cancel or threading.Event()
    done = read_checkpoint(checkpoint)
    pending = [s for s in specs if s.key not in done]
    skipped = len(specs) - len(pending)
    out(
        events.RUN_STARTED,
        run_id=run_id,
        total=len(specs),
        skipped=skipped,
        pending=len(pending),
        isolate=isolate,
        pid=os.getpid(),
        host=socket.gethostname(),
    )
    counts = {"ok": 0, "failed": 0}
    verdicts: dict[str, str] = {}  # shipped artifacts found damaged: hash -> one line
    cancelled = False
    # a tuning database records the run that searched it (ngb.core.compilers.tvm_tuning)
    os.environ["NGB_RUN_ID"] = run_id
    book = eta_book(done.values(), cache_dir)
    with _CancelOnSignal(cancel) as guard:
        try:
            for index, spec in enumerate(pending, skipped + 1):
                _wait_while_paused(pause_file, out, cancel)
                if cancel.is_set():
                    cancelled = True
                    break
                out(
                    events.TRIAL_STARTED,
                    key=spec.key,
                    label=spec.label,
                    index=index,
                    total=len(specs),
                    eta=book.inputs(
                        eta_item(spec), (eta_item(s) for s in pending[index - skipped :])
                    ),
                )
                trial_dir = workdir / spec.key if workdir else None
                problem = verify_shipped(spec.source, cache_dir, verdicts)
                if problem:  # a damaged model file: this trial fails, the run goes on
                    result: TrialResult | None = _failed_here(spec, problem)
                elif isolate == "inprocess":
                    guard.in_trial = True
                    try:
                        result = run_inprocess(spec, out, trial_dir, cache_dir)
                    finally:
                        guard.in_trial = False
                else:
                    result = run_subprocess(spec, out, trial_dir, cache_dir, cancel, trial_start)
                if result is None:
                    cancelled = True
                    break
                record = {**result.to_dict(), "run_id": run_id}
                append_checkpoint(checkpoint, record)
                book_result(
                    book,
                    record,
                    out.state.search_ended(spec.key),
                    out.state.first_batch_ratio(spec.key),
                )
                if cache_dir is not None:
                    save_evidence(book.evidence(), cache_dir)
                counts["ok" if result.ok else "failed"] += 1
                if result.ok:
                    out(events.TRIAL_DONE, key=spec.key, result=record)
                else:
                    out(
                        events.TRIAL_FAILED,
                        key=spec.key,
                        error=result.error,
                        error_kind=result.error_kind,
                        result=record,
                    )
        except Cancelled:
            cancelled = True
    summary = {"run_id": run_id, **counts, "skipped": skipped, "cancelled": cancelled}
    out(events.RUN_DONE, **summary)
    return summary


def _wait_while_paused(pause_file: Path | None, out: EventWriter, cancel: threading.Event) -> None:
    if pause_file is None or not pause_file.exists():
        return
    out(events.LOG, level="info", msg="paused", pause_file=str(pause_file))
    while pause_file.exists() and not cancel.is_set():
        cancel.wait(1.0)
    if not cancel.is_set():
        out(events.LOG, level="info", msg="resumed")


# --------------------------------------------------------------------------- command line


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ngb-agent", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run trials, checkpointing each; events on stdout")
    run.add_argument("--trials", required=True, type=Path, help="trial specs, one JSON per line")
    run.add_argument("--checkpoint", required=True, type=Path, help="finished trials (appended)")
    run.add_argument("--isolate", choices=("subprocess", "inprocess"), default="subprocess")
    run.add_argument(
        "--trial-start", choices=TRIAL_STARTS, default="fork",
        help="each trial's process: forked from the agent (default), or a new interpreter",
    )  # fmt: skip
    run.add_argument("--run-id")
    run.add_argument("--workdir", type=Path, help="per-trial scratch dirs go under here")
    run.add_argument("--cache-dir", type=Path, help="long-lived cache (TVM tuning databases)")
    run.add_argument("--pidfile", type=Path, help="write the agent's pid here while it runs")
    run.add_argument("--pause-file", type=Path, help="while this file exists, start no new trial")

    trial = sub.add_parser("trial", help="(internal) run one trial: spec JSON on stdin")
    trial.add_argument("--workdir", type=Path)
    trial.add_argument("--cache-dir", type=Path)
    trial.add_argument("--parent-pid", type=int, help="die with this process (Linux)")

    sub.add_parser("probe", help="print this device's facts as one JSON object")
    tune = sub.add_parser("tune", help="show (or apply / undo) what would quiet this device")
    tune.add_argument("--action", choices=("show", "apply", "undo"), default="show")
    tune.add_argument("--undo-file", type=Path, required=True)
    # The installer runs this once per first start: an interpreter that cannot import the agent
    # (a wrong path, an old Python, a broken numpy) fails here with its own words.
    sub.add_parser("ready", help="exit 0 when this interpreter can run the agent")
    return parser


def _cmd_run(args: argparse.Namespace) -> int:
    try:
        specs = load_trials(args.trials)
    except NgbError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for folder in (args.checkpoint.parent, args.workdir, args.cache_dir):
        if folder:
            folder.mkdir(parents=True, exist_ok=True)
    lock = lock_checkpoint(args.checkpoint)
    if lock is None:
        print(f"error: another agent is running {args.checkpoint}", file=sys.stderr)
        return EXIT_BUSY
    if args.pidfile:
        args.pidfile.write_text(f"{os.getpid()}\n")
    out = EventWriter(claim_stdout())
    try:
        summary = run_trials(
            specs,
            args.checkpoint,
            out,
            isolate=args.isolate,
            trial_start=args.trial_start,
            run_id=args.run_id,
            workdir=args.workdir,
            cache_dir=args.cache_dir,
            pause_file=args.pause_file,
        )
    finally:
        if args.pidfile:
            try:
                if args.pidfile.read_text().strip() == str(os.getpid()):
                    args.pidfile.unlink()
            except OSError:
                pass
    return EXIT_CANCELLED if summary["cancelled"] else EXIT_OK


def die_with_parent(parent_pid: int | None) -> None:
    """Linux: have the kernel SIGKILL this trial if the agent dies (e.g. ``kill -9``), so an
    orphaned trial never keeps a device busy after the agent is gone. Best effort elsewhere."""
    if parent_pid is None or not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGKILL))
    if os.getppid() != parent_pid:  # the agent died before the death signal was armed
        os._exit(EXIT_CANCELLED)


def _cmd_trial(args: argparse.Namespace) -> int:
    die_with_parent(args.parent_pid)
    spec = TrialSpec.from_dict(json.loads(sys.stdin.read()))
    status = _trial_child(spec, args.workdir, args.cache_dir, None)
    # Skip interpreter teardown: native runtimes' atexit hooks and thread joins can hang or crash
    # after the work is done, and nothing is left to clean up that the OS does not.
    os._exit(status)


def _trial_child(
    spec: TrialSpec, workdir: Path | None, cache_dir: Path | None, parent_pid: int | None
) -> int:
    """A trial process's work, started either way: events on fd 1, the result as the last."""
    die_with_parent(parent_pid)
    out = EventWriter(claim_stdout())
    # SIGTERM to the child means "stop now"; the parent records nothing for a cancelled trial.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    result = run_inprocess(spec, out, workdir, cache_dir)
    out(TRIAL_RESULT, key=spec.key, result=result.to_dict())
    sys.stderr.flush()
    return EXIT_OK


def _cmd_probe(args: argparse.Namespace) -> int:
    from ngb.devices.probe import probe

    print(json.dumps(probe(), sort_keys=True))
    return EXIT_OK


def _cmd_tune(args: argparse.Namespace) -> int:
    """One JSON object: the state, the changes planned (before), and what failed."""
    from ngb.core.base import device_state

    changes = device_state.plan()
    errors: list[str] = []
    if args.action == "apply":
        errors = device_state.apply(changes, args.undo_file)
    elif args.action == "undo":
        errors = device_state.undo(args.undo_file)
    print(json.dumps({
        "state": device_state.read(),
        "plan": [c.to_dict() for c in changes],
        "undo_pending": args.undo_file.is_file(),
        "errors": errors,
    }, sort_keys=True))  # fmt: skip
    return EXIT_OK


def _cmd_ready(args: argparse.Namespace) -> int:
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    handlers = {
        "run": _cmd_run, "trial": _cmd_trial, "probe": _cmd_probe, "ready": _cmd_ready,
        "tune": _cmd_tune,
    }  # fmt: skip
    handler = handlers[args.command]
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
