"""Reports: the paper's tables (and two beyond it) regenerated from the results database.

Public API::

    list_reports() -> [(name, description)]
    build_report(name, store=None, run_id=None, device=None) -> Report
    render(report, fmt="table"|"markdown"|"csv") -> str

Everything is read through ``Store.query`` (read-only connections), so a report can be made while
a run is writing. Definitions of every number are in the builder modules' docstrings
(``report_paper`` for the paper's tables, ``report_dlas`` for DLAS and ranking reversals) and
repeated in each table's notes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ngb.core.base.errors import ConfigError, UnknownNameError
from ngb.sweeps.report import algorithms as report_algorithms
from ngb.sweeps.report import deploy as report_deploy
from ngb.sweeps.report import dlas as report_dlas
from ngb.sweeps.report import ops as profile_report
from ngb.sweeps.report import paper as report_paper
from ngb.sweeps.report import serving as report_serving
from ngb.sweeps.report.data import Cell, Report, ReportData, Table
from ngb.sweeps.report.render import FORMATS, render

if TYPE_CHECKING:
    from ngb.sweeps.store.database import Store

__all__ = [
    "FORMATS",
    "REPORTS",
    "Cell",
    "Report",
    "Table",
    "build_report",
    "list_reports",
    "render",
]

# name -> (builder, one-line description); the order is the paper's.
REPORTS: dict[str, tuple[Callable[[ReportData], Report], str]] = {
    "testbed": (report_paper.testbed, "Devices, software and compilers (Tables I, II)"),
    "compile-times": (report_paper.compile_times, "Compile/tuning time by model and batch (III)"),
    "families": (report_paper.families, "Throughput and CPU % by family, batch 2-4 / 8-16 (VI)"),
    "depth": (report_paper.depth, "Depth slope and retention of blocks (Tables VII, VIII)"),
    "bsr": (report_paper.bsr, "RTR, ASE, BSR and speed-up per model, compiler and batch"),
    "ase": (report_paper.ase, "ASE per model/width x batch for each compiler (heatmaps)"),
    "dlas": (report_dlas.dlas, "Achieved and % of expected speed-up per optimisation"),
    "reversals": (report_dlas.reversals, "Model pairs whose order flips under a compiler"),
    "accuracy": (report_dlas.accuracy, "Top-1/top-5 on labelled data beside throughput, drop"),
    "algorithms": (
        report_algorithms.algorithms,
        "Convolution algorithm per compiler: ms per batch, speed-up, % of expected (DLAS)",
    ),
    "energy": (report_deploy.energy, "Energy per sample, samples/J, watts, cost per 1M"),
    "breakeven": (report_deploy.breakeven, "Inferences that pay back compile + tuning time"),
    "ops": (profile_report.ops, "Per-operator profiles side by side (ngb profile --db)"),
    "serving": (report_serving.serving, "p99 from the scheduled time, QPS* (ngb serve --db)"),
}


def list_reports() -> list[tuple[str, str]]:
    return [(name, description) for name, (_, description) in REPORTS.items()]


#: the reports that read every algorithm's trials (``ReportData.with_every_algorithm``)
EVERY_ALGORITHM = ("algorithms",)
#: the reports that can stream their rows (``ReportData.streaming``)
STREAMED = ("energy", "breakeven")
#: streaming pays off past this many points: below it the spill's own machinery (a second
#: DuckDB, Arrow) cost more than the rows (0.89 GiB store of 4,000 points: report energy 161 MiB
#: whole, 215 MiB streamed; 480,000 points: over 1.5 GiB whole, 333 MiB streamed)
STREAM_ABOVE_POINTS = 20_000


def worth_streaming(
    names: list[str], store: Store, *, run_id: str | None = None, device: str | None = None
) -> bool:
    """Whether any of ``names`` lists enough points to be read a batch at a time."""
    if not any(n in STREAMED for n in names):
        return False
    return ReportData(store, run_id=run_id, device=device).point_count() > STREAM_ABOVE_POINTS


def build_report(
    name: str,
    store: Store | None = None,
    *,
    run_id: str | None = None,
    device: str | None = None,
    streaming: bool = False,
    model: str | None = None,
    compilers: list[str] | None = None,
) -> Report:
    """Build report ``name``; unknown report/run/device names raise a one-line NgbError.

    ``streaming``: the caller renders with ``render_to``, so the reports that list every point
    (``energy``, ``breakeven``) read their trials and keep their rows a batch at a time
    (``ReportData.streamed``, a ``RowSpool``): memory stays flat however many points there are.
    """
    if name not in REPORTS:
        raise UnknownNameError("report", name, list(REPORTS))
    if store is None:
        from ngb.sweeps.store.database import Store

        store = Store()
    builder, _ = REPORTS[name]
    data = ReportData(store, run_id=run_id, device=device)
    data.streaming = streaming
    data.model = model
    data.compilers = compilers
    report = builder(data)
    if name != "testbed":
        # the trials the report read: every algorithm's for ``algorithms``, else the compiler's own
        data = data.with_every_algorithm() if name in EVERY_ALGORITHM else data
        # counted in SQL where the report read no trial whole (a report of every point)
        counts = data.verdict_counts()
        judged = sum(n for _, _, n in counts)
        invalid = [
            row
            for verdict, reason, n in counts
            if verdict != "VALID"
            for row in [{"verdict": verdict, "verdict_reason": reason}] * n
        ]
        if invalid:
            from ngb.sweeps.report.verdicts import (  # counted as the run's summary does
                invalid_causes,
                offer_text,
                reached_target,
            )

            report.notes.append(
                f"{len(invalid)} of {judged} trials are INVALID "
                f"({', '.join(invalid_causes(invalid))}): read their numbers "
                "with their intervals (`ngb report bsr` lists each verdict)"
                + offer_text(reached_target(data.width_rows()))
            )
    scope = [f"run {run_id}" if run_id else "all runs (newest result per point)"]
    if device:
        scope.append(f"device {device}")
    report.notes.append("source: " + ", ".join(scope))
    return report


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise ConfigError(f"unknown report format {fmt!r}; valid: {', '.join(FORMATS)}")
    return fmt
