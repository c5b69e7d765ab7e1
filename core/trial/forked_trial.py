"""A trial process forked from the agent, in place of a newly started interpreter.

Why: the agent runs every trial in a child process of its own (a crash, an OOM kill or a hang is a
failed trial, not a dead run). Started as ``python agent.pyz trial``, each child paid for a new
interpreter and the trial harness's imports (numpy, psutil, ``ngb.core.trial.measure``): ~0.15
CPU-s a trial on the 2-core VM (one agent's 4 no-op trials: 0.93 CPU-s that way, 0.35 forked;
1.50 against 1.00 where each worker is a fresh interpreter, a device's default), and on a fleet of
loopback devices all of them pay it at once. Forked from an agent that imported the harness once,
a child starts with it loaded.

What the child keeps of the agent: the modules it imported and their caches (library versions
and the installed-packages list, read from the same interpreter), and nothing else that matters:
it gets its own session (so a kill takes its whole group, as ``start_new_session`` did), fresh
pipes on fds 0-2, every other fd closed (the checkpoint's lock and the agent's event stream stay
the agent's), default signal handlers, and it never returns into the agent's code (``os._exit``).
Trial *workers* are unaffected: a device still starts each in a fresh interpreter
(``ngb.core.trial.worker_start``), which is what the interval's independence rests on.

Forking is only safe where no other thread of this process holds a lock the child would need, so
``can_fork`` says no while any other Python thread runs; the caller then starts an interpreter.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from typing import IO

#: exit status of a child whose trial code raised past its own handling (an agent bug)
EXIT_CHILD_ERROR = 70


def can_fork() -> bool:
    """Whether a trial may be forked from this process now: POSIX fork, and no other Python
    thread (a fork copies only the forking thread, with every lock as it was)."""
    return hasattr(os, "fork") and threading.active_count() == 1


class ForkedTrial:
    """The part of ``subprocess.Popen`` the agent uses, for a child forked to run ``body``.

    ``body`` runs in the child with fd 1 and fd 2 on the pipes ``stdout`` and ``stderr`` read
    here, and fd 0 on /dev/null; the child exits with its return value (an int)."""

    def __init__(self, body: Callable[[], int]) -> None:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        ready_r, ready_w = os.pipe()
        for stream in (sys.stdout, sys.stderr):  # buffered text would be written twice
            with contextlib.suppress(OSError, ValueError, AttributeError):
                stream.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            _child(body, out_w, err_w, ready_w)
        for fd in (out_w, err_w, ready_w):
            os.close(fd)
        # Wait for the child's setsid: a kill of its group before then would miss it.
        with contextlib.suppress(OSError):
            os.read(ready_r, 1)
        os.close(ready_r)
        self.pid = pid
        self.returncode: int | None = None
        self.stdout: IO[bytes] = os.fdopen(out_r, "rb")
        self.stderr: IO[bytes] = os.fdopen(err_r, "rb")

    def poll(self) -> int | None:
        if self.returncode is None:
            with contextlib.suppress(ChildProcessError):
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        while self.returncode is None:
            try:
                _, status = os.waitpid(self.pid, 0)
            except InterruptedError:
                continue
            except ChildProcessError:  # reaped elsewhere: its status is lost
                self.returncode = -1
            else:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


def _child(body: Callable[[], int], out_w: int, err_w: int, ready_w: int) -> None:
    status = EXIT_CHILD_ERROR
    try:
        os.setsid()
        os.write(ready_w, b"+")
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, _fd_limit())
        # Python's streams as a new interpreter has them, on the new fds: the caller's may
        # wrap an fd closed just now (pytest's capture does)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 -- the process's own, never closed
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", 1, errors="backslashreplace", closefd=False)  # noqa: SIM115
        _reset_handlers()
        status = body()
    except BaseException:  # noqa: BLE001 -- whatever it was, the agent's code must not go on here
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        os._exit(status)


def _reset_handlers() -> None:
    """Signals the agent handles in Python go back to what a new interpreter has (``exec``
    resets handlers and keeps ignored signals ignored; so does this)."""
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        if callable(signal.getsignal(sig)):
            signal.signal(sig, signal.SIG_DFL)
    if callable(signal.getsignal(signal.SIGINT)):
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _fd_limit() -> int:
    try:
        limit = os.sysconf("SC_OPEN_MAX")
    except (OSError, ValueError):
        limit = 1024
    return limit if limit > 0 else 1024
