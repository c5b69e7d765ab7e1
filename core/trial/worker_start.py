"""How a trial starts its worker processes: each from its own newly started interpreter (the
default), or forked from one interpreter (cheap; tests).

Why a fresh interpreter per worker (issue 30): the interval is built over worker processes
(``ngb.core.statistics.stopping.process_interval``) on the assumption that each one is an
independent draw of the level a process runs at. Workers forked from one trial process are not: they
inherit its address-space layout, its heap (malloc history) and whatever else fixed that
interpreter's speed, so they agree with each other and not with the next trial. On the 2-core VM
(``ngb bench coverage``, 10 re-runs) mha:128:1 got 50 % coverage at width ratio 0.35 that way. A
worker that is its own interpreter samples that level, so a re-run meets exactly the spread the
interval was built from (``tests/test_calibration.py`` simulates both designs).

What it costs: every worker imports torch (and timm for a timm model) itself, ~2-5 s of CPU on
the 2-core VM (issue 44: ~2.3 s for a block's worker, ~5 s with timm, which imports torchvision
and with it torch._dynamo). To keep that out of the trial's wall time where it can,
``Interpreters`` starts the first ``workers`` interpreters when the trial's first worker is
asked for, at most ``parallel`` importing at a time (one a core: the first ones are ready sooner
than if all shared the cores), hands worker 0 the first one as soon as it is ready, and goes on
starting the rest while worker 0 builds its model (its build, MAC count and eager reference use
a core the imports leave). The gate (``BESIDE_IMPORTS``, ``ngb.core.trial.workers``): a worker stops
before its compile and its timed loops until every interpreter started has imported
(``settle``), so nothing imports while a worker compiles or measures; a started interpreter then
sits blocked on its pipe, using no CPU, until its turn. Workers the stopping rule adds later are
started then (two at a time), behind the same gate.

Methods (``NGB_WORKER_START``):

- ``fresh`` (default): each worker is a new ``python`` started for it (``_serve`` below).
- ``auto``: the old cheap default: ``fork`` when this process has no other Python thread,
  else ``forkserver``. Its workers share one interpreter's level: the interval does not hold
  re-runs, and the verdict says so. The test suite uses it (tests/conftest.py).
- ``fork``: fork from this process (sees a test's monkeypatch). A fork copies every lock of the
  parent in the state it was in, but only the forking thread: if another Python thread held one
  (an import lock, a stream's buffer lock), the forked worker waits on it forever.
- ``forkserver``: one fresh single-threaded interpreter per trial process that imports the heavy
  libraries its first trial's workers need once and forks each worker from there (safe beside
  other threads; one level).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_for_any
from multiprocessing.context import ForkContext, ForkServerContext
from typing import TYPE_CHECKING

from ngb.core.base.errors import ConfigError, NgbError

if TYPE_CHECKING:
    from ngb.core.records.trial_extra import WorkerStart

START_ENV = "NGB_WORKER_START"
FRESH = "fresh"
_METHODS = (FRESH, "auto", "fork", "forkserver")
# A fresh interpreter is ready once it has imported; this long is a broken Python, not a slow one.
READY_TIMEOUT_S = 300.0


def start_method() -> str:
    """``fresh`` unless ``NGB_WORKER_START`` says otherwise; ``auto`` resolves to ``fork`` when
    this process has no other live Python thread, else ``forkserver``."""
    forced = os.environ.get(START_ENV, "").strip() or FRESH
    if forced not in _METHODS:
        raise ConfigError(f"{START_ENV}={forced!r}: expected one of {', '.join(_METHODS)}")
    if forced == FRESH and not _can_start_python():
        # no interpreter to start (embedded Python, or one this user may not execute): forked
        # workers, whose verdict says the between-interpreter spread was not sampled
        forced = "auto"
    if forced == "auto":
        return "fork" if _python_threads() == 1 else "forkserver"
    return forced


def _can_start_python() -> bool:
    return bool(sys.executable) and os.access(sys.executable, os.X_OK)


def _python_threads() -> int:
    """Live Python threads, counting those started with ``_thread`` (execnet's I/O thread in a
    pytest-xdist worker), which ``threading`` does not list: each has a frame here."""
    return max(threading.active_count(), len(sys._current_frames()))


def worker_context(preload: Sequence[str]) -> ForkContext | ForkServerContext:
    """The multiprocessing context for a forked worker (``fork`` or ``forkserver``).
    ``preload``: what a fork server imports before its first fork (each module skipped if it is
    not installed), read when the server starts -- the first forkserver worker of this
    process -- and kept for the process's life."""
    if start_method() == "fork":
        return multiprocessing.get_context("fork")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(preload))
    return context


