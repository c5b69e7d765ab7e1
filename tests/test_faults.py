"""Fault tests against a real OpenSSH sshd on loopback (three devices, see tests/sshd.py).

Agents are SIGKILLed and SSH connections dropped at seeded random points while a no-op sweep runs
on all devices; afterwards every trial must be in DuckDB exactly once per device. A device with an
unknown host key must be refused with a one-line error while the others finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from ngb.devices.inventory import load_inventory
from ngb.sweeps.run.orchestrator import Orchestrator
from ngb.sweeps.spec.sweep import Sweep
from ngb.sweeps.store.database import Store

from tests.noop_sweeps import noop_sweep

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(180)]

DEVICES = ["dev-a", "dev-b", "dev-c"]


def sweep(n: int, compile_s: float) -> Sweep:
    return noop_sweep(n, compile_s=compile_s, name="faults")


def assert_exactly_once(store: Store, run_id: str, keys: set[str], devices: list[str]) -> None:
    _, rows = store.select(
        "SELECT device, key, count(*) FROM trials WHERE run_id = ? GROUP BY ALL", [run_id]
    )
    assert {n for *_, n in rows} == {1}, "a trial was stored twice"
    for device in devices:
        assert {k for d, k, _ in rows if d == device} == keys, f"{device} is missing trials"


def orchestrator(store: Store, **kw) -> Orchestrator:
    return Orchestrator(store, load_inventory(), backoff=(0.05, 0.5), connect_timeout=5,
                        keepalive=2, seed=7, **kw)  # fmt: skip


async def wait_until(cond, timeout: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


async def test_sigkill_agents_mid_sweep(sshd_home, tmp_path):
    store = Store(tmp_path / "r.duckdb")
    sw = sweep(10, 0.15)
    keys = {t.key for t in sw.trials()}
    orch = orchestrator(store, max_restarts=4)
    run_id = await orch.start(sw, DEVICES, isolate="subprocess")
    rng = random.Random(1234)
    kills = 0
    for _ in range(4):
        victim = rng.choice(DEVICES)
        target = rng.randint(1, 8)
        states = orch.device_states
        await wait_until(
            lambda v=victim, t=target, st=states: (
                st(run_id)[v]["done"] >= t or st(run_id)[v]["state"] in ("finished", "failed")
            )
        )
        info = states(run_id)[victim]
        if info["state"] != "running" or not info["pid"]:
            continue
        try:
            os.kill(info["pid"], signal.SIGKILL)
            kills += 1
        except ProcessLookupError:
            pass
        await asyncio.sleep(rng.uniform(0.1, 0.4))
    summary = await orch.wait(run_id)
    await orch.close()
    assert kills >= 2
    for name in DEVICES:
        assert summary["devices"][name]["state"] == "finished", summary
    assert 1 <= sum(d["restarts"] for d in summary["devices"].values()) <= kills
    assert_exactly_once(store, run_id, keys, DEVICES)


async def test_dropped_connections_mid_sweep(sshd_home, sshd_server, tmp_path):
    store = Store(tmp_path / "r.duckdb")
    sw = sweep(12, 0.2)
    keys = {t.key for t in sw.trials()}
    orch = orchestrator(store)
    sub = orch.subscribe()
    run_id = await orch.start(sw, DEVICES, isolate="inprocess")
    rng = random.Random(99)
    dropped = 0
    # Mid-sweep: once every device runs trials, drop every connection at random moments.
    await wait_until(lambda: all(s["done"] >= 1 for s in orch.device_states(run_id).values()))
    for _ in range(4):
        await asyncio.sleep(rng.uniform(0.2, 0.8))
        if all(s["state"] == "finished" for s in orch.device_states(run_id).values()):
            break
        dropped += sshd_server.kill_connections()
    summary = await orch.wait(run_id)
    await orch.close()
    reconnects, log = [], []
    while (item := sub.get_nowait()) is not None:
        log.append(item)
        if item.kind == "connection" and item.state == "reconnecting" and item.message:
            reconnects.append(item.device)
    assert dropped >= 3 and reconnects, "the faults never hit a live connection"
    for name in DEVICES:
        assert summary["devices"][name]["state"] == "finished", summary
        assert summary["devices"][name]["restarts"] == 0  # the agents never noticed
    assert_exactly_once(store, run_id, keys, DEVICES)


async def test_unknown_host_key_fails_that_device_only(sshd_home, sshd_server, tmp_path):
    # Trust only dev-a's and dev-b's ports: dev-c offers a key nobody vouched for.
    trusted = [line for line in sshd_server.known_hosts_text().splitlines()
               if f":{sshd_server.device('dev-c').port} " not in line]  # fmt: skip
    (sshd_home / "config" / "known_hosts").write_text("\n".join(trusted) + "\n")
    store = Store(tmp_path / "r.duckdb")
    sw = sweep(3, 0.0)
    orch = orchestrator(store)
    run_id = await orch.start(sw, DEVICES, isolate="inprocess")
    summary = await orch.wait(run_id)
    await orch.close()
    c = summary["devices"]["dev-c"]
    assert c["state"] == "failed" and c["done"] == 0
    assert "host key" in c["error"].lower() and "\n" not in c["error"]
    assert_exactly_once(store, run_id, {t.key for t in sw.trials()}, ["dev-a", "dev-b"])
    assert store.trials(run_id=run_id, device="dev-c") == []
    assert any(e["kind"] == "hostkey" for e in store.errors(run_id, "dev-c"))


# ---------------------------------------------------------------- resume edges (issue 8 #7)


async def test_a_device_past_its_restart_limit_is_resumed_later(sshd_home, tmp_path):
    store = Store(tmp_path / "r.duckdb")
    sw = sweep(8, 0.3)
    keys = {t.key for t in sw.trials()}
    orch = orchestrator(store, max_restarts=1)
    run_id = await orch.start(sw, ["dev-a", "dev-b"], isolate="inprocess")
    killed: set[int] = set()

    def state() -> dict:
        return orch.device_states(run_id)["dev-a"]

    await wait_until(lambda: state()["done"] >= 1)
    while state()["state"] not in ("failed", "finished"):
        info = state()
        if info["state"] == "running" and info["pid"] and info["pid"] not in killed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(info["pid"], signal.SIGKILL)
            killed.add(info["pid"])
        await asyncio.sleep(0.02)
    summary = await orch.wait(run_id)
    await orch.close()
    a = summary["devices"]["dev-a"]
    assert a["state"] == "failed" and a["restarts"] == 2 and len(killed) == 2, a
    assert f"ngb attach {run_id}" in a["error"] and "\n" not in a["error"]
    assert summary["devices"]["dev-b"]["state"] == "finished"
    assert len(store.trials(run_id=run_id, device="dev-a")) < len(keys)  # some left to do

    again = orchestrator(store, max_restarts=1)  # a fresh restart budget for the new follower
    await again.attach(run_id)
    summary = await again.wait(run_id)
    await again.close()
    assert summary["status"] == "finished", summary
    assert set(summary["devices"]) == {"dev-a"}  # the finished device is left alone
    assert_exactly_once(store, run_id, keys, ["dev-a", "dev-b"])
    assert store.run(run_id)["status"] == "finished"


# A workstation that is SIGKILLed while it connects: no agent was launched anywhere.
KILLED_BEFORE_LAUNCH = """
import asyncio, sys
from ngb.devices.inventory import load_inventory
from ngb.sweeps.run.orchestrator import Orchestrator
from ngb.sweeps.store.database import Store
from tests.noop_sweeps import noop_sweep

