"""Slurm as its users expect, with every front end following (issue 41), on the real one-machine
cluster of ``tests/slurm.py``.

``ngb run`` (a real CLI process) and the console (``NgbApp`` driven in-process, which
re-attaches every run still going when it opens) follow one run. A job the scheduler ended (an
outside ``scancel``, a TIMEOUT) ends in one failed trial with the scheduler's reason and no
second job from either of them; with ``retry_killed = 1`` the killed trial runs again in one new
allocation (``ngb run --resume`` after a kill nobody saw, or at once while the CLI follows), and
every point ends ok exactly once with the count stored. A second run on a busy slot queues in
Slurm instead of being refused; ``ngb cancel`` is accounted CANCELLED; the probe says the node's
own error. Without a cluster: the queue texts, the stderr fallback, the progress view's join and
the setting's key. In the CI subset: the outside scancel with both followers and the probe.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ngb.core.base.errors import ConfigError
from ngb.core.records.events import decode
from ngb.core.records.types import MeasureSettings, TrialResult, TrialSpec
from ngb.devices import slurm
from ngb.devices.agent_remote import _last_line
from ngb.devices.inventory import Device, Inventory
from ngb.sweeps.run import job_end
from ngb.sweeps.run.orchestrator import Orchestrator
from ngb.sweeps.spec.sweep import Sweep, loads_sweep
from ngb.sweeps.store.database import Store
from ngb.sweeps.store.result_store import IngestBatch

from tests.cli_helpers import scaled
from tests.noop_sweeps import noop_sweep
from tests.slurm import PARTITION, SlurmCluster
from tests.timm_names import seed_timm_names

pytestmark = pytest.mark.timeout(300)
NGB = [sys.executable, "-m", "ngb.sweeps.cli"]


# ---------------------------------------------------------------- without a cluster


def test_queue_lines_past_the_limit_and_why_the_scheduler_ended_a_job():
    out = "12|TIMEOUT|TimeLimit|INVALID|n1|gpu|1:20|NO|1:00\n"
    job = slurm.parse_squeue(out)
    assert job is not None and job.time_limit == "1:00" and job.scheduler_ended
    assert job.ended_text() == (
        "killed by the scheduler: Slurm job 12 TIMEOUT on n1@gpu (time limit 1:00)"
    )
    past = dataclasses.replace(job, state="RUNNING", reason="None")
    assert past.text() == "RUNNING on n1@gpu, past its time limit (job 12)"  # not "no time limit"
    unlimited = dataclasses.replace(past, time_left="UNLIMITED")
    assert unlimited.text().endswith("no time limit (job 12)")
    cancelled = slurm.JobState(23, "CANCELLED", "None", "0:00", "n1", "gpu")
    assert cancelled.ended_text() == "killed by the scheduler: Slurm job 23 CANCELLED on n1@gpu"
    assert slurm.cancel_argv(past) == ["scancel", "12"]  # running too: accounted CANCELLED
    # a job squeue no longer lists: slurmstepd's own line in the agent's stderr (newest wins)
    err = (
        "slurmstepd-n1: error: *** STEP 9.0 ON n1 CANCELLED AT 2026-11-28T03:10:02 ***\n"
        "srun: error: n1: task 0: Terminated\n"
        "slurmstepd-n1: error: *** STEP 14.0 ON n1 CANCELLED AT 2026-11-28T03:11:27 DUE TO "
        "TIME LIMIT ***\n"
    )
    found = slurm.ended_in_stderr(err, "gpu")
    assert found is not None and (found.job_id, found.state, found.node) == (14, "TIMEOUT", "n1")
    assert slurm.ended_in_stderr("srun: error: n1: task 0: Exited with exit code 1", "gpu") is None


def test_the_probe_says_the_nodes_own_error_not_sruns():
    stderr = (
        "Traceback (most recent call last):\n"
        "ModuleNotFoundError: No module named 'psutil'\n"
        "srun: error: vm: task 0: Exited with exit code 1\n"
        "srun: launch/slurm: _step_signal: Terminating StepId=3.0\n"
    )
    assert _last_line(stderr) == "ModuleNotFoundError: No module named 'psutil'"
    assert _last_line("srun: error: Unable to allocate resources: Invalid partition name\n") == (
        "srun: error: Unable to allocate resources: Invalid partition name"
    )  # only srun spoke: its words
    assert _last_line("") == ""


def test_retry_killed_is_a_setting_of_the_sweep_outside_the_trial_key():
    spec = noop_sweep(1).trials()[0]
    again = dataclasses.replace(spec, measure=dataclasses.replace(spec.measure, retry_killed=2))
    assert again.key == spec.key  # a re-run changes no number: a resume finds its trials
    assert TrialSpec.from_dict(again.to_dict()).measure.retry_killed == 2
    for bad in (-1, 101):
        with pytest.raises(ConfigError, match="retry_killed"):
            MeasureSettings(retry_killed=bad)


def test_killed_records_are_withheld_until_the_owner_decides():
    killed = {"key": "a", "status": "failed", "error_kind": "crash", "error": "killed by SIGTERM"}
    segfault = {"key": "b", "status": "failed", "error_kind": "crash", "error": "SIGSEGV"}
    ok = {"key": "c", "status": "ok"}
    text = "".join(json.dumps(r) + "\n" for r in (ok, killed, segfault)) + '{"torn\n'
    assert (
        job_end._without_killed(text)
        == "".join(json.dumps(r) + "\n" for r in (ok, segfault)) + '{"torn\n'
    )
    assert job_end._without_killed(text, "c") == text  # only that trial's
    assert job_end.killed(killed) and not job_end.killed(segfault)


def test_status_counts_a_slots_results_stored_under_their_node(tmp_path, monkeypatch):
    """`ngb status` joined trials on the slot (`part`) while they are stored as `vm@debug`."""
    monkeypatch.setenv("NGB_HOME", str(tmp_path / "home"))
    store = Store(tmp_path / "r.duckdb")
    sweep = noop_sweep(3)
    store.create_run("r1", sweep.name, sweep.to_toml(), ["part"], 3, {})
    store.upsert_run_device("r1", "part", state="running", n_trials=3)
    batch = IngestBatch()
    for i, spec in enumerate(sweep.trials()):
        extra = {"run_device": "part", "stored_device": "vm@debug", "slurm": {"job": 4}}
        res = TrialResult(key=spec.key, spec=spec.to_dict(), extra=extra,
                          status="failed" if i == 2 else "ok")  # fmt: skip
        batch.add_result("r1", "vm@debug", res)
    store.write_batch(batch)
    res = subprocess.run([*NGB, "status", "r1", "--json", "--db", str(tmp_path / "r.duckdb")],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 0, res.stderr
    (row,) = json.loads(res.stdout)["devices"]
    assert (row["device"], row["done"], row["failed"], row["total"]) == ("part", 3, 1, 3)


# ---------------------------------------------------------------- a real cluster


@pytest.fixture
def cluster(slurm_cluster: SlurmCluster, monkeypatch, tmp_path):
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    monkeypatch.setenv("NGB_HOME", str(tmp_path / "home"))
    seed_timm_names(tmp_path / "home")
    slurm_cluster.cancel_all()
    yield slurm_cluster
    slurm_cluster.cancel_all()


def slurm_device(name: str, workdir: Path, **table: object) -> Device:
    return Device(name=name, host="localhost", transport="slurm", python=sys.executable,
                  workdir=str(workdir), slurm={"partition": PARTITION, **table})  # fmt: skip


def save_inventory(*devices: Device) -> Path:
    path = Path(os.environ["NGB_HOME"]) / "config" / "devices.toml"
    Inventory(list(devices), path=path).save()
    return path


def staged_sweep(first_s: float, rest_s: float, n: int = 3) -> Sweep:
    """``n`` no-op trials: the first compiles for ``first_s``, the others for ``rest_s`` (long
    enough that a kill a second into the second trial lands in it on a loaded machine)."""
    head = noop_sweep(1).to_toml().split("[[matrix]]")[0].replace('"noop"', '"slurm"', 1)
    text = head + "".join(
        f'[[matrix]]\nmodels = ["resnet18"]\ncompilers = ["noop"]\nbatches = {batches}\n'
        f"compiler_options = {{ noop = {{ compile_s = {seconds} }} }}\n\n"
        for batches, seconds in (([1], first_s), (list(range(2, n + 1)), rest_s))
    )
    sweep = loads_sweep(text)
    assert [t.batch for t in sweep.trials()] == list(range(1, n + 1)), text
    return sweep


def with_retries(sweep: Sweep, n: int) -> Sweep:
    return dataclasses.replace(sweep, measure={**sweep.measure, "retry_killed": n})


def jobs_named(cluster: SlurmCluster, run_id: str) -> list[dict[str, str]]:
    return [j for j in cluster.jobs() if j["name"].startswith(f"ngb-{run_id}-")]


def trial_rows(db: Path, run_id: str) -> list[tuple[str, str, str, str, dict]]:
    _, rows = Store(db).select(
        "SELECT device, key, status, coalesce(error, ''), extra FROM trials WHERE run_id = ? "
        "ORDER BY key",
        [run_id],
    )
    return [(d, k, s, e, json.loads(x or "{}")) for d, k, s, e, x in rows]


def the_run(workdir: Path, timeout: float = 60) -> Path:
    """The run dir the CLI's start made in the slot's work dir."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = [p for p in (workdir / "runs").glob("*") if (p / "trials.jsonl").exists()]
        if found:
            return found[0]
        time.sleep(0.2)
    raise AssertionError(f"no run dir under {workdir}")


