"""The device's own state that moves throughput: read it, record it, and (asked) quiet it.

Why: MLPerf submitters and pyperf's ``system tune`` fix what makes a machine's speed wander
before they measure -- a CPU frequency governor that scales with load, turbo/boost that depends
on temperature and on how many cores are busy, GPU clocks that boost and throttle, a Jetson's
power model. A number measured under one state is not comparable with one measured under another
unless the state stands beside it, so every result records ``read()`` (``extra["device_state"]``),
and ``ngb devices tune DEVICE`` shows ``plan()``: what would make the device quieter, the command
or file write for each, and how to undo it. ``apply`` makes the changes (after the operator
confirmed, on the workstation) and writes what it replaced to an undo file; ``undo`` restores it.

Stdlib only (it ships in the agent). Reads are best-effort: what a system does not have is None.
Writes need root on the device; a refused write is reported per change, never half-silent.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypedDict

#: where sysfs is; ``NGB_SYSFS_ROOT`` points ``plan``/``apply``/``undo`` at a fake tree (tests, a
#: dry run on a copy) instead of the machine's own ``/sys``
SYSFS_ENV = "NGB_SYSFS_ROOT"


def cpu_root() -> Path:
    """The CPU folder of sysfs (``/sys/devices/system/cpu`` unless ``NGB_SYSFS_ROOT`` says)."""
    return Path(os.environ.get(SYSFS_ENV) or "/sys") / "devices" / "system" / "cpu"


class GpuState(TypedDict):
    """One NVIDIA GPU as nvidia-smi reports it (clock fields as printed, MHz)."""

    index: int
    sm_clock_mhz: str
    sm_clock_max_mhz: str
    persistence: str
    throttle_reasons: str | None


class DeviceState(TypedDict):
    """What a device runs under (``read``; recorded as ``extra["device_state"]``)."""

    governor: str | None
    boost: str | None
    gpus: list[GpuState] | None
    nvpmodel: str | None


@dataclass
class Change:
    """One step that makes the device quieter, and how to take it back."""

    what: str  # e.g. "cpu governor", "cpu boost", "gpu clocks"
    now: str | None
    wanted: str
    why: str
    files: dict[str, str] = field(default_factory=dict)  # sysfs path -> value to write
    argv: list[str] = field(default_factory=list)  # or a command to run
    undo_argv: list[str] = field(default_factory=list)  # its undo (files undo from the old values)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _read(path: Path) -> str | None:
    with contextlib.suppress(OSError):
        return path.read_text().strip()
    return None


def _run(argv: list[str], timeout: float = 10.0) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode == 0:
            return done.stdout.strip()
    return None


def _governors(cpu: Path) -> dict[str, str]:
    out = {}
    for policy in sorted((cpu / "cpufreq").glob("policy*")):
        value = _read(policy / "scaling_governor")
        if value is not None:
            out[str(policy / "scaling_governor")] = value
    return out


def _boost(cpu: Path) -> tuple[Path, str] | None:
    """(file, "on"/"off") for turbo/boost: cpufreq/boost (1 = on) or intel_pstate/no_turbo."""
    boost = cpu / "cpufreq" / "boost"
    if (value := _read(boost)) is not None:
        return boost, "on" if value == "1" else "off"
    no_turbo = cpu / "intel_pstate" / "no_turbo"
    if (value := _read(no_turbo)) is not None:
        return no_turbo, "off" if value == "1" else "on"
    return None


def _gpus() -> list[GpuState]:
    """Per NVIDIA GPU: index, SM clock now and max, persistence mode (nvidia-smi's CSV)."""
    fields = "index,clocks.sm,clocks.max.sm,persistence_mode,clocks_event_reasons.active"
    text = _run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"])
    gpus: list[GpuState] = []
    for line in (text or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 4 and parts[0].isdigit():
            gpus.append({"index": int(parts[0]), "sm_clock_mhz": parts[1],
                         "sm_clock_max_mhz": parts[2], "persistence": parts[3],
                         "throttle_reasons": parts[4] if len(parts) > 4 else None})  # fmt: skip
    return gpus


def read(cpu: Path | None = None) -> DeviceState:
    """What the device runs under now (None where it does not say)."""
    cpu = cpu or cpu_root()
    governors = sorted(set(_governors(cpu).values()))
    boost = _boost(cpu)
    return {
        "governor": ",".join(governors) or None,
        "boost": boost[1] if boost else None,
        "gpus": _gpus() or None,
        "nvpmodel": _run(["nvpmodel", "-q"]),
    }


def plan(cpu: Path | None = None) -> list[Change]:
    """The changes that would make this device quieter (empty: nothing to do or nothing known)."""
    cpu = cpu or cpu_root()
    changes = []
    governors = _governors(cpu)
    slow = {path: value for path, value in governors.items() if value != "performance"}
    if slow:
        changes.append(Change(
            "cpu governor", ",".join(sorted(set(slow.values()))), "performance",
            "a scaling governor changes the clock with the load, inside a timed loop",
            files={path: "performance" for path in slow},
        ))  # fmt: skip
    boost = _boost(cpu)
    if boost and boost[1] == "on":
        path, _ = boost
        off = "1" if path.name == "no_turbo" else "0"
        changes.append(Change(
            "cpu boost", "on", "off",
            "turbo clocks depend on temperature and on how many cores are busy",
            files={str(path): off},
        ))  # fmt: skip
    for gpu in _gpus():
        top = gpu["sm_clock_max_mhz"]
        if str(top).isdigit():
            changes.append(Change(
                f"gpu {gpu['index']} clocks", f"{gpu['sm_clock_mhz']} MHz (boosting)",
                f"locked at {top} MHz", "boost clocks follow power and temperature",
                argv=["nvidia-smi", "-i", str(gpu["index"]), "-lgc", f"{top},{top}"],
                undo_argv=["nvidia-smi", "-i", str(gpu["index"]), "-rgc"],
            ))  # fmt: skip
    if shutil.which("jetson_clocks"):
        changes.append(Change(
            "jetson clocks", "dynamic", "maximum (jetson_clocks)",
            "a Jetson scales CPU, GPU and EMC clocks with load",
            argv=["jetson_clocks", "--store", "/tmp/ngb-jetson-clocks"],
            undo_argv=["jetson_clocks", "--restore", "/tmp/ngb-jetson-clocks"],
        ))  # fmt: skip
    return changes


def apply(changes: list[Change], undo_file: Path) -> list[str]:
    """Make ``changes``; write what they replaced to ``undo_file``. Returns one line per change
    that failed (empty: all done)."""
    undo: list[dict[str, object]] = []
    errors = []
    for change in changes:
        old = {path: _read(Path(path)) for path in change.files}
        try:
            if change.argv:  # the tool itself stores what jetson_clocks replaces
                subprocess.run(change.argv, check=True, capture_output=True, timeout=30)
            for path, value in change.files.items():
                Path(path).write_text(value)
        except (OSError, subprocess.SubprocessError) as exc:
            errors.append(f"{change.what}: {exc}")
            continue
        undo.append({"files": {p: v for p, v in old.items() if v is not None},
                     "argv": change.undo_argv})  # fmt: skip
    if undo:
        undo_file.parent.mkdir(parents=True, exist_ok=True)
        previous = json.loads(undo_file.read_text()) if undo_file.is_file() else []
        # the oldest values win: applying twice must not make "tuned" the state to go back to
        undo_file.write_text(json.dumps(undo + previous, indent=1))
    return errors


def undo(undo_file: Path) -> list[str]:
    """Restore what ``apply`` replaced (newest change first); the undo file is removed when all
    of it went back. Returns one line per failure."""
    if not undo_file.is_file():
        return []
    errors = []
    for step in json.loads(undo_file.read_text()):
        try:
            for path, value in step.get("files", {}).items():
                Path(path).write_text(value)
            if step.get("argv"):
                subprocess.run(step["argv"], check=True, capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as exc:
            errors.append(f"undo {step}: {exc}")
    if not errors:
        undo_file.unlink()
    return errors
