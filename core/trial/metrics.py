"""The paper's derived metrics (sections V-A4 and V-C); T is throughput in samples per second.

- RTR (relative throughput ratio)      RTR_c(b) = T_c(b) / T_c(1)
- ASE (average scaling efficiency)     ASE_c(b) = T_c(b) / (b * T_c(1))   (1.0 = perfect scaling)
- BSR (batch scaling ratio)            BSR_c(b) = ASE_c(b) / ASE_identity(b)
- speed-up                             T_c / T_identity (same model, batch, depth)
- depth slope                          least-squares slope of speed-up over stack depth
- retention                            speed-up at the deepest stack / speed-up at one block

The scalar functions take plain floats; the ``*_table`` helpers take ``{batch: throughput}`` per
compiler (what the store, the reports and the TUI hold) and return ``{batch: metric}``. Bad input
(no batch-1 baseline, zero/negative/NaN throughput, mismatched or too-short depth series) raises
``ConfigError`` with a one-line reason rather than producing inf/NaN that would end up in a table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from ngb.core.base.errors import ConfigError
from ngb.core.compilers import DEFAULT_BASELINE

BASELINE = DEFAULT_BASELINE  # the name the console's charts use


def _positive(value: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise ConfigError(f"{what} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{what} must be a finite number > 0, got {value!r}")
    return value


def _batch(b: int) -> int:
    if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 1:
        raise ConfigError(f"batch size must be an integer >= 1, got {b!r}")
    return int(b)


def rtr(t_b: float, t_1: float) -> float:
    """Relative throughput ratio: throughput at batch b over throughput at batch 1."""
    return _positive(t_b, "throughput T(b)") / _positive(t_1, "throughput T(1)")


def ase(t_b: float, t_1: float, b: int) -> float:
    """Average scaling efficiency: RTR divided by the batch size (1.0 = linear scaling)."""
    return rtr(t_b, t_1) / _batch(b)


def bsr(ase_c: float, ase_identity: float) -> float:
    """Batch scaling ratio: a compiler's ASE over the identity (eager) baseline's ASE."""
    return _positive(ase_c, "ASE of the compiler") / _positive(ase_identity, "ASE of identity")


def speedup(t_c: float, t_identity: float) -> float:
    """Throughput of a compiler over the identity baseline's, same trial otherwise."""
    return _positive(t_c, "compiler throughput") / _positive(t_identity, "identity throughput")


def _depth_series(
    depths: Sequence[int], speedups: Sequence[float]
) -> tuple[np.ndarray, np.ndarray]:
    if len(depths) != len(speedups):
        raise ConfigError(
            f"depths and speed-ups differ in length ({len(depths)} vs {len(speedups)})"
        )
    if len(depths) < 2:
        raise ConfigError(f"need at least 2 depths for a depth trend, got {len(depths)}")
    d = np.array([_depth(x) for x in depths], dtype=float)
    if len(set(d.tolist())) != len(d):
        raise ConfigError(f"depths must be distinct, got {list(depths)}")
    s = np.array([_positive(x, "speed-up") for x in speedups], dtype=float)
    return d, s


def _depth(depth: int) -> int:
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 1:
        raise ConfigError(f"depth must be an integer >= 1, got {depth!r}")
    return int(depth)


def depth_slope(depths: Sequence[int], speedups: Sequence[float]) -> float:
    """Least-squares slope of speed-up against depth (speed-up gained or lost per extra block)."""
    d, s = _depth_series(depths, speedups)
    dc = d - d.mean()
    return float(np.dot(dc, s - s.mean()) / np.dot(dc, dc))


def retention(depths: Sequence[int], speedups: Sequence[float]) -> float:
    """Speed-up at the deepest stack over speed-up at one block (needs depth 1 in the series)."""
    d, s = _depth_series(depths, speedups)
    ones = np.flatnonzero(d == 1)
    if ones.size == 0:
        raise ConfigError(f"retention needs a depth-1 point, got depths {list(depths)}")
    return float(s[int(np.argmax(d))] / s[ones[0]])


# ---- table helpers: {batch: throughput} in, {batch: metric} out -------------------------------


def _batch1(throughputs: Mapping[int, float], who: str) -> float:
    if 1 not in throughputs:
        got = ", ".join(str(b) for b in sorted(throughputs)) or "none"
        raise ConfigError(f"{who} has no batch-1 throughput (batches: {got}); RTR/ASE need it")
    return _positive(throughputs[1], f"{who} throughput at batch 1")


def rtr_table(throughputs: Mapping[int, float], who: str = "compiler") -> dict[int, float]:
    t1 = _batch1(throughputs, who)
    return {b: rtr(throughputs[b], t1) for b in sorted(throughputs, key=_batch)}


def ase_table(throughputs: Mapping[int, float], who: str = "compiler") -> dict[int, float]:
    t1 = _batch1(throughputs, who)
    return {b: ase(throughputs[b], t1, b) for b in sorted(throughputs, key=_batch)}


def bsr_table(
    throughputs: Mapping[int, float], identity: Mapping[int, float], who: str = "compiler"
) -> dict[int, float]:
    """BSR per batch, for the batches both the compiler and identity have."""
    ase_c = ase_table(throughputs, who)
    ase_i = ase_table(identity, BASELINE)
    return {b: bsr(ase_c[b], ase_i[b]) for b in ase_c if b in ase_i}


def speedup_table(
    throughputs: Mapping[int, float], identity: Mapping[int, float]
) -> dict[int, float]:
    """Speed-up per key (batch or depth), for the keys both series have."""
    return {k: speedup(throughputs[k], identity[k]) for k in sorted(throughputs) if k in identity}


def batch_metrics(
    per_compiler: Mapping[str, Mapping[int, float]], baseline: str = BASELINE
) -> dict[str, dict[int, dict[str, float | None]]]:
    """Every batch metric for every compiler of one model.

    Returns ``{compiler: {batch: {"throughput", "rtr", "ase", "bsr", "speedup"}}}``. ``bsr`` and
    ``speedup`` are None where the baseline has no throughput for that batch (or none at all),
    since RTR and ASE are still meaningful on their own.
    """
    base = per_compiler.get(baseline)
    base_ase = ase_table(base, baseline) if base else {}
    out: dict[str, dict[int, dict[str, float | None]]] = {}
    for name, tps in per_compiler.items():
        rtrs, ases = rtr_table(tps, name), ase_table(tps, name)
        rows: dict[int, dict[str, float | None]] = {}
        for b in rtrs:
            has_base = b in base_ase
            rows[b] = {
                "throughput": float(tps[b]),
                "rtr": rtrs[b],
                "ase": ases[b],
                "bsr": bsr(ases[b], base_ase[b]) if has_base else None,
                "speedup": speedup(tps[b], base[b]) if has_base and base else None,
            }
        out[name] = rows
    return out


def depth_metrics(
    throughputs: Mapping[int, float], identity: Mapping[int, float]
) -> dict[str, object]:
    """Depth scaling of one compiler: ``{depth: throughput}`` against identity's at the same depths.

    Returns ``{"speedups": {depth: s}, "slope": float, "retention": float | None}`` (retention is
    None when depth 1 was not measured; the slope still needs two shared depths).
    """
    speedups = speedup_table(throughputs, identity)
    depths, values = list(speedups), list(speedups.values())
    slope = depth_slope(depths, values)
    kept = retention(depths, values) if 1 in speedups else None
    return {"speedups": speedups, "slope": slope, "retention": kept}
