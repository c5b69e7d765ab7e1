"""The orchestrator on the built-in local transport: real agent, real subprocesses, real DuckDB.

The agent runs detached (``setsid``) exactly as on a remote device; only the transport differs
(``LocalTransport`` instead of SSH — the SSH paths are covered by ``test_faults.py``).
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ngb.core.base.errors import NgbError, UnknownNameError
from ngb.core.records import events as ev
from ngb.devices import protocol as remote
from ngb.devices.inventory import Device, Inventory
from ngb.sweeps.run.events import RunEvent, Subscription
from ngb.sweeps.run.orchestrator import Orchestrator
from ngb.sweeps.store.database import Store

from tests.cli_helpers import ngb, ngb_argv
from tests.noop_sweeps import noop_sweep
from tests.timm_names import seed_timm_names

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("NGB_HOME", str(tmp_path / "home"))
    workdir = tmp_path / "device"
    inventory = Inventory(
        [Device(name="localhost", host="localhost", transport="local",
                python=sys.executable, workdir=str(workdir))]
    )  # fmt: skip
    store = Store(tmp_path / "results.duckdb")
    return inventory, store, workdir


def trial_counts(store: Store, run_id: str) -> dict[tuple[str, str], int]:
    cols, rows = store.select(
        "SELECT device, key, count(*) FROM trials WHERE run_id = ? GROUP BY ALL", [run_id]
    )
    return {(d, k): n for d, k, n in rows}


async def collect(sub: Subscription, out: list[RunEvent]) -> None:
    async for item in sub:
        out.append(item)


async def wait_for_done(orch: Orchestrator, run_id: str, device: str, n: int) -> None:
    while orch.device_states(run_id)[device]["done"] < n:
        await asyncio.sleep(0.05)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is dead for our purpose.
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


# ---------------------------------------------------------------- a whole run


async def test_local_run_stores_every_trial_once_and_streams_sane_events(env):
    inventory, store, workdir = env
    sweep = noop_sweep(5, failing=1)
    orch = Orchestrator(store, inventory)
    sub = orch.subscribe()
    seen: list[RunEvent] = []
    consumer = asyncio.create_task(collect(sub, seen))
    run_id = await orch.start(sweep, "localhost", isolate="inprocess")
    summary = await orch.wait(run_id)
    await orch.close()
    await consumer

    assert summary["status"] == "finished"
    dev = summary["devices"]["localhost"]
    assert (dev["state"], dev["done"], dev["failed"], dev["total"]) == ("finished", 6, 1, 6)

    counts = trial_counts(store, run_id)
    assert sorted(k for _, k in counts) == sorted(t.key for t in sweep.trials())
    assert set(counts.values()) == {1}
    failed = store.trials(run_id=run_id, status="failed")
    assert len(failed) == 1 and "asked to fail" in failed[0]["error"]
    assert store.run(run_id)["status"] == "finished"
    row = store.run_devices(run_id)[0]
    assert (row["state"], row["n_done"], row["n_failed"]) == ("finished", 6, 1)
    # The run directory is torn down after ingest (keep=False); the agent itself stays deployed.
    assert not (workdir / "runs" / run_id).exists()
    assert list(workdir.glob("agent*.pyz"))

    # Event order: connection states first, then the agent's run, then finished, then the run.
    conn = [e.state for e in seen if e.kind == "connection"]
    assert conn[0] == "connecting" and "deploying" in conn and conn[-1] == "finished"
    assert conn.index("deploying") < conn.index("running")
    agent = [e.event["type"] for e in seen if e.kind == "agent"]
    assert agent[0] == ev.RUN_STARTED and agent[-1] == ev.RUN_DONE
    assert agent.count(ev.TRIAL_DONE) == 5 and agent.count(ev.TRIAL_FAILED) == 1
    kinds = [e.kind for e in seen]
    assert kinds[0] == "run" and seen[0].state == "started"
    assert kinds[-1] == "run" and seen[-1].state == "finished"
    assert "ingest" in kinds
    i_done = max(
        i for i, e in enumerate(seen) if e.kind == "agent" and e.event["type"] == ev.RUN_DONE
    )
    i_fin = next(i for i, e in enumerate(seen) if e.kind == "connection" and e.state == "finished")
    assert i_done < i_fin
    # Progress counters only go up and end complete.
    dones = [e.done for e in seen if e.device == "localhost" and e.done is not None]
    assert dones == sorted(dones) and dones[-1] == 6


async def test_keep_leaves_the_run_dir_with_checkpoint_and_event_log(env):
    inventory, store, workdir = env
    orch = Orchestrator(store, inventory)
    run_id = await orch.start(noop_sweep(2), ["localhost"], keep=True, isolate="inprocess")
    await orch.wait(run_id)
    await orch.close()
    run_dir = workdir / "runs" / run_id
    assert len(remote.parse_checkpoint((run_dir / "checkpoint.jsonl").read_text())) == 2
    lines = remote.parse_jsonl((run_dir / "events.jsonl").read_text())
    assert lines[-1]["type"] == ev.RUN_DONE
    # The recorded offset is the whole event log: nothing left unconsumed.
    extra = store.run_devices(run_id)[0]["extra"]
    assert extra["offset"] == (run_dir / "events.jsonl").stat().st_size


# ---------------------------------------------------------------- resume, restart, cancel


async def test_attach_after_the_orchestrator_is_discarded_mid_run(env):
    inventory, store, workdir = env
    sweep = noop_sweep(8, compile_s=0.25)
    first = Orchestrator(store, inventory)
    run_id = await first.start(sweep, "localhost", isolate="inprocess")
    await wait_for_done(first, run_id, "localhost", 2)
    pid = first.device_states(run_id)["localhost"]["pid"]
    await first.close()  # the workstation goes away; the agent does not
    assert pid_alive(pid)
    assert store.run_devices(run_id)[0]["state"] == "detached"
    assert store.run(run_id)["status"] == "running"

    second = Orchestrator(store, inventory)
    sub = second.subscribe(run_id)
    seen: list[RunEvent] = []
    consumer = asyncio.create_task(collect(sub, seen))
    await second.attach(run_id)
    summary = await second.wait(run_id)
    await second.close()
    await consumer

    assert summary["devices"]["localhost"]["state"] == "finished"
    counts = trial_counts(store, run_id)
    assert len(counts) == 8 and set(counts.values()) == {1}
    assert store.run(run_id)["status"] == "finished"
    # The second orchestrator continued from the recorded offset: it never saw the first
    # trials' events again, and no run_started from the beginning of the log.
    started = [e.event.get("label") for e in seen if e.kind == "agent"
               and e.event["type"] == ev.TRIAL_STARTED]  # fmt: skip
    assert "resnet18/noop/b1" not in started
    assert [e.event["type"] for e in seen if e.kind == "agent"].count(ev.RUN_STARTED) == 0


async def test_two_followers_of_one_run_store_everything_once(env):
    """A second `ngb attach` while the first still follows: both end cleanly, no duplicates."""
    inventory, store, _ = env
    first = Orchestrator(store, inventory)
    run_id = await first.start(noop_sweep(6, compile_s=0.2), "localhost", isolate="inprocess")
    await wait_for_done(first, run_id, "localhost", 1)
    second = Orchestrator(store, inventory)
    await second.attach(run_id)
    one, two = await asyncio.gather(first.wait(run_id), second.wait(run_id))
    await first.close()
    await second.close()
    assert one["devices"]["localhost"]["state"] == "finished", one
    assert two["devices"]["localhost"]["state"] == "finished", two
    counts = trial_counts(store, run_id)
    assert len(counts) == 6 and set(counts.values()) == {1}
    row = store.run_devices(run_id)[0]
    assert (row["state"], row["n_done"]) == ("finished", 6)


async def test_a_follower_that_does_not_own_the_device_leaves_its_end_to_the_owner(env):
    """The owner slow to finish: the other follower, there first, must not end the device.

    It used to: it removed the run dir while the owner still needed it, and could not write the
    row (only the owner does), so the owner found the dir gone, the row not final, and failed.
    """
    inventory, store, workdir = env
    first = Orchestrator(store, inventory)
    run_id = await first.start(noop_sweep(3, compile_s=0.2), "localhost", isolate="inprocess")
    await wait_for_done(first, run_id, "localhost", 1)
    second = Orchestrator(store, inventory, owner_poll=0.2)
    await second.attach(run_id)
    finish = first._finish_if_complete

    async def slow_finish(*args, **kwargs):
        await asyncio.sleep(1.5)  # the second follower sees the agent gone well before
        assert (workdir / "runs" / run_id).is_dir(), "the run dir went before the owner ended"
        return await finish(*args, **kwargs)

    first._finish_if_complete = slow_finish  # type: ignore[method-assign]
    one, two = await asyncio.gather(first.wait(run_id), second.wait(run_id))
    await first.close()
    await second.close()
    assert one["devices"]["localhost"]["state"] == "finished", one
    assert two["devices"]["localhost"]["state"] == "finished", two
    row = store.run_devices(run_id)[0]
    assert (row["state"], row["n_done"]) == ("finished", 3)
    assert not (workdir / "runs" / run_id).exists()  # the owner removed it


async def test_killed_agent_is_restarted_and_resumes_from_its_checkpoint(env):
    inventory, store, _ = env
    orch = Orchestrator(store, inventory, max_restarts=3)
    run_id = await orch.start(noop_sweep(6, compile_s=0.2), "localhost", isolate="inprocess")
    await wait_for_done(orch, run_id, "localhost", 2)
    os.kill(orch.device_states(run_id)["localhost"]["pid"], signal.SIGKILL)
    summary = await orch.wait(run_id)
    await orch.close()
    dev = summary["devices"]["localhost"]
    assert dev["state"] == "finished" and dev["restarts"] == 1
    counts = trial_counts(store, run_id)
    assert len(counts) == 6 and set(counts.values()) == {1}
    errors = store.errors(run_id)
    assert any(e["kind"] == "agent" and "restart 1/3" in e["message"] for e in errors)


async def test_cancel_stops_the_agent_and_records_cancelled(env):
    inventory, store, _ = env
    orch = Orchestrator(store, inventory)
    run_id = await orch.start(noop_sweep(20, compile_s=0.3), "localhost", isolate="inprocess")
    await wait_for_done(orch, run_id, "localhost", 1)
    pid = orch.device_states(run_id)["localhost"]["pid"]
    summary = await orch.cancel(run_id)
    await orch.close()
    assert summary["status"] == "cancelled"
    assert summary["devices"]["localhost"]["state"] == "cancelled"
    assert not pid_alive(pid)
    assert store.run(run_id)["status"] == "cancelled"
    n = len(store.trials(run_id=run_id))
    assert 1 <= n < 20  # what finished before the cancel is kept, nothing twice
    assert set(trial_counts(store, run_id).values()) == {1}


async def test_cancel_from_another_orchestrator(env):
    """`ngb cancel RUN` from a second process: found in the store, agent signalled via pidfile."""
    inventory, store, _ = env
    first = Orchestrator(store, inventory)
    run_id = await first.start(noop_sweep(20, compile_s=0.3), "localhost", isolate="inprocess")
    await wait_for_done(first, run_id, "localhost", 1)
    pid = first.device_states(run_id)["localhost"]["pid"]
    await first.close()
    second = Orchestrator(store, inventory)
    summary = await second.cancel(run_id)
    await second.close()
    assert summary["devices"]["localhost"]["state"] == "cancelled"
    assert not pid_alive(pid)
    assert store.run(run_id)["status"] == "cancelled"


async def test_pause_holds_the_next_trial_until_resume(env):
    inventory, store, workdir = env
    orch = Orchestrator(store, inventory)
    sub = orch.subscribe()
    seen: list[RunEvent] = []
    consumer = asyncio.create_task(collect(sub, seen))
    run_id = await orch.start(noop_sweep(4, compile_s=0.2), "localhost", isolate="inprocess")
    await wait_for_done(orch, run_id, "localhost", 1)
    await orch.pause(run_id)
    assert (workdir / "runs" / run_id / "pause").exists()
    while not any(e.kind == "agent" and e.event.get("msg") == "paused" for e in seen):
        await asyncio.sleep(0.05)
    done_when_paused = orch.device_states(run_id)["localhost"]["done"]
    await asyncio.sleep(1.0)
    assert orch.device_states(run_id)["localhost"]["done"] == done_when_paused < 4
    await orch.resume(run_id)
    summary = await orch.wait(run_id)
    await orch.close()
    await consumer
    assert summary["devices"]["localhost"]["done"] == 4


# ---------------------------------------------------------------- device errors


async def test_unknown_device_is_a_one_line_error_and_creates_no_run(env):
    inventory, store, _ = env
    orch = Orchestrator(store, inventory)
    with pytest.raises(UnknownNameError, match="unknown device or group 'nope'"):
        await orch.start(noop_sweep(1), "localhost,nope")
    assert store.runs() == []
    await orch.close()


async def test_unreachable_device_fails_alone(env, tmp_path):
    inventory, store, _ = env
    # A closed loopback port: connection refused at once.
    inventory.add(Device(name="gone", host="127.0.0.1", port=1, workdir=str(tmp_path / "g")))
    orch = Orchestrator(store, inventory, backoff=(0.05, 0.1), connect_timeout=3)
    run_id = await orch.start(noop_sweep(2), "localhost,gone", isolate="inprocess")
    summary = await orch.wait(run_id)
    await orch.close()
    assert summary["devices"]["localhost"]["state"] == "finished"
    gone = summary["devices"]["gone"]
    assert gone["state"] == "failed" and gone["done"] == 0
    assert "\n" not in gone["error"] and gone["error"]
    assert summary["status"] == "failed"
    assert len(store.trials(run_id=run_id, device="localhost")) == 2
    assert any(e["kind"] == "connection" for e in store.errors(run_id, "gone"))


async def test_hostile_device_fields_cannot_inject(env, tmp_path, monkeypatch):
    """Work dir and interpreter path full of shell syntax: a strange path, never a command."""
    _, store, _ = env
    monkeypatch.chdir(tmp_path)  # an injected relative `touch pwned` would land under here
    nasty_dir = tmp_path / "w d;touch pwned;$(touch pwned)`touch pwned`'\"|touch pwned"
    py_dir = tmp_path / "py;touch pwned &&"
    py_dir.mkdir()
    python = py_dir / "python$(touch pwned)"
    # A wrapper, not a symlink: a symlinked venv python would not find the venv's packages.
    python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    python.chmod(0o755)
    inventory = Inventory(
        [
            Device(
                name="localhost",
                host="localhost",
                transport="local",
                python=str(python),
                workdir=str(nasty_dir),
            )
        ]
    )
    orch = Orchestrator(store, inventory)
    run_id = await orch.start(noop_sweep(2), "localhost", isolate="inprocess", keep=True)
    summary = await orch.wait(run_id)
    await orch.close()
    assert summary["devices"]["localhost"]["state"] == "finished", summary
    assert list(tmp_path.rglob("pwned")) == []
    assert (nasty_dir / "runs" / run_id / "checkpoint.jsonl").exists()


# ---------------------------------------------------------------- pure pieces


def test_start_command_keeps_device_values_out_of_the_script():
    nasty_py = "python3; touch /tmp/pwned"
    nasty_dir = "/tmp/$(touch /tmp/pwned)/`id`"
    paths = remote.RunPaths(nasty_dir, "r1")
    argv = remote.start_agent_argv(nasty_py, f"{nasty_dir}/agent.pyz", paths, isolate="subprocess")
    assert argv[:2] == ["sh", "-c"]
    script = argv[2]
    for value in ("pwned", "touch", "/tmp", "`id`"):
        assert value not in script
    # The script is a constant: other devices get the very same text.
    other = remote.start_agent_argv("python3", "/w/agent.pyz", remote.RunPaths("/w", "r2"))
    assert other[2] == script
    # Device values travel only as positional parameters, each one argv word.
    assert argv[5:8] == [paths.run_dir, nasty_py, f"{nasty_dir}/agent.pyz"]
    # What a remote shell makes of the quoted line is exactly this argv again.
    assert shlex.split(shlex.join(argv)) == argv
    for build in (
        remote.follow_argv(paths, 10, 123),
        remote.signal_argv(paths, 5),
        remote.teardown_argv(paths),
        remote.pause_argv(paths),
    ):
        assert shlex.split(shlex.join(build)) == build
    with pytest.raises(NgbError):
        remote.RunPaths("/w", "../../etc")
    with pytest.raises(ValueError):
        remote.signal_argv(paths, 5, "TERM; reboot")


def test_start_script_through_a_real_shell_runs_nothing_it_should_not(tmp_path):
    """The quoted line as an SSH server's login shell gets it: `sh -c "<shlex.join(argv)>"`."""
    canary = tmp_path / "pwned"
    run_dir = tmp_path / f"r;touch {canary}" / "runs" / "r1"
    run_dir.mkdir(parents=True)
    fake_agent = tmp_path / "agent.py"
    fake_agent.write_text(
        "import sys, json; print(json.dumps({'type': 'log', 'argv': sys.argv}))\n"
    )
    paths = remote.RunPaths(str(tmp_path / f"r;touch {canary}"), "r1")
    argv = remote.start_agent_argv(sys.executable, str(fake_agent), paths)
    out = subprocess.run(["sh", "-c", shlex.join(argv)], capture_output=True, text=True, check=True)
    pid = int(out.stdout.strip())
    while pid_alive(pid):
        pass
    logged = remote.parse_jsonl((run_dir / "events.jsonl").read_text())
    assert logged[0]["argv"][1:3] == ["run", "--trials"]
    assert logged[0]["argv"][3] == paths.trials
    assert not canary.exists()


