"""Run screen: pick a sweep and devices, start, and watch every device live.

Events arrive through ``handle_run_event`` (called by the app for each orchestrator RunEvent).
Handling is a cheap fold into ``RunModel`` plus marking the device dirty; a 2 Hz timer redraws
only dirty panels and a changed status line (new log lines once a second), and only while this
screen is shown, so a burst of events costs one redraw, a quiet tick costs nothing, and a hidden
screen costs nothing but the fold. The ETAs tick once a second. Why so frugal: on a ``localhost``
run the console shares the cores it measures (10 Hz full redraws took 11 % of a core; 4 Hz with a
layout pass per status line or log line 3.7 %, 1.9 % after; ``ngb bench console``).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, ClassVar

from ngb.core.base.errors import NgbError
from ngb.tui.backend import Backend
from ngb.tui.live_run import RunModel
from ngb.tui.screens.base import ConsoleScreen
from ngb.tui.screens.confirm import ConfirmScreen
from ngb.tui.widgets.checklist import Checklist
from ngb.tui.widgets.device_panel import DevicePanel
from ngb.tui.widgets.log_tail import LogTail
from ngb.tui.widgets.steady_footer import SteadyFooter
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.notifications import SeverityLevel
from textual.reactive import reactive
from textual.widgets import Button, Header, Input, Label, Select

if TYPE_CHECKING:  # loaded lazily, through the backend
    from ngb.devices.inventory import Device
    from ngb.sweeps.run.events import RunEvent
    from textual.timer import Timer

REFRESH_HZ = 2
#: the panels of a running device redraw at least this often (their ETA counts down)
CLOCK_S = 1.0
#: new log lines reach the log tail at most this often (each append is a layout pass)
LOG_S = 1.0
#: a run that took at least this long rings the terminal bell when it ends
BELL_AFTER_S = 60.0
DEFAULT_SWEEP = "demo"
#: a sweep path is described once typing has paused this long (not a file read per key)
DESCRIBE_AFTER_S = 0.3


class RunScreen(ConsoleScreen):
    AUTO_FOCUS = "#sweep-select"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "start", "Start"),
        Binding("p", "pause", "Pause/resume"),
        Binding("c", "cancel", "Cancel run"),
        Binding("k", "toggle_cores", "Per-core"),
        Binding("t", "toggle_tuning", "Tuning view", show=False),
        Binding("escape", "leave_input", "Leave input", show=False),
    ]

    current_run: reactive[str] = reactive("")
    paused: reactive[bool] = reactive(False)

    class RunFinished(Message):
        """A followed run reached a final state (the app and Results screen refresh on it)."""

        def __init__(self, run_id: str, state: str) -> None:
            super().__init__()
            self.run_id, self.state = run_id, state

    def __init__(self, backend: Backend) -> None:
        super().__init__(backend, id="run")
        self.model = RunModel()
        self._dirty: set[tuple[str, str]] = set()
        self._panels: dict[tuple[str, str], DevicePanel] = {}
        self._log_seen = 0
        self._announced: set[str] = set()
        self.redraws = 0  # how many throttled redraws ran (benchmark and tests read it)
        self._clock_at = 0.0  # when the running panels last redrew for their ETA
        self._log_at = 0.0  # when the log tail last took new lines
        self._status_text = ""  # what the status line shows (updated only on a change)
        self.show_cores = False
        self.fold_tuning: bool | None = None  # ``t``: None until the operator chooses
        self.refusal = ""  # why the last start was refused (e.g. the run holding a device)
        self._cancelling: set[str] = set()  # runs the operator cancelled: they end "cancelled"
        self._starting = False  # a start is waiting for its devices to take the run
        self._known_runs: set[str] = set()  # runs whose events came outside a start (or started)
        self._unconfirmed: dict[str, str] = {}  # ends of runs that appeared during the start
        self._previous_run = ""  # the run shown before the one being started
        self._describe_timer: Timer | None = None  # describes the typed sweep path

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="run-controls"):
            with Vertical(id="run-sweep"):
                yield Label("Sweep", classes="section-title")
                yield Select[str]([], prompt="preset", id="sweep-select", allow_blank=True)
                yield Input(placeholder="...or a sweep file path", id="sweep-file")
                yield Label("", id="sweep-summary")
            with Vertical(id="run-devices"):
                yield Label("Devices", classes="section-title")
                yield Checklist(id="device-list")
            with Vertical(id="run-buttons"):
                yield Button("Start (s)", id="start", variant="success")
                yield Button("Pause (p)", id="pause")
                yield Button("Cancel (c)", id="cancel", variant="error")
        yield Label("No run yet: choose a sweep and devices, then press s.", id="run-status")
        yield VerticalScroll(id="device-panels")
        yield LogTail(id="run-log")
        yield SteadyFooter(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        super().on_mount()
        self.set_interval(1 / REFRESH_HZ, self._tick)
        self.load_choices()

    def on_resize(self) -> None:
        """Below 120x36 the buttons go compact (one row each), so 80x24 still shows all three."""
        compact = self.size.width < 120 or self.size.height < 36
        for button in self.query("#run-buttons Button").results(Button):
            button.compact = compact

    def _tick(self) -> None:
        self.flush()  # looked up each time, so a benchmark can wrap ``flush`` with a timer

    # -- choices -------------------------------------------------------------------------------
    @work(thread=True, group="choices", exclusive=True, exit_on_error=False)
    def load_choices(self) -> None:
        backend = self.backend
        try:
            presets = backend.presets()
            devices = backend.devices_sync()
        except NgbError as exc:
            self.app.call_from_thread(self.notify, str(exc), severity="error")
            return
        self.app.call_from_thread(self._show_choices, presets, devices)

    def _show_choices(self, presets: list[str], devices: list[Device]) -> None:
        select = self.query_one("#sweep-select", Select)
        select.set_options([(p, p) for p in presets])
        if select.is_blank() and DEFAULT_SWEEP in presets:
            select.value = DEFAULT_SWEEP
        chosen = set(self.query_one(Checklist).selected)
        names = [d.name for d in devices]
        if not chosen and "localhost" in names:
            # Embedded default: the built-in localhost. A device added later starts unticked (it
            # may not be reachable yet): the operator ticks it once it probes fine.
            chosen = {"localhost"}
        sel = self.query_one(Checklist)
        sel.clear_options()
        sel.add_options([(f"{d.name} ({d.transport})", d.name, d.name in chosen) for d in devices])

    @on(Select.Changed, "#sweep-select")
    @on(Input.Submitted, "#sweep-file")
    def _sweep_changed(self) -> None:
        self.describe_sweep(self.sweep_choice())

    @on(Input.Changed, "#sweep-file")
    def _sweep_path_typed(self) -> None:
        """The summary follows the path box as it is typed (not only on Enter), so it never
        describes the preset while a file is what Start would run; described once typing pauses."""
        if self._describe_timer is not None:
            self._describe_timer.stop()
        self._describe_timer = self.set_timer(DESCRIBE_AFTER_S, self._sweep_changed)

    def sweep_choice(self) -> str:
        path = self.query_one("#sweep-file", Input).value.strip()
        if path:
            return path
        value = self.query_one("#sweep-select", Select).value
        return "" if value is Select.NULL else str(value)

    @work(thread=True, group="describe", exclusive=True, exit_on_error=False)
    def describe_sweep(self, choice: str) -> None:
        if not choice:  # nothing chosen (a path box emptied with no preset): nothing described
            self.app.call_from_thread(self.query_one("#sweep-summary", Label).update, "")
            return
        try:
            sweep = self.backend.load_sweep_sync(choice)
            # No duration guess: the ETA comes from this run's first finished trials.
            text = f"{sweep.name}: {len(sweep.trials())} trials per device (ETA once one is done)"
        except NgbError as exc:
            text = f"[red]{exc}[/]"
        self.app.call_from_thread(self.query_one("#sweep-summary", Label).update, text)

    # -- actions ---------------------------------------------------------------------------------
    def on_button_pressed(self, event: Button.Pressed) -> None:
        actions = {
            "start": self.action_start,
            "pause": self.action_pause,
            "cancel": self.action_cancel,
        }
        if event.button.id in actions:
            actions[event.button.id]()

    def action_start(self) -> None:
        choice = self.sweep_choice()
        devices = [str(d) for d in self.query_one(Checklist).selected]
        if not choice:
            self.notify("choose a sweep preset or enter a sweep file first", severity="warning")
            return
        if not devices:
            self.notify("select at least one device", severity="warning")
            return
        if self._starting:  # a second press must not cancel the start (its run goes on)
            self.notify("a start is waiting for its devices to take the run", severity="warning")
            return
        self._starting = True  # now, not when the worker runs: a double press sees it
        self.start_run(choice, devices)

    @work(group="start", exclusive=True, exit_on_error=False)
    async def start_run(self, choice: str, devices: list[str]) -> None:
        """Start, and say "started" only once a device took the run.

        A run no device took (busy with another process's run, unreachable) is refused: one
        line, no "started", no "failed" toast or bell, and the store keeps nothing of it. Its
        end may come in before the refusal does, so the ends of runs that appear while a start
        is pending wait in ``_unconfirmed`` until the start says which it was.
        """
        backend = self.backend
        try:
            sweep = await asyncio.to_thread(backend.load_sweep_sync, choice)
            await asyncio.to_thread(backend.import_orchestrator_sync)
            # subscribe before start, so no early event is missed
            backend.orchestrator()
            run_id, refusals = await backend.start_run(sweep, devices)
        except NgbError as exc:  # e.g. a device busy with another run: the message names it
            refused_run = getattr(exc, "run_id", "")  # RunRefused: the run is gone from the store
            if refused_run:
                self._drop_run(refused_run)
            self.notify(str(exc), severity="error", timeout=10)
            self.refusal = f"not started: {exc}"  # stays on the status line until the next start
            self.query_one("#run-status", Label).update(Text(self.refusal, style="red"))
            self._status_text = ""  # the next status line replaces this one
            return
        finally:
            self._starting = False
        self.refusal = ""
        self.follow_run(run_id, total=len(sweep.trials()), devices=devices)
        self.notify(f"run {run_id} started on {', '.join(devices)}")
        for line in refusals:  # devices that did not take it (the others run it), or queued it
            queued = line.startswith("queued: ")  # a Slurm slot busy with another run
            self.notify(line, severity="information" if queued else "warning", timeout=10)
        for other, state in self._unconfirmed.items():  # ends held back while starting
            self._run_ended(other, state)
        self._unconfirmed.clear()

    def _drop_run(self, run_id: str) -> None:
        """Forget a refused run: its panels, its state, its held-back end."""
        self._unconfirmed.pop(run_id, None)
        self.model.forget(run_id)
        for key in [k for k in self._panels if k[0] == run_id]:
            self._panels.pop(key).remove()
        self._dirty = {k for k in self._dirty if k[0] != run_id}
        if self.current_run == run_id:
            self.current_run = self._previous_run

    def follow_run(self, run_id: str, total: int = 0, devices: list[str] | None = None) -> None:
        """Show ``run_id`` (panels appear as its devices report)."""
        for name in devices or []:
            state = self.model.device(run_id, name)
            state.total = state.total or total
            self._dirty.add((run_id, name))
        self._known_runs.add(run_id)
        self.current_run = run_id
        self.paused = False

    def action_pause(self) -> None:
        if not self.current_run:
            self.notify("no run to pause", severity="warning")
            return
        self.toggle_pause(self.current_run, not self.paused)

    @work(group="control", exit_on_error=False)
    async def toggle_pause(self, run_id: str, pause: bool) -> None:
        orch = self.backend.orchestrator()
        try:
            await (orch.pause(run_id) if pause else orch.resume(run_id))
        except NgbError as exc:
            self.notify(str(exc), severity="error")
            return
        self.paused = pause
        self.notify(f"run {run_id} {'paused after the trial in flight' if pause else 'resumed'}")

    def action_cancel(self) -> None:
        """Cancel the shown run after a yes/no (its trials in flight are lost)."""
        run_id = self.current_run
        if not run_id:
            self.notify("no run to cancel", severity="warning")
            return

        def answered(ok: bool | None) -> None:
            if ok:
                self.cancel_run(run_id)

        self.app.push_screen(
            ConfirmScreen(f"Cancel run {run_id} on all its devices?", yes="Cancel run"), answered
        )

    @work(group="control", exit_on_error=False)
    async def cancel_run(self, run_id: str) -> None:
        """Cancel; the end of the run is announced once, by ``RunFinished`` ("cancelled")."""
        self.notify(f"cancelling run {run_id}...")
        self._cancelling.add(run_id)
        try:
            await self.backend.orchestrator().cancel(run_id)
        except NgbError as exc:
            self._cancelling.discard(run_id)
            self.notify(str(exc), severity="error")
            return
        self._run_ended(run_id, "cancelled")

    def action_leave_input(self) -> None:
        """Escape leaves the sweep-file box (or any field): the screen keys work again."""
        self.query_one("#device-list", Checklist).focus()

    def action_toggle_cores(self) -> None:
        """Per-core CPU bars in every device panel, on or off."""
        self.show_cores = not self.show_cores
        for panel in self._panels.values():
            panel.show_cores = self.show_cores
            panel.show(panel.state)

    def action_toggle_tuning(self) -> None:
        """The TVM tuning view whole (curve, tasks) or one line, in every device panel (one
        line by default on a short terminal: ``DevicePanel.tuning_folded``)."""
        folded = not next(iter(self._panels.values())).tuning_folded() if self._panels else False
        self.fold_tuning = folded
        for panel in self._panels.values():
            panel.fold_tuning = folded
            panel.show(panel.state)

    def watch_paused(self, paused: bool) -> None:
        if self.is_mounted:
            self.query_one("#pause", Button).label = "Resume (p)" if paused else "Pause (p)"

    def watch_current_run(self, run_id: str) -> None:
        if not self.is_mounted:
            return
        for key, panel in self._panels.items():
            panel.display = key[0] == run_id
        self._dirty.update(k for k in self.model.devices if k[0] == run_id)

    # -- events ----------------------------------------------------------------------------------
    def handle_run_event(self, ev: RunEvent) -> None:
        """Fold one orchestrator RunEvent (cheap; the redraw happens in ``flush``)."""
        if not self._starting:
            self._known_runs.add(ev.run_id)  # runs seen outside a start: never refusals
        changed = self.model.apply(ev)
        if changed is not None:
            self._dirty.add(changed)
            if self.current_run != changed[0] and (
                not self.current_run or changed[0] not in self._known_runs
            ):
                self._previous_run = self.current_run  # shown again if this one is refused
                self.current_run = changed[0]
        if ev.kind == "run" and ev.state in ("finished", "failed", "cancelled"):
            self._run_ended(ev.run_id, ev.state)
        elif (
            changed is not None
            and self.model.devices[changed].finished  # (one device's end: O(devices) only then)
            and self._all_finished(ev.run_id)
        ):
            self._run_ended(ev.run_id, self.model.derived_state(ev.run_id))

    def _all_finished(self, run_id: str) -> bool:
        states = self.model.devices_of(run_id)
        return bool(states) and all(s.finished for s in states)

    def _run_ended(self, run_id: str, state: str) -> None:
        if run_id in self._announced:
            return
        if self._starting and run_id not in self._known_runs:
            self._unconfirmed[run_id] = state  # refused or not: the start will say
            return
        if run_id in self._cancelling:  # its devices may report "finished" before the cancel
            state = "cancelled"
        self._announced.add(run_id)
        self.post_message(self.RunFinished(run_id, state))

    def on_run_screen_run_finished(self, message: RunFinished) -> None:
        severity: SeverityLevel = "information" if message.state == "finished" else "warning"
        self.notify(
            f"run {message.run_id} {message.state}: press 3 for charts, 4 for SQL",
            severity=severity,
            timeout=8,
        )
        # A long run (hours of TVM tuning) or one that did not finish rings the terminal bell, so
        # an operator in another window or tmux pane hears it (tmux flags the window).
        if message.state != "finished" or self.model.run_seconds(message.run_id) >= BELL_AFTER_S:
            self.app.bell()
        results = self.app.get_screen("results")
        refresh = getattr(results, "refresh_runs", None)
        if refresh is not None:
            # A run that stored no trial (refused, unreachable) is not worth opening on.
            ran = any(s.done > s.skipped for s in self.model.devices_of(message.run_id))
            refresh(select=message.run_id if ran else None)

    def flush(self) -> None:
        """Redraw what changed since the last flush (skipped while the screen is hidden)."""
        if not self.is_current or not self.is_mounted:
            return
        now = time.monotonic()
        if now - self._clock_at >= CLOCK_S:  # the ETAs of running devices count down
            self._clock_at = now
            self._dirty.update(
                k for k, st in self.model.devices.items()
                if k[0] == self.current_run and not st.finished
            )  # fmt: skip
        log_due = self.model.log_total != self._log_seen and now - self._log_at >= LOG_S
        if not self._dirty and not log_due:
            self._update_status()
            return
        self.redraws += 1
        dirty, self._dirty = self._dirty, set()
        container = self.query_one("#device-panels", VerticalScroll)
        new_panels = []
        for key in sorted(dirty):
            state = self.model.devices.get(key)
            if state is None:
                continue
            panel = self._panels.get(key)
            if panel is None:
                panel = self._panels[key] = DevicePanel(state, classes="device-panel")
                panel.show_cores = self.show_cores
                panel.fold_tuning = self.fold_tuning
                panel.display = key[0] == self.current_run
                new_panels.append(panel)
            panel.show(state)
        if new_panels:
            container.mount_all(new_panels)
        if log_due:  # a Log that grows re-lays out the whole screen: once a second at most
            self._log_at = now
            lines = self.model.log_since(self._log_seen)
            self._log_seen = self.model.log_total
            self.query_one(LogTail).append(line.render() for line in lines)
        self._update_status()

    def _update_status(self) -> None:
        run_id = self.current_run
        if not run_id:
            return
        states = self.model.devices_of(run_id)
        done = sum(s.done for s in states)
        total = sum(s.total for s in states)
        run_state = self.model.run_states.get(run_id) or (
            "finished" if self._all_finished(run_id) else "running"
        )
        pause = "  [yellow]paused[/]" if self.paused else ""
        status = Text.from_markup(
            f"Run [b]{run_id}[/b]  {run_state}{pause}  {done}/{total} trials on "
            f"{len(states)} device(s)"
        )
        if self.refusal:
            status.append(f"  | {self.refusal}", style="red")
        if status.markup != self._status_text:  # an unchanged line costs no repaint
            self._status_text = status.markup
            # layout=False: the line's box is fixed (one row, 1fr), and a layout pass repaints
            # the whole screen (the largest cost of a redraw, measured with cProfile)
            self.query_one("#run-status", Label).update(status, layout=False)
