"""The device's state beside every number: read it, plan what would quiet it, apply and undo."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from ngb.core.base import device_state

from tests.cli_helpers import ngb


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A sysfs tree (two cpufreq policies, boost on) and an nvidia-smi that logs its calls."""
    cpu = tmp_path / "cpu"
    for policy, governor in (("policy0", "powersave"), ("policy1", "performance")):
        (cpu / "cpufreq" / policy).mkdir(parents=True)
        (cpu / "cpufreq" / policy / "scaling_governor").write_text(governor + "\n")
    (cpu / "cpufreq" / "boost").write_text("1\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"open({str(tmp_path / 'smi.log')!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        "if any(a.startswith('--query-gpu') for a in sys.argv):\n"
        "    print('0, 1410, 1980, Enabled, 0x0000000000000001')\n"
    )
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def test_read_records_governor_boost_and_gpu_clocks(machine: Path) -> None:
    state = device_state.read(machine / "cpu")
    assert state["governor"] == "performance,powersave" and state["boost"] == "on"
    assert state["gpus"][0]["sm_clock_mhz"] == "1410"
    assert state["gpus"][0]["sm_clock_max_mhz"] == "1980"


def test_plan_apply_and_undo_restore_the_machine(machine: Path) -> None:
    cpu = machine / "cpu"
    changes = device_state.plan(cpu)
    assert [c.what for c in changes] == ["cpu governor", "cpu boost", "gpu 0 clocks"]
    governor = cpu / "cpufreq" / "policy0" / "scaling_governor"
    assert changes[0].files == {str(governor): "performance"}  # policy1 is already there
    assert changes[2].argv == ["nvidia-smi", "-i", "0", "-lgc", "1980,1980"]

    undo_file = machine / "undo.json"
    assert device_state.apply(changes, undo_file) == []
    assert governor.read_text() == "performance" and (cpu / "cpufreq" / "boost").read_text() == "0"
    assert "-i 0 -lgc 1980,1980" in (machine / "smi.log").read_text()
    saved = json.loads(undo_file.read_text())
    assert {str(governor): "powersave"} in [step["files"] for step in saved]

    assert device_state.undo(undo_file) == []
    assert governor.read_text() == "powersave" and (cpu / "cpufreq" / "boost").read_text() == "1"
    assert "-i 0 -rgc" in (machine / "smi.log").read_text() and not undo_file.exists()


def test_a_refused_write_is_reported_and_nothing_else_is_claimed(machine: Path) -> None:
    cpu = machine / "cpu"
    boost = cpu / "cpufreq" / "boost"
    boost.unlink()
    boost.mkdir()  # writing to a directory fails, as a read-only sysfs file does
    changes = [c for c in device_state.plan(cpu) if c.what != "gpu 0 clocks"]
    assert [c.what for c in changes] == ["cpu governor"]  # a boost that cannot be read: unknown
    changes.append(device_state.Change("cpu boost", "on", "off", "test", files={str(boost): "0"}))
    errors = device_state.apply(changes, machine / "undo.json")
    assert len(errors) == 1 and errors[0].startswith("cpu boost:")
    assert len(json.loads((machine / "undo.json").read_text())) == 1


def test_every_result_records_the_state_it_ran_under(tmp_path: Path) -> None:
    from ngb.core.records.types import MeasureSettings, TrialSpec
    from ngb.core.trial.measure import run_trial

    measure = MeasureSettings(warmup_s=0.0, min_iters=1, min_duration_s=0.01, repetitions=2,
                              workers=1, quiet_check_s=0.0)  # fmt: skip
    result = run_trial(TrialSpec(model="m", compiler="noop", measure=measure))
    assert set(result.extra["device_state"]) == {"governor", "boost", "gpus", "nvpmodel"}


def test_cli_shows_the_plan_for_localhost(tmp_path: Path) -> None:
    env = {**os.environ, "NGB_HOME": str(tmp_path)}
    done = ngb("devices", "tune", "localhost", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("localhost: governor")