def test_event_log_reader_counts_bytes_and_rereads_a_torn_tail():
    reader = remote.EventLogReader(100)
    good = '{"type":"log","msg":"é"}'
    assert reader.feed(good)["msg"] == "é"
    assert reader.offset == 100 + len(good.encode()) + 1
    assert reader.feed('{"type":"lo') is None  # maybe a fragment
    mark = reader.offset
    assert mark == 100 + len(good.encode()) + 1  # not committed yet
    assert reader.feed('{"type":"log"}') is not None  # the fragment was a whole (bad) line
    assert reader.offset == mark + len('{"type":"lo') + 1 + len('{"type":"log"}') + 1
    assert reader.feed("garbage at the end") is None
    reader.end_of_stream()
    assert reader.feed('{"type":"x"}') is not None  # the fragment is not counted
    assert reader.offset == mark + 12 + 15 + 13


def test_checkpoint_parser_ignores_torn_lines():
    text = '{"key":"a","status":"ok"}\n{"key":"b","status":"failed"}\n{"key":"c","sta'
    assert sorted(remote.parse_checkpoint(text)) == ["a", "b"]


def test_run_paths_and_home_expansion():
    paths = remote.RunPaths("/home/u/.ngb/", "run-1")
    assert paths.run_dir == "/home/u/.ngb/runs/run-1"
    assert paths.checkpoint == "/home/u/.ngb/runs/run-1/checkpoint.jsonl"
    assert remote.expand_home("~/.ngb", "/home/u") == "/home/u/.ngb"
    assert remote.expand_home("~", "/home/u") == "/home/u"
    assert remote.expand_home("/abs", "/home/u") == "/abs"


