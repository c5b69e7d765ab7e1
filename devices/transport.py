"""The transport contract: how the workstation talks to one device.

``LocalTransport`` (the built-in ``localhost`` device: subprocesses, no SSH) and ``SshTransport``
(asyncssh) both implement it, so the orchestrator never knows which it has. Commands are argv
lists, never shell strings: implementations quote every argument (``shlex.join``) before a remote
shell sees it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass


@dataclass
class CommandResult:
    returncode: int
    stdout: str
    stderr: str


class TransportError(Exception):
    """Connection-level failure (unreachable, auth, host key, dropped link). One-line message."""


class HostKeyError(TransportError):
    """The device's host key is unknown or has changed; carries the offered fingerprint."""

    def __init__(self, message: str, host: str = "", fingerprint: str = "", changed: bool = False):
        super().__init__(message)
        self.host, self.fingerprint, self.changed = host, fingerprint, changed


class JobQueue(ABC):
    """A batch scheduler between the workstation and the device (``SlurmTransport.queue``).

    The run's commands still go through the transport; this is what only a scheduler can say.
    """

    @abstractmethod
    async def state(self, run_id: str) -> str:
        """The run's job on this device in one line (``PENDING (Resources)``); '' if none."""

    @abstractmethod
    async def ended(
        self, run_id: str, settle: float = 10.0, stderr: str = ""
    ) -> tuple[int, str] | None:
        """``(job id, why)`` if the scheduler ended the job (time limit, preemption, scancel);
        a job still ending is given up to ``settle`` seconds to reach its final state. ``stderr``
        (the agent's, on the login host) is read for a job the scheduler no longer lists."""

    @abstractmethod
    async def cancel(self, run_id: str, run_dir: str) -> bool:
        """ngb's own cancel of the run's job; False when no live job was found."""


class Transport(ABC):
    """One connection to one device. Async; safe to use from Textual's event loop."""

    name: str  # the device name, for messages
    queue: JobQueue | None = None  # a scheduler's answers, where one hands the device out
    # the exit status of the last ``stream`` once it ended (None: unknown, or it did not end),
    # and what it wrote to stderr
    last_exit_status: int | None = None
    last_stderr: str = ""

    @abstractmethod
    async def connect(self) -> None:
        """Open the connection (no-op for local). Raises ``TransportError``/``HostKeyError``."""

    @abstractmethod
    async def run(
        self, argv: Sequence[str], *, timeout: float | None = None, input: str | None = None
    ) -> CommandResult:
        """Run a command to completion."""

    @abstractmethod
    def stream(self, argv: Sequence[str]) -> AsyncIterator[str]:
        """Run a command and yield its stdout line by line (no trailing newline)."""

    @abstractmethod
    async def put(self, local_path: str, remote_path: str) -> None:
        """Copy a file to the device (SFTP for ssh)."""

    @abstractmethod
    async def get(self, remote_path: str, local_path: str) -> None:
        """Copy a file from the device."""

    @abstractmethod
    async def close(self) -> None:
        """Close the connection; idempotent."""

    async def __aenter__(self) -> Transport:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
