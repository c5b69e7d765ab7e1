"""Spread a trial's repetitions over several processes, as pyperf does.

Why: consecutive processes measuring the same model differ far more than one process's
repetitions do (placement, allocation, thread start-up: 36 vs 60 samples/s for the same eager
resnet18 on a quiet 2-core machine), so an interval computed inside one process cannot see the
variance a re-run will meet. With ``workers = N`` the trial's own process times the first share
and N-1 fresh processes, one after another (never side by side: they would compete for the
cores), time the rest; all repetitions enter one interval.

Each worker rebuilds and recompiles the model instead of loading a compiled artifact: there is no
serialisation common to every backend, and re-placing the compiled model is part of the variance
being sampled. Compile time is measured once -- the trial's own compile is ``compile_s``; the
workers' recompiles are recorded under ``extra["workers"]`` but do not count. The compilers' own
caches (TVM tuning databases under the cache dir, Inductor's FX graph cache) keep recompiles
cheap. Workers run sequentially, each with the plan ``ngb.core.stopping.plan`` gives it from what
the earlier ones measured, and a worker skips verification (done once, in the trial's process).

Protocol: the parent writes ``{"spec", "plan", "workdir", "cache_dir"}`` as JSON on the worker's
stdin; the worker writes ``ngb.core.events`` lines on stdout (forwarded, tagged with ``worker``)
and last a ``worker_result`` line with its ``Part`` (or its error). Compiler chatter on fd 1 is
sent to stderr so it cannot break the stream. The worker runs in the trial's process group, so
the agent's timeout or cancel kills it with the trial.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import zipimport
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ngb.core import events
from ngb.core.errors import NgbError, one_line
from ngb.core.stopping import plan
from ngb.core.timing import Part
from ngb.core.types import TrialSpec

WORKER_RESULT = "worker_result"
# Event types a worker's output may pass on to the trial's listener.
_FORWARD = {events.PHASE, events.PROGRESS, events.CPU, events.TUNING, events.LOG}


class WorkerFailed(NgbError):
    """A worker process crashed or reported an error."""


def _command() -> tuple[list[str], dict[str, str]]:
    """How to start a worker, also when ngb runs from the agent's zipapp."""
    import ngb

    env = dict(os.environ)
    loader = getattr(ngb.__spec__, "loader", None)
    if isinstance(loader, zipimport.zipimporter):
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (loader.archive, env.get("PYTHONPATH", "")) if p
        )
    return [sys.executable, "-m", "ngb.core.workers"], env


def run_workers(
    spec: TrialSpec,
    first: Part,
    emit: Callable[[dict[str, Any]], None],
    *,
    workdir: Path,
    cache_dir: Path | None,
    deadline: float,
) -> tuple[list[Part], list[str]]:
    """Run workers 1..N-1 after ``first`` (worker 0); returns all parts and worker errors."""
    parts, errors = [first], []
    workers = plan(spec.measure, 0, (), 0.0).workers
    for k in range(1, workers):
        prior = [t for p in parts for t in p.throughputs]
        spent = sum(p.measure_s for p in parts)
        share = plan(spec.measure, k, prior, spent)
        try:
            parts.append(
                run_worker(spec, share.to_dict(), emit, workdir, cache_dir, deadline=deadline)
            )
        except WorkerFailed as exc:
            errors.append(f"worker {k}: {exc}")
    return parts, errors


def run_worker(
    spec: TrialSpec,
    share: dict[str, Any],
    emit: Callable[[dict[str, Any]], None],
    workdir: Path,
    cache_dir: Path | None,
    *,
    deadline: float,
) -> Part:
    cmd, env = _command()
    request = {
        "spec": spec.to_dict(),
        "plan": share,
        "workdir": str(workdir / f"worker{share['worker']}"),
        "cache_dir": str(cache_dir) if cache_dir else None,
    }
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdin and proc.stdout and proc.stderr
    stderr: list[bytes] = []
    pump = threading.Thread(target=lambda: stderr.extend(proc.stderr or []), daemon=True)
    pump.start()
    try:
        proc.stdin.write(json.dumps(events._nan_to_none(request)).encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass
    outcome: dict[str, Any] | None = None
    try:
        for raw in proc.stdout:
            event = events.decode(raw)
            if event is None:
                continue
            if event["type"] == WORKER_RESULT:
                outcome = event
            elif event["type"] in _FORWARD:
                event.setdefault("worker", share["worker"])
                emit(event)
            if time.monotonic() > deadline:
                break
    except BaseException:  # cancelled (the agent's SIGTERM in-process): take the worker along
        proc.kill()
        proc.wait()
        raise
    try:
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise WorkerFailed("timed out") from None
    pump.join(timeout=5)
    if outcome is None:
        tail = b"".join(stderr).decode(errors="replace").strip().splitlines()[-1:]
        raise WorkerFailed(
            f"exited with status {proc.returncode} without a result"
            + (f"; last stderr: {tail[0][:300]}" if tail else "")
        )
    if outcome.get("error"):
        raise WorkerFailed(str(outcome["error"]))
    return Part.from_dict(outcome["part"])


def main() -> int:
    """``python -m ngb.core.workers``: time one share of a trial (see the module docstring)."""
    from ngb.core.measure import run_share
    from ngb.core.stopping import Plan

    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # compiler chatter on fd 1 goes to stderr, not into the event stream
    sys.stdout = sys.stderr
    lock = threading.Lock()

    def send(event: dict[str, Any]) -> None:
        with lock:  # the CPU sampler thread emits too
            out.write(events.encode(event) + "\n")
            out.flush()

    request = json.loads(sys.stdin.read())
    spec = TrialSpec.from_dict(request["spec"])
    share = Plan.from_dict(request["plan"])
    cache = Path(request["cache_dir"]) if request.get("cache_dir") else None
    try:
        part, error = run_share(spec, share, send, Path(request["workdir"]), cache)
    except Exception as exc:  # run_share records failures; this is the last line of defence
        part, error = None, one_line(exc)
    send(
        events.make_event(
            WORKER_RESULT, part=part.to_dict() if part is not None else None, error=error
        )
    )
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