async def test_slow_subscriber_loses_old_cpu_samples_never_results():
    orch = Orchestrator(store=None, inventory=None)
    sub = orch.subscribe()
    sub._maxsize = 10
    for i in range(50):
        orch._publish(RunEvent("r", "d", "agent", event={"type": ev.CPU, "percent": i}))
        if i % 5 == 0:
            orch._publish(RunEvent("r", "d", "agent", event={"type": ev.TRIAL_DONE, "n": i}))
    items = []
    while (item := sub.get_nowait()) is not None:
        items.append(item)
    done = [e.event["n"] for e in items if e.event["type"] == ev.TRIAL_DONE]
    assert done == list(range(0, 50, 5))  # every result, in order
    cpu = [e.event["percent"] for e in items if e.event["type"] == ev.CPU]
    assert cpu and cpu == sorted(cpu) and cpu[-1] == 49  # the newest samples survive
    assert sub.dropped == 50 - len(cpu)
    other = orch.subscribe(run_id="other")
    orch._publish(RunEvent("r", "d", "run", "started"))
    assert other.get_nowait() is None  # filtered by run
    await orch.close()


# ---------------------------------------------------------------- the CLI, as real processes


@pytest.fixture
def cli_env(tmp_path):
    """An NGB_HOME whose localhost runs the venv python in a scratch work dir, and a sweep file."""
    home = tmp_path / "home"
    inventory = Inventory(
        [Device(name="localhost", host="localhost", transport="local",
                python=sys.executable, workdir=str(tmp_path / "device"))]
    )  # fmt: skip
    inventory.save(home / "config" / "devices.toml")
    seed_timm_names(home)
    sweep_file = tmp_path / "noop.toml"
    sweep_file.write_text(noop_sweep(6, compile_s=0.3).to_toml())
    env = {**os.environ, "NGB_HOME": str(home), "COLUMNS": "120"}
    env.pop("NGB_DB", None)
    return env, sweep_file, home


