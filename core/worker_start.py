"""How a trial starts its worker processes: each from its own newly started interpreter (the
default), or forked from one interpreter (cheap; tests).

Why a fresh interpreter per worker (issue 30): the interval is built over worker processes
(``ngb.core.stopping.process_interval``) on the assumption that each one is an independent draw
of the level a process runs at. Workers forked from one trial process are not: they inherit its
address-space layout, its heap (malloc history) and whatever else fixed that interpreter's speed,
so they agree with each other and not with the next trial. On the 2-core VM (``ngb bench
coverage``, 10 re-runs) mha:128:1 got 50 % coverage at width ratio 0.35 that way. A worker that
is its own interpreter samples that level, so a re-run meets exactly the spread the interval was
built from (``tests/test_calibration.py`` simulates both designs).

What it costs: every worker imports torch (and timm for a timm model) itself, ~2-7 s of CPU on
the 2-core VM. To keep that out of the trial's wall time where it can, ``Interpreters`` starts
the first ``workers`` interpreters side by side at the start of the trial and waits until all of
them have imported, before the first worker builds anything: a started interpreter then sits
blocked on its pipe, using no CPU, until its turn -- nothing imports while a worker measures.
Workers the stopping rule adds later are started then (two at a time).

Methods (``NGB_WORKER_START``):

- ``fresh`` (default): each worker is a new ``python`` started for it (``_serve`` below).
- ``auto``: the old cheap default: ``fork`` when this process has no other Python thread,
  else ``forkserver``. Its workers share one interpreter's level: the interval does not hold
  re-runs, and the verdict says so. The test suite uses it (tests/conftest.py).
- ``fork``: fork from this process (sees a test's monkeypatch). A fork copies every lock of the
  parent in the state it was in, but only the forking thread: if another Python thread held one
  (an import lock, a stream's buffer lock), the forked worker waits on it forever.
- ``forkserver``: one fresh single-threaded interpreter per trial process that imports the heavy
  libraries once and forks each worker from there (safe beside other threads; one level).
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
from multiprocessing.context import ForkContext, ForkServerContext

from ngb.core.errors import ConfigError, NgbError

# What the fork server imports before its first fork: the worker's code path and the expensive
# libraries a worker needs (each is skipped if it is not installed).
FORKSERVER_PRELOAD = ["ngb.core.measure", "torch", "timm"]
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


def worker_context() -> ForkContext | ForkServerContext:
    """The multiprocessing context for a forked worker (``fork`` or ``forkserver``)."""
    if start_method() == "fork":
        return multiprocessing.get_context("fork")
    context = multiprocessing.get_context("forkserver")
    # read when the server starts (the first forkserver worker of this process), then kept
    context.set_forkserver_preload(FORKSERVER_PRELOAD)
    return context


# ------------------------------------------------------------------ fresh interpreters

_CHILD = (
    "import sys; from ngb.core.worker_start import _serve; "
    "_serve(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:])"
)


class Interpreter:
    """A newly started ``python`` that imports ``preload`` and then waits for one job.

    It looks like a ``multiprocessing.Process`` to ``ngb.core.workers`` (pid, kill, join,
    is_alive, exitcode); its connection carries the job one way and the worker's events back.
    """

    def __init__(self, preload: Sequence[str]) -> None:
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        # the child finds what this process found: the agent's zipapp, a test's checkout
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if isinstance(p, str) and p)
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

    def wait_ready(self, timeout_s: float) -> None:
        """Block until the child has imported its preload (raises if it died or hung)."""
        if self.ready:
            return
        if not self.conn.poll(timeout_s):
            self.kill()
            raise NgbError(f"a fresh worker interpreter did not start within {timeout_s:.0f} s")
        try:
            message = self.conn.recv()
        except (EOFError, OSError):
            message = None
        if message != "ready":
            self.kill()
            code = self._popen.wait()
            raise NgbError(f"a fresh worker interpreter exited with status {code} before its job")
        self.ready = True

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
    """The fresh interpreter's main: import, say ready, run the one job sent, exit."""
    conn = Connection(fd)
    _die_with_parent(parent)
    import importlib

    for name in preload:  # the job's code path and the heavy libraries, before "ready"
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    try:
        conn.send("ready")
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


class Interpreters:
    """The fresh interpreters of one trial: started in batches, handed out one per worker."""

    def __init__(self, preload: Sequence[str], *, batch: int = 2) -> None:
        self.preload = tuple(preload)
        self.batch = max(1, batch)
        self._idle: list[Interpreter] = []
        self.started = 0
        self.start_s = 0.0  # wall seconds this trial waited for interpreters to import
        # the same figures as one dict, updated in place as more start, so the copy worker 0
        # records (``result.extra["worker_start"]``) ends with the trial's totals
        self.facts: dict[str, object] = {"method": FRESH}

    def prestart(self, count: int) -> None:
        """Start ``count`` side by side and wait for all: none imports while a worker runs."""
        began = time.monotonic()
        fresh = [Interpreter(self.preload) for _ in range(max(0, count))]
        try:
            for interp in fresh:
                interp.wait_ready(READY_TIMEOUT_S)
        except BaseException:
            for interp in fresh:
                interp.close()
            raise
        self._idle += fresh
        self.started += len(fresh)
        self.start_s += time.monotonic() - began
        self.facts.update(interpreters_started=self.started, start_wait_s=round(self.start_s, 3))

    def take(self) -> Interpreter:
        """A ready interpreter (starting a batch when none is left)."""
        if not self._idle:
            self.prestart(self.batch)
        return self._idle.pop(0)

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()