class NeverConnects:
    name = "hung"
    async def connect(self):
        await asyncio.Event().wait()
    async def close(self):
        pass

async def main():
    orch = Orchestrator(Store(sys.argv[1]), load_inventory(),
                        transport_factory=lambda device: NeverConnects())
    # in-process trials: the claim is the resume, not the trials' isolation (10 interpreters less)
    run_id = await orch.start(noop_sweep(5, name="faults"), ["dev-a", "dev-b"], isolate="inprocess")
    print(run_id, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


async def test_a_run_killed_before_its_agents_launched_is_resumed_later(sshd_home, tmp_path):
    db = tmp_path / "r.duckdb"
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_BEFORE_LAUNCH, str(db)],
        stdout=subprocess.PIPE, text=True, cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )  # fmt: skip
    assert proc.stdout is not None
    run_id = (await asyncio.to_thread(proc.stdout.readline)).strip()
    await asyncio.sleep(0.5)  # it is connecting (forever) now
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    assert run_id, "the workstation never started the run"
    store = Store(db)
    rows = store.run_devices(run_id)
    assert {r["device"] for r in rows} == {"dev-a", "dev-b"}
    assert not any(r["extra"].get("started") for r in rows)  # no agent was launched

    orch = orchestrator(store)
    await orch.attach(run_id)
    summary = await orch.wait(run_id)
    await orch.close()
    assert summary["status"] == "finished", summary
    keys = {t.key for t in sweep(5, 0.05).trials()}
    assert_exactly_once(store, run_id, keys, ["dev-a", "dev-b"])
