"""Was the timed loop alone on the machine? Facts and telemetry recorded beside every number.

- Disturbance (``disturbance``): other processes' CPU share of the machine -- system-wide
  utilisation minus ngb's own (the measured worker with its descendants, such as a compiler's
  helper processes, and the sampling trial process: ``ngb.core.trial.cpu.ProcessFamily``,
  ``ngb.core.trial.cpu.others_percent``) -- over the timed loop, and
  over a short quiet check just before it (``OthersCpu`` over the worker's warm-up, or, where the
  warm-up is shorter than ``quiet_check_s``, ``quiet_check``: this process sleeps, so whatever runs
  belongs to someone else). The 1-minute load average is recorded too, but does not decide: it
  still carries this trial's own compile. Either share above the threshold, or another process
  holding the GPU, flags the trial "disturbed"; ``MeasureSettings.disturbed_retries`` then waits
  and measures again.
- CPU facts (``cpu_facts``): frequency scaling governor(s), current/min/max frequency, load
  average. Steal time comes from the CPU sampler.
- NVIDIA GPUs (``GpuMonitor``): SM/memory clocks, utilisation, memory used, power and other
  processes on the device -- never ngb's own (``own_processes``: the trial's process, its worker
  processes, its ancestors such as the agent, and processes that have already ended; on an H100
  every GPU trial was once flagged "disturbed" by its own parent's CUDA context), sampled
  through NVML (``nvidia-ml-py``, imported as ``pynvml``) on a side thread of the trial's process
  while a worker runs its timed loop. No package, no driver or no GPU: the monitor is simply off.
  ``sm_clock`` is the clock source the GPU warm-up settles on (``ngb.core.trial.warmup.settle``).
- Jetson boards (``TegraStats``): the ``tegrastats`` tool's lines during the timed loop (GR3D load
  and frequency, RAM, input power); absent elsewhere.
Every probe here is best-effort: a missing file or library gives None, never a failed trial.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ngb.core.trial.descendants import descendants

if TYPE_CHECKING:
    from ngb.core.trial.nvml_api import Nvml

_CPUFREQ = Path("/sys/devices/system/cpu/cpufreq")


def cpu_facts(cpufreq_dir: Path = _CPUFREQ) -> dict[str, str | float | None]:
    """Governor(s), frequency and load average now (None where the system does not say)."""
    facts: dict[str, str | float | None] = {
        "governor": None,
        "freq_mhz": None,
        "freq_min_mhz": None,
    }
    governors = set()
    with contextlib.suppress(OSError):
        for policy in sorted(cpufreq_dir.glob("policy*")):
            with contextlib.suppress(OSError):
                governors.add((policy / "scaling_governor").read_text().strip())
    if governors:
        facts["governor"] = ",".join(sorted(governors))
    with contextlib.suppress(Exception):
        import psutil

        freq = psutil.cpu_freq()
        if freq is not None:
            facts["freq_mhz"] = round(freq.current, 1)
            facts["freq_min_mhz"] = round(freq.min, 1) or None
            facts["freq_max_mhz"] = round(freq.max, 1) or None
    with contextlib.suppress(OSError, AttributeError):
        facts["loadavg_1m"] = round(os.getloadavg()[0], 2)
    facts["cpu_count"] = os.cpu_count()
    return facts


class OthersCpu:
    """Other processes' CPU share (0..100 of the machine) from now until ``read``: the machine's
    use minus this process's and its descendants' (a compiler's helper pool that outlives its
    compile, such as TVM's ``popen_worker``s, is ngb's own too)."""

    def __init__(self) -> None:
        import psutil
        from ngb.core.trial.cpu import ProcessFamily

        self._psutil = psutil
        self._proc = psutil.Process()
        self._family = ProcessFamily(self._proc, psutil.Error)
        psutil.cpu_percent(None)
        self._proc.cpu_percent(None)
        self._below, self._start = self._family.below_seconds(), time.monotonic()

    def read(self) -> float:
        from ngb.core.trial.cpu import others_percent

        elapsed = max(1e-6, time.monotonic() - self._start)
        below_pct = 100.0 * (self._family.below_seconds() - self._below) / elapsed
        own = self._proc.cpu_percent(None) + max(0.0, below_pct)
        return others_percent(self._psutil.cpu_percent(None), own, os.cpu_count() or 1)


def quiet_check(seconds: float) -> float | None:
    """Other processes' CPU share (0..100 of the machine) while this process sleeps ``seconds``
    (``ngb.core.trial.timing`` reads it over the warm-up instead where that lasts as long)."""
    if seconds <= 0:
        return None
    span = OthersCpu()
    time.sleep(seconds)
    return span.read()


def disturbance(
    *,
    threshold: float,
    before: float | None,
    during: float | None,
    gpu_others: Sequence[int] = (),
) -> str | None:
    """Why this timed loop counts as disturbed, or None. Shares are 0..100 of the machine;
    ``threshold`` is a fraction (0.15 = 15 % of all cores)."""
    limit = threshold * 100
    reasons = []
    if during is not None and during > limit:
        reasons.append(f"other processes used {during:.0f}% of the CPU during the timed loop")
    if before is not None and before > limit:
        reasons.append(f"{before:.0f}% just before it")
    if gpu_others:
        pids = ", ".join(str(p) for p in list(gpu_others)[:5])
        reasons.append(f"other processes on the GPU (pid {pids})")
    if not reasons:
        return None
    return f"{'; '.join(reasons)} (threshold {limit:.0f}%)"


# ------------------------------------------------------------------ ngb's own processes


def own_processes() -> set[int]:
    """ngb's own processes seen from here: this one, its ancestors (the trial's parent, the agent,
    the CLI) and its descendants (worker processes, a compiler's helpers)."""
    import psutil

    pids = {os.getpid()}
    with contextlib.suppress(psutil.Error):
        me = psutil.Process()
        pids.update(p.pid for p in me.parents())
        pids.update(p.pid for p in descendants(me))
    pids.discard(1)  # init is everyone's ancestor; it never holds a GPU
    return pids


def foreign(pids: Sequence[int] | set[int], own: set[int] | None = None) -> set[int]:
    """The pids that belong to someone else: not ngb's own and still alive (a worker that just
    ended can linger in NVML's list for a moment; an ended process disturbs nothing)."""
    import psutil

    own = own_processes() if own is None else own
    return {p for p in pids if p not in own and psutil.pid_exists(p)}


# ------------------------------------------------------------------ NVIDIA GPUs through NVML


def _load_nvml() -> Nvml | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver / no GPU: NVMLError_LibraryNotFound, _DriverNotLoaded ...
        return None
    return pynvml


def _device_index() -> int:
    """The NVML index of the GPU torch uses (CUDA_VISIBLE_DEVICES maps it; first one visible)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return int(visible) if visible.isdigit() else 0


class GpuMonitor:
    """Samples one NVIDIA GPU every ``interval_s`` between ``start()`` and ``stop()``.

    ``nvml`` is the ``pynvml`` module (a fake in tests); when it is None the monitor loads the real
    one and is ``available`` only if that works.
    """

    def __init__(self, interval_s: float = 0.1, nvml: Nvml | None = None, index: int | None = None):
        self.nvml = nvml if nvml is not None else _load_nvml()
        self.interval_s = interval_s
        self.samples: list[dict[str, float]] = []
        self.others: set[int] = set()
        self._own: set[int] = set()
        self._handle: object = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.nvml is not None:
            try:
                i = _device_index() if index is None else index
                self._handle = self.nvml.nvmlDeviceGetHandleByIndex(i)
            except Exception:
                self.nvml = None

    @property
    def available(self) -> bool:
        return self.nvml is not None and self._handle is not None

    def sm_clock(self) -> float | None:
        """The SM clock now, MHz (the warm-up's clock source)."""
        nvml = self.nvml
        if nvml is None or not self.available:
            return None
        try:
            return float(nvml.nvmlDeviceGetClockInfo(self._handle, nvml.NVML_CLOCK_SM))
        except Exception:
            return None

    def read(self) -> dict[str, float]:
        nvml, h = self.nvml, self._handle
        row: dict[str, float] = {}
        if nvml is None:  # off (every probe below would fail and be skipped)
            return row
        probes = {
            "sm_clock_mhz": lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM),
            "mem_clock_mhz": lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM),
            "util_percent": lambda: nvml.nvmlDeviceGetUtilizationRates(h).gpu,
            "mem_used_mb": lambda: nvml.nvmlDeviceGetMemoryInfo(h).used / 2**20,
            "power_w": lambda: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
            "temp_c": lambda: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU),
        }
        for name, probe in probes.items():
            with contextlib.suppress(Exception):
                row[name] = float(probe())
        with contextlib.suppress(Exception):
            seen = {int(p.pid) for p in nvml.nvmlDeviceGetComputeRunningProcesses(h)}
            unknown = seen - self._own - self.others
            if unknown:  # look the family up again only when a new pid shows
                self._own = own_processes()
                self.others |= foreign(unknown, self._own)
        return row

    def start(self) -> GpuMonitor:
        if not self.available:
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="ngb-gpu-monitor", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        self.samples.append(self.read())
        while not self._stop.wait(self.interval_s):
            self.samples.append(self.read())

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def __enter__(self) -> GpuMonitor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def summary(self) -> dict[str, object] | None:
        """Mean/min/max per quantity over the samples, plus other processes seen (None if off)."""
        if not self.available or not self.samples:
            return None
        out: dict[str, object] = {"samples": len(self.samples)}
        names = sorted({k for row in self.samples for k in row})
        for name in names:
            values = [row[name] for row in self.samples if name in row]
            out[name] = {
                "mean": round(sum(values) / len(values), 2),
                "min": round(min(values), 2),
                "max": round(max(values), 2),
            }
        out["other_pids"] = sorted(self.others)
        return out


