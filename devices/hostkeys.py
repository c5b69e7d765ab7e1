"""Host-key trust: which keys ngb accepts, and how an operator adds one.

ngb never connects to a host whose key it cannot verify. The trusted keys are the union of the
operator's ``~/.ssh/known_hosts`` and ngb's own file (``get_paths().known_hosts``, OpenSSH format),
so a testbed already known to ``ssh`` works at once, while keys accepted through ngb (``ngb devices
trust NAME`` or the TUI's trust dialog) never touch the operator's own file.

The flow for a new device: ``fetch_host_key(device)`` shows the offered key's SHA256 fingerprint;
the operator compares it out of band; ``trust(device, key)`` records it. A changed key is reported
as such (``HostKeyError.changed``), because that is the case that may mean an attack.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ngb.core.base.safe_files import check_readable, read_text
from ngb.devices.inventory import Device, atomic_write_text
from ngb.devices.paths import get_paths
from ngb.devices.ssh_connect import default_ssh_config, map_connect_error
from ngb.devices.transport import TransportError

if TYPE_CHECKING:  # asyncssh is a workstation dependency, imported lazily
    import asyncssh

DEFAULT_PORT = 22


def user_known_hosts() -> Path:
    return Path("~/.ssh/known_hosts").expanduser()


def known_hosts_files(extra: Sequence[str | Path] = ()) -> list[str]:
    """The known_hosts files that exist among ~/.ssh/known_hosts, ngb's own file and ``extra``."""
    candidates = [user_known_hosts(), get_paths().known_hosts, *map(Path, extra)]
    out: list[str] = []
    for p in candidates:
        if p.exists():
            check_readable(p, "known_hosts")  # a FIFO there would block the ssh library's open
        if p.is_file() and str(p) not in out:
            out.append(str(p))
    return out


def host_pattern(host: str, port: int) -> str:
    """The OpenSSH known_hosts name: ``host`` on port 22, ``[host]:port`` otherwise."""
    return host if port == DEFAULT_PORT else f"[{host}]:{port}"


def fingerprint(key: asyncssh.SSHKey) -> str:
    """OpenSSH-style ``SHA256:...`` fingerprint, as ``ssh-keygen -lf`` prints it."""
    return key.get_fingerprint("sha256")


def _addr_of(host: str) -> str:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return ""


def known_keys(host: str, port: int, files: Sequence[str] | None = None) -> list[asyncssh.SSHKey]:
    """Keys trusted for ``host:port`` in the given known_hosts files (default: ours + user's)."""
    import asyncssh

    paths = known_hosts_files() if files is None else [f for f in files if Path(f).is_file()]
    if not paths:
        return []
    try:
        table = asyncssh.read_known_hosts(list(paths))
    except (OSError, ValueError) as exc:
        raise TransportError(f"cannot read known_hosts ({', '.join(paths)}): {exc}") from None
    trusted = table.match(host, _addr_of(host), None if port == DEFAULT_PORT else port)
    return list(trusted[0])


def effective_address(
    device: Device, ssh_config: Sequence[str | Path] | None = None
) -> tuple[str, int]:
    """The (host, port) asyncssh checks known_hosts against, after ~/.ssh/config.

    ``device.host`` may be an ssh-config alias (``Host lab1`` / ``HostName 10.0.0.7`` / ``Port
    2200``); the key must be recorded under the real name and port, or under ``HostKeyAlias``.
    """
    import asyncssh

    config = [str(p) for p in ssh_config] if ssh_config is not None else default_ssh_config()
    kwargs: dict[str, object] = {"config": config, "client_keys": None}
    if device.port != DEFAULT_PORT:
        kwargs["port"] = device.port
    try:
        opts = asyncssh.SSHClientConnectionOptions(host=device.host, **kwargs)
    except (OSError, ValueError, asyncssh.Error):
        return device.host, device.port
    return (opts.host_key_alias or opts.host or device.host), int(opts.port or device.port)


