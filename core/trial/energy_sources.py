"""Power meters a device exposes: RAPL, NVML and a Jetson's INA3221 rails.

Every source has a ``name``, ``available()`` (with ``why_not`` naming what was missing when it is
not) and ``read()``: joules since the source was opened, monotonic, as a float.
``ngb.core.trial.energy`` reads a source between timed loops only, so a counter source costs the
measured process two small file reads (RAPL) or one driver call (NVML) per repetition and nothing
inside a loop.

- ``RaplSource``: ``<root>/intel-rapl:*`` domains named ``package-N`` and ``dram`` (core/uncore
  are inside the package and would count twice). ``energy_uj`` wraps at ``max_energy_range_uj``;
  each read adds the step since the previous one, wrapping once at most (a counter read at least
  every few minutes cannot wrap twice: the package counter spans ~60 kJ). The files are root-only
  since Linux 5.10 (the PLATYPUS side channel), so an ordinary user gets ``why_not``.
- ``NvmlSource``: ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the driver loaded, Volta and
  newer). Where the driver has no such counter, ``nvmlDeviceGetPowerUsage`` (mW) is integrated by
  a ``PowerIntegrator`` thread -- the only case with a thread in the measured process, and the
  source's ``note`` says so.
- ``JetsonRails``: the board's input rail (``VDD_IN`` on Orin, ``POM_5V_IN`` on Xavier/Nano; the
  sum of every rail when neither is named) from the INA3221 hwmon files (``inN_label``,
  ``inN_input`` mV, ``currN_input`` mA), the older i2c ``in_powerN_input`` (mW) files, or
  ``tegrastats`` lines. These are instantaneous powers, integrated by a ``PowerIntegrator``.

Paths and modules are arguments so tests run every source against faithful fakes.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ngb.core.trial.nvml_api import Nvml

RAPL_ROOT = Path("/sys/class/powercap")
HWMON_ROOT = Path("/sys/class/hwmon")
I2C_INA_ROOT = Path("/sys/bus/i2c/drivers/ina3221x")
#: names of the Jetson rail that carries the whole board's power, newest boards first
BOARD_RAILS = ("VDD_IN", "POM_5V_IN")
#: seconds between two power samples when a source has no energy counter
POWER_PERIOD_S = 0.02


class EnergySource(Protocol):
    name: str
    why_not: str
    note: str

    def available(self) -> bool: ...

    def read(self) -> float: ...

    def close(self) -> None: ...


# ---------------------------------------------------------------- RAPL


class RaplSource:
    """Package and DRAM energy of every CPU socket, from the powercap counters."""

    name = "rapl"

    def __init__(self, root: Path = RAPL_ROOT) -> None:
        self.root = Path(root)
        self.why_not = ""
        self.note = "RAPL counts the whole package: other processes' energy is included"
        self.domains: list[tuple[str, Path, int]] = []  # (name, energy_uj path, wrap range)
        self._last: list[int] = []
        self._total_uj = 0
        self._open()

    def _open(self) -> None:
        found: list[Path] = []
        if self.root.is_dir():
            # subdomains (dram) sit inside their package and, on most kernels, are linked at the
            # top as well: take each real folder once
            seen: set[Path] = set()
            for folder in sorted(
                [*self.root.glob("intel-rapl:*"), *self.root.glob("intel-rapl:*/intel-rapl:*")]
            ):
                real = folder.resolve()
                if real not in seen:
                    seen.add(real)
                    found.append(folder)
        if not found:
            self.why_not = f"RAPL not present ({self.root}/intel-rapl:* missing)"
            return
        for folder in found:
            try:
                label = (folder / "name").read_text().strip()
                if not (label.startswith("package") or label == "dram"):
                    continue
                wrap = int((folder / "max_energy_range_uj").read_text())
                value = int((folder / "energy_uj").read_text())
            except PermissionError:
                self.why_not = (
                    f"RAPL not readable ({folder / 'energy_uj'} is root-only; "
                    "`sudo chmod a+r` it to measure)"
                )
                self.domains = []
                return
            except (OSError, ValueError) as exc:
                self.why_not = f"RAPL not readable ({folder}: {exc})"
                self.domains = []
                return
            self.domains.append((label, folder / "energy_uj", wrap))
            self._last.append(value)
        if not self.domains:
            self.why_not = f"RAPL has no package or dram domain under {self.root}"

    def available(self) -> bool:
        return bool(self.domains)

    def read(self) -> float:
        for i, (_, path, wrap) in enumerate(self.domains):
            value = int(path.read_text())
            step = value - self._last[i]
            if step < 0:  # the counter wrapped past max_energy_range_uj
                step += wrap + 1
            self._total_uj += step
            self._last[i] = value
        return self._total_uj / 1e6

    def close(self) -> None:
        return None


# ---------------------------------------------------------------- integrating instantaneous power


class PowerIntegrator:
    """Joules from a watts function sampled every ``period_s`` (trapezoids between samples).

    ``start()`` runs the sampler thread; tests call ``sample()`` themselves with a fake clock.
    """

    def __init__(
        self,
        watts: Callable[[], float],
        period_s: float = POWER_PERIOD_S,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.watts, self.period_s, self.clock = watts, period_s, clock
        self._lock = threading.Lock()
        self._joules = 0.0
        self._last: tuple[float, float] | None = None  # (time, watts)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        now, power = self.clock(), float(self.watts())
        with self._lock:
            if self._last is not None:
                then, before = self._last
                self._joules += (now - then) * (power + before) / 2
            self._last = (now, power)

    def start(self) -> None:
        if self._thread is None:
            self.sample()
            self._thread = threading.Thread(target=self._run, name="ngb-power", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a meter that fails stops; read() keeps its total
                return

    def read(self) -> float:
        if self._thread is not None:
            self.sample()  # up to now, not to the last tick
        with self._lock:
            return self._joules

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            self._thread = None


# ---------------------------------------------------------------- NVML


class NvmlSource:
    """One NVIDIA GPU's energy through NVML (``nvml`` is the ``pynvml`` module, or a fake)."""

    name = "nvml"

    def __init__(
        self, index: int = 0, nvml: Nvml | None = None, period_s: float = POWER_PERIOD_S
    ) -> None:
        self.why_not = ""
        self.note = ""
        self._nvml: Nvml | None = None
        self._handle: object = None
        self._start_mj = 0
        self._power: PowerIntegrator | None = None
        if nvml is None:
            try:
                import pynvml
            except ImportError:
                self.why_not = "NVML not installed (pip install nvidia-ml-py)"
                return
            nvml = pynvml
        lib: Nvml = nvml
        try:
            lib.nvmlInit()
            self._handle = lib.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:  # noqa: BLE001 - NVMLError and friends: no driver, no GPU
            self.why_not = f"NVML not usable ({exc})"
            return
        self._nvml = lib
        try:
            self._start_mj = int(lib.nvmlDeviceGetTotalEnergyConsumption(self._handle))
            self.name = "nvml-energy"
        except Exception:  # noqa: BLE001 - pre-Volta or a driver without the counter
            handle = self._handle
            self._power = PowerIntegrator(
                lambda: lib.nvmlDeviceGetPowerUsage(handle) / 1000.0, period_s
            )
            self.name = "nvml-power"
            self.note = (
                "no energy counter on this GPU: power sampled every "
                f"{period_s * 1000:.0f} ms by a thread in the measured process"
            )

    def available(self) -> bool:
        return self._nvml is not None

    def begin_sampling(self) -> None:
        if self._power is not None:
            self._power.start()

    def read(self) -> float:
        if self._power is not None:
            return self._power.read()
        if self._nvml is None:
            raise RuntimeError("NVML energy source read while unavailable")
        mj = int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))
        return (mj - self._start_mj) / 1000.0

    def close(self) -> None:
        if self._power is not None:
            self._power.close()
        if self._nvml is not None:
            # shutting down a meter must never fail a trial
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._nvml = None