# ------------------------------------------------------------------ fresh interpreters

_CHILD = (
    "import sys; from ngb.core.trial.worker_start import _serve; "
    "_serve(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:])"
)
READY = "ready"


class Interpreter:
    """A newly started ``python`` that imports ``preload`` and then waits for one job.

    It looks like a ``multiprocessing.Process`` to ``ngb.core.trial.workers`` (pid, kill, join,
    is_alive, exitcode); its connection carries the job one way and the worker's events back
    (and the gate's go-ahead to the worker: ``ngb.core.trial.workers``).
    """

    def __init__(self, preload: Sequence[str]) -> None:
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        # the child finds what this process found: the agent's zipapp, a test's checkout
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if isinstance(p, str) and p)
        self.started_at = time.monotonic()
        try:
            self._popen = subprocess.Popen(
                [sys.executable, "-c", _CHILD, str(theirs.fileno()), str(os.getpid()), *preload],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        finally:
            theirs.close()
        self.conn = Connection(ours.detach())
        self.pid = self._popen.pid
        self.ready = False
        self.ready_at: float | None = None  # monotonic, when its "ready" was read
        self.import_cpu_s: float | None = None  # its own user + sys CPU seconds up to "ready"

    def poll_ready(self) -> bool:
        """Whether it has imported (without waiting); raises if it died or broke before."""
        if self.ready:
            return True
        if not self.conn.poll(0):
            if time.monotonic() - self.started_at > READY_TIMEOUT_S:
                self.kill()
                raise NgbError(
                    f"a fresh worker interpreter did not start within {READY_TIMEOUT_S:.0f} s"
                )
            return False
        try:
            message = self.conn.recv()
        except (EOFError, OSError):
            message = None
        if not (isinstance(message, tuple) and message and message[0] == READY):
            self.kill()
            code = self._popen.wait()
            raise NgbError(f"a fresh worker interpreter exited with status {code} before its job")
        cpu = message[1] if len(message) > 1 else None
        self.import_cpu_s = float(cpu) if isinstance(cpu, int | float) else None
        self.ready_at = time.monotonic()
        self.ready = True
        return True

    def run(self, target: Callable[..., None], args: tuple[object, ...]) -> None:
        """Hand the interpreter its job: it calls ``target(args[0], its connection, *args[1:])``
        (a module-level function: it travels pickled, by name)."""
        self.conn.send((target, args))

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self._popen.kill()

    def join(self, timeout: float | None = None) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._popen.wait(timeout)

    def is_alive(self) -> bool:
        return self._popen.poll() is None

    @property
    def exitcode(self) -> int | None:
        return self._popen.poll()

    def close(self) -> None:
        """Take an unused interpreter down: EOF on its pipe ends it; a kill makes sure."""
        with contextlib.suppress(OSError):
            self.conn.close()
        self.kill()
        self.join(5.0)


def _serve(fd: int, parent: int, preload: Sequence[str]) -> None:
    """The fresh interpreter's main: import, say ready (with the CPU seconds that took), run
    the one job sent, exit."""
    conn = Connection(fd)
    _die_with_parent(parent)
    import importlib
    import resource

    for name in preload:  # the job's code path and the heavy libraries, before "ready"
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    try:
        conn.send((READY, round(usage.ru_utime + usage.ru_stime, 3)))
        target, args = conn.recv()
    except (EOFError, OSError):  # the trial ended or did not need this one
        return
    target(args[0], conn, *args[1:])
    # as a forked multiprocessing worker does: skip the interpreter's teardown (with torch,
    # torch._dynamo and sympy loaded it took ~1.5 s on the VM, and the trial waits on the exit)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


def _die_with_parent(parent: int | None = None) -> None:
    """Linux: the kernel kills this process when the trial process dies (an OOM kill, kill -9):
    an orphaned worker would go on loading the machine and hold the agent's pipe open.
    ``parent``: the pid it must still have (an orphan is adopted by init or a subreaper)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, 9)  # SIGKILL
    # the parent died before the call: nobody will read our result
    if os.getppid() == 1 or (parent is not None and os.getppid() != parent):
        os._exit(1)


def import_parallel() -> int:
    """How many interpreters import at once: one a core (at least two)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(2, cores)


class Interpreters:
    """The fresh interpreters of one trial: started ``parallel`` at a time, handed out one per
    worker in the order they were started, each as soon as it has imported.

    ``pump`` starts the next one when a slot frees (the trial's process calls it while it waits
    on a worker); ``settle`` is the gate: it returns once every interpreter asked for has been
    started and has imported, so that none imports while a worker compiles or measures.
    """

    def __init__(self, preload: Sequence[str], *, batch: int = 2, parallel: int = 2) -> None:
        self.preload = tuple(preload)
        self.batch = max(1, batch)
        self.parallel = max(1, parallel)
        self._pending = 0  # asked for, not started yet
        self._started: list[Interpreter] = []  # started and not yet taken, oldest first
        self.started = 0
        self.start_s = 0.0  # wall seconds this trial waited for interpreters to import
        self.gate_s = 0.0  # ... of which a worker waited at the gate (``settle``)
        self._cpu: list[float] = []
        # the same figures as one dict, updated in place as more start, so the copy worker 0
        # records (``result.extra["worker_start"]``) ends with the trial's totals
        self.facts: WorkerStart = {"method": FRESH}

    @property
    def importing(self) -> bool:
        """Whether an interpreter asked for has not imported yet (started or still to start)."""
        return self._pending > 0 or any(not i.ready for i in self._started)

    def prestart(self, count: int) -> None:
        """Ask for ``count`` more interpreters; the first ``parallel`` start now, the rest as
        slots free (``pump``). Nothing waits here."""
        self._pending += max(0, count)
        self.pump()

    def pump(self) -> None:
        """Read the ready ones, start the next while fewer than ``parallel`` import (no wait)."""
        try:
            for interp in self._started:
                if not interp.ready and interp.poll_ready():
                    self._count_ready(interp)
            while self._pending and sum(not i.ready for i in self._started) < self.parallel:
                self._pending -= 1
                self._started.append(Interpreter(self.preload))
                self.started += 1
        except BaseException:
            self.close()
            raise
        self._update_facts()

    def _count_ready(self, interp: Interpreter) -> None:
        if interp.import_cpu_s is not None:
            self._cpu.append(interp.import_cpu_s)

    def _wait(self, done: Callable[[], bool], *, gate: bool = False) -> None:
        """Pump until ``done()``, sleeping on the importing interpreters' pipes meanwhile."""
        began = time.monotonic()
        try:
            self.pump()
            while not done():
                waiting = [i.conn for i in self._started if not i.ready]
                if not waiting:  # nothing importing and nothing to start: done() cannot change
                    raise NgbError("no fresh worker interpreter is left to wait for")
                wait_for_any(waiting, timeout=1.0)
                self.pump()
        finally:
            waited = time.monotonic() - began
            self.start_s += waited
            if gate:
                self.gate_s += waited
            self._update_facts()

    def take(self) -> Interpreter:
        """The oldest interpreter, once it has imported (asking for a batch when none is left)."""
        if not self._started and not self._pending:
            self.prestart(self.batch)
        self._wait(lambda: bool(self._started) and self._started[0].ready)
        return self._started.pop(0)

    def settle(self) -> None:
        """The gate: wait until every interpreter asked for has started and imported."""
        if self.importing:
            self._wait(lambda: not self.importing, gate=True)

    def _update_facts(self) -> None:
        self.facts.update(
            {
                "interpreters_started": self.started,
                "start_wait_s": round(self.start_s, 3),
                "gate_wait_s": round(self.gate_s, 3),
            }
        )
        if self._cpu:  # an interpreter's own CPU seconds to its "ready", the mean over them
            self.facts["import_cpu_s"] = round(sum(self._cpu) / len(self._cpu), 3)

    def close(self) -> None:
        self._pending = 0
        while self._started:
            self._started.pop().close()
