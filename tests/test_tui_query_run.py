"""A long SQL query in the console while a run ingests (issue 20, done-when): the run's results
keep reaching the database during the query, Escape cancels it, and ``q`` quits the console with
another query in flight and the run still going (it goes on on its device; the test cancels it
afterwards). Neither waits for the query: Escape ends it within ``PROMPT_S``, and ``q`` cancels
it and exits after the run's final flush (``QUIT_S``)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ngb.tui.app import NgbApp
from ngb.tui.backend import Backend
from ngb.tui.screens.sql import SqlScreen
from ngb.tui.widgets.data_grid import DataGrid
from ngb.tui.widgets.sql_editor import SqlEditor
from textual.widgets import Input

from tests.noop_sweeps import noop_sweep
from tests.test_tui_sql import LONG
from tests.test_tui_support import PROMPT_S, SIZE, wait_for

# Quitting detaches from the run and flushes its buffered results to the store before exiting:
# 0.55 s on a quiet 2-core VM, 3.16 s once beside three other xdist workers (2026-11-27). LONG
# runs for over 20 s, so a quit that waited for it is still told apart.
QUIT_S = 10.0


async def test_a_60_s_query_during_a_run_ingest_goes_on_escape_cancels_q_quits(
    tmp_path: Path,
) -> None:
    db, inventory = tmp_path / "r.duckdb", tmp_path / "devices.toml"
    inventory.write_text(
        f'[devices.localhost]\npython = "{sys.executable}"\nworkdir = "{tmp_path / "device"}"\n'
    )
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(noop_sweep(120, compile_s=0.2).to_toml())
    # Flush every 0.2 s (default 10 s on localhost) so ingest during the query is visible.
    backend = Backend(db, inventory, isolate="inprocess",
                      orchestrator_options={"local_flush_interval": 0.2})  # fmt: skip
    app = NgbApp(backend, start_screen="run", attach_on_start=False,
                 settings_path=tmp_path / "tui.json")  # fmt: skip
    ingests: list[float] = []
    run_id = ""
    try:
        async with app.run_test(size=SIZE) as pilot:
            run = app.run_screen
            fold = run.handle_run_event

            def counting(ev: Any) -> None:  # when results reached the database
                if ev.kind == "ingest":
                    ingests.append(time.monotonic())
                fold(ev)

            run.handle_run_event = counting  # type: ignore[method-assign]
            run.query_one("#sweep-file", Input).value = str(sweep)
            await pilot.pause()
            run.action_start()
            await wait_for(pilot, lambda: ingests, timeout=60)  # the run stores results
            run_id = run.current_run
            app.set_focus(None)
            await pilot.press("4")
            sql = app.screen
            assert isinstance(sql, SqlScreen)
            sql.query_one("#sql-timeout", Input).value = "60"
            editor = sql.query_one(SqlEditor)
            editor.text = LONG
            await pilot.press("ctrl+j")
            began = time.monotonic()
            await pilot.pause(0.3)
            assert sql.running
            # Ingest goes on while the query runs: two more batches stored during it.
            await wait_for(pilot, lambda: sum(t > began for t in ingests) >= 2, timeout=30)
            assert sql.running, "the query ended by itself: it did not overlap the ingest"
            pressed = time.monotonic()
            await pilot.press("escape")
            await wait_for(pilot, lambda: not sql.running, timeout=5)
            assert time.monotonic() - pressed < PROMPT_S
            # A second long query in flight, the run still going: q quits without waiting for it.
            editor.text = LONG
            await pilot.press("ctrl+j")
            await pilot.pause(0.3)
            assert sql.running and not run.model.devices_of(run_id)[0].finished
            sql.query_one("#sql-results", DataGrid).focus()
            in_flight = list(app.backend._queries)
            assert in_flight and not any(job.cancelled for job in in_flight)
            pressed = time.monotonic()
            await pilot.press("q")
            await wait_for(pilot, lambda: not app.is_running, timeout=QUIT_S, step=0.02)
            quit_s = time.monotonic() - pressed
        # q stopped the query rather than waiting for it ...
        assert all(job.cancelled for job in in_flight)
        # ... and took the final flush of the run's results, not the query's 20 s
        assert quit_s < QUIT_S, f"q took {quit_s:.2f} s"
    finally:
        if run_id:  # the run went on on its device: stop it (the agent is our process)
            subprocess.run(
                [str(Path(sys.executable).with_name("ngb")), "cancel", run_id,
                 "--db", str(db), "--inventory", str(inventory)],
                capture_output=True, timeout=60,
            )  # fmt: skip
