"""CPU utilisation sampler: a side thread that polls psutil while the timed loops run.

It records system-wide utilisation (0..100, where 100 means every logical core busy) and this
process's utilisation (psutil's convention: 100 per busy core). psutil is imported when a sampler
is created, not at module import, so ``ngb.core`` stays stdlib + numpy at import time.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

#: called from the sampler thread with (t_offset_s, system %, process %)
SampleCallback = Callable[[float, float, float], None]


class CpuSampler:
    """Samples every ``interval_s`` between ``start()`` and ``stop()``; usable as a context manager.

    psutil's ``cpu_percent(None)`` reports usage since its previous call, so the first call only
    primes the counters; each later sample covers exactly one interval of the measured window.
    """

    def __init__(self, interval_s: float = 0.1, on_sample: SampleCallback | None = None) -> None:
        import psutil

        self._psutil = psutil
        self._proc = psutil.Process()
        self.interval_s = interval_s
        self.on_sample = on_sample
        self.samples: list[list[float]] = []  # [t_offset_s, system %, process %]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0

    def start(self) -> CpuSampler:
        self._t0 = time.perf_counter()
        self._stop.clear()
        primed = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, args=(primed,), name="ngb-cpu-sampler", daemon=True
        )
        self._thread.start()
        primed.wait()
        return self

    def _loop(self, primed: threading.Event) -> None:
        # psutil keeps the "previous reading" of cpu_percent(None) per calling thread, so every
        # call, priming included, happens in this thread.
        self._psutil.cpu_percent(None)
        self._proc.cpu_percent(None)
        primed.set()
        while not self._stop.wait(self.interval_s):
            self._take()
        if not self.samples:  # a window shorter than one interval still yields one sample
            self._take()

    def _take(self) -> None:
        sample = [
            round(time.perf_counter() - self._t0, 4),
            float(self._psutil.cpu_percent(None)),
            float(self._proc.cpu_percent(None)),
        ]
        self.samples.append(sample)
        if self.on_sample is not None:
            # A broken listener (e.g. a closed event pipe) must not kill the measurement.
            with contextlib.suppress(Exception):
                self.on_sample(*sample)

    def stop(self) -> list[list[float]]:
        """Stop sampling and return the samples."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        return self.samples

    def __enter__(self) -> CpuSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def summary(self) -> dict[str, float | None]:
        """Mean/max of system-wide %, mean of process % (``None`` when there are no samples)."""
        if not self.samples:
            return {
                "cpu_percent_mean": None,
                "cpu_percent_max": None,
                "proc_cpu_percent_mean": None,
            }
        sys_pct = [s[1] for s in self.samples]
        proc_pct = [s[2] for s in self.samples]
        return {
            "cpu_percent_mean": sum(sys_pct) / len(sys_pct),
            "cpu_percent_max": max(sys_pct),
            "proc_cpu_percent_mean": sum(proc_pct) / len(proc_pct),
        }
