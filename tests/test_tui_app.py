"""Pilot tests of every screen flow: embedded default, devices (add / edit validation / remove),
a run from start to finish, results charts and table, SQL (query, read-only, history, export)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
from ngb.devices.inventory import load_inventory
from ngb.sweeps.run.orchestrator import RunEvent
from ngb.tui.app import NgbApp
from ngb.tui.backend import Backend
from ngb.tui.screens.host_key import HostKeyScreen
from textual.widgets import DataTable, Input, Label, Log, Select, SelectionList, TextArea

from tests.test_tui_support import SIZE, make_app, wait_for, write_noop_sweep


def row_names(table: DataTable) -> list[str]:
    return [str(table.get_row_at(i)[0]) for i in range(table.row_count)]


def label_text(app: NgbApp, selector: str) -> str:
    return str(app.screen.query_one(selector, Label).render())


async def test_embedded_default_preselects_demo_and_localhost(tmp_path: Path) -> None:
    # No inventory file at all: the built-in localhost and the demo preset are ready to go.
    app = NgbApp(Backend(db_path=tmp_path / "r.duckdb", inventory_path=tmp_path / "none.toml"))
    async with app.run_test(size=SIZE) as pilot:
        screen = app.run_screen
        await wait_for(pilot, lambda: screen.sweep_choice() == "demo")
        assert app.screen is screen
        assert list(screen.query_one(SelectionList).selected) == ["localhost"]
        await wait_for(pilot, lambda: "trials per device" in label_text(app, "#sweep-summary"))
        from ngb.sweeps.spec.sweep import load_sweep

        n_demo = len(load_sweep("demo").trials())
        assert label_text(app, "#sweep-summary").startswith(f"demo: {n_demo} trials")
        for key, name in (("1", "devices"), ("3", "results"), ("4", "sql"), ("2", "run")):
            if name == "run":  # the SQL editor has focus and takes digits: escape leaves it
                await pilot.press("escape")
            await pilot.press(key)
            assert app.screen.id == name
        await pilot.press("question_mark")
        assert type(app.screen).__name__ == "HelpScreen"
        await pilot.press("escape")
        assert app.screen.id == "run"


async def test_add_edit_validate_and_remove_a_device(tmp_path: Path) -> None:
    app = make_app(tmp_path, screen="devices")
    inventory = app.backend.inventory_path
    async with app.run_test(size=SIZE) as pilot:
        table = app.screen.query_one("#devices-table", DataTable)
        await wait_for(pilot, lambda: table.row_count == 1)
        await pilot.press("a")
        form = app.screen
        assert type(form).__name__ == "DeviceFormScreen"
        form.query_one("#field-name", Input).value = "jetson-1"
        form.query_one("#field-host", Input).value = "10.0.0.7"
        form.query_one("#field-port", Input).value = "70000"
        form.query_one("#field-groups", Input).value = "edge"
        await pilot.click("#save")
        # The inventory's own validation speaks inline; nothing is saved, the form stays open.
        assert "bad port 70000" in label_text(app, "#form-error")
        assert app.screen is form
        assert "jetson-1" not in load_inventory(inventory)
        form.query_one("#field-port", Input).value = "2222"
        form.query_one("#field-port", Input).focus()
        await pilot.press("enter")  # submitting any field saves
        await wait_for(pilot, lambda: table.row_count == 2)
        dev = load_inventory(inventory).get("jetson-1")
        assert (dev.host, dev.port, dev.groups) == ("10.0.0.7", 2222, ["edge"])
        assert "10.0.0.7:2222" in [str(c) for c in table.get_row("jetson-1")]
        # The run screen offers the new device too.
        run_list = app.run_screen.query(SelectionList)
        if run_list:
            await wait_for(pilot, lambda: len(run_list.first().options) == 2)
        # Edit: rename keeps one entry.
        table.move_cursor(row=table.get_row_index("jetson-1"))
        await pilot.press("e")
        app.screen.query_one("#field-name", Input).value = "jetson-one"
        app.screen.query_one("#field-name", Input).focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: "jetson-one" in load_inventory(inventory))
        assert "jetson-1" not in load_inventory(inventory)
        await wait_for(pilot, lambda: table.row_count == 2 and "jetson-one" in row_names(table))
        # Remove (after a confirmation).
        table.move_cursor(row=table.get_row_index("jetson-one"))
        await pilot.press("d")
        await pilot.click("#yes")
        await wait_for(pilot, lambda: table.row_count == 1)
        assert "jetson-one" not in load_inventory(inventory)


async def test_filter_and_bad_inventory_file(tmp_path: Path) -> None:
    bad = tmp_path / "devices.toml"
    bad.write_text("[devices.x]\nhots = 'typo'\n")
    before = bad.read_text()
    app = make_app(tmp_path, inventory=bad, screen="devices")
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "unknown key 'hots'" in label_text(app, "#devices-error"))
    assert bad.read_text() == before  # never rewritten

    good = make_app(
        tmp_path / "g" if (tmp_path / "g").mkdir() is None else tmp_path, screen="devices"
    )
    async with good.run_test(size=SIZE) as pilot:
        table = good.screen.query_one("#devices-table", DataTable)
        await wait_for(pilot, lambda: table.row_count == 1)
        await pilot.press("slash")
        await pilot.press(*"nomatch")
        assert table.row_count == 0
        await pilot.press("escape")
        assert table.row_count == 1


async def test_probe_localhost_lists_its_compilers(tmp_path: Path) -> None:
    app = make_app(tmp_path, screen="devices")
    async with app.run_test(size=SIZE) as pilot:
        table = app.screen.query_one("#devices-table", DataTable)
        await wait_for(pilot, lambda: table.row_count == 1)
        await pilot.press("p")
        screen = app.screen
        await wait_for(
            pilot, lambda: screen.status.get("localhost") not in (None, "probing..."), timeout=90
        )
        assert screen.status["localhost"] == "ok", screen.status
        assert "identity" in screen.compilers["localhost"]
        assert "identity" in str(table.get_row("localhost")[-1])


async def test_run_to_finish_then_results_and_sql(tmp_path: Path) -> None:
    sweep = write_noop_sweep(tmp_path)
    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.run_screen
        await wait_for(pilot, lambda: screen.sweep_choice() == "demo")
        screen.query_one("#sweep-file", Input).value = str(sweep)
        await pilot.press("s")
        run_id = await wait_for(pilot, lambda: screen.current_run)
        await wait_for(
            pilot, lambda: app.run_screen.model.run_states.get(run_id) == "finished", timeout=90
        )
        await pilot.pause(0.3)
        state = screen.model.device(run_id, "localhost")
        assert (state.done, state.total, state.failed) == (4, 4, 0)
        panel = screen._panels[(run_id, "localhost")]
        assert "4/4 trials" in str(panel.render())
        log = screen.query_one(Log)  # drained on the screen's timer: may lag the run's state
        await wait_for(pilot, lambda: any("run done: ok=4" in line for line in log.lines))
        assert screen.redraws > 0

        await pilot.press("3")
        results = app.screen
        assert results.id == "results"
        await wait_for(pilot, lambda: len(results.rows) == 4)
        assert results.query_one("#results-run", Select).value == run_id
        assert results.selection().variant == "conv w8"
        draws = results.draws
        assert draws >= 1
        for tab in ("speedup", "bsr", "ase", "depth"):
            await results.show_tab(tab)
            await pilot.pause(0.1)
        assert results.draws >= draws + 4
        await results.show_tab("table")
        await pilot.pause(0.1)
        table = results.query_one("#results-table", DataTable)
        assert table.row_count == 4  # 2 depths x 2 batches, one compiler
        assert "noop" in [str(c) for c in table.get_row_at(0)]

        await pilot.press("4")
        sql = app.screen
        editor = sql.query_one(TextArea)
        editor.text = "SELECT compiler, count(*) AS n FROM trials GROUP BY compiler"
        await pilot.press("ctrl+j")
        grid = sql.query_one("#sql-results", DataTable)
        await wait_for(pilot, lambda: grid.row_count == 1)
        assert [str(c) for c in grid.get_row_at(0)] == ["noop", "4"]
        assert sql.history[0].startswith("SELECT compiler")
        # Read-only by default: a write is refused with one line, nothing changes.
        editor.text = "DELETE FROM trials"
        await pilot.press("ctrl+j")
        await wait_for(
            pilot,
            lambda: (
                "read-only" in label_text(app, "#sql-status").lower()
                or "read only" in label_text(app, "#sql-status").lower()
            ),
        )
        assert app.backend.store().select("SELECT count(*) FROM trials")[1] == [(4,)]
        # Export the last good query as CSV and the trials table as Parquet.
        editor.text = "SELECT model, compiler, batch FROM trials ORDER BY batch"
        await pilot.press("ctrl+j")
        await wait_for(pilot, lambda: "4 row(s)" in label_text(app, "#sql-status"))
        sql.query_one("#sql-path", Input).value = str(tmp_path / "out.csv")
        await pilot.press("escape", "ctrl+e")
        await wait_for(pilot, lambda: (tmp_path / "out.csv").exists())
        with open(tmp_path / "out.csv") as f:
            rows = list(csv.DictReader(f))
        assert len(rows) == 4 and rows[0]["compiler"] == "noop"
        sql.query_one("#sql-format", Select).value = "parquet"
        sql.query_one("#sql-path", Input).value = str(tmp_path / "out.parquet")
        sql.last_query = "trials"
        await pilot.click("#sql-export")
        await wait_for(pilot, lambda: (tmp_path / "out.parquet").exists())
        import pyarrow.parquet as pq

        assert pq.read_table(tmp_path / "out.parquet").num_rows == 4
        # Canned queries load into the editor.
        sql.query_one("#sql-canned").highlighted = 0
        await pilot.click("#sql-canned")
        await pilot.press("enter")
        assert "runs" in editor.text.lower()


async def test_log_tail_follows_only_at_the_bottom(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.run_screen
        for i in range(60):
            screen.handle_run_event(
                RunEvent(
                    "r",
                    "d",
                    "agent",
                    event={"type": "log", "level": "info", "msg": f"line {i}"},
                    ts=0.0,
                )
            )
        log = screen.query_one(Log)
        # The log follows, also when it shrinks as the device's panel appears above it.
        await wait_for(pilot, lambda: log.line_count == 60 and len(screen._panels) == 1)
        await wait_for(pilot, lambda: log.is_vertical_scroll_end and log.scroll_y > 0, timeout=10)
        log.scroll_to(y=0, animate=False, immediate=True)
        await pilot.pause()
        for i in range(60, 80):
            screen.handle_run_event(
                RunEvent(
                    "r",
                    "d",
                    "agent",
                    event={"type": "log", "level": "info", "msg": f"line {i}"},
                    ts=0.0,
                )
            )
        await wait_for(pilot, lambda: log.line_count == 80)  # new lines land once a second
        await pilot.pause()
        assert log.scroll_y == 0  # stayed where the operator is
        log.scroll_end(animate=False)
        await pilot.pause()
        screen.handle_run_event(
            RunEvent(
                "r", "d", "agent", event={"type": "log", "level": "info", "msg": "tail"}, ts=0.0
            )
        )
        await wait_for(pilot, lambda: log.line_count == 81)
        await wait_for(pilot, lambda: log.is_vertical_scroll_end, timeout=10)


async def test_hidden_run_screen_folds_events_but_does_not_redraw(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.run_screen
        await pilot.press("4")
        before = screen.redraws
        for i in range(50):
            screen.handle_run_event(
                RunEvent("r", "dev", "agent", event={"type": "cpu", "percent": float(i)})
            )
        await pilot.pause(0.5)
        assert screen.redraws == before  # hidden: nothing drawn
        assert screen.model.device("r", "dev").cpu == 49.0
        await pilot.press("escape", "2")
        await wait_for(pilot, lambda: ("r", "dev") in screen._panels)
        assert screen.redraws > before


async def test_tuning_panel_shows_tvm_progress(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.run_screen
        screen.handle_run_event(
            RunEvent(
                "r",
                "jetson",
                "agent",
                event={
                    "type": "tuning",
                    "key": "k",
                    "trials_done": 12,
                    "budget": 64,
                    "best_ms": 3.25,
                    "tasks": [
                        {"name": "fused_conv2d", "trials": 8, "best_ms": 2.0},
                        {"name": "dense", "trials": 4, "best_ms": 1.25},
                    ],
                },
            )
        )
        panel = await wait_for(pilot, lambda: screen._panels.get(("r", "jetson")))
        await pilot.pause(0.2)
        assert panel.has_class("-tuning")
        text = str(panel.render())
        assert "12/64 trials" in text and "best 3.250 ms" in text
        assert "fused_conv2d" in text and "1.250" in text  # the per-task table
        # grew by the tuning lines (summary, rate, the task table of 2) + the border
        assert panel.outer_size.height == 4 + 5 + 2


async def test_host_key_modal_shows_fingerprint_and_defaults_to_refuse() -> None:
    app = NgbApp(Backend())
    async with app.run_test(size=SIZE) as pilot:
        answers: list[bool] = []
        app.push_screen(
            HostKeyScreen("jet", "10.0.0.5", "ssh-ed25519", "SHA256:abc", "changed"), answers.append
        )
        await pilot.pause()
        assert "SHA256:abc" in str(app.screen.query_one("#host-key-fingerprint").render())
        assert "WARNING" in str(app.screen.query_one("#host-key-warning").render())
        await pilot.press("enter")  # the focused default is "Do not trust"
        assert answers == [False]


def test_startup_imports_no_heavy_library() -> None:
    code = (
        "import sys, ngb.tui.app as m\n"
        "app = m.NgbApp()\n"
        "heavy = [n for n in ('torch', 'tvm', 'openvino', 'onnxruntime', 'timm', 'duckdb',"
        " 'asyncssh') if n in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == ""


@pytest.mark.parametrize("argv", [["--help"]])
def test_cli_help(argv: list[str]) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ngb.tui.app", *argv], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and "--inventory" in out.stdout and "--db" in out.stdout
