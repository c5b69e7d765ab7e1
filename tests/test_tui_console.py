"""Pilot tests of the console's structure and the operator features of issue 10 that need no
live run: the screen registry (keys, footer, help, palette), the Runs view over a real store, the
cancel confirmation, and what the console remembers between starts (theme)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ngb.sweeps.store.database import Store
from ngb.tui import results_data as rd
from ngb.tui.app import NgbApp, build_parser
from ngb.tui.backend import Backend
from ngb.tui.registry import SCREENS
from ngb.tui.screens.confirm import ConfirmScreen
from ngb.tui.screens.help import help_markdown
from ngb.tui.screens.runs import RunsScreen
from ngb.tui.widgets.checklist import Checklist
from ngb.tui.widgets.data_grid import DataGrid
from ngb.tui.widgets.sql_editor import SqlEditor
from rich.console import Console
from textual import events
from textual.binding import Binding
from textual.widgets import DataTable, Input, Label, Select, Static

from tests.test_tui_support import SIZE, make_app, wait_for, write_noop_sweep


def test_registry_drives_keys_help_and_cli_choices() -> None:
    keys = {b.key: b.action for b in NgbApp.BINDINGS if isinstance(b, Binding)}
    text = help_markdown()
    choices = build_parser().parse_args(["--screen", SCREENS[-1].name]).screen
    assert choices == SCREENS[-1].name
    for entry in SCREENS:
        assert keys[entry.key] == f"screen_key('{entry.name}')"
        assert f"`{entry.key}` | {entry.title}" in text
    # Each screen's own keys are listed under it (taken from its BINDINGS, not hand-written).
    assert "`a` attach" in text and "`c` cancel run" in text


async def test_every_registered_screen_is_reachable_by_its_key(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.screen.id == "run")
        await pilot.press("escape")  # leave whatever text box has focus
        for entry in SCREENS:
            await pilot.pause()  # the screen's auto-focus lands first...
            app.set_focus(None)  # ...then leave the editor or box it focused
            await pilot.press(entry.key)
            assert app.screen.id == entry.name


def plain(renderable: object) -> str:
    """What a Rich renderable prints, as text."""
    console = Console(width=160, color_system=None)
    with console.capture() as captured:
        console.print(renderable)
    return captured.get()


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


# -- keys and focus ---------------------------------------------------------------------------


async def test_escape_leaves_the_sweep_file_box(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.run_screen
        await wait_for(pilot, lambda: screen.sweep_choice() == "demo")
        box = screen.query_one("#sweep-file", Input)
        box.focus()
        await pilot.press("q", "3")  # typed into the box: no quit, no screen switch
        assert box.value == "q3" and app.screen is screen
        await pilot.press("escape")
        assert not box.has_focus
        await pilot.press("3")
        assert app.screen.id == "results"


async def test_add_form_focuses_its_first_field_and_new_devices_start_unticked(
    tmp_path: Path,
) -> None:
    app = make_app(tmp_path, screen="devices")
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.screen.query_one("#devices-table", DataTable)
        await wait_for(pilot, lambda: table.row_count == 1)
        await pilot.press("a")
        form = app.screen
        await pilot.press(*"far-away")  # typing goes straight into the name field
        assert form.query_one("#field-name", Input).value == "far-away"
        form.query_one("#field-host", Input).value = "10.9.9.9"
        # Save and Cancel are on screen at 80x24 (the fields scroll instead).
        save = form.query_one("#save")
        assert save.region.bottom <= 24 and save.region.height > 0
        await pilot.click("#save")
        await wait_for(pilot, lambda: table.row_count == 2)
        app.set_focus(None)
        await pilot.press("2")
        ticks = app.run_screen.query_one(Checklist)
        await wait_for(pilot, lambda: len(ticks.options) == 2)
        assert list(ticks.selected) == ["localhost"]  # the new, unprobed device is not ticked
        lines = [str(ticks.render_line(i).text) for i in range(2)]
        assert "✔" in lines[0] and "✔" not in lines[1] and "X" not in lines[1]


# -- SQL ----------------------------------------------------------------------------------------


async def test_sql_errors_clear_the_grid_history_persists_and_ctrl_space_completes(
    tmp_path: Path,
) -> None:
    db = tmp_path / "r.duckdb"
    stored_run(db, "r1", "finished")
    settings = tmp_path / "tui.json"
    backend = Backend(db_path=db, inventory_path=tmp_path / "none.toml")
    app = NgbApp(backend, start_screen="sql", attach_on_start=False, settings_path=settings)
    async with app.run_test(size=SIZE) as pilot:
        sql = app.screen
        editor = sql.query_one(SqlEditor)
        assert editor.language == "sql"  # highlighted
        await wait_for(pilot, lambda: "trials" in editor.names)
        editor.text = "SELECT count(*) FROM tri"
        editor.move_cursor(editor.document.end)
        await pilot.press("ctrl+space")
        assert editor.text.endswith("FROM trials")
        editor.text = "SELECT 1.5 AS x, 22 AS y, 'a' AS z"
        await pilot.press("ctrl+j")
        grid = sql.query_one("#sql-results", DataGrid)
        await wait_for(pilot, lambda: grid.row_count == 1)
        row = grid.get_row_at(0)
        assert [str(c) for c in row] == ["1.5", "22", "a"]  # the decimals it has, not 1.500
        assert [c.justify for c in row] == ["right", "right", None]  # numbers right-aligned
        # A write on the read-only connection: one line without CLI flags, and the grid empties.
        editor.text = "DELETE FROM runs"
        await pilot.press("ctrl+j")
        status = sql.query_one("#sql-status", Label)
        await wait_for(pilot, lambda: "read-only" in str(status.render()))
        assert "--write" not in str(status.render()) and "allow writes" in str(status.render())
        assert grid.row_count == 0
        # ctrl+e works from the path box too (priority binding).
        sql.query_one("#sql-path", Input).value = str(tmp_path / "x.csv")
        sql.query_one("#sql-path", Input).focus()
        await pilot.press("ctrl+e")
        await wait_for(pilot, lambda: (tmp_path / "x.csv").exists())
        await pilot.press("ctrl+l")
        assert editor.text == ""
    again = NgbApp(backend, start_screen="sql", attach_on_start=False, settings_path=settings)
    async with again.run_test(size=SIZE):
        assert again.screen.history[0].endswith("'a' AS z")  # history kept across restarts


# -- results ------------------------------------------------------------------------------------


async def test_results_table_sorts_copies_and_charts_toggle_log_scale(tmp_path: Path) -> None:
    from tests.test_tui_snapshots import INVENTORY, filled_store

    db = filled_store(tmp_path / "r.duckdb")
    inventory = tmp_path / "devices.toml"
    inventory.write_text(INVENTORY)
    app = NgbApp(
        Backend(db_path=db, inventory_path=inventory), start_screen="results", attach_on_start=False
    )
    # the whole table, every interval in its column, needs ~165 columns (narrow_table.fit)
    async with app.run_test(size=(200, 48)) as pilot:
        screen = app.screen
        await wait_for(pilot, lambda: len(screen.rows) == 15)
        note = str(screen.query_one("#results-note", Label).render())
        assert "1 unstable" in note
        # `ngb advise` bootstraps: its answer follows the trials (they are shown first)
        await wait_for(pilot, lambda: screen.advice_ready)
        # `ngb advise`'s answer for the model shown, as the CLI words it: the depth its charts
        # show (the shallowest), the deeper ones named
        variant = screen.selection().variant
        advice = screen.advice[variant]
        assert sorted(advice) == [1, 2, 4]
        assert advice[1].startswith("advise: conv16x1 on ") and "deploy openvino b32" in advice[1]
        shown = str(screen.query_one("#results-advice", Label).render())
        assert shown == f"{advice[1]} (depth 2, 4: `ngb advise --sweep demo-snap`)"
        app.set_focus(None)
        shown = screen.drawn_log  # automatic at first: log where the values span a wide range
        await pilot.press("l")
        assert screen.selection().log_y is (not shown) and screen.draws > 0
        assert rd.CHARTS["throughput"].build(screen.rows, screen.selection()).log_y is (not shown)
        # The heatmap's compiler picker.
        await screen.show_tab("ase")
        screen.query_one("#heat-ase", Select).value = "openvino"
        heat = screen.query_one("#chart-ase", Static)
        await wait_for(pilot, lambda: "ASE of openvino" in plain(heat.content))
        assert "scale:" in plain(heat.content) and "0.505" in plain(heat.content)
        # The table: noisy OpenVINO batch 1 is unstable and n.s.; sort by throughput; copy.
        await screen.show_tab("table")
        table = screen.query_one("#results-table", DataGrid)
        await wait_for(pilot, lambda: table.row_count == 15)
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        noisy = next(r for r in rows if r[1] == "openvino" and r[2] == "1")
        assert noisy[6].endswith("n.s.") and noisy[10] == "unstable"
        table.focus()
        table.move_cursor(row=0, column=5)
        await pilot.press("o")
        values = [float(str(table.get_row_at(i)[5]).split()[0]) for i in range(table.row_count)]
        assert values == sorted(values)
        await pilot.press("o")
        values = [float(str(table.get_row_at(i)[5]).split()[0]) for i in range(table.row_count)]
        assert values == sorted(values, reverse=True)
        await pilot.press("y")
        assert app.clipboard == str(table.get_row_at(0)[5])
        await pilot.press("Y")
        assert app.clipboard.split("\t")[0] == "conv w16"


# -- run screen -----------------------------------------------------------------------------------


async def test_run_end_rings_once_and_meters_say_what_they_measure(
    tmp_path: Path, monkeypatch
) -> None:
    from ngb.sweeps.run.orchestrator import RunEvent

    app = make_app(tmp_path)
    rings: list[int] = []
    monkeypatch.setattr(app, "bell", lambda: rings.append(1))
    async with app.run_test(size=SIZE) as pilot:
        screen = app.run_screen

        def send(**kw) -> None:
            screen.handle_run_event(RunEvent("r9", "dev", ts=1.0, **kw))

        send(kind="connection", state="running")
        send(kind="agent", event={"type": "trial_started", "label": "conv/noop/b1", "total": 2})
        send(
            kind="agent",
            event={
                "type": "cpu", "percent": 60.0, "proc_percent": 150.0, "per_cpu": [90.0, 30.0],
                "mem_percent": 40.0, "mem_used_mb": 4096.0, "mem_total_mb": 10240.0,
                "gpu_util_percent": 75.0, "gpu_mem_used_mb": 2048.0, "gpu_power_w": 120.0,
            },
        )  # fmt: skip
        send(kind="ingest", message="1 results stored")
        send(kind="connection", state="running", message="paused")
        send(kind="agent", event={"type": "log", "level": "info", "msg": "paused"})
        await wait_for(pilot, lambda: ("r9", "dev") in screen._panels)
        panel = screen._panels[("r9", "dev")]
        app.set_focus(None)
        await pilot.press("k")
        text = str(panel.render())
        assert "CPU sys" in text and " 60%" in text and "ngb  150%" in text
        assert "MEM" in text and "4.0/10.0 GiB" in text and "GPU" in text and "120 W" in text
        assert "cores 0-1" in text
        # The meters reset when the trial ends (no frozen 60 %).
        send(kind="agent", event={"type": "trial_done", "key": "k"})
        await pilot.pause(0.3)
        assert "idle" in str(panel.render()) and " 60%" not in str(panel.render())
        log = [line.text for line in screen.model.log]
        assert log.count("paused") == 1 and not any("results stored" in x for x in log)
        # Cancelled: one announcement ("cancelled", never "finished" too) and the bell rings.
        send(kind="connection", state="cancelled")
        send(kind="run", state="cancelled")
        await wait_for(pilot, lambda: rings)
        await pilot.pause(0.3)
        notes = [n.message for n in app._notifications]  # noqa: SLF001
        assert sum("r9" in n for n in notes) == 1 and any("cancelled" in n for n in notes)
        assert not any("r9 finished" in n for n in notes)


# -- devices ------------------------------------------------------------------------------------


async def test_probe_details_and_status_survive_a_restart(tmp_path: Path) -> None:
    app = make_app(tmp_path, screen="devices")
    db = app.backend.db_path
    assert db is not None
    Store(db).record_probe(
        "localhost",
        {
            "hostname": "lab-1", "cpu_model": "Xeon Gold", "cores_logical": 16,
            "ram_mb": 65536, "os": "Linux", "python": "3.11.9",
            "versions": {"torch": "2.15.0", "openvino": "2026.4.1"},
            "compilers": {"identity": {"available": True}, "tvm": {"available": False}},
        },
    )  # fmt: skip
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        table = screen.query_one("#devices-table", DataTable)
        await wait_for(pilot, lambda: screen.status.get("localhost", "").startswith("ok"))
        assert "identity" in str(table.get_row("localhost")[-1])
        details = screen.query_one("#device-details", Static)
        await wait_for(pilot, lambda: "Xeon Gold" in plain(details.content))
        text = plain(details.content)
        assert "Table I" in text and "64.0 GB" in text and "2026.4.1" in text
        # A long probe error stays within its column; the details pane has room for it.
        screen._set_status("localhost", "error: " + "x" * 200)
        cell = str(table.get_row("localhost")[4])
        assert len(cell) <= 40 and cell.endswith("…")


async def test_a_second_start_on_a_busy_device_names_the_holder(tmp_path: Path) -> None:
    sweep = tmp_path / "slow.toml"
    sweep.write_text(
        write_noop_sweep(tmp_path).read_text().replace("compile_s = 0.0", "compile_s = 3.0")
    )
    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.run_screen
        await wait_for(pilot, lambda: screen.sweep_choice() == "demo")
        screen.query_one("#sweep-file", Input).value = str(sweep)
        app.set_focus(None)
        await pilot.press("s")
        first = await wait_for(pilot, lambda: screen.current_run)
        await wait_for(pilot, lambda: screen._starting is False)  # localhost took the first run
        assert screen.current_run == first and not screen.refusal
        await pilot.press("s")  # localhost is held by the first run
        status = screen.query_one("#run-status", Label)
        await wait_for(pilot, lambda: "not started" in str(status.render()))
        assert f"busy with run {first}" in str(status.render())
        assert screen.current_run == first
        await app.backend.orchestrator().cancel(first)


def burst(app: NgbApp, keys: str) -> None:
    """Keys as a fast typist (or a terminal paste) sends them: all queued before the app reads
    the first, which ``pilot.press`` (idle between keys) never does."""
    assert app._driver is not None
    for char in keys:
        name = {"(": "left_parenthesis", ")": "right_parenthesis"}.get(char, char)
        event = events.Key(name, char)
        event.set_sender(app)
        app._driver.send_message(event)


async def test_the_sql_editor_owns_every_key_typed_fast_on_its_first_visit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    # The editor's first key is slow in a terminal (tree-sitter's first highlight); the app
    # meanwhile reads the next keys, and "range(2" must not let the "2" switch screens.
    handle_key = SqlEditor._on_key
    keys_seen: list[str] = []

    async def slow_first_key(self: SqlEditor, event: events.Key) -> None:
        keys_seen.append(event.key)
        if len(keys_seen) == 1:
            await asyncio.sleep(0.3)
        await handle_key(self, event)

    monkeypatch.setattr(SqlEditor, "_on_key", slow_first_key)
    app = make_app(tmp_path, screen="results")
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.screen.id == "results")
        app.set_focus(None)
        burst(app, "4range(200000)")  # "4" opens SQL, then the query is typed at once
        editor = await wait_for(
            pilot, lambda: app.screen.id == "sql" and app.screen.query_one(SqlEditor)
        )
        await wait_for(pilot, lambda: "range(200000)" in editor.text, timeout=10)
        assert app.screen.id == "sql" and editor.text.count("range(200000)") == 1
        # once typed in, every digit is the editor's; escape hands the number keys back
        burst(app, "12345")
        await wait_for(pilot, lambda: "range(200000)12345" in editor.text, timeout=10)
        await pilot.press("escape", "5")
        assert app.screen.id == "runs"


async def test_the_sweep_summary_follows_a_typed_sweep_path(tmp_path: Path) -> None:
    sweep = write_noop_sweep(tmp_path)
    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.run_screen
        summary = screen.query_one("#sweep-summary", Label)
        await wait_for(pilot, lambda: str(summary.render()).startswith("demo: "))
        box = screen.query_one("#sweep-file", Input)
        box.focus()
        await pilot.press(*str(sweep))  # typed, no Enter
        await wait_for(pilot, lambda: str(summary.render()).startswith("noop-tiny: "), timeout=10)
        assert "trials per device" in str(summary.render())
        box.value = ""  # emptied: the preset is what Start runs again
        await wait_for(pilot, lambda: str(summary.render()).startswith("demo: "), timeout=10)


def test_sql_grid_shows_the_decimals_a_query_asked_for() -> None:
    import duckdb
    from ngb.tui.screens.sql import cell, column_digits

    rows = duckdb.sql(
        "SELECT round(51.2999, 1), 1234.56789::DOUBLE, 0.000123::DOUBLE, 51.30::DECIMAL(6,2), 0.0"
    ).fetchall()
    shown = [cell(v, column_digits(rows, i)) for i, v in enumerate(rows[0])]
    assert shown == ["51.3", "1234.568", "0.000123", "51.30", "0.0"]


async def test_the_runs_table_fits_80_columns_with_every_column_whole(tmp_path: Path) -> None:
    app = make_app(tmp_path, screen="runs")
    app.attach_on_start = False
    db = app.backend.db_path
    assert db is not None
    store = Store(db)
    run_id = "own-models-20261126-201500-a1b2"
    store.create_run(run_id, "own-models", "", ["localhost", "jetson-orin-nano"], 80, {})
    store.set_run_status(run_id, "running")
    for device in ("localhost", "jetson-orin-nano"):
        store.upsert_run_device(run_id, device, state="running", n_trials=40, n_done=1)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        table = screen.query_one("#runs-table", DataTable)
        await wait_for(pilot, lambda: table.row_count == 1)
        await pilot.pause()
        assert [str(c.label) for c in table.columns.values()][-1] == "created"
        assert table.virtual_size.width <= table.size.width  # no column behind a scroll
        row = screen.rows_shown()[0]
        assert row[:4] == (run_id, "running", "2", "2/80") and len(row[5]) == len("11-26 20:15")
        await pilot.resize_terminal(120, 40)
        await wait_for(pilot, lambda: len(screen.rows_shown()[0]) == 8)
        assert screen.rows_shown()[0][1] == "own-models"
