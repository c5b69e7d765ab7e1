"""The regression gate of ``ngb compare A B --fail-above X%``: pass, fail or undecidable.

A CI gate that can only say "pass" or "fail" has to call something when it cannot judge, and
the old gate called it "pass": a run that collapsed under load (INVALID, B / A = 0.3 [0.03, 3.6])
or one whose interval is wider than the threshold went green, and a harness fault in B failed the
gate as if the model had broken. So every point the two runs share gets one of three outcomes,
with its reason:

- **fail**: B is slower than A by more than the threshold with 95 % confidence (the whole
  interval of B / A below ``1 / (1 + threshold)``: a true slowdown at the threshold fails at
  most 2.5 % of the time, so a job on the fence does not flip between red and green), or the
  point ran in A and failed in B for a reason of its own (an error, a crash, a timeout: an
  upgrade that broke or hung the model);
- **undecidable**: nothing can be said against the threshold: B's or A's result is INVALID
  (collapsed, disturbed beyond use), it has no interval, its interval is wider than the
  threshold (half-width on the log scale above ``log(1 + threshold)``, so even B = A could not
  be told from a slowdown at the threshold) while it does not exclude a slowdown beyond it, the
  point failed in B for an infrastructure reason (a worker interpreter that did not start, a
  result that could not be stored, a job the batch system killed: the harness, not the model),
  or it is missing from B;
- **pass**: anything else -- B is not slower beyond the threshold with 95 % confidence, or is
  so close to it that an interval narrower than the threshold straddles it ("possible": measure
  more to be sure; it does not fail, for the flip-flop reason above).

The run's outcome is fail if any point fails, else undecidable if any point is, else pass.
What an undecidable run exits with is the caller's choice (``--on-undecided``, see
``ngb.sweeps.cli.compare``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ngb.sweeps.report.compare import SLOWER, UNKNOWN, Comparison, PointComparison
from ngb.sweeps.rows import StoreRow

PASS, FAIL, UNDECIDABLE = "pass", "fail", "undecidable"

# what a failed trial's error says when the harness or the machine failed, not the model
_INFRASTRUCTURE_KINDS = frozenset({"ingest", "unavailable"})
_INFRASTRUCTURE_WORDS = (
    "worker interpreter did not start",  # core.worker_start: the machine was too busy or broken
    "could not be stored",  # sweeps.run.writer: the store refused the result
    "killed by the scheduler",  # sweeps.run.job_end: a time limit, a preemption, a scancel
    "killed by signal sigterm",  # the job's end reached the trial first
    "no space left on device",
    "lost connection",
    "connection refused",
    "connection reset",
)


@dataclass(frozen=True)
class GatePoint:
    label: str
    outcome: str  # PASS, FAIL or UNDECIDABLE
    reason: str  # why, in a few words

    def text(self) -> str:
        return f"{self.label}: {self.outcome}: {self.reason}"


@dataclass(frozen=True)
class Gate:
    threshold: float
    points: list[GatePoint]

    @property
    def outcome(self) -> str:
        outcomes = {p.outcome for p in self.points}
        return FAIL if FAIL in outcomes else UNDECIDABLE if UNDECIDABLE in outcomes else PASS

    def count(self, outcome: str) -> int:
        return sum(1 for p in self.points if p.outcome == outcome)

    def summary(self, shown: int = 3) -> str:
        """One line: the outcome, the counts and the first points that decided it."""
        deciding = [p for p in self.points if p.outcome == self.outcome and p.outcome != PASS]
        listed = "; ".join(p.text() for p in deciding[:shown])
        more = f" (+{len(deciding) - shown} more)" if len(deciding) > shown else ""
        counts = ", ".join(f"{self.count(o)} {o}" for o in (FAIL, UNDECIDABLE, PASS))
        head = f"gate {self.outcome} at {100 * self.threshold:g} %: {counts}"
        return f"{head} -- {listed}{more}" if listed else head


def invalid_reason(row: StoreRow) -> str | None:
    """Why a result cannot be judged at all (its verdict), or None."""
    verdict = str(row.get("verdict") or "")
    if not verdict.upper().startswith("INVALID"):
        return None
    why = str(row.get("verdict_reason") or "").strip()
    return f"INVALID ({why})" if why else "INVALID"


def infrastructure_failure(row: StoreRow) -> bool:
    """Whether a failed trial failed for the harness's or the machine's reason."""
    if str(row.get("error_kind") or "") in _INFRASTRUCTURE_KINDS:
        return True
    error = str(row.get("error") or "").lower()
    return any(word in error for word in _INFRASTRUCTURE_WORDS)


def _percent(ratio: float) -> str:
    return f"{100 * (1 / ratio - 1):+.1f} %" if ratio > 0 else "?"


def judge(c: PointComparison, threshold: float) -> GatePoint:
    """One shared point's outcome against ``threshold`` (see module)."""
    for side, row in (("B", c.b), ("A", c.a)):
        why = invalid_reason(row)
        if why is not None:
            return GatePoint(c.label, UNDECIDABLE, f"{side}'s result is {why}")
    if c.ratio.estimate.exact:  # the same stored result on both sides
        return GatePoint(c.label, PASS, "the same result in both runs")
    limit = 1 / (1 + threshold)
    low, high, value = c.ratio.low, c.ratio.high, c.ratio.value
    if c.verdict == UNKNOWN or low is None or high is None or not math.isfinite(value):
        return GatePoint(c.label, UNDECIDABLE, "no interval (fewer than 2 repetitions)")
    shown = f"B / A {c.ratio.number()}, time per sample {_percent(value)}"
    if high < limit and c.verdict == SLOWER:
        return GatePoint(c.label, FAIL, f"slower beyond the threshold, 95 % sure ({shown})")
    if low >= limit:
        return GatePoint(c.label, PASS, f"within the threshold, 95 % sure ({shown})")
    half = (math.log(high) - math.log(low)) / 2
    if half > math.log1p(threshold):
        return GatePoint(
            c.label,
            UNDECIDABLE,
            f"interval wider than the threshold (+-{100 * math.expm1(half):.1f} %): {shown}",
        )
    note = (
        "possible slowdown at the threshold"
        if value < limit
        else "within the threshold, not 95 % sure"
    )
    return GatePoint(c.label, PASS, f"{note} ({shown})")


def gate(comparison: Comparison, threshold: float) -> Gate:
    """Every point's outcome (see module); a point that failed in B is judged by its stored
    error (``Comparison.broken_rows``): the harness's failure is undecidable, the model's fails."""
    points = [judge(c, threshold) for c in comparison.points]
    for name, error in comparison.broken:
        row = comparison.broken_rows.get(name, {"error": error})
        if infrastructure_failure(row):
            points.append(GatePoint(name, UNDECIDABLE, f"infrastructure failure in B: {error}"))
        else:
            kind = str(row.get("error_kind") or "error")
            points.append(GatePoint(name, FAIL, f"failed in B ({kind}): {error}"))
    points += [GatePoint(name, UNDECIDABLE, "not measured in B") for name in comparison.only_a]
    order = {FAIL: 0, UNDECIDABLE: 1, PASS: 2}
    points.sort(key=lambda p: (order[p.outcome], p.label))
    return Gate(threshold, points)
