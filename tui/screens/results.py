"""Results screen: charts and a table of one run's numbers.

Database reads run on threads (DuckDB calls block). While the screen is shown it polls
Dolphie-style: one read at a time, render on success, and only then re-arm a timer, so a slow or
busy database never stacks reads; a hidden screen does not poll at all. Only the active chart tab
is drawn.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from functools import partial
from typing import ClassVar

from ngb.core.base.errors import NgbError
from ngb.core.statistics.student_t import t_two_sided
from ngb.tui import narrow_table, ops_view
from ngb.tui import results_data as rd
from ngb.tui.backend import Advice, Backend, RunRow, TrialRow
from ngb.tui.screens.base import ConsoleScreen
from ngb.tui.widgets.checklist import Checklist
from ngb.tui.widgets.cursor import apply_cursor_blink
from ngb.tui.widgets.data_grid import DataGrid
from ngb.tui.widgets.heatmap import HeatmapView
from ngb.tui.widgets.result_chart import ResultChart
from ngb.tui.widgets.steady_footer import SteadyFooter
from rich.markup import escape
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.reactive import reactive
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import (
    Header,
    Input,
    Label,
    Select,
    SelectionList,
    TabbedContent,
    TabPane,
)

POLL_S = 5.0
# a run read with its trials: its id, the device asked for, the run's devices, the trials
Shown = tuple[str, str | None, list[str], list[TrialRow]]
RunsRead = tuple[list[RunRow], Shown | None]
ALL = "(all)"
# The tab the screen opens on is built with it; the others (three charts, the ASE heatmap, the
# table, the operator profiles) are built the first time they are opened. With 128 devices in a
# run, styling and laying out tabs nobody had opened was most of the first visit's 2 s (issue 41).
FIRST_TAB = next(iter(rd.CHARTS))


def trials_note(run_id: str, rows: Sequence[TrialRow], failed: int) -> str:
    """``20 trials: 18 ok, 2 failed, 16 unstable`` -- the warnings a mean alone would hide."""
    ok = len(rows) - failed
    unstable = sum(1 for r in rows if r.get("status") == "ok" and r.get("unstable"))
    flagged = sum(
        1 for r in rows if str(r.get("verdict") or "VALID").upper() != "VALID" or r.get("disturbed")
    )
    parts = [f"{len(rows)} trials in run {run_id}: {ok} ok", f"{failed} failed"]
    if unstable:
        parts.append(f"[yellow]{unstable} unstable (CoV above the limit)[/]")
    if flagged:
        parts.append(f"[yellow]{flagged} not VALID or disturbed[/]")
    return (
        ", ".join(parts)
        + "  ([low, high] = 95% CI; n.s. = not significantly different from identity)"
    )


def advice_text(by_depth: dict[int, str], run_id: str) -> str:
    """``ngb advise``'s answer for the depth the charts show (the shallowest), whole: it wraps.
    A block run at three depths gave three answers of two rows each at 80 columns, cut to
    two; the others are a command away."""
    if not by_depth:
        return ""
    shallowest, *deeper = sorted(by_depth)
    if not deeper:
        return by_depth[shallowest]
    more = ", ".join(map(str, deeper))
    return f"{by_depth[shallowest]} (depth {more}: `ngb advise --sweep {run_id}`)"


def _options(values: list[str]) -> list[tuple[str, str]]:
    return [(v, v) for v in values]


class ResultsScreen(ConsoleScreen):
    AUTO_FOCUS = "#results-run"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "reload", "Reload"),
        Binding("l", "toggle_log", "Log scale"),
        Binding("f", "save_figure", "Save figure (PNG/SVG/PDF)", show=False),
        Binding("slash", "filter", "Filter table", key_display="/"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    run_id: reactive[str] = reactive("")
    filter_text: reactive[str] = reactive("")
    # None: a chart whose values span a wide range is drawn on a log axis (results_data.wide)
    log_y: reactive[bool | None] = reactive(None)

    def __init__(self, backend: Backend) -> None:
        super().__init__(backend, id="results")
        self.runs: list[RunRow] = []
        self.rows: list[TrialRow] = []
        self._poll_timer: Timer | None = None
        self._want_run: str | None = None
        self._reads = 0  # reads of the runs started (``_read_runs``): only the newest counts
        self._choices: dict[str, list[str]] = {}  # options currently in each Select / list
        self.draws = 0  # charts drawn (tests check that hidden tabs are skipped)
        self.drawn_log = False  # whether the chart shown has a log axis (``l`` flips it)
        self._stamp: tuple[object, ...] = ()  # what the last poll answered (unchanged: no redraw)
        self.advice: Advice = {}  # model -> depth -> `ngb advise`'s answer (advice_sync)
        self._advice_signature: tuple[str, str | None, int] | None = None
        self.profiles: ops_view.Stored = []  # the run's per-operator profiles (the Ops tab)
        # whether ``advice`` and ``profiles`` are those of the trials shown (they follow them)
        self.advice_ready = False
        self._built: set[str] = {FIRST_TAB}  # tabs whose widgets exist (``_build_tab``)
        self._building: set[str] = set()
        self._unlaid: set[str] = set()  # built, not shown yet: no size to draw at
        # a heatmap tab not built yet: its compilers and the one its Select will show first
        self._heat_values: dict[str, tuple[list[str], str]] = {}

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="results-controls"):
            with Vertical():
                yield Select[str]([], prompt="run", id="results-run")
                yield Select[str]([], prompt="device", id="results-device")
            with Vertical():
                yield Select[str]([], prompt="family", id="results-family")
                yield Select[str]([], prompt="model", id="results-variant")
            yield Checklist(id="results-compilers")
        # the note and `ngb advise`'s answer for the model shown, each in a box that scrolls
        # where the screen is short (app.tcss: .-short caps the boxes)
        with VerticalScroll(id="results-note-box", can_focus=False):
            yield Label("", id="results-note")
        with VerticalScroll(id="results-advice-box", can_focus=False):
            yield Label("", id="results-advice")
        with TabbedContent(id="results-tabs"):
            for tab_id, kind in rd.CHARTS.items():
                with TabPane(kind.title, id=f"tab-{tab_id}"):
                    if tab_id == FIRST_TAB:
                        yield from self._tab_widgets(tab_id)
            yield TabPane("Table", id="tab-table")
            yield TabPane("Ops", id="tab-ops")  # per-operator profiles (tui/ops_view.py)
        yield SteadyFooter(compact=True, show_command_palette=False)

    def _tab_widgets(self, tab: str) -> list[Widget]:
        """What a tab holds (``tab``: a chart kind, ``table`` or ``ops``)."""
        if tab == "table":
            return [
                Input(placeholder="filter rows", id="results-filter", classes="filter"),
                Label("", id="results-table-note"),
                DataGrid(id="results-table"),
            ]
        if tab == "ops":
            return [Label(escape(ops_view.NOTE), id="results-ops-note"), DataGrid(id="results-ops")]
        if not rd.CHARTS[tab].heatmap:
            return [ResultChart(id=f"chart-{tab}")]
        values, pick = self._heat_values.get(tab, ([], ""))
        self._choices[f"#heat-{tab}"] = values
        heat = Select[str](
            _options(values), prompt="compiler", id=f"heat-{tab}", classes="heat-compiler",
            value=pick if pick in values else Select.NULL,
        )  # fmt: skip
        return [heat, HeatmapView(id=f"chart-{tab}")]

    async def _build_tab(self, tab: str) -> None:
        """Build ``tab``'s widgets if this is its first opening (they exist once this returns)."""
        if tab in self._built or tab in self._building:
            return
        self._building.add(tab)
        try:
            pane = self.query_one(f"#tab-{tab}", TabPane)
            await pane.mount_all(self._tab_widgets(tab))
            apply_cursor_blink(pane)  # as the screen's own inputs got it when it mounted
        finally:
            self._building.discard(tab)
        self._built.add(tab)
        self._unlaid.add(tab)

    def on_mount(self) -> None:
        super().on_mount()

    # -- polling ---------------------------------------------------------------------------------
    def on_screen_resume(self) -> None:
        self.refresh_runs()

    def on_screen_suspend(self) -> None:
        if self._poll_timer is not None:
            self._poll_timer.stop()
            self._poll_timer = None

    def _rearm(self) -> None:
        if self._poll_timer is not None:
            self._poll_timer.stop()
        if self.is_current:
            self._poll_timer = self.set_timer(POLL_S, self.refresh_runs)

    def action_reload(self) -> None:
        self.refresh_runs()

    # -- save figure: the chart tab on screen as the paper figure (ngb.sweeps.figures.catalog) -----
    def action_save_figure(self) -> None:
        tab = self.active_tab()
        if not self.run_id or tab not in rd.CHARTS:
            self.notify("Open a run's chart tab to save its figure.", severity="warning")
            return
        self.save_figure(tab, self.run_id, self._device(), self.selection().family or None)

    @work(thread=True, group="figure", exclusive=True, exit_on_error=False)
    def save_figure(self, tab: str, run_id: str, device: str | None, family: str | None) -> None:
        from ngb.sweeps.figures.catalog import save_figure

        store = self.backend.store()
        try:
            paths = save_figure(
                tab, store, store.path.parent / "figures" / run_id, run_id=run_id, device=device,
                family=family,
            )  # fmt: skip
        except NgbError as exc:
            self.app.call_from_thread(self.notify, f"No figure saved: {exc}", severity="error")
            return
        self.app.call_from_thread(self.notify, f"Saved {paths[0]} (and .svg, .pdf, caption)")

    def refresh_runs(self, select: str | None = None) -> None:
        if select:
            self._want_run = select
        if self.is_mounted:
            self._read_runs()

    def _read_runs(self) -> None:
        """Read the runs, and the trials of the run the screen will show, on a thread started
        now. A thread worker starts at the event loop's next turn for its task: on a first
        visit that came after the screen was composed (~0.2 s with 128 devices), and then the
        run's Select.Changed started a second one for the trials (~0.1 s more; issue 41). A
        newer read makes an older one's answer moot (``_reads``)."""
        self._reads += 1
        asked = (self._want_run, self.run_id, self._device())
        read = asyncio.get_running_loop().run_in_executor(None, self._runs_and_trials, *asked)
        read.add_done_callback(partial(self._runs_read, self._reads, asked))

    def _runs_and_trials(self, want: str | None, current: str, device: str | None) -> RunsRead:
        """On a thread: the runs, and the trials of the run to show (the one asked for, else
        the one shown, else the newest: the store lists it first) with its device's choice."""
        runs = self.backend.runs_sync()
        ids = [str(r.get("run_id")) for r in runs]
        run_id = want if want in ids else current if current in ids else next(iter(ids), "")
        if not run_id:
            return runs, None
        device = device if run_id == current else None
        return runs, (run_id, device, *self._trials_of(run_id, device))

    def _runs_read(self, ticket: int, asked: tuple[str | None, str, str | None],
                   read: asyncio.Future[RunsRead]) -> None:  # fmt: skip
        if ticket != self._reads or read.cancelled() or not self.is_mounted:
            return
        if (failed := read.exception()) is not None:
            self._poll_failed(str(failed) if isinstance(failed, NgbError) else repr(failed))
            return
        runs, shown = read.result()
        if (self.run_id, self._device()) != asked[1:]:
            shown = None  # the operator chose another run or device meanwhile: read that one
        self._show_runs(runs, shown)

    def _poll_failed(self, message: str) -> None:
        self.query_one("#results-note", Label).update(f"[yellow]{message}[/]")
        self._rearm()

    def _show_runs(self, runs: list[RunRow], shown: Shown | None = None) -> None:
        self.runs = runs
        select = self.query_one("#results-run", Select)
        ids = [str(r.get("run_id")) for r in runs]
        labels = [
            (
                f"{r.get('run_id')}  {r.get('sweep_name', '')}  {r.get('status', '')}",
                str(r.get("run_id")),
            )
            for r in runs
        ]
        current = select.value
        label_texts = [text for text, _ in labels]
        if self._choices.get("#results-run") != label_texts:
            self._choices["#results-run"] = label_texts
            with select.prevent(Select.Changed):
                select.set_options(labels)
                if current in ids:
                    select.value = current
        if shown is not None:  # read with the runs: shown without another read
            run_id, device, devices, rows = shown
            if self._want_run == run_id:
                self._want_run = None
            if run_id != self.run_id:
                self.run_id = run_id
                self._choices.pop("#results-device", None)
            with select.prevent(Select.Changed):
                select.value = run_id
            self._show_trials(run_id, devices, rows)
            self._advise_after_paint(run_id, device, len(rows))
            return
        want = self._want_run if self._want_run in ids else None
        if want:
            self._want_run = None
            select.value = want
        elif select.is_blank() and ids:
            select.value = ids[0]  # the store lists the newest run first
        if not ids:
            self.query_one("#results-note", Label).update(
                "No runs in the database yet: start one on the Run screen (2)."
            )
        if self.run_id:
            self.load_trials(self.run_id, self._device())
        else:
            self._rearm()

    @on(Select.Changed, "#results-run")
    def _run_changed(self, event: Select.Changed) -> None:
        value = "" if event.value is Select.NULL else str(event.value)
        if value != self.run_id:
            self.run_id = value
            self._choices.pop("#results-device", None)
            if value:
                self.load_trials(value, None)

    @on(Select.Changed, "#results-device")
    def _device_changed(self, event: Select.Changed) -> None:
        if self.run_id:
            self.load_trials(self.run_id, self._device())

    def _device(self) -> str | None:
        value = self.query_one("#results-device", Select).value
        return None if value is Select.NULL or value == ALL else str(value)

    def _trials_of(self, run_id: str, device: str | None) -> tuple[list[str], list[TrialRow]]:
        """On a thread: a run's devices and trials (``device``: one device's)."""
        run_devices, trials, samples = self.backend.run_results_sync(run_id, device)
        # Each row carries its per-repetition throughputs: the spread and "n.s." are computed
        # from them (the same test as `ngb report`).
        rows: list[TrialRow] = [
            {**t, "samples": samples.get((run_id, str(t.get("device")), str(t.get("key"))), [])}
            for t in trials
        ]
        # The charts' intervals take their t quantile from scipy: imported here, in this thread, not
        # by the first chart on the event loop (0.3 s in which the console froze).
        t_two_sided(0.95, 2.0)
        return [str(d.get("device")) for d in run_devices], rows

    @work(thread=True, group="trials", exclusive=True, exit_on_error=False)
    def load_trials(self, run_id: str, device: str | None) -> None:
        try:
            devices, rows = self._trials_of(run_id, device)
        except NgbError as exc:
            self.app.call_from_thread(self._poll_failed, str(exc))
            return
        self.app.call_from_thread(self._show_trials, run_id, devices, rows)
        self.app.call_from_thread(self._advise_after_paint, run_id, device, len(rows))

    def _advise_after_paint(self, run_id: str, device: str | None, trials: int) -> None:
        """Advise once the trials are on screen, not before nor meanwhile: it bootstraps every
        comparison (~0.4 s of CPU for a 128-device run's 512 trials) and, on a thread, still
        halves what the event loop gets of the interpreter (a live 32-device run's first visit
        painted its trials 0.2-0.3 s later while it ran)."""
        self.call_after_refresh(self.load_advice, run_id, device, trials)

    @work(thread=True, group="advice", exclusive=True, exit_on_error=False)
    def load_advice(self, run_id: str, device: str | None, trials: int) -> None:
        """Only again when the run's results changed."""
        signature = (run_id, device, trials)
        if signature == self._advice_signature:
            return
        backend = self.backend
        try:
            advice = backend.advice_sync(run_id, device)
            profiles = ops_view.load(backend.store(), run_id, device)
        except NgbError as exc:
            self.app.call_from_thread(self._poll_failed, str(exc))
            return
        self._advice_signature = signature
        self.app.call_from_thread(self._show_advice, run_id, device, advice, profiles)

    # -- rendering -------------------------------------------------------------------------------
    def _show_advice(
        self, run_id: str, device: str | None, advice: Advice, profiles: ops_view.Stored
    ) -> None:
        if (run_id, device) != (self.run_id, self._device()):
            return  # another run or device was chosen meanwhile: its own answer follows
        self.advice, self.profiles, self.advice_ready = advice, profiles, True
        # the whole tab again, not the advice line alone: the line's height moves the chart and
        # the table, which are drawn for the room they have
        self.redraw()

    def _show_trials(self, run_id: str, devices: list[str], rows: list[TrialRow]) -> None:
        self._rearm()
        if run_id != self.run_id:
            return
        if self._choices.get("#results-device") != [ALL, *devices]:
            device_select = self.query_one("#results-device", Select)
            keep = device_select.value
            self._choices["#results-device"] = [ALL, *devices]
            with device_select.prevent(Select.Changed):
                device_select.set_options(_options([ALL, *devices]))
                device_select.value = keep if keep in devices else ALL
        # The poll re-reads every few seconds while a run goes on: an unchanged answer redraws
        # nothing (charts and the table are rebuilt only when a trial arrived or changed).
        stamp = (run_id, tuple((r.get("device"), r.get("key"), r.get("status"),
                                len(r.get("samples") or ())) for r in rows))  # fmt: skip
        if stamp == self._stamp:
            return
        self._stamp = stamp
        failed = sum(1 for r in rows if r.get("status") not in (None, "ok"))
        self.rows = rd.ok_rows(rows)
        self.query_one("#results-note", Label).update(trials_note(run_id, rows, failed))
        self._set_choices("#results-family", rd.families(self.rows))
        self._refresh_variants()
        compilers = rd.compilers(self.rows)
        for tab_id, kind in rd.CHARTS.items():
            if kind.heatmap:
                heat = [c for c in compilers if c != rd.BASELINE]
                if tab_id in self._built:
                    self._set_choices(f"#heat-{tab_id}", heat)
                else:  # as ``_set_choices`` would: the compiler shown stays where it can
                    pick = self._heat_values.get(tab_id, ([], ""))[1]
                    pick = pick if pick in heat else next(iter(heat), "")
                    self._heat_values[tab_id] = (heat, pick)
        sel = self.query_one("#results-compilers", SelectionList)
        if self._choices.get("#results-compilers") != compilers:
            known = set(self._choices.get("#results-compilers", []))
            self._choices["#results-compilers"] = compilers
            # Keep what the operator unticked; new compilers (e.g. another run's) start ticked.
            chosen = set(sel.selected) | (set(compilers) - known)
            with sel.prevent(SelectionList.SelectedChanged):
                sel.clear_options()
                sel.add_options([(c, c, c in chosen) for c in compilers])
        self.redraw()

    def _set_choices(self, selector: str, values: list[str]) -> bool:
        """Update a Select's options only when they changed; keep the choice when possible."""
        select = self.query_one(selector, Select)
        if self._choices.get(selector) == values and not select.is_blank():
            return False
        self._choices[selector] = values
        keep = select.value
        with select.prevent(Select.Changed):
            select.set_options(_options(values))
            if keep in values:
                select.value = keep
            elif values:
                select.value = values[0]
        return True

    def _refresh_variants(self) -> None:
        family = self.query_one("#results-family", Select).value
        values = rd.variants(self.rows, str(family)) if family is not Select.NULL else []
        self._set_choices("#results-variant", values)

    @on(Select.Changed, "#results-family")
    def _family_changed(self) -> None:
        self._refresh_variants()
        self.redraw()

    @on(Select.Changed, "#results-variant")
    @on(Select.Changed, ".heat-compiler")
    @on(SelectionList.SelectedChanged, "#results-compilers")
    def _selection_changed(self) -> None:
        self.redraw()

    @on(TabbedContent.TabActivated, "#results-tabs")
    async def _tab_opened(self) -> None:
        tab = self.active_tab()
        await self._build_tab(tab)
        if tab in self._unlaid:  # drawn once laid out: a table fits its columns to its width
            self._unlaid.discard(tab)
            self.call_after_refresh(self.redraw)
        else:
            self.redraw()

    def selection(self) -> rd.Selection:
        def value(selector: str) -> str:
            v = self.query_one(selector, Select).value
            return "" if v is Select.NULL else str(v)

        heat = [tab for tab, kind in rd.CHARTS.items() if kind.heatmap]
        if not heat:
            heat_compiler = ""
        elif heat[0] in self._built:
            heat_compiler = value(f"#heat-{heat[0]}")
        else:  # not opened yet: the compiler its Select will show first
            heat_compiler = self._heat_values.get(heat[0], ([], ""))[1]
        return rd.Selection(
            family=value("#results-family"),
            variant=value("#results-variant"),
            compilers=list(self.query_one("#results-compilers", SelectionList).selected),
            heat_compiler=heat_compiler,
            log_y=self.log_y,
        )

    def active_tab(self) -> str:
        active = self.query_one("#results-tabs", TabbedContent).active or ""
        return active.removeprefix("tab-")

    def redraw(self) -> None:
        """Draw only the visible tab: hidden charts are redrawn when their tab is opened."""
        tab = self.active_tab()
        sel = self.selection()
        self.query_one("#results-advice", Label).update(
            escape(advice_text(self.advice.get(rd.model_part(sel.variant), {}), self.run_id))
        )
        if tab not in self._built:
            return  # being built: drawn when it is (``_tab_opened``)
        if tab == "table":
            self._fill_table(sel)
            return
        if tab == "ops":
            columns, rows = ops_view.table(self.profiles, sel.variant, sel.compilers)
            # escaped: "[measure]" in the hint is text, not markup (it vanished)
            self.query_one("#results-ops-note", Label).update(
                escape(ops_view.NOTE if rows else ops_view.NO_PROFILES)
            )
            self.query_one("#results-ops", DataGrid).fill(columns, rows)
            return
        kind = rd.CHARTS.get(tab)
        if kind is None:
            return
        if not self.rows or not sel.variant:
            chart = rd.Chart(title=kind.title, note="no results to show yet")
        else:
            chart = kind.build(self.rows, sel)
        view = self.query_one(f"#chart-{tab}")
        if isinstance(view, ResultChart | HeatmapView):
            view.draw(chart)
        self.drawn_log = chart.log_y
        self.draws += 1

    def _fill_table(self, sel: rd.Selection) -> None:
        table = self.query_one("#results-table", DataGrid)
        needle = self.filter_text.casefold()
        # the accuracy columns only where a row of this family carries an accuracy pass
        columns, rows = rd.results_table(self.rows, sel) if sel.family else (rd.TABLE_COLUMNS, [])
        shown = [r for r in rows if not needle or any(needle in c.casefold() for c in r)]
        numeric = {i for i, c in enumerate(columns) if c in rd.NUMERIC_COLUMNS}
        # the room beside the vertical scrollbar, which a long table shows
        room = (table.size.width or self.size.width) - table.styles.scrollbar_size_vertical
        fitted = narrow_table.fit(columns, shown, numeric, room)
        table.fill(fitted.columns, fitted.rows, numeric=fitted.numeric)
        self._table_note(fitted.note)

    def _table_note(self, text: str) -> None:
        note = self.query_one("#results-table-note", Label)
        note.update(text)
        note.display = bool(text)

    def on_resize(self) -> None:
        """The table's columns follow the width (``narrow_table.fit``)."""
        if self.rows:
            self.redraw()

    def action_toggle_log(self) -> None:
        """Logarithmic y axis on the charts (throughputs that span orders of magnitude)."""
        self.log_y = not self.drawn_log  # from what is shown, whether chosen or automatic
        self.notify(f"log scale {'on' if self.log_y else 'off'}", timeout=2)
        self.redraw()

    # -- filter ----------------------------------------------------------------------------------
    async def show_tab(self, tab: str) -> None:
        """Open ``tab`` (a chart kind, ``table`` or ``ops``): its widgets exist when this returns,
        and it is drawn once laid out (``_tab_opened``)."""
        await self._build_tab(tab)
        self.query_one("#results-tabs", TabbedContent).active = f"tab-{tab}"

    async def action_filter(self) -> None:
        await self.show_tab("table")
        box = self.query_one("#results-filter", Input)
        box.add_class("-visible")
        box.focus()

    def action_clear_filter(self) -> None:
        if "table" not in self._built:
            return  # no filter was ever typed
        box = self.query_one("#results-filter", Input)
        box.value = ""
        box.remove_class("-visible")

    @on(Input.Changed, "#results-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value
        self.redraw()
