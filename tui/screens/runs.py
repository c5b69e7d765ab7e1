"""Runs screen: every run the store knows, live, with attach and cancel.

A run started from the CLI (``ngb run``), one left detached, or one another console follows shows
up here as soon as the store records it; the table is re-read every few seconds while the screen is
shown (Dolphie-style: one read in a worker, re-armed after it lands) and not at all while hidden.
The list is ``Orchestrator.list_runs``: the store's runs with the live state of those this console
follows; ``p`` also asks every device which run holds it, which lists a run started from another
workstation and says whether a stored run's agents still live. ``a`` / Enter attaches (the Run
screen follows it from then on), ``c`` cancels after a yes/no.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, ClassVar

from ngb.core.base.errors import NgbError
from ngb.tui.backend import Backend
from ngb.tui.screens.base import ConsoleScreen
from ngb.tui.screens.confirm import ConfirmScreen
from ngb.tui.screens.run import RunScreen
from ngb.tui.widgets.steady_footer import SteadyFooter
from ngb.tui.widgets.table_fill import fill_table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.timer import Timer
from textual.widgets import DataTable, Header, Label

if TYPE_CHECKING:
    from ngb.sweeps.run.listing import RunOverview

POLL_S = 3.0
COLUMNS = ("run", "sweep", "status", "devices", "done", "failed", "created", "here")
LIVE_STATES = frozenset({"running", "starting", "created", "paused"})


# Below 120 columns: the sweep is left out (a run id starts with its sweep's name), devices are
# counted, "created" loses its year and seconds, and "here" becomes a mark after the status (the
# note line says what the marks mean), so 80 columns show every column a run is chosen by.
NARROW_COLUMNS = ("run", "status", "devs", "done", "failed", "created")
WIDE_FROM = 120
MARKS = "* followed here, ? not in this store"


def overview_row(run: RunOverview, narrow: bool = False) -> tuple[str, ...]:
    """One table row of ``Orchestrator.list_runs``: counts summed over the run's devices, and
    what the devices said when asked (``p``): ``dev: agent running`` / ``not running``."""
    done = sum(d.done for d in run.devices)
    failed = sum(d.failed for d in run.devices)
    total = sum(d.total or 0 for d in run.devices)
    names = ",".join(
        f"{d.device} ({d.agent})" if d.agent and d.agent != "not running" else d.device
        for d in run.devices
    )
    here = "followed" if run.followed else ("" if run.in_store else "not in this store")
    progress = f"{done}/{total}" if total else str(done)
    created = str(run.created_at or "")
    if narrow:
        mark = " *" if run.followed else ("" if run.in_store else " ?")
        short = created[5:16] if len(created) >= 16 else created  # "11-26 20:15"
        return (run.run_id, run.status + mark, str(len(run.devices)), progress, str(failed), short)
    return (
        run.run_id,
        run.sweep_name,
        run.status,
        names,
        progress,
        str(failed),
        created[:19],
        here,
    )


class RunsScreen(ConsoleScreen):
    AUTO_FOCUS = "#runs-table"
    BINDINGS: ClassVar[list[BindingType]] = [
        # priority: the keys act on the highlighted run wherever the focus is (no text box here)
        Binding("a", "attach", "Attach", priority=True),
        Binding("c", "cancel", "Cancel run", priority=True),
        Binding("p", "probe", "Ask devices"),
        Binding("r", "reload", "Reload"),
    ]

    def __init__(self, backend: Backend) -> None:
        super().__init__(backend, id="runs")
        self.runs: list[RunOverview] = []
        self.read_at: float | None = None  # when the rows shown were read (None: not yet)
        self._timer: Timer | None = None
        self._probe_next = False

    def compose(self) -> ComposeResult:
        yield Header()
        yield Label("", id="runs-note")
        table: DataTable[Text] = DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        table.add_columns(*COLUMNS)
        yield table
        yield SteadyFooter(compact=True, show_command_palette=False)

    # -- polling -----------------------------------------------------------------------------
    def on_screen_resume(self) -> None:
        # the rows are the last read's until this one lands (seconds while a live run's writer
        # is busy): say so rather than pass them off as current
        note = "reading the store..."
        if self.read_at is not None:
            stamp = time.strftime("%H:%M:%S", time.localtime(self.read_at))
            note += f"; the list below is as of {stamp}"
        self.query_one("#runs-note", Label).update(note)
        self.load_runs()

    def on_screen_suspend(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None

    def action_reload(self) -> None:
        self.load_runs()

    def action_probe(self) -> None:
        """Ask every device which run holds it (one connect each, concurrently)."""
        self._probe_next = True
        self.notify("asking the devices which runs they hold...")
        self.load_runs()

    @work(group="runs", exclusive=True, exit_on_error=False)
    async def load_runs(self) -> None:
        import asyncio

        probe, self._probe_next = self._probe_next, False
        try:
            if not self.backend.database_exists() and not self.backend.has_orchestrator():
                runs: list[RunOverview] = []
            else:
                await asyncio.to_thread(self.backend.import_orchestrator_sync)
                runs = await self.backend.orchestrator().list_runs(probe=probe)
        except NgbError as exc:
            self._show_error(str(exc))
            return
        self._show_runs(runs)

    def _rearm(self) -> None:
        if self._timer is not None:
            self._timer.stop()
        if self.is_current:
            self._timer = self.set_timer(POLL_S, self.load_runs)

    def _show_error(self, message: str) -> None:
        self.query_one("#runs-note", Label).update(f"[yellow]{message}[/]")
        self._rearm()

    def _show_runs(self, runs: list[RunOverview]) -> None:
        self.runs = runs
        self.read_at = time.time()
        self._fill()
        self._rearm()

    def on_resize(self) -> None:
        if self.runs:
            self._fill()

    def _fill(self) -> None:
        runs = self.runs
        narrow = self.size.width < WIDE_FROM
        rows = [overview_row(r, narrow) for r in runs]
        table = self.query_one("#runs-table", DataTable)
        cursor = table.cursor_row
        columns = NARROW_COLUMNS if narrow else COLUMNS
        fill_table(table, columns, rows, keys=[row[0] for row in rows])
        if table.row_count:
            table.move_cursor(row=min(cursor, table.row_count - 1))
        live = sum(1 for r in runs if r.live or r.status in LIVE_STATES)
        marked = narrow and any(r.followed or not r.in_store for r in runs)
        self.query_one("#runs-note", Label).update(
            f"{len(runs)} run(s), {live} going; a attach, c cancel, p ask the devices"
            + (f" ({MARKS})" if marked else "")
            if runs
            else "No runs in the database yet: start one on the Run screen (2) or with `ngb run`."
        )

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

    def _no_run(self) -> None:
        """Say why a key did nothing (silence read as a broken key)."""
        self.notify("no run to act on yet: the list is empty or still loading", severity="warning")

    def action_attach(self) -> None:
        run_id = self.selected()
        if run_id is None:
            self._no_run()
            return
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
            self._no_run()
            return

        def answered(ok: bool | None) -> None:
            if ok:
                run = self.app.get_screen("run")
                if isinstance(run, RunScreen):
                    run.cancel_run(run_id)

        self.app.push_screen(
            ConfirmScreen(f"Cancel run {run_id} on all its devices?", yes="Cancel run"), answered
        )

    def rows_shown(self) -> list[tuple[str, ...]]:
        table = self.query_one("#runs-table", DataTable)
        return [tuple(str(c) for c in table.get_row_at(i)) for i in range(table.row_count)]
