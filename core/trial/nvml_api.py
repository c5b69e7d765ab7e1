"""The slice of NVML (``pynvml``) that ngb calls, as a protocol.

``pynvml`` ships no type information; the GPU monitor (``interference.GpuMonitor``), the energy
meter (``energy_sources.NvmlSource``) and a worker's memory per phase (``memory.PhaseMemory``)
take the module itself or, in tests, a fake with these members. Handles are opaque: ngb only
passes them back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Utilization(Protocol):
    @property
    def gpu(self) -> int: ...


class MemoryInfo(Protocol):
    @property
    def used(self) -> int: ...


class ProcessInfo(Protocol):
    @property
    def pid(self) -> int: ...
    @property
    def usedGpuMemory(self) -> int | None: ...  # noqa: N802 - bytes; None where not disclosed


class Nvml(Protocol):
    """What ngb reads through NVML (names as pynvml spells them)."""

    NVML_CLOCK_SM: int
    NVML_CLOCK_MEM: int
    NVML_TEMPERATURE_GPU: int

    def nvmlInit(self) -> None: ...  # noqa: N802 - NVML's names
    def nvmlShutdown(self) -> None: ...  # noqa: N802
    def nvmlDeviceGetHandleByIndex(self, index: int) -> object: ...  # noqa: N802
    def nvmlDeviceGetClockInfo(self, handle: object, kind: int) -> int: ...  # noqa: N802
    def nvmlDeviceGetUtilizationRates(self, handle: object) -> Utilization: ...  # noqa: N802
    def nvmlDeviceGetMemoryInfo(self, handle: object) -> MemoryInfo: ...  # noqa: N802
    def nvmlDeviceGetPowerUsage(self, handle: object) -> int: ...  # noqa: N802 - milliwatts
    def nvmlDeviceGetTemperature(self, handle: object, sensor: int) -> int: ...  # noqa: N802
    def nvmlDeviceGetTotalEnergyConsumption(self, handle: object) -> int: ...  # noqa: N802 - mJ
    def nvmlDeviceGetComputeRunningProcesses(  # noqa: N802
        self, handle: object
    ) -> Sequence[ProcessInfo]: ...
