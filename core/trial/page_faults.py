"""Minor page faults per call of each worker process, and when they, not the model, set its speed.

Why: under glibc's default allocator (``ngb.core.trial.allocator``, mode ``system``) a call's large
activations are handed back to the kernel when freed and faulted in again, zeroed, on the next
call -- or not, depending on where they lie in the heap, which the process's whole allocation
history decides. On the 2-core VM (2026-11-27, conv:64:16 b16 under ``identity``, 0.25 s windows
in fresh processes) a process ran anywhere from 0 to ~12,000 minor faults per call and its speed
followed: ~650 samples/s at 0-900 faults per call, ~280-300/s at ~11,000-12,000. The same loop
under ``retain`` faulted 0 times per call. That is why one trial's processes spread 254-618/s,
why ``ngb measure`` and a plain loop disagreed by 1.22x [1.04, 1.44] under ``system`` while
agreeing under ``retain`` (0.978 [0.913, 1.047], ``benchmarks/parity.py --allocator retain``),
and why the verdict then blamed a "drift" that was the allocator's state.

So every worker counts its process's minor faults over its timed loops (``getrusage``, all its
threads; two system calls per worker, outside the timed calls), the result keeps them per call
beside each process's mean, and when the processes' speed follows their faults the verdict says
so (``allocator_note``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

try:
    import resource
except ImportError:  # not on Windows: no count, nothing said
    resource = None  # type: ignore[assignment]

#: a process that faults fewer pages than this per call is not held back by it (400 KiB a call)
MIN_FAULTS_PER_CALL = 100.0
#: the processes' faults per call must spread at least this much (highest over lowest + 1) ...
MIN_FAULT_RATIO = 2.0
#: ... and their means must fall as their faults rise at least this strongly (Spearman's rank
#: correlation; with three processes only a perfect -1 passes)
MAX_RANK_CORRELATION = -0.6
#: processes needed before a rank correlation says anything
MIN_PROCESSES = 3
#: a generous cost of one minor fault (trap and zeroing a 4 KiB page), in seconds. The faults
#: must be able to account for at least half of the spread in seconds per call at this cost: the
#: VM's conv processes paid ~2.4 us a fault (25 ms a call more at ~10,500 faults more), and a
#: ``retain`` trial whose processes ran 0-856 faults a call (1.7 ms at that rate) beside a 35 ms
#: spread was otherwise named as the allocator's doing (rank correlation -0.77 by chance)
FAULT_COST_S = 5e-6
#: ... the share of the spread they must be able to account for
MIN_SHARE_EXPLAINED = 0.5

SOURCE = "getrusage ru_minflt of the worker process over its timed loops (all its threads)"


def minor_faults() -> int | None:
    """Minor page faults of this process so far (None where the platform has no count)."""
    if resource is None:
        return None
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)


def per_call(faults: int | None, calls: int) -> float | None:
    """Faults per timed call (None without a count or a call)."""
    if faults is None or calls <= 0:
        return None
    return faults / calls


def _ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks from 1, ties sharing their mean rank (Spearman's convention)."""
    _, where, counts = np.unique(np.asarray(values, float), return_inverse=True, return_counts=True)
    return (np.cumsum(counts) - (counts - 1) / 2)[where]


def rank_correlation(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rank correlation: Pearson's on the ranks (None when either side does not
    vary)."""
    rx, ry = _ranks(xs), _ranks(ys)
    if rx.std() == 0 or ry.std() == 0:
        return None
    return float(np.corrcoef(rx, ry)[0, 1])


def allocator_note(
    means: Sequence[float],
    faults_per_call: Sequence[float | None],
    allocator: str,
    batch: int = 1,
) -> str | None:
    """One clause for the verdict when the processes' speed follows their page faults, else None.

    ``means`` (samples/s, ``batch`` a call) and ``faults_per_call`` are per worker process, in
    the same order; a process without a count is left out. Said when the faults spread widely,
    the means fall as they rise, and at ``FAULT_COST_S`` a fault they could account for at least
    ``MIN_SHARE_EXPLAINED`` of the spread in seconds per call."""
    pairs = [(m, f) for m, f in zip(means, faults_per_call, strict=True) if f is not None and m > 0]
    if len(pairs) < MIN_PROCESSES:
        return None
    speeds, faults = [m for m, _ in pairs], [f for _, f in pairs]
    low, high = min(faults), max(faults)
    if high < MIN_FAULTS_PER_CALL or high < MIN_FAULT_RATIO * (low + 1):
        return None
    call_spread_s = batch / min(speeds) - batch / max(speeds)
    if (high - low) * FAULT_COST_S < MIN_SHARE_EXPLAINED * call_spread_s:
        return None
    rho = rank_correlation(speeds, faults)
    if rho is None or rho > MAX_RANK_CORRELATION:
        return None
    cure = " -- --allocator retain holds it" if allocator.startswith("system") else ""
    return (
        f"the processes' speed follows their page faults ({low:,.0f}-{high:,.0f} per call, "
        f"rank correlation {rho:.2f}): the C allocator's state, not the model{cure}"
    )
