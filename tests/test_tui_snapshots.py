"""SVG snapshots of each screen (pytest-textual-snapshot), with time and cursor blink frozen.

Every input is fixed: the inventory, a results database filled with synthetic but real
``TrialResult`` rows, RunEvents with fixed timestamps (rendered in UTC) and a MockClock under the
progress bars. Update after an intended change with ``pytest --snapshot-update``.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from ngb.core.records.types import Stats, TrialResult, TrialSpec
from ngb.sweeps.run.orchestrator import RunEvent
from ngb.sweeps.store.database import Store
from ngb.tui.app import NgbApp
from ngb.tui.backend import Backend
from ngb.tui.screens.confirm import ConfirmScreen
from ngb.tui.screens.host_key import HostKeyScreen
from ngb.tui.widgets.device_panel import DevicePanel
from textual.widgets import Input, TextArea

from tests.test_tui_support import wait_for

INVENTORY = """\
[devices.localhost]
python = "/usr/bin/python3"

[devices.jetson-1]
host = "10.0.0.7"
port = 2222
user = "ubuntu"
groups = ["edge"]

[devices.xeon]
host = "xeon.lab"
groups = ["cloud"]
"""

# identity / onnxruntime / openvino throughput (samples/s) of a conv w16 block by depth and batch
TPUT = {
    ("identity", 1, 1): 900.0,
    ("identity", 1, 8): 4000.0,
    ("identity", 1, 32): 9000.0,
    ("onnxruntime", 1, 1): 1500.0,
    ("onnxruntime", 1, 8): 7800.0,
    ("onnxruntime", 1, 32): 15000.0,
    ("openvino", 1, 1): 1300.0,
    ("openvino", 1, 8): 9100.0,
    ("openvino", 1, 32): 21000.0,
    ("identity", 2, 32): 5000.0,
    ("onnxruntime", 2, 32): 7600.0,
    ("openvino", 2, 32): 10500.0,
    ("identity", 4, 32): 2600.0,
    ("onnxruntime", 4, 32): 3700.0,
    ("openvino", 4, 32): 5000.0,
}

# relative spread of the three repetitions (default 1 %): a noisy OpenVINO batch-1 trial, marked
# unstable and not significantly faster than identity ("n.s." in the table)
NOISY = {("openvino", 1, 1): 0.4}
SIZES = {"80x24": (80, 24), "120x40": (120, 40), "200x60": (200, 60)}


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.setattr(DevicePanel, "clock", lambda: 1.7e9 + 600)
    yield
    monkeypatch.undo()
    time.tzset()


def filled_store(path: Path) -> Path:
    store = Store(path)
    store.create_run("demo-snap", "demo", "", ["localhost"], len(TPUT), {})
    results = []
    for (compiler, depth, batch), tput in TPUT.items():
        spread = NOISY.get((compiler, depth, batch), 0.01)
        spec = TrialSpec(model="conv", width=16, depth=depth, compiler=compiler, batch=batch)
        results.append(
            TrialResult(
                key=spec.key,
                spec=spec.to_dict(),
                host="lab",
                started_at=1.7e9,
                finished_at=1.7e9 + 1,
                throughput=Stats(n=3, mean=tput, std=tput * spread),
                unstable=spread > 0.1,
                repetitions=[
                    {"iters": 100, "elapsed_s": 1.0, "throughput": tput * (1 + k * spread)}
                    for k in (-1, 0, 1)
                ],
            )
        )
    store.ingest_results("demo-snap", "localhost", results)
    store.set_run_status("demo-snap", "done")
    # fixed times, so the Runs view's "created" column is the same in every snapshot
    store.query("UPDATE runs SET created_at = TIMESTAMP '2023-11-14 22:13:20'", allow_write=True)
    return path


# The filled store is the same for every snapshot: built once per module, copied per test (a
# copy, so a screen that writes cannot change another test's data).
_STORE_TEMPLATE: list[Path] = []


@pytest.fixture(scope="module", autouse=True)
def _store_template(tmp_path_factory: pytest.TempPathFactory) -> None:
    _STORE_TEMPLATE[:] = [filled_store(tmp_path_factory.mktemp("snap-store") / "r.duckdb")]


def _copy_of_the_filled_store(tmp_path: Path) -> Path:
    (template,) = _STORE_TEMPLATE
    for part in template.parent.iterdir():  # the database and any write-ahead log beside it
        shutil.copyfile(part, tmp_path / part.name)
    return tmp_path / template.name


def snapshot_app(tmp_path: Path, screen: str) -> NgbApp:
    inventory = tmp_path / "devices.toml"
    inventory.write_text(INVENTORY)
    db = _copy_of_the_filled_store(tmp_path)
    # cursor_blink=False: every Input / TextArea is steady from its first frame. Switching blink
    # off later (as this file once did) left the SQL editor's cursor drawn or not depending on
    # the blink timer's phase at that moment: one of the two causes of the flaky
    # test_sql_screen_with_a_result (the other, result columns cut to header width when a paint
    # beat the DataTable's idle measurement, is fixed in ngb.tui.widgets.table_fill).
    return NgbApp(
        Backend(db_path=db, inventory_path=inventory),
        start_screen=screen,
        attach_on_start=False,
        cursor_blink=False,
    )


def no_blink(app: NgbApp) -> None:
    """Check (not set) that the screen's text cursors are steady, as the app was asked."""
    for widget in app.screen.query("Input, TextArea"):
        assert isinstance(widget, Input | TextArea)
        assert widget.cursor_blink is False, widget


