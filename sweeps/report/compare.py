"""``ngb compare RUN_A RUN_B``: every point two runs share, how much B moved, and because of what.

Per shared point (``run_points``): the throughput ratio B / A with its 95 % interval and verdict,
computed by ``derived.speedup`` (the reports' speed-up: ``intervals.power_product`` on the log
scale from each result's stored interval; "n.s." where the printed interval includes 1), and the
settings, versions, device state and provenance fields that differ between the two results.
Fields that differ at every point are said once for the run (``Comparison.run_changes``).
Points are sorted by effect: significant ones first, largest ``|log ratio|`` first.

The regression gate (``--fail-above 5%``) is ``gate.py``: pass, fail or undecidable per point.
A point fails when its slowdown is significant *and its whole interval* lies beyond the
threshold, i.e. the interval's upper bound of B / A is below ``1 / (1 + threshold)`` (B takes
more than 5 % longer per sample, with 95 % confidence). Why not "significant and the point
estimate beyond": with a true slowdown exactly at the threshold that rule fails half the time,
so a CI job on the fence flips between red and green run after run and people learn to ignore
it; the interval rule fails a point whose true slowdown is at or below the threshold with
probability at most 2.5 %. Slowdowns whose interval is too wide to be sure of are *undecidable*
(not passed: see ``gate.py``); a point that ran in A and failed in B fails the gate too, unless
it failed for the harness's reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ngb.core.trial.provenance import diff_packages
from ngb.sweeps.report import derived
from ngb.sweeps.report.derived import Derived
from ngb.sweeps.report.points import (
    Change,
    Point,
    common_changes,
    differences,
    index_by_point,
    label,
    swept_settings,
)
from ngb.sweeps.rows import StoreRow

FASTER, SLOWER, NOT_SIGNIFICANT, UNKNOWN = "faster", "slower", "n.s.", "n<2"
# env_hash -> its package list (None: not stored), to expand an environment change
PackageLookup = Callable[[str], list[str] | None]


@dataclass(frozen=True)
class PointComparison:
    point: Point
    a: StoreRow
    b: StoreRow
    ratio: Derived  # throughput B / A
    changes: tuple[Change, ...]  # what differs at this point beyond the run-wide changes

    @property
    def label(self) -> str:
        return label(self.point)

    @property
    def verdict(self) -> str:
        if derived.UNKNOWN in self.ratio.flags or not math.isfinite(self.ratio.value):
            return UNKNOWN
        if derived.NS in self.ratio.flags or self.ratio.significant is not True:
            return NOT_SIGNIFICANT
        return FASTER if self.ratio.value > 1 else SLOWER

    @property
    def effect(self) -> float:
        """|log ratio|: how far B moved, either way."""
        value = self.ratio.value
        return abs(math.log(value)) if math.isfinite(value) and value > 0 else 0.0


@dataclass(frozen=True)
class Comparison:
    run_a: str
    run_b: str
    points: list[PointComparison]
    run_changes: list[Change]  # fields that differ at every shared point
    only_a: list[str] = field(default_factory=list)  # point labels in A alone
    only_b: list[str] = field(default_factory=list)
    # ok in A, failed in B: (label, B's error) -- an upgrade that breaks a model fails the gate
    broken: list[tuple[str, str]] = field(default_factory=list)
    broken_rows: dict[str, StoreRow] = field(default_factory=dict)  # label -> B's failed trial


def compare(
    run_a: str, rows_a: Sequence[StoreRow], run_b: str, rows_b: Sequence[StoreRow]
) -> Comparison:
    """Compare two runs' successful trials (store rows) point by point (see module)."""
    ok_a = [r for r in rows_a if r.get("status") == "ok"]
    ok_b = [r for r in rows_b if r.get("status") == "ok"]
    swept = swept_settings([*ok_a, *ok_b])
    by_a, by_b = index_by_point(ok_a, swept), index_by_point(ok_b, swept)
    shared = [p for p in by_a if p in by_b]
    per_point = [differences(by_a[p], by_b[p], swept) for p in shared]
    run_changes = common_changes(per_point)
    common = {c.text() for c in run_changes}
    points = [
        PointComparison(
            p,
            by_a[p],
            by_b[p],
            derived.speedup(by_b[p], by_a[p]),
            tuple(c for c in changes if c.text() not in common),
        )
        for p, changes in zip(shared, per_point, strict=True)
    ]
    points.sort(key=lambda c: (c.verdict not in (FASTER, SLOWER), -c.effect, c.label))
    failed_b = index_by_point([r for r in rows_b if r.get("status") != "ok"], swept)
    broken = [
        (label(p), str(failed_b[p].get("error") or failed_b[p].get("error_kind") or "failed"))
        for p in by_a
        if p not in by_b and p in failed_b
    ]
    return Comparison(
        run_a,
        run_b,
        points,
        run_changes,
        sorted(label(p) for p in by_a if p not in by_b and p not in failed_b),
        sorted(label(p) for p in by_b if p not in by_a),
        sorted(broken),
        {label(p): failed_b[p] for p in by_a if p not in by_b and p in failed_b},
    )


def parse_threshold(text: str) -> float:
    """``5%`` or ``0.05`` -> 0.05 (a fraction > 0)."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise ValueError(f"not a threshold: {text!r} (use e.g. 5% or 0.05)") from None
    if not (math.isfinite(value) and 0 < value < 10):
        raise ValueError(f"threshold must be above 0, got {text!r}")
    return value


def regressions(
    comparison: Comparison, threshold: float
) -> tuple[list[PointComparison], list[PointComparison]]:
    """(failing, possible) slowdowns beyond ``threshold`` (see module for the rule)."""
    limit = 1 / (1 + threshold)
    failing, possible = [], []
    for c in comparison.points:
        if c.verdict == UNKNOWN or not c.ratio.value < limit:
            continue
        high = c.ratio.high
        if c.verdict == SLOWER and high is not None and high < limit:
            failing.append(c)
        else:
            possible.append(c)
    return failing, possible


# ---------------------------------------------------------------- as a report (every format)

GATE_NOTE = (
    "gate: a point fails when B is slower with 95 % confidence by more than the threshold "
    "(the whole interval of B / A below 1 / (1 + threshold)) or broke in B; it is undecidable "
    "when A or B is INVALID, has no interval, or its interval is wider than the threshold, or "
    "it failed in B for an infrastructure reason; 'possible' = the estimate is beyond the "
    "threshold but an interval narrower than it is not (measure more to be sure)"
)


def changes_text(changes: Sequence[Change], packages: PackageLookup | None) -> str:
    parts = []
    for c in changes:
        parts.append(c.text())
        if c.field == "env_hash" and packages is not None:
            old = packages(str(c.old)) if c.old else None
            new = packages(str(c.new)) if c.new else None
            if old is not None and new is not None:
                moved = diff_packages(old, new)
                shown = ", ".join(moved[:12]) + (
                    f" (+{len(moved) - 12} more)" if len(moved) > 12 else ""
                )
                parts.append(f"packages: {shown or 'same list'}")
    return "; ".join(parts)
