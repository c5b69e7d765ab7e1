"""What every SSH connection attempt shares: the operator's ssh config files, the cipher order,
and one line for the operator from whatever a connect attempt raised.

Both ``ngb.devices.ssh`` (the transport) and ``ngb.devices.hostkeys`` (fetching and trusting host
keys) need these; keeping them here lets ``ssh`` import ``hostkeys`` without a loop back.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from pathlib import Path

from ngb.core.base.errors import NgbError
from ngb.core.base.safe_files import check_readable, read_bytes
from ngb.devices.inventory import Device
from ngb.devices.transport import TransportError


def default_ssh_config() -> list[str]:
    """The operator's ssh config files that exist (asyncssh parses them)."""
    path = Path("~/.ssh/config").expanduser()
    if path.exists():
        check_readable(path, "ssh config")  # a FIFO there would block asyncssh's open
    return [str(path)] if path.is_file() else []


def preferred_ciphers() -> list[str]:
    """asyncssh's default ciphers (those this install supports), AES-GCM moved first, aes128
    before aes256. Its chacha20-poly1305 (OpenSSH's first choice) builds three cipher contexts in
    Python per packet, where AES-GCM is one AEAD call: 14.1 -> 2.7 us to seal and 11.5 -> 2.4 us
    to open a 200-byte packet; the orchestrator's CPU at 32 loopback devices went from 2.85-3.10
    CPU-s (3 runs) to 2.40-3.02 (5 runs), means 2.98 -> 2.71 (2026-11-29). Both are AEAD ciphers
    OpenSSH offers by default; a device without AES-GCM still agrees on one of the others."""
    from asyncssh.encryption import get_default_encryption_algs

    names = [alg.decode() for alg in get_default_encryption_algs()]
    gcm = sorted(name for name in names if "-gcm@" in name)
    return gcm + [name for name in names if name not in gcm]


_CIPHER_CHOICE = re.compile(r"^\s*(ciphers|include)\b", re.IGNORECASE | re.MULTILINE)


def ciphers_for(config_files: Sequence[str]) -> list[str] | None:
    """``preferred_ciphers()``, or None where the operator's ssh config may choose (a ``Ciphers``
    line, or an ``Include`` that could hold one): theirs is then used, as ``ssh`` would."""
    for name in config_files:
        try:  # read_bytes never blocks on a FIFO: it refuses anything but a regular file
            text = read_bytes(name).decode(errors="replace")
        except (OSError, NgbError):
            return None  # asyncssh reports what is wrong with it; do not choose over it
        if _CIPHER_CHOICE.search(text):
            return None
    return preferred_ciphers()


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
