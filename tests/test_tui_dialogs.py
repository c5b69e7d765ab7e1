"""Dialogs and keys that must not surprise (issue 20, points 6 and 7): confirm dialogs focus the
safe answer, Escape on an edited device form asks before throwing the edits away, the Runs keys act
wherever the focus is, the 80-column Results table keeps its key columns, and the charts give each
compiler its own colour and marker."""

from __future__ import annotations

from pathlib import Path

from ngb.sweeps.store.database import Store
from ngb.tui.narrow_table import fit, narrow, table_width
from ngb.tui.results_data import TABLE_COLUMNS, Chart
from ngb.tui.screens.confirm import ConfirmScreen
from ngb.tui.screens.device_form import DeviceFormScreen
from ngb.tui.widgets.result_chart import legend, style_of, whisker, y_range
from textual.widgets import DataTable, Input

from tests.test_tui_support import make_app, wait_for


async def test_escape_asks_before_discarding_edits_and_enter_keeps_them(tmp_path: Path) -> None:
    app = make_app(tmp_path, screen="devices")
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.screen.query_one("#devices-table", DataTable)
        await wait_for(pilot, lambda: table.row_count == 1)
        await pilot.press("a")
        assert isinstance(app.screen, DeviceFormScreen)
        await pilot.press("escape")  # nothing typed: closes at once
        assert not isinstance(app.screen, DeviceFormScreen)
        await pilot.press("a")
        form = app.screen
        await pilot.press(*"edge-7")
        await pilot.press("escape")
        assert isinstance(app.screen, ConfirmScreen)
        assert app.focused is not None and app.focused.id == "no"  # the safe answer
        await pilot.press("enter")  # a reflexive Enter keeps the edits
        assert app.screen is form and form.query_one("#field-name", Input).value == "edge-7"
        await pilot.press("escape", "y")
        assert not isinstance(app.screen, DeviceFormScreen | ConfirmScreen)
        assert table.row_count == 1  # nothing saved


async def test_runs_keys_work_without_the_table_focused(tmp_path: Path) -> None:
    app = make_app(tmp_path, screen="runs")
    app.attach_on_start = False
    assert app.backend.db_path is not None
    store = Store(app.backend.db_path)
    store.create_run("r1", "demo", "", ["localhost"], 4, {})
    store.set_run_status("r1", "running")
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.screen.query_one("#runs-table", DataTable)
        await wait_for(pilot, lambda: table.row_count == 1)
        app.set_focus(None)
        await pilot.press("c")
        assert isinstance(app.screen, ConfirmScreen)
        assert app.focused is not None and app.focused.id == "no"
        await pilot.press("n")


def test_the_narrow_table_keeps_the_key_columns() -> None:
    row = ("conv w16", "onnxruntime", "8", "2", "3", "7800 [7610, 7990]", "1.95 [1.88, 2.02]",
           "5.200", "0.650", "1.170", "unstable")  # fmt: skip
    numeric = set(range(2, 10))
    table = narrow(TABLE_COLUMNS, [row], numeric)
    assert table.columns == ["comp", "b×d", "tput [95%]", "speed-up [95%]", "RTR", "ASE", "BSR",
                             "flags"]  # fmt: skip
    assert table.rows == [["ORT", "8×2", "7800 [7610, 7990]", "1.95 [1.88, 2.02]", "5.200",
                           "0.650", "1.170", "unst"]]  # fmt: skip
    assert table.numeric == {1, 2, 3, 4, 5, 6}
    # too wide still: intervals give way, RTR's first, the speed-up's never
    derived = ("10.00 [9.77, 10.23]", "0.3125 [0.3054, 0.3197]", "16 [5, 44] n.s.")
    wide = row[:7] + derived + row[10:]
    whole = fit(TABLE_COLUMNS, [wide], numeric, 200)
    assert whole.columns == list(TABLE_COLUMNS) and not whole.note  # it fits: as it is
    tight = fit(TABLE_COLUMNS, [wide], numeric, 76)
    assert tight.shed == ["RTR", "BSR", "ASE", "throughput [95%]"]
    assert tight.rows[0][2:7] == ["7800", "1.95 [1.88, 2.02]", "10.00", "0.3125", "16 n.s."]
    assert table_width(tight.columns, tight.rows) <= 76
    assert "no interval on RTR, BSR, ASE, tput" in tight.note
    roomy = fit(TABLE_COLUMNS, [wide], numeric, 116)
    assert roomy.shed == ["RTR"] and roomy.rows[0][5] == "0.3125 [0.3054, 0.3197]"


def test_chart_styles_are_distinct_stable_and_the_axis_holds_the_whiskers() -> None:
    names = ["identity", "onnxruntime", "openvino", "torchscript", "inductor", "tvm", "tensorrt"]
    styles = [style_of(n) for n in names]
    assert len({c for c, _ in styles}) == len(names) and len({m for _, m in styles}) == len(names)
    assert style_of("my-compiler") == style_of("my-compiler")  # stable, not Python's hash
    text = legend(["identity", "openvino"])
    assert text.plain == "● identity  ▲ openvino"
    # whiskers are the printed bounds, asymmetric as a ratio's are
    chart = Chart(title="t", series={"a": [1.0, 2.0, None]},
                  errors={"a": [(0.5, 1.5), (0.4, 5.0), None]}, reference=1.0)  # fmt: skip
    assert y_range(chart) == (0.4, 5.0)
    # on a log axis a bound at or below zero (a slope's) never reaches the log
    chart = Chart(title="t", series={"a": [-0.2, 2.0]}, errors={"a": [(-0.5, 0.1), (1.0, 3.0)]},
                  log_y=True)  # fmt: skip
    assert y_range(chart) == (0.1, 3.0) and whisker(chart, (-0.5, 0.1)) == (0.1, 0.1)


async def test_editing_a_devices_port_drops_its_old_probe_error(tmp_path: Path) -> None:
    from tests.test_tui_support import write_local_inventory

    inventory = write_local_inventory(
        tmp_path, '[devices.deadhost]\nhost = "127.0.0.1"\nport = 1\nuser = "nobody"\n'
    )
    app = make_app(tmp_path, screen="devices", inventory=inventory)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        table = screen.query_one("#devices-table", DataTable)
        await wait_for(pilot, lambda: table.row_count == 2)
        table.move_cursor(row=[str(r.value) for r in table.rows].index("deadhost"))
        await pilot.press("p")
        await wait_for(pilot, lambda: screen.status.get("deadhost", "").startswith("error"))
        await pilot.press("e")
        assert isinstance(app.screen, DeviceFormScreen)
        port = app.screen.query_one("#field-port", Input)
        port.value = "2"
        await pilot.press("enter")
        await wait_for(pilot, lambda: "error" not in screen.status.get("deadhost", "error"))
        # the status is dropped at once, the table drawn again once the inventory is read back
        # (load_devices, a thread): under load that came after the status (CI, 2026-11-30)
        await wait_for(pilot, lambda: "127.0.0.1:2" in str(table.get_row("deadhost")[2]))
        row = table.get_row("deadhost")
        assert "error" not in str(row[4]) and "127.0.0.1:2" in str(row[2])
