"""Nothing left behind by a benchmark, however it ends: a watchdog process that cleans up after it.

Why a separate process: a benchmark killed with SIGKILL runs no ``finally`` and no ``atexit``,
and what it started outlives it -- the loopback sshd, the devices' agents (detached on purpose:
``nohup setsid``), the ``tail -F`` of each event log, the throwaway login account. On this VM
PID 1 does not even reap orphans, so a dead agent stays a zombie that ``tail --pid`` takes for
alive (~50 ``tail -F`` were left by one killed run of 64 devices).

``adopt_orphans`` makes the benchmark their reaper while it runs (``PR_SET_CHILD_SUBREAPER``): an
agent whose start shell exited is reparented to the benchmark, not to that PID 1, and a thread
reaps it once it exits, so no zombie outlives the run either.

``start(root)`` forks the watchdog before the benchmark starts anything. It leaves the terminal's
process group (Ctrl-C and a kill of the group do not reach it), holds nothing of the caller's
but the read end of a pipe, and waits for EOF on it: the kernel closes the write end when the
benchmark exits, normally or killed. Then it kills every process that names ``root`` in its
command line or works under it (sshd's listener and sessions' commands, agents, their workers,
``tail``), again until none is left, removes ``root`` and deletes the accounts it was told about
(``add_account``). A benchmark that ends normally has cleaned up already; the watchdog then finds
nothing to do.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import _acct  # this folder: the benchmarks run as files

_PR_SET_CHILD_SUBREAPER = 36


class Watchdog:
    """The benchmark's end of the pipe (see the module docstring)."""

    def __init__(self, write_fd: int, pid: int, notes: Path) -> None:
        self.write_fd = write_fd
        self.pid = pid
        self.notes = notes

    def add_account(self, name: str) -> None:
        """A login account the watchdog deletes if the benchmark could not."""
        with open(self.notes, "a") as fh:
            fh.write(f"{name}\n")

    def accounting_on(self) -> None:
        """Process accounting is on (``_acct``): the watchdog turns it off if the benchmark
        could not, or the kernel would go on recording every process into a removed file."""
        _acct_marker(self.notes).touch()

    def accounting_off(self) -> None:
        _acct_marker(self.notes).unlink(missing_ok=True)


def start(root: Path) -> Watchdog:
    """Fork the watchdog for ``root`` (the benchmark's own folder, created here if missing)."""
    root = root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    notes = root.with_name(root.name + ".accounts")
    read_fd, write_fd = os.pipe()  # non-inheritable: no child of the benchmark holds it open
    pid = os.fork()
    if pid == 0:  # the watchdog
        try:
            os.close(write_fd)
            os.setsid()
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
                signal.signal(sig, signal.SIG_IGN)
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):  # never hold the caller's terminal or pipes open
                os.dup2(devnull, fd)
            while os.read(read_fd, 1):
                pass
            clean(root, notes)
        finally:
            os._exit(0)
    os.close(read_fd)
    return Watchdog(write_fd, pid, notes)


def clean(root: Path, notes: Path) -> None:
    """Kill what names ``root``, remove it, delete the accounts listed in ``notes``."""
    for _ in range(50):
        victims = [pid for pid in _processes() if _belongs(pid, root)]
        if not victims:
            break
        for pid in victims:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    marker = _acct_marker(notes)
    if marker.exists():
        _acct.stop()
        marker.unlink()
    shutil.rmtree(root, ignore_errors=True)
    with contextlib.suppress(OSError):
        for name in notes.read_text().split():
            subprocess.run(["userdel", "--force", name], capture_output=True, check=False)  # noqa: S603, S607
        notes.unlink()


def _acct_marker(notes: Path) -> Path:
    return notes.with_suffix(".acct-on")


def _processes() -> list[int]:
    me = os.getpid()
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me]


def _belongs(pid: int, root: Path) -> bool:
    """The process names ``root`` in its command line, or works in it (a zombie does neither)."""
    prefix = str(root)
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            if prefix.encode() in fh.read():
                return True
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return False
    return cwd == prefix or cwd.startswith(prefix + "/")


def adopt_orphans(keep: Callable[[], set[int]]) -> None:
    """Become the subreaper of what this process starts, and reap the adopted orphans (never
    the pids ``keep()`` names: children a ``subprocess.Popen`` of ours waits for)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1)
    threading.Thread(target=_reap, args=(keep,), name="reaper", daemon=True).start()


def _reap(keep: Callable[[], set[int]]) -> None:
    """Reap exited children that are not ``keep()``'s: one ``waitid`` peek every half second."""
    while True:
        time.sleep(0.5)
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                break
            if info is None or info.si_pid in keep():
                break  # nothing exited, or its own Popen reaps it
            with contextlib.suppress(ChildProcessError):
                os.waitpid(info.si_pid, 0)
