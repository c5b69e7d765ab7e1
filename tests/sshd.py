"""A real OpenSSH ``sshd`` on loopback ports, as a pytest plugin (registered in tests/conftest.py).

Why a real sshd: host-key checks, quoting, SFTP and dropped links are exactly where fakes lie.

Fixtures
--------
``sshd_server`` (session scope) -> ``SshdServer``, started, with three loopback "devices":

    ========  =================  ============================================================
    name      port               notes
    ========  =================  ============================================================
    dev-a     ``ports[0]``       venv python; groups ``loop``, ``full``
    dev-b     ``ports[1]``       venv python; groups ``loop``, ``full``
    dev-c     ``ports[2]``       python wrapper that cannot import ``openvino`` (so compiler
                                 availability differs); group ``loop``
    ========  =================  ============================================================

    Each device has its own absolute work dir under the server's folder (so devices never share
    files, and nothing lands in the real home). All log in as the current user with a generated
    ed25519 key (``identity_file`` set). The devices' python is the venv's (derived from
    ``sys.executable``) so the agent can import numpy/torch.

``sshd_home`` (function scope) -> ``Path``: a fresh ``NGB_HOME`` holding ``config/devices.toml``
    (the three devices + built-in localhost) and ``config/known_hosts`` (the server's key for every
    port), with ``NGB_HOME`` set and ``HOME`` pointed at an empty folder so the operator's own
    ``~/.ssh`` cannot leak in.

``SshdServer`` API (also usable directly, e.g. for a second server in one test):

- ``SshdServer.create(root, names=("dev-a", ...))`` then ``.start()``; ``.stop()``;
  ``.restart()`` (same ports and host key: connections drop, new ones work);
  ``.regenerate_host_key()`` (then ``.restart()`` to present a *changed* key).
- ``.kill_connections()``: SIGKILL every per-connection sshd process of this server (not the
  listener, and not the commands the sessions started, so a detached agent survives). Every open
  asyncssh connection to it drops; new connections still work. Returns how many were killed.
- ``.devices`` (list of ``ngb.devices.inventory.Device``), ``.device(name)``, ``.ports``,
  ``.host`` ("127.0.0.1"), ``.client_key`` (private key path), ``.known_hosts_text()``,
  ``.write_known_hosts(path)``, ``.make_ngb_home(path, devices=None, trusted=True)``,
  ``.make_devices(n, prefix)`` (more devices on the same server, e.g. 32 for the
  parallel-efficiency benchmark; they share the listening ports round-robin and get their own work
  dirs), ``.log`` (sshd's stderr file).

Skips cleanly (``pytest.skip``) when ``/usr/sbin/sshd`` or ``ssh-keygen`` is missing. Traffic goes
only to 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from ngb.devices.inventory import Device, Inventory

from tests.timm_names import seed_timm_names

SSHD = os.environ.get("NGB_TEST_SSHD", "/usr/sbin/sshd")
HOST = "127.0.0.1"
DEFAULT_NAMES = ("dev-a", "dev-b", "dev-c")
BLOCKED_MODULE = "openvino"  # what dev-c's python cannot import
#: how these devices' agents start trial workers: the suite's cheap start (tests/conftest.py),
#: not a device's default (``fresh``: a new interpreter per worker, ~0.28 CPU-s a no-op trial more)
DEVICE_WORKER_START = "auto"

_SITECUSTOMIZE = '''\
"""Test fixture: this interpreter must not see {mod!r} (a device lacking that compiler)."""
import importlib.abc
import sys

sys.modules[{mod!r}] = None  # `import {mod}` fails and importlib.util.find_spec returns None


class _Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == {mod!r} or name.startswith({mod!r} + "."):
            raise ModuleNotFoundError("No module named %r (blocked by the ngb test sshd)" % name)
        return None


sys.meta_path.insert(0, _Blocked())
'''


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def keygen(path: Path) -> Path:
    """A fresh unencrypted ed25519 key pair at ``path`` / ``path.pub``."""
    for p in (path, path.with_name(path.name + ".pub")):
        p.unlink(missing_ok=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ngb-test", "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return path


@dataclass
class SshdServer:
    root: Path
    ports: list[int]
    names: tuple[str, ...] = DEFAULT_NAMES
    host: str = HOST
    proc: subprocess.Popen | None = None
    devices: list[Device] = field(default_factory=list)

    # -- set-up ---------------------------------------------------------------------------------

    @classmethod
    def create(cls, root: Path, names: tuple[str, ...] = DEFAULT_NAMES) -> SshdServer:
        if not Path(SSHD).exists() or shutil.which("ssh-keygen") is None:
            pytest.skip(f"OpenSSH server not installed ({SSHD} / ssh-keygen missing)")
        root.mkdir(parents=True, exist_ok=True)
        server = cls(root=root, ports=[free_port() for _ in names], names=tuple(names))
        keygen(server.host_key)
        keygen(server.client_key)
        server.authorized_keys.write_text(server.client_key.with_suffix(".pub").read_text())
        server._write_config()
        server._make_devices()
        return server

    @property
    def host_key(self) -> Path:
        return self.root / "ssh_host_ed25519_key"

    @property
    def client_key(self) -> Path:
        return self.root / "id_ed25519"

    @property
    def authorized_keys(self) -> Path:
        return self.root / "authorized_keys"

    @property
    def config(self) -> Path:
        return self.root / "sshd_config"

    @property
    def log(self) -> Path:
        return self.root / "sshd.log"

    def _write_config(self) -> None:
        listen = "".join(f"ListenAddress {self.host}:{p}\n" for p in self.ports)
        self.config.write_text(
            f"{listen}"
            f"HostKey {self.host_key}\n"
            f"PidFile {self.root / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {self.authorized_keys}\n"
            "UsePAM no\n"
            "StrictModes no\n"
            "PubkeyAuthentication yes\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "PermitRootLogin prohibit-password\n"
            "Subsystem sftp internal-sftp\n"
            # many loopback devices connect at once in the benchmarks and fault tests
            "MaxStartups 200:30:400\n"
            "MaxSessions 100\n"
            "LogLevel INFO\n"
            # The suite's cheap worker start (tests/conftest.py) on these devices' agents too, and
            # with it the suite's one OpenMP thread: a forked worker must not inherit libgomp's
            # pool (the reason in tests/conftest.py), and numpy's OpenBLAS, which reads it too,
            # then starts no spinning thread in each agent (71.0-71.4 -> 67.5-68.2 busy CPU-s for
            # the eight sshd test files, -n 2, 2026-11-30).
            # SHLVL=1: bash sources ~/.bashrc for a command sshd starts unless it is a nested
            # shell, and this workstation's ~/.bashrc runs `pyenv init` (~140 processes, ~0.1
            # CPU-s a command). These devices run the venv's python by absolute path and need
            # none of it, so their shells start as nested ones (SHLVL 1 -> 2) and skip it. One
            # SetEnv line: sshd keeps the first one it reads.
            f"SetEnv NGB_WORKER_START={DEVICE_WORKER_START} OMP_NUM_THREADS=1 SHLVL=1\n"
        )

    def _make_python_without(self, module: str) -> str:
        block = self.root / f"no-{module}"
        block.mkdir(exist_ok=True)
        (block / "sitecustomize.py").write_text(_SITECUSTOMIZE.format(mod=module))
        wrapper = self.root / f"python-no-{module}"
        wrapper.write_text(
            "#!/bin/sh\n"
            f'PYTHONPATH="{block}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" "$@"\n'
        )
        wrapper.chmod(0o755)
        return str(wrapper)

    def _device(
        self, name: str, port: int, python: str, groups: list[str], user: str | None = None
    ) -> Device:
        return Device(
            name=name,
            host=self.host,
            port=port,
            user=user or getpass.getuser(),
            identity_file=str(self.client_key),
            python=python,
            workdir=str(self.root / "work" / name),
            groups=groups,
            notes="test sshd device",
        )

    def _make_devices(self) -> None:
        self.devices = []
        last = len(self.names) - 1
        for i, (name, port) in enumerate(zip(self.names, self.ports, strict=True)):
            lacking = i == last and len(self.names) >= 3
            python = self._make_python_without(BLOCKED_MODULE) if lacking else sys.executable
            groups = ["loop"] if lacking else ["loop", "full"]
            self.devices.append(self._device(name, port, python, groups))

    def make_devices(
        self, count: int, prefix: str = "loop", user: str | None = None
    ) -> list[Device]:
        """More devices on this server (ports reused round-robin), e.g. for 32-device benchmarks.

        They are returned, not added to ``.devices``, so one test cannot change another's inventory;
        pass them to ``make_ngb_home(path, devices=...)``. ``user``: log in as another account
        (default: the current user), e.g. one whose login shell is plain ``/bin/sh``.
        """
        return [
            self._device(
                f"{prefix}{i:02d}", self.ports[i % len(self.ports)], sys.executable, [prefix], user
            )
            for i in range(count)
        ]

    def device(self, name: str) -> Device:
        return next(d for d in self.devices if d.name == name)

    # -- process control ------------------------------------------------------------------------

    def start(self, timeout: float = 10.0) -> SshdServer:
        # sshd's privilege-separation dir (Debian's sshd refuses to start as root without it);
        # not root: sshd then runs unprivileged and logs in only this same user
        with contextlib.suppress(PermissionError):
            Path("/run/sshd").mkdir(parents=True, exist_ok=True)
        log = open(self.log, "ab")  # noqa: SIM115 - owned by the child for its lifetime
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.config)],
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        waiting = list(self.ports)
        while waiting:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited ({self.proc.returncode}): {self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"sshd did not listen on {waiting}: {self.log_tail()}")
            try:
                socket.create_connection((self.host, waiting[0]), timeout=0.5).close()
                waiting.pop(0)
            except OSError:
                time.sleep(0.05)
        return self

    def log_tail(self, lines: int = 20) -> str:
        try:
            return " | ".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _connection_processes(self) -> list:
        import psutil

        if self.proc is None or self.proc.poll() is not None:
            return []
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        found = []
        for child in children:
            # one child ending meanwhile (a connection the previous test closed) must not hide
            # the others: a NoSuchProcess from its name() once made this list empty (CI,
            # test_kill_connections_drops_links_but_server_stays: "assert 0 >= 1")
            with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess):
                if child.name().startswith("sshd"):
                    found.append(child)
        return found

    def kill_connections(self) -> int:
        """SIGKILL this server's per-connection sshd processes; the listener keeps running."""
        import psutil

        victims = self._connection_processes()
        for p in victims:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.send_signal(signal.SIGKILL)
        psutil.wait_procs(victims, timeout=5)
        return len(victims)

    def stop(self) -> None:
        if self.proc is None:
            return
        self.kill_connections()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.proc = None

    def restart(self) -> SshdServer:
        self.stop()
        return self.start()

    def regenerate_host_key(self) -> None:
        """A new host key (takes effect at the next ``restart``): the 'reinstalled device' case."""
        keygen(self.host_key)

    # -- client-side files ----------------------------------------------------------------------

    def known_hosts_text(self) -> str:
        key = " ".join(self.host_key.with_name(self.host_key.name + ".pub").read_text().split()[:2])
        return "".join(f"[{self.host}]:{p} {key}\n" for p in self.ports)

    def write_known_hosts(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.known_hosts_text())
        return path

    def make_ngb_home(
        self, path: Path, *, devices: list[Device] | None = None, trusted: bool = True
    ) -> Path:
        """An NGB_HOME with devices (default: ``.devices``) in its inventory, and this server's
        host key in its known_hosts if ``trusted``."""
        config = path / "config"
        config.mkdir(parents=True, exist_ok=True)
        Inventory(self.devices if devices is None else devices).save(config / "devices.toml")
        if trusted:
            self.write_known_hosts(config / "known_hosts")
        seed_timm_names(path)
        return path


@pytest.fixture(scope="session")
def sshd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdServer]:
    server = SshdServer.create(tmp_path_factory.mktemp("sshd"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def sshd_home(sshd_server: SshdServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = sshd_server.make_ngb_home(tmp_path / "ngb-home")
    user_home = tmp_path / "user-home"
    user_home.mkdir()
    monkeypatch.setenv("NGB_HOME", str(home))
    monkeypatch.setenv("HOME", str(user_home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return home
