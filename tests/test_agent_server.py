"""The host's agent server (``ngb.devices.agent_server``): the agents of several devices on one
host are forks of one preloaded process, and every check that tells a run's agent (alive, cancel,
the start's "already running") still tells it, and nothing else."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ngb.devices import protocol as remote
from ngb.devices.bundle import build_agent_zipapp

from tests.cli_helpers import scaled

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux: /proc")

TRIAL = (
    '{"model": "resnet18", "compiler": "noop", "batch": 1, '
    '"measure": {"repetitions": 1, "workers": 1, "verify": false}}\n'
)


def sh(argv: list[str], stdin: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    """The quoted line as sshd's login shell gets it."""
    base = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "NGB_AGENT_SERVER_IDLE_S": "3"}
    return subprocess.run(  # noqa: S603 - our own script
        ["sh", "-c", shlex.join(argv)], input=stdin, capture_output=True, text=True,
        env={**base, **env}, timeout=scaled(120),
    )  # fmt: skip


def argv_of(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().decode().split("\0")[:-1]
    except OSError:
        return []


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def wait_until(predicate, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + scaled(timeout)
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


class Host:
    """Device work dirs on this machine, each with its own copy of one agent archive (as two
    devices of one host have: the claim is per work dir)."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.archive = build_agent_zipapp(tmp_path / "bundle")

    def start(self, device: str, run_id: str, **env: str) -> tuple[remote.RunPaths, int]:
        """A paused run (its agent waits before its first trial, alive) started as a run's
        first start is; -> its paths and the agent's pid."""
        work = self.tmp / device
        work.mkdir(exist_ok=True)
        agent = work / self.archive.name
        if not agent.exists():
            agent.write_bytes(self.archive.read_bytes())
        paths = remote.RunPaths(str(work), run_id)
        Path(paths.run_dir).mkdir(parents=True)
        Path(paths.pause_file).touch()
        argv = remote.start_agent_argv(sys.executable, str(agent), paths, upload=True)
        # a variable of this test's own: its servers are its own (the environment is part of
        # the fingerprint), never another test's that may kill one beside it (xdist --dist load)
        out = sh(argv, TRIAL, NGB_TEST_HOST=str(self.tmp), **env)
        assert out.returncode == 0, out.stderr
        pid = int(out.stdout.strip())
        assert wait_until(lambda: Path(paths.pidfile).is_file(), 60), Path(paths.stderr).read_text()
        return paths, pid

    def stop(self, paths: remote.RunPaths, pid: int) -> None:
        sh(remote.signal_argv(paths, pid, "TERM"))
        assert wait_until(lambda: gone(pid), 30)


def answer(argv: list[str]) -> str:
    return sh(argv).stdout.strip()


def test_two_devices_of_one_host_get_forks_of_one_server_told_apart_by_run(tmp_path: Path) -> None:
    host = Host(tmp_path)
    a, pid_a = host.start("dev-a", "run-a")
    b, pid_b = host.start("dev-b", "run-b")
    server = parent_of(pid_a)
    try:
        assert parent_of(pid_b) == server
        assert argv_of(server)[2:3] == ["--agent-server"]
        assert os.readlink(f"/proc/{server}/cwd") == "/"  # never a run's dir: see IS_AGENT
        assert os.readlink(f"/proc/{pid_a}/cwd") == a.run_dir
        assert Path(a.pidfile).read_text().strip() == str(pid_a)
        assert Path(a.stderr).read_text() == ""
        # each agent is its run's, and only its run's; the server is nobody's agent
        assert answer(remote.alive_argv(pid_a, a.run_dir)) == "alive"
        assert answer(remote.agent_alive_argv(a, None)) == "alive"
        assert answer(remote.alive_argv(pid_a, b.run_dir)) == "dead"
        assert answer(remote.alive_argv(server, a.run_dir)) == "dead"
        with subprocess.Popen(["sleep", "60"], cwd=a.run_dir) as stranger:  # noqa: S607
            try:
                assert answer(remote.alive_argv(stranger.pid, a.run_dir)) == "dead"
            finally:
                stranger.kill()
        # a second start of the run answers its live agent instead of forking another
        archive = str(tmp_path / "dev-a" / host.archive.name)
        again = remote.start_agent_argv(sys.executable, archive, a)
        assert sh(again).stdout.strip() == str(pid_a)
        # cancel reaches it (the kill script's check), and the server reaps it at once
        assert sh(remote.signal_argv(a, None, "TERM")).returncode == 0
        assert wait_until(lambda: gone(pid_a), 30)
        assert '"cancelled":true' in Path(a.events).read_text().replace(" ", "")
        assert not Path(f"/proc/{pid_a}").exists() or wait_until(
            lambda: not Path(f"/proc/{pid_a}").exists(), 5
        )
        ended = sh(remote.wait_then_read_argv(pid_a, a.run_dir, 1.0, a.checkpoint))
        assert ended.stdout.splitlines()[0] == "dead"
    finally:
        host.stop(b, pid_b)


def test_a_killed_server_leaves_its_agents_and_the_next_start_begins_another(
    tmp_path: Path,
) -> None:
    host = Host(tmp_path)
    a, pid_a = host.start("dev-a", "run-a")
    server = parent_of(pid_a)
    os.kill(server, signal.SIGKILL)
    assert wait_until(lambda: gone(server), 10)
    try:
        assert answer(remote.alive_argv(pid_a, a.run_dir)) == "alive"
        b, pid_b = host.start("dev-b", "run-b")
        try:
            assert argv_of(pid_b)[2:3] == ["--agent-server"]
            assert parent_of(pid_b) not in (server, 1)
        finally:
            host.stop(b, pid_b)
    finally:
        host.stop(a, pid_a)


def test_another_environment_gets_a_server_of_its_own_and_direct_start_stays(
    tmp_path: Path,
) -> None:
    host = Host(tmp_path)
    a, pid_a = host.start("dev-a", "run-a", OMP_NUM_THREADS="1")
    b, pid_b = host.start("dev-b", "run-b", OMP_NUM_THREADS="2")  # numpy read it at import
    os.environ[remote.AGENT_START_ENV] = "direct"
    try:
        c, pid_c = host.start("dev-c", "run-c", OMP_NUM_THREADS="1")
    finally:
        del os.environ[remote.AGENT_START_ENV]
    try:
        assert parent_of(pid_a) != parent_of(pid_b)
        assert argv_of(pid_c)[2:4] == ["run", "--trials"]  # its own interpreter, as before
        assert answer(remote.alive_argv(pid_c, c.run_dir)) == "alive"
    finally:
        for paths, pid in ((a, pid_a), (b, pid_b), (c, pid_c)):
            host.stop(paths, pid)


def test_the_server_ends_once_idle(tmp_path: Path) -> None:
    host = Host(tmp_path)
    a, pid_a = host.start("dev-a", "run-a")
    server = parent_of(pid_a)
    host.stop(a, pid_a)
    assert wait_until(lambda: gone(server), 15)  # NGB_AGENT_SERVER_IDLE_S=3 (sh)


OTHER_PYTHON = "/usr/bin/python3"  # one another user may run (the venv may sit in root's home)


@pytest.mark.skipif(
    os.geteuid() != 0 or not os.access(OTHER_PYTHON, os.X_OK),
    reason="needs another user to connect as",
)
def test_the_server_answers_no_other_user(tmp_path: Path) -> None:
    host = Host(tmp_path)
    a, pid_a = host.start("dev-a", "run-a")
    server = parent_of(pid_a)
    try:
        held = {os.readlink(f"/proc/{server}/fd/{fd}") for fd in os.listdir(f"/proc/{server}/fd")}
        names = [  # this test's server's (others may come and go beside it)
            fields[-1].encode()
            for fields in map(str.split, Path("/proc/net/unix").read_text().splitlines()[1:])
            if fields[-1].startswith("@ngb-agent-server/") and f"socket:[{fields[6]}]" in held
        ]
        assert len(names) == 1
        probe = (
            "import socket, sys\n"
            "s = socket.socket(socket.AF_UNIX)\n"
            "s.connect(b'\\0' + sys.argv[1].encode()[1:])\n"
            "s.settimeout(10)\n"
            "try:\n"
            "    s.sendall(b'\\0\\0\\0\\1x')\n"
            "    print(repr(s.recv(100)))\n"
            "except (ConnectionResetError, BrokenPipeError):\n"  # closed, the request unread
            "    print(repr(b''))\n"
        )
        for name in names:
            out = subprocess.run(  # noqa: S603
                [OTHER_PYTHON, "-c", probe, name.decode()], capture_output=True, text=True,
                user=65534, cwd="/", timeout=scaled(30),
            )  # fmt: skip
            assert out.stdout.strip() == "b''", out  # closed unanswered
        assert not gone(server)
    finally:
        host.stop(a, pid_a)


def test_the_fingerprint_ignores_what_differs_between_two_logins_only(monkeypatch) -> None:
    """Two SSH sessions of one user differ in SSH_CONNECTION and the like: one server for both.
    What a preloaded library read at import (OMP_NUM_THREADS), or a lower limit, is another."""
    from ngb.devices import agent_server

    monkeypatch.setenv("SSH_CONNECTION", "127.0.0.1 50000 127.0.0.1 22")
    monkeypatch.setenv("XDG_SESSION_ID", "41")
    base = agent_server.fingerprint("python3", "/w1/agent-abc.pyz")
    monkeypatch.setenv("SSH_CONNECTION", "127.0.0.1 50002 127.0.0.1 22")
    monkeypatch.setenv("XDG_SESSION_ID", "42")
    assert agent_server.fingerprint("python3", "/w2/agent-abc.pyz") == base  # another work dir
    assert agent_server.socket_name(base).startswith(b"\0ngb-agent-server/")
    assert agent_server.fingerprint("python3", "/w1/agent-def.pyz") != base  # another agent
    assert agent_server.fingerprint("/usr/bin/python3", "/w1/agent-abc.pyz") != base
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert agent_server.fingerprint("python3", "/w1/agent-abc.pyz") != base


@pytest.mark.parametrize("idle", ["nan", "inf", "-1", "1e9", "soon"])
def test_a_hostile_idle_time_keeps_the_default(monkeypatch, idle: str) -> None:
    from ngb.devices import agent_server

    monkeypatch.setenv("NGB_AGENT_SERVER_IDLE_S", idle)
    server = agent_server._Server(None, "")  # type: ignore[arg-type]  # only reads its settings
    assert server.idle_s == agent_server.IDLE_S