def agent_of_first_run(store: Store, home: Path, timeout: float = 60) -> tuple[str, int]:
    """(run id, agent pid) of the first run an ``ngb run`` subprocess stores, once its agent is
    up: the orchestrator records the pid as soon as the agent starts (trials reach the store
    only with the writer's next flush, 10 s later on localhost), and from then on the run holds
    the device and Ctrl-C leaves an agent behind."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        runs = store.runs() if (home / "data" / "results.duckdb").exists() else []
        devices = store.run_devices(runs[0]["run_id"]) if runs else []
        pid = devices[0]["extra"].get("pid") if devices else None
        if pid and pid_alive(pid):
            return runs[0]["run_id"], pid
        time.sleep(0.1)
    raise AssertionError(f"no run's agent came up within {timeout:.0f} s")


def test_cli_run_detach_then_attach_in_other_processes(cli_env):
    env, sweep_file, home = cli_env
    out = ngb("run", str(sweep_file), "--devices", "localhost", "--detach",
              "--isolate", "inprocess", env=env)  # fmt: skip
    assert out.returncode == 0, out.stderr
    run_id = out.stdout.split("run ")[1].split()[0]
    assert "ngb attach" in out.stdout
    att = ngb("attach", run_id, env=env)
    assert att.returncode == 0, att.stderr
    assert "finished" in att.stdout
    # The verdicts of the six trials (two repetitions each), counted under the run's table.
    assert "verdicts: " in att.stdout and " of 6 trials VALID" in att.stdout
    status = ngb("status", run_id, "--json", env=env)
    assert status.returncode == 0, status.stderr
    info = json.loads(status.stdout)
    assert info["status"] == "finished"
    assert info["devices"][0]["done"] == info["devices"][0]["total"] == 6
    listing = ngb("status", env=env)
    assert run_id in listing.stdout


def test_cli_ctrl_c_detaches_and_cancel_stops(cli_env):
    env, sweep_file, home = cli_env
    sweep_file.write_text(noop_sweep(120, compile_s=0.3).to_toml())  # 36 s or more
    proc = subprocess.Popen(
        ngb_argv("run", str(sweep_file), "-d", "localhost", "--isolate", "inprocess"),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    store = Store(home / "data" / "results.duckdb")
    run_id, pid = agent_of_first_run(store, home)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert "Detached" in stdout and "ngb attach" in stdout
    assert store.run_devices(run_id)[0]["extra"]["pid"] == pid
    assert pid_alive(pid)  # Ctrl-C left the agent running
    live = ngb("status", run_id, "--live", "--json", env=env)
    assert live.returncode == 0, live.stderr
    assert json.loads(live.stdout)["devices"][0]["agent"] == "alive"
    out = ngb("cancel", run_id, env=env)
    assert out.returncode == 0, out.stderr
    assert "cancelled" in out.stdout
    assert not pid_alive(pid)
    assert store.run(run_id)["status"] == "cancelled"


def test_cli_unknown_names_are_one_line_errors(cli_env):
    env, sweep_file, _ = cli_env
    out = ngb("run", str(sweep_file), "--devices", "localhots", env=env)
    assert out.returncode != 0
    assert "unknown device or group 'localhots'" in out.stderr and "localhost" in out.stderr
    assert "Traceback" not in out.stderr
    out = ngb("run", "no-such-sweep", "--devices", "localhost", env=env)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    out = ngb("attach", "nope-run", env=env)
    assert out.returncode != 0 and "unknown run" in out.stderr and "Traceback" not in out.stderr
    out = ngb("status", "nope-run", env=env)
    assert out.returncode != 0 and "Traceback" not in out.stderr


def test_liveness_check_calls_a_zombie_dead():
    """An exited but unreaped agent must count as dead, or its device would wait forever."""
    zombie = subprocess.Popen(["true"])  # not waited for: a zombie once it exits
    while Path(f"/proc/{zombie.pid}/stat").read_text().split(")")[-1].split()[0] != "Z":
        time.sleep(0.01)
    live = subprocess.Popen(["sleep", "30"])
    try:

        def ask(pid):
            argv = remote.alive_argv(pid)
            return subprocess.run(argv, capture_output=True, text=True).stdout.strip()

        assert ask(zombie.pid) == "dead"
        assert ask(live.pid) == "alive"
        assert ask(None) == "dead"
    finally:
        live.kill()
        live.wait()
        zombie.wait()


def test_a_reused_pid_is_not_the_agent_nor_gets_its_cancel_nor_keeps_the_device(tmp_path):
    """A pid file outlives its agent and pids come round again (pid_max 32768: a CI run refused a
    device because a dead agent's pid had been given to another process). A live process that
    is not the run's agent is dead for the liveness check, gets no signal, holds no claim."""
    from ngb.sweeps.run import device_claim

    run_id = "r-20261130-000000-abcd"
    paths = remote.RunPaths(str(tmp_path), run_id)
    Path(paths.run_dir).mkdir(parents=True)
    stranger = subprocess.Popen(["sleep", "60"])  # the reused pid: alive, some other program
    agent = subprocess.Popen(  # the agent's arguments hold its run id
        [sys.executable, "-c", "import time; time.sleep(60)", "--run-id", run_id]
    )
    try:
        Path(paths.pidfile).write_text(f"{stranger.pid}\n")
        Path(tmp_path, device_claim.CLAIM_FILE).write_text(f"{run_id} 0\n")
        # A process that answers kill -0 and is gone from /proc the next moment (reaped in
        # between): dead. The shell's kill stands in for that instant.
        reaped = remote.IS_AGENT + 'kill() { return 0; }\nngb_is_agent 4194303 "$1"; echo $?\n'
        for run in (run_id, ""):
            answer = subprocess.run(["sh", "-c", reaped, "t", run], capture_output=True, text=True)
            assert answer.stdout.strip() == "1", (run, answer)

        def sh(argv: list[str]) -> subprocess.CompletedProcess:
            return subprocess.run(argv, capture_output=True, text=True, timeout=30)

        assert sh(remote.alive_argv(stranger.pid, run_id)).stdout.strip() == "dead"
        assert sh(remote.alive_argv(stranger.pid)).stdout.strip() == "alive"  # no run id: any
        assert sh(remote.agent_alive_argv(paths, None)).stdout.strip() == "dead"
        assert sh(remote.signal_argv(paths, None, "TERM")).returncode == 3
        assert stranger.poll() is None  # not signalled
        for garbage in ("0", "00", "-1", "1 2", "x"):  # kill 0 would signal this very shell's group
            Path(paths.pidfile).write_text(f"{garbage}\n")
            assert sh(remote.agent_alive_argv(paths, None)).stdout.strip() == "dead", garbage
            assert sh(remote.signal_argv(paths, None, "TERM")).returncode == 3, garbage
        Path(paths.pidfile).write_text(f"{stranger.pid}\n")
        who = sh(device_claim.who_argv(str(tmp_path)))
        assert who.stdout.strip() == "free", who
        fake_agent = tmp_path / "agent.py"
        fake_agent.write_text("pass\n")
        started = sh(remote.start_agent_argv(sys.executable, str(fake_agent), paths))
        assert started.returncode == 0 and int(started.stdout) != stranger.pid  # a new agent

        # the same files naming the real agent (its arguments hold the run id)
        Path(paths.pidfile).write_text(f"{agent.pid}\n")
        assert sh(remote.alive_argv(agent.pid, run_id)).stdout.strip() == "alive"
        assert sh(remote.agent_alive_argv(paths, None)).stdout.strip() == "alive"
        who = sh(device_claim.who_argv(str(tmp_path)))
        assert device_claim.parse_answer("d", who.stdout) == device_claim.Holder(run_id, agent.pid)
        assert sh(remote.signal_argv(paths, None, "TERM")).returncode == 0
        assert agent.wait(10) == -signal.SIGTERM
    finally:
        for proc in (stranger, agent):
            proc.kill()
            proc.wait()


def test_the_wait_for_an_agents_exit_runs_on_the_device_then_reads_its_checkpoint(tmp_path):
    """After run_done the workstation waits in one remote command (not an SSH exec every 0.1 s),
    which also prints the checkpoint (one SSH session for both): ``dead`` soon after the agent
    exits, ``alive`` once the limit is spent, then the file; exit status 3 without one."""
    run_id = "r-20261130-000000-abcd"
    checkpoint = tmp_path / "checkpoint.jsonl"
    checkpoint.write_text('{"key": "a"}\n{"key": "b"}')  # the last line without its newline
    soon = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(0.3)", "--run-id", run_id]
    )
    late = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)", "--run-id", run_id]
    )

    def wait_read(pid: int | None, run: str, limit: float, path: Path) -> tuple[int, str]:
        out = subprocess.run(remote.wait_then_read_argv(pid, run, limit, str(path)),
                             capture_output=True, text=True, timeout=30)  # fmt: skip
        return out.returncode, out.stdout

    try:
        began = time.monotonic()
        assert wait_read(soon.pid, run_id, 10.0, checkpoint) == (
            0,
            'dead\n{"key": "a"}\n{"key": "b"}',
        )
        assert time.monotonic() - began < 5.0
        began = time.monotonic()
        assert wait_read(late.pid, run_id, 0.3, tmp_path / "none.jsonl") == (3, "alive\n")
        assert time.monotonic() - began >= 0.3
        for pid, run in ((late.pid, "another-run"), (None, run_id)):  # not this run's agent
            assert wait_read(pid, run, 10.0, tmp_path / "none.jsonl") == (3, "dead\n"), pid
    finally:
        for proc in (soon, late):
            proc.kill()
            proc.wait()


