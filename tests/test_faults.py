"""Fault tests against a real OpenSSH sshd on loopback (three devices, see tests/sshd.py).

Agents are SIGKILLed and SSH connections dropped at seeded random points while a no-op sweep runs
on all devices; afterwards every trial must be in DuckDB exactly once per device. A device with an
unknown host key must be refused with a one-line error while the others finish.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal

import pytest
from ngb.devices.inventory import load_inventory
from ngb.sweeps.orchestrator import Orchestrator
from ngb.sweeps.spec import Sweep
from ngb.sweeps.store import Store

from tests.noop_sweeps import noop_sweep

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(180)]

DEVICES = ["dev-a", "dev-b", "dev-c"]


def sweep(n: int, compile_s: float) -> Sweep:
    return noop_sweep(n, compile_s=compile_s, name="faults")


def assert_exactly_once(store: Store, run_id: str, keys: set[str], devices: list[str]) -> None:
    _, rows = store.query(
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
