"""Break-even inferences with an interval over every input's uncertainty (issue 30, item 4).

A compiler that costs ``E`` more seconds to prepare (export + compile + tuning, minus the
baseline's) and serves ``T_c`` samples/s against the baseline's ``T_b`` pays back after
``N = E / (1/T_b - 1/T_c) = E * T_b * T_c / (T_c - T_b)`` inferences.

The interval is a parametric Monte Carlo over the inputs' sampling distributions, with a fixed
seed (the same store prints the same digits every time):

- each throughput is drawn as ``m * exp((se / m) * t_df)`` -- the log-scale Student-t every
  surface prints its interval from (``ngb.core.statistics.intervals.positive``), so positive in
  every draw;
- each side's one-time seconds, where repeated compiles exist (``k >= 2`` runs of the same
  point), the same way from their mean and ``s / sqrt(k)`` with ``k - 1`` degrees of freedom;
  with one run it is taken as exact (the report's header says so: compile times of one run may
  differ by a factor of 4 between runs, 1.6-6.0 s for one OpenVINO export here);
- ``N`` per draw; a draw where the compiler is not faster never pays back (``inf``); a draw
  where it costs no more to prepare pays back at once (0). The bounds are the draws' 2.5 % and
  97.5 % quantiles; an upper quantile at ``inf`` is an unbounded interval.

Why not the log-scale delta method: ``N`` has a pole at ``T_c = T_b`` (``1/(s - 1)`` in the
speed-up ``s``), so its distribution is skewed with a heavy upper tail that a symmetric interval
in ``log N`` misses as the speed-up nears 1, and ``E`` is a difference of two positive times,
which can reach 0. The simulation gets both right at ~5 ms per row (20,000 draws); its
coverage is measured in ``tests/test_breakeven_interval.py`` (a simulated world with known
throughputs and compile-time spread).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

DRAWS = 20_000
SEED = 20261126
LEVEL = 0.95


@dataclass(frozen=True)
class Uncertain:
    """A positive mean with its standard error and degrees of freedom (``se`` None: exact)."""

    value: float
    se: float | None = None
    df: float = math.inf

    @property
    def relative_se(self) -> float:
        """The standard error of ``log value`` (0: exact)."""
        if self.se is None or not math.isfinite(self.se) or self.se <= 0:
            return 0.0
        return self.se / self.value

    def draw(self, rng: np.random.Generator, size: int, widen: float = 1.0) -> np.ndarray:
        """``value * exp(widen * relative_se * z)``, z standard normal."""
        if self.relative_se == 0:
            return np.full(size, self.value)
        return self.value * np.exp(widen * self.relative_se * rng.standard_normal(size))


def repeated(values: list[float]) -> Uncertain:
    """The mean of repeated one-time seconds with its standard error (exact when only one)."""
    if len(values) < 2:
        return Uncertain(values[0]) if values else Uncertain(math.nan)
    arr = np.asarray(values, dtype=np.float64)
    se = float(arr.std(ddof=1)) / math.sqrt(arr.size)
    return Uncertain(float(arr.mean()), se if se > 0 else None, float(arr.size - 1))


def pays_back_after(extra_s: float, t_base: float, t_comp: float) -> float:
    """Inferences after which ``extra_s`` seconds are paid back (inf: never, 0: at once)."""
    if t_comp <= t_base:
        return math.inf
    if extra_s <= 0:
        return 0.0
    return extra_s * t_base * t_comp / (t_comp - t_base)


def interval(
    once_comp: Uncertain,
    once_base: Uncertain,
    t_comp: Uncertain,
    t_base: Uncertain,
    level: float = LEVEL,
    draws: int = DRAWS,
    seed: int = SEED,
) -> tuple[float, float]:
    """``(low, high)`` of N at ``level`` (see module); ``high`` may be ``inf`` (unbounded)."""
    rng = np.random.default_rng(seed)
    widen = _t_over_z(once_comp, once_base, t_comp, t_base, level)
    extra = once_comp.draw(rng, draws, widen) - once_base.draw(rng, draws, widen)
    tc, tb = t_comp.draw(rng, draws, widen), t_base.draw(rng, draws, widen)
    gain = tc - tb
    with np.errstate(divide="ignore", invalid="ignore"):
        n = np.where(gain > 0, np.maximum(extra, 0.0) * tb * tc / gain, np.inf)
    alpha = (1 - level) / 2
    low, high = np.quantile(n, [alpha, 1 - alpha], method="inverted_cdf")
    return float(low), float(high)


def _t_over_z(
    once_comp: Uncertain, once_base: Uncertain, t_comp: Uncertain, t_base: Uncertain, level: float
) -> float:
    """How much wider than normal the draws are made: ``t_df / z`` at ``level``, ``df`` by
    Welch-Satterthwaite over the inputs weighted by their share of ``var(log N)`` (the delta
    method's sensitivities at the means) -- the degrees of freedom every derived interval uses
    (``ngb.core.statistics.intervals``). Drawing each input from its own t instead over-covers: with
    3-4 processes a side, 98-99.8 % of simulated intervals held their truth at a 95 % level."""
    from statistics import NormalDist

    from ngb.core.statistics.student_t import t_two_sided

    extra = once_comp.value - once_base.value
    gain = t_comp.value - t_base.value
    if not (extra > 0 and gain > 0):
        return 1.0
    sensitivities = (
        (once_comp, once_comp.value / extra),
        (once_base, once_base.value / extra),
        (t_comp, t_base.value / gain),
        (t_base, t_comp.value / gain),
    )
    parts = [((c * u.relative_se) ** 2, u.df) for u, c in sensitivities if u.relative_se > 0]
    total = math.fsum(v for v, _ in parts)
    denom = math.fsum(v * v / df for v, df in parts if math.isfinite(df) and df > 0)
    if total <= 0 or denom <= 0:
        return 1.0
    z = NormalDist().inv_cdf((1 + level) / 2)
    return t_two_sided(level, total * total / denom) / z