@pytest.mark.parametrize("size", SIZES)
def test_devices_screen(snap_compare, tmp_path: Path, frozen, size: str) -> None:
    async def ready(pilot) -> None:
        await wait_for(pilot, lambda: pilot.app.screen.query_one("#devices-table").row_count == 3)
        no_blink(pilot.app)

    app = snapshot_app(tmp_path, "devices")
    assert snap_compare(app, terminal_size=SIZES[size], run_before=ready)


@pytest.mark.parametrize("size", SIZES)
def test_run_screen_live(snap_compare, tmp_path: Path, frozen, size: str) -> None:
    events = [
        RunEvent(
            "demo-snap",
            "localhost",
            "connection",
            state="running",
            message="following the agent",
            ts=1.7e9,
        ),
        RunEvent(
            "demo-snap",
            "localhost",
            "agent",
            state="running",
            total=24,
            done=9,
            failed=1,
            event={"type": "trial_started", "label": "conv32x2/openvino/b8"},
            ts=1.7e9,
        ),
        RunEvent(
            "demo-snap", "localhost", "agent", event={"type": "phase", "phase": "measure"}, ts=1.7e9
        ),
        RunEvent(
            "demo-snap",
            "localhost",
            "agent",
            event={"type": "progress", "rep": 2, "reps": 3},
            ts=1.7e9,
        ),
        *[
            RunEvent(
                "demo-snap",
                "localhost",
                "agent",
                ts=1.7e9 + i,
                event={
                    "type": "cpu",
                    "percent": float(30 + (i * 37) % 70),
                    "proc_percent": 95.0,
                    "per_cpu": [float((i + c * 13) % 100) for c in range(8)],
                    "mem_percent": 31.0,
                    "mem_used_mb": 7577.6,
                    "mem_total_mb": 24576.0,
                },
            )
            for i in range(30)
        ],
        RunEvent("demo-snap", "jetson-1", "connection", state="running", ts=1.7e9),
        RunEvent(
            "demo-snap",
            "jetson-1",
            "agent",
            total=4,
            done=1,
            ts=1.7e9 + 5,
            event={
                "type": "tuning",
                "trials_done": 48,
                "budget": 200,
                "best_ms": 4.125,
                "tasks": [
                    {"name": "fused_conv2d_add_relu", "trials": 32, "best_ms": 3.5},
                    {"name": "fused_matmul", "trials": 16, "best_ms": 0.625},
                ],
            },
        ),
        RunEvent(
            "demo-snap",
            "jetson-1",
            "agent",
            ts=1.7e9 + 6,
            event={"type": "log", "level": "info", "msg": "MetaSchedule round 3 of 10"},
        ),
    ]

    async def ready(pilot) -> None:
        screen = pilot.app.run_screen
        await wait_for(pilot, lambda: screen.sweep_choice() == "demo")
        await wait_for(
            pilot, lambda: "trials per device" in str(screen.query_one("#sweep-summary").render())
        )
        for ev in events:
            screen.handle_run_event(ev)
        await wait_for(pilot, lambda: len(screen._panels) == 2)
        pilot.app.set_focus(None)
        await pilot.press("k")  # per-core bars on
        await pilot.pause(0.3)
        no_blink(pilot.app)

    assert snap_compare(snapshot_app(tmp_path, "run"), terminal_size=SIZES[size], run_before=ready)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("tab", ["throughput", "speedup", "ase", "depth", "table"])
def test_results_screen(snap_compare, tmp_path: Path, frozen, tab: str, size: str) -> None:
    async def ready(pilot) -> None:
        screen = pilot.app.screen
        await wait_for(pilot, lambda: len(screen.rows) == len(TPUT))
        await wait_for(pilot, lambda: screen.advice_ready)  # the advice line follows the rows
        await screen.show_tab(tab)
        await pilot.pause(0.3)
        no_blink(pilot.app)

    app = snapshot_app(tmp_path, "results")
    assert snap_compare(app, terminal_size=SIZES[size], run_before=ready)


