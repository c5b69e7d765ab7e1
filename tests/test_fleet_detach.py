"""``ngb run --detach`` returns within seconds (``ngb.sweeps.cli.detach``): a start that takes
longer goes on in a child process of its own, and the command names the run and its log."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from ngb.devices.inventory import Device, Inventory
from ngb.sweeps.store.database import Store

from tests.cli_helpers import ngb
from tests.noop_sweeps import noop_sweep
from tests.timm_names import seed_timm_names


def _setup(tmp_path: Path) -> tuple[dict[str, str], Path, Path]:
    home = tmp_path / "home"
    Inventory(
        [Device(name="localhost", host="localhost", transport="local",
                python=sys.executable, workdir=str(tmp_path / "device"))]
    ).save(home / "config" / "devices.toml")  # fmt: skip
    seed_timm_names(home)
    sweep = tmp_path / "noop.toml"
    sweep.write_text(noop_sweep(2, compile_s=0.5).to_toml())
    env = {**os.environ, "NGB_HOME": str(home), "COLUMNS": "200"}
    env.pop("NGB_DB", None)
    return env, sweep, home / "data" / "results.duckdb"


def test_a_start_that_takes_longer_goes_on_in_the_background(tmp_path: Path) -> None:
    env, sweep, db = _setup(tmp_path)
    env["NGB_DETACH_WAIT_S"] = "0.1"  # every start "takes longer" than that
    began = time.monotonic()
    out = ngb("run", str(sweep), "-d", "localhost", "--detach", "--isolate", "inprocess", env=env)
    assert out.returncode == 0, out.stderr
    assert time.monotonic() - began < 30
    line = out.stdout.strip()
    assert "is starting on its devices in the background" in line, out.stdout
    run_id = line.split()[1]
    log = Path(line.rsplit("log: ", 1)[1].rstrip(")"))
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:  # the starter finishes the start, then the agent the run
        checkpoint = list((tmp_path / "device").rglob("checkpoint.jsonl"))
        if checkpoint and checkpoint[0].read_text().count("\n") == 2:
            break
        time.sleep(0.3)
    else:
        raise AssertionError(log.read_text())
    assert f"run {run_id} started" in log.read_text() and "detached" in log.read_text()
    assert Store(db).run(run_id)["status"] == "running"  # detached: `attach` stores the rest
    final = ngb("attach", run_id, env=env)
    assert final.returncode == 0, final.stderr
    assert len(Store(db).trials(run_id=run_id)) == 2


def test_a_quick_start_says_what_it_always_said(tmp_path: Path) -> None:
    env, sweep, _ = _setup(tmp_path)
    env["NGB_DETACH_WAIT_S"] = "60"
    out = ngb("run", str(sweep), "-d", "localhost", "--detach", "--isolate", "inprocess", env=env)
    assert out.returncode == 0, out.stderr
    assert " started" in out.stdout and "detached; follow with" in out.stdout
    assert not list((tmp_path / "home" / "data" / "detached").glob("*.log"))  # said here
    refused = ngb("run", str(sweep), "-d", "nosuch", "--detach", env=env)
    assert refused.returncode != 0 and "nosuch" in refused.stderr
