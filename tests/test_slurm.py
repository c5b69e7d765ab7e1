"""A Slurm partition as devices, against a real one-machine Slurm cluster (``tests/slurm.py``).

The inventory's ``slurm`` table, the start's rewrite into ``srun``, the node line each job
writes (``NODE_SCRIPT`` run by ``sh``), results named by node, a resume's count of them and the
console's counted-down queue line are checked without a cluster; the rest runs ngb's real agent
in real Slurm jobs. In the CI subset: a queued job shows its reason (on the console's queue line
too) and ``ngb cancel``'s path removes it. In the slow tier: a two-slot sweep completes on the
one node (``<node>@debug`` and ``<node>@debug#part.N``, every trial flagged as measured on a
shared node; it prints the time to the first result); an external ``scancel`` fails the trial
in flight with the scheduler's reason and ``ngb run --resume`` finishes the rest, both
allocations' results under the node's name; a time limit does the same with TIMEOUT;
``ngb cancel`` of a running job is a ``scancel`` that records nothing of the trial in flight;
``kill -9`` of ``ngb run`` then ``ngb attach`` loses and repeats nothing; ``ngb devices probe``
describes a node through ``srun``. Followers, retries and the queue: ``test_slurm_followers``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ngb.core.base.errors import ConfigError
from ngb.core.records import events as ev
from ngb.devices import protocol, slurm_nodes
from ngb.devices.inventory import Device, Inventory, inventory_from_dict
from ngb.devices.slurm import JobState, SlurmSettings, parse_squeue
from ngb.devices.slurm_transport import _AGENT_START, NODE_PIDFILE, SlurmTransport
from ngb.sweeps.run import device_queue
from ngb.sweeps.run.device_queue import _news, job_states
from ngb.sweeps.run.orchestrator import Orchestrator
from ngb.sweeps.run.state import resumed_run
from ngb.sweeps.store.database import Store
from ngb.tui.live_run import DeviceState, RunModel
from ngb.tui.widgets.device_panel import current_line, queue_line

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


def test_the_node_script_records_its_job_and_the_first_slot_there_holds_the_name(tmp_path):
    # NODE_SCRIPT as srun runs it: in the slot's run dir, the job's variables set (no cluster
    # needed: the script reads only its environment), on a node without squeue ("?")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "uname", "date", "mkdir", "ln", "readlink", "head", "timeout", "echo"):
        (bin_dir / tool).symlink_to(str(shutil.which(tool)))

    def start(slot: str, job: int) -> str:
        run_dir = tmp_path / "w" / slot / "runs" / "r1"
        run_dir.mkdir(parents=True, exist_ok=True)
        claims = slurm_nodes.claims_dir(slot, str(tmp_path / "w" / slot), "r1")
        env = {
            "PATH": str(bin_dir),
            "SLURM_JOB_ID": str(job),
            "SLURMD_NODENAME": "gpu07",
            "SLURM_JOB_PARTITION": "a100",
        }
        res = subprocess.run(["sh", "-c", slurm_nodes.NODE_SCRIPT, "ngb-node", slot, claims,
                              "echo", "agent"], cwd=run_dir, env=env, capture_output=True,
                             text=True, timeout=30, check=True)  # fmt: skip
        assert res.stdout == "agent\n"  # then it became the agent
        return (run_dir / slurm_nodes.FACTS_FILE).read_text()

    start("part.1", 11)
    facts = slurm_nodes.parse_facts(start("part.2", 12))  # the same node, later
    assert [(f.job_id, f.node, f.partition, f.mine) for f in facts] == [
        (12, "gpu07", "a100", False)
    ]
    assert facts[0].device("part.2") == "gpu07@a100#part.2" and facts[0].oversubscribe == "?"
    assert facts[0].host == os.uname().nodename
    again = slurm_nodes.parse_facts(start("part.1", 13))  # a resume of part.1 on that node
    assert [f.device("part.1") for f in again] == ["gpu07@a100", "gpu07@a100"]
    assert os.readlink(tmp_path / "w" / "slurm-nodes" / "r1" / "gpu07@a100") == "part.1"


def test_a_result_is_named_by_the_job_that_ran_it():
    facts = slurm_nodes.parse_facts(
        "7\tn1\tgpu\thost1\t1000\tNO\t1\n"
        "9\tn2\tgpu\thost2\t2000\tOK\t1\n"
        "torn line\n"
        "10\tn1\tgpu\thost1\t3000\t?\t0\n"
    )
    assert [f.job_id for f in facts] == [7, 9, 10]
    pick = slurm_nodes.fact_for
    assert pick(facts, {"host": "host1", "started_at": 1500.5}).job_id == 7
    assert pick(facts, {"host": "host1", "started_at": 3001.0}).job_id == 10
    assert pick(facts, {"host": "host2", "started_at": 2500.0}).job_id == 9
    assert pick(facts, {"host": "", "extra": {"slurm": {"job": 9}}}).job_id == 9  # by job id
    assert pick(facts, {"host": "elsewhere", "started_at": 1.0}) is None  # stays the slot's
    ok = {"key": "k", "status": "ok", "host": "host2", "disturbed": False, "extra": {"a": 1}}
    named = slurm_nodes.stamp(ok, facts[1], "gpu.2", exclusive=True)
    assert named["extra"] == {"a": 1, "stored_device": "n2@gpu", "run_device": "gpu.2",
                              "slurm": {"job": 9, "node": "n2", "partition": "gpu",
                                        "shared": True}}  # fmt: skip
    assert named["disturbed"] is True  # OverSubscribe=OK: others may share the node
    assert named["verdict_reason"] == slurm_nodes.SHARED_NOTE
    again = slurm_nodes.stamp(named, facts[1], "gpu.2", exclusive=True)  # read again: same
    assert again["verdict_reason"] == slurm_nodes.SHARED_NOTE and again["extra"] == named["extra"]
    assert slurm_nodes.stamp(ok, facts[0], "gpu.1", exclusive=False)["disturbed"] is False
    # the scheduler did not say: the inventory's setting decides
    assert slurm_nodes.stamp(ok, facts[2], "gpu.1", exclusive=False)["disturbed"] is True
    assert slurm_nodes.stamp(ok, facts[2], "gpu.1", exclusive=True)["extra"]["stored_device"] == (
        "n1@gpu#gpu.1"
    )
    failed = {**ok, "status": "failed"}
    assert slurm_nodes.stamp(failed, facts[1], "gpu.2", exclusive=True)["disturbed"] is False
    assert slurm_nodes.claims_dir("gpu", "/s/ngb", "r") == "../../slurm-nodes/r"
    assert slurm_nodes.claims_dir("gpu.2", "/s/ngb/gpu.2", "r") == "../../../slurm-nodes/r"


def test_a_compilers_own_extra_device_never_renames_a_result():
    """OpenVINO records its target as ``extra.device`` ("CPU"); only a Slurm node's stamp names
    the device a result is stored under (it once filed every OpenVINO trial under "CPU")."""
    from ngb.core.records.types import TrialResult
    from ngb.sweeps.run.writer import stored_as

    openvino = TrialResult(key="k", spec={}, extra={"device": "CPU"})
    assert stored_as(openvino, "localhost") == "localhost"
    fact = slurm_nodes.parse_facts("9\tn2\tgpu\thost2\t2000\tNO\t1\n")[0]
    stamped = slurm_nodes.stamp(openvino.to_dict(), fact, "gpu.2", exclusive=True)
    named = TrialResult.from_dict(stamped)
    assert stored_as(named, "gpu.2") == "n2@gpu" and named.extra["device"] == "CPU"


def test_a_resume_counts_the_results_stored_under_node_names_for_their_slot(tmp_path):
    # `ngb attach` rebuilds each slot's finished trials from the store (what it must not repeat
    # or count twice): those stored as node@partition name their slot in extra.run_device
    stored = [
        {"device": "n1@gpu", "key": "k1", "status": "ok",
         "extra": json.dumps({"run_device": "gpu.1"})},
        {"device": "n1@gpu#gpu.2", "key": "k1", "status": "ok",
         "extra": json.dumps({"run_device": "gpu.2"})},
        {"device": "gpu.1", "key": "k2", "status": "failed", "extra": None},  # before names
        {"device": "localhost", "key": "k1", "status": "ok", "extra": "{}"},
    ]  # fmt: skip
    rows = [{"device": d, "state": "running", "workdir": "/w",
             "extra": {"started": True, "run_dir": "/w/runs/r1"}}
            for d in ("gpu.1", "gpu.2", "localhost")]  # fmt: skip
    run = resumed_run({"run_id": "r1"}, rows, stored,
                      lambda names: [slurm_device(names[0], tmp_path)])  # fmt: skip
    assert {n: d.results for n, d in run.devices.items()} == {
        "gpu.1": {"k1": True, "k2": False}, "gpu.2": {"k1": True}, "localhost": {"k1": True},
    }  # fmt: skip


def test_the_queue_line_counts_down_and_is_said_again_only_with_news():
    state = DeviceState("r", "gpu.1", current="resnet50/onnxruntime/b32")
    state.message = state.queue = "slurm: RUNNING on n1@gpu, 1:59:10 left (job 3)"
    state.queue_at = 1000.0
    line = queue_line(state, 1000.0 + 70)
    assert line is not None and line.plain == "slurm: RUNNING on n1@gpu, 1:58:00 left (job 3)"
    assert queue_line(state, 1000.0 + 9000).plain.endswith(" 0:00 left (job 3)")  # never below
    assert current_line(state) == "resnet50/onnxruntime/b32"  # the trial keeps its own line
    state.current = ""
    assert current_line(state) == "waiting for the next trial"  # not the queue line twice
    state.finished = True
    assert queue_line(state, 1000.0) is None
    said = "slurm: RUNNING on n1@gpu, 1:59:10 left (job 3)"
    assert not _news("slurm: RUNNING on n1@gpu, 1:59:07 left (job 3)", said, 3.0)
    assert _news("slurm: RUNNING on n1@gpu, 1:59:07 left (job 3)", said, 60.0)  # suspended?
    assert _news("slurm: COMPLETING (job 3 on n1@gpu)", said, 3.0)
    assert _news(said, "", 0.0)


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
    _, rows = store.select(
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
    assert current_line(row) == "waiting for the allocation"  # the console's device panel
    line = queue_line(row, time.time())
    assert line is not None and line.plain == "slurm: PENDING (PartitionConfig)"
    assert orch.device_states(run_id)["big"]["current"] == "slurm: PENDING (PartitionConfig)"
    assert await job_states(inventory, run_id, ["big"]) == {"big": "PENDING (PartitionConfig)"}
    summary = await asyncio.wait_for(orch.cancel(run_id), 60)
    await orch.close()
    assert summary["devices"]["big"]["state"] == "cancelled", summary
    assert [j["state"] for j in jobs_named(cluster, run_id)] == ["CANCELLED"]
    assert trial_rows(store, run_id) == []


@pytest.mark.slow
async def test_two_slots_run_a_sweep_and_the_first_result_time(cluster, tmp_path, monkeypatch):
    # Two job slots: the node's two CPUs, one per slot (not exclusive, so flagged as shared).
    # The queue is asked every 0.3 s, not every 3 s: a job of three 0.2 s trials ran between two
    # polls of squeue in 1 of 6 runs, and its RUNNING line (below) was never said.
    monkeypatch.setattr(device_queue, "POLL_S", 0.3)
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
    # compiles of 0.2 s: the live meter's one sample per compile (none under 50 ms: MIN_SAMPLE_S)
    run_id = await orch.start(noop_sweep(3, compile_s=0.2, name="slurm"), ["part"])
    summary = await asyncio.wait_for(orch.wait(run_id), 180)
    await orch.close()
    watcher.cancel()
    assert summary["status"] == "finished", summary
    rows = trial_rows(store, run_id)
    assert len(rows) == 6 and {r[2] for r in rows} == {"ok"}
    # named by node and partition; both slots ran on the one node: the first there holds the
    # name, the other's results carry its slot (a run's results are keyed by device and trial)
    node = f"{cluster.node}@{PARTITION}"
    names = {r[0] for r in rows}
    assert names in ({node, f"{node}#part.1"}, {node, f"{node}#part.2"}), names
    _, flags = store.select(
        "SELECT device, disturbed, verdict_reason, extra FROM trials WHERE run_id = ?", [run_id]
    )
    for device, disturbed, reason, extra in flags:  # a shared node flags each trial measured there
        facts = json.loads(extra)
        assert disturbed is True and facts["slurm"]["shared"] is True, (device, extra)
        assert slurm_nodes.SHARED_NOTE in reason
        assert facts["slurm"]["node"] == cluster.node and facts["slurm"]["partition"] == PARTITION
        assert device == node or device == f"{node}#{facts['run_device']}"
    _, samples = store.select("SELECT DISTINCT device FROM cpu_samples WHERE run_id = ?", [run_id])
    assert samples and {d for (d,) in samples} <= names  # live samples beside their results
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
    # both allocations' results (and the trial failed by the first's end) under the node's name,
    # not exclusive-flagged: the job had the node to itself
    assert {r[0] for r in rows} == {f"{cluster.node}@{PARTITION}"}
    _, jobs = store.select("SELECT extra FROM trials WHERE run_id = ?", [run_id])
    facts = [json.loads(e)["slurm"] for (e,) in jobs]
    assert {f["job"] for f in facts} == {int(j["id"]) for j in jobs_named(cluster, run_id)}
    assert not any(f["shared"] for f in facts)


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
    assert {r[0] for r in rows} == {f"{cluster.node}@{PARTITION}"}  # read again: same name
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
    # scancel: the scheduler accounts the job CANCELLED (issue 41: stopping only the agent ended
    # it FAILED NonZeroExitCode), and the trial in flight is not recorded (a cancelled trial
    # never is, though the job's SIGTERM reached its process too)
    assert [r[2] for r in trial_rows(store, run_id)] == ["ok"]
    assert [j["state"] for j in jobs_named(cluster, run_id)] == ["CANCELLED"]


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
