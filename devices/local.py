"""LocalTransport: the built-in ``localhost`` device, reached without SSH.

Same contract as ``SshTransport`` so the orchestrator treats this machine like any other device:
commands are argv lists run as subprocesses (no shell, so nothing to quote), files are copied.
``~`` in paths is expanded, as a remote login shell's home directory would be for SSH.
"""

from __future__ import annotations

import asyncio
import shutil
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
        try:
            proc = await self._spawn(
                argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=16 * 1024 * 1024,  # long JSON lines (a full trial result) must fit
            )
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
            await stderr_task
            self.last_exit_status = await proc.wait()
        finally:
            if proc.returncode is None:  # the consumer stopped early: do not leave it running
                proc.kill()
                await proc.wait()
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


class _NotRunnable(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message
