"""Profile passes across a resume (issue 34, ``ngb.sweeps.run.resume_profile``): a run's profile
setting is the one it was started with and carries over to what a resume runs;
``--resume --profile`` of a run started without passes is refused in one line, before anything
is followed; a resume says how many finished trials have no profile."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from ngb.core.records import events
from ngb.core.records.types import Stats, TrialResult, TrialSpec
from ngb.devices.inventory import Device, Inventory
from ngb.sweeps.cli import cli
from ngb.sweeps.run.resume_profile import resume_line
from ngb.sweeps.spec.sweep import Sweep, loads_sweep
from ngb.sweeps.store.database import Store

from tests.cli_helpers import ngb
from tests.test_tui_ops import profile


def conv_sweep(profile_on: bool, widths: tuple[int, ...] = (8, 12, 16)) -> Sweep:
    return loads_sweep(f"""
name = "profres"
[measure]
warmup_iters = 0
warmup_s = 0
min_iters = 2
min_duration_s = 0.02
repetitions = 2
workers = 1
quiet_check_s = 0
energy_idle_s = 0
verify = false
cpu_interval_s = 0.05
profile = {"true" if profile_on else "false"}
[[matrix]]
models = ["conv"]
compilers = ["identity"]
widths = {list(widths)}
batches = [1]
""")


def stored_run(path: Path, sweep: Sweep, results: list[TrialResult]) -> Store:
    """A run of ``sweep`` on localhost as an interrupted one leaves it: some trials stored,
    the device detached."""
    store = Store(path)
    store.create_run("r1", sweep.name, sweep.to_toml(), ["localhost"], len(sweep.trials()), {})
    store.set_run_status("r1", "running")
    store.upsert_run_device("r1", "localhost", state="detached", n_trials=3, n_done=1)
    if results:
        store.ingest_results("r1", "localhost", results)
    return store


def finished(spec: TrialSpec, profile_data: dict[str, object]) -> TrialResult:
    return TrialResult(
        key=spec.key, spec=spec.to_dict(), host="lab", started_at=1.7e9, finished_at=1.7e9 + 1,
        throughput=Stats(n=2, mean=1000.0, std=10.0), precision="fp32",
        repetitions=[{"iters": 10, "elapsed_s": 0.01, "throughput": t} for t in (990.0, 1010.0)],
        extra={"profile": profile_data},
    )  # fmt: skip


def test_a_resume_says_which_finished_trials_have_no_profile(tmp_path: Path) -> None:
    sweep = conv_sweep(True)
    first, second, _ = sweep.trials()
    passed = profile("identity", 1)
    results = [finished(first, passed.to_dict()), finished(second, {"error": "took too long"})]
    store = stored_run(tmp_path / "r.duckdb", sweep, results)
    line = resume_line(store, "r1")
    assert line == (
        "profile: on for 3 trial(s), as run r1 was started; 1 of its 2 finished trial(s) have "
        "no profile (first: took too long)"
    )
    assert resume_line(store, "r1", asked=True) == line  # --profile agrees with the run


def test_resume_profile_of_a_run_started_without_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NGB_HOME", str(tmp_path / "home"))
    sweep = conv_sweep(False)
    db = tmp_path / "r.duckdb"
    store = stored_run(db, sweep, [])
    assert resume_line(store, "r1") is None  # nothing to say of a run without passes
    sweep_file = tmp_path / "s.toml"
    sweep_file.write_text(sweep.to_toml())
    args = ["run", str(sweep_file), "-d", "localhost", "--resume", "--db", str(db)]
    out = CliRunner().invoke(cli, [*args, "--profile"])
    assert out.exit_code != 0
    (line,) = out.stderr.strip().splitlines()
    assert "run r1 was started without a profile pass for 3 of its trials" in line
    assert "resume without --profile" in line and "Traceback" not in out.output
    device = store.run_devices("r1")[0]
    assert device["state"] == "detached"  # nothing was started or followed
    assert "pid" not in str(device["extra"])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_killed_profiled_run_resumes_with_its_passes(tmp_path: Path) -> None:
    """``ngb run --profile --detach``, its agent killed after the first trial, then ``ngb run
    --resume``: the agent starts again from its checkpoint and every trial, before and after,
    has its profile stored keyed to it."""
    home, work = tmp_path / "home", tmp_path / "device"
    Inventory(
        [Device(name="localhost", host="localhost", transport="local", python=sys.executable,
                workdir=str(work))]
    ).save(home / "config" / "devices.toml")  # fmt: skip
    env = {**os.environ, "NGB_HOME": str(home), "COLUMNS": "160"}
    env.pop("NGB_DB", None)
    sweep = conv_sweep(False)  # the passes come from --profile
    sweep_file = tmp_path / "s.toml"
    sweep_file.write_text(sweep.to_toml())
    db = str(tmp_path / "r.duckdb")
    base = ["run", str(sweep_file), "-d", "localhost", "--db", db]
    # --keep: the run's events stay for the checks below
    out = ngb(
        *base, "--profile", "--detach", "--isolate", "inprocess", "--keep", env=env, timeout=240
    )
    assert out.returncode == 0, out.stderr
    run_id = out.stdout.split("run ")[1].split()[0]
    run_dir = work / "runs" / run_id
    deadline = time.monotonic() + 120
    while not (run_dir / "checkpoint.jsonl").exists() or not (
        (run_dir / "checkpoint.jsonl").read_text().count("\n")
    ):
        assert time.monotonic() < deadline, "no trial finished in 120 s"
        time.sleep(0.2)
    pid = int((run_dir / "agent.pid").read_text())
    group = os.getpgid(pid)  # alive: two trials to go; in a session of its own (setsid)
    assert group != os.getpgrp()  # never this test's own group
    os.killpg(group, signal.SIGKILL)  # the agent and its trial's children
    resumed = ngb(*base, "--resume", env=env, timeout=240)  # no --profile: carried over
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"profile: on for 3 trial(s), as run {run_id} was started" in resumed.stdout
    store = Store(db)
    # the SIGKILL may have torn a line: decode gives None for it, as the agent's readers do
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    started = [e for e in map(events.decode, lines) if e and e.get("type") == "run_started"]
    assert len(started) == 2 and started[1]["skipped"] >= 1  # started again from its checkpoint
    _, rows = store.select(
        "SELECT t.key, count(p.key) FROM trials t LEFT JOIN profiles p ON p.key = t.key "
        "AND p.run_id = t.run_id WHERE t.run_id = ? AND t.status = 'ok' GROUP BY t.key",
        [run_id],
    )
    assert sorted(k for k, _ in rows) == sorted(t.key for t in sweep.trials())
    assert all(n == 1 for _, n in rows), rows  # each trial, before and after the kill, once
