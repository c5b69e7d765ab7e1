"""Readers never hold up the writer (issue 31, item 13): a live run's writer leaves its commits
in DuckDB's log and checkpoints only while no reader is copying; a reader copies the main file
and the log's committed prefix that the writer's marker names, without opening the store."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ngb.sweeps.store import snapshot as store_snapshot
from ngb.sweeps.store import wal_marker
from ngb.sweeps.store.database import Store
from ngb.sweeps.store.snapshot import QueryJob, take_snapshot
from ngb.sweeps.store.wal_marker import (
    CHECKPOINT_BYTES,
    MIN_CHECKPOINT_BYTES,
    Lock,
    checkpoint_bytes,
    deferred_checkpoints,
    file_id,
    lock_path,
    marker_path,
    read_marker,
    readers_lock,
    wal_path,
)


def run_ids(path: Path) -> list[str]:
    return [r[0] for r in Store(path).query("SELECT run_id FROM runs ORDER BY run_id")[1]]


def new_run(store: Store, run_id: str) -> None:
    store.create_run(run_id, "demo", "", ["localhost"], 1)


def wal_size(store: Store) -> int:
    wal = file_id(wal_path(store.path))
    return wal[1] if wal else 0


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "r.duckdb")
    new_run(s, "r0")
    return s


@pytest.fixture
def marked_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy must come from the marker: the whole-file copies (the fallback) fail the test."""

    def fallback(*args: object, **kwargs: object) -> None:
        raise AssertionError("copied without the marker")

    monkeypatch.setattr(store_snapshot, "_copy_files", fallback)
    monkeypatch.setattr(store_snapshot, "_copy_unlocked", fallback)


def test_a_live_runs_commits_stay_in_the_log_and_a_copy_holds_exactly_them(
    store: Store, marked_only: None
) -> None:
    main = file_id(store.path)
    with deferred_checkpoints(store.path):
        new_run(store, "r1")
        new_run(store, "r2")
        assert file_id(store.path) == main  # no checkpoint: the main file stood still
        marker = read_marker(store.path)
        assert marker is not None and marker.live and marker.main == main
        assert marker.wal_len == wal_size(store) > 0
        assert marker_path(store.path).stat().st_mode & 0o777 == 0o644  # others may read it
        # the bytes of a next commit being written are not copied: the marker's prefix is
        with open(wal_path(store.path), "ab") as wal:
            wal.write(b"\x01half of a transaction" * 50)
        try:
            snapshot = take_snapshot(store.path)
        finally:
            os.truncate(wal_path(store.path), marker.wal_len)
        try:
            assert snapshot.copy is not None
            assert Path(f"{snapshot.copy}.wal").stat().st_size == marker.wal_len
            assert run_ids(snapshot.copy) == ["r0", "r1", "r2"]
        finally:
            snapshot.drop()
    new_run(store, "r3")  # no live run now: this write checkpoints, the store is at rest
    assert wal_size(store) == 0 and file_id(store.path) != main
    assert run_ids(store.path) == ["r0", "r1", "r2", "r3"]
    marker = read_marker(store.path)
    assert marker is not None and not marker.live  # kept up to date, no longer live


def test_the_log_a_live_run_keeps_grows_with_the_main_file_between_floor_and_cap(
    tmp_path: Path,
) -> None:
    def allowed(size: int) -> int:
        main = tmp_path / f"{size}.duckdb"
        with open(main, "wb") as f:
            f.truncate(size)  # sparse: only the size counts
        return checkpoint_bytes(main)

    assert checkpoint_bytes(tmp_path / "none.duckdb") == MIN_CHECKPOINT_BYTES
    assert allowed(2**20) == allowed(4 * 2**20) == MIN_CHECKPOINT_BYTES  # a few runs' store
    sizes = [2**k * 2**20 for k in range(6, 14)]  # 64 MiB .. 8 GiB
    lengths = [allowed(size) for size in sizes]
    assert lengths == sorted(lengths)
    assert 1.5 * 2**20 < allowed(290 * 2**20) < 2 * 2**20  # sqrt: 2x the log at 4x the file
    assert allowed(2**30) < CHECKPOINT_BYTES == allowed(2 * 2**30) == allowed(8 * 2**30)
    assert checkpoint_bytes(tmp_path) == MIN_CHECKPOINT_BYTES  # not a regular file: no size


