"""A process that holds the store keeps it held, whatever else it reads of the store (issue 41).

DuckDB locks the file with POSIX record locks, which a process loses when it closes *any*
descriptor of the file. The console copies the store for its queries while its own ingest holds
it; before ``raw_files`` that copy unlocked the store and ``ngb run`` opened it read-write beside
the console: two writers, lost commits, and a log no command could open.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from ngb.sweeps.store import raw_files
from ngb.sweeps.store.connect import check_is_file, connection
from ngb.sweeps.store.database import Store
from ngb.sweeps.store.instances import open_here
from ngb.sweeps.store.snapshot import take_snapshot
from ngb.sweeps.store.wal_marker import deferred_checkpoints

from tests.other_process import run_snippet

# another process tries to write the store once (no retries): what it says
_OTHER_WRITER = """
import sys, duckdb
try:
    c = duckdb.connect(sys.argv[1])
    c.execute("CREATE TABLE intruder (i INTEGER)")
    c.execute("INSERT INTO intruder VALUES (1)")
    c.close()
    print("wrote")
except duckdb.Error as exc:
    print("refused:", str(exc).splitlines()[0])
"""


def other_process_writes(path: Path) -> str:
    return run_snippet(_OTHER_WRITER, str(path))


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "r.duckdb")
    s.create_run("r0", "demo", "", ["localhost"], 1)
    return s


def test_a_store_held_across_writes_stays_locked_through_copies_and_header_sniffs(
    store: Store,
) -> None:
    with deferred_checkpoints(store.path), store.batch():  # a live run's flush, held open
        store.create_run("r1", "demo", "", ["localhost"], 1)  # its log exists now
        assert open_here(store.path)
        check_is_file(store.path)  # every connection's sniff
        snap = take_snapshot(store.path)  # a console's query copy, in the same process
        snap.drop()
        said = other_process_writes(store.path)
        assert said.startswith("refused:") and "lock" in said, said
    assert not open_here(store.path)
    assert other_process_writes(store.path) == "wrote"  # let go once the batch closed


def test_a_copy_in_one_thread_never_unlocks_another_threads_connection(store: Store) -> None:
    opened, copied = threading.Event(), threading.Event()
    said: list[str] = []

    def writer() -> None:
        with connection(store.path, write=True, timeout=5) as conn:
            conn.execute("INSERT INTO runs SELECT * REPLACE ('r2' AS run_id) FROM runs LIMIT 1")
            opened.set()
            copied.wait(30)
            said.append(other_process_writes(store.path))

    thread = threading.Thread(target=writer)
    thread.start()
    assert opened.wait(30)
    snap = take_snapshot(store.path)  # the console's query thread beside its ingest
    snap.drop()
    copied.set()
    thread.join(60)
    assert said and said[0].startswith("refused:"), said


def test_the_header_sniff_reads_only_while_this_process_holds_nothing(store: Store) -> None:
    assert raw_files.read_head(store.path, 4) is not None
    with connection(store.path, write=False, timeout=5):
        assert raw_files.read_head(store.path, 4) is None  # would unlock: skipped


def test_a_child_copy_copies_a_prefix_says_why_it_failed_and_stops_when_asked(
    tmp_path: Path,
) -> None:
    source = tmp_path / "src.bin"
    source.write_bytes(bytes(range(256)) * 64)
    raw_files.copy_file(source, tmp_path / "all.bin")
    assert (tmp_path / "all.bin").read_bytes() == source.read_bytes()
    raw_files.copy_file(source, tmp_path / "head.bin", 100)
    assert (tmp_path / "head.bin").read_bytes() == source.read_bytes()[:100]
    with pytest.raises(OSError, match="No such file"):
        raw_files.copy_file(tmp_path / "missing", tmp_path / "x.bin")
    fifo = tmp_path / "fifo"
    import os

    os.mkfifo(fifo)  # a copy that would block forever: stopped, the child killed
    with pytest.raises(raw_files.CopyStopped):
        raw_files.copy_file(fifo, tmp_path / "y.bin", stop=lambda: True)


def test_three_followers_passing_the_same_events_store_each_once(store: Store) -> None:
    """Issue 46: `tuning_progress` held each tuning event 3 times with `ngb run`, `ngb attach`
    and the console following one run; `cpu_samples` 488 timestamps 3 times."""
    from ngb.sweeps.store.result_store import IngestBatch

    cpu = [{"ts": 1_700_000_000 + i, "key": "k1", "percent": 50.0 + i} for i in range(5)]
    tuning = [{"ts": 1_700_000_000 + i, "trials_done": 16 * i, "budget": 64} for i in range(4)]
    for follower in range(3):  # each passes what it read; the last one sees one sample more
        seen = cpu + ([{"ts": 1_700_000_009, "key": "k1", "percent": 1.0}] if follower else [])
        batch = IngestBatch(
            cpu=[("r0", "localhost", e) for e in seen + seen[:2]],  # a replay inside a batch
            tuning=[("r0", "localhost", "k1", e) for e in tuning],
            errors=[("r0", "localhost", None, 1_700_000_000.5, "connection", "lost")],
        )
        store.write_batch(batch)
    rows = {
        table: store.query(f"SELECT count(*) FROM {table}")[1][0][0]  # noqa: S608
        for table in ("cpu_samples", "tuning_progress", "errors")
    }
    assert rows == {"cpu_samples": 6, "tuning_progress": 4, "errors": 1}
    other = IngestBatch(cpu=[("r0", "other-device", cpu[0])])  # another device's same second
    store.write_batch(other)
    assert store.query("SELECT count(*) FROM cpu_samples")[1][0][0] == 7
