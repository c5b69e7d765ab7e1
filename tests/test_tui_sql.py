"""The SQL console never stops the writer (issue 20, point 4) and its keyboard (point 7).

A real long query (a 4e10-row cross join) runs in the console while another thread writes to the
same store: the write goes through during the query, Escape cancels it within a second, the next
query is not queued behind it, the time limit stops one by itself, and ``q`` quits mid-query.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from ngb.sweeps.store.database import Store
from ngb.sweeps.store.snapshot import QueryCancelled, QueryJob
from ngb.tui.app import NgbApp
from ngb.tui.backend import Backend
from ngb.tui.screens.sql import RUNNING, SqlScreen
from ngb.tui.widgets.data_grid import DataGrid
from ngb.tui.widgets.sql_editor import SqlEditor
from textual.widgets import Input, Label

from tests.test_tui_support import PROMPT_S, SIZE, wait_for

# A query that runs for longer than any of these tests waits: still going after 20 s on the idle
# 2-core VM. (A plain count(*) over the same cross join finished in 3.3 s once it had both cores to
# itself, which ended a "long" query before the test could cancel it.)
LONG = "SELECT sum((a.range * b.range) % 7) FROM range(200000) a, range(200000) b"


def seeded(db: Path) -> Store:
    store = Store(db)
    store.create_run("r1", "demo", "", ["localhost"], 4, {})
    return store


def status_text(screen: SqlScreen) -> str:
    return str(screen.query_one("#sql-status", Label).render())


def test_a_query_job_cancels_and_times_out_while_the_store_takes_writes(tmp_path: Path) -> None:
    store = seeded(tmp_path / "r.duckdb")
    job = QueryJob(store, LONG)
    errors: list[Exception] = []

    def run() -> None:
        try:
            job.run()
        except QueryCancelled as exc:
            errors.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    time.sleep(0.5)  # the query is running on its copy
    begun = time.monotonic()
    store.create_run("r2", "demo", "", ["localhost"], 4, {})  # the writer does not wait
    assert time.monotonic() - begun < 5
    assert worker.is_alive()
    job.cancel()
    worker.join(5)
    assert not worker.is_alive() and str(errors[0]) == "query cancelled"
    assert {r["run_id"] for r in store.runs()} == {"r1", "r2"}
    timed = QueryJob(store, LONG, timeout_s=0.3)
    begun = time.monotonic()
    try:
        timed.run()
        raise AssertionError("the time limit did not stop the query")
    except QueryCancelled as exc:
        assert "time limit of 0.3 s" in str(exc)
    assert time.monotonic() - begun < 5


async def test_long_query_cancels_does_not_block_ingest_or_the_next_query(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    store = seeded(db)
    backend = Backend(db_path=db, inventory_path=tmp_path / "none.toml")
    app = NgbApp(backend, start_screen="sql", attach_on_start=False, settings_path=tmp_path / "s")
    async with app.run_test(size=SIZE) as pilot:
        sql = app.screen
        assert isinstance(sql, SqlScreen)
        editor = sql.query_one(SqlEditor)
        editor.text = LONG
        await pilot.press("ctrl+j")
        assert status_text(sql) == RUNNING
        await pilot.pause(0.5)
        assert sql.running
        # The live run's writer: a store write in another thread finishes during the query.
        wrote = threading.Event()

        def write() -> None:
            store.create_run("r2", "demo", "", ["localhost"], 4, {})
            wrote.set()

        threading.Thread(target=write).start()
        await wait_for(pilot, wrote.is_set, timeout=5)
        assert sql.running
        begun = time.monotonic()
        await pilot.press("escape")
        await wait_for(pilot, lambda: not sql.running, timeout=5)
        assert time.monotonic() - begun < PROMPT_S
        assert "cancelled" in status_text(sql)
        # The next query answers at once, and it sees the write.
        editor.text = "SELECT run_id FROM runs ORDER BY run_id"
        await pilot.press("ctrl+j")
        grid = sql.query_one("#sql-results", DataGrid)
        await wait_for(pilot, lambda: grid.row_count == 2, timeout=10)
        # ctrl+c cancels too; a new query replaces one in flight without waiting for it.
        editor.text = LONG
        await pilot.press("ctrl+j")
        await pilot.pause(0.3)
        await pilot.press("ctrl+c")
        await wait_for(pilot, lambda: not sql.running, timeout=5)
        assert "cancelled" in status_text(sql)
        # The time limit box stops a query by itself, and is remembered.
        sql.query_one("#sql-timeout", Input).value = "1"
        editor.text = LONG
        await pilot.press("ctrl+j")
        await wait_for(pilot, lambda: "time limit of 1 s" in status_text(sql), timeout=10)
        assert app.settings.get("sql_timeout_s") == 1
        # q quits promptly mid-query (focus out of the editor first, or q is a letter).
        sql.query_one("#sql-timeout", Input).value = "0"
        await pilot.press("ctrl+j")
        await pilot.pause(0.3)
        assert sql.running
        sql.query_one("#sql-results", DataGrid).focus()
        begun = time.monotonic()
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running, timeout=5)
    assert time.monotonic() - begun < PROMPT_S


async def test_tab_leaves_the_editor_digits_switch_until_typing_and_export_path(
    tmp_path: Path,
) -> None:
    db = tmp_path / "r.duckdb"
    seeded(db)
    backend = Backend(db_path=db, inventory_path=tmp_path / "none.toml")
    app = NgbApp(
        backend, start_screen="results", attach_on_start=False, settings_path=tmp_path / "s"
    )
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        sql = app.screen
        assert isinstance(sql, SqlScreen)
        editor = sql.query_one(SqlEditor)
        await wait_for(pilot, lambda: editor.has_focus)
        before = editor.text
        await pilot.press("5")  # not typed: the editor was only arrived at
        assert app.screen.id == "runs" and editor.text == before
        await pilot.press("4")
        await wait_for(pilot, lambda: editor.has_focus)
        editor.text = "SELECT "
        editor.move_cursor(editor.document.end)
        await pilot.press("x", "backspace", "5")  # once typing, digits are digits
        assert app.screen is sql and editor.text == "SELECT 5"
        await pilot.press("tab")
        assert not editor.has_focus and editor.text == "SELECT 5"
        # Export refuses an empty path, and uses the path typed into the box.
        await pilot.press("ctrl+j")
        # the query's own line first: it ends on a worker thread and would overwrite the next one
        await wait_for(pilot, lambda: "row(s)" in status_text(sql), timeout=30)
        await pilot.press("ctrl+e")
        assert "give an export path" in status_text(sql)
        path = sql.query_one("#sql-path", Input)
        assert path.has_focus
        target = tmp_path / "out.csv"
        await pilot.press(*str(target))
        await pilot.press("ctrl+e")
        await wait_for(pilot, target.exists, timeout=10)
        assert not (Path.cwd() / "ngb-export.csv").exists()


async def test_write_mode_grants_the_store_only(tmp_path: Path) -> None:
    """'allow writes' changes the store and nothing else (issue 31, item 1): COPY over the store,
    its WAL, the inventory or a FIFO, ATTACH and EXPORT are refused with one line, both on the
    console's screen and through its query jobs, and every file stays byte-identical."""
    import os

    from ngb.core.base.errors import NgbError
    from textual.widgets import Switch

    db = tmp_path / "r.duckdb"
    store = seeded(db)
    inventory = tmp_path / "devices.toml"
    inventory.write_text("x = 1\n")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    before = db.read_bytes()
    hostile = [
        f"COPY (SELECT 1) TO '{db}' (FORMAT csv)",
        f"COPY (SELECT 1) TO '{db}.wal' (FORMAT csv)",
        f"COPY (SELECT 1) TO '{inventory}' (FORMAT csv)",
        f"COPY (SELECT 1) TO '{fifo}' (FORMAT csv)",
        f"COPY (SELECT 1) TO '{tmp_path}/leak.csv' (FORMAT csv)",
        f"ATTACH '{db}.wal' AS w",
        f"EXPORT DATABASE '{tmp_path}/dump'",
        "SET enable_external_access = true",
        f"FROM read_text('{inventory}') SELECT *",
    ]
    for sql in hostile:
        for allow_write in (False, True):
            try:
                QueryJob(store, sql, allow_write=allow_write).run()
                raise AssertionError(f"ran: {sql} (allow_write={allow_write})")
            except NgbError as exc:
                assert "\n" not in str(exc)
    assert db.read_bytes() == before and inventory.read_text() == "x = 1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["devices.toml", "fifo", "r.duckdb"]
    # What write mode is for still works: a change to the store itself.
    QueryJob(store, "UPDATE runs SET sweep_name = 'renamed'", allow_write=True).run()
    assert store.run("r1")["sweep_name"] == "renamed"

    backend = Backend(db_path=db, inventory_path=inventory)
    app = NgbApp(backend, start_screen="sql", attach_on_start=False, settings_path=tmp_path / "s")
    async with app.run_test(size=SIZE) as pilot:
        sql = app.screen
        assert isinstance(sql, SqlScreen)
        sql.query_one("#sql-write", Switch).value = True
        await pilot.pause(0.2)  # the switch's own status line first
        sql.query_one(SqlEditor).text = f"COPY (SELECT 1) TO '{tmp_path}/leak.csv' (FORMAT csv)"
        await pilot.pause(0.2)
        await pilot.press("ctrl+j")
        await wait_for(pilot, lambda: "cannot read or write files" in status_text(sql), timeout=30)
    assert not (tmp_path / "leak.csv").exists()
    assert inventory.read_text() == "x = 1\n"


