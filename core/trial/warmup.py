"""Warm-up until clocks settle: windows repeat until throughput (and, on a GPU, the SM clock) agree.

``ngb.core.trial.timing`` runs each worker's warm-up through ``settle``; ``MeasureSettings`` holds
the tolerance, the floor (``warmup_s`` on a CPU, ``gpu_warmup_min_s`` on a GPU) and the cap.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass
class Settled:
    """How a warm-up ended: windows run, seconds, whether it settled, the readings seen."""

    windows: int = 0
    seconds: float = 0.0
    settled: bool = False
    throughputs: list[float] = field(default_factory=list)
    clocks: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {
            "windows": self.windows,
            "seconds": round(self.seconds, 3),
            "settled": self.settled,
            "throughputs": [round(v, 3) for v in self.throughputs],
            "clocks_mhz": self.clocks,
        }


def _close(a: float, b: float, tolerance: float) -> bool:
    scale = max(abs(a), abs(b))
    return scale == 0 or abs(a - b) / scale <= tolerance


def settle(
    window: Callable[[], float],
    *,
    clock: Callable[[], float | None] | None = None,
    tolerance: float = 0.03,
    max_s: float = 30.0,
    min_s: float = 0.0,
    min_windows: int = 3,
    now: Callable[[], float] = time.monotonic,
) -> Settled:
    """Run warm-up ``window``s (each returns its throughput) until at least ``min_s`` seconds have
    passed and the last ``min_windows`` agree within ``tolerance`` in throughput and in ``clock``
    (e.g. the GPU's SM clock in MHz; None readings are ignored), or ``max_s`` has passed.

    Why several windows and a floor: two 0.4 s windows agreeing said "settled" on an H100 whose
    plain loop still ran ~15 % slow for its first ~3 s; a drift shows over three windows where
    two adjacent ones can agree by chance.
    """
    out = Settled()
    start = now()
    while True:
        out.throughputs.append(float(window()))
        if clock is not None:
            reading = clock()
            if reading is not None:
                out.clocks.append(float(reading))
        out.windows += 1
        out.seconds = now() - start
        if out.windows >= min_windows and out.seconds >= min_s:
            steady = _agree(out.throughputs[-min_windows:], tolerance)
            if steady and len(out.clocks) >= min_windows:
                steady = _agree(out.clocks[-min_windows:], tolerance)
            if steady:
                out.settled = True
                return out
        if out.seconds >= max_s:
            return out


def _agree(values: Sequence[float], tolerance: float) -> bool:
    return all(_close(a, b, tolerance) for a in values for b in values)
