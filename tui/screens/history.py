"""History screen: every point's results over the store's runs, with change points.

The top table lists the points (device, model, compiler, batch ...) with how many runs hold them,
the latest result and the change points found (``ngb.sweeps.report.changepoints``); the bottom one
the highlighted point's runs, oldest first, each with its 95 % interval, its compiler's version and
what differs from the run before. The same series as ``ngb history`` (``tui/history_data.py``).
Read in a thread worker when the screen is shown and on ``r``; history changes only when a run
ends, so it does not poll.
"""

from __future__ import annotations

from typing import ClassVar

from ngb.core.base.errors import NgbError
from ngb.tui import history_data
from ngb.tui.backend import Backend
from ngb.tui.screens.base import ConsoleScreen
from ngb.tui.widgets.steady_footer import SteadyFooter
from ngb.tui.widgets.table_fill import fill_table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Header, Label


class HistoryScreen(ConsoleScreen):
    AUTO_FOCUS = "#history-points"
    # here rather than in app.tcss: the screen's layout stays in the screen's one module
    DEFAULT_CSS = """
    #history-note, #history-changes {
        height: auto; max-height: 3; padding: 0 1; color: $text-muted;
    }
    #history-points { height: 1fr; }
    #history-runs { height: 2fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("r", "reload", "Reload")]

    def __init__(self, backend: Backend) -> None:
        super().__init__(backend, id="history")
        self.view = history_data.HistoryView([], {}, {})

    def compose(self) -> ComposeResult:
        yield Header()
        yield Label("", id="history-note")
        points: DataTable[Text] = DataTable(
            id="history-points", cursor_type="row", zebra_stripes=True
        )
        points.add_columns(*history_data.POINT_COLUMNS)
        yield points
        yield Label("", id="history-changes")
        runs: DataTable[Text] = DataTable(id="history-runs", cursor_type="row", zebra_stripes=True)
        runs.add_columns(*history_data.RUN_COLUMNS)
        yield runs
        yield SteadyFooter(compact=True, show_command_palette=False)

    def on_screen_resume(self) -> None:
        self.load_history()

    def action_reload(self) -> None:
        self.load_history()

    @work(thread=True, group="history", exclusive=True, exit_on_error=False)
    def load_history(self) -> None:
        try:
            view = history_data.load(self.backend)
        except NgbError as exc:
            self.app.call_from_thread(self._note, f"[yellow]{exc}[/]")
            return
        self.app.call_from_thread(self._show, view)

    def _note(self, text: str) -> None:
        self.query_one("#history-note", Label).update(text)

    def _show(self, view: history_data.HistoryView) -> None:
        self.view = view
        table = self.query_one("#history-points", DataTable)
        cursor = table.cursor_row
        fill_table(table, history_data.POINT_COLUMNS, view.points, right=(1, 3))
        if table.row_count:
            table.move_cursor(row=min(cursor, table.row_count - 1))
        flagged = sum(1 for row in view.points if row[3] != "0")
        self._note(
            f"{len(view.points)} point(s), {flagged} with a change point; r reload"
            if view.points
            else "No results yet: a point's history appears once runs have measured it."
        )
        self._show_runs()

    @on(DataTable.RowHighlighted, "#history-points")
    def _highlighted(self) -> None:
        self._show_runs()

    def _show_runs(self) -> None:
        table = self.query_one("#history-points", DataTable)
        label = ""
        if table.row_count and 0 <= table.cursor_row < len(self.view.points):
            label = self.view.points[table.cursor_row][0]
        fill_table(
            self.query_one("#history-runs", DataTable),
            history_data.RUN_COLUMNS,
            self.view.runs.get(label, []),
        )
        found = self.view.changes.get(label, [])
        self.query_one("#history-changes", Label).update(
            Text("; ".join(f"change point {c}" for c in found) or "no change point")
            if label
            else ""
        )
