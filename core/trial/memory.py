"""Memory a worker process needs, per phase: host peak RSS and the GPU memory of every runtime.

Host (``PhaseMemory.rss``): the peak resident set of each phase -- compile (model build, eager
reference, compile), warm-up (first call, quiet check, warm-up), timed (the timed loops). On
Linux the kernel's high-water mark is reset at each phase's start (``/proc/self/clear_refs``
"5", Linux 4.0+) and read at its end (``VmHWM`` in ``/proc/self/status``): source
``vmhwm-per-phase``. Where that cannot be written, ``getrusage``'s ``ru_maxrss`` is the peak since
the process started, so each phase's figure includes the phases before it: source
``ru_maxrss-cumulative``.

GPU (``PhaseMemory.gpu``): ``torch.cuda.max_memory_allocated`` sees only torch's caching
allocator -- TensorRT engines and workspaces, ONNX Runtime's CUDA arena, TVM's allocations and
the CUDA context itself never reach it, so those compilers looked smaller. NVML counts what the
driver gave the process, whatever allocated it: ``nvmlDeviceGetComputeRunningProcesses`` lists
each process's ``usedGpuMemory`` (source ``nvml-process``). Where NVML does not list this pid (a
container's own pid namespace) or withholds the figure, the device's used memory minus what was
used when the worker started (source ``nvml-device-delta``: exact only on a GPU nobody else
uses, which the disturbance check watches); without NVML, torch's allocator (source
``torch-allocator``, which undercounts every other runtime). NVML reports memory held now, not a
peak: during the compile phase a side thread samples it every ``COMPILE_PERIOD_S`` (nothing is
timed then, so a thread costs no accuracy); warm-up and timed are read once at their end (a
thread beside the timed calls would take their GIL), when every runtime holds its engine, arena
and workspace.
"""

from __future__ import annotations

import contextlib
import os
import resource
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ngb.core.trial.nvml_api import Nvml

#: seconds between GPU memory readings while the worker builds and compiles
COMPILE_PERIOD_S = 0.05
PHASES = ("compile", "warmup", "timed")
_PROC_SELF = Path("/proc/self")


def ru_maxrss_mb() -> float:
    """Peak resident set size of this process so far (ru_maxrss is KiB on Linux, bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 2**10


def reset_peak_rss(proc: Path = _PROC_SELF) -> bool:
    """Reset the kernel's peak-RSS mark to the current RSS; False where that cannot be done."""
    try:
        (proc / "clear_refs").write_text("5")
    except OSError:
        return False
    return True


def vmhwm_mb(proc: Path = _PROC_SELF) -> float | None:
    """``VmHWM`` (peak RSS since the last reset) in MiB, or None where it is not readable."""
    with contextlib.suppress(OSError, ValueError):
        for line in (proc / "status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    return None


def gpu_process_mb(nvml: Nvml, handle: object, pid: int) -> float | None:
    """GPU memory NVML says ``pid`` holds on ``handle`` (None: not listed, or not disclosed)."""
    with contextlib.suppress(Exception):
        for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if int(proc.pid) == pid:
                used = getattr(proc, "usedGpuMemory", None)
                return used / 2**20 if isinstance(used, int) and used >= 0 else None
    return None


def gpu_device_used_mb(nvml: Nvml, handle: object) -> float | None:
    with contextlib.suppress(Exception):
        return nvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20
    return None


@dataclass
class PhaseMemory:
    """Peak host RSS and GPU memory per phase of one worker process (see module).

    ``start()`` before the model is built; ``mark(phase)`` at the end of each phase (it returns
    and records that phase's figures). ``nvml`` is the ``pynvml`` module, a fake in tests, or None
    on a CPU trial (no GPU readings then)."""

    nvml: Nvml | None = None
    index: int = 0
    pid: int = field(default_factory=os.getpid)
    proc: Path = _PROC_SELF
    rss: dict[str, float] = field(default_factory=dict)
    gpu: dict[str, float] = field(default_factory=dict)
    rss_source: str | None = None
    gpu_source: str | None = None
    _handle: object = None
    _idle_used_mb: float | None = None
    _sampled: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> PhaseMemory:
        per_phase = reset_peak_rss(self.proc) and vmhwm_mb(self.proc) is not None
        self.rss_source = "vmhwm-per-phase" if per_phase else "ru_maxrss-cumulative"
        if self.nvml is not None:
            try:
                self._handle = self.nvml.nvmlDeviceGetHandleByIndex(self.index)
            except Exception:
                self.nvml = None
        if self.nvml is not None:
            self._idle_used_mb = gpu_device_used_mb(self.nvml, self._handle)
            self._thread = threading.Thread(target=self._sample, name="ngb-gpu-mem", daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        while True:
            reading = self._gpu_now()
            if reading is not None:
                self._sampled.append(reading)
            if self._stop.wait(COMPILE_PERIOD_S):
                return

    def _gpu_now(self) -> float | None:
        """This process's GPU memory now, by the best source there is (sets ``gpu_source``)."""
        if self.nvml is None:
            return None
        own = gpu_process_mb(self.nvml, self._handle, self.pid)
        if own is not None:
            self.gpu_source = "nvml-process"
            return own
        used = gpu_device_used_mb(self.nvml, self._handle)
        if used is None or self._idle_used_mb is None:
            return None
        if self.gpu_source != "nvml-process":  # a process reading, once seen, is kept as source
            self.gpu_source = "nvml-device-delta"
        return max(used - self._idle_used_mb, 0.0)

    def _stop_sampler(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def mark(self, phase: str) -> None:
        """The end of ``phase``: record its peak RSS and GPU memory, then reset for the next."""
        if self.rss_source == "vmhwm-per-phase":
            peak = vmhwm_mb(self.proc)
            if peak is not None:
                self.rss[phase] = round(peak, 1)
            reset_peak_rss(self.proc)
        else:
            self.rss[phase] = round(ru_maxrss_mb(), 1)
        readings = [*self._sampled] if phase == "compile" else []
        self._stop_sampler()
        self._sampled.clear()
        now = self._gpu_now()
        if now is not None:
            readings.append(now)
        if readings:
            self.gpu[phase] = round(max(readings), 1)

    def close(self) -> None:
        self._stop_sampler()

    @property
    def peak_gpu_mb(self) -> float | None:
        return max(self.gpu.values()) if self.gpu else None

    def to_dict(self) -> dict[str, object]:
        return {
            "rss_mb": dict(self.rss),
            "rss_source": self.rss_source,
            "gpu_mb": dict(self.gpu),
            "gpu_source": self.gpu_source,
        }
