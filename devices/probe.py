"""What a device is: hardware, OS, library versions, and which compilers can run there.

Runs on the device (``agent probe``), so it imports only the standard library, psutil and
``ngb.core``; library versions come from package metadata and compiler availability from each
compiler's ``available()`` (which uses ``find_spec``), so probing never imports torch or TVM.
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import socket
import subprocess
from pathlib import Path
from typing import TypedDict

from ngb.core.compilers import compiler_class, list_compilers
from ngb.core.trial.versions import library_versions

_TEGRA_RELEASE = Path("/etc/nv_tegra_release")


class GpuInfo(TypedDict, total=False):
    """One GPU as nvidia-smi reports it (memory and compute capability where it says them)."""

    name: str
    driver: str
    memory_mb: float
    compute_capability: str


class JetsonInfo(TypedDict):
    l4t_release: str  # the first line of /etc/nv_tegra_release ("" when unreadable)
    tegrastats: bool


class CompilerAvailability(TypedDict):
    available: bool
    reason: str


class CpuFreq(TypedDict):
    current_mhz: float
    min_mhz: float
    max_mhz: float


class Probe(TypedDict):
    """What ``agent probe`` prints (one JSON object); the store keeps it whole."""

    hostname: str
    arch: str
    cpu_model: str
    cores_logical: int | None
    cores_physical: int | None
    cpu_freq: CpuFreq | None
    ram_mb: float
    gpus: list[GpuInfo]
    jetson: JetsonInfo | None
    os: str
    kernel: str
    python: str
    versions: dict[str, str]
    cuda: str | None
    cudnn: str | None
    compilers: dict[str, CompilerAvailability]


def cpu_model() -> str:
    """The CPU's marketing name; ARM boards often only name the SoC ("Hardware"/"Model")."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        text = ""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and value.strip():
            fields.setdefault(key.strip().lower(), value.strip())
    for key in ("model name", "hardware", "model", "cpu model"):
        if key in fields:
            return fields[key]
    return platform.processor() or platform.machine()


def os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.partition("=")[2].strip().strip('"')
    except OSError:
        pass
    return platform.platform()


def nvidia_gpus() -> list[GpuInfo]:
    """GPUs as nvidia-smi reports them; empty where there is no nvidia-smi or it fails."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    query = "name,memory.total,driver_version,compute_cap"
    try:
        proc = subprocess.run(
            [exe, f"--query-gpu={query}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=15,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if proc.returncode != 0:
        return []
    gpus = []
    for line in proc.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3:
            continue
        gpu: GpuInfo = {"name": parts[0], "driver": parts[2]}
        with contextlib.suppress(ValueError):  # "[N/A]" on some boards
            gpu["memory_mb"] = float(parts[1])
        if len(parts) > 3:
            gpu["compute_capability"] = parts[3]
        gpus.append(gpu)
    return gpus


def jetson_info() -> JetsonInfo | None:
    """L4T release line and tegrastats presence on NVIDIA Jetson boards; None elsewhere."""
    if not _TEGRA_RELEASE.exists():
        return None
    try:
        release = _TEGRA_RELEASE.read_text(errors="replace").splitlines()[0].strip()
    except (OSError, IndexError):
        release = ""
    return {"l4t_release": release, "tegrastats": shutil.which("tegrastats") is not None}


def compilers_here() -> dict[str, CompilerAvailability]:
    """``{name: {available, reason}}`` for every registered compiler (internal ones excluded)."""
    out: dict[str, CompilerAvailability] = {}
    for name in list_compilers():
        try:
            ok, reason = compiler_class(name).available()
        except ModuleNotFoundError as exc:
            ok, reason = False, f"not in this ngb build (module {exc.name} missing)"
        except Exception as exc:  # a broken compiler module is "unavailable", not a crash
            ok, reason = False, f"{type(exc).__name__}: {exc}".splitlines()[0]
        out[name] = {"available": bool(ok), "reason": reason}
    return out


def probe() -> Probe:
    import psutil

    freq: CpuFreq | None = None
    try:
        f = psutil.cpu_freq()
        if f is not None:
            freq = {"current_mhz": f.current, "min_mhz": f.min, "max_mhz": f.max}
    except (OSError, NotImplementedError):
        pass
    versions = library_versions()
    return {
        "hostname": socket.gethostname(),
        "arch": platform.machine(),
        "cpu_model": cpu_model(),
        "cores_logical": os.cpu_count(),
        "cores_physical": psutil.cpu_count(logical=False),
        "cpu_freq": freq,
        "ram_mb": psutil.virtual_memory().total / 2**20,
        "gpus": nvidia_gpus(),
        "jetson": jetson_info(),
        "os": os_name(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "versions": versions,
        "cuda": versions.get("cuda"),
        "cudnn": versions.get("cudnn"),
        "compilers": compilers_here(),
    }
