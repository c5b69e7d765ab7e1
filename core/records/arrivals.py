"""A serving run's arrival schedule, made in advance from a seed (``ngb serve``, issue 43).

Why in advance: the issuing thread (``ngb.core.serving.loadgen``) then only sleeps to the next
absolute deadline; nothing it does depends on how the model answered, so a slow answer can never
delay the next request (the closed loop's "coordinated omission", where a stall hides itself by
holding back the requests that would have seen it). Why seeded: two compilers served "at 50 QPS" see
the very same request times, and a run can be replayed.

Gaps are i.i.d. gamma with mean ``1 / qps``: shape 1 is the exponential (a Poisson process, as
MLPerf LoadGen's Server scenario and vLLM's ``bench serve`` default), a shape below 1 is burstier
(vLLM's ``--burstiness`` has the same meaning), above 1 more regular. The count is fixed,
``round(qps * duration)``, and the gaps are scaled so the last arrival lands on ``duration``:
a Poisson schedule of 60 s at 100 QPS otherwise offers 100 +- 1.3 QPS by chance alone, more than
the 1 % a run is held to (the achieved rate is compared with the offered one). Conditioning on the
count leaves the gaps exchangeable and, at thousands of arrivals, indistinguishable from
exponential (``tests/test_arrivals.py`` applies the Kolmogorov-Smirnov test).

numpy only: the schedule is built on the device, next to the model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from ngb.core.base.errors import ConfigError

#: gamma shape of a Poisson process's gaps
POISSON = 1.0


@dataclass(frozen=True)
class Schedule:
    """Arrival times in seconds from the run's start (ascending) and how they were drawn."""

    times_s: np.ndarray
    qps: float
    duration_s: float
    seed: int
    burstiness: float = POISSON

    @property
    def count(self) -> int:
        return int(len(self.times_s))

    @property
    def offered_qps(self) -> float:
        """Arrivals per second of the schedule itself (``qps`` by construction)."""
        return self.count / self.duration_s if self.duration_s > 0 else math.nan


def check_rate(qps: float, duration_s: float, burstiness: float = POISSON) -> None:
    """One line for a rate, duration or burstiness no schedule can be made from."""
    for name, value in (("qps", qps), ("duration", duration_s), ("burstiness", burstiness)):
        if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
            raise ConfigError(f"{name} must be a positive number, got {value!r}")
    if round(qps * duration_s) < 1:
        raise ConfigError(f"{qps:g} QPS for {duration_s:g} s is not one request; serve longer")


def schedule(qps: float, duration_s: float, seed: int = 0, burstiness: float = POISSON) -> Schedule:
    """``round(qps * duration_s)`` arrivals over ``duration_s`` seconds (the last one at its
    end), gamma gaps of shape ``burstiness`` (1: Poisson), from ``seed``."""
    check_rate(qps, duration_s, burstiness)
    count = int(round(qps * duration_s))
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(burstiness, 1.0 / (qps * burstiness), size=count)
    times = np.cumsum(gaps)
    times *= duration_s / times[-1]
    return Schedule(times, float(qps), float(duration_s), int(seed), float(burstiness))
