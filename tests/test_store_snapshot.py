"""Readers never hold up the writer (issue 31, items 2-3): a console query and an export read a
copy of the store taken without its lock, kept only when nothing wrote while it was read; an
export streams its rows; reports read the newest result per point from narrow keys."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from ngb.core.base.errors import NgbError
from ngb.sweeps.report.data import ReportData
from ngb.sweeps.store import snapshot as store_snapshot
from ngb.sweeps.store.database import Store
from ngb.sweeps.store.snapshot import QueryJob, export, take_snapshot

# Another process holds the file read-write (as a live run's writer does mid-ingest) after
# committing one more run, and waits on stdin; DuckDB then refuses this process any open.
HOLDER = """
import sys, duckdb
conn = duckdb.connect(sys.argv[1])
conn.execute("INSERT INTO runs (run_id, status) VALUES ('held', 'running')")
print("holding", flush=True)
sys.stdin.read()
conn.close()
"""


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "r.duckdb")
    s.create_run("r1", "demo", "", ["localhost"], 4, {})
    time.sleep(2 * store_snapshot.FRESH_S)  # a file changed just now is never copied unlocked
    return s


def hold(store: Store) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(store.path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
    time.sleep(2 * store_snapshot.FRESH_S)
    return proc


def release(proc: subprocess.Popen[str]) -> None:
    proc.communicate("", timeout=30)


def test_a_console_query_reads_a_store_another_process_holds_for_writing(store: Store) -> None:
    """The copy needs no lock: a query answers (with what was committed) while a writer holds
    the file, where a copy under the lock would wait for it."""
    store.runs()  # the version check, done once while the file is free
    store.busy_timeout_s = 0.0
    holder = hold(store)
    try:
        t0 = time.perf_counter()
        _, rows = QueryJob(store, "SELECT run_id FROM runs ORDER BY run_id").run()
        assert time.perf_counter() - t0 < 5
    finally:
        release(holder)
    assert rows == [("held",), ("r1",)]  # committed in the holder's WAL: read from its copy


def test_a_copy_that_saw_a_write_is_taken_again(store: Store, monkeypatch) -> None:
    """A write while the file is read spoils that copy: it is thrown away and taken again,
    and the copy kept holds the write."""
    real = store_snapshot._copy_files
    copies = []

    def copy_then_write(path: Path, copy: Path, stop=None) -> None:
        real(path, copy, stop)
        copies.append(copy)
        if len(copies) == 1:  # a writer commits while the first copy is being read
            store.create_run("r2", "demo", "", ["localhost"], 4, {})

    monkeypatch.setattr(store_snapshot, "_copy_files", copy_then_write)
    snapshot = take_snapshot(store.path)
    try:
        assert len(copies) == 2
        assert snapshot.copy is not None
        assert Store(snapshot.copy).query("SELECT count(*) FROM runs")[1] == [(2,)]
    finally:
        snapshot.drop()


def test_a_store_written_throughout_is_copied_under_its_lock(store: Store, monkeypatch) -> None:
    real = store_snapshot._copy_files
    n = [0]

    def always_written(path: Path, copy: Path, stop=None) -> None:
        real(path, copy, stop)
        n[0] += 1
        if n[0] <= store_snapshot.UNLOCKED_TRIES:  # the copy under the lock sees no write
            store.create_run(f"w{n[0]}", "demo", "", ["localhost"], 4, {})

    monkeypatch.setattr(store_snapshot, "_copy_files", always_written)
    snapshot = take_snapshot(store.path)
    try:
        assert n[0] == store_snapshot.UNLOCKED_TRIES + 1  # the last one under the lock
        assert snapshot.copy is not None
        counted = Store(snapshot.copy).query("SELECT count(*) FROM runs")[1][0][0]
        assert counted == 1 + store_snapshot.UNLOCKED_TRIES  # every write before the last copy
    finally:
        snapshot.drop()


def test_export_streams_in_batches_while_another_process_holds_the_store(
    store: Store, tmp_path: Path, monkeypatch
) -> None:
    """``ngb export`` reads a copy (a writer is never held up by it) and writes batch by batch;
    Parquet and CSV hold every row in order."""
    monkeypatch.setattr(store_snapshot, "EXPORT_BATCH_ROWS", 7)
    sql = "SELECT range AS i, range * 0.5 AS half FROM range(100)"
    store.runs()
    store.busy_timeout_s = 0.0
    holder = hold(store)
    try:
        assert export(store, tmp_path / "x.parquet", "parquet", sql) == 100
        assert export(store, tmp_path / "x.csv", "csv", sql) == 100
        assert export(store, tmp_path / "runs.csv", "csv", "SELECT * FROM runs") == 2
    finally:
        release(holder)
    table = pq.read_table(tmp_path / "x.parquet")
    assert table.column("i").to_pylist() == list(range(100))
    assert pq.ParquetFile(tmp_path / "x.parquet").metadata.num_row_groups > 1  # streamed
    assert pcsv.read_csv(tmp_path / "x.csv").column("half").to_pylist()[-1] == 49.5
    assert not list(tmp_path.glob(".x.*.part"))  # no partial file left


def test_export_refusals_stay_one_line(store: Store, tmp_path: Path) -> None:
    with pytest.raises(NgbError, match="locked"):
        export(store, tmp_path / "s.csv", "csv", "SET threads = 1")
    with pytest.raises(NgbError, match="SQL error: Binder Error"):
        export(store, tmp_path / "s.csv", "csv", "SELECT nosuch FROM runs")
    assert export(store, tmp_path / "empty.csv", "csv", "SELECT 1 AS a WHERE false") == 0
    assert (tmp_path / "empty.csv").read_text().strip() == '"a"'
    assert not (tmp_path / "s.csv").exists()


def test_newest_result_per_point_reads_an_unrecorded_finish_last(tmp_path: Path) -> None:
    """The narrow newest-per-point query keeps the window's order: the newest ``finished_at``
    wins, a trial without one loses to any with one, and equal times go to the greater run."""
    store = Store(tmp_path / "r.duckdb")
    store.runs()
    rows = [  # run, finished, throughput; one point (conv, identity, b1, lab) throughout
        ("a", "2026-01-02", 10.0),
        ("b", None, 20.0),
        ("c", "2026-01-01", 30.0),
        ("d", "2026-01-02", 40.0),  # as new as "a": the greater run id wins
    ]
    for run, finished, thr in rows:
        store.query(
            "INSERT INTO trials (run_id, device, key, model, compiler, batch, status, "
            "throughput_mean, finished_at) VALUES (?, 'lab', 'k', 'conv', 'identity', 1, 'ok', "
            "?, ?)",
            [run, thr, finished],
            allow_write=True,
        )
    trials = ReportData(store).trials()
    assert [(t["run_id"], t["throughput_mean"]) for t in trials] == [("d", 40.0)]
    only_b = ReportData(store, run_id=None)
    store.query("DELETE FROM trials WHERE run_id <> 'b'", allow_write=True)
    assert [t["run_id"] for t in only_b.trials()] == ["b"]


def test_advise_reads_one_model_on_one_device_from_sql(tmp_path: Path) -> None:
    """``trials_of`` (what ``advise`` reads) keeps exactly the trials ``trials()`` would label
    so on that device; ``labels`` and ``devices`` come from the columns, not the trials."""
    store = Store(tmp_path / "r.duckdb")
    store.runs()
    points = [  # key, device, model, width, depth, input_size, status
        ("a", "lab", "conv", 8, 1, None, "ok"),
        ("b", "lab", "conv", 8, 2, None, "ok"),
        ("c", "lab", "conv", 8, None, 160, "ok"),
        ("d", "lab", "resnet18", None, None, None, "ok"),
        ("e", "lab", "conv8x1", None, None, None, "ok"),  # an own model with a block's name
        ("f", "lab2", "conv", 8, 1, None, "ok"),
        ("g", "dead", "conv", 8, 1, None, "failed"),
    ]
    for key, device, model, width, depth, size, status in points:
        store.query(
            "INSERT INTO trials (run_id, device, key, model, width, depth, input_size, status, "
            "compiler, batch, throughput_mean) "
            "VALUES ('r', ?, ?, ?, ?, ?, ?, ?, 'identity', 1, 1.0)",
            [device, key, model, width, depth, size, status],
            allow_write=True,
        )
    data = ReportData(store)
    assert sorted(t["key"] for t in data.trials_of("lab", "conv8x1")) == ["a", "e"]
    assert [t["key"] for t in data.trials_of("lab", "conv8x1@160")] == ["c"]
    assert [t["key"] for t in data.trials_of("lab", "resnet18")] == ["d"]
    assert data.trials_of("lab2", "resnet18") == []
    assert data.labels() == sorted({t["label"] for t in data.trials()})
    assert data.devices() == ["lab", "lab2"]  # a device whose trials all failed has no result
    for device in ("lab", "lab2"):
        for label in data.labels():
            whole = [
                t["key"] for t in data.trials() if (t["device"], t["label"]) == (device, label)
            ]
            assert sorted(t["key"] for t in data.trials_of(device, label)) == sorted(whole)


def test_a_cancelled_querys_copy_stops_at_its_next_look(store: Store, monkeypatch) -> None:
    """A copy taken for a query that is then cancelled ends at the next look at its stop (under
    the lock it would otherwise hold a live run's writer, and the console's quit, until it
    finished); the child copying is killed."""
    from ngb.sweeps.store import raw_files

    store.create_run("r1", "demo", "", ["localhost"], 4, {})
    slow = raw_files.copy_command

    def slow_copy(source: Path, length: int | None) -> list[str]:  # a large store, a slow disk
        return ["sh", "-c", 'sleep 30; exec "$@"', "copy", *slow(source, length)]

    monkeypatch.setattr(raw_files, "copy_command", slow_copy)
    looks = []

    def stop() -> bool:
        looks.append(1)
        return len(looks) > 2

    started = time.monotonic()
    with pytest.raises(store_snapshot.CopyStopped):
        take_snapshot(store.path, stop=stop)
    assert len(looks) == 3  # stopped at the third look, not after the 30 s copy
    assert time.monotonic() - started < 10
    monkeypatch.setattr(raw_files, "copy_command", slow)
    snapshot = take_snapshot(store.path, stop=lambda: False)  # never stopped: a whole copy
    try:
        assert snapshot.copy is not None
        assert Store(snapshot.copy).query("SELECT count(*) FROM runs")[1] == [(1,)]
    finally:
        snapshot.drop()