async def test_a_run_streamed_whole_ends_without_a_checkpoint_read(env, monkeypatch):
    """After the goodbye the follower reads on until ``tail --pid`` ends the stream (the agent
    exited): with every result streamed, a device's end is its release alone (one SSH session
    less a device). Where that end does not come in time, the end waits on the device and reads
    the checkpoint as before. Either way every trial is stored once and the agent is gone."""
    from ngb.sweeps.run import device_io

    inventory, store, _ = env
    reads: list[str] = []
    read_checkpoint = device_io.read_checkpoint

    async def counted(dev, **kwargs):  # type: ignore[no-untyped-def]
        reads.append(dev.name)
        return await read_checkpoint(dev, **kwargs)

    monkeypatch.setattr(device_io, "read_checkpoint", counted)
    waits = device_io.exit_seen_wait_s
    for exit_seen_s, checkpoint_reads in ((waits(device_io.FOLLOW_POLL_S), 0), (0.0, 1)):
        monkeypatch.setattr(device_io, "exit_seen_wait_s", lambda poll_s, s=exit_seen_s: s)
        reads.clear()
        sweep = noop_sweep(3, failing=1)
        orch = Orchestrator(store, inventory)
        run_id = await orch.start(sweep, "localhost", isolate="inprocess")
        summary = await orch.wait(run_id)
        await orch.close()
        dev = summary["devices"]["localhost"]
        assert (dev["state"], dev["done"], dev["failed"]) == ("finished", 4, 1), exit_seen_s
        counts = trial_counts(store, run_id)
        assert sorted(k for _, k in counts) == sorted(t.key for t in sweep.trials())
        assert set(counts.values()) == {1}
        assert len(reads) == checkpoint_reads, exit_seen_s
        row = store.run_devices(run_id)[0]
        assert row["state"] == "finished" and not pid_alive(int(row["extra"]["pid"]))


# ---------------------------------------------------------------- the store misbehaves (issue 8)


