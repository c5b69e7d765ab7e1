"""SshTransport: one asyncssh connection to one device.

What it guarantees, and why:

- Host keys are always verified against ~/.ssh/known_hosts plus ngb's own file. An unknown or
  changed key raises ``HostKeyError`` carrying the offered key's SHA256 fingerprint (captured
  during the refused handshake, so no second connection is needed) and whether it *changed*.
- Every remote command is ``shlex.join(argv)``: a device field such as ``python = "x; rm -rf ~"``
  reaches the remote shell as one quoted word and cannot run anything else.
- The operator's ``~/.ssh/config`` (host aliases, User, Port, IdentityFile, ProxyJump) and ssh-agent
  (``SSH_AUTH_SOCK``) apply; inventory fields that are set override them.
- Failures become ``TransportError`` with one line (unreachable, refused, auth, timeout, lost link).
- Concurrent handshakes are bounded twice: in all (``set_handshake_limit``, 64) and per server
  address (``PER_SERVER_HANDSHAKES``, 10: an OpenSSH server's ``MaxStartups`` starts refusing
  unauthenticated connections past 10 by default, so a jump host or one host's many ports are
  not stampeded). A key exchange costs this side ~7 ms of CPU; the handshake's wall time is the
  servers' and the link's, so a fleet's connections overlap: with 8 in all, 32 loopback devices
  took 7.7 s to connect under load, all of them together 1.3 s. The semaphores are kept per
  event loop because asyncio primitives bind to the loop that first waits on them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import weakref
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from ngb.devices.device_checks import first_problem
from ngb.devices.hostkeys import fingerprint, key_status, known_hosts_files
from ngb.devices.inventory import Device, Inventory
from ngb.devices.ssh_connect import ciphers_for, default_ssh_config, map_connect_error
from ngb.devices.transport import CommandResult, HostKeyError, Transport, TransportError

if TYPE_CHECKING:  # asyncssh is imported lazily (the console paints before it loads)
    import asyncssh

DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_KEEPALIVE = 15.0
DEFAULT_HANDSHAKES = int(os.environ.get("NGB_SSH_HANDSHAKES", "64"))
#: most characters ``stream`` takes from the channel at once
_STREAM_CHUNK = 1 << 16
#: handshakes at once with one server address (host, port): sshd's MaxStartups default begins at 10
PER_SERVER_HANDSHAKES = 10
_handshake_limit = DEFAULT_HANDSHAKES
_semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)
_per_server: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[tuple[str, int], asyncio.Semaphore]
] = weakref.WeakKeyDictionary()


def set_handshake_limit(limit: int) -> None:
    """How many SSH handshakes may run at once (per event loop); takes effect for new loops too."""
    global _handshake_limit
    if limit < 1:
        raise ValueError("handshake limit must be >= 1")
    _handshake_limit = limit
    _semaphores.clear()
    _per_server.clear()


def handshake_semaphore() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    sem = _semaphores.get(loop)
    if sem is None:
        sem = _semaphores[loop] = asyncio.Semaphore(_handshake_limit)
    return sem


def server_semaphore(host: str, port: int) -> asyncio.Semaphore:
    """The handshake slots of one server address (``PER_SERVER_HANDSHAKES``)."""
    table = _per_server.setdefault(asyncio.get_running_loop(), {})
    sem = table.get((host, port))
    if sem is None:
        sem = table[(host, port)] = asyncio.Semaphore(min(PER_SERVER_HANDSHAKES, _handshake_limit))
    return sem


class _ConnectOptions(TypedDict, total=False):
    """The keywords of ``asyncssh.connect`` that ngb sets (besides host and client factory)."""

    known_hosts: asyncssh.SSHKnownHosts
    config: list[str]
    connect_timeout: float
    keepalive_interval: float
    keepalive_count_max: int
    port: int
    username: str
    client_keys: list[str]
    tunnel: asyncssh.SSHClientConnection
    encryption_algs: list[str]


def parse_jump(spec: str) -> Device:
    """``[user@]host[:port]`` -> an ad-hoc Device for a jump host that is not in the inventory."""
    user, _, hostport = spec.rpartition("@")
    host, port = hostport, 22
    if hostport.count(":") == 1:
        host, _, port_text = hostport.partition(":")
        try:
            port = int(port_text)
        except ValueError:
            raise TransportError(f"bad jump host {spec!r} (expected [user@]host[:port])") from None
    if not host:
        raise TransportError(f"bad jump host {spec!r} (expected [user@]host[:port])")
    return Device(name=f"jump:{host}", host=host, port=port, user=user or None)


class SshTransport(Transport):
    """The ``Transport`` for ``transport = "ssh"`` devices (see the module docstring)."""

    def __init__(
        self,
        device: Device,
        *,
        known_hosts: Sequence[str | Path] | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        keepalive_interval: float = DEFAULT_KEEPALIVE,
        inventory: Inventory | None = None,
        ssh_config: Sequence[str | Path] | None = None,
    ) -> None:
        self.device = device
        self.name = device.name
        self.known_hosts = None if known_hosts is None else [str(p) for p in known_hosts]
        self.connect_timeout = connect_timeout
        self.keepalive_interval = keepalive_interval
        self.inventory = inventory
        self.ssh_config = None if ssh_config is None else [str(p) for p in ssh_config]
        self.last_exit_status: int | None = None  # of the last stream()
        self.last_stderr = ""  # of the last stream(), at most 64 KiB
        self._conn: asyncssh.SSHClientConnection | None = None
        self._jump: SshTransport | None = None

    # -- connection ----------------------------------------------------------------------------

    def _known_hosts_files(self) -> list[str]:
        if self.known_hosts is None:
            return known_hosts_files()
        return [p for p in self.known_hosts if Path(p).is_file()]

    def _connect_options(self) -> _ConnectOptions:
        import asyncssh

        dev = self.device
        files = self._known_hosts_files()
        config = self.ssh_config if self.ssh_config is not None else default_ssh_config()
        opts: _ConnectOptions = {
            # an empty table (not None) keeps verification on when no file exists yet
            "known_hosts": asyncssh.read_known_hosts(files) if files else asyncssh.SSHKnownHosts(),
            "config": config,
            "connect_timeout": self.connect_timeout,
            "keepalive_interval": self.keepalive_interval,
            "keepalive_count_max": 3,
        }
        ciphers = ciphers_for(config)
        if ciphers is not None:
            opts["encryption_algs"] = ciphers
        if dev.port != 22:
            opts["port"] = dev.port
        if dev.user:
            opts["username"] = dev.user
        problem = first_problem(dev)  # the same refusals as `ngb devices check`
        if problem is not None:
            raise TransportError(f"{dev.name}: {problem}")
        if dev.identity_file:
            opts["client_keys"] = [str(Path(dev.identity_file).expanduser())]
        return opts

    async def open_jump(self) -> SshTransport | None:
        """Connect to the device's jump host (host key verified too); None when it has none."""
        spec = self.device.jump_host
        if not spec:
            return None
        if self.inventory is not None and spec in self.inventory:
            jump_dev = self.inventory.get(spec)
        else:
            jump_dev = parse_jump(spec)
        jump = SshTransport(
            jump_dev,
            known_hosts=self.known_hosts,
            connect_timeout=self.connect_timeout,
            keepalive_interval=self.keepalive_interval,
            inventory=self.inventory,
            ssh_config=self.ssh_config,
        )
        await jump.connect()
        return jump

    async def connect(self) -> None:
        if self._conn is not None:
            return
        import asyncssh

        offered: list[asyncssh.SSHKey] = []

        class _RecordOfferedKey(asyncssh.SSHClient):
            """Called only for a key known_hosts does not trust: remember it, then refuse."""

            def validate_host_public_key(
                self, host: str, addr: str, port: int, key: asyncssh.SSHKey
            ) -> bool:
                offered.append(key)
                return False

        dev = self.device
        # The jump host connects first and outside the handshake slot: it takes a slot of its
        # own, and holding ours while waiting for it could deadlock a limit of 1.
        self._jump = await self.open_jump()
        try:
            async with server_semaphore(dev.host, dev.port), handshake_semaphore():
                opts = self._connect_options()
                if self._jump is not None and self._jump.connection is not None:
                    opts["tunnel"] = self._jump.connection
                self._conn = await asyncio.wait_for(
                    asyncssh.connect(dev.host, client_factory=_RecordOfferedKey, **opts),
                    timeout=self.connect_timeout + 5,
                )
        except asyncssh.HostKeyNotVerifiable as exc:
            await self._close_jump()
            raise self._host_key_error(offered, exc) from None
        except BaseException as exc:
            await self._close_jump()
            if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
                raise
            raise map_connect_error(dev, exc, self.connect_timeout) from None

    def _host_key_error(self, offered: list[asyncssh.SSHKey], exc: Exception) -> HostKeyError:
        dev = self.device
        if not offered:
            reason = getattr(exc, "reason", exc)
            return HostKeyError(f"{dev.name}: host key not trusted ({reason})", dev.host)
        key = offered[-1]
        fp = fingerprint(key)
        changed = key_status(dev, key, self._known_hosts_files(), self.ssh_config) == "changed"
        if changed:
            msg = (
                f"{dev.name}: HOST KEY CHANGED for {dev.host}:{dev.port} (now {fp}); refusing to "
                f"connect. If the device was reinstalled, run `ngb devices trust {dev.name}`"
            )
        else:
            msg = (
                f"{dev.name}: unknown host key {fp} for {dev.host}:{dev.port}; check it and run "
                f"`ngb devices trust {dev.name}`"
            )
        return HostKeyError(msg, host=dev.host, fingerprint=fp, changed=changed)

    def _require(self) -> asyncssh.SSHClientConnection:
        if self._conn is None:
            raise TransportError(f"{self.name}: not connected")
        return self._conn

    def _lost(self, exc: BaseException) -> TransportError:
        import asyncssh

        if isinstance(exc, asyncssh.DisconnectError | asyncssh.ChannelOpenError):
            return TransportError(f"{self.name}: connection lost: {exc.reason}")
        return TransportError(f"{self.name}: connection lost: {type(exc).__name__}: {exc}")

    async def _close_jump(self) -> None:
        if self._jump is not None:
            await self._jump.close()
            self._jump = None

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            with contextlib.suppress(TimeoutError, OSError):
                await asyncio.wait_for(conn.wait_closed(), timeout=5)
        await self._close_jump()

    @property
    def connection(self) -> asyncssh.SSHClientConnection | None:
        """The underlying ``asyncssh.SSHClientConnection`` (None until connected)."""
        return self._conn

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    # -- commands ------------------------------------------------------------------------------

    async def run(
        self, argv: Sequence[str], *, timeout: float | None = None, input: str | None = None
    ) -> CommandResult:
        import asyncssh

        conn = self._require()
        command = shlex.join(map(str, argv))
        try:
            process = await conn.create_process(command)
            if input:
                # A command may exit without reading its input (the launch that answers
                # "need-agent", a busy device's refusal): the channel is then closed before the
                # input went, which is no lost link -- its exit status tells what happened.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    process.stdin.write(input)
                    process.stdin.write_eof()
            result = await process.wait(check=False, timeout=timeout)
        except asyncssh.TimeoutError:
            raise TransportError(
                f"{self.name}: command timed out after {timeout:g}s: {shlex.join(argv[:2])}"
            ) from None
        except (asyncssh.Error, OSError, EOFError) as exc:
            raise self._lost(exc) from None
        status = result.exit_status
        if status is None and result.exit_signal is None:
            # the channel closed without a status: the link died while the command ran
            raise TransportError(f"{self.name}: connection lost during {shlex.join(argv[:2])}")
        if status is None or status < 0:
            status = -1  # killed by a signal on the device
        return CommandResult(status, _text(result.stdout), _text(result.stderr))

    def stream(self, argv: Sequence[str]) -> AsyncIterator[str]:
        return self._stream([str(a) for a in argv])

    async def _stream(self, argv: list[str]) -> AsyncIterator[str]:
        import asyncssh

        conn = self._require()
        self.last_exit_status, self.last_stderr = None, ""
        try:
            process = await conn.create_process(shlex.join(map(str, argv)))
        except (asyncssh.Error, OSError) as exc:
            raise self._lost(exc) from None

        async def drain_stderr() -> None:
            # Read stderr concurrently so a chatty command cannot stall on a full SSH window.
            while chunk := await process.stderr.readline():
                self.last_stderr = (self.last_stderr + chunk)[-65536:]

        stderr_task = asyncio.ensure_future(drain_stderr())
        try:
            # Whatever has arrived, split into lines here: asyncssh's readline() is a coroutine
            # step and a buffer scan per line, and a fleet's event streams are ~70 lines per
            # device for 4 short trials, often several in one packet. A line's pieces are
            # joined once its newline comes (a long line costs its length, not its length
            # times its chunks); a last line without its newline comes at EOF, as readline()
            # gave it.
            pieces: list[str] = []
            while chunk := await process.stdout.read(_STREAM_CHUNK):
                if "\n" not in chunk:
                    pieces.append(chunk)
                    continue
                lines = chunk.split("\n")
                lines[0] = "".join([*pieces, lines[0]])
                pieces = [lines.pop()]
                for line in lines:
                    yield line.rstrip("\r")
            if rest := "".join(pieces):
                yield rest.rstrip("\r")
            await process.wait()
            self.last_exit_status = process.exit_status
            if process.exit_signal is not None:
                self.last_exit_status = -1  # killed by a signal on the device
            elif process.exit_status is None:
                # EOF without an exit status: the link died under the command, which (if it was
                # started detached) may still be running on the device.
                raise TransportError(f"{self.name}: connection lost while streaming")
        except (asyncssh.Error, OSError, EOFError) as exc:
            raise self._lost(exc) from None
        finally:
            if process.exit_status is None and not process.is_closing():
                process.close()  # stop the remote command when the consumer stops early
            stderr_task.cancel()

    # -- files ---------------------------------------------------------------------------------

    async def put(self, local_path: str, remote_path: str) -> None:
        await self._sftp("put", str(local_path), str(remote_path))

    async def get(self, remote_path: str, local_path: str) -> None:
        await self._sftp("get", str(remote_path), str(local_path))

    async def _sftp(self, op: str, src: str, dst: str) -> None:
        import asyncssh

        conn = self._require()
        try:
            async with conn.start_sftp_client() as sftp:
                await getattr(sftp, op)(src, dst)
        except asyncssh.SFTPError as exc:
            raise TransportError(f"{self.name}: {op} {src} -> {dst} failed: {exc.reason}") from None
        except FileNotFoundError as exc:
            raise TransportError(f"{self.name}: {op} {src}: no such file ({exc})") from None
        except (asyncssh.Error, OSError, EOFError) as exc:
            raise self._lost(exc) from None


def _text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def make_transport(
    device: Device,
    *,
    known_hosts: Sequence[str | Path] | None = None,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    keepalive_interval: float = DEFAULT_KEEPALIVE,
    inventory: Inventory | None = None,
    ssh_config: Sequence[str | Path] | None = None,
) -> Transport:
    """The right transport for a device: LocalTransport for ``local``, SshTransport (with these
    settings) otherwise; a Slurm partition's slot goes through its login host's transport."""
    if device.transport == "slurm":
        from ngb.devices.slurm_transport import make_slurm_transport

        return make_slurm_transport(device, inventory, make_transport, known_hosts=known_hosts,
                                    connect_timeout=connect_timeout, ssh_config=ssh_config,
                                    keepalive_interval=keepalive_interval)  # fmt: skip
    if device.is_local:
        from ngb.devices.local import LocalTransport

        return LocalTransport(device)
    return SshTransport(
        device,
        known_hosts=known_hosts,
        connect_timeout=connect_timeout,
        keepalive_interval=keepalive_interval,
        inventory=inventory,
        ssh_config=ssh_config,
    )