def key_status(
    device: Device,
    key: asyncssh.SSHKey,
    files: Sequence[str] | None = None,
    ssh_config: Sequence[str | Path] | None = None,
) -> str:
    """``"trusted"``, ``"unknown"`` (no key on record for the host) or ``"changed"``."""
    keys = known_keys(*effective_address(device, ssh_config), files)
    if key in keys:
        return "trusted"
    return "changed" if keys else "unknown"


async def fetch_host_key(
    device: Device,
    *,
    tunnel: asyncssh.SSHClientConnection | None = None,
    connect_timeout: float = 10.0,
    ssh_config: Sequence[str] | None = None,
) -> tuple[str, str, asyncssh.SSHKey]:
    """Ask the device for its host key without authenticating: ``(key_type, fingerprint, key)``.

    ``tunnel`` is an open asyncssh connection to the jump host, when the device has one.
    """
    import asyncio

    import asyncssh

    # () is asyncssh's "not given" (its default): port 22 and no tunnel leave ~/.ssh/config's say
    asked = asyncssh.get_server_host_key(
        device.host,
        device.port if device.port != DEFAULT_PORT else (),
        tunnel=tunnel if tunnel is not None else (),
        config=list(ssh_config or default_ssh_config()),
    )
    try:
        key = await asyncio.wait_for(asked, timeout=connect_timeout)
    except Exception as exc:  # noqa: BLE001 - mapped to one line for the operator
        raise map_connect_error(device, exc, connect_timeout) from None
    if key is None:
        raise TransportError(f"{device.name}: the server presented no host key")
    return key.get_algorithm(), fingerprint(key), key


def _hashed_name(name: str, salt: bytes | None = None) -> str:
    """OpenSSH ``HashKnownHosts`` form: ``|1|base64(salt)|base64(HMAC-SHA1(salt, name))``."""
    salt = salt if salt is not None else os.urandom(20)
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def _line_names(line: str, name: str) -> bool:
    """Whether a known_hosts line's host field names exactly ``name`` (plain or hashed)."""
    fields = line.split()
    if not fields or line.lstrip().startswith("#"):
        return False
    hosts = fields[1] if fields[0].startswith("@") and len(fields) > 1 else fields[0]
    if hosts.startswith("|1|"):
        try:
            _, _, salt64, _ = hosts.split("|", 3)
            salt = base64.b64decode(salt64)
        except (ValueError, TypeError):
            return False
        return hmac.compare_digest(_hashed_name(name, salt), hosts)
    return name in hosts.split(",")


def forget(
    device: Device, path: Path | None = None, ssh_config: Sequence[str | Path] | None = None
) -> int:
    """Remove ngb's entries for the device's host:port; returns how many lines went."""
    target = Path(path or get_paths().known_hosts)
    if not target.exists():
        return 0
    name = host_pattern(*effective_address(device, ssh_config))
    lines = read_text(target, "known_hosts").splitlines(keepends=True)
    kept = [ln for ln in lines if not _line_names(ln, name)]
    if len(kept) != len(lines):
        atomic_write_text(target, "".join(kept))
    return len(lines) - len(kept)


def trust(
    device: Device,
    key: asyncssh.SSHKey,
    *,
    path: Path | None = None,
    hashed: bool = False,
    ssh_config: Sequence[str | Path] | None = None,
) -> Path:
    """Record ``key`` as the device's host key in ngb's known_hosts (replacing older entries).

    The caller must have shown ``fingerprint(key)`` to the operator and got a yes.
    """
    target = Path(path or get_paths().known_hosts)
    forget(device, target, ssh_config)
    name = host_pattern(*effective_address(device, ssh_config))
    host_field = _hashed_name(name) if hashed else name
    key_text = key.export_public_key("openssh").decode().split()
    entry = f"{host_field} {key_text[0]} {key_text[1]}\n"
    old = read_text(target, "known_hosts") if target.exists() else ""
    if old and not old.endswith("\n"):
        old += "\n"
    atomic_write_text(target, old + entry)
    return target
