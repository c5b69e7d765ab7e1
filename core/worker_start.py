"""How a trial starts its worker processes: a plain fork, or a fork server when forking is unsafe.

A fork copies every lock of the parent in the state it was in, but only the forking thread. If
another Python thread of the trial's process held a lock at that instant (an import lock while
it imported a module, a stream's buffer lock while it wrote, a queue's mutex), the forked worker
inherits it held by a thread that does not exist there, and waits on it forever the first time
it needs it: a futex wait that only the trial's timeout ends. A pytest-xdist worker always has
such threads (execnet's I/O), and so does a notebook or any program that calls ``run_trial``
from a threaded process.

The trial processes ngb starts itself (the agent's trial subprocess, ``ngb measure``) have one
thread when they fork, so they keep the cheap fork: the preloaded torch and timm come along for
free. Otherwise the workers come from a fork server: a fresh single-threaded interpreter started
once per trial process, which imports ngb's measurement code and the heavy libraries once and
forks each worker from there. What such a worker cannot see is whatever the calling process
changed in memory (a test's monkeypatch); ``NGB_WORKER_START=fork`` forces the fork for a caller
that knows it holds no lock a worker needs. As with any multiprocessing start method but fork, a
script that measures from a threaded process needs the ``if __name__ == "__main__":`` guard: each
worker imports the main module again. The server is started once per trial process (~1-6 s:
it imports torch and timm) and lives as long as that process.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from multiprocessing.context import ForkContext, ForkServerContext

from ngb.core.errors import ConfigError

# What the fork server imports before its first fork: the worker's code path and the expensive
# libraries a worker needs (each is skipped if it is not installed).
FORKSERVER_PRELOAD = ["ngb.core.measure", "torch", "timm"]
START_ENV = "NGB_WORKER_START"
_METHODS = ("fork", "forkserver")


def start_method() -> str:
    """``fork`` when this process has no other live Python thread, else ``forkserver``;
    ``NGB_WORKER_START`` (fork or forkserver) overrides the choice."""
    forced = os.environ.get(START_ENV, "").strip()
    if forced:
        if forced not in _METHODS:
            raise ConfigError(f"{START_ENV}={forced!r}: expected one of {', '.join(_METHODS)}")
        return forced
    return "fork" if _python_threads() == 1 else "forkserver"


def _python_threads() -> int:
    """Live Python threads, counting those started with ``_thread`` (execnet's I/O thread in a
    pytest-xdist worker), which ``threading`` does not list: each has a frame here."""
    return max(threading.active_count(), len(sys._current_frames()))


def worker_context() -> ForkContext | ForkServerContext:
    """The multiprocessing context to start the next worker process with."""
    if start_method() == "fork":
        return multiprocessing.get_context("fork")
    context = multiprocessing.get_context("forkserver")
    # read when the server starts (the first forkserver worker of this process), then kept
    context.set_forkserver_preload(FORKSERVER_PRELOAD)
    return context
