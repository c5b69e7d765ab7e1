"""The Results screen's Ops tab (issue 34): the selected model's operator classes x compilers,
from profile passes stored with their trials; SVG snapshots at 80x24 and 120x40."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from ngb.core.compilers.profiling import KernelRecord, Profile, classify
from ngb.core.records.types import Stats, TrialResult, TrialSpec
from ngb.sweeps.store.database import Store
from ngb.tui import ops_view
from ngb.tui.app import NgbApp
from ngb.tui.backend import Backend
from ngb.tui.widgets.device_panel import DevicePanel

from tests.test_tui_support import wait_for

# compiler -> (kernel, us per inference, calls per inference), a conv w16 block at batch 1;
# batch 8 takes 8x the time. Eager runs conv, batch norm and ReLU apart; the others fuse them.
KERNELS = {
    "identity": [("aten::mkldnn_convolution", 420.0, 1), ("aten::native_batch_norm", 90.0, 1),
                 ("aten::clamp_min", 40.0, 1), ("aten::empty", 10.0, 3)],
    "onnxruntime": [("FusedConv", 380.0, 1), ("ReorderOutput", 30.0, 1)],
    "openvino": [("Convolution", 300.0, 1), ("Reorder", 25.0, 2)],
}  # fmt: skip
TPUT = {"identity": 1600.0, "onnxruntime": 2300.0, "openvino": 2900.0}  # samples/s at batch 1


def profile(compiler: str, batch: int) -> Profile:
    records = [
        KernelRecord(name, name, classify(name), name.startswith("Fused") or name == "Convolution",
                     us * batch, calls)
        for name, us, calls in KERNELS[compiler]
    ]  # fmt: skip
    recorded = sum(r.us_per_inference for r in records) / 1000.0
    return Profile(compiler, "synthetic", 10, recorded * 1.02, recorded * 1.1, records,
                   precision="fp32")  # fmt: skip


def filled(path: Path) -> Path:
    store = Store(path)
    store.create_run("ops-snap", "demo", "", ["localhost"], 6, {})
    results = []
    for compiler, tput in TPUT.items():
        for batch in (1, 8):
            spec = TrialSpec(model="conv", width=16, compiler=compiler, batch=batch)
            mean = tput * (1.5 if batch == 8 else 1.0)
            p = profile(compiler, batch)
            p.timed_ms = 1000.0 * batch / mean
            results.append(
                TrialResult(
                    key=spec.key, spec=spec.to_dict(), host="lab", started_at=1.7e9,
                    finished_at=1.7e9 + 1, throughput=Stats(n=3, mean=mean, std=mean * 0.01),
                    precision="fp32",
                    repetitions=[{"iters": 100, "elapsed_s": 1.0, "throughput": mean * k}
                                 for k in (0.99, 1.0, 1.01)],
                    extra={"profile": p.to_dict()},
                )
            )  # fmt: skip
    store.ingest_results("ops-snap", "localhost", results)
    store.set_run_status("ops-snap", "done")
    store.query("UPDATE runs SET created_at = TIMESTAMP '2023-11-14 22:13:20'", allow_write=True)
    return path


def test_the_table_is_classes_by_compiler_per_batch(tmp_path: Path) -> None:
    store = Store(filled(tmp_path / "r.duckdb"))
    stored = ops_view.load(store, "ops-snap", None)
    assert len(stored) == 6 and all(p.timed_ms for _, p in stored)
    columns, rows = ops_view.table(stored, "conv w16")
    assert columns == ["b", "class", "identity", "onnxruntime", "openvino"]
    first = {r[1]: r for r in rows if r[0] == "b1"}
    assert first["convolution"][2] == "0.42 (75%)"  # 420 of 560 us recorded
    assert first["normalisation"][3:] == ["0", "0"]  # fused away
    assert "pooling" not in first  # a class no compiler spent time in is left out
    assert first["kernels (k)"][2:] == ["6", "2", "3"]
    assert {r[0] for r in rows} == {"b1", "b8"}
    _, only = ops_view.table(stored, "conv w16", ["openvino"])
    assert all(len(r) == 3 for r in only)
    assert ops_view.table(stored, "resnet18") == (["class"], [])


SIZES = {"80x24": (80, 24), "120x40": (120, 40)}


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.setattr(DevicePanel, "clock", lambda: 1.7e9 + 600)
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize("size", SIZES)
def test_ops_tab(snap_compare, tmp_path: Path, frozen, size: str) -> None:
    inventory = tmp_path / "devices.toml"
    inventory.write_text('[devices.localhost]\npython = "/usr/bin/python3"\n')
    app = NgbApp(
        Backend(db_path=filled(tmp_path / "r.duckdb"), inventory_path=inventory),
        start_screen="results", attach_on_start=False, cursor_blink=False,
    )  # fmt: skip

    async def ready(pilot) -> None:
        screen = pilot.app.screen
        await wait_for(pilot, lambda: len(screen.rows) == 6 and len(screen.profiles) == 6)
        await screen.show_tab("ops")
        await wait_for(pilot, lambda: screen.query_one("#results-ops").row_count > 0)
        await pilot.pause(0.3)

    assert snap_compare(app, terminal_size=SIZES[size], run_before=ready)