def test_a_copy_is_reused_while_the_store_is_unchanged_and_renewed_after_a_write(
    tmp_path: Path,
) -> None:
    """Console queries on an unchanged store share one private copy (issue 31, item 12: a
    whole-store copy per query); a write makes the next query copy again and see it."""
    from ngb.sweeps.store import snapshot as store_snapshot

    store = seeded(tmp_path / "r.duckdb")
    time.sleep(2 * store_snapshot.FRESH_S)  # a file changed just now is never reused
    sql = "SELECT run_id FROM runs ORDER BY run_id"
    assert QueryJob(store, sql).run()[1] == [("r1",)]
    key = str(store.path.resolve())
    first = store_snapshot._snapshots[key]
    assert QueryJob(store, sql).run()[1] == [("r1",)]
    assert store_snapshot._snapshots[key] is first  # no second copy
    store.create_run("r2", "demo", "", ["localhost"], 4, {})
    time.sleep(2 * store_snapshot.FRESH_S)
    assert QueryJob(store, sql).run()[1] == [("r1",), ("r2",)]
    renewed = store_snapshot._snapshots[key]
    assert renewed is not first
    assert first.copy is not None and not first.copy.exists()  # the old copy is gone


def test_two_queries_at_once_share_the_copy(tmp_path: Path) -> None:
    from ngb.sweeps.store import snapshot as store_snapshot

    store = seeded(tmp_path / "r.duckdb")
    time.sleep(2 * store_snapshot.FRESH_S)
    long = QueryJob(store, LONG)
    worker = threading.Thread(target=lambda: pytest.raises(QueryCancelled, long.run))
    worker.start()
    time.sleep(0.5)
    assert QueryJob(store, "SELECT count(*) FROM runs").run()[1] == [(1,)]  # while LONG runs
    long.cancel()
    worker.join(5)
    assert not worker.is_alive()
