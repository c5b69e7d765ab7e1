"""SQL screen: an editor over the results database, a results grid, history, canned queries, and
export to CSV / Parquet.

Queries run read-only (on a private copy of the store, without file access) unless the operator
flips "allow writes". Every query runs in a thread worker on its own connection
(``ngb.sweeps.store.snapshot.QueryJob``), so a long aggregate freezes neither the console nor the
live run's ingest; Escape or ctrl+c cancel it (``connection.interrupt()``), a time limit (the
"limit s" box, remembered) stops it, and a new query first cancels the one in flight. An error
is one line under the editor and the text stays as typed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from ngb.core.base.errors import NgbError
from ngb.tui.backend import Backend, SqlRow
from ngb.tui.screens.base import ConsoleScreen
from ngb.tui.settings import HISTORY_KEEP
from ngb.tui.widgets.steady_footer import SteadyFooter

if TYPE_CHECKING:
    from ngb.sweeps.store.snapshot import QueryJob
from ngb.tui.widgets.data_grid import DataGrid
from ngb.tui.widgets.sql_editor import SqlEditor
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import (
    Button,
    Header,
    Input,
    Label,
    OptionList,
    Select,
    Switch,
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
DEFAULT_TIMEOUT_S = 60  # a query's time limit unless the operator sets another (0: none)
RUNNING = "running… (Escape/ctrl+c cancels)"


def cell(value: object, digits: int = 3) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float | Decimal):
        return f"{value:.{digits}f}" if math.isfinite(value) else str(value)
    return str(value)


def is_number(value: object) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


def _decimals(value: float | Decimal) -> int:
    """The decimals a value has: 51.3 (``round(x, 1)``) has 1, an unrounded mean many."""
    if isinstance(value, Decimal):
        exponent = value.as_tuple().exponent
        return -exponent if isinstance(exponent, int) and exponent < 0 else 0
    text = repr(value)
    return 99 if "e" in text else len(text.partition(".")[2])


def column_digits(rows: Sequence[SqlRow], index: int) -> int:
    """One precision per column: enough decimals for its smallest non-zero magnitude (max 6),
    and no more than its values have (``round(x, 1)`` shows 51.3, not 51.300)."""
    values = [v for r in rows if isinstance(v := r[index], float | Decimal) and math.isfinite(v)]
    nonzero = [abs(float(v)) for v in values if v]
    if not nonzero:
        return 3 if not values else min(3, max(_decimals(v) for v in values))
    smallest = min(nonzero)
    enough = 3 if smallest >= 0.01 else min(6, 2 - math.floor(math.log10(smallest)))
    return min(enough, max(_decimals(v) for v in values))


def friendly_error(message: str) -> str:
    """The store's errors, said for the console (no CLI flags: here writes are a switch)."""
    if "read-only" in message:
        detail = message[message.rfind("(") + 1 : -1] if message.endswith(")") else ""
        return "the database is open read-only: turn on 'allow writes' to change it" + (
            f" ({detail})" if detail else ""
        )
    return message


