"""One run, many followers: exactly one of them acts for a device (issue 41).

``ngb run`` and the console (which re-attaches every run still going) follow the same run; when
the agent dies, only the follower that owns the device (``ngb.sweeps.run.ownership``: the one
that started the run, or the next one once it is gone) starts it again. These run on the
built-in local transport with the real agent; the Slurm side is in ``test_slurm_followers.py``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ngb.core.base.errors import NgbError
from ngb.devices.inventory import Device, Inventory
from ngb.devices.local import LocalTransport
from ngb.devices.protocol import RunPaths
from ngb.sweeps.run import device_claim
from ngb.sweeps.run.orchestrator import Orchestrator
from ngb.sweeps.run.ownership import Owners
from ngb.sweeps.run.state import DeviceRun
from ngb.sweeps.store.database import Store
from ngb.sweeps.store.result_store import DatabaseBusy

from tests.noop_sweeps import noop_sweep

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("NGB_HOME", str(tmp_path / "home"))
    device = Device(name="localhost", host="localhost", transport="local",
                    python=sys.executable, workdir=str(tmp_path / "device"))  # fmt: skip
    return Inventory([device]), Store(tmp_path / "results.duckdb")


def test_one_owner_per_device_and_the_next_follower_takes_over(tmp_path):
    store = Store(tmp_path / "r.duckdb")
    first, second = Owners(store), Owners(Store(tmp_path / "r.duckdb"))  # same file
    assert first.take("r1", "gpu.1") and first.take("r1", "gpu.1")  # held: asked again, still
    assert not second.take("r1", "gpu.1")  # a second follower only follows
    assert second.take("r1", "gpu.2") and second.take("r2", "gpu.1")  # other devices, runs
    assert Owners(Store(tmp_path / "other.duckdb")).take("r1", "gpu.1")  # another store's run
    first.release("r1", "gpu.1")  # its task ended (or its process: the kernel drops the lock)
    assert second.take("r1", "gpu.1") and second.holds("r1", "gpu.1")
    second.release_all()
    assert not second.holds("r1", "gpu.1")
    # a follower killed with -9 leaves no owner behind
    code = (
        "import sys, time; from ngb.sweeps.run.ownership import Owners\n"
        "from ngb.sweeps.store.database import Store\n"
        f"o = Owners(Store({str(tmp_path / 'r.duckdb')!r})); assert o.take('r9', 'd')\n"
        "print('held', flush=True); time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        assert not first.take("r9", "d")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert first.take("r9", "d")
    finally:
        proc.kill()


async def test_a_follower_that_does_not_own_the_device_never_restarts_its_agent(env):
    """The CLI starts the run and the console attaches to follow it; the agent is killed: one
    restart (the owner's), both followers finish, every trial stored once."""
    inventory, store = env
    cli = Orchestrator(store, inventory, max_restarts=3, owner_poll=0.2)
    run_id = await cli.start(noop_sweep(6, compile_s=1.0), "localhost", isolate="inprocess")
    while cli.device_states(run_id)["localhost"]["done"] < 2:
        await asyncio.sleep(0.05)
    console = Orchestrator(store, inventory, max_restarts=3, owner_poll=0.2)
    await console.attach(run_id, resume=False)
    await asyncio.sleep(0.5)
    os.kill(int(cli.device_states(run_id)["localhost"]["pid"]), signal.SIGKILL)
    one, two = await asyncio.wait_for(asyncio.gather(cli.wait(run_id), console.wait(run_id)), 90)
    await cli.close()
    await console.close()
    assert one["devices"]["localhost"]["state"] == "finished", one
    assert two["devices"]["localhost"]["state"] == "finished", two
    assert one["devices"]["localhost"]["restarts"] == 1
    assert two["devices"]["localhost"]["restarts"] == 0  # it followed the owner's new agent
    died = [e for e in store.errors(run_id) if e["kind"] == "agent"]
    assert len(died) == 1 and "restart 1/3" in died[0]["message"], died
    sql = "SELECT key, count(*) FROM trials WHERE run_id = ? GROUP BY key"
    _, rows = store.select(sql, [run_id])
    assert len(rows) == 6 and {n for _, n in rows} == {1}


async def test_when_the_owner_goes_away_the_follower_acts(env):
    """`ngb run` detached (Ctrl-C) and the agent then died: the console, which only followed,
    owns the device now and restarts it."""
    inventory, store = env
    cli = Orchestrator(store, inventory, owner_poll=0.2)
    run_id = await cli.start(noop_sweep(5, compile_s=1.0), "localhost", isolate="inprocess")
    while cli.device_states(run_id)["localhost"]["done"] < 1:
        await asyncio.sleep(0.05)
    console = Orchestrator(store, inventory, owner_poll=0.2)
    await console.attach(run_id, resume=False)
    pid = int(cli.device_states(run_id)["localhost"]["pid"])
    await cli.close()  # the owner stops following; its lock goes with it
    os.kill(pid, signal.SIGKILL)
    summary = await asyncio.wait_for(console.wait(run_id), 90)
    await console.close()
    assert summary["devices"]["localhost"]["state"] == "finished", summary
    assert summary["devices"]["localhost"]["restarts"] == 1
    _, rows = store.select("SELECT count(DISTINCT key), count(*) FROM trials WHERE run_id = ?",
                          [run_id])  # fmt: skip
    assert rows == [(5, 5)]


def test_a_shared_start_is_never_refused_and_says_whom_it_waits_behind(tmp_path):
    """A Slurm slot busy with another run: its start goes on (the job waits in Slurm's queue)
    with a line naming the run it waits behind; an ordinary device is refused as before."""
    work = tmp_path / "w"
    (work / "runs" / "other").mkdir(parents=True)
    agent = subprocess.Popen(  # a live agent of run "other": its arguments name its run
        [sys.executable, "-c", "import time; time.sleep(60)", "--run-id", "other"]
    )
    try:
        _shared_start_cases(tmp_path, work, agent.pid)
    finally:
        agent.kill()
        agent.wait()


def _shared_start_cases(tmp_path: Path, work: Path, pid: int) -> None:
    (work / "runs" / "other" / "agent.pid").write_text(f"{pid}\n")
    (work / device_claim.CLAIM_FILE).write_text("other 1\n")
    start = ["sh", "-c", 'echo "started $1"', "ngb-start", "mine"]
    shared = subprocess.run(device_claim.gated(start, str(work), "r2", share=True),
                            capture_output=True, text=True, timeout=30)  # fmt: skip
    assert shared.returncode == 0, shared.stderr
    assert shared.stdout.splitlines() == [f"behind other {pid}", "started mine"]
    holder = device_claim.parse_behind(shared.stdout)
    assert holder == device_claim.Holder("other", pid)
    line = device_claim.queued_line("part", holder)
    assert line.startswith(device_claim.QUEUED) and "run other" in line and "\n" not in line
    assert (work / device_claim.CLAIM_FILE).read_text() == "other 1\n"  # the claim stays theirs
    refused = subprocess.run(device_claim.gated(start, str(work), "r2"), capture_output=True,
                             text=True, timeout=30)  # fmt: skip
    assert refused.returncode == device_claim.EXIT_BUSY and "started" not in refused.stdout
    free = subprocess.run(device_claim.gated(start, str(tmp_path / "free"), "r3", share=True),
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    assert free.stdout.splitlines() == ["started mine"] and device_claim.parse_behind("") is None


def test_a_run_whose_agent_finished_holds_its_device_no_longer(tmp_path):
    """A detached run's agent ended (its last event is ``run_done``, its pid file gone) and no
    follower has collected it yet: the next run may start at once. Before, the device read
    "busy with run X (its agent is starting)" until the claim's two-minute grace ran out."""
    work = tmp_path / "w"
    run_dir = work / "runs" / "other"
    run_dir.mkdir(parents=True)
    (work / device_claim.CLAIM_FILE).write_text(f"other {int(time.time())}\n")
    events = run_dir / "events.jsonl"

    def who() -> device_claim.Holder | None:
        answer = subprocess.run(device_claim.who_argv(str(work)), capture_output=True,
                                text=True, timeout=30)  # fmt: skip
        return device_claim.parse_answer("d", answer.stdout)

    assert who() == device_claim.Holder("other", None)  # no event yet: its agent is starting
    events.write_text('{"v":1,"type":"trial_done"}\n')
    assert who() == device_claim.Holder("other", None)  # it ran, and did not finish: held
    events.write_text('{"v":1,"type":"trial_done"}\n{"v":1,"ts":1.0,"type":"run_done","ok":2}\n')
    assert who() is None
    start = ["sh", "-c", 'echo "started $1"', "ngb-start", "mine"]
    took = subprocess.run(device_claim.gated(start, str(work), "r2"), capture_output=True,
                          text=True, timeout=30)  # fmt: skip
    assert took.returncode == 0 and took.stdout.splitlines() == ["started mine"], took
    assert (work / device_claim.CLAIM_FILE).read_text().split()[0] == "r2"


async def test_a_vanished_run_dir_is_the_owners_word_and_a_busy_store_is_asked_again(tmp_path):
    """The run dir is gone and the stored row is not final. The owner calls that "vanished";
    a follower that does not own the device leaves it to the owner, whose final row it may
    not see yet. A store busy in another process is asked again, not taken for an answer (a
    128-device --detach and an attach failed finished devices both ways, under load ~25)."""
    device = Device(name="localhost", host="localhost", transport="local",
                    python=sys.executable, workdir=str(tmp_path / "device"))  # fmt: skip
    store = Store(tmp_path / "r.duckdb")
    store.create_run("r1", "s", "", ["localhost"], 1)
    store.upsert_run_devices([("r1", "localhost", {"state": "running"})])
    orch = Orchestrator(store, Inventory([device]))
    dev = DeviceRun(run_id="r1", device=device, keys={"k"}, paths=RunPaths(device.workdir, "r1"))
    dev.transport = LocalTransport(device)
    busy = [DatabaseBusy("results database is busy")] * 2
    real = store.run_devices

    def run_devices(run_id: str) -> list[dict[str, object]]:
        if busy:
            raise busy.pop()
        return real(run_id)

    store.run_devices = run_devices  # type: ignore[method-assign]
    dev.owner = False
    assert await orch._finished_elsewhere(dev) is False  # asked twice more, then left to owner
    assert not busy
    dev.owner = True
    with pytest.raises(NgbError, match="vanished from the device"):
        await orch._finished_elsewhere(dev)
    store.upsert_run_devices([("r1", "localhost", {"state": "finished"})])
    dev.owner = False
    assert await orch._finished_elsewhere(dev) is True and dev.state == "finished"
    await orch.close()
