"""A Slurm partition as devices, against a real one-machine Slurm cluster (``tests/slurm.py``).

The inventory's ``slurm`` table and the start's rewrite into ``srun`` are checked without a
cluster; the rest runs ngb's real agent in real Slurm jobs. In the CI subset: a queued job
shows its reason (in the console's device row too) and ``ngb cancel``'s path removes it. In the
slow tier: a two-slot sweep completes (and prints the time to the first result); an external
``scancel`` fails the trial in flight with the scheduler's reason and ``ngb run --resume``
finishes the rest; a time limit does the same with TIMEOUT; ``ngb cancel`` of a running job
stops only the agent; ``kill -9`` of ``ngb run`` then ``ngb attach`` loses and repeats nothing;
``ngb devices probe`` describes a node through ``srun``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ngb.core import events as ev
from ngb.core.errors import ConfigError
from ngb.devices import protocol
from ngb.devices.inventory import Device, Inventory, inventory_from_dict
from ngb.devices.slurm import JobState, SlurmSettings, parse_squeue
from ngb.devices.slurm_transport import _AGENT_START, NODE_PIDFILE, SlurmTransport
from ngb.sweeps.device_queue import job_states
from ngb.sweeps.orchestrator import Orchestrator
from ngb.sweeps.store import Store
from ngb.tui.live_run import RunModel
from ngb.tui.widgets.device_panel import current_line

from tests.noop_sweeps import noop_sweep
from tests.slurm import PARTITION, SlurmCluster

pytestmark = pytest.mark.timeout(240)
NGB = [sys.executable, "-m", "ngb.sweeps.cli"]


def slurm_device(name: str, workdir: Path, **table: object) -> Device:
    return Device(name=name, host="localhost", transport="slurm", python=sys.executable,
                  workdir=str(workdir), slurm={"partition": PARTITION, **table})  # fmt: skip


# ---------------------------------------------------------------- without a cluster


def test_the_slurm_table_is_checked_and_a_partition_runs_as_one_device_per_node():
    table = {"partition": "gpu", "nodes": 2, "gres": "gpu:1"}
    doc = {"devices": {"gpu": {"host": "localhost", "transport": "slurm", "workdir": "/s/ngb",
                               "slurm": table}}}  # fmt: skip
    inv = inventory_from_dict(doc)
    slots = inv.resolve("gpu")
    assert [(d.name, d.workdir) for d in slots] == [("gpu.1", "/s/ngb/gpu.1"),
                                                    ("gpu.2", "/s/ngb/gpu.2")]  # fmt: skip
    assert inv.resolve("gpu.2") == [slots[1]]  # what `attach` resolves from a run's rows
    assert "[devices.gpu.slurm]" in inv.to_toml()
    bad = [
        ({"partition": "gpu --uid=0"}, "one word of Slurm's syntax"),
        ({"nodes": 2}, "slurm.partition is missing"),
        ({"partition": "p", "nodes": 0}, "slurm.nodes must be an integer"),
        ({"partition": "p", "exclusiv": False}, "did you mean 'exclusive'"),
        ({"partition": "p", "time_limit": "2 hours"}, "slurm.time_limit"),
    ]
    for table, words in bad:
        entry = {"host": "localhost", "transport": "slurm", "slurm": table}
        with pytest.raises(ConfigError, match=words):
            inventory_from_dict({"devices": {"gpu": entry}})
    with pytest.raises(ConfigError, match="must be 'localhost' or an SSH device"):
        inventory_from_dict({"devices": {"gpu": {"host": "nowhere", "transport": "slurm",
                                                 "slurm": {"partition": "p"}}}})  # fmt: skip
    with pytest.raises(ConfigError, match='needs transport = "slurm"'):
        inventory_from_dict({"devices": {"x": {"host": "h", "slurm": {"partition": "p"}}}})


def test_the_agent_start_becomes_an_srun_of_its_own_allocation(tmp_path):
    dev = slurm_device("gpu", tmp_path, gres="gpu:1", time_limit="1:00:00")
    transport = SlurmTransport(dev, login=None)  # type: ignore[arg-type]  # only rewrites here
    argv = protocol.launch_argv(sys.executable, str(tmp_path), "agent-x.pyz", "0" * 64, "r1")
    assert _AGENT_START in argv[2], "the protocol's start line changed: update slurm_transport"
    out = transport.rewrite(argv)
    assert "nohup setsid srun --job-name=ngb-r1-gpu --partition=debug" in out[2]
    assert "--gres=gpu:1 --time=1:00:00 --exclusive" in out[2]  # whole nodes by default
    assert "echo $! > agent.pid" in out[2]  # srun's pid: the job's handle on the login host
    assert out[out.index("--pidfile") + 1].endswith(NODE_PIDFILE)
    probe = transport.rewrite([sys.executable, "/w/agent.pyz", "probe"])
    assert probe[0] == "srun" and probe[-1] == "probe"  # Tables I/II come from a node
    assert transport.rewrite(["tail", "-n", "3", "x"]) == ["tail", "-n", "3", "x"]
    assert SlurmSettings.from_table({"partition": "p", "exclusive": False}).exclusive is False


def test_queue_answers_read_as_one_line():
    out = "12|PENDING|Resources|1:00:00||gpu|0:00\n9|CANCELLED|None|0:00|n1|gpu|0:10\n"
    job = parse_squeue(out)
    assert job == JobState(12, "PENDING", "Resources", "1:00:00", "", "gpu")  # the newest
    assert job.text() == "PENDING (Resources)"
    running = JobState(3, "RUNNING", "None", "59:58", "node7", "gpu")
    assert running.text() == "RUNNING on node7@gpu, 59:58 left (job 3)"
    assert parse_squeue("garbage\n") is None


# ---------------------------------------------------------------- a real cluster


@pytest.fixture
def cluster(slurm_cluster: SlurmCluster, monkeypatch, tmp_path):
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    monkeypatch.setenv("NGB_HOME", str(tmp_path / "home"))
    slurm_cluster.cancel_all()
    yield slurm_cluster
    slurm_cluster.cancel_all()


def jobs_named(cluster: SlurmCluster, run_id: str) -> list[dict[str, str]]:
    return [j for j in cluster.jobs() if j["name"].startswith(f"ngb-{run_id}-")]


def trial_rows(store: Store, run_id: str) -> list[tuple[str, str, str, str]]:
    _, rows = store.query(
        "SELECT device, key, status, coalesce(error, '') FROM trials WHERE run_id = ? "
        "ORDER BY device, key",
        [run_id],
    )
    return [tuple(r) for r in rows]


async def test_a_queued_job_shows_its_reason_and_is_cancelled(cluster, tmp_path):
    # More CPUs than the node has: Slurm keeps the job PENDING (PartitionConfig).
    dev = slurm_device("big", tmp_path / "w", cpus_per_task=cluster.cpus + 1)
    inventory, store = Inventory([dev]), Store(tmp_path / "r.duckdb")
    orch = Orchestrator(store, inventory)
    sub = orch.subscribe()
    run_id = await orch.start(noop_sweep(2, name="slurm"), ["big"])
    console = RunModel()  # the console's run model, fed the same events

    async def queued() -> None:
        async for item in sub:
            console.apply(item)
            if item.kind == "connection" and item.message.startswith("slurm: PENDING"):
                return

    await asyncio.wait_for(queued(), 60)
    row = console.device(run_id, "big")
    assert current_line(row) == "slurm: PENDING (PartitionConfig)"  # the console's device row
    assert orch.device_states(run_id)["big"]["current"] == "slurm: PENDING (PartitionConfig)"
    assert await job_states(inventory, run_id, ["big"]) == {"big": "PENDING (PartitionConfig)"}
    summary = await asyncio.wait_for(orch.cancel(run_id), 60)
    await orch.close()
    assert summary["devices"]["big"]["state"] == "cancelled", summary
    assert [j["state"] for j in jobs_named(cluster, run_id)] == ["CANCELLED"]
    assert trial_rows(store, run_id) == []


@pytest.mark.slow
async def test_two_slots_run_a_sweep_and_the_first_result_time(cluster, tmp_path):
    # Two job slots: the node's two CPUs, one per slot (not exclusive, so flagged as shared).
    dev = slurm_device("part", tmp_path / "w", nodes=2, cpus_per_task=1, exclusive=False)
    inventory, store = Inventory([dev]), Store(tmp_path / "r.duckdb")
    orch = Orchestrator(store, inventory)
    sub = orch.subscribe()
    t0 = time.monotonic()
    first: list[float] = []
    messages: list[str] = []

    async def watch() -> None:
        async for item in sub:
            event = item.event or {}
            if event.get("type") == ev.TRIAL_DONE and not first:
                first.append(time.monotonic() - t0)
            if item.kind == "connection" and item.message.startswith("slurm: RUNNING"):
                messages.append(item.message)

    watcher = asyncio.create_task(watch())
    run_id = await orch.start(noop_sweep(3, name="slurm"), ["part"])
    summary = await asyncio.wait_for(orch.wait(run_id), 180)
    await orch.close()
    watcher.cancel()
    assert summary["status"] == "finished", summary
    rows = trial_rows(store, run_id)
    assert len(rows) == 6 and {r[2] for r in rows} == {"ok"}
    assert {r[0] for r in rows} == {"part.1", "part.2"}
    assert any("shared node" in m for m in messages), messages
    print(f"\nslurm: first result {first[0]:.1f} s after start, run {time.monotonic() - t0:.1f} s")


@pytest.mark.slow
async def test_an_external_scancel_fails_the_trial_in_flight_and_the_resume_finishes(
    cluster, tmp_path
):
    dev = slurm_device("one", tmp_path / "w")
    store_db = str(tmp_path / "r.duckdb")
    inventory, store = Inventory([dev]), Store(store_db)
    sweep = noop_sweep(3, compile_s=4.0, name="slurm")
    orch = Orchestrator(store, inventory)
    sub = orch.subscribe()
    run_id = await orch.start(sweep, ["one"])
    in_flight: list[str] = []

    async def second_trial_starts() -> None:
        async for item in sub:
            event = item.event or {}
            if event.get("type") == ev.TRIAL_STARTED and event.get("index") == 2:
                in_flight.append(str(event["key"]))
                return

    await asyncio.wait_for(second_trial_starts(), 120)
    await asyncio.sleep(1.0)  # mid-compile
    job = jobs_named(cluster, run_id)[0]
    assert cluster.run("scancel", job["id"]).returncode == 0  # someone else's scancel
    summary = await asyncio.wait_for(orch.wait(run_id), 120)
    await orch.close()
    error = str(summary["devices"]["one"]["error"])
    assert summary["devices"]["one"]["state"] == "failed"
    assert f"killed by the scheduler: Slurm job {job['id']} CANCELLED" in error
    failed = [r for r in trial_rows(store, run_id) if r[2] == "failed"]
    assert [r[1] for r in failed] == in_flight
    assert "killed by the scheduler" in failed[0][3]

    # `ngb run SWEEP -d one --resume`: a new allocation, the rest of the sweep
    inventory.save(Path(os.environ["NGB_HOME"]) / "config" / "devices.toml")
    sweep_file = tmp_path / "slurm.toml"
    sweep_file.write_text(sweep.to_toml())
    res = await asyncio.to_thread(
        subprocess.run, [*NGB, "run", str(sweep_file), "-d", "one", "--resume", "--db", store_db],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"attached to run {run_id}" in res.stdout
    rows = trial_rows(store, run_id)
    assert sorted(r[1] for r in rows) == sorted(t.key for t in sweep.trials())  # each once
    assert [r[1] for r in rows if r[2] == "failed"] == in_flight  # not run again
    assert len(jobs_named(cluster, run_id)) == 2


@pytest.mark.slow
def test_kill_9_of_ngb_run_then_attach_loses_and_repeats_nothing(cluster, tmp_path):
    home = Path(os.environ["NGB_HOME"])
    (home / "config").mkdir(parents=True)
    inv = Inventory([slurm_device("part", tmp_path / "w")], path=home / "config/devices.toml")
    inv.save()
    sweep_file = tmp_path / "slurm.toml"
    sweep = noop_sweep(4, compile_s=1.5, name="slurm")
    sweep_file.write_text(sweep.to_toml())
    db = tmp_path / "r.duckdb"
    argv = [*NGB, "run", str(sweep_file), "-d", "part", "--db", str(db)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checkpoints = tmp_path / "w" / "runs"
    end = time.monotonic() + 120
    while time.monotonic() < end:  # one trial finished on the node: kill the workstation
        done = [p for p in checkpoints.glob("*/checkpoint.jsonl") if p.read_text().strip()]
        if done:
            break
        time.sleep(0.2)
    assert done, "no trial finished on the node"
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    run_id = done[0].parent.name
    assert jobs_named(cluster, run_id)[0]["state"] == "RUNNING"  # the job did not notice
    res = subprocess.run([*NGB, "attach", run_id, "--db", str(db)], capture_output=True,
                         text=True, timeout=180)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    rows = trial_rows(Store(db), run_id)
    assert sorted(r[1] for r in rows) == sorted(t.key for t in sweep.trials())
    assert {r[2] for r in rows} == {"ok"}
    assert len(jobs_named(cluster, run_id)) == 1  # one allocation from start to end


@pytest.mark.slow
def test_probe_describes_a_node_of_the_partition_through_srun(cluster, tmp_path):
    home = Path(os.environ["NGB_HOME"])
    add = [*NGB, "devices", "add-slurm", "part", "--partition", PARTITION, "--python",
           sys.executable, "--workdir", str(tmp_path / "w")]  # fmt: skip
    assert subprocess.run(add, capture_output=True, timeout=60).returncode == 0
    assert "[devices.part.slurm]" in (home / "config" / "devices.toml").read_text()
    res = subprocess.run([*NGB, "devices", "probe", "part", "--json"], capture_output=True,
                         text=True, timeout=180)  # fmt: skip
    assert res.returncode == 0, res.stderr
    facts = json.loads(res.stdout)["part"]
    assert facts["hostname"] == cluster.node
    assert [j["state"] for j in cluster.jobs() if j["name"] == "ngb-probe-part"] == ["COMPLETED"]


@pytest.mark.slow
async def test_ngb_cancel_of_a_running_job_stops_the_agent_as_a_cancel(cluster, tmp_path):
    dev = slurm_device("one", tmp_path / "w")
    inventory, store = Inventory([dev]), Store(tmp_path / "r.duckdb")
    orch = Orchestrator(store, inventory)
    sub = orch.subscribe()
    run_id = await orch.start(noop_sweep(3, compile_s=3.0, name="slurm"), ["one"])

    async def second_trial_starts() -> None:
        async for item in sub:
            event = item.event or {}
            if event.get("type") == ev.TRIAL_STARTED and event.get("index") == 2:
                return

    await asyncio.wait_for(second_trial_starts(), 120)
    other = Orchestrator(store, inventory)  # `ngb cancel` from another process
    summary = await asyncio.wait_for(other.cancel(run_id), 120)
    await other.close()
    summary = await asyncio.wait_for(orch.wait(run_id), 60)
    await orch.close()
    assert summary["devices"]["one"]["state"] == "cancelled", summary
    # Only the agent got SIGTERM (through a step of its allocation): the trial in flight is not
    # recorded (a cancelled trial never is), and the job ended without the scheduler's kill.
    assert [r[2] for r in trial_rows(store, run_id)] == ["ok"]
    assert [j["state"] for j in jobs_named(cluster, run_id)] != ["CANCELLED"]


@pytest.mark.slow
async def test_a_job_past_its_time_limit_fails_its_trial_with_timeout(cluster, tmp_path):
    # Slurm's smallest limit is a minute; its time-limit check runs every ~30 s after that.
    dev = slurm_device("one", tmp_path / "w", time_limit="1")
    inventory, store = Inventory([dev]), Store(tmp_path / "r.duckdb")
    orch = Orchestrator(store, inventory)
    run_id = await orch.start(noop_sweep(2, compile_s=200.0, name="slurm"), ["one"])
    summary = await asyncio.wait_for(orch.wait(run_id), 200)
    await orch.close()
    assert "TIMEOUT" in str(summary["devices"]["one"]["error"]), summary
    rows = trial_rows(store, run_id)
    assert len(rows) == 1 and rows[0][2] == "failed"
    assert "killed by the scheduler: Slurm job" in rows[0][3] and "TIMEOUT" in rows[0][3]
