"""``ngb-tui``: the operator's console (Textual).

The main screens (``ngb.tui.registry.SCREENS``: Devices, Run, Results, SQL, Runs) are installed
once and kept alive so a run keeps updating while the operator looks at charts. The app owns the
subscription to the orchestrator's event stream (an async worker on Textual's own loop) and hands
each event to the Run screen, which folds it into plain state and redraws at most ~10 times a
second.

Start-up imports only Textual and ngb.core: the store (duckdb), SSH (asyncssh) and every compiler
library are imported lazily by ``ngb.tui.backend`` when first needed, after the first frame.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import signal
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, NoReturn

from ngb.core.base.errors import NgbError
from ngb.core.base.scratch import remove_own, sweep_once
from ngb.core.statistics.student_t import t_two_sided
from ngb.tui.backend import Backend
from ngb.tui.registry import BY_NAME, SCREENS
from ngb.tui.screens.help import HelpScreen
from ngb.tui.screens.run import RunScreen
from ngb.tui.settings import Settings
from textual import work
from textual.actions import SkipAction
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import ModalScreen, Screen
from textual.widgets import Input, TextArea

if TYPE_CHECKING:
    from ngb.sweeps.run.orchestrator import Orchestrator


SCREEN_KEYS = Binding.Group("screens", compact=True)
#: seconds a quit on SIGHUP / SIGTERM may take before the process ends without it
SIGNAL_GRACE_S = 5.0


class NgbApp(App[None]):
    CSS_PATH = "app.tcss"
    # Layout classes set on each screen by size (see app.tcss).
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (36, "-tall")]
    TITLE = "ngb"
    SUB_TITLE = "neural graph compiler bench"

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help", key_display="?"),
        # One compact footer entry for all screen keys ("12345 screens"), so at 80 columns the
        # global keys are not pushed off the footer by each screen's own.
        # Priority: a focused SQL editor would otherwise take the digit (``4`` then ``5`` typed
        # "5"); ``action_screen_key`` hands it back to text boxes that are being typed in.
        *(
            Binding(s.key, f"screen_key('{s.name}')", s.title, group=SCREEN_KEYS, priority=True)
            for s in SCREENS
        ),
    ]

    def __init__(
        self,
        backend: Backend | None = None,
        *,
        start_screen: str = "run",
        attach_on_start: bool = True,
        cursor_blink: bool = True,
        settings_path: Path | None = None,
        end_on_signals: bool = False,
        settle_heap: bool = False,
    ) -> None:
        super().__init__()
        # SIGHUP (the terminal closed) and SIGTERM quit as ``q`` does (``ngb-tui`` sets it; a
        # test's app leaves its process's signals alone)
        self.end_on_signals = end_on_signals
        # ``ngb-tui`` sets it (``warm_up``); a test's app leaves its process's collector alone
        self.settle_heap = settle_heap
        self._signal_quit: asyncio.Task[None] | None = None  # held: the loop keeps a weak one
        self._last_resort: threading.Timer | None = None
        self.backend = backend or Backend()
        # Read by each screen's on_mount (ngb.tui.widgets.cursor): off gives steady cursors, so
        # snapshots and screen captures do not depend on the blink timer's phase.
        self.cursor_blink = cursor_blink
        self.start_screen = start_screen
        self.attach_on_start = attach_on_start
        self.settings = Settings(settings_path)
        self.backend.on_orchestrator = self._subscribe

    # -- screens ---------------------------------------------------------------------------------
    def on_mount(self) -> None:
        theme = self.settings.get("theme")
        if isinstance(theme, str) and theme in self.available_themes:
            self.theme = theme
        for entry in SCREENS:
            self.install_screen(entry.build(self.backend), entry.name)
        self.push_screen(self.start_screen)
        if self.end_on_signals:
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGHUP, signal.SIGTERM):
                loop.add_signal_handler(signum, self._end_for_signal, signum)
        if self.attach_on_start:
            self.reattach_runs()
        self.call_after_refresh(self.warm_up)

    @work(thread=True, group="warm-up", exit_on_error=False)
    def warm_up(self) -> None:
        """Import what a first visit to Results needs, here, once the first screen is drawn:
        the charts' intervals take their t quantile from scipy (~0.3 s of CPU on the 2-core VM),
        which that first visit paid before its trials showed (issue 41).

        Then, with ``settle_heap``, what start-up made (modules, classes, the screens) is moved
        out of the collector's sight (``gc.freeze``): each full collection walked it all again,
        0.1-0.2 s each, ~8 a minute with 128 devices followed, and one in a screen's first
        visit put it over 0.5 s (benchmarks/console_fleet.py: collector 0.87 s of a visit
        round, longest 0.19 s; frozen at start 0.41 s and 0.08 s). Objects made later are
        collected as before. ``quit_finished`` hands them back."""
        t_two_sided(0.95, 2.0)
        if self.settle_heap:
            import ngb.sweeps.store.database  # noqa: F401 - the store every screen reads

            gc.collect()
            gc.freeze()

    def watch_theme(self, theme: str) -> None:
        """Remember the theme the operator picked (command palette) for the next start."""
        settings = getattr(self, "settings", None)  # None while App.__init__ sets the default
        if settings is not None:
            settings.set("theme", theme)

    @property
    def run_screen(self) -> RunScreen:
        screen = self.get_screen("run")
        assert isinstance(screen, RunScreen)
        return screen

    def action_show(self, name: str) -> None:
        target = self.get_screen(name)
        # Modal screens (help, forms) sit on top of a main screen: close them first.
        while isinstance(self.screen, ModalScreen) and len(self.screen_stack) > 1:
            self.pop_screen()
        if self.screen is not target:
            self.switch_screen(name)

    def action_screen_key(self, name: str) -> None:
        """A number key: switch screens, unless the operator is typing (then it is a digit).

        One-line boxes always take digits; the SQL editor takes them once something was typed or
        clicked there since it got focus (``SqlEditor.typed``), so arriving on SQL with ``4`` and
        pressing ``5`` still switches. A dialog or form keeps its keys (only help gives way).
        """
        focused = self.focused
        if isinstance(focused, Input) or (
            isinstance(focused, TextArea) and getattr(focused, "typed", True)
        ):
            raise SkipAction()
        if isinstance(self.screen, ModalScreen) and not isinstance(self.screen, HelpScreen):
            raise SkipAction()
        self.action_show(name)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for entry in SCREENS:
            yield SystemCommand(
                f"Show {entry.title} ({entry.key})",
                entry.summary,
                lambda name=entry.name: self.action_show(name),
            )
        yield SystemCommand(
            "Start the selected sweep",
            "Run screen: start on selected devices",
            self._start_from_palette,
        )
        yield SystemCommand("Help", "Keys and screens", self.action_help)

    def _start_from_palette(self) -> None:
        self.action_show("run")
        self.run_screen.action_start()

    # -- orchestrator events ---------------------------------------------------------------------
    async def action_quit(self) -> None:
        """Quit the console; runs go on on their devices and are re-attached at next start."""
        self.backend.cancel_queries()  # an SQL query in flight must not hold up quitting
        if self.backend.has_orchestrator():
            self.notify("detaching from runs (they go on on their devices)...")
            await self.backend.close()
        self.exit()

    def _end_for_signal(self, signum: int) -> None:
        """Quit as ``q`` does, on the loop; a quit that cannot finish (a terminal gone under a
        redraw) ends the process after ``SIGNAL_GRACE_S`` all the same, scratch removed."""

        def last_resort() -> None:
            remove_own()
            os._exit(128 + signum)

        if self._signal_quit is not None:
            return  # already quitting for a signal
        self._last_resort = threading.Timer(SIGNAL_GRACE_S, last_resort)
        self._last_resort.daemon = True
        self._last_resort.start()
        self._signal_quit = asyncio.get_running_loop().create_task(self._quit(128 + signum))

    def quit_finished(self) -> None:
        """The app has run to its end: a signal's fallback (``_end_for_signal``) is not needed,
        and what ``warm_up`` froze goes back to the collector (an interpreter that ends with it
        frozen never frees it: DuckDB's bindings then report leaked types at exit)."""
        if self._last_resort is not None:
            self._last_resort.cancel()
        if self.settle_heap:
            gc.unfreeze()

    async def _quit(self, code: int) -> None:
        await self.action_quit()
        self.exit(return_code=code)

    def _subscribe(self, orch: Orchestrator) -> None:
        self.follow_events(orch)

    @work(group="events", exclusive=True)
    async def follow_events(self, orch: Orchestrator) -> None:
        async for ev in orch.subscribe():
            self.run_screen.handle_run_event(ev)

    @work(group="attach", exit_on_error=False)
    async def reattach_runs(self) -> None:
        """Runs the store says are still going get their devices followed again. Followed
        only (``resume=False``): a device that failed stays failed, and this console never
        resubmits a job the scheduler ended; ``ngb attach`` or the Runs screen goes on."""
        import asyncio

        try:
            runs = await asyncio.to_thread(self.backend.runs_sync)
        except NgbError as exc:
            self.notify(str(exc), severity="warning")
            return
        live = [r for r in runs if str(r.get("status", "")) in ("running", "starting")]
        if not live:
            return
        await asyncio.to_thread(self.backend.import_orchestrator_sync)
        orch = self.backend.orchestrator()  # subscribes before attaching: no event is missed
        for run in live:
            run_id = str(run.get("run_id"))
            try:
                await orch.attach(run_id, resume=False)
            except NgbError as exc:
                self.notify(f"re-attach {run_id}: {exc}", severity="warning")
                continue
            self.run_screen.follow_run(run_id)
            self.notify(f"re-attached to run {run_id}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ngb-tui", description="ngb operator console")
    parser.add_argument("--db", type=Path, help="results database (default: the data dir)")
    parser.add_argument("--inventory", type=Path, help="devices TOML (default: the config dir)")
    parser.add_argument(
        "--screen", choices=sorted(BY_NAME), default="run", help="screen to open first"
    )
    parser.add_argument(
        "--no-attach", action="store_true", help="do not re-attach to runs still going at start-up"
    )
    parser.add_argument(
        "--no-blink", action="store_true", help="steady text cursors (also for screen captures)"
    )
    return parser


def main(argv: list[str] | None = None, *, exit_now: bool = True) -> int:
    """``ngb-tui``; ``exit_now=False`` returns the exit status instead of ending the process."""
    args = build_parser().parse_args(argv)
    sweep_once()  # what killed ngb processes left in the temp dir (ngb.core.base.scratch)
    backend = Backend(db_path=args.db, inventory_path=args.inventory)
    app = NgbApp(
        backend,
        start_screen=args.screen,
        attach_on_start=not args.no_attach,
        cursor_blink=not args.no_blink,
        end_on_signals=True,
        settle_heap=True,
    )
    app.run()
    app.quit_finished()
    code = app.return_code or 0
    if exit_now:
        leave_now(code)
    return code


def leave_now(code: int) -> NoReturn:
    """End the process without the interpreter's teardown of its ~700 modules, which took over
    1 s after the console had already gone (measured in a pty: ``q`` to exit 1.2-1.7 s before,
    0.3 s after). Safe here: the app has shut down (runs detached, queries cancelled, workers
    ended) and the console keeps no file open; only stdout/stderr need flushing, and the scratch
    folders (a copy of the store each, for its queries) need removing, as no finalizer runs."""
    remove_own()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
