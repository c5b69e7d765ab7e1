"""What the console's History screen shows, from ``ngb.sweeps.report.history`` (the CLI's own
series).

One table row per point (its runs, latest result, change points), and for the selected point one
row per run: the same ``Series`` and the same digits as ``ngb history``, through ``derived``'s
``text()`` (``value [low, high]``), so the console and the CLI cannot disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ngb.tui.backend import Backend

POINT_COLUMNS = ("point", "runs", "latest", "change points", "last change")
RUN_COLUMNS = ("run", "finished", "throughput", "compiler version", "change", "what differs")


@dataclass(frozen=True)
class HistoryView:
    points: Sequence[tuple[str, ...]]  # one row per series, POINT_COLUMNS
    runs: dict[str, Sequence[tuple[str, ...]]]  # point label -> RUN_COLUMNS rows, oldest first
    changes: dict[str, list[str]]  # point label -> its change points as text


def load(backend: Backend) -> HistoryView:
    """Every point's series from the store (blocking: call it from a thread worker)."""
    from ngb.sweeps.report import history
    from ngb.sweeps.report.compare import changes_text
    from ngb.sweeps.report.points import differences

    if not backend.database_exists():
        return HistoryView([], {}, {})
    store = backend.store()
    packages = history.package_lookup(store)
    series = history.series_of(history.load(store, {}))
    points: list[tuple[str, ...]] = []
    runs: dict[str, Sequence[tuple[str, ...]]] = {}
    changes: dict[str, list[str]] = {}
    for s in series:
        starts = {c.run_id: c for c in s.changes}
        last = s.changes[-1].text() if s.changes else "-"
        points.append(
            (
                s.label,
                str(len(s.entries)),
                s.entries[-1].throughput.text(),
                str(len(s.changes)),
                last,
            )
        )
        rows: list[tuple[str, ...]] = []
        prev: history.Entry | None = None
        for e in s.entries:
            moved = differences(prev.row, e.row) if prev is not None else []
            mark = f"{starts[e.run_id].percent:+.1f} %" if e.run_id in starts else ""
            rows.append(
                (e.run_id, e.when[:19], e.throughput.text(), e.compiler_version, mark,
                 changes_text(moved, packages) or "-")
            )  # fmt: skip
            prev = e
        runs[s.label] = rows
        changes[s.label] = [c.text(packages) for c in s.changes]
    return HistoryView(points, runs, changes)