def started(run_dir: Path, index: int) -> str | None:
    """The key of the trial the agent started as number ``index`` (None: not yet)."""
    events = run_dir / "events.jsonl"
    # the agent may be writing the last line as we read: decode gives None for a partial one
    for line in events.read_text().splitlines() if events.exists() else []:
        event = decode(line) or {}
        if event.get("type") == "trial_started" and event.get("index") == index:
            return str(event["key"])
    return None


async def until(check, timeout: float, what: str):  # noqa: ANN001, ANN201 - a test helper
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = await asyncio.to_thread(check)
        if value:
            return value
        await asyncio.sleep(0.3)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


def cli_run(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*NGB, "run", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip


async def follow_in_console(db: Path, inventory: Path, run_id: str):  # noqa: ANN201
    """The console as an operator opens it while ``ngb run`` goes on: it re-attaches the run by
    itself. Returns the app's context (to leave when done) and its orchestrator."""
    from ngb.tui.app import NgbApp
    from ngb.tui.backend import Backend

    app = NgbApp(Backend(db_path=db, inventory_path=inventory), start_screen="run",
                 cursor_blink=False)  # fmt: skip
    context = app.run_test(size=(160, 48))
    await context.__aenter__()

    def attached() -> bool:
        return app.backend.has_orchestrator() and run_id in app.backend.orchestrator()._runs

    await until(attached, 60, "the console re-attached the run")
    return context, app.backend.orchestrator()


def scheduler_errors(db: Path, run_id: str) -> list[tuple[str, str]]:
    return [(e["kind"], e["message"]) for e in Store(db).errors(run_id)]


async def two_followers_see_the_job_end(
    cluster: SlurmCluster, tmp_path: Path, sweep: Sweep, dev: Device, kill: bool
) -> tuple[str, dict, str, list[dict[str, str]], Path]:
    """``ngb run`` and the console follow one run until the job ends (``kill``: an outside
    scancel while the second trial compiles; else the job's own time limit). Returns the run,
    the console's summary, the CLI's output and exit status as text, the run's jobs, the db."""
    inventory = save_inventory(dev)
    sweep_file, db = tmp_path / "slurm.toml", tmp_path / "r.duckdb"
    sweep_file.write_text(sweep.to_toml())
    cli = cli_run(str(sweep_file), "-d", dev.name, "--db", str(db))
    run_dir = await asyncio.to_thread(the_run, Path(dev.workdir))
    run_id = run_dir.name
    await until(lambda: started(run_dir, 1), 120, "the first trial started")
    context, console = await follow_in_console(db, inventory, run_id)
    try:
        if kill:
            await until(lambda: started(run_dir, 2), 120, "the second trial started")
            await asyncio.sleep(1.0)  # mid-compile
            job = jobs_named(cluster, run_id)[0]["id"]
            assert cluster.run("scancel", job).returncode == 0  # someone else's scancel
        summary = await asyncio.wait_for(console.wait(run_id), 200)
    finally:
        await context.__aexit__(None, None, None)
    out, _ = await asyncio.to_thread(cli.communicate, timeout=scaled(120))
    return run_id, summary, f"{out}\nexit {cli.returncode}", jobs_named(cluster, run_id), db


async def test_an_outside_scancel_with_the_cli_and_the_console_following_fails_one_trial(
    cluster, tmp_path
):
    dev = slurm_device("one", tmp_path / "w")
    sweep = staged_sweep(0.5, 6.0)  # killed a second into the second: the third never runs
    run_id, console, out, jobs, db = await two_followers_see_the_job_end(
        cluster, tmp_path, sweep, dev, kill=True
    )
    assert [j["state"] for j in jobs] == ["CANCELLED"], jobs  # no second job from anyone
    why = f"killed by the scheduler: Slurm job {jobs[0]['id']} CANCELLED on {cluster.node}@debug"
    rows = trial_rows(db, run_id)
    assert [r[2] for r in rows].count("failed") == 1 and len(rows) == 2, rows
    failed = next(r for r in rows if r[2] == "failed")
    assert failed[3].startswith(why) and failed[0] == f"{cluster.node}@{PARTITION}"
    assert "exit 1" in out and why in out, out  # the CLI: the run failed, and why
    assert console["devices"]["one"]["state"] == "failed", console  # the console: the same
    assert str(console["devices"]["one"]["error"]).startswith(why)
    (row,) = Store(db).run_devices(run_id)
    extra = row["extra"] if isinstance(row["extra"], dict) else json.loads(row["extra"])
    assert row["state"] == "failed" and extra["restarts"] == 0  # nothing restarted
    errors = scheduler_errors(db, run_id)
    assert not [m for k, m in errors if k == "agent"], errors  # no "agent died ... restart"
    assert len([m for _, m in errors if m.startswith(why)]) == 1, errors  # said once


@pytest.mark.slow
async def test_a_timeout_with_the_cli_and_the_console_following_fails_one_trial(cluster, tmp_path):
    # Slurm's smallest limit is a minute; its time-limit check runs every ~30 s after that.
    dev = slurm_device("one", tmp_path / "w", time_limit="1")
    sweep = noop_sweep(2, compile_s=200.0, name="slurm")
    run_id, console, out, jobs, db = await two_followers_see_the_job_end(
        cluster, tmp_path, sweep, dev, kill=False
    )
    assert [j["state"] for j in jobs] == ["TIMEOUT"], jobs
    why = (
        f"killed by the scheduler: Slurm job {jobs[0]['id']} TIMEOUT on {cluster.node}@debug "
        "(time limit 1:00)"
    )
    rows = trial_rows(db, run_id)
    assert [(r[2], r[3].startswith(why)) for r in rows] == [("failed", True)], rows
    assert console["devices"]["one"]["state"] == "failed" and "exit 1" in out, (console, out)
    assert console["devices"]["one"]["restarts"] == 0
    assert not [m for k, m in scheduler_errors(db, run_id) if k == "agent"]


@pytest.mark.slow
async def test_retry_killed_runs_the_killed_trial_again_once_while_both_follow(cluster, tmp_path):
    dev = slurm_device("one", tmp_path / "w")
    sweep = with_retries(staged_sweep(0.5, 6.0), 1)
    run_id, console, out, jobs, db = await two_followers_see_the_job_end(
        cluster, tmp_path, sweep, dev, kill=True
    )
    assert [j["state"] for j in jobs] == ["CANCELLED", "COMPLETED"], jobs  # one new job
    assert "exit 0" in out and console["devices"]["one"]["state"] == "finished", (out, console)
    assert console["devices"]["one"]["restarts"] == 0
    rows = trial_rows(db, run_id)
    assert sorted(r[1] for r in rows) == sorted(t.key for t in sweep.trials())  # each once
    assert {r[2] for r in rows} == {"ok"}
    retried = [r for r in rows if r[4]["slurm"].get("killed_retries")]
    assert [r[4]["slurm"]["killed_retries"] for r in retried] == [1]
    assert retried[0][4]["slurm"]["job"] == int(jobs[1]["id"])  # measured in the new job
    lines = [m for k, m in scheduler_errors(db, run_id) if k == "scheduler"]
    assert len(lines) == 1 and "runs again in a new allocation (1/1)" in lines[0], lines


@pytest.mark.slow
async def test_resume_with_retry_killed_runs_a_trial_killed_while_nobody_followed(
    cluster, tmp_path
):
    dev = slurm_device("one", tmp_path / "w")
    save_inventory(dev)
    sweep = staged_sweep(0.5, 6.0)
    sweep_file, db = tmp_path / "slurm.toml", tmp_path / "r.duckdb"
    sweep_file.write_text(sweep.to_toml())
    cli = cli_run(str(sweep_file), "-d", "one", "--db", str(db), "--retry-killed", "1")
    run_dir = await asyncio.to_thread(the_run, tmp_path / "w")
    run_id = run_dir.name
    await until(lambda: started(run_dir, 1), 120, "the first trial started")
    cli.kill()  # the workstation went away (kill -9): nobody follows the run now
    await asyncio.to_thread(cli.communicate, timeout=30)
    killed = await until(lambda: started(run_dir, 2), 120, "the second trial started")
    await asyncio.sleep(1.0)
    assert cluster.run("scancel", jobs_named(cluster, run_id)[0]["id"]).returncode == 0
    await until(lambda: [j["state"] for j in jobs_named(cluster, run_id)] == ["CANCELLED"], 60,
                f"the job ended: {jobs_named(cluster, run_id)}")  # fmt: skip

    resume = [*NGB, "run", str(sweep_file), "-d", "one", "--db", str(db), "--resume"]
    refused = await asyncio.to_thread(subprocess.run, [*resume, "--retry-killed", "2"],
                                      capture_output=True, text=True, timeout=60)  # fmt: skip
    assert refused.returncode != 0 and "started with retry_killed = 1" in refused.stderr
    res = await asyncio.to_thread(subprocess.run, resume, capture_output=True, text=True,
                                  timeout=180)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    rows = trial_rows(db, run_id)
    assert sorted(r[1] for r in rows) == sorted(t.key for t in sweep.trials())  # each once
    assert {r[2] for r in rows} == {"ok"}, [(r[1], r[2], r[3]) for r in rows]
    assert {r[1]: r[4]["slurm"].get("killed_retries") for r in rows}[killed] == 1
    assert len(jobs_named(cluster, run_id)) == 2
    assert Store(db).run(run_id)["status"] == "finished"


@pytest.mark.slow
async def test_a_second_run_on_a_busy_slot_waits_in_slurms_queue(cluster, tmp_path):
    dev = slurm_device("one", tmp_path / "w")  # whole nodes: the second job pends
    save_inventory(dev)
    db = tmp_path / "r.duckdb"
    first = Orchestrator(Store(db), Inventory([dev]))
    run_id = await first.start(noop_sweep(3, compile_s=8.0, name="first"), ["one"])
    await until(lambda: [j["state"] for j in jobs_named(cluster, run_id)] == ["RUNNING"], 60,
                "the first run's job runs")  # fmt: skip
    sweep_file = tmp_path / "second.toml"
    sweep_file.write_text(noop_sweep(1, name="second").to_toml())
    second = cli_run(str(sweep_file), "-d", "one", "--db", str(db))

    def pending() -> list[dict[str, str]]:
        return [j for j in cluster.jobs() if j["name"].startswith("ngb-second-")]

    queued = await until(pending, 60, "the second run's job is queued")
    assert queued[0]["state"] == "PENDING" and queued[0]["reason"] == "Resources", queued
    summary = await asyncio.wait_for(first.wait(run_id), 120)
    await first.close()
    out, _ = await asyncio.to_thread(second.communicate, timeout=scaled(120))
    assert summary["status"] == "finished", summary
    assert second.returncode == 0, out
    line = f"queued: one is busy with run {run_id}"
    assert line in out and "run refused" not in out, out
    assert [j["state"] for j in pending()] == ["COMPLETED"]


@pytest.mark.slow
async def test_ngb_cancel_is_accounted_cancelled_and_leaves_no_queue_line(cluster, tmp_path):
    dev = slurm_device("one", tmp_path / "w")
    db = tmp_path / "r.duckdb"
    orch = Orchestrator(Store(db), Inventory([dev]))
    run_id = await orch.start(noop_sweep(3, compile_s=3.0, name="slurm"), ["one"])
    while orch.device_states(run_id)["one"]["done"] < 1:
        await asyncio.sleep(0.1)
    other = Orchestrator(Store(db), Inventory([dev]))  # `ngb cancel` from another process
    await asyncio.wait_for(other.cancel(run_id), 120)
    await other.close()
    summary = await asyncio.wait_for(orch.wait(run_id), 60)
    await orch.close()
    assert summary["devices"]["one"]["state"] == "cancelled", summary
    assert [j["state"] for j in jobs_named(cluster, run_id)] == ["CANCELLED"]  # as Slurm counts
    # the trial its scancel ended is a cancelled trial: not recorded, nothing failed
    assert [r[2] for r in trial_rows(db, run_id)] == ["ok"]
    (row,) = Store(db).run_devices(run_id)
    assert row["state"] == "cancelled" and not str(row["message"]).startswith("slurm: RUNNING")


def test_probe_through_srun_says_the_nodes_own_error(cluster, tmp_path):
    """The node lacks a module the login host has: the probe says the node's words."""
    python = tmp_path / "python"
    python.write_text(
        "#!/bin/sh\n"
        'if [ -n "$SLURM_JOB_ID" ]; then\n'
        "  echo \"ModuleNotFoundError: No module named 'psutil'\" >&2; exit 1\n"
        "fi\n"
        f'exec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    dev = Device(name="nopsutil", host="localhost", transport="slurm", python=str(python),
                 workdir=str(tmp_path / "w"), slurm={"partition": PARTITION})  # fmt: skip
    save_inventory(dev)
    res = subprocess.run([*NGB, "devices", "probe", "nopsutil"], capture_output=True, text=True,
                         timeout=180)  # fmt: skip
    assert res.returncode != 0
    assert "No module named 'psutil'" in res.stdout + res.stderr, res.stdout + res.stderr
    assert "Terminating StepId" not in res.stdout + res.stderr
