"""``ngb bench console`` prints the console's CPU share over a run (issue 20, done-when).

Only the figure's presence and the run it measured are checked: the share itself moves with the
machine's load (the goal, < 3 % of a core, is read by a person from the printed line)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest


def test_ngb_bench_console_prints_the_cpu_share_of_a_finished_run() -> None:
    exe = Path(sys.executable).with_name("ngb")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [str(exe), "bench", "console", "--trials", "3", "--label", "t"],
        capture_output=True, text=True, timeout=180, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip().splitlines()[-1]
    found = re.search(r"CPU share of ngb-tui during the run: ([\d.]+) % of a core", line)
    assert found, line
    assert 0.0 < float(found.group(1)) < 100.0, line
    assert "localhost 3/3 trials" in line, line
    assert "== " not in out.stdout + out.stderr  # one benchmark: its own output, no header


@pytest.mark.slow
def test_ngb_bench_console_fleet_prints_every_screen_and_leaves_nothing(tmp_path: Path) -> None:
    """Issue 41: the console with a followed fleet; a finished run used to leave its store
    (3.7 MB with 128 devices) in the temp dir."""
    exe = Path(sys.executable).with_name("ngb")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    out = subprocess.run(
        [str(exe), "bench", "console_fleet", "--devices", "4"],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert re.search(r"slowest screen with its content: [\d.]+ s", out.stdout), out.stdout
    assert list(tmp_path.iterdir()) == []
