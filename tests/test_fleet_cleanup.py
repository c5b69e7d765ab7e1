"""Nothing left behind: a follower that goes takes its ``tail -F`` along, and a benchmark killed
with SIGKILL leaves no sshd, agent, tail or folder (``benchmarks/_cleanup.py``)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ngb.devices import protocol as remote
from ngb.devices.inventory import Device
from ngb.devices.local import LocalTransport

from tests.sshd import SSHD

ROOT = Path(__file__).resolve().parents[1]


def _naming(text: str) -> list[int]:
    """Live (not zombie) processes whose command line or working dir mentions ``text``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                if fh.read().rsplit(")", 1)[-1].split()[0] == "Z":
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read()
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if text.encode() in cmdline or cwd.startswith(text):
            found.append(int(entry))
    return found


def _wait_for(predicate, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
async def test_a_follower_that_stops_takes_its_tail_along(tmp_path: Path) -> None:
    """The agent lives on (a detached run) and writes nothing: tail alone would never notice
    that nobody reads it any more."""
    agent = subprocess.Popen(["sleep", "60"])  # noqa: S607 - stands for a quiet, live agent
    try:
        paths = remote.RunPaths(str(tmp_path), "r1")
        Path(paths.run_dir).mkdir(parents=True)
        Path(paths.events).write_text('{"v": 1, "type": "log", "msg": "x"}\n')
        transport = LocalTransport(Device(name="here", host="localhost", transport="local"))
        stream = transport.stream(remote.follow_argv(paths, 0, agent.pid))
        first = await asyncio.wait_for(stream.__anext__(), 30)
        assert '"log"' in first
        assert _naming(paths.events), "tail should be running"
        await stream.aclose()  # type: ignore[attr-defined]
        assert await asyncio.to_thread(_wait_for, lambda: not _naming(paths.events), 10)
    finally:
        agent.kill()
        agent.wait()


@pytest.mark.sshd
@pytest.mark.timeout(240)
@pytest.mark.skipif(not Path(SSHD).exists(), reason="OpenSSH server not installed")
def test_a_killed_benchmark_leaves_nothing_behind(tmp_path: Path) -> None:
    """``ngb bench loopback_devices`` killed with SIGKILL while its agents run: its sshd, the
    agents, their workers and tails, and its folder are all gone a few seconds later."""
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    bench = subprocess.Popen(
        [sys.executable, "-m", "ngb.sweeps.cli", "bench", "loopback_devices", "--devices", "2",
         "--trials", "3", "--sleep", "20", "--shell", "root"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        agents_run = lambda: len([p for p in _naming(str(tmp_path)) if _is_agent(p)]) >= 2  # noqa: E731
        assert _wait_for(agents_run, 150), "the benchmark's agents did not start"
        assert _naming(str(tmp_path))
    finally:
        bench.send_signal(signal.SIGKILL)
        bench.wait()
    assert _wait_for(lambda: not _naming(str(tmp_path)), 30), [
        _cmdline(p) for p in _naming(str(tmp_path))
    ]
    assert _wait_for(lambda: not list(tmp_path.glob("ngb-loopback-*")), 10)


def _is_agent(pid: int) -> bool:
    """A running agent: ``python <work>/agent-<hash>.pyz run ...``, or one the host's agent
    server forked (the server's command line, in a run dir)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return False
    if len(argv) <= 2 or not argv[1].endswith(b".pyz"):
        return False
    return argv[2] == b"run" or (argv[2] == b"--agent-server" and "/runs/" in cwd)


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
async def test_a_follower_cancelled_while_its_tail_starts_neither_hangs_nor_leaves_it(
    tmp_path: Path,
) -> None:
    """``ngb run --detach`` cancels the follower right after the start: a cancel while asyncio
    connected the command's pipes hung CPython's subprocess wait (1 run in 3 never returned)."""
    agent = subprocess.Popen(["sleep", "60"])  # noqa: S607 - stands for a live agent
    try:
        paths = remote.RunPaths(str(tmp_path), "r1")
        Path(paths.run_dir).mkdir(parents=True)
        Path(paths.events).write_text('{"v": 1, "type": "log", "msg": "x"}\n')
        transport = LocalTransport(Device(name="here", host="localhost", transport="local"))
        for delay in (0.0, 0.001, 0.003, 0.01, 0.03) * 3:
            stream = transport.stream(remote.follow_argv(paths, 0, agent.pid))

            async def consume(lines=stream) -> None:  # type: ignore[no-untyped-def]
                async for _ in lines:
                    pass

            task = asyncio.create_task(consume())
            await asyncio.sleep(delay)
            task.cancel()
            await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 10)
            await asyncio.wait_for(stream.aclose(), 10)  # type: ignore[attr-defined]
        gone = await asyncio.to_thread(_wait_for, lambda: not _naming(paths.events), 10)
        assert gone, [(p, _cmdline(p)[:60]) for p in _naming(paths.events)]
    finally:
        agent.kill()
        agent.wait()
