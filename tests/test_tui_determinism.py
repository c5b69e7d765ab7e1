"""What keeps screen captures independent of timing: steady cursors and up-front column widths."""

from __future__ import annotations

from pathlib import Path

from ngb.tui.app import NgbApp, build_parser
from ngb.tui.backend import Backend
from ngb.tui.widgets.table_fill import MAX_COLUMN_WIDTH, fill_table
from textual.app import App, ComposeResult
from textual.widgets import DataTable, Input, TextArea

from tests.test_tui_support import SIZE, wait_for, write_local_inventory


class TableApp(App[None]):
    def compose(self) -> ComposeResult:
        yield DataTable(id="t")


async def test_fill_table_sizes_columns_before_any_idle() -> None:
    app = TableApp()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(DataTable)
        rows = [("onnxruntime", 5, "[red]x[/]"), ("identity", 12345, "y" * 200)]
        fill_table(table, ["compiler", "n", "note"], rows, keys=["a", "b"])
        # Checked synchronously: no idle has run, yet every width is already final.
        widths = [(c.auto_width, c.width) for c in table.ordered_columns]
        assert widths == [(False, len("onnxruntime")), (False, 5), (False, MAX_COLUMN_WIDTH)]
        # Cells are plain text: brackets from the database are shown, not parsed as markup.
        assert [str(c) for c in table.get_row("a")] == ["onnxruntime", "5", "[red]x[/]"]
        fill_table(table, ["only"], [("z",)])
        assert table.row_count == 1 and len(table.columns) == 1
        await pilot.pause()


async def test_steady_cursors_from_the_first_frame(tmp_path: Path) -> None:
    backend = Backend(db_path=tmp_path / "r.duckdb", inventory_path=write_local_inventory(tmp_path))
    app = NgbApp(backend, start_screen="sql", attach_on_start=False, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.screen.id == "sql")
        editors = list(app.screen.query("Input, TextArea"))
        assert any(isinstance(w, TextArea) for w in editors)
        assert all(isinstance(w, Input | TextArea) and not w.cursor_blink for w in editors)
        await pilot.press("escape", "1")  # leave the editor, or "1" is typed into it
        await wait_for(pilot, lambda: app.screen.id == "devices")
        assert all(not w.cursor_blink for w in app.screen.query("Input"))


async def test_cursors_blink_by_default(tmp_path: Path) -> None:
    backend = Backend(db_path=tmp_path / "r.duckdb", inventory_path=write_local_inventory(tmp_path))
    app = NgbApp(backend, start_screen="sql", attach_on_start=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.screen.id == "sql")
        assert app.screen.query_one("#sql-editor", TextArea).cursor_blink is True


def test_no_blink_flag() -> None:
    assert build_parser().parse_args(["--no-blink"]).no_blink is True
    assert build_parser().parse_args([]).no_blink is False
