"""``ngb run --detach`` returns within seconds (``ngb.sweeps.cli.detach``): a start that takes
longer goes on in a child process of its own, and the command names the run and its log."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
from ngb.devices.inventory import Device, Inventory
from ngb.sweeps.cli import detach
from ngb.sweeps.store.database import Store

from tests.cli_helpers import ngb
from tests.noop_sweeps import noop_sweep
from tests.timm_names import seed_timm_names


def _setup(tmp_path: Path, slow: bool = False) -> tuple[dict[str, str], Path, Path]:
    """A home with a local device ``localhost`` (and ``slow`` too, whose Python takes 3 s to
    start), a two-trial no-op sweep and where the store goes."""
    home = tmp_path / "home"
    devices = [Device(name="localhost", host="localhost", transport="local",
                      python=sys.executable, workdir=str(tmp_path / "device"))]  # fmt: skip
    if slow:
        devices.append(Device(name="slow", host="localhost", transport="local",
                              python=_slow_python(tmp_path, 3.0),
                              workdir=str(tmp_path / "slow-device")))  # fmt: skip
    Inventory(devices).save(home / "config" / "devices.toml")
    seed_timm_names(home)
    sweep = tmp_path / "noop.toml"
    sweep.write_text(noop_sweep(2, compile_s=0.5).to_toml())
    env = {**os.environ, "NGB_HOME": str(home), "COLUMNS": "200"}
    env.pop("NGB_DB", None)
    return env, sweep, home / "data" / "results.duckdb"


def _slow_python(tmp_path: Path, delay_s: float) -> str:
    """A device Python that takes ``delay_s`` to start."""
    wrapper = tmp_path / "slow-python"
    wrapper.write_text(f'#!/bin/sh\nsleep {delay_s}\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def test_a_start_that_takes_longer_goes_on_in_the_background(tmp_path: Path) -> None:
    # A run of several devices may be left to the starter at NGB_DETACH_WAIT_S; one device
    # whose every Python start takes 3 s holds the start well past that and the 0.5 s grace
    # after it. (With one quick device the start could end in the grace on a quiet machine and
    # the command then said what it always said, as the next test expects.)
    env, sweep, db = _setup(tmp_path, slow=True)
    env["NGB_DETACH_WAIT_S"] = "0.1"
    began = time.monotonic()
    out = ngb("run", str(sweep), "-d", "localhost,slow", "--detach", "--isolate", "inprocess",
              env=env)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert time.monotonic() - began < 30
    line = out.stdout.strip()
    assert "is starting on its devices in the background" in line, out.stdout
    run_id = line.split()[1]
    log = Path(line.rsplit("log: ", 1)[1].rstrip(")"))
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:  # the starter goes on until every device took the run
        if "detached" in log.read_text():
            break
        time.sleep(0.3)
    else:
        raise AssertionError(log.read_text())
    assert f"run {run_id} started" in log.read_text()
    assert Store(db).run(run_id)["status"] == "running"  # detached: `attach` stores the rest
    final = ngb("attach", run_id, env=env)
    assert final.returncode == 0, final.stderr
    assert len(Store(db).trials(run_id=run_id)) == 4


def test_a_quick_start_says_what_it_always_said(tmp_path: Path) -> None:
    env, sweep, _ = _setup(tmp_path)
    env["NGB_DETACH_WAIT_S"] = "60"
    out = ngb("run", str(sweep), "-d", "localhost", "--detach", "--isolate", "inprocess", env=env)
    assert out.returncode == 0, out.stderr
    assert " started" in out.stdout and "detached; follow with" in out.stdout
    assert not list((tmp_path / "home" / "data" / "detached").glob("*.log"))  # said here
    refused = ngb("run", str(sweep), "-d", "nosuch", "--detach", env=env)
    assert refused.returncode != 0 and "nosuch" in refused.stderr


def test_the_wait_counts_from_the_commands_own_start() -> None:
    # The interpreter's start-up and ngb's imports count toward --detach's few seconds: a
    # fresh process has been running a little while when it asks, never more than WAIT_S.
    code = "from ngb.sweeps.cli import detach; print(detach.started_ago(), detach.WAIT_S)"
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    ago, wait_s = map(float, fresh.stdout.split())
    assert 0.0 < ago < wait_s, fresh.stdout + fresh.stderr
    age = time.time() - psutil.Process().create_time()
    assert abs(detach.started_ago() - min(age, detach.WAIT_S)) < 0.1  # this test process


def test_a_hostile_wait_falls_back_to_four_seconds() -> None:
    for text, want in (("nan", 4.0), ("inf", 4.0), ("-1", 0.0), ("1e9", 600.0), ("x", 4.0),
                       ("2.5", 2.5)):  # fmt: skip
        assert detach._wait_s(text) == want, text
