"""The Results screen's "Ops" tab: where the selected model's time goes, per operator class.

The console's view of ``ngb report ops`` (``ngb.sweeps.report.ops``): one column per
compiler (its precision or optimisation added where the model has several), one row per
operator class with its milliseconds per call and share, then the kernel count per inference
(fusion shows as fewer kernels) and the profiled and timed latency with their ratio (the
profiler's overhead, stated). Rows are grouped by batch (and depth for the blocks): a "b" column
says which. Classes no compiler spent time in are left out, so the table fits 80x24.

Pure functions of the stored profiles (read in the screen's worker thread); no widget here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ngb.core.compilers.profiling import OP_CLASSES, Profile
from ngb.sweeps.report.ops import column_names

if TYPE_CHECKING:
    from ngb.sweeps.store.database import Store
    from ngb.sweeps.store.profiles import ProfilePoint

Stored = list[tuple["ProfilePoint", Profile]]

#: what the tab says where the selected model has no profile
NO_PROFILES = (
    "no per-operator profile for this model in this run: `ngb run --profile` (or `profile = "
    "true` in the sweep's [measure]) takes one per trial; `ngb profile MODEL --db` apart"
)
# one line at 80 columns; "n in flight" marks a timed trial that ran n requests at once
NOTE = "ms/call (share); k = kernels/inference; n in flight: a call takes <= n x timed"


def load(store: Store, run_id: str, device: str | None) -> Stored:
    """The run's profiles (with the timed latency of their trials): for the worker thread."""
    from ngb.sweeps.report.data import ReportData
    from ngb.sweeps.report.ops import load_with_timed

    if not store.path.exists():
        return []
    stored, _ = load_with_timed(ReportData(store, run_id=run_id, device=device))
    return stored


def _variant(point: ProfilePoint) -> str:
    """The Results screen's model selector's value for a point (``results_data.variant_of``)."""
    from ngb.core.records.types import BLOCK_MODELS

    return f"{point.model} w{point.width}" if point.model in BLOCK_MODELS else point.model


def _ms(value: float) -> str:
    return f"{value:.3g}"


def table(
    stored: Sequence[tuple[ProfilePoint, Profile]], variant: str, compilers: Sequence[str] = ()
) -> tuple[list[str], list[list[str]]]:
    """(columns, rows) for ``variant`` (a model, or "conv w64"); only ``compilers`` where given.
    Empty rows where the model has no profile."""
    chosen = [
        (pt, p)
        for pt, p in stored
        if _variant(pt) == variant and (not compilers or pt.compiler in compilers)
    ]
    if not chosen:
        return ["class"], []
    names = sorted(set(column_names([pt for pt, _ in chosen])))
    by_group: dict[tuple[int, int], dict[str, Profile]] = {}
    for (pt, p), name in zip(chosen, column_names([pt for pt, _ in chosen]), strict=True):
        by_group.setdefault((pt.batch, pt.depth), {})[name] = p
    rows: list[list[str]] = []
    for (batch, depth), found in sorted(by_group.items()):
        group = f"b{batch}" + (f" d{depth}" if depth != 1 else "")
        per_class = {n: p.by_class() for n, p in found.items()}
        for cls in OP_CLASSES:
            if not any(c[cls] > 0 for c in per_class.values()):
                continue
            rows.append([group, cls, *(_cell(found.get(n), per_class.get(n), cls) for n in names)])
        rows.append([group, "kernels (k)", *(_k(found.get(n)) for n in names)])
        rows.append([group, "profiled ms", *(_profiled(found.get(n)) for n in names)])
        rows.append([group, "timed ms", *(_timed(found.get(n)) for n in names)])
        rows.append([group, "profiled/timed", *(_ratio(found.get(n)) for n in names)])
    return ["b", "class", *names], rows


def _cell(p: Profile | None, per_class: dict[str, float] | None, cls: str) -> str:
    """``0.42 (75%)``: ms per call in ``cls`` and its share of the recorded time; "-" where
    this compiler has no profile at this batch."""
    if p is None or per_class is None:
        return "-"
    ms = per_class[cls]
    if ms == 0:
        return "0"
    return f"{_ms(ms)} ({100 * ms / p.kernel_ms:.0f}%)" if p.kernel_ms else _ms(ms)


def _k(p: Profile | None) -> str:
    return f"{p.kernels_per_inference:.0f}" if p else "-"


def _profiled(p: Profile | None) -> str:
    return _ms(p.profiled_ms) if p else "-"


def _timed(p: Profile | None) -> str:
    return _ms(p.timed_ms) if p and p.timed_ms else "-"


def _ratio(p: Profile | None) -> str:
    from ngb.sweeps.report.ops import profiled_over_timed

    return profiled_over_timed(p) if p else "-"