@pytest.mark.parametrize("size", SIZES)
def test_sql_screen_with_a_result(snap_compare, tmp_path: Path, frozen, size: str) -> None:
    async def ready(pilot) -> None:
        await pilot.press("ctrl+j")
        await wait_for(pilot, lambda: pilot.app.screen.query_one("#sql-results").row_count == 3)
        await pilot.pause(0.3)
        no_blink(pilot.app)

    assert snap_compare(snapshot_app(tmp_path, "sql"), terminal_size=SIZES[size], run_before=ready)


@pytest.mark.parametrize("size", SIZES)
def test_runs_screen(snap_compare, tmp_path: Path, frozen, size: str) -> None:
    async def ready(pilot) -> None:
        await wait_for(pilot, lambda: pilot.app.screen.query_one("#runs-table").row_count == 1)
        await pilot.pause(0.2)

    assert snap_compare(snapshot_app(tmp_path, "runs"), terminal_size=SIZES[size], run_before=ready)


@pytest.mark.parametrize("size", SIZES)
def test_add_device_form(snap_compare, tmp_path: Path, frozen, size: str) -> None:
    async def ready(pilot) -> None:
        await wait_for(pilot, lambda: pilot.app.screen.query_one("#devices-table").row_count == 3)
        await pilot.press("a")
        await pilot.pause(0.3)

    app = snapshot_app(tmp_path, "devices")
    assert snap_compare(app, terminal_size=SIZES[size], run_before=ready)


@pytest.mark.parametrize("size", SIZES)
def test_help_modal(snap_compare, tmp_path: Path, frozen, size: str) -> None:
    async def ready(pilot) -> None:
        await pilot.pause(0.2)
        await pilot.press("question_mark")
        await pilot.pause(0.2)

    app = snapshot_app(tmp_path, "devices")
    assert snap_compare(app, terminal_size=SIZES[size], run_before=ready)


@pytest.mark.parametrize("size", SIZES)
def test_confirm_dialog(snap_compare, tmp_path: Path, frozen, size: str) -> None:
    """The yes/no modal as the Devices screen's Remove opens it (the safe "No" has the focus)."""

    async def ready(pilot) -> None:
        await wait_for(pilot, lambda: pilot.app.screen.query_one("#devices-table").row_count == 3)
        await pilot.press("d")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmScreen))
        await pilot.pause(0.2)

    app = snapshot_app(tmp_path, "devices")
    assert snap_compare(app, terminal_size=SIZES[size], run_before=ready)


@pytest.mark.parametrize("size", SIZES)
def test_host_key_modal(snap_compare, tmp_path: Path, frozen, size: str) -> None:
    """The trust modal for a key that differs from the one on record (its warning shown)."""

    async def ready(pilot) -> None:
        await wait_for(pilot, lambda: pilot.app.screen.query_one("#devices-table").row_count == 3)
        fingerprint = "SHA256:nThbg6kXUpJWGl7E1IGOCspRomTxdCARLviKw6E5SY8"
        modal = HostKeyScreen("jetson-1", "10.0.0.7:2222", "ssh-ed25519", fingerprint, "changed")
        await pilot.app.push_screen(modal)
        await pilot.pause(0.2)

    app = snapshot_app(tmp_path, "devices")
    assert snap_compare(app, terminal_size=SIZES[size], run_before=ready)


@pytest.mark.parametrize("size", SIZES)
def test_run_screen_slurm_queue(snap_compare, tmp_path: Path, frozen, size: str) -> None:
    """Slurm devices on the Run screen: one node's job waits in the queue with Slurm's reason
    (as ``sweeps/device_queue`` words it); the other runs a trial, and its job's line (node,
    time left) stays under the trial's label, counted down from the poll 598 s before the
    frozen clock: 1:59:10 then, 1:49:12 now (issue 36)."""
    events = [
        RunEvent(
            "slurm-snap", "a100", "connection", state="running", ts=1.7e9,
            message="slurm: PENDING (Resources)",
        ),
        RunEvent(
            "slurm-snap", "a100.1", "agent", state="running", total=12, done=3, ts=1.7e9 + 1,
            event={"type": "trial_started", "label": "resnet50/onnxruntime/b32"},
        ),
        # the queue poll (every 3 s) after the trial started
        RunEvent(
            "slurm-snap", "a100.1", "connection", state="running", ts=1.7e9 + 2,
            message="slurm: RUNNING on gpu07@a100, 1:59:10 left (job 4242)",
        ),
    ]  # fmt: skip

    async def ready(pilot) -> None:
        screen = pilot.app.run_screen
        await wait_for(pilot, lambda: screen.sweep_choice() == "demo")
        for ev in events:
            screen.handle_run_event(ev)
        await wait_for(pilot, lambda: len(screen._panels) == 2)
        pilot.app.set_focus(None)
        await pilot.pause(0.3)
        no_blink(pilot.app)

    assert snap_compare(snapshot_app(tmp_path, "run"), terminal_size=SIZES[size], run_before=ready)