# ---------------------------------------------------------------- Jetson rails

_TEGRA_RAIL = re.compile(r"\b([A-Z][A-Z0-9_]*) (\d+)(?:mW)?/(\d+)(?:mW)?\b")


def parse_tegrastats(line: str) -> dict[str, float]:
    """Rail name -> watts (the instantaneous value) from one ``tegrastats`` line.

    ``VDD_IN 5012mW/4980mW`` (JetPack 5+) and ``POM_5V_IN 3000/2950`` (JetPack 4) alike; the
    RAM/CPU/EMC fields have other shapes and are skipped.
    """
    rails: dict[str, float] = {}
    for name, now, _avg in _TEGRA_RAIL.findall(line):
        if name.startswith(("VDD_", "POM_", "VIN_")) or name.endswith("_IN"):
            rails[name] = int(now) / 1000.0
    return rails


def board_watts(rails: dict[str, float]) -> float:
    """The board's input power: its input rail, else the sum of the rails."""
    for name in BOARD_RAILS:
        if name in rails:
            return rails[name]
    return sum(rails.values())


def _hwmon_rails(root: Path) -> dict[str, Callable[[], float]]:
    """INA3221 channels under hwmon: label -> a function reading its watts (mV x mA)."""
    out: dict[str, Callable[[], float]] = {}
    if not root.is_dir():
        return out
    for folder in sorted(root.iterdir()):
        try:
            if (folder / "name").read_text().strip() != "ina3221":
                continue
        except OSError:
            continue
        for label_file in sorted(folder.glob("in*_label")):
            channel = label_file.name[2:].split("_")[0]
            volts, amps = folder / f"in{channel}_input", folder / f"curr{channel}_input"
            if volts.exists() and amps.exists():
                label = label_file.read_text().strip()
                out[label] = _channel_watts(volts, amps)
    return out