async def test_a_result_that_can_never_be_stored_becomes_a_failed_trial(tmp_path):
    from ngb.core.records.types import Stats, TrialResult, TrialSpec
    from ngb.sweeps.run.state import DeviceRun
    from ngb.sweeps.run.writer import RunWriter

    store = Store(tmp_path / "r.duckdb")
    store.create_run("r1", "demo", "", ["d"], 2)
    dev = DeviceRun("r1", Device(name="d", host="localhost", transport="local"), {"a", "b"})
    events: list[RunEvent] = []
    broken: list[str] = []
    writer = RunWriter(store, device_of=lambda run, name: dev, publish=events.append,
                       on_unwritable=broken.append)  # fmt: skip

    def result(batch: int) -> TrialResult:
        spec = TrialSpec(model="resnet18", compiler="noop", batch=1).to_dict()
        spec["batch"] = batch  # what a sweep that slipped past validation would send
        rep = {"iters": 1, "elapsed_s": 1.0, "throughput": 1.0}
        return TrialResult(
            key=f"k{batch}", spec=spec, throughput=Stats(mean=1.0), repetitions=[rep]
        )

    good, poison = result(4), result(2_147_483_648)
    for r in (good, poison):
        dev.results[r.key] = True
        writer.pending_for(dev).results[r.key] = r
    await writer.flush()  # no exception, no retry loop
    await writer.flush()
    rows = {t["key"]: t for t in store.trials(run_id="r1")}
    assert rows[good.key]["status"] == "ok" and rows[good.key]["batch"] == 4
    bad = rows[poison.key]
    assert bad["status"] == "failed" and bad["error_kind"] == "ingest"
    assert "2147483648" in bad["error"] and "\n" not in bad["error"]
    assert bad["extra"]["spec"]["batch"] == 2_147_483_648  # what was sent, kept as text
    assert dev.results == {good.key: True, poison.key: False} and dev.failed == 1
    assert store.run_devices("r1")[0]["n_failed"] == 1
    assert any(e.kind == "connection" and "not stored" in e.message for e in events)
    assert not broken and writer.broken is None
    assert len(store.trials(run_id="r1")) == 2


async def test_an_unwritable_store_stops_following_with_one_line_and_attach_resumes(env):
    inventory, store, workdir = env
    sweep = noop_sweep(6, compile_s=0.3)
    orch = Orchestrator(store, inventory)
    run_id = await orch.start(sweep, "localhost", isolate="inprocess")
    await wait_for_done(orch, run_id, "localhost", 1)
    _, ddl = await asyncio.to_thread(
        store.query,
        "SELECT sql FROM duckdb_tables() WHERE table_name = 'trials' UNION ALL "
        "SELECT sql FROM duckdb_views() WHERE NOT internal AND view_name IN "
        "('results', 'failures', 'run_progress')",
    )
    await asyncio.to_thread(
        store.query, "DROP VIEW results; DROP VIEW failures; DROP VIEW run_progress; "
        "DROP TABLE trials", allow_write=True,
    )  # fmt: skip
    summary = await asyncio.wait_for(orch.wait(run_id), 60)
    await orch.close()
    assert summary["status"] == "failed"
    assert "results database cannot be written" in summary["error"]
    assert f"ngb attach {run_id}" in summary["error"] and "\n" not in summary["error"]
    assert summary["devices"]["localhost"]["state"] == "detached"
    assert (workdir / "runs" / run_id / "checkpoint.jsonl").exists()  # kept on the device

    fix = ";\n".join(sql for (sql,) in ddl)
    await asyncio.to_thread(store.query, fix, allow_write=True)  # the operator fixes it
    again = Orchestrator(store, inventory)
    await again.attach(run_id)
    summary = await asyncio.wait_for(again.wait(run_id), 60)
    await again.close()
    assert summary["status"] == "finished", summary
    counts = trial_counts(store, run_id)
    assert len(counts) == 6 and set(counts.values()) == {1}


