"""How a model is served (``ngb serve``, a sweep's ``[serve]``): the scenario, the load, batching
and the peak search's budget, checked where they are written down.

Apart from ``ngb.core.serving.serve`` (which re-exports it) so that ``ngb.core.records.types`` can
carry it in a ``TrialSpec`` without importing the serving machinery, which imports ``types``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields

from ngb.core.base.errors import ConfigError
from ngb.core.records import arrivals

#: the load scenarios (MLPerf LoadGen's), run by ``ngb.core.serving.loadgen``
SCENARIOS = ("server", "singlestream", "multistream", "offline")


@dataclass(frozen=True)
class Batching:
    """Dynamic batching: at most ``max_batch`` requests per call, a request waiting at most
    ``max_queue_delay_s`` past its issue for others to join it. ``max_batch`` 1: none."""

    max_batch: int = 1
    max_queue_delay_s: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.max_batch, bool) or not isinstance(self.max_batch, int):
            raise ConfigError(f"max batch must be a whole number, got {self.max_batch!r}")
        if self.max_batch < 1:
            raise ConfigError(f"max batch must be at least 1, got {self.max_batch}")
        if not (0 <= self.max_queue_delay_s < 60):
            raise ConfigError(f"max queue delay must be 0-60 s, got {self.max_queue_delay_s!r} s")


@dataclass(frozen=True)
class ServeSettings:
    """How to serve: the scenario, the load, batching, and the peak search's budget."""

    scenario: str = "server"
    qps: float | None = None  # server: the offered rate (a peak search: where it starts)
    duration_s: float = 30.0  # server and closed loops; offline: the capacity times this
    seed: int = 0
    burstiness: float = arrivals.POISSON  # gamma shape of the gaps (1: Poisson)
    concurrency: int | None = None  # None: the runtime's natural requests in flight
    max_batch: int = 1  # dynamic batching: most requests per call (1: none)
    max_queue_delay_ms: float = 0.0  # ... and how long the oldest waits for others
    samples_per_query: int = 8  # multistream
    p99_ms: float | None = None  # the latency budget (server: LoadGen's target latency)
    find_peak: bool = False
    probe_s: float = 60.0
    max_probe_s: float | None = None  # None: 8 x probe_s
    max_probes: int = 10
    target: float = 0.05  # the peak's interval half-width to stop at
    warmup_s: float = 2.0
    threads: int | None = None

    def __post_init__(self) -> None:
        if self.scenario not in SCENARIOS:
            raise ConfigError(
                f"scenario must be one of {', '.join(SCENARIOS)}; got {self.scenario!r}"
            )
        if self.find_peak:
            if self.scenario != "server":
                raise ConfigError("--find-peak searches the server scenario's rate")
            if self.p99_ms is None:
                raise ConfigError("--find-peak needs the latency budget: --p99-ms X")
        elif self.scenario == "server" and self.qps is None:
            raise ConfigError("the server scenario needs --qps (or --find-peak --p99-ms X)")
        for name in ("qps", "p99_ms"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{name} must be a positive number, got {value!r}")
        for name in ("duration_s", "probe_s", "burstiness"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{name} must be a positive number, got {value!r}")
        if self.scenario == "server" and self.qps is not None and not self.find_peak:
            arrivals.check_rate(self.qps, self.duration_s, self.burstiness)
        if not (math.isfinite(self.warmup_s) and self.warmup_s >= 0):
            raise ConfigError(f"warmup must be >= 0 s, got {self.warmup_s!r}")
        if not (0 < self.target < 1):
            raise ConfigError(f"target must be between 0 and 1, got {self.target!r}")
        for name in ("max_probes", "samples_per_query"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.concurrency is not None and self.concurrency < 1:
            raise ConfigError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.seed < 0:
            raise ConfigError(f"seed must be >= 0, got {self.seed}")
        if self.max_probe_s is not None and not (
            math.isfinite(self.max_probe_s) and self.max_probe_s > 0
        ):
            raise ConfigError(f"max_probe_s must be a positive number, got {self.max_probe_s!r}")
        if self.find_peak and self.max_probes < 4:  # ``peak.find_peak``'s fewest
            raise ConfigError(f"the peak search needs at least 4 probes, got {self.max_probes}")
        self.batching()  # its own checks

    @classmethod
    def of(cls, value: object) -> ServeSettings:
        """From a table (a sweep's ``[serve]``, a trial spec read back as JSON): one line for
        an unknown key or a value of the wrong kind, then the checks above."""
        if isinstance(value, ServeSettings):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"serve settings must be a table, got {value!r}")
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(value) - set(names))
        if unknown:
            raise ConfigError(f"unknown serve setting {unknown[0]!r}; valid: {', '.join(names)}")
        try:
            return cls(**{str(k): v for k, v in value.items()})
        except TypeError as exc:  # e.g. a list where a number belongs
            raise ConfigError(f"bad serve setting: {exc}") from None

    def budget_s(self) -> float:
        """Seconds the serving itself is planned to take once compiled: the warm-up and the run
        (a closed loop's 1,024 queries may take longer on a slow model), or every probe of a
        peak search at its longest."""
        if self.find_peak:
            longest = self.max_probe_s if self.max_probe_s is not None else 8 * self.probe_s
            return self.warmup_s + self.max_probes * longest
        return self.warmup_s + self.duration_s

    def planned_s(self) -> float:
        """Seconds the serving is expected to take once compiled, what the ETA weighs a serving
        trial by: the warm-up and the run, or the warm-up and ``max_probes`` probes of
        ``probe_s`` (a search may stop sooner, and lengthen its boundary probes up to
        ``max_probe_s``, which ``budget_s`` allows for)."""
        if self.find_peak:
            return self.warmup_s + self.max_probes * self.probe_s
        return self.warmup_s + self.duration_s

    def batching(self) -> Batching:
        return Batching(self.max_batch, self.max_queue_delay_ms / 1000.0)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)
