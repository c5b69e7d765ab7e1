"""The agent's checkpoint: finished trials as JSON lines, appended durably, read back on resume,
and a lock file so one agent at a time owns a run's checkpoint.

Part of ``ngb.core`` because the agent (``ngb.devices.agent``), shipped to devices with
``ngb.core`` and nothing else of ``ngb.devices``, writes it, and the workstation reads the same
format back.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO

from ngb.core.records import events


def read_checkpoint(path: Path | str) -> dict[str, dict[str, object]]:
    """Finished trials by key. Blank, torn (kill -9 mid-write) or foreign lines are ignored."""
    done: dict[str, dict[str, object]] = {}
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return done
    for raw in data.splitlines():
        try:
            record = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            continue
        if (
            isinstance(record, dict)
            and isinstance(record.get("key"), str)
            and record.get("status") in ("ok", "failed")
        ):
            done[record["key"]] = record
    return done


def append_checkpoint(path: Path | str, record: dict[str, object]) -> None:
    """Append one record as a line, durably (flush + fsync) before returning.

    If the file ends in a torn line (no trailing newline), a newline is written first so the new
    record starts on a line of its own and stays readable.
    """
    path = Path(path)
    line = (events.encode(record) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size:
            with open(path, "rb") as f:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    line = b"\n" + line
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def lock_checkpoint(checkpoint: Path) -> IO[bytes] | None:
    """Hold an exclusive lock for this checkpoint for the life of the process; None if taken.

    The kernel drops the lock when the process dies, however it dies, so no stale lock survives
    a ``kill -9``.
    """
    import fcntl

    handle = open(checkpoint.with_name(checkpoint.name + ".lock"), "wb")  # noqa: SIM115
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    return handle
