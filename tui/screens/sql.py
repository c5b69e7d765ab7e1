"""SQL screen: an editor over the results database, a results grid, history, canned queries, and
export to CSV / Parquet.

Queries run read-only (the store opens DuckDB read-only and without file access) unless the
operator flips "allow writes". Every query runs in a thread worker, so a long aggregate never
freezes the console; an error is one line under the editor and the text stays as typed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from ngb.core.errors import NgbError
from ngb.tui.backend import Backend
from ngb.tui.screens.base import ConsoleScreen
from ngb.tui.widgets.table_fill import fill_table
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import (
    Button,
    DataTable,
    Footer,
    Header,
    Input,
    Label,
    OptionList,
    Select,
    Switch,
    TextArea,
)
from textual.widgets.option_list import Option

MAX_ROWS = 5000  # rows put in the grid; export writes everything

CANNED: dict[str, str] = {
    "Runs": (
        "SELECT run_id, sweep_name, status, n_trials, created_at\n"
        "FROM runs ORDER BY created_at DESC"
    ),
    "Best compiler per model and batch": (
        "SELECT model, width, depth, batch, arg_max(compiler, throughput_mean) AS best,\n"
        "       max(throughput_mean) AS samples_per_s\n"
        "FROM trials WHERE status = 'ok'\n"
        "GROUP BY ALL ORDER BY ALL"
    ),
    "Throughput by compiler": (
        "SELECT compiler, count(*) AS trials, round(avg(throughput_mean), 1) AS mean_tput\n"
        "FROM trials WHERE status = 'ok' GROUP BY compiler ORDER BY mean_tput DESC"
    ),
    "Failed trials": "SELECT * FROM failures ORDER BY finished_at DESC",
    "Progress per device": "SELECT * FROM run_progress ORDER BY run_id DESC, device",
    "Tables and views": (
        "SELECT table_name, table_type FROM information_schema.tables ORDER BY table_name"
    ),
}
DEFAULT_QUERY = CANNED["Throughput by compiler"]


def cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


class SqlScreen(ConsoleScreen):
    AUTO_FOCUS = "#sql-editor"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+j", "run_query", "Run query", priority=True),
        Binding("ctrl+enter", "run_query", "Run query", show=False, priority=True),
        Binding("ctrl+e", "export", "Export"),
        Binding("escape", "leave_editor", "Leave editor", show=False),
    ]

    def __init__(self, backend: Backend) -> None:
        super().__init__(backend, id="sql")
        self.history: list[str] = []
        self.last_query = ""
        self.last_columns: list[str] = []
        self.last_rows: list[tuple] = []

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="sql-top"):
            with Vertical(id="sql-side"):
                yield Label("Canned queries", classes="section-title")
                yield OptionList(*[Option(name, id=name) for name in CANNED], id="sql-canned")
                yield Label("History", classes="section-title")
                yield OptionList(id="sql-history")
            with Vertical(id="sql-main"):
                yield TextArea(
                    DEFAULT_QUERY, id="sql-editor", show_line_numbers=True, soft_wrap=False
                )
                with Horizontal(id="sql-bar"):
                    yield Button("Run (ctrl+j)", id="sql-run", variant="primary")
                    yield Label("allow writes", classes="switch-label")
                    yield Switch(value=False, id="sql-write")
                    yield Select(
                        [("CSV", "csv"), ("Parquet", "parquet")],
                        value="csv",
                        allow_blank=False,
                        id="sql-format",
                    )
                    yield Input(placeholder="export path, e.g. ~/results.csv", id="sql-path")
                    yield Button("Export (ctrl+e)", id="sql-export")
                yield Label("", id="sql-status")
        yield DataTable(id="sql-results", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#sql-editor", TextArea).focus()

    def action_leave_editor(self) -> None:
        """Move focus out of the editor so the number keys switch screens again."""
        self.query_one("#sql-results", DataTable).focus()

    # -- running ---------------------------------------------------------------------------------
    def action_run_query(self) -> None:
        sql = self.query_one("#sql-editor", TextArea).text.strip()
        if not sql:
            self._status("[yellow]type a query first[/]")
            return
        self._status("running...")
        self.run_query(sql, self.query_one("#sql-write", Switch).value)

    @work(thread=True, group="query", exclusive=True, exit_on_error=False)
    def run_query(self, sql: str, allow_write: bool) -> None:
        backend = self.backend
        try:
            result = backend.query_sync(sql, allow_write=allow_write)
        except NgbError as exc:
            self.app.call_from_thread(self._status, f"[red]{exc}[/]")
            return
        self.app.call_from_thread(self._show_result, sql, result.columns, result.rows)

    def _show_result(self, sql: str, columns: list[str], rows: list[tuple]) -> None:
        self.last_query, self.last_columns, self.last_rows = sql, columns, rows
        table = self.query_one("#sql-results", DataTable)
        fill_table(table, columns, ([cell(v) for v in row] for row in rows[:MAX_ROWS]))
        more = f" (showing {MAX_ROWS})" if len(rows) > MAX_ROWS else ""
        self._status(f"{len(rows)} row(s){more}")
        self._remember(sql)

    def _remember(self, sql: str) -> None:
        if sql in self.history:
            self.history.remove(sql)
        self.history.insert(0, sql)
        history = self.query_one("#sql-history", OptionList)
        history.clear_options()
        history.add_options([" ".join(q.split())[:60] for q in self.history])

    def _status(self, text: str) -> None:
        self.query_one("#sql-status", Label).update(text)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "sql-run":
            self.action_run_query()
        elif event.button.id == "sql-export":
            self.action_export()

    @on(OptionList.OptionSelected, "#sql-canned")
    def _canned(self, event: OptionList.OptionSelected) -> None:
        self._load_query(CANNED[str(event.option.id)])

    @on(OptionList.OptionSelected, "#sql-history")
    def _from_history(self, event: OptionList.OptionSelected) -> None:
        self._load_query(self.history[event.option_index])

    def _load_query(self, sql: str) -> None:
        editor = self.query_one("#sql-editor", TextArea)
        editor.text = sql
        editor.focus()

    @on(Switch.Changed, "#sql-write")
    def _write_mode(self, event: Switch.Changed) -> None:
        self._status(
            "[b yellow]writes allowed: queries may change the database[/]"
            if event.value
            else "read-only"
        )

    # -- export ----------------------------------------------------------------------------------
    def action_export(self) -> None:
        fmt = str(self.query_one("#sql-format", Select).value)
        path = self.query_one("#sql-path", Input).value.strip()
        sql = self.last_query or self.query_one("#sql-editor", TextArea).text.strip()
        if not path:
            path = f"ngb-export.{fmt}"
        self._status(f"exporting to {path}...")
        self.export(Path(path), fmt, sql or "trials")

    @work(thread=True, group="export", exclusive=True, exit_on_error=False)
    def export(self, dest: Path, fmt: str, table_or_sql: str) -> None:
        backend = self.backend
        try:
            done = backend.export_sync(dest, fmt, table_or_sql)
        except NgbError as exc:
            self.app.call_from_thread(self._status, f"[red]{exc}[/]")
            return
        self.app.call_from_thread(self._status, f"exported {done.rows} row(s) to {done.path}")
        self.app.call_from_thread(
            self.notify, f"exported {done.rows} row(s) as {fmt} to {done.path}"
        )
