"""The one-round-trip first start (``remote.launch_argv``) and the store's ``batch()``.

Why these matter: every SSH exec pays for the device's login shell, so the first start of a run
is one remote command (plus an SFTP upload and one more command only when the agent is missing).
That command must still verify the agent's sha256, keep device values out of the shell script,
and resolve the work dir itself.
"""

from __future__ import annotations

import hashlib
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ngb.core.base.errors import ConfigError, NgbError
from ngb.devices import protocol as remote
from ngb.devices.inventory import Device, Inventory
from ngb.devices.ssh import make_transport
from ngb.sweeps.run.orchestrator import Orchestrator
from ngb.sweeps.spec.sweep import loads_sweep
from ngb.sweeps.store.database import Store

FAKE_AGENT = "import sys, json; print(json.dumps({'type': 'log', 'argv': sys.argv}))\n"


def sh(argv: list[str], stdin: str = "", home: Path | None = None) -> subprocess.CompletedProcess:
    """Run the quoted line the way sshd's login shell gets it: ``sh -c "<shlex.join(argv)>"``."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home or "/nonexistent")}
    return subprocess.run(
        ["sh", "-c", shlex.join(argv)], input=stdin, capture_output=True, text=True, env=env
    )


def wait_for_line(path: Path, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return remote.parse_jsonl(path.read_text())[0]
        time.sleep(0.05)
    raise AssertionError(f"nothing appeared in {path}")


@pytest.fixture
def agent(tmp_path: Path) -> tuple[Path, str]:
    src = tmp_path / "src" / "agent-test.pyz"
    src.parent.mkdir()
    src.write_text(FAKE_AGENT)
    return src, hashlib.sha256(src.read_bytes()).hexdigest()


def test_launch_script_is_constant_and_device_values_stay_arguments():
    nasty_py = "python3; touch /tmp/pwned"
    nasty_dir = "/tmp/$(touch /tmp/pwned)/`id`"
    argv = remote.launch_argv(nasty_py, nasty_dir, "agent-x.pyz", "ab" * 32, "r1", isolate="x")
    other = remote.launch_argv("python3", "/w", "agent-y.pyz", "cd" * 32, "r2")
    assert argv[:2] == ["sh", "-c"] and argv[2] == other[2]
    for value in ("pwned", "`id`", "agent-x", "r1"):
        assert value not in argv[2]
    assert argv[5:10] == [nasty_dir, "agent-x.pyz", "ab" * 32, "", nasty_py]
    assert shlex.split(shlex.join(argv)) == argv
    with pytest.raises(NgbError):
        remote.launch_argv("python3", "/w", "../agent.pyz", "ab" * 32, "r1")
    with pytest.raises(NgbError):
        remote.launch_argv("python3", "/w", "agent.pyz", "ab" * 32, "../../etc")


def test_launch_asks_for_the_agent_then_installs_and_starts_it(tmp_path, agent):
    src, digest = agent
    canary = tmp_path / "pwned"
    workdir = tmp_path / f"w;touch {canary}" / "$(touch x)"
    argv = remote.launch_argv(sys.executable, str(workdir), src.name, digest, "r1")
    trials = '{"key": "k1"}\n'

    first = sh(argv, trials)
    assert first.returncode == 0, first.stderr
    assert remote.parse_launch(first.stdout) == (str(workdir), None)  # nothing there yet
    assert not (workdir / "runs" / "r1" / "trials.jsonl").exists()

    part = workdir / f"{src.name}.123.part"
    part.write_bytes(src.read_bytes())  # what the SFTP upload does
    argv = remote.launch_argv(sys.executable, str(workdir), src.name, digest, "r1", part=str(part))
    second = sh(argv, trials)
    assert second.returncode == 0, second.stderr
    got_dir, pid = remote.parse_launch(second.stdout)
    assert got_dir == str(workdir) and isinstance(pid, int)
    assert not part.exists() and (workdir / src.name).read_bytes() == src.read_bytes()

    run_dir = workdir / "runs" / "r1"
    logged = wait_for_line(run_dir / "events.jsonl")
    assert (run_dir / "trials.jsonl").read_text() == trials
    # The placeholder became the resolved work dir in every agent argument.
    args = logged["argv"]
    assert args[0] == str(workdir / src.name)
    assert args[1:4] == ["run", "--trials", str(run_dir / "trials.jsonl")]
    assert args[args.index("--cache-dir") + 1] == str(workdir / "cache")
    assert not any("@WORK@" in a for a in args)
    assert not canary.exists() and not (tmp_path / "x").exists()


def test_launch_refuses_a_corrupt_upload_and_a_changed_agent(tmp_path, agent):
    src, digest = agent
    workdir = tmp_path / "w"
    workdir.mkdir()
    part = workdir / "bad.part"
    part.write_text("not the agent\n")
    argv = remote.launch_argv(sys.executable, str(workdir), src.name, digest, "r1", part=str(part))
    res = sh(argv, "{}\n")
    assert res.returncode == 4 and "corrupt" in res.stderr
    assert not part.exists() and not (workdir / src.name).exists()
    # An agent file with the right name but other content is not trusted either.
    (workdir / src.name).write_text("tampered\n")
    res = sh(remote.launch_argv(sys.executable, str(workdir), src.name, digest, "r1"), "{}\n")
    assert res.returncode == 0 and remote.parse_launch(res.stdout)[1] is None
    assert not (workdir / "runs" / "r1" / "trials.jsonl").exists()


def test_launch_copies_the_agent_another_work_dir_of_the_machine_holds(tmp_path, agent):
    """``copy:`` installs from another device's work dir after the same check as an upload; a
    copy that is missing or wrong is no error, only the answer that the agent is needed."""
    src, digest = agent
    first, second, third = (tmp_path / n for n in ("w1", "w2", "w3"))
    first.mkdir()
    (first / src.name).write_bytes(src.read_bytes())
    part = remote.copy_part(str(first / src.name))
    res = sh(remote.launch_argv(sys.executable, str(second), src.name, digest, "r1", part=part),
             "{}\n")  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert remote.parse_launch(res.stdout)[1] is not None
    assert (second / src.name).read_bytes() == src.read_bytes()
    assert (first / src.name).exists()  # copied, not moved
    wait_for_line(second / "runs" / "r1" / "events.jsonl")
    (first / src.name).write_text("changed since\n")
    for source in (first / src.name, tmp_path / "nowhere" / src.name):
        argv = remote.launch_argv(sys.executable, str(third), src.name, digest, "r1",
                                  part=remote.copy_part(str(source)))  # fmt: skip
        res = sh(argv, "{}\n")
        assert res.returncode == 0 and "need-agent" in res.stdout.split(), res.stderr
        assert not (third / src.name).exists() and not list(third.glob("*.part"))
    # a work dir that has the agent already keeps it, whatever the copy's source is now
    gone = remote.copy_part(str(tmp_path / "nowhere" / src.name))
    argv = remote.launch_argv(sys.executable, str(second), src.name, digest, "r2", part=gone)
    res = sh(argv, "{}\n")
    assert res.returncode == 0 and remote.parse_launch(res.stdout)[1] is not None, res.stdout
    assert (second / src.name).read_bytes() == src.read_bytes()
    wait_for_line(second / "runs" / "r2" / "events.jsonl")
    with pytest.raises(ConfigError):
        remote.copy_part("relative/agent.pyz")


def test_launch_expands_a_tilde_work_dir_on_the_device(tmp_path, agent):
    src, digest = agent
    home = tmp_path / "home dir"
    (home / "ngb").mkdir(parents=True)
    (home / "ngb" / src.name).write_bytes(src.read_bytes())
    res = sh(remote.launch_argv(sys.executable, "~/ngb", src.name, digest, "r1"), "{}\n", home)
    assert res.returncode == 0, res.stderr
    workdir, pid = remote.parse_launch(res.stdout)
    assert workdir == str(home / "ngb") and pid is not None
    wait_for_line(home / "ngb" / "runs" / "r1" / "events.jsonl")


def test_launch_names_a_python_that_cannot_start_the_agent(tmp_path, agent):
    src, digest = agent
    workdir = tmp_path / "w"
    workdir.mkdir()
    (workdir / src.name).write_bytes(src.read_bytes())
    old = tmp_path / "python2"  # an interpreter that starts but cannot read the agent
    old.write_text("#!/bin/sh\necho 'SyntaxError: invalid syntax' >&2\nexit 1\n")
    old.chmod(0o755)
    for python, why in [(str(tmp_path / "no" / "python3"), "not found"), (str(old), "SyntaxError")]:
        res = sh(remote.launch_argv(python, str(workdir), src.name, digest, "r1"), "{}\n")
        assert res.returncode == remote.EXIT_BAD_PYTHON
        assert res.stderr.count("\n") == 1 and why in res.stderr
        assert res.stderr.startswith(f"python '{python}' cannot run on the device (")
        assert not (workdir / "runs").exists()  # nothing was started
    ok = sh(remote.launch_argv(sys.executable, str(workdir), src.name, digest, "r1"), "{}\n")
    assert ok.returncode == 0 and remote.parse_launch(ok.stdout)[1] is not None


async def test_a_bad_python_fails_the_device_at_once_with_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("NGB_HOME", str(tmp_path / "home"))
    bad = str(tmp_path / "nowhere" / "python3")
    device = Device(name="localhost", host="localhost", transport="local", python=bad,
                    workdir=str(tmp_path / "device"))  # fmt: skip
    store = Store(tmp_path / "results.duckdb")
    orch = Orchestrator(store, Inventory([device]))
    run_id = await orch.start(one_trial_sweep(), "localhost", isolate="inprocess")
    summary = await orch.wait(run_id)
    await orch.close()
    state = summary["devices"]["localhost"]
    assert state["state"] == "failed" and state["restarts"] == 0, state
    assert f"python '{bad}' cannot run on the device" in state["error"]
    assert "\n" not in state["error"]


class CountingTransport:
    """A real transport that records what the orchestrator asks of it."""

    def __init__(self, inner, log: list[str]) -> None:
        self._inner, self._log = inner, log

    def __getattr__(self, name):
        return getattr(self._inner, name)

    async def run(self, argv, **kwargs):
        self._log.append(argv[3] if argv[:2] == ["sh", "-c"] else argv[0])
        return await self._inner.run(argv, **kwargs)

    async def put(self, local_path, remote_path):
        self._log.append("put")
        return await self._inner.put(local_path, remote_path)


def one_trial_sweep():
    return loads_sweep(
        """
