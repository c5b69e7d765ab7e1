"""What every SSH connection attempt shares: the operator's ssh config files, and one line for
the operator from whatever a connect attempt raised.

Both ``ngb.devices.ssh`` (the transport) and ``ngb.devices.hostkeys`` (fetching and trusting host
keys) need these; keeping them here lets ``ssh`` import ``hostkeys`` without a loop back.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ngb.core.base.safe_files import check_readable
from ngb.devices.inventory import Device
from ngb.devices.transport import TransportError


def default_ssh_config() -> list[str]:
    """The operator's ssh config files that exist (asyncssh parses them)."""
    path = Path("~/.ssh/config").expanduser()
    if path.exists():
        check_readable(path, "ssh config")  # a FIFO there would block asyncssh's open
    return [str(path)] if path.is_file() else []


def map_connect_error(device: Device, exc: BaseException, timeout: float) -> TransportError:
    """One line for the operator from whatever the connect attempt raised."""
    import asyncssh

    where = f"{device.name} ({device.host}:{device.port})"
    if isinstance(exc, TransportError):
        return exc
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return TransportError(f"{where}: connection timed out after {timeout:g}s")
    if isinstance(exc, asyncssh.PermissionDenied):
        return TransportError(f"{where}: authentication failed ({exc.reason})")
    if isinstance(exc, asyncssh.DisconnectError):
        return TransportError(f"{where}: disconnected: {exc.reason}")
    if isinstance(exc, ConnectionRefusedError):
        return TransportError(f"{where}: connection refused (is sshd running on that port?)")
    if isinstance(exc, OSError):
        return TransportError(f"{where}: cannot reach host: {exc.strerror or exc}")
    if isinstance(exc, asyncssh.KeyImportError | asyncssh.KeyEncryptionError):
        return TransportError(f"{where}: cannot load identity file: {exc}")
    return TransportError(f"{where}: {type(exc).__name__}: {exc}")
