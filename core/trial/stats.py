"""Summary statistics for a trial's samples (throughput per repetition, latency per call).

numpy does the arithmetic; the only choices made here are the ones a paper has to state: sample
standard deviation (ddof=1), linear-interpolated percentiles, and CoV = std / mean.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
from ngb.core.records.types import Stats


def summarize(values: Iterable[float] | np.ndarray) -> Stats:
    """Stats of a sample. Empty: ``n=0`` and NaN everywhere; one value: std and CoV are NaN."""
    arr = np.asarray(values if isinstance(values, np.ndarray) else list(values), dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    n = int(arr.size)
    if n == 0:
        return Stats(n=0)
    mean = float(arr.mean())
    std = float(arr.std(ddof=1)) if n > 1 else math.nan
    p50, p90, p99 = (float(v) for v in np.percentile(arr, [50, 90, 99]))
    cov = std / mean if n > 1 and mean != 0 else math.nan
    return Stats(
        n=n,
        mean=mean,
        std=std,
        median=float(np.median(arr)),
        min=float(arr.min()),
        max=float(arr.max()),
        p50=p50,
        p90=p90,
        p99=p99,
        cov=cov,
    )


def is_unstable(stats: Stats, cov_threshold: float) -> bool:
    """True when the CoV is known and above the threshold (a single repetition is never flagged)."""
    return not math.isnan(stats.cov) and stats.cov > cov_threshold


def concat_ns_to_ms(chunks: Sequence[np.ndarray]) -> np.ndarray:
    """Join per-repetition latency arrays (nanoseconds) into one array in milliseconds."""
    if not chunks:
        return np.empty(0, dtype=np.float64)
    return np.concatenate(chunks).astype(np.float64) / 1e6
