"""The store's bytes read without DuckDB, and without unlocking the store (``instances``).

A process that holds the store open through DuckDB must never open and close the store's files
itself: closing the descriptor drops DuckDB's POSIX locks on them, and another process may then
open the store read-write beside this one (two writers: lost commits, a log from another
checkpoint). Copies (``snapshot``'s private copies, which a console takes while its own ingest
writes) are therefore made by a child process, whose descriptors and locks are its own, and
never wait for the writer. The one small read in this process, the header sniff, happens only
while no connection of this process has the file open.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from ngb.sweeps.store.instances import lock_for, open_here

#: asked while a copy runs: True stops it
Stop = Callable[[], bool]
#: how often a running copy looks at its ``stop``
POLL_S = 0.05


class CopyStopped(Exception):
    """A copy stopped by its ``stop`` (the query it was for was cancelled)."""


def read_head(path: Path, size: int) -> bytes | None:
    """The first ``size`` bytes of ``path``; None while this process holds it open through
    DuckDB (then it is a DuckDB file, and reading it here would unlock it)."""
    with lock_for(path):  # no connection of another thread opens it meanwhile
        if open_here(path):
            return None
        with path.open("rb") as file:
            return file.read(size)


def copy_command(source: Path, length: int | None) -> list[str]:
    """The child that copies: coreutils' ``cat``, or ``head -c`` for a prefix."""
    if length is None:
        return ["cat", "--", str(source)]
    return ["head", "-c", str(length), "--", str(source)]


def copy_file(
    source: Path, dest: Path, length: int | None = None, stop: Stop | None = None
) -> None:
    """``source`` (its first ``length`` bytes; None: all of it) to ``dest``, by a child process.

    Raises ``OSError`` with the child's own line when it could not copy, ``CopyStopped`` when
    ``stop`` said so (the child is killed and ``dest`` left partial: the caller drops it)."""
    argv = copy_command(source, length)
    with dest.open("wb") as out:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.PIPE,
            close_fds=True,
            start_new_session=True,  # its own group: a stop kills whatever it started too
        )
        try:
            while True:
                try:
                    child.wait(timeout=POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    if stop is not None and stop():
                        raise CopyStopped("copy stopped") from None
        finally:
            if child.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)
                child.wait()
            stderr = child.stderr.read() if child.stderr is not None else b""
            if child.stderr is not None:
                child.stderr.close()
    if child.returncode != 0:
        line = stderr.decode(errors="replace").strip().splitlines()
        why = line[-1] if line else f"{argv[0]} exited {child.returncode}"
        missing = "No such file" in why
        raise OSError(errno.ENOENT if missing else errno.EIO, why.split(": ")[-1], str(source))