# ------------------------------------------------------------------ Jetson through tegrastats

_GR3D = re.compile(r"GR3D_FREQ (\d+)%(?:@\[?(\d+))?")
_RAM = re.compile(r"RAM (\d+)/(\d+)MB")
_POWER = re.compile(r"(?:VDD_IN|POM_5V_IN) (\d+)mW")


def parse_tegrastats(line: str) -> dict[str, float]:
    """The numbers of one ``tegrastats`` line that matter here (missing ones are left out)."""
    row: dict[str, float] = {}
    if m := _GR3D.search(line):
        row["gpu_util_percent"] = float(m.group(1))
        if m.group(2):
            row["gpu_freq_mhz"] = float(m.group(2))
    if m := _RAM.search(line):
        row["ram_used_mb"], row["ram_total_mb"] = float(m.group(1)), float(m.group(2))
    if m := _POWER.search(line):
        row["power_w"] = float(m.group(1)) / 1000.0
    return row


class TegraStats:
    """Runs ``tegrastats`` during the timed loop on Jetson boards; off where it is not installed."""

    def __init__(self, interval_ms: int = 200, command: str | None = None):
        self.command = command or shutil.which("tegrastats")
        self.interval_ms = interval_ms
        self.rows: list[dict[str, float]] = []
        self._proc: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None

    @property
    def available(self) -> bool:
        return self.command is not None

    def start(self) -> TegraStats:
        if not self.available:
            return self
        try:
            self._proc = subprocess.Popen(
                [str(self.command), "--interval", str(self.interval_ms)],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        except OSError:
            self.command = None
            return self
        self._thread = threading.Thread(target=self._read, name="ngb-tegrastats", daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            row = parse_tegrastats(line)
            if row:
                self.rows.append(row)

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=5)
            if self._proc.poll() is None:
                self._proc.kill()
                self._proc.wait()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._proc = self._thread = None

    def __enter__(self) -> TegraStats:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def summary(self) -> dict[str, object] | None:
        if not self.rows:
            return None
        out: dict[str, object] = {"samples": len(self.rows)}
        for name in sorted({k for row in self.rows for k in row}):
            values = [row[name] for row in self.rows if name in row]
            out[name] = {"mean": round(sum(values) / len(values), 2), "max": max(values)}
        return out
