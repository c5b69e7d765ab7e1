"""The Run screen at 80x24 while TVM tunes: the tuning view folds to one line so the log stays
on screen; `t` unfolds it; at 120x40 it is whole (issue 46)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ngb.sweeps.run.events import RunEvent
from ngb.tui.widgets.device_panel import DevicePanel

from tests.test_tui_support import make_app, wait_for

NOW = 1_800_000_000.0
TUNING = {
    "type": "tuning", "key": "k1", "ts": NOW, "trials_done": 32, "budget": 64,
    "best_ms": 1.25, "elapsed_s": 900.0, "s_per_trial": 11.25, "search_left_s": 360.0,
    "history": [[16, 1.9], [32, 1.25]],
    "tasks": [{"name": "fused_conv2d_add_relu", "trials": 20, "best_ms": 0.9},
              {"name": "fused_matmul", "trials": 12, "best_ms": 0.35}],
}  # fmt: skip


async def tuning_screen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: tuple[int, int]):
    monkeypatch.setattr(DevicePanel, "clock", staticmethod(lambda: NOW + 60.0))
    app = make_app(tmp_path)
    return app, app.run_test(size=size)


def feed(screen) -> None:
    screen.handle_run_event(
        RunEvent("r", "d", "connection", state="running", ts=NOW - 5, done=0, total=4)
    )
    for event in (
        {"type": "trial_started", "key": "k1", "label": "conv32x1/tvm-ms/b1", "ts": NOW - 4},
        {"type": "phase", "key": "k1", "phase": "tune", "ts": NOW - 3},
        TUNING,
    ):
        screen.handle_run_event(
            RunEvent("r", "d", "agent", state="running", event=event, ts=event["ts"])
        )


def panel_text(screen) -> str:
    panel = screen._panels.get(("r", "d"))
    return str(panel.render()) if panel is not None and panel.has_class("-tuning") else ""


async def test_at_80x24_the_tuning_view_is_one_line_and_t_unfolds_it(tmp_path, monkeypatch):
    app, running = await tuning_screen(tmp_path, monkeypatch, (80, 24))
    async with running as pilot:
        screen = app.run_screen
        await wait_for(pilot, lambda: screen.is_mounted and screen.is_current)
        feed(screen)
        text = await wait_for(pilot, lambda: panel_text(screen))
        tuning = [line for line in text.splitlines() if "TVM tuning" in line]
        assert tuning == [
            "TVM tuning: 32/64 trials (50%)   best 1.250 ms   search ETA 0:05:00   (t: curve)"
        ]  # the agent's 6 minutes, 60 s later
        assert "trials/min" not in text and "fused_matmul" not in text
        await pilot.pause()
        log = screen.query_one("#run-log")
        assert log.region.height >= 3 and log.region.bottom <= 24  # the log is still on screen
        await pilot.press("t")
        await pilot.pause()
        whole = panel_text(screen)
        assert "trials/min   search ETA 0:05:00" in whole and "fused_matmul" in whole


async def test_at_120x40_the_tuning_view_is_whole(tmp_path, monkeypatch):
    app, running = await tuning_screen(tmp_path, monkeypatch, (120, 40))
    async with running as pilot:
        screen = app.run_screen
        await wait_for(pilot, lambda: screen.is_mounted and screen.is_current)
        feed(screen)
        text = await wait_for(pilot, lambda: panel_text(screen))
        assert "5.3 trials/min   search ETA 0:05:00" in text and "fused_conv2d_add_relu" in text