name = "launch"
[measure]
warmup_iters = 0
warmup_s = 0
min_iters = 1
min_duration_s = 0
repetitions = 1
verify = false
[[matrix]]
models = ["resnet18"]
compilers = ["noop"]
batches = [1]
"""
    )


async def test_first_start_costs_one_command_once_the_agent_is_deployed(tmp_path, monkeypatch):
    monkeypatch.setenv("NGB_HOME", str(tmp_path / "home"))
    device = Device(name="localhost", host="localhost", transport="local",
                    python=sys.executable, workdir=str(tmp_path / "device"))  # fmt: skip
    store = Store(tmp_path / "results.duckdb")
    calls: list[list[str]] = []
    for _ in range(2):
        log: list[str] = []
        calls.append(log)
        orch = Orchestrator(
            store, Inventory([device]),
            transport_factory=lambda d, log=log: CountingTransport(make_transport(d), log),
        )  # fmt: skip
        run_id = await orch.start(one_trial_sweep(), "localhost", isolate="inprocess")
        summary = await orch.wait(run_id)
        await orch.close()
        assert summary["devices"]["localhost"]["state"] == "finished", summary
        _, rows = store.select("SELECT count(*) FROM trials WHERE run_id = ?", [run_id])
        assert rows[0][0] == 1
    # Fresh device: ask, upload, install + start. Deployed: one command starts the run.
    assert calls[0][:3] == ["ngb-launch", "put", "ngb-launch"]
    assert calls[1][0] == "ngb-launch" and "put" not in calls[1]
    assert calls[1].count("ngb-launch") == 1


async def test_the_devices_of_one_machine_get_the_agent_over_ssh_once(tmp_path, monkeypatch):
    """Four devices of one machine (a work dir each): one uploads, three copy it there, each
    with one launch (they wait for the first, not ask first); a second run, the agents in
    place, is one launch each and no upload."""
    monkeypatch.setenv("NGB_HOME", str(tmp_path / "home"))
    devices = [
        Device(name=f"d{i}", host="localhost", transport="local", python=sys.executable,
               workdir=str(tmp_path / f"device{i}"))
        for i in range(4)
    ]  # fmt: skip
    store = Store(tmp_path / "results.duckdb")
    log: list[str] = []

    async def run_all() -> None:
        log.clear()
        orch = Orchestrator(
            store, Inventory(devices),
            transport_factory=lambda d: CountingTransport(make_transport(d), log),
        )  # fmt: skip
        run_id = await orch.start(one_trial_sweep(), "d0,d1,d2,d3", isolate="inprocess")
        summary = await orch.wait(run_id)
        await orch.close()
        assert {d["state"] for d in summary["devices"].values()} == {"finished"}, summary

    await run_all()
    assert log.count("put") == 1, log
    assert log.count("ngb-launch") == 2 + 3  # the first: asked, then uploaded; the others: copied
    agents = [p for i in range(4) for p in (tmp_path / f"device{i}").glob("agent-*.pyz")]
    assert len(agents) == 4 and len({a.read_bytes() for a in agents}) == 1
    await run_all()
    assert log.count("put") == 0 and log.count("ngb-launch") == 4, log


def test_store_batch_shares_one_open_and_releases_the_file(tmp_path):
    store = Store(tmp_path / "r.duckdb")
    with store.batch(), store.batch():  # re-entrant: a batch inside a batch is fine
        assert store.create_run("r1", "demo", "", ["dev"], 3, {})
        store.set_run_status("r1", "finished")
    assert store.run("r1")["status"] == "finished"
    # Closed afterwards: another process can open the file read-write.
    code = f"import duckdb; duckdb.connect({str(store.path)!r}).execute('SELECT 1')"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
