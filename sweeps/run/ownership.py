"""Which follower of a run acts for a device: starts, restarts or resubmits its agent.

Any number of processes may follow one run: ``ngb run``, the console that re-attaches every run
still going when it opens, ``ngb attach``, ``ngb cancel``. Following is reading, and any number
may read. Acting when the agent is gone must be done once: two followers that each restart a
dead agent start two agents, and on a Slurm slot two jobs (issue 41: the console re-submitted
jobs the scheduler had ended while ``ngb run`` followed the same run). So each device of a run
has one owner, the follower holding an exclusive ``flock`` on a lock file named by the store,
the run and the device. The follower that starts a run takes it before its device tasks run; a
follower that attaches later finds it held and only follows (it ingests what the agent reports,
and takes the owner's word, from the store, for how the device ended). The kernel drops the lock
when its holder exits however it exits (``kill -9`` too), and a device task drops it when it
ends, so the next follower that needs to act takes it then.

Why a lock file on this machine and not a claim on the device or a row in the store: the store
is a local DuckDB file, so every follower of its runs runs here and sees the same files in the
temp dir, and a lock the kernel drops never outlives a dead follower (a row or a device file
would need a heartbeat to tell a dead owner from a quiet one). The files are keyed by the
store's resolved path, so two stores' runs never share an owner.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import tempfile
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)


def lock_dir() -> Path:
    """Where the owners' lock files live (this user's, in the machine's temp dir)."""
    return Path(tempfile.gettempdir()) / f"ngb-owners-{os.getuid()}"


class Owners:
    """The devices this process owns (see the module docstring). One per orchestrator."""

    def __init__(self, store: object) -> None:
        path = getattr(store, "path", None)
        if isinstance(path, str | Path):
            self.store_id = str(Path(path).resolve())
        else:  # a store without a file (tests): owners are told apart within this process
            self.store_id = f"memory:{id(store)}"
        self._held: dict[tuple[str, str], IO[bytes]] = {}

    def _path(self, run_id: str, device: str) -> Path:
        text = "\0".join((self.store_id, run_id, device))
        return lock_dir() / f"{hashlib.sha256(text.encode()).hexdigest()[:32]}.lock"

    def take(self, run_id: str, device: str) -> bool:
        """Own the device now if no other follower does; whether this process owns it."""
        if (run_id, device) in self._held:
            return True
        path = self._path(run_id, device)
        try:
            path.parent.mkdir(mode=0o700, exist_ok=True)
            handle = open(path, "ab")  # noqa: SIM115 - held open for as long as the lock
        except OSError as exc:  # no lock can be had: act, as every follower did before
            log.warning("no owner lock for %s/%s (%s): acting without one", run_id, device, exc)
            return True
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return False
        with contextlib.suppress(OSError):  # who holds it, for a person looking
            handle.truncate(0)
            handle.write(f"{os.getpid()} {run_id} {device}\n".encode())
            handle.flush()
        self._held[(run_id, device)] = handle
        return True

    def holds(self, run_id: str, device: str) -> bool:
        return (run_id, device) in self._held

    def release(self, run_id: str, device: str) -> None:
        """Give the device up (its task ended): another follower may act for it now. The file
        stays: removing it while another process waits on it would let two hold "the" lock."""
        handle = self._held.pop((run_id, device), None)
        if handle is not None:
            handle.close()

    def release_all(self) -> None:
        for run_id, device in list(self._held):
            self.release(run_id, device)
