"""LocalTransport: the built-in ``localhost`` device, reached without SSH.

Same contract as ``SshTransport`` so the orchestrator treats this machine like any other device:
commands are argv lists run as subprocesses (no shell, so nothing to quote), files are copied.
``~`` in paths is expanded, as a remote login shell's home directory would be for SSH.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from ngb.devices.inventory import Device, builtin_localhost
from ngb.devices.transport import CommandResult, Transport, TransportError


def _expand(path: str) -> str:
    return str(Path(path).expanduser())


class LocalTransport(Transport):
    def __init__(self, device: Device | None = None) -> None:
        self.device = device or builtin_localhost()
        self.name = self.device.name
        self.last_exit_status: int | None = None  # of the last stream()
        self.last_stderr = ""  # of the last stream(), at most 64 KiB

    async def connect(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def _spawn(self, argv: Sequence[str], **kwargs) -> asyncio.subprocess.Process:  # noqa: ANN003
        if not argv:
            raise TransportError(f"{self.name}: empty command")
        try:
            return await asyncio.create_subprocess_exec(*argv, **kwargs)
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            # What a remote shell reports as status 127/126; keep the two transports alike.
            raise _NotRunnable(126 if isinstance(exc, PermissionError) else 127, str(exc)) from exc

    async def run(
        self, argv: Sequence[str], *, timeout: float | None = None, input: str | None = None
    ) -> CommandResult:
        try:
            proc = await self._spawn(
                argv,
                stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except _NotRunnable as exc:
            return CommandResult(exc.status, "", f"{argv[0]}: {exc.message}\n")
        data = input.encode() if input is not None else None
        try:
            out, err = await asyncio.wait_for(proc.communicate(data), timeout=timeout)
        except (TimeoutError, asyncio.TimeoutError):
            proc.kill()
            await proc.wait()
            raise TransportError(f"{self.name}: command timed out after {timeout:g}s") from None
        status = proc.returncode if proc.returncode is not None and proc.returncode >= 0 else -1
        return CommandResult(status, out.decode(errors="replace"), err.decode(errors="replace"))

    def stream(self, argv: Sequence[str]) -> AsyncIterator[str]:
        return self._stream(list(argv))

    async def _stream(self, argv: list[str]) -> AsyncIterator[str]:
        self.last_exit_status, self.last_stderr = None, ""
        spawn = asyncio.ensure_future(
            self._spawn(
                argv,
                # open while the stream is read, as an SSH channel's: a follower that goes away
                # closes it, and the command can tell (``protocol.follow_argv``)
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=16 * 1024 * 1024,  # long JSON lines (a full trial result) must fit
                start_new_session=True,  # its own group: ended whole (``_end``), tail and all
            )
        )
        try:
            # Shielded: a cancel while asyncio connects the pipes left CPython 3.11's transport
            # waiting forever for pipes it never connected (``ngb run --detach`` hung right
            # after the start, 1 in 3); the started command is ended once it is there instead.
            proc = await asyncio.shield(spawn)
        except asyncio.CancelledError:
            spawn.add_done_callback(_end_abandoned)
            raise
        except _NotRunnable as exc:
            self.last_exit_status, self.last_stderr = exc.status, exc.message
            return
        assert proc.stdout is not None and proc.stderr is not None
        stderr = proc.stderr

        async def drain_stderr() -> None:
            async for chunk in stderr:
                self.last_stderr = (self.last_stderr + chunk.decode(errors="replace"))[-65536:]

        stderr_task = asyncio.ensure_future(drain_stderr())
        try:
            async for raw in proc.stdout:
                yield raw.decode(errors="replace").rstrip("\r\n")
            if proc.stdin is not None:  # read to the end: the command may stop watching it now
                proc.stdin.close()  # (asyncio's wait also waits for this pipe to close)
            await stderr_task
            self.last_exit_status = await proc.wait()
        finally:
            if proc.returncode is None:  # the consumer stopped early: do not leave it running
                _end(proc)
                await proc.wait()
            elif proc.stdin is not None:
                proc.stdin.close()
            stderr_task.cancel()

    async def put(self, local_path: str, remote_path: str) -> None:
        await self._copy(str(local_path), _expand(str(remote_path)))

    async def get(self, remote_path: str, local_path: str) -> None:
        await self._copy(_expand(str(remote_path)), str(local_path))

    async def _copy(self, src: str, dst: str) -> None:
        try:
            await asyncio.to_thread(shutil.copyfile, src, dst)
        except OSError as exc:
            raise TransportError(f"{self.name}: copy {src} -> {dst} failed: {exc}") from None


def _end_abandoned(spawn: asyncio.Future[asyncio.subprocess.Process]) -> None:
    """A stream's command started after its reader was cancelled: end it."""
    if not spawn.cancelled() and spawn.exception() is None:
        _end(spawn.result())


def _end(proc: asyncio.subprocess.Process) -> None:
    """End a streamed command and whatever it started (its process group: a follower's
    ``tail``), and close its stdin (what a command on an SSH device is told by)."""
    if proc.stdin is not None:
        proc.stdin.close()
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


class _NotRunnable(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message