class SqlScreen(ConsoleScreen):
    AUTO_FOCUS = "#sql-editor"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+j", "run_query", "Run", priority=True),
        Binding("ctrl+enter", "run_query", "Run query", show=False, priority=True),
        # priority: the editor and the path box would take ctrl+e (end of line) otherwise
        Binding("ctrl+e", "export", "Export", priority=True),
        Binding("ctrl+l", "clear", "Clear", priority=True, show=False),  # in help: 80 cols
        # priority: the editor would copy on ctrl+c; only while a query runs (check_action). The
        # status line says it while one runs, so the footer stays short enough for 80 columns.
        Binding("ctrl+c", "cancel_query", "Cancel query", priority=True, show=False),
        Binding("escape", "leave_editor", "Leave/cancel", key_display="esc"),
    ]

    def __init__(self, backend: Backend) -> None:
        super().__init__(backend, id="sql")
        self.history: list[str] = []
        self.last_query = ""
        self.last_columns: list[str] = []
        self.last_rows: list[SqlRow] = []
        self.job: QueryJob | None = None  # the query in flight

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="sql-top"):
            with Vertical(id="sql-side"):
                yield Label("Canned queries", classes="section-title")
                yield OptionList(*[Option(name, id=name) for name in CANNED], id="sql-canned")
                yield Label("History", classes="section-title")
                yield OptionList(id="sql-history")
            with Vertical(id="sql-main"):
                yield SqlEditor(DEFAULT_QUERY, id="sql-editor")
                with Horizontal(classes="sql-bar"):
                    yield Button("Run", id="sql-run", variant="primary")
                    yield Label("allow writes", classes="switch-label")
                    yield Switch(value=False, id="sql-write")
                    yield Label("limit s", classes="switch-label")
                    yield Input(
                        str(DEFAULT_TIMEOUT_S), type="integer", id="sql-timeout", max_length=5
                    )
                with Horizontal(classes="sql-bar"):
                    yield Select(
                        [("CSV", "csv"), ("Parquet", "parquet")],
                        value="csv",
                        allow_blank=False,
                        id="sql-format",
                    )
                    yield Input(placeholder="export path, e.g. ~/results.csv", id="sql-path")
                    yield Button("Export", id="sql-export")
                yield Label("", id="sql-status")
        yield DataGrid(id="sql-results")
        yield SteadyFooter(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        super().on_mount()
        history = self.settings.get("sql_history")  # a list of queries, unless hand-edited
        self.history = (
            [q for q in history if isinstance(q, str)] if isinstance(history, list) else []
        )
        self._show_history()
        limit = self.settings.get("sql_timeout_s", DEFAULT_TIMEOUT_S)
        if isinstance(limit, int) and limit >= 0:
            self.query_one("#sql-timeout", Input).value = str(limit)
        self.query_one("#sql-editor", SqlEditor).focus()

    def on_screen_resume(self) -> None:
        self.load_names()

    @work(thread=True, group="names", exclusive=True, exit_on_error=False)
    def load_names(self) -> None:
        """Table and column names for completion (a missing database has none yet)."""
        try:
            tables = self.backend.table_columns_sync()
        except NgbError:
            return
        self.app.call_from_thread(self.query_one("#sql-editor", SqlEditor).set_names, tables)

    def action_leave_editor(self) -> None:
        """Cancel the query in flight; otherwise leave the editor (number keys switch again)."""
        if self.running:
            self.action_cancel_query()
            return
        self.query_one("#sql-results", DataGrid).focus()

    @property
    def running(self) -> bool:
        return self.job is not None and not self.job.done.is_set()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "cancel_query":
            return self.running  # otherwise ctrl+c stays the editor's copy
        return True

    def action_cancel_query(self) -> None:
        if self.job is not None:
            self.job.cancel()
            self._status("cancelling…")

    def timeout_s(self) -> int:
        """The time limit box (0 or empty: none); remembered for the next start."""
        text = self.query_one("#sql-timeout", Input).value.strip()
        limit = int(text) if text.isdigit() else 0
        self.settings.set("sql_timeout_s", limit)
        return limit

    def action_clear(self) -> None:
        """Empty the editor and the grid (history keeps the queries)."""
        self.query_one("#sql-editor", SqlEditor).text = ""
        self._clear_grid()
        self._status("")
        self.query_one("#sql-editor", SqlEditor).focus()

    def _clear_grid(self) -> None:
        self.last_columns, self.last_rows = [], []
        self.query_one("#sql-results", DataGrid).fill([], [])

    @on(SqlEditor.CompletionShown)
    def _completions(self, event: SqlEditor.CompletionShown) -> None:
        self._status("complete: " + "  ".join(event.candidates[:12]))

    # -- running ---------------------------------------------------------------------------------
    def action_run_query(self) -> None:
        sql = self.query_one("#sql-editor", SqlEditor).text.strip()
        if not sql:
            self._status("[yellow]type a query first[/]")
            return
        if self.job is not None:
            self.job.cancel()  # the new query does not wait behind the old one
        try:
            job = self.backend.query_job(
                sql, allow_write=self.query_one("#sql-write", Switch).value,
                timeout_s=self.timeout_s(),
            )  # fmt: skip
        except NgbError as exc:
            self._show_error(str(exc))
            return
        self.job = job
        self._status(RUNNING)
        self.run_query(job)

    @work(thread=True, group="query", exit_on_error=False)
    def run_query(self, job: QueryJob) -> None:
        try:
            result = self.backend.run_query_sync(job)
        except NgbError as exc:
            self.app.call_from_thread(self._query_failed, job, str(exc))
            return
        self.app.call_from_thread(self._query_done, job, result.columns, result.rows)

    def _query_failed(self, job: QueryJob, message: str) -> None:
        if not self._finished(job):
            return
        if job.cancelled:
            self._status(Text(message, style="yellow"))
        else:
            self._show_error(message)

    def _query_done(self, job: QueryJob, columns: list[str], rows: list[SqlRow]) -> None:
        if self._finished(job):
            self._show_result(job.sql, columns, rows)

    def _finished(self, job: QueryJob) -> bool:
        """Forget ``job``; False when a newer query replaced it (its end is old news)."""
        if self.job is not job:
            return False
        self.job = None
        return True

    def _show_error(self, message: str) -> None:
        """One red line; the old grid goes, so no stale rows sit under a failed query."""
        self._clear_grid()
        self._status(Text(friendly_error(message), style="red"))

    def _show_result(self, sql: str, columns: list[str], rows: list[SqlRow]) -> None:
        self.last_query, self.last_columns, self.last_rows = sql, columns, rows
        shown = rows[:MAX_ROWS]
        digits = [column_digits(shown, i) for i in range(len(columns))]
        numeric = {i for i in range(len(columns)) if any(is_number(r[i]) for r in shown)}
        grid = self.query_one("#sql-results", DataGrid)
        grid.fill(
            columns,
            ([cell(v, digits[i]) for i, v in enumerate(row)] for row in shown),
            numeric=numeric,
        )
        more = f" (showing {MAX_ROWS})" if len(rows) > MAX_ROWS else ""
        self._status(f"{len(rows)} row(s){more}")
        self._remember(sql)

    def _remember(self, sql: str) -> None:
        if sql in self.history:
            self.history.remove(sql)
        self.history.insert(0, sql)
        del self.history[HISTORY_KEEP:]
        self.settings.set("sql_history", list(self.history))
        self._show_history()

    def _show_history(self) -> None:
        history = self.query_one("#sql-history", OptionList)
        history.clear_options()
        history.add_options([" ".join(q.split())[:60] for q in self.history])

    def _status(self, text: str | Text) -> None:
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
        editor = self.query_one("#sql-editor", SqlEditor)
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
        sql = self.last_query or self.query_one("#sql-editor", SqlEditor).text.strip()
        if not path:
            self._status(Text("give an export path first (the box left of Export)", style="red"))
            self.query_one("#sql-path", Input).focus()
            return
        self._status(f"exporting to {path}...")
        self.export(Path(path), fmt, sql or "trials")

    @work(thread=True, group="export", exclusive=True, exit_on_error=False)
    def export(self, dest: Path, fmt: str, table_or_sql: str) -> None:
        backend = self.backend
        try:
            done = backend.export_sync(dest, fmt, table_or_sql)
        except NgbError as exc:
            self.app.call_from_thread(self._status, Text(str(exc), style="red"))
            return
        self.app.call_from_thread(self._status, f"exported {done.rows} row(s) to {done.path}")
        self.app.call_from_thread(
            self.notify, f"exported {done.rows} row(s) as {fmt} to {done.path}"
        )
