"""Pilot tests of the console's structure and the operator features of issue 10 that need no
live run: the screen registry (keys, footer, help, palette), the Runs view over a real store, the
cancel confirmation, and what the console remembers between starts (theme)."""

from __future__ import annotations

import json
from pathlib import Path

from ngb.sweeps.store import Store
from ngb.tui.app import NgbApp, build_parser
from ngb.tui.backend import Backend
from ngb.tui.registry import SCREENS
from ngb.tui.screens.confirm import ConfirmScreen
from ngb.tui.screens.help import help_markdown
from ngb.tui.screens.runs import RunsScreen
from textual.binding import Binding
from textual.widgets import DataTable

from tests.test_tui_support import SIZE, make_app, wait_for


def test_registry_drives_keys_help_and_cli_choices() -> None:
    keys = {b.key: b.action for b in NgbApp.BINDINGS if isinstance(b, Binding)}
    text = help_markdown()
    choices = build_parser().parse_args(["--screen", SCREENS[-1].name]).screen
    assert choices == SCREENS[-1].name
    for entry in SCREENS:
        assert keys[entry.key] == f"show('{entry.name}')"
        assert f"`{entry.key}` | {entry.title}" in text
    # Each screen's own keys are listed under it (taken from its BINDINGS, not hand-written).
    assert "`a` attach" in text and "`c` cancel run" in text


async def test_every_registered_screen_is_reachable_by_its_key(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.screen.id == "run")
        await pilot.press("escape")  # leave whatever text box has focus
        for entry in SCREENS:
            app.set_focus(None)
            await pilot.press(entry.key)
            assert app.screen.id == entry.name


def stored_run(db: Path, run_id: str, status: str) -> None:
    """A run as another process (the CLI) leaves it in the store."""
    store = Store(db)
    store.create_run(run_id, "demo", "", ["localhost"], 4, {})
    store.set_run_status(run_id, status)
    store.upsert_run_device(run_id, "localhost", state="running", n_trials=4, n_done=1, n_failed=0)


async def test_runs_view_lists_a_run_started_elsewhere_and_cancel_asks(tmp_path: Path) -> None:
    app = make_app(tmp_path, screen="runs")
    app.attach_on_start = False  # watch the run, do not follow it (it has no agent anywhere)
    db = app.backend.db_path
    assert db is not None
    stored_run(db, "cli-run-1", "running")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        table = screen.query_one("#runs-table", DataTable)
        await wait_for(pilot, lambda: table.row_count == 1)
        row = screen.rows_shown()[0]
        assert row[:3] == ("cli-run-1", "demo", "running")
        assert row[4] == "1/4"
        # A second run appears on the next poll, without a key press.
        stored_run(db, "cli-run-2", "finished")
        await wait_for(pilot, lambda: table.row_count == 2, timeout=20)
        # Cancel asks first; "n" leaves the run alone.
        table.move_cursor(row=0)
        await pilot.press("c")
        assert isinstance(app.screen, ConfirmScreen)
        assert "Cancel run" in str(app.screen.query_one("#confirm-question").render())
        await pilot.press("n")
        assert app.screen is screen
        assert {r["status"] for r in Store(db).runs()} == {"running", "finished"}


async def test_run_screen_cancel_asks_before_cancelling(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.run_screen
        screen.current_run = "r-1"
        app.set_focus(None)
        await pilot.press("c")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("escape")
        assert app.screen is screen
        assert not app.backend.has_orchestrator()  # nothing was sent anywhere


async def test_theme_is_remembered(tmp_path: Path) -> None:
    settings = tmp_path / "tui.json"
    backend = Backend(db_path=tmp_path / "r.duckdb", inventory_path=tmp_path / "none.toml")
    app = NgbApp(backend, attach_on_start=False, settings_path=settings)
    async with app.run_test(size=SIZE) as pilot:
        app.theme = "nord"
        await pilot.pause()
    assert json.loads(settings.read_text())["theme"] == "nord"
    again = NgbApp(backend, attach_on_start=False, settings_path=settings)
    async with again.run_test(size=SIZE):
        assert again.theme == "nord"
