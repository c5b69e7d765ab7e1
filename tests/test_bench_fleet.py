"""``ngb bench loopback_devices --plain`` (issue 41): ngb's fleet beside a plain hand-written loop
on the same sshd, devices and accounts, so a reader can tell the machine's ceiling from ngb's own
cost. Run small: two devices, two short trials."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.cli_helpers import ngb
from tests.sshd import SSHD

pytestmark = pytest.mark.skipif(not Path(SSHD).exists(), reason="OpenSSH server not installed")


def test_the_plain_loop_runs_beside_ngb_on_the_same_devices() -> None:
    ran = ngb(
        "bench", "loopback_devices", "--devices", "2", "--trials", "2", "--sleep", "0.5",
        "--shell", "root", "--plain", "--plain-imports", "numpy,psutil", timeout=300,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "trials stored: 4 (4 distinct; expected 4)" in ran.stdout
    ngb_eff = re.search(r"^parallel efficiency: ([0-9.]+)", ran.stdout, re.M)
    plain = re.search(
        r"^plain loop beside it .*: wall ([0-9.]+) s, efficiency ([0-9.]+); ngb / plain: ([0-9.]+)",
        ran.stdout,
        re.M,
    )
    assert ngb_eff is not None and plain is not None, ran.stdout
    assert "importing numpy,psutil" in plain.group(0)  # what ngb's agent needs, loaded first
    wall, plain_eff, ratio = (float(g) for g in plain.groups())
    # two sleeps of 0.5 s each: the plain loop cannot beat its own serial work
    assert wall >= 1.0 and 0 < plain_eff <= 1.0
    assert ratio == pytest.approx(float(ngb_eff.group(1)) / plain_eff, abs=0.01)