async def test_a_long_read_elsewhere_is_waited_for_quietly(env, caplog):
    inventory, _, _ = env
    store = Store(env[1].path, write_timeout_s=0.3)
    orch = Orchestrator(store, inventory, flush_interval=0.2, local_flush_interval=0.2)
    sub = orch.subscribe()
    seen: list[RunEvent] = []
    consumer = asyncio.create_task(collect(sub, seen))
    run_id = await orch.start(noop_sweep(6, compile_s=0.3), "localhost", isolate="inprocess")
    await wait_for_done(orch, run_id, "localhost", 1)
    reader = (  # another process holds the file for 3 s (as a long `ngb query` would)
        "import duckdb, sys, time\n"
        "while True:\n"
        "    try:\n"
        "        c = duckdb.connect(sys.argv[1], read_only=True)\n"
        "        break\n"
        "    except duckdb.IOException:\n"
        "        time.sleep(0.01)\n"
        "print('open', flush=True)\n"
        "time.sleep(3)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", reader, str(store.path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert await asyncio.to_thread(holder.stdout.readline) == "open\n"
        summary = await asyncio.wait_for(orch.wait(run_id), 90)
    finally:
        holder.wait(30)
        await orch.close()
        await consumer
    assert summary["status"] == "finished"
    counts = trial_counts(store, run_id)
    assert len(counts) == 6 and set(counts.values()) == {1}
    store_events = [(e.state, e.message) for e in seen if e.kind == "store"]
    assert store_events and store_events[0][0] == "waiting" and store_events[-1][0] == "ok"
    assert all("\n" not in m for _, m in store_events)
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]


# ---------------------------------------------------------------- one run per device (issue 10)


@pytest.mark.timeout(300)  # five CLI processes, one of them a deliberately long run
def test_one_run_per_device_across_processes(cli_env, tmp_path):
    env, sweep_file, home = cli_env
    # Long enough (>= 60 s) that it is surely still running when the second start comes,
    # however slow a shared machine is.
    sweep_file.write_text(noop_sweep(30, compile_s=2.0).to_toml())
    small = tmp_path / "small.toml"
    small.write_text(noop_sweep(2, name="small").to_toml())
    first = subprocess.Popen(  # flushing every second, not 10 s: its first trials stored sooner
        ngb_argv("run", str(sweep_file), "-d", "localhost", "--isolate", "inprocess"),
        env={**env, "NGB_LOCAL_FLUSH_S": "1"}, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    store = Store(home / "data" / "results.duckdb")
    try:
        first_id, pid = agent_of_first_run(store, home)
        # and its first trials stored (the writer's first flush), for the cancel at the end
        start = time.monotonic()
        while not store.trials(run_id=first_id) and time.monotonic() - start < 60:
            time.sleep(0.3)

        second = ngb("run", str(small), "-d", "localhost", "--isolate", "inprocess", env=env)
        assert second.returncode == 1
        out = second.stdout + second.stderr
        assert f"localhost is busy with run {first_id} (agent pid {pid})" in out, out
        assert "Traceback" not in out
        # refused: nothing ran beside the first run, and no failed run is left in the store
        assert [r["run_id"] for r in store.runs()] == [first_id]
        assert pid_alive(pid)  # the first run held the device all along
    finally:
        first.kill()  # the first workstation crashes...
        first.wait(30)
    os.kill(pid, signal.SIGKILL)  # ...and so does its agent: the claim lapses with it
    while pid_alive(pid):
        time.sleep(0.05)
    third = ngb("run", str(small), "-d", "localhost", "--isolate", "inprocess", env=env)
    assert third.returncode == 0 and "finished" in third.stdout, third.stdout + third.stderr
    # A run that ended released the device at once.
    fourth = ngb("run", str(small), "-d", "localhost", "--isolate", "inprocess", env=env)
    assert fourth.returncode == 0 and "finished" in fourth.stdout, fourth.stdout + fourth.stderr
    # The first run is still there to deal with: cancelled, what it stored is kept once.
    cancel = ngb("cancel", first_id, timeout=120, env=env)
    assert cancel.returncode == 0, cancel.stdout + cancel.stderr
    counts = trial_counts(store, first_id)
    assert counts and set(counts.values()) == {1}


async def test_a_busy_device_is_refused_in_process_and_every_run_is_listed(env, tmp_path):
    from ngb.sweeps.run.device_claim import DeviceBusy

    inventory, store, _ = env
    orch = Orchestrator(store, inventory)
    run_id = await orch.start(noop_sweep(20, compile_s=0.3), "localhost", isolate="inprocess")
    await wait_for_done(orch, run_id, "localhost", 1)
    n_runs = len(store.runs())
    with pytest.raises(DeviceBusy, match=f"busy with run {run_id}"):
        await orch.start(noop_sweep(2, name="other"), "localhost")
    assert len(store.runs()) == n_runs  # refused before anything was recorded

    listed = {r.run_id: r for r in await orch.list_runs()}
    assert listed[run_id].followed and listed[run_id].status == "running"
    (dev,) = listed[run_id].devices
    assert dev.state == "running" and dev.total == 20 and dev.agent is None
    await orch.detach(run_id)  # the agent goes on, unfollowed

    # Another workstation with another results file sees it on the device, not in its store.
    elsewhere = Orchestrator(Store(tmp_path / "other.duckdb"), inventory)
    (seen,) = await elsewhere.list_runs(probe=True)
    assert (seen.run_id, seen.in_store, seen.status) == (run_id, False, "elsewhere")
    assert seen.live and seen.devices[0].agent == "running"
    await elsewhere.close()

    probe = {r.run_id: r for r in await orch.list_runs(probe=True)}
    assert not probe[run_id].followed and probe[run_id].devices[0].agent == "running"
    summary = await orch.cancel(run_id)  # what the console's Runs view does
    assert summary["status"] == "cancelled"
    probe = {r.run_id: r for r in await orch.list_runs(probe=True)}
    assert probe[run_id].status == "cancelled" and probe[run_id].devices[0].agent == "not running"
    await orch.close()


async def test_a_refused_start_does_not_keep_the_device_claimed(tmp_path, monkeypatch):
    from ngb.sweeps.run.device_claim import CLAIM_FILE

    monkeypatch.setenv("NGB_HOME", str(tmp_path / "home"))
    workdir = tmp_path / "device"
    bad = Device(name="localhost", host="localhost", transport="local",
                 python=str(tmp_path / "nowhere" / "python3"), workdir=str(workdir))  # fmt: skip
    store = Store(tmp_path / "results.duckdb")
    orch = Orchestrator(store, Inventory([bad]))
    summary = await orch.wait(await orch.start(noop_sweep(1), "localhost"))
    await orch.close()
    assert summary["devices"]["localhost"]["state"] == "failed"
    assert not (workdir / CLAIM_FILE).exists()  # released: the next run may start at once
    good = Device(name="localhost", host="localhost", transport="local",
                  python=sys.executable, workdir=str(workdir))  # fmt: skip
    orch = Orchestrator(store, Inventory([good]))
    summary = await orch.wait(await orch.start(noop_sweep(1), "localhost", isolate="inprocess"))
    await orch.close()
    assert summary["devices"]["localhost"]["state"] == "finished", summary
    assert not (workdir / CLAIM_FILE).exists()


def test_writes_are_spaced_out_while_this_machine_measures(tmp_path):
    """A local device's trials share the CPU with the writer: it flushes every 10 s, not 1 s."""
    from ngb.sweeps.run.events import FINISHED
    from ngb.sweeps.run.state import DeviceRun
    from ngb.sweeps.run.writer import RunWriter

    local = DeviceRun("r1", Device(name="here", host="localhost", transport="local"), {"a"})
    remote_dev = DeviceRun("r1", Device(name="gpu", host="gpu.lab", transport="ssh"), {"a"})
    devices = {"here": local, "gpu": remote_dev}
    writer = RunWriter(Store(tmp_path / "w.duckdb"), device_of=lambda run, name: devices[name],
                       publish=lambda e: None, on_unwritable=lambda m: None)  # fmt: skip
    assert writer.interval() == 1.0  # nothing buffered yet
    writer.pending_for(remote_dev)
    assert writer.interval() == 1.0  # a remote device alone: the usual period
    writer.pending_for(local)
    assert writer.interval() == 10.0
    local.state = FINISHED  # done measuring: back to the usual period
    assert writer.interval() == 1.0


async def test_a_timed_flush_waits_while_a_local_worker_times(tmp_path):
    """No DuckDB write beside a local worker's warm-up or timed loops: a timed flush waits for
    the phase to end; a wake (a state change) does not wait."""
    import asyncio

    from ngb.core.records import events as ev
    from ngb.sweeps.run.state import DeviceRun
    from ngb.sweeps.run.writer import RunWriter, record_agent_event

    local = DeviceRun("r1", Device(name="here", host="localhost", transport="local"), {"a"})
    local.state = "running"
    store = Store(tmp_path / "w.duckdb")
    store.create_run("r1", "p", "", ["here"], 1)
    writer = RunWriter(store, device_of=lambda run, name: local, publish=lambda e: None,
                       on_unwritable=lambda m: None, flush_interval=0.05,
                       local_flush_interval=0.05, max_defer_s=30)  # fmt: skip
    flushes: list[bool] = []
    real_flush = writer.flush_quietly

    async def counting() -> bool:
        flushes.append(local.timing)
        return await real_flush()

    writer.flush_quietly = counting  # type: ignore[method-assign]
    pending = writer.pending_for(local)
    record_agent_event(local, pending, {"type": ev.PHASE, "key": "a", "phase": "warmup"})
    assert local.timing and writer.local_timing()
    writer.ensure_running()
    await asyncio.sleep(0.5)  # ten flush periods: all held
    assert flushes == []
    record_agent_event(local, pending, {"type": ev.PHASE, "key": "a", "phase": "measure"})
    await asyncio.sleep(0.2)
    assert flushes == [] and local.timing
    writer.wake()  # a state change is written at once, timing or not
    await asyncio.sleep(0.2)
    assert flushes[:1] == [True]
    flushes.clear()
    record_agent_event(local, pending, {"type": ev.PHASE, "key": "a", "phase": "build"})
    await asyncio.sleep(0.3)  # the gap: the held flushes go through
    assert flushes and not any(flushes)
    record_agent_event(local, pending, {"type": ev.PHASE, "key": "a", "phase": "measure"})
    record_agent_event(local, pending, {"type": ev.TRIAL_DONE, "key": "a"})
    assert not local.timing
    await writer.close()


async def test_a_big_fleets_tails_poll_less_often_and_still_end_with_the_agent(tmp_path):
    """tail polls a device's log every 0.5 s for a few devices, up to 2 s for 128 (each poll that
    finds lines is an SSH packet, paid in the workstation's CPU). Whatever the poll, the lines
    already there come at once, a line written later within a poll, and the stream ends by
    itself, exit 0, within a poll of the agent's exit."""
    from ngb.devices.local import LocalTransport
    from ngb.sweeps.run import device_io
    from ngb.sweeps.run.state import DeviceRun

    polls = [device_io.follow_poll_s(n) for n in (1, 32, 64, 96, 128, 1000)]
    assert polls == [0.5, 0.5, 1.0, 1.5, 2.0, 2.0]
    paths = remote.RunPaths(str(tmp_path), "r1")
    given = {v: remote.follow_argv(paths, 0, 1, v)[-1] for v in (float("nan"), float("inf"), -1.0)}
    assert list(given.values()) == ["0.500", "0.500", "0.100"]  # always a number tail takes
    Path(paths.run_dir).mkdir(parents=True)
    Path(paths.events).write_text(ev.encode(ev.make_event(ev.RUN_STARTED, total=1)) + "\n")
    agent = subprocess.Popen(["sleep", "60"])
    dev = DeviceRun("r1", Device(name="localhost", host="localhost", transport="local"), {"a"})
    dev.transport, dev.paths, dev.pid = LocalTransport(dev.device), paths, agent.pid
    seen: list[tuple[str, float]] = []
    loop = asyncio.get_running_loop()
    follow = asyncio.create_task(device_io.follow_events(
        dev, lambda d, e: seen.append((str(e["type"]), loop.time())), watchdog=60, timeout=10,
        poll_s=1.5,
    ))  # fmt: skip

    async def until(n: int) -> None:
        while len(seen) < n:
            await asyncio.sleep(0.02)

    try:
        began = loop.time()
        await asyncio.wait_for(until(1), 5.0)
        assert seen[0][1] - began < 1.5  # there already: not a poll later
        with open(paths.events, "a") as log:
            log.write(ev.encode(ev.make_event(ev.LOG, msg="later")) + "\n")
        written = loop.time()
        await asyncio.wait_for(until(2), 5.0)
        assert seen[1][1] - written < 1.5 + 1.0  # within a poll (and the load's margin)
        agent.kill()
        agent.wait()
        ended = loop.time()
        await asyncio.wait_for(follow, 5.0)
        assert loop.time() - ended < 1.5 + 1.0
        assert dev.transport.last_exit_status == 0
        assert [kind for kind, _ in seen] == [ev.RUN_STARTED, ev.LOG]
    finally:
        agent.kill()
        follow.cancel()
        await asyncio.gather(follow, return_exceptions=True)


async def test_a_tail_that_cannot_follow_is_said_once_and_the_run_still_ends_whole(
    env, monkeypatch
):
    """A device whose ``tail`` refuses the follow's options (no GNU tail): its error is said
    once, the follower asks again every ``FOLLOW_RETRY_S`` rather than every second, and the
    results come from the checkpoint at the end, each stored once."""
    from ngb.sweeps.run import device_io

    inventory, store, _ = env
    script = remote._FOLLOW_SCRIPT.replace("---disable-inotify", "--no-such-option")
    monkeypatch.setattr(remote, "_FOLLOW_SCRIPT", script)
    monkeypatch.setattr(device_io, "FOLLOW_RETRY_S", 2.0)
    follows: list[float] = []
    follow_events = device_io.follow_events

    async def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        follows.append(time.monotonic())
        return await follow_events(*args, **kwargs)

    monkeypatch.setattr(device_io, "follow_events", counted)
    orch = Orchestrator(store, inventory)
    sub = orch.subscribe()
    seen: list[RunEvent] = []
    consumer = asyncio.create_task(collect(sub, seen))
    sweep = noop_sweep(3, compile_s=1.0)
    run_id = await orch.start(sweep, "localhost", isolate="inprocess")
    summary = await orch.wait(run_id)
    await orch.close()
    await consumer
    dev = summary["devices"]["localhost"]
    assert (dev["state"], dev["done"], dev["failed"]) == ("finished", 3, 0)
    assert set(trial_counts(store, run_id).values()) == {1}
    said = [e.message for e in seen if e.kind == "connection" and "live events" in e.message]
    assert len(said) == 1 and "no-such-option" in said[0], said
    assert not [e for e in seen if e.kind == "agent"]  # nothing came live
    gaps = [b - a for a, b in zip(follows, follows[1:], strict=False)]
    assert len(follows) >= 2 and all(g >= 2.0 for g in gaps), gaps  # not every second


async def test_a_follower_takes_the_first_snapshot_of_a_follow_and_skips_the_later_ones(tmp_path):
    """The agent's periodic snapshot (``state``) serves a follower that joined mid-trial: the
    first after a follow starts is passed on, the later ones are counted (the offset covers
    them) but neither decoded nor passed on (~30 % of a fleet's event lines)."""
    from ngb.core.trial.live_state import STATE
    from ngb.devices.local import LocalTransport
    from ngb.sweeps.run import device_io
    from ngb.sweeps.run.state import DeviceRun

    paths = remote.RunPaths(str(tmp_path), "r1")
    Path(paths.run_dir).mkdir(parents=True)
    lines = [ev.encode(e) for e in (
        ev.make_event(ev.RUN_STARTED, total=1),
        ev.make_event(STATE, trial={"key": "a"}),
        ev.make_event(ev.CPU, percent=5.0, note='"type":"state",'),
        ev.make_event(STATE, trial={"key": "a"}, phase="measure"),
        ev.make_event(ev.LOG, msg="between"),
        ev.make_event(STATE, trial={"key": "a"}, phase="measure"),
        ev.make_event(ev.RUN_DONE),
    )]  # fmt: skip
    text = "\n".join(lines) + "\n"
    Path(paths.events).write_text(text)
    assert [remote.is_snapshot_line(line) for line in lines] == [
        False, True, False, True, False, True, False]  # fmt: skip
    assert not remote.is_snapshot_line(lines[1][:-5])  # a fragment still being written
    assert remote.SNAPSHOT == STATE
    gone = subprocess.Popen(["true"])
    gone.wait()
    dev = DeviceRun("r1", Device(name="localhost", host="localhost", transport="local"), {"a"})
    dev.transport, dev.paths, dev.pid = LocalTransport(dev.device), paths, gone.pid
    seen: list[str] = []
    await device_io.follow_events(dev, lambda d, e: seen.append(str(e["type"])), watchdog=30,
                                  timeout=10)  # fmt: skip
    assert seen == [ev.RUN_STARTED, STATE, ev.CPU, ev.LOG, ev.RUN_DONE]
    assert dev.offset == len(text.encode())