def _i2c_rails(root: Path) -> dict[str, Callable[[], float]]:
    """Older L4T: ``<i2c dev>/iio:device*/rail_nameN`` and ``in_powerN_input`` (mW)."""
    out: dict[str, Callable[[], float]] = {}
    if not root.is_dir():
        return out
    for power in sorted(root.glob("*/iio:device*/in_power*_input")):
        channel = power.name[len("in_power") : -len("_input")]
        label_file = power.parent / f"rail_name_{channel}"
        label = label_file.read_text().strip() if label_file.exists() else f"rail{channel}"
        out[label] = _milliwatts(power)
    return out


def _channel_watts(volts: Path, amps: Path) -> Callable[[], float]:
    return lambda: int(volts.read_text()) * int(amps.read_text()) / 1e6  # mV x mA


def _milliwatts(path: Path) -> Callable[[], float]:
    return lambda: int(path.read_text()) / 1000.0


class JetsonRails:
    """A Jetson board's input power from its INA3221 monitor, integrated over time.

    ``lines`` (recorded ``tegrastats`` output, or a live ``tegrastats`` process's stdout) is
    used when given; otherwise the hwmon files, then the older i2c files.
    """

    name = "jetson-ina3221"

    def __init__(
        self,
        hwmon_root: Path = HWMON_ROOT,
        i2c_root: Path = I2C_INA_ROOT,
        lines: Iterable[str] | None = None,
        period_s: float = POWER_PERIOD_S,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.why_not = ""
        self.note = (
            "board input power sampled every "
            f"{period_s * 1000:.0f} ms by a thread in the measured process (INA3221 has no "
            "energy counter)"
        )
        self.rails: list[str] = []
        watts: Callable[[], float] | None = None
        if lines is not None:
            self.name = "jetson-tegrastats"
            feed: Iterator[str] = iter(lines)

            def watts() -> float:
                for line in feed:
                    rails = parse_tegrastats(line)
                    if rails:
                        self.rails = sorted(rails)
                        return board_watts(rails)
                raise StopIteration("tegrastats ended")
        else:
            try:
                readers = _hwmon_rails(Path(hwmon_root)) or _i2c_rails(Path(i2c_root))
            except (OSError, ValueError) as exc:
                readers = {}
                self.why_not = f"Jetson INA3221 rails not readable ({exc})"
            if readers:
                self.rails = sorted(readers)
                board = next((readers[n] for n in BOARD_RAILS if n in readers), None)
                parts = list(readers.values())

                def watts() -> float:
                    return board() if board is not None else sum(r() for r in parts)
            elif not self.why_not:
                self.why_not = "no Jetson INA3221 rails (hwmon or i2c)"
        self._power = PowerIntegrator(watts, period_s, clock) if watts is not None else None

    def available(self) -> bool:
        return self._power is not None

    def begin_sampling(self) -> None:
        if self._power is not None:
            self._power.start()

    def sample(self) -> None:
        """One sample now (tests drive the integrator by hand with a fake clock)."""
        if self._power is not None:
            self._power.sample()

    def read(self) -> float:
        return self._power.read() if self._power is not None else 0.0

    def close(self) -> None:
        if self._power is not None:
            self._power.close()
