"""Runs screen: every run the store knows, live, with attach and cancel.

A run started from the CLI (``ngb run``), one left detached, or one another console follows shows
up here as soon as the store records it; the table is re-read every few seconds while the screen is
shown (Dolphie-style: one read in a worker, re-armed after it lands) and not at all while hidden.
``a`` / Enter attaches (the Run screen follows it from then on), ``c`` cancels after a yes/no.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from ngb.core.errors import NgbError
from ngb.tui.backend import Backend, RunDeviceRow, RunRow
from ngb.tui.screens.base import ConsoleScreen
from ngb.tui.screens.confirm import ConfirmScreen
from ngb.tui.screens.run import RunScreen
from ngb.tui.widgets.table_fill import fill_table
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.timer import Timer
from textual.widgets import DataTable, Footer, Header, Label

POLL_S = 3.0
COLUMNS = ("run", "sweep", "status", "devices", "done", "failed", "created", "here")
LIVE_STATES = frozenset({"running", "starting", "created", "paused"})


def devices_of(run: RunRow) -> list[str]:
    """The run's device names (a list, or the JSON text older stores return)."""
    names: Any = run.get("devices") or []
    if isinstance(names, str):
        try:
            names = json.loads(names)
        except ValueError:
            return []
    return [str(n) for n in names] if isinstance(names, list) else []


def run_row(run: RunRow, devices: list[RunDeviceRow], followed: bool) -> tuple[str, ...]:
    """One table row: counts summed over the run's devices (``run_devices``)."""
    done = sum(int(d.get("n_done") or 0) for d in devices)
    failed = sum(int(d.get("n_failed") or 0) for d in devices)
    total = sum(int(d.get("n_trials") or 0) for d in devices) or int(run.get("n_trials") or 0)
    names = [str(d.get("device")) for d in devices] or devices_of(run)
    created = str(run.get("created_at") or "")[:19]
    return (
        str(run.get("run_id")),
        str(run.get("sweep_name") or ""),
        str(run.get("status") or ""),
        ",".join(names),
        f"{done}/{total}",
        str(failed),
        created,
        "followed" if followed else "",
    )


class RunsScreen(ConsoleScreen):
    AUTO_FOCUS = "#runs-table"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "attach", "Attach"),
        Binding("c", "cancel", "Cancel run"),
        Binding("r", "reload", "Reload"),
    ]

    def __init__(self, backend: Backend) -> None:
        super().__init__(backend, id="runs")
        self.runs: list[RunRow] = []
        self._timer: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Label("", id="runs-note")
        table: DataTable[str] = DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        table.add_columns(*COLUMNS)
        yield table
        yield Footer(compact=True, show_command_palette=False)

    # -- polling -----------------------------------------------------------------------------
    def on_screen_resume(self) -> None:
        self.load_runs()

    def on_screen_suspend(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None

    def action_reload(self) -> None:
        self.load_runs()

    @work(thread=True, group="runs", exclusive=True, exit_on_error=False)
    def load_runs(self) -> None:
        try:
            runs = self.backend.runs_sync()
            devices = {
                str(r.get("run_id")): self.backend.run_devices_sync(str(r.get("run_id")))
                for r in runs
            }
        except NgbError as exc:
            self.app.call_from_thread(self._show_error, str(exc))
            return
        self.app.call_from_thread(self._show_runs, runs, devices)

    def _rearm(self) -> None:
        if self._timer is not None:
            self._timer.stop()
        if self.is_current:
            self._timer = self.set_timer(POLL_S, self.load_runs)

    def _show_error(self, message: str) -> None:
        self.query_one("#runs-note", Label).update(f"[yellow]{message}[/]")
        self._rearm()

    def followed(self) -> set[str]:
        run = self.app.get_screen("run")
        return {key[0] for key in run.model.devices} if isinstance(run, RunScreen) else set()

    def _show_runs(self, runs: list[RunRow], devices: dict[str, list[RunDeviceRow]]) -> None:
        self.runs = runs
        followed = self.followed()
        rows = [
            run_row(r, devices.get(str(r.get("run_id")), []), str(r.get("run_id")) in followed)
            for r in runs
        ]
        table = self.query_one("#runs-table", DataTable)
        cursor = table.cursor_row
        fill_table(table, COLUMNS, rows, keys=[row[0] for row in rows])
        if table.row_count:
            table.move_cursor(row=min(cursor, table.row_count - 1))
        live = sum(1 for r in runs if str(r.get("status")) in LIVE_STATES)
        self.query_one("#runs-note", Label).update(
            f"{len(runs)} run(s), {live} going; a attach, c cancel"
            if runs
            else "No runs in the database yet: start one on the Run screen (2) or with `ngb run`."
        )
        self._rearm()

    def selected(self) -> str | None:
        table = self.query_one("#runs-table", DataTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return str(key) if key is not None else None

    # -- attach / cancel -----------------------------------------------------------------------
    @on(DataTable.RowSelected, "#runs-table")
    def _row_selected(self) -> None:
        self.action_attach()

    def action_attach(self) -> None:
        run_id = self.selected()
        if run_id is not None:
            self.attach(run_id)

    @work(group="attach", exclusive=True, exit_on_error=False)
    async def attach(self, run_id: str) -> None:
        import asyncio

        try:
            await asyncio.to_thread(self.backend.import_orchestrator_sync)
            await self.backend.orchestrator().attach(run_id)
        except NgbError as exc:
            self.notify(f"attach {run_id}: {exc}", severity="error")
            return
        run = self.app.get_screen("run")
        if isinstance(run, RunScreen):
            run.follow_run(run_id)
        self.notify(f"attached to run {run_id}")
        self.app.switch_screen("run")

    def action_cancel(self) -> None:
        run_id = self.selected()
        if run_id is None:
            return

        def answered(ok: bool | None) -> None:
            if ok:
                run = self.app.get_screen("run")
                if isinstance(run, RunScreen):
                    run.cancel_run(run_id)

        self.app.push_screen(
            ConfirmScreen(f"Cancel run {run_id} on all its devices?", yes="Cancel run"), answered
        )

    def rows_shown(self) -> list[tuple[Any, ...]]:
        table = self.query_one("#runs-table", DataTable)
        return [tuple(str(c) for c in table.get_row_at(i)) for i in range(table.row_count)]
