"""A store an older ngb wrote is read, never upgraded, by every reader (issue 41: `ngb compare
--db old.duckdb` upgraded the file in place). Readers answer from a private copy upgraded to this
ngb's schema; the file keeps its bytes until a write upgrades it. An "older" store here is one of
today's schema read by an ngb whose migrations gained one more step (``monkeypatch``)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from ngb.sweeps.store import older, schema
from ngb.sweeps.store import snapshot as store_snapshot
from ngb.sweeps.store.database import Store
from ngb.sweeps.store.snapshot import QueryJob, export
from ngb.sweeps.store.wal_marker import deferred_checkpoints

# a table of its own: a new column of runs would break ngb's positional INSERT of a run
STEP = ("notes on runs", ["CREATE TABLE notes (run_id VARCHAR, note VARCHAR)"])


def new_run(store: Store, run_id: str) -> None:
    store.create_run(run_id, "demo", "", ["localhost"], 1)


def files(folder: Path) -> dict[str, bytes]:
    """Every file beside the store, with its bytes (what a read must leave as it was)."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def file_version(path: Path) -> int:
    conn = duckdb.connect(str(path), read_only=True)
    try:
        row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
    finally:
        conn.close()
    assert row is not None
    return int(row[0])


@pytest.fixture
def newer_ngb(monkeypatch: pytest.MonkeyPatch) -> None:
    """This ngb knows one migration step more than the store's file has."""
    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, STEP])


@pytest.fixture
def older_path(tmp_path: Path) -> Path:
    store = Store(tmp_path / "store" / "results.duckdb")
    new_run(store, "r1")
    return store.path


@pytest.fixture(autouse=True)
def _no_kept_copies() -> Iterator[None]:
    """The copies a test's readers kept go with it."""
    yield
    for kept in older._kept.values():
        kept.folder.cleanup()
    older._kept.clear()


def test_every_reader_leaves_an_older_file_as_it_was(
    older_path: Path, newer_ngb: None, tmp_path: Path
) -> None:
    before = files(older_path.parent)
    store = Store(older_path)
    assert [r["run_id"] for r in store.runs()] == ["r1"]
    assert "notes" in store.tables()  # the upgraded schema answers
    assert store.query("SELECT count(*) FROM notes")[1] == [(0,)]
    assert list(store.frame("SELECT run_id FROM runs")["run_id"]) == ["r1"]
    # the console's queries (a shared copy, twice) and `ngb query` (on the file first)
    sql = "SELECT run_id, note FROM runs LEFT JOIN notes USING (run_id)"
    assert QueryJob(store, sql).run()[1] == [("r1", None)]
    assert QueryJob(store, "SELECT count(*) FROM notes").run()[1] == [(0,)]
    assert QueryJob(Store(older_path), sql, hold_s=5.0).run()[1] == [("r1", None)]
    out = tmp_path / "runs.parquet"
    assert export(Store(older_path), out, "parquet", sql) == 1
    assert pq.read_table(out).column_names == ["run_id", "note"]
    assert files(older_path.parent) == before
    assert file_version(older_path) == len(schema.MIGRATIONS) - 1
    assert not store._schema_checked  # an upgraded copy says nothing of the file's version
    store_snapshot._snapshots.pop(str(older_path.resolve())).drop()  # the console's kept copy


def test_the_first_write_upgrades_the_file(older_path: Path, newer_ngb: None) -> None:
    store = Store(older_path)
    assert store.runs()[0]["run_id"] == "r1"
    new_run(store, "r2")
    assert file_version(older_path) == len(schema.MIGRATIONS)
    assert [r["run_id"] for r in Store(older_path).runs()] == ["r2", "r1"]
    assert store.query("SELECT count(*) FROM notes")[1] == [(0,)]


def test_an_upgraded_copy_is_kept_while_the_file_is_unchanged(
    older_path: Path, newer_ngb: None
) -> None:
    store = Store(older_path)
    store.runs()
    first = older._kept[str(older_path.resolve())]
    store.trials()
    assert older._kept[str(older_path.resolve())] is first  # not copied again
    copy = first.copy
    assert copy.exists()
    stat = older_path.stat()
    os.utime(older_path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # the file changed
    assert store.runs()[0]["run_id"] == "r1"
    assert older._kept[str(older_path.resolve())] is not first
    assert not copy.exists()  # the stale copy is gone once no read uses it


def test_upgrading_a_copy_leaves_a_hard_linked_twin_alone(
    older_path: Path, newer_ngb: None, tmp_path: Path
) -> None:
    """A console's copy may share its main file with an earlier copy (``wal_marker``)."""
    copy, twin = tmp_path / "copy.duckdb", tmp_path / "twin.duckdb"
    shutil.copyfile(older_path, copy)
    os.link(copy, twin)
    before = twin.read_bytes()
    older.upgrade_copy(copy, older_path)
    assert older.is_upgraded(copy) and not older.is_upgraded(twin)
    assert file_version(copy) == len(schema.MIGRATIONS)
    assert twin.read_bytes() == before and file_version(twin) == len(schema.MIGRATIONS) - 1


def test_an_upgraded_copy_never_lends_its_main_file_to_the_next_copy(
    older_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """During a live run of the older ngb, a console's next query links the main file of its
    last copy instead of copying it again, unless that copy was upgraded: an upgraded main file
    beside the live log would be another database (DuckDB refuses the log, or replays it wrong)."""
    writer = Store(older_path)  # the older ngb's live run
    key = str(older_path.resolve())
    with deferred_checkpoints(older_path):
        new_run(writer, "r2")
        time.sleep(2 * store_snapshot.FRESH_S)
        with monkeypatch.context() as newer:
            newer.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, STEP])
            reader = Store(older_path)
            assert QueryJob(reader, "SELECT count(*) FROM runs").run()[1] == [(2,)]
            first = store_snapshot._snapshots[key]
            assert first.copy is not None and older.is_upgraded(first.copy)
            upgraded_inode = first.copy.stat().st_ino
        new_run(writer, "r3")  # into the log; the main file stays as the first copy saw it
        time.sleep(2 * store_snapshot.FRESH_S)
        with monkeypatch.context() as newer:
            newer.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, STEP])
            sql = "SELECT run_id, note FROM runs LEFT JOIN notes USING (run_id) ORDER BY 1"
            assert QueryJob(reader, sql).run()[1] == [("r1", None), ("r2", None), ("r3", None)]
            second = store_snapshot._snapshots[key]
            assert second is not first and second.copy is not None
            assert second.copy.stat().st_ino != upgraded_inode  # copied, not linked
    store_snapshot._snapshots.pop(key).drop()
    assert file_version(older_path) == schema.latest_version()  # the older ngb's, as it was
