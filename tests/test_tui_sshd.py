"""The TUI against the real loopback sshd: trust a host key from the modal, then run sweeps on
SSH devices end to end and see their results on the Results screen."""

from __future__ import annotations

from pathlib import Path

import pytest
from ngb.devices.paths import get_paths
from ngb.tui.app import NgbApp
from ngb.tui.backend import Backend
from ngb.tui.screens.host_key import HostKeyScreen
from textual.widgets import DataTable, Input, SelectionList

from tests.test_tui_support import SIZE, wait_for, write_noop_sweep

pytestmark = pytest.mark.sshd


@pytest.fixture
def untrusted_home(sshd_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = sshd_server.make_ngb_home(tmp_path / "ngb-home", trusted=False)
    user_home = tmp_path / "user-home"
    user_home.mkdir()
    monkeypatch.setenv("NGB_HOME", str(home))
    monkeypatch.setenv("HOME", str(user_home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return home


async def test_unknown_host_key_is_shown_then_trusted(untrusted_home: Path, sshd_server) -> None:
    app = NgbApp(Backend(db_path=untrusted_home / "r.duckdb"), start_screen="devices")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        table = screen.query_one("#devices-table", DataTable)
        await wait_for(pilot, lambda: table.row_count == 4)
        table.move_cursor(row=table.get_row_index("dev-a"))
        await pilot.press("p")
        await wait_for(pilot, lambda: "host key" in screen.status.get("dev-a", ""), timeout=30)
        assert "unknown" in screen.status["dev-a"]
        assert not get_paths().known_hosts.exists()
        await pilot.press("t")
        modal = await wait_for(
            pilot, lambda: isinstance(app.screen, HostKeyScreen) and app.screen, timeout=30
        )
        assert modal.fingerprint.startswith("SHA256:") and modal.status == "unknown"
        await pilot.click("#trust")
        await wait_for(pilot, lambda: screen.status.get("dev-a") == "key trusted")
        text = get_paths().known_hosts.read_text()
        assert f"[127.0.0.1]:{sshd_server.ports[0]}" in text
        await pilot.press("p")
        await wait_for(
            pilot,
            lambda: screen.status.get("dev-a") not in ("probing...", "key trusted"),
            timeout=90,
        )
        assert screen.status["dev-a"] == "ok", screen.status
        assert "identity" in screen.compilers["dev-a"]


async def run_sweep_on(app: NgbApp, pilot, sweep: str, devices: list[str], timeout: float) -> str:
    screen = app.run_screen
    await wait_for(pilot, lambda: screen.sweep_choice() == "demo")
    selection = screen.query_one(SelectionList)
    await wait_for(pilot, lambda: len(selection.options) >= 4)
    selection.deselect_all()
    for name in devices:
        selection.select(name)
    screen.query_one("#sweep-file", Input).value = sweep
    await pilot.press("s")
    run_id = await wait_for(pilot, lambda: screen.current_run, timeout=30)
    await wait_for(
        pilot,
        lambda: screen.model.run_states.get(run_id) in ("finished", "failed", "cancelled"),
        timeout=timeout,
    )
    assert screen.model.run_states[run_id] == "finished", list(screen.model.log)[-5:]
    return run_id


async def test_noop_sweep_on_two_ssh_devices_reaches_results(
    sshd_home: Path, tmp_path: Path
) -> None:
    sweep = write_noop_sweep(tmp_path)
    app = NgbApp(Backend(db_path=tmp_path / "r.duckdb", isolate="inprocess"))
    async with app.run_test(size=SIZE) as pilot:
        run_id = await run_sweep_on(app, pilot, str(sweep), ["dev-a", "dev-b"], 120)
        for dev in ("dev-a", "dev-b"):
            assert app.run_screen.model.device(run_id, dev).done == 4
        await pilot.press("3")
        results = app.screen
        await wait_for(pilot, lambda: len(results.rows) == 8, timeout=30)
        assert {r["device"] for r in results.rows} == {"dev-a", "dev-b"}


@pytest.mark.slow
async def test_demo_sweep_over_ssh_charts_every_compiler(sshd_home: Path, tmp_path: Path) -> None:
    app = NgbApp(Backend(db_path=tmp_path / "r.duckdb"))
    async with app.run_test(size=SIZE) as pilot:
        await run_sweep_on(app, pilot, "", ["dev-a"], 900)
        await pilot.press("3")
        results = app.screen
        await wait_for(pilot, lambda: len(results.rows) >= 20, timeout=30)
        assert {"identity", "torchscript", "onnxruntime", "openvino"} <= {
            r["compiler"] for r in results.rows
        }
        await results.show_tab("speedup")
        await pilot.pause(0.2)
        chart = results.query_one("#chart-speedup")
        assert chart.plt is not None and results.draws >= 2