def test_a_live_run_checkpoints_once_its_log_passes_the_length_allowed(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    allowed = 16 * 2**10
    monkeypatch.setattr(wal_marker, "checkpoint_bytes", lambda db: allowed)
    main = file_id(store.path)
    seen = []
    with deferred_checkpoints(store.path):
        for i in range(1, 200):
            before = wal_size(store)
            new_run(store, f"r{i}")
            if file_id(store.path) != main:
                break
            seen.append(wal_size(store))
    assert file_id(store.path) != main, "never checkpointed"
    assert wal_size(store) == 0 and len(seen) > 2
    assert max(seen) == before < allowed  # no checkpoint while the log was shorter...
    step = max(b - a for a, b in zip(seen, seen[1:], strict=False))
    assert before + step >= allowed  # ...and one at the first write that could pass it
    assert len(run_ids(store.path)) == i + 1


def test_a_writer_never_checkpoints_while_a_reader_copies(store: Store) -> None:
    with deferred_checkpoints(store.path):
        new_run(store, "r1")  # a live run: the marker and the readers lock are made
    assert lock_path(store.path).is_file() and marker_path(store.path).is_file()
    main = file_id(store.path)
    store.write_timeout_s = 0.0  # a write that had to wait would fail: DatabaseBusy
    with readers_lock(store.path, exclusive=False) as lock:
        assert lock is Lock.HELD
        new_run(store, "r2")  # would checkpoint, but a reader is copying: left in the log
        assert file_id(store.path) == main and wal_size(store) > 0
    new_run(store, "r3")  # the reader is done: checkpointed
    assert file_id(store.path) != main and wal_size(store) == 0
    assert run_ids(store.path) == ["r0", "r1", "r2", "r3"]


def test_a_one_off_write_leaves_no_new_file_beside_the_store(store: Store) -> None:
    new_run(store, "r1")
    assert sorted(p.name for p in store.path.parent.iterdir()) == [store.path.name]


def test_a_live_runs_failed_write_leaves_no_new_file_beside_the_store(store: Store) -> None:
    """A store that takes no write (here: its runs table gone) gets no lock or marker from a
    live run's failed attempt: nothing is made beside a file ngb could not use."""
    import duckdb

    conn = duckdb.connect(str(store.path))  # DuckDB's own close checkpoints: no log left
    for view in ("run_progress", "results", "failures"):
        conn.execute(f"DROP VIEW IF EXISTS {view}")
    conn.execute("ALTER TABLE runs RENAME TO runs_gone")
    conn.close()
    assert sorted(p.name for p in store.path.parent.iterdir()) == [store.path.name]
    with deferred_checkpoints(store.path), pytest.raises(Exception, match="runs"):
        new_run(store, "r1")
    assert sorted(p.name for p in store.path.parent.iterdir()) == [store.path.name]


# A live run's writer in another process: a write every few ms, each of which must get the file
# at once (write_timeout_s=0: a wait is DatabaseBusy), and one that wants to checkpoint every
# time (CHECKPOINT_BYTES=1), which it may do only while no reader copies.
WRITER = """
import sys, time
from pathlib import Path
from ngb.sweeps.store import wal_marker
from ngb.sweeps.store.database import DatabaseBusy, Store
path, n = Path(sys.argv[1]), int(sys.argv[2])
wal_marker.CHECKPOINT_BYTES = 1
store = Store(path, write_timeout_s=0.0)
busy = 0
with wal_marker.deferred_checkpoints(path):
    for i in range(n):
        try:
            store.create_run(f"w{i:03d}", "live", "", ["localhost"], 1)
        except DatabaseBusy:
            busy += 1
        if i == 0:
            print("writing", flush=True)
        time.sleep(0.01)
print(busy, flush=True)
"""


def test_a_live_writer_in_another_process_never_waits_for_slow_copies(
    store: Store, marked_only: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    pad = "CREATE TABLE pad AS SELECT md5(range::VARCHAR) AS h FROM range(60000)"
    store.query(pad, allow_write=True)  # a main file of a few MB: copies take a while
    from ngb.sweeps.store import raw_files

    plain = raw_files.copy_command

    def slow_copy(source: Path, length: int | None) -> list[str]:  # a large store, a busy disk
        return ["sh", "-c", 'sleep 0.2; exec "$@"', "copy", *plain(source, length)]

    monkeypatch.setattr(raw_files, "copy_command", slow_copy)

    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(store.path), "60"], stdout=subprocess.PIPE, text=True
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
    copies = []
    while proc.poll() is None:
        snapshot = take_snapshot(store.path)
        try:
            assert snapshot.copy is not None
            ids = [i for i in run_ids(snapshot.copy) if i.startswith("w")]
        finally:
            snapshot.drop()
        assert ids == [f"w{i:03d}" for i in range(len(ids))]  # every commit up to one
        copies.append(len(ids))
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out.split() == ["0"]  # not one write waited
    assert len(copies) >= 2 and copies == sorted(copies)
    assert len(run_ids(store.path)) == 61


# A live run's writer killed (-9) after its commits, before any checkpoint.
KILLED = """
import os, signal, sys
from pathlib import Path
from ngb.sweeps.store import wal_marker
from ngb.sweeps.store.database import Store
path = Path(sys.argv[1])
store = Store(path)
with wal_marker.deferred_checkpoints(path):
    for i in range(5):
        store.create_run(f"k{i}", "live", "", ["localhost"], 1)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_live_writer_killed_mid_run_loses_nothing(store: Store, marked_only: None) -> None:
    proc = subprocess.run([sys.executable, "-c", KILLED, str(store.path)], check=False)
    assert proc.returncode == -9 and wal_size(store) > 0  # its commits are in the log only
    snapshot = take_snapshot(store.path)
    try:
        assert snapshot.copy is not None
        assert run_ids(snapshot.copy) == ["k0", "k1", "k2", "k3", "k4", "r0"]
    finally:
        snapshot.drop()
    assert run_ids(store.path) == ["k0", "k1", "k2", "k3", "k4", "r0"]  # the log replayed


@pytest.mark.parametrize(
    "planted", ["garbage", "json", "huge", "stale", "fifo", "folder", "link", "lock-fifo"]
)
def test_a_hostile_marker_or_lock_falls_back_to_a_whole_copy(
    store: Store, tmp_path: Path, planted: str
) -> None:
    with deferred_checkpoints(store.path):
        new_run(store, "r1")
    marker, lock = marker_path(store.path), lock_path(store.path)
    if planted == "lock-fifo":
        lock.unlink()
        os.mkfifo(lock)
    elif planted == "stale":  # names a main file that is no more
        marker.write_text('{"main": [1, 2, 3], "wal_ino": 0, "wal_len": 0, "live": true}')
    else:
        marker.unlink()
        if planted == "garbage":
            marker.write_bytes(b"\xff\x00not json")
        elif planted == "json":
            marker.write_text('{"main": [-1, "x"], "wal_ino": 0, "wal_len": 0, "live": 1}')
        elif planted == "huge":
            marker.write_text(" " * 100_000)
        elif planted == "fifo":
            os.mkfifo(marker)
        elif planted == "folder":
            marker.mkdir()
        else:
            (tmp_path / "elsewhere").write_text("{}")
            marker.symlink_to(tmp_path / "elsewhere")
    t0 = time.perf_counter()
    assert QueryJob(store, "SELECT count(*) FROM runs", keep_copy=False).run()[1] == [(2,)]
    with deferred_checkpoints(store.path):  # the writer goes on as well
        new_run(store, "r2")
    new_run(store, "r3")
    assert QueryJob(store, "SELECT count(*) FROM runs", keep_copy=False).run()[1] == [(4,)]
    assert time.perf_counter() - t0 < 20  # nothing blocked
    assert wal_size(store) == 0 and run_ids(store.path) == ["r0", "r1", "r2", "r3"]


def test_ngb_query_reads_a_copy_from_the_start_while_a_live_run_writes(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_file = []
    real = QueryJob._run_on_file

    def spy(self: QueryJob, hold_s: float) -> object:
        on_file.append(hold_s)
        return real(self, hold_s)

    monkeypatch.setattr(QueryJob, "_run_on_file", spy)
    sql = "SELECT count(*) FROM runs"
    assert QueryJob(store, sql, hold_s=0.3, keep_copy=False).run()[1] == [(1,)]
    assert on_file == [0.3]  # no live run: a short query reads the file itself, no copy
    with deferred_checkpoints(store.path):
        new_run(store, "r1")
        assert QueryJob(store, sql, hold_s=0.3, keep_copy=False).run()[1] == [(2,)]
    assert on_file == [0.3]  # a live run wrote just now: the file was never opened


def test_a_consoles_next_query_during_a_live_run_copies_only_the_log(
    store: Store, marked_only: None
) -> None:
    sql = "SELECT count(*) FROM runs"
    with deferred_checkpoints(store.path):
        new_run(store, "r1")
        time.sleep(2 * store_snapshot.FRESH_S)
        assert QueryJob(store, sql).run()[1] == [(2,)]
        first = store_snapshot._snapshots[str(store.path.resolve())]
        assert first.copy is not None
        inode = first.copy.stat().st_ino
        new_run(store, "r2")
        assert QueryJob(store, sql).run()[1] == [(3,)]
        second = store_snapshot._snapshots[str(store.path.resolve())]
        assert second is not first and second.copy is not None
        assert second.copy.stat().st_ino == inode  # the main file linked, not copied again
    store_snapshot._snapshots.pop(str(store.path.resolve())).drop()  # the cached copy


async def test_a_run_writer_checkpoints_when_it_closes(store: Store) -> None:
    from ngb.sweeps.run.writer import RunWriter

    writer = RunWriter(store, device_of=lambda run, name: None, publish=lambda e: None,
                       on_unwritable=lambda m: None)  # fmt: skip
    writer.ensure_running()
    new_run(store, "r1")  # as the writer's flushes write: into the log
    main = file_id(store.path)
    assert wal_size(store) > 0
    await writer.close()
    assert wal_size(store) == 0 and file_id(store.path) != main  # at rest: no log
    marker = read_marker(store.path)
    assert marker is not None and not marker.live
    assert run_ids(store.path) == ["r0", "r1"]
