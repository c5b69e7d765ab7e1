"""``ngb compare``'s tables: the comparison of two runs (``compare``) with the gate's verdict
per point (``gate``) beside it. Apart from ``compare`` so the gate, which judges a
``Comparison``, and the tables, which show its verdicts, import in one direction only."""

from __future__ import annotations

from ngb.sweeps.report import derived
from ngb.sweeps.report.compare import GATE_NOTE, Comparison, PackageLookup, changes_text
from ngb.sweeps.report.data import Report, Table
from ngb.sweeps.report.gate import FAIL, PASS, UNDECIDABLE, gate
from ngb.sweeps.report.paper import UNCERTAINTY_NOTE, cell


def report(
    comparison: Comparison,
    threshold: float | None = None,
    packages: PackageLookup | None = None,
) -> Report:
    """The comparison as a ``Report`` (rendered as text, markdown, CSV or HTML)."""

    judged = gate(comparison, threshold) if threshold else None
    outcome = {p.label: p for p in judged.points} if judged else {}
    table = Table(
        f"{comparison.run_b} vs {comparison.run_a}: throughput (samples/s) and B / A",
        ["point", "A", "B", "B / A", "verdict", "also differs here"],
    )
    for c in comparison.points:
        verdict = c.verdict
        judged_here = outcome.get(c.label)
        if judged_here is not None and judged_here.outcome == FAIL:
            verdict += " FAIL"
        elif judged_here is not None and judged_here.outcome == UNDECIDABLE:
            verdict += " UNDECIDABLE"
        elif judged_here is not None and judged_here.reason.startswith("possible"):
            verdict += " (possible)"
        table.rows.append(
            [
                c.label,
                cell(derived.throughput(c.a)),
                cell(derived.throughput(c.b)),
                cell(c.ratio),
                verdict,
                changes_text(c.changes, packages) or "-",
            ]
        )
    notes = []
    if comparison.run_changes:
        notes.append("differs at every point: " + changes_text(comparison.run_changes, packages))
    else:
        notes.append("no setting, version, device state or package differs at every point")
    if comparison.broken:
        notes.append(
            f"ok in {comparison.run_a}, failed in {comparison.run_b}: "
            + "; ".join(f"{name} ({error})" for name, error in comparison.broken)
        )
    if comparison.only_a:
        notes.append(f"only in {comparison.run_a}: " + ", ".join(comparison.only_a))
    if comparison.only_b:
        notes.append(f"only in {comparison.run_b}: " + ", ".join(comparison.only_b))
    if judged is not None:
        notes.append(GATE_NOTE)
        notes += [f"gate: {p.text()}" for p in judged.points if p.outcome != PASS]
        notes.append(judged.summary())
    notes.append(UNCERTAINTY_NOTE)
    return Report("compare", f"ngb compare {comparison.run_a} {comparison.run_b}", [table], notes)
