"""The DuckDB results store: schema and migrations, idempotent ingest, readers beside a writer
process, the read-only SQL console, export, and the CLI commands over it."""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from ngb.core.base.errors import NgbError, UnknownNameError
from ngb.core.records.types import Stats, TrialResult, TrialSpec
from ngb.sweeps.store import schema
from ngb.sweeps.store.database import (
    BUSY_MESSAGE,
    DatabaseBusy,
    RowRejected,
    Store,
    StoreUnwritable,
)
from ngb.sweeps.store.result_store import IngestBatch
from ngb.sweeps.store.snapshot import export

from tests.cli_helpers import NGB, ngb, scaled
from tests.duckdb_opens import record_connects


def make_result(i: int, *, reps: int = 3, status: str = "ok", batch: int = 1) -> TrialResult:
    spec = TrialSpec(model="conv", compiler="identity", width=8 + i, depth=1, batch=batch)
    if status != "ok":
        return TrialResult.failed(spec, "compiler crashed", "crash", host="h")
    return TrialResult(
        key=spec.key,
        spec=spec.to_dict(),
        host="h",
        started_at=1_700_000_000.0 + i,
        finished_at=1_700_000_002.0 + i,
        compile_s=0.5,
        throughput=Stats(n=reps, mean=100.0 + i, std=1.0, median=100.0 + i, cov=0.01),
        latency_ms=Stats(p50=2.0, p90=2.5, p99=3.0),
        repetitions=[
            {"iters": 10, "elapsed_s": 0.1, "throughput": 100.0 + i + r} for r in range(reps)
        ],
        cpu_samples=[[0.1, 50.0, 95.0], [0.2, 60.0, 99.0]],
        versions={"torch": "2.15.0"},
        threads={"torch": 2},
    )


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "results.duckdb")


def count(store: Store, table: str) -> int:
    return store.query(f"SELECT count(*) FROM {table}")[1][0][0]  # noqa: S608 - test tables


# ---------------------------------------------------------------- schema and migrations


def test_schema_is_created_with_readable_tables_and_version(store: Store) -> None:
    assert not store.path.exists()
    assert store.runs() == [] and store.tables() and store.trials() == []
    assert not store.path.exists()  # reading never creates the file (issue 8 #6)
    store.create_run("r0", "demo", "", [], 0)  # the first write does
    assert store.schema_version() == schema.latest_version()
    tables = set(store.tables())
    assert {
        "schema_version",
        "devices",
        "probes",
        "runs",
        "run_devices",
        "trials",
        "measurements",
        "cpu_samples",
        "tuning_progress",
        "errors",
        "results",
        "failures",
        "run_progress",
    } <= tables
    columns, _ = store.query("SELECT * FROM trials LIMIT 0")
    for col in (
        "model",
        "family",
        "compiler",
        "batch",
        "throughput_mean",
        "latency_p99_ms",
        "peak_rss_mb",
        "versions",
        "started_at",
    ):
        assert col in columns


def test_newer_schema_is_refused_with_a_clear_message(store: Store) -> None:
    store.create_run("r0", "demo", "", [], 0)  # create
    conn = duckdb.connect(str(store.path))
    conn.execute("INSERT INTO schema_version VALUES (999, 'from the future', now())")
    conn.close()
    with pytest.raises(NgbError, match="schema version 999, newer than this ngb"):
        Store(store.path).runs()


def test_a_foreign_duckdb_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.duckdb"
    conn = duckdb.connect(str(path))
    conn.execute("CREATE TABLE stuff (a INT)")
    conn.close()
    with pytest.raises(NgbError, match="not an ngb results database"):
        Store(path).runs()


def test_older_files_are_migrated_and_keep_their_data(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.ingest_results("r1", "dev", [make_result(0)])
    step = ("add a note to runs", ["ALTER TABLE runs ADD COLUMN note VARCHAR"])
    current = schema.latest_version()
    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, step])
    upgraded = Store(store.path)
    assert upgraded.schema_version() == current  # not touched until used
    assert len(upgraded.trials()) == 1
    columns, _ = upgraded.query("SELECT * FROM runs LIMIT 0")
    assert "note" in columns  # read from an upgraded copy (issue 41: readers never upgrade)
    assert upgraded.schema_version() == current
    upgraded.ingest_results("r2", "dev", [make_result(1)])  # the first write upgrades the file
    assert upgraded.schema_version() == current + 1
    _, rows = upgraded.query("SELECT version, description FROM schema_version ORDER BY 1")
    assert rows[0] == (1, "initial schema") and rows[-1] == (current + 1, "add a note to runs")
    assert len(upgraded.trials()) == 2


def test_a_version_1_file_gains_the_interval_columns(tmp_path: Path) -> None:
    """Migration 2: a file made before it keeps its rows and takes verdicts from then on."""
    path = tmp_path / "v1.duckdb"
    conn = duckdb.connect(str(path))
    conn.execute(schema.VERSION_TABLE)
    for statement in schema.MIGRATIONS[0][1]:
        conn.execute(statement)
    conn.execute("INSERT INTO schema_version VALUES (1, 'initial schema', now())")
    conn.execute(
        "INSERT INTO trials (run_id, device, key, status) VALUES ('old', 'dev', 'k', 'ok')"
    )
    conn.close()
    store = Store(path)
    fresh = make_result(1)
    fresh.verdict, fresh.verdict_reason, fresh.ci_half_width = "VALID", "95% CI ±1.0%", 2.5
    fresh.disturbed, fresh.workers = True, 2
    fresh.repetitions = [{**rep, "worker": i % 2} for i, rep in enumerate(fresh.repetitions)]
    assert store.ingest_results("new", "dev", [fresh]) == 1
    _, rows = store.query(
        "SELECT run_id, verdict, throughput_ci_half, disturbed, workers FROM results ORDER BY 1"
    )
    assert rows == [("new", "VALID", 2.5, True, 2), ("old", None, None, None, None)]
    _, workers = store.query("SELECT DISTINCT worker FROM measurements ORDER BY 1")
    assert workers == [(0,), (1,)]


def test_a_version_3_file_gains_the_energy_columns(tmp_path: Path) -> None:
    """Migration 5 (issue 23): older rows keep NULL energy; new ones store J/sample and the note."""
    path = tmp_path / "v3.duckdb"
    conn = duckdb.connect(str(path))
    conn.execute(schema.VERSION_TABLE)
    for version, (description, statements) in enumerate(schema.MIGRATIONS[:3], start=1):
        for statement in statements:
            conn.execute(statement)
        conn.execute("INSERT INTO schema_version VALUES (?, ?, now())", [version, description])
    conn.execute(
        "INSERT INTO trials (run_id, device, key, status) VALUES ('old', 'dev', 'k', 'ok')"
    )
    conn.close()
    store = Store(path)
    metered, blind = make_result(1), make_result(2)
    metered.energy_j_per_sample, metered.energy_j_per_sample_ci = 0.05, 0.001
    metered.samples_per_j, metered.power_w_mean, metered.energy_source = 20.0, 50.0, "rapl"
    blind.energy_note = "no power meter: RAPL not present"
    assert store.ingest_results("new", "dev", [metered, blind]) == 2
    assert store.schema_version() == schema.latest_version()
    _, rows = store.query(
        "SELECT run_id, energy_j_per_sample, energy_j_per_sample_ci_half, samples_per_j, "
        "power_w_mean, energy_source, energy_note FROM results ORDER BY run_id, energy_note"
    )
    assert rows == [
        ("new", None, None, None, None, None, "no power meter: RAPL not present"),
        ("new", 0.05, 0.001, 20.0, 50.0, "rapl", None),
        ("old", None, None, None, None, None, None),
    ]


# ---------------------------------------------------------------- ingest


def test_ingest_is_idempotent_per_run_device_and_key(store: Store) -> None:
    results = [make_result(i) for i in range(5)]
    assert store.ingest_results("r1", "dev", results) == 5
    assert store.ingest_results("r1", "dev", results) == 0  # e.g. a re-read checkpoint
    # a batch with a repeat inside, and as dicts (the event stream's form)
    assert store.ingest_results("r1", "dev", [r.to_dict() for r in results[:2]] * 2) == 0
    assert count(store, "trials") == 5
    assert count(store, "measurements") == 5 * 3
    assert count(store, "cpu_samples") == 5 * 2
    # the same trial on another device or in another run is another row
    assert store.ingest_results("r1", "dev2", results[:1]) == 1
    assert store.ingest_results("r2", "dev", results[:1] + [make_result(9)]) == 2
    assert count(store, "trials") == 8
    assert store.completed_keys("r1", "dev") == {r.key for r in results}


def test_trial_rows_carry_spec_stats_and_json(store: Store) -> None:
    result = make_result(1, reps=4)
    store.ingest_results("r1", "dev", [result])
    (row,) = store.trials("r1", "dev")
    assert row["key"] == result.key
    assert (row["model"], row["family"], row["compiler"]) == ("conv", "block", "identity")
    assert (row["batch"], row["depth"], row["width"], row["target"]) == (1, 1, 9, "cpu")
    assert row["label"] == "conv9x1/identity/b1"
    assert row["throughput_mean"] == pytest.approx(101.0)
    assert row["latency_p99_ms"] == pytest.approx(3.0)
    assert row["repetitions"] == 4
    assert row["versions"] == {"torch": "2.15.0"}
    assert row["spec"]["width"] == 9
    assert row["started_at"].year == 2023
    reps = store.measurements("r1", "dev", result.key)
    assert [m["rep"] for m in reps] == [0, 1, 2, 3]
    assert [m["throughput"] for m in reps] == [101.0, 102.0, 103.0, 104.0]


def test_failed_results_and_nan_statistics_become_nulls(store: Store) -> None:
    store.ingest_results("r1", "dev", [make_result(0, status="failed"), make_result(1)])
    (failed,) = store.trials(status="failed")
    assert failed["error_kind"] == "crash" and failed["error"] == "compiler crashed"
    assert failed["throughput_mean"] is None  # NaN in Stats()
    # the results view shows failed trials too, with why (status, error_kind, error)
    _, rows = store.query("SELECT status, error_kind, error FROM results ORDER BY status")
    assert rows == [("failed", "crash", "compiler crashed"), ("ok", None, None)]
    _, rows = store.query("SELECT count(*) FROM results WHERE status = 'ok'")
    assert rows == [(1,)]
    _, rows = store.query("SELECT error_kind FROM failures")
    assert rows == [("crash",)]


def test_stored_numbers_take_what_float_and_int_take_and_refuse_the_rest() -> None:
    import numpy as np
    from ngb.sweeps.store.ingest import as_int, num

    assert [num(v) for v in (1.5, 2, True, "3.5", np.float32(0.5), np.int64(7))] == [
        1.5, 2.0, 1.0, 3.5, 0.5, 7.0
    ]  # fmt: skip
    assert num(None) is None and num(math.nan) is None and num(-math.inf) is None
    assert [as_int(v) for v in (3, 2.9, "4", np.int32(5), None)] == [3, 2, 4, 5, None]
    for bad in (object(), [1.0], {"a": 1}, b"1"):
        with pytest.raises(TypeError, match="not a"):
            num(bad)
        with pytest.raises(TypeError, match="not an integer"):
            as_int(bad)


def test_runs_devices_probes_tuning_errors(store: Store) -> None:
    assert store.create_run("r1", "demo", "name = 'demo'", ["a", "b"], 4, {"keep": True})
    assert not store.create_run("r1", "demo", "", ["a"], 1)  # exists: unchanged
    store.upsert_run_device("r1", "a", state="running", started_at=1_700_000_000.0, pid=7)
    store.upsert_run_device("r1", "a", n_done=2, offset=120)
    (dev,) = store.run_devices("r1")
    assert (dev["state"], dev["n_done"], dev["started_at"].year) == ("running", 2, 2023)
    assert dev["extra"] == {"pid": 7, "offset": 120}
    store.set_run_status("r1", "done")
    (run,) = store.runs()
    assert (run["status"], run["devices"], run["meta"]) == ("done", ["a", "b"], {"keep": True})
    assert run["finished_at"] is not None
    with pytest.raises(UnknownNameError):
        store.set_run_status("nope", "done")

    store.record_probe("a", {"cpu_model": "Cortex", "cores": 6, "versions": {"torch": "2"}})
    (probe,) = store.probes("a")
    assert (probe["cpu_model"], probe["cpu_cores"], probe["versions"]) == (
        "Cortex",
        6,
        {"torch": "2"},
    )
    events = [
        {
            "ts": 1_700_000_000.0 + i,
            "trials_done": i,
            "budget": 16,
            "best_ms": 2.0 - i / 10,
            "tasks": [{"name": "conv", "trials": i}],
        }
        for i in range(3)
    ]
    assert store.ingest_tuning("r1", "a", "k1", events) == 3
    assert [t["trials_done"] for t in store.tuning_progress("r1", "a", "k1")] == [0, 1, 2]
    store.ingest_cpu_samples(
        "r1", "a", [{"ts": 1_700_000_000.0, "key": "k1", "percent": 55.0, "proc_percent": 90.0}]
    )
    (cpu,) = store.cpu_samples("r1", "a")
    assert (cpu["source"], cpu["sys_percent"]) == ("live", 55.0)
    store.record_error("r1", "b", None, "connection", "link dropped")
    (err,) = store.errors("r1")
    assert (err["device"], err["kind"], err["message"]) == ("b", "connection", "link dropped")


def test_devices_never_store_secrets(store: Store) -> None:
    store.upsert_device(
        {
            "name": "jetson",
            "host": "10.0.0.5",
            "port": 22,
            "user": "nv",
            "password": "hunter2",
            "identity_file": "~/.ssh/id_ed25519",
            "private_key": "-----BEGIN OPENSSH PRIVATE KEY-----",
            "groups": ["edge"],
            "arch": "aarch64",
        }
    )
    (dev,) = store.devices()
    assert (dev["host"], dev["groups"], dev["extra"]) == ("10.0.0.5", ["edge"], {"arch": "aarch64"})
    _, rows = store.query("SELECT * FROM devices")
    flat = json.dumps(rows, default=str)
    assert "hunter2" not in flat and "PRIVATE KEY" not in flat and "id_ed25519" not in flat


def test_ingest_batch_writes_everything_in_one_transaction(store: Store) -> None:
    batch = IngestBatch()
    assert store.write_batch(batch) == 0 and not store.path.exists()  # nothing to write
    batch.add_result("r1", "a", make_result(0))  # 1 trial + 3 repetitions
    batch.add_result("r1", "a", make_result(0))  # a repeat from a re-read event log
    batch.add_cpu_sample("r1", "a", {"ts": 1.7e9, "key": "x", "percent": 10.0})
    batch.add_error("r1", "a", None, "connection", "dropped")
    assert len(batch) == 4
    assert store.write_batch(batch) == 1
    assert (count(store, "trials"), count(store, "errors")) == (1, 1)
    assert count(store, "cpu_samples") == 2 + 1  # the trial's two + one live
    assert store.write_batch(IngestBatch(results=batch.results)) == 0  # stored once


def test_an_error_text_utf8_cannot_hold_is_stored_escaped_with_its_batch(store: Store) -> None:
    """A lone surrogate (a ``\\udcff`` escape in an agent's JSON) failed the whole batch it came
    in (a trial's error text: a raw UnicodeEncodeError out of the live writer); a NUL, a tab and
    a long text are stored as they are. Each error is stored once."""
    texts = ["surrogate \udcff here", "nul\x00inside\ttab", "x" * 100_000]
    batch = IngestBatch()
    batch.add_result("r1", "a", make_result(0))
    failed = make_result(1)  # a compiler's stderr decoded with surrogateescape, in its error
    failed.status, failed.error = "failed", "cannot compile: \udcff"
    batch.add_result("r1", "a", failed)
    for text in texts:
        batch.add_error("r1", "a", "k'1", "trial \udce9", text)
    assert store.write_batch(batch) == 2
    store.write_batch(IngestBatch(errors=batch.errors))  # passed on again by a second follower
    _, rows = store.query("SELECT kind, message FROM errors ORDER BY length(message)")
    assert rows == [
        ("trial \\udce9", "nul\x00inside\ttab"),
        ("trial \\udce9", "surrogate \\udcff here"),
        ("trial \\udce9", "x" * 100_000),
    ]  # each once, escapes and all
    _, trials = store.query("SELECT status, error FROM trials ORDER BY status")
    assert trials == [("failed", "cannot compile: \\udcff"), ("ok", None)]


def test_threads_in_one_process_can_read_while_writing(store: Store) -> None:
    """DuckDB refuses mixed read-only/read-write connections in one process; the store's
    process lock must serialise them (the TUI ingests and runs the SQL console at once)."""
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for i in range(15):
                store.ingest_results("r1", "a", [make_result(i)])
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    seen = [count(store, "trials") for _ in range(15)]
    thread.join()
    assert not errors
    assert seen == sorted(seen)
    assert count(store, "trials") == 15


# ---------------------------------------------------------------- query and export


def test_read_only_query_refuses_writes_and_file_access(store: Store, tmp_path: Path) -> None:
    store.ingest_results("r1", "a", [make_result(0)])
    with pytest.raises(NgbError, match="read-only; use --write") as info:
        store.query("DELETE FROM trials")
    assert "\n" not in str(info.value)
    with pytest.raises(NgbError, match="read-only"):
        store.query("CREATE TABLE x (a INT)")
    with pytest.raises(NgbError, match="cannot read or write files"):
        store.query(f"COPY trials TO '{tmp_path / 'leak.csv'}'")
    assert not (tmp_path / "leak.csv").exists()
    with pytest.raises(NgbError, match="cannot read or write files"):
        store.query("SELECT * FROM read_csv('/etc/passwd')")
    assert count(store, "trials") == 1
    # the explicit opt-in
    store.query("DELETE FROM trials", allow_write=True)
    assert count(store, "trials") == 0


def test_bad_sql_is_one_clear_line(store: Store) -> None:
    for sql in ("SELEC 1", "SELECT * FROM no_such_table", "   "):
        with pytest.raises(NgbError) as info:
            store.query(sql)
        assert "\n" not in str(info.value)
    with pytest.raises(NgbError, match="SQL error: Parser Error"):
        store.query("SELEC 1")


def test_query_with_parameters(store: Store) -> None:
    store.ingest_results("r1", "a", [make_result(i) for i in range(3)])
    columns, rows = store.query("SELECT width FROM trials WHERE width > ? ORDER BY width", [8])
    assert columns == ["width"] and rows == [(9,), (10,)]


def test_export_parquet_and_csv_read_back(store: Store, tmp_path: Path) -> None:
    store.ingest_results("r1", "a", [make_result(i, reps=5) for i in range(4)])
    n = export(store, tmp_path / "out" / "trials.parquet", "parquet", "trials")
    table = pq.read_table(tmp_path / "out" / "trials.parquet")
    assert n == 4 and table.num_rows == 4
    assert sorted(table.column("width").to_pylist()) == [8, 9, 10, 11]
    sql = "SELECT key, avg(throughput) AS thr FROM measurements GROUP BY key ORDER BY key"
    n = export(store, tmp_path / "m.csv", "csv", sql)
    with open(tmp_path / "m.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert n == 4 and len(rows) == 4 and set(rows[0]) == {"key", "thr"}
    assert math.isclose(sum(float(r["thr"]) for r in rows), sum(100 + i + 2 for i in range(4)))
    with pytest.raises(UnknownNameError, match="unknown table 'trial'; did you mean: trials"):
        export(store, tmp_path / "x.csv", "csv", "trial")
    with pytest.raises(NgbError, match="unknown export format"):
        export(store, tmp_path / "x.json", "json", "trials")
    with pytest.raises(NgbError, match="read-only"):
        export(store, tmp_path / "x.csv", "csv", "DELETE FROM trials RETURNING *")
    assert not (tmp_path / "x.csv").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


# ---------------------------------------------------------------- other processes

HOLD_LOCK = """
import duckdb, sys, time
conn = duckdb.connect(sys.argv[1])
print("locked", flush=True)
sys.stdin.readline()
conn.close()
"""


def test_a_locked_file_gives_the_busy_message_not_a_traceback(store: Store) -> None:
    store.ingest_results("r1", "a", [make_result(0)])
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(store.path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(DatabaseBusy, match="try again"):
            Store(store.path, busy_timeout_s=0.3).query("SELECT 1")
        with pytest.raises(DatabaseBusy):
            Store(store.path, write_timeout_s=0.3).ingest_results("r1", "a", [make_result(1)])
        cli = ngb(
            "query", "--db", str(store.path), "--wait", "0.2", "SELECT count(*) FROM trials",
            timeout=60,
        )  # fmt: skip
        assert cli.returncode != 0
        assert BUSY_MESSAGE in cli.stderr
        assert "Traceback" not in cli.stderr and len(cli.stderr.strip().splitlines()) == 1
    finally:
        if holder.stdin is not None:
            holder.stdin.write("\n")
            holder.stdin.close()
        holder.wait(timeout=30)
    assert count(store, "trials") == 1  # nothing lost, file usable again


WRITER = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, sys.argv[3])
    from test_store import make_result
    from ngb.sweeps.store.database import Store

    store = Store(sys.argv[1])
    stop = sys.argv[2]
    n = i = 0
    while not os.path.exists(stop) or i < 5:
        batch = [make_result(i * 10 + j) for j in range(10)]
        n += store.ingest_results("run", "dev", batch + batch[:3])  # repeats: stored once
        i += 1
        if i == 1:
            print("started", flush=True)
        time.sleep(0.02)
    print(n, flush=True)
    """
)


def test_query_and_export_work_from_other_processes_while_a_writer_writes(
    tmp_path: Path,
) -> None:
    db = tmp_path / "results.duckdb"
    stop = tmp_path / "stop"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db), str(stop), str(Path(__file__).parent)],
        stdout=subprocess.PIPE,
        text=True,
    )
    env = {**os.environ, "NGB_DB": str(db)}
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "started"
        seen = []
        # The writer holds the file for each ingest and lets go for 20 ms between them; a reader
        # gets in between two. Under a loaded make test a reader's 5 s default (--wait) ran out
        # once (a fresh clone's second run, 2026-11-30): its wait stretches with the load here.
        wait = str(scaled(20))
        for i in range(3):
            q = ngb("query", "--wait", wait, "--format", "json", "SELECT count(*) AS n FROM trials",
                    env=env)  # fmt: skip
            assert q.returncode == 0, q.stderr
            seen.append(json.loads(q.stdout)[0]["n"])
            fmt = ("parquet", "csv")[i % 2]
            out = tmp_path / f"export{i}.{fmt}"
            e = ngb("export", "--wait", wait, "--format", fmt, "--table", "measurements",
                    "-o", str(out), env=env)  # fmt: skip
            assert e.returncode == 0, e.stderr
            assert out.exists() and "wrote" in e.stdout
        assert seen == sorted(seen) and seen[-1] > 0
    finally:
        stop.touch()
        out_text, _ = writer.communicate(timeout=scaled(120))
    assert writer.returncode == 0
    written = int(out_text.strip().splitlines()[-1])
    final = Store(db)
    assert count(final, "trials") == written
    assert count(final, "measurements") == written * 3
    _, dup = final.query(
        "SELECT count(*) FROM (SELECT key FROM trials GROUP BY key HAVING count(*) > 1)"
    )
    assert dup == [(0,)]


def test_cli_query_formats_and_errors(store: Store, tmp_path: Path) -> None:
    store.ingest_results("r1", "a", [make_result(i) for i in range(2)])
    base = ["query", "--db", str(store.path)]
    as_csv = ngb(
        *base, "--format", "csv", "SELECT width, model FROM trials ORDER BY width", timeout=60
    )
    assert as_csv.returncode == 0
    assert as_csv.stdout.splitlines() == ["width,model", "8,conv", "9,conv"]
    table = ngb(*base, "SELECT model, compiler FROM results", timeout=60)
    assert table.returncode == 0 and "identity" in table.stdout and "2 rows" in table.stdout
    bad = ngb(*base, "SELEC oops", timeout=60)
    assert bad.returncode != 0 and "SQL error" in bad.stderr and "Traceback" not in bad.stderr
    write = ngb(*base, "DELETE FROM trials", timeout=60)
    assert write.returncode != 0 and "--write" in write.stderr
    assert count(store, "trials") == 2


def test_record_probe_reads_the_agents_own_field_names(tmp_path) -> None:
    # The shape ngb.devices.probe.probe() really sends (cores_logical, ram_mb).
    from ngb.sweeps.store.database import Store

    store = Store(tmp_path / "r.duckdb")
    store.record_probe(
        "jetson",
        {
            "hostname": "orin",
            "cpu_model": "ARMv8",
            "cores_logical": 12,
            "ram_mb": 32768.0,
            "python": "3.10.12",
            "versions": {},
        },
    )
    cols, rows = store.query("SELECT * FROM probes")
    row = dict(zip(cols, rows[0], strict=True))
    assert row["hostname"] == "orin"
    assert 12 in row.values() and 32.0 in row.values()


# ---------------------------------------------------------------- nothing lost (issue 8)


def assert_one_line_error(res: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and res.stderr.count("\n") == 1, res.stderr
    for needle in needles:
        assert needle in res.stderr, res.stderr


def test_export_never_overwrites_the_store_or_an_existing_file(store: Store, tmp_path: Path):
    store.ingest_results("r1", "a", [make_result(0), make_result(1)])
    before = store.path.read_bytes()
    db = str(store.path)
    for fmt in ("csv", "parquet"):  # the data-loss case: -o the results database itself
        res = ngb("export", "--format", fmt, "-o", db, "--db", db)
        assert_one_line_error(res, "results database itself")
        res = ngb("export", "--format", fmt, "-o", db, "--db", db, "--force")
        assert_one_line_error(res, "results database itself")
    assert store.path.read_bytes() == before and count(store, "trials") == 2
    with pytest.raises(NgbError, match="results database itself"):
        export(store, tmp_path / "." / "results.duckdb.wal", "csv", overwrite=True)

    other = tmp_path / "mine.csv"
    other.write_text("keep me\n")
    assert_one_line_error(ngb("export", "-o", str(other), "--db", db, "--format", "csv"), "--force")
    assert other.read_text() == "keep me\n"
    res = ngb("export", "-o", str(other), "--db", db, "--format", "csv", "--force")
    assert res.returncode == 0 and "wrote 2 rows" in res.stdout
    assert other.read_text().startswith('"run_id",')
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]  # no temp left over


def test_export_to_an_impossible_destination_is_one_line(store: Store, tmp_path: Path):
    store.ingest_results("r1", "a", [make_result(0)])
    blocker = tmp_path / "file"
    blocker.write_text("x")
    res = ngb("export", "-o", str(blocker / "out.csv"), "--db", str(store.path), "--format", "csv")
    assert_one_line_error(res, "cannot export to")
    assert blocker.read_text() == "x"
    with pytest.raises(NgbError, match="is a directory"):
        export(store, tmp_path, "csv", overwrite=True)


def test_read_only_commands_create_no_files(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent-dir" / "x.duckdb"
    res = ngb("status", env={**os.environ, "NGB_DB": str(missing)})
    assert res.returncode == 0 and "no runs yet" in res.stdout, res.stderr
    assert_one_line_error(ngb("query", "SELECT 1", "--db", str(missing)), "no results database")
    assert_one_line_error(ngb("export", "-o", str(tmp_path / "o.csv"), "--db", str(missing)))
    assert not missing.parent.exists() and not (tmp_path / "o.csv").exists()
    store = Store(missing)
    assert store.runs() == [] and store.trials() == [] and store.schema_version() == 0
    assert not missing.parent.exists()


def test_truncated_corrupt_and_foreign_databases_are_one_line(store: Store, tmp_path: Path):
    store.ingest_results("r1", "a", [make_result(i) for i in range(40)])
    good = store.path.read_bytes()
    cases = {
        "truncated": good[: len(good) // 2],  # DuckDB alone would answer from what is left
        "cut-in-header": good[:5000],
        "garbage": b"not a database\n" * 500,
        "empty": b"",
    }
    for name, data in cases.items():
        path = tmp_path / f"{name}.duckdb"
        path.write_bytes(data)
        res = ngb("query", "SELECT count(*) FROM trials", "--db", str(path))
        if name == "empty":  # an empty file is no DuckDB file either
            assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
        else:
            assert_one_line_error(res, str(path.name))
        res = ngb("status", env={**os.environ, "NGB_DB": str(path)})
        assert res.returncode == 1 and "Traceback" not in res.stderr, (name, res.stderr)
        assert path.read_bytes() == data, name  # untouched
    foreign = tmp_path / "foreign.duckdb"
    conn = duckdb.connect(str(foreign))
    conn.execute("CREATE TABLE stuff (a INT)")
    conn.close()
    assert_one_line_error(
        ngb("status", env={**os.environ, "NGB_DB": str(foreign)}), "not an ngb results"
    )
    fifo = tmp_path / "fifo.duckdb"
    os.mkfifo(fifo)
    assert_one_line_error(ngb("query", "SELECT 1", "--db", str(fifo)), "not a regular file")


def test_a_result_that_cannot_fit_is_rejected_and_nothing_of_its_batch_written(store: Store):
    poison = make_result(1)
    poison.spec["batch"] = 2_147_483_648  # too large for the INTEGER batch column
    batch = IngestBatch()
    batch.add_result("r1", "a", make_result(0))
    batch.add_result("r1", "a", poison)
    with pytest.raises(RowRejected, match="2147483648"):
        store.write_batch(batch)
    assert store.trials() == []  # one transaction: all or nothing
    assert store.write_batch(IngestBatch(results=batch.results[:1])) == 1


def test_a_missing_table_makes_writes_fail_as_unwritable(store: Store) -> None:
    store.ingest_results("r1", "a", [make_result(0)])
    store.query("DROP VIEW results; DROP VIEW run_progress; DROP VIEW failures", allow_write=True)
    store.query("DROP TABLE trials", allow_write=True)
    with pytest.raises(StoreUnwritable, match="trials"):
        store.ingest_results("r1", "a", [make_result(1)])


# ---------------------------------------------------------------- issue 31: SQL and ngb's files


def test_every_connection_has_extension_autoloading_and_installing_off(store: Store) -> None:
    """A SQLite file as the store made DuckDB fetch its extension from the internet."""
    from ngb.sweeps.store.connect import connection

    store.ingest_results("r1", "a", [make_result(0)])
    wanted = "SELECT current_setting('autoload_known_extensions'), " \
             "current_setting('autoinstall_known_extensions')"  # fmt: skip
    for write in (False, True):
        with connection(store.path, write=write, timeout=5) as conn:
            assert conn.execute(wanted).fetchone() == (False, False)
    with store.batch(), connection(store.path, write=True, timeout=5) as conn:
        assert conn.execute(wanted).fetchone() == (False, False)  # the batch's keeper's instance
    missing = Store(store.path.parent / "none" / "x.duckdb")
    assert missing.query(wanted)[1] == [(False, False)]  # the empty stand-in database too


def test_a_sqlite_file_is_named_as_such(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "r.duckdb"
    with sqlite3.connect(path) as lite:
        lite.execute("CREATE TABLE trials (id INTEGER)")
    before = path.read_bytes()
    for call in (lambda s: s.runs(), lambda s: s.create_run("r", "s", "", ["a"], 1)):
        with pytest.raises(NgbError, match="is a SQLite file, not an ngb results database"):
            call(Store(path))
    assert path.read_bytes() == before


def test_sql_never_reaches_ngbs_files_whatever_the_flags(store: Store, tmp_path: Path) -> None:
    """COPY/ATTACH/EXPORT onto the store, its WAL or a FIFO: refused with one line for every
    flag combination, nothing written, nothing blocked (a FIFO open would hang this test)."""
    store.ingest_results("r1", "a", [make_result(0)])
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    before = store.path.read_bytes()
    targets = [store.path, Path(f"{store.path}.wal"), fifo]
    statements = [f"COPY (SELECT 1) TO '{t}' (FORMAT csv)" for t in targets]
    statements += [f"COPY (SELECT 1) TO 'file:{t}'" for t in targets]
    statements += [f"ATTACH '{store.path}.wal' AS w", f"FROM read_csv('{fifo}') SELECT *"]
    for sql in statements:
        for write in (False, True):
            for files in (False, True):
                done = threading.Event()
                errors: list[Exception] = []

                def run(
                    sql: str = sql,
                    write: bool = write,
                    files: bool = files,
                    done: threading.Event = done,
                    errors: list[Exception] = errors,
                ) -> None:
                    try:
                        store.query(sql, allow_write=write, allow_files=files)
                    except NgbError as exc:
                        errors.append(exc)
                    done.set()

                threading.Thread(target=run, daemon=True).start()
                assert done.wait(20), f"blocked: {sql} write={write} files={files}"
                assert errors and "\n" not in str(errors[0]), (sql, write, files)
    assert store.path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", store.path.name]


def test_allow_files_reaches_the_named_files_only(store: Store, tmp_path: Path) -> None:
    store.ingest_results("r1", "a", [make_result(0)])
    out = tmp_path / "out.csv"
    store.query(f"COPY (SELECT 7 AS a) TO '{out}' (FORMAT csv)", allow_files=True)
    store.query(f"COPY (SELECT 8 AS a) TO '{out}' (FORMAT csv)", allow_files=True)  # replaced
    assert out.read_text().split() == ["a", "8"]
    read_all = f"FROM read_csv('{tmp_path}/*.csv') SELECT a"
    read_computed = f"FROM read_csv('{tmp_path}/o' || 'ut.csv') SELECT a"
    assert store.query(read_all, allow_files=True)[1] == [(8,)]
    with pytest.raises(NgbError, match="only the files it names in plain quotes"):
        store.query(read_computed, allow_files=True)
    with pytest.raises(NgbError, match="plain '...', not an expression"):
        store.query(f"COPY (SELECT 1) TO ('{tmp_path}/x' || '.csv')", allow_files=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv", store.path.name]


# A query that runs far longer than these tests wait (tests/test_tui_sql.py's LONG)
LONG_SQL = "SELECT sum((a.range * b.range) % 7) FROM range(200000) a, range(200000) b"


def test_a_long_ngb_query_lets_a_writer_in_after_seconds(store: Store) -> None:
    """Issue 31, item 13: a 125 s `ngb query` held a live run's ingest in another process for
    all of it. Past HOLD_S it lets the file go and goes on on a private copy."""
    from ngb.sweeps.cli.query import HOLD_S

    store.ingest_results("r1", "a", [make_result(0)])
    reader = subprocess.Popen(
        [NGB, "query", LONG_SQL, "--db", str(store.path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TMPDIR": str(store.path.parent)},  # its copy goes with the test
    )  # fmt: skip
    try:
        # it holds the file now (the open takes a moment on a busy machine)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and reader.poll() is None:
            probe = Store(store.path, busy_timeout_s=0, write_timeout_s=0)
            try:
                probe.query("SELECT 1", allow_write=True)  # read-write: refused while held
            except DatabaseBusy:
                break
            except NgbError:
                break
            time.sleep(0.05)
        began = time.monotonic()
        store.create_run("r2", "demo", "", ["a"], 1)  # the live run's writer
        waited = time.monotonic() - began
        assert reader.poll() is None, reader.communicate()  # the query is still running
        print(f"the writer waited {waited:.2f} s for a running ngb query")
        assert waited < HOLD_S + 10, waited
    finally:
        reader.send_signal(signal.SIGTERM)  # as ctrl+c: cancelled, its copy removed
        try:
            _, said = reader.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            reader.kill()
            _, said = reader.communicate()
    assert [r["run_id"] for r in store.runs()] == ["r2"]
    assert reader.returncode == 1 and said == "error: query cancelled\n", said
    assert not list(store.path.parent.glob("ngb-query-*"))


def test_a_query_stopped_on_the_file_answers_the_same_on_its_copy(store: Store) -> None:
    from ngb.sweeps.store import snapshot as store_snapshot
    from ngb.sweeps.store.snapshot import QueryJob

    store.ingest_results("r1", "a", [make_result(i) for i in range(3)])
    time.sleep(2 * store_snapshot.FRESH_S)
    sql = "SELECT count(*) FROM trials, range(30000000)"
    on_file = QueryJob(store, sql, hold_s=600).run()
    assert str(store.path.resolve()) not in store_snapshot._snapshots  # no copy was made
    on_copy = QueryJob(store, sql, hold_s=0.01, threads=None).run()  # stopped, then copied
    assert on_file == on_copy == (["count_star()"], [(90000000,)])
    assert str(store.path.resolve()) in store_snapshot._snapshots


# ---------------------------------------------------------------- one connection for several reads


def test_reads_inside_one_connection_open_the_file_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The console's Results poll reads a run's devices, trials and repetitions together: one
    open of the file (each costs ~25 ms of CPU on the 2-core VM), the same rows as apart."""
    from ngb.sweeps.store import database

    store.create_run("r1", "demo", "", ["dev"], 2)
    store.ingest_results("r1", "dev", [make_result(0), make_result(1, reps=2)])
    apart = (
        store.run_devices("r1"), store.trials(run_id="r1"), store.repetition_throughputs("r1")
    )  # fmt: skip
    opened: list[bool] = []
    real = database.connection

    def counted(*args: object, **kwargs: object) -> object:
        opened.append(bool(kwargs.get("write")))
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(database, "connection", counted)
    with store.one_connection():
        together = (
            store.run_devices("r1"), store.trials(run_id="r1"), store.repetition_throughputs("r1")
        )  # fmt: skip
    assert together == apart
    assert opened == [False]
    by_key = {key: reps for (_, _, key), reps in together[2].items()}
    assert sorted(by_key.values()) == [[100.0, 101.0, 102.0], [101.0, 102.0]]
    opened.clear()
    store.runs()
    store.trials(run_id="r1")
    assert opened == [False, False]  # outside the block each read opens its own


def test_a_cancel_before_duckdb_begins_the_query_still_stops_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DuckDB forgets an interrupt that lands before a query has begun. A cancel landing just
    after the job named its connection, before DuckDB started, let the query run on (a CI run's
    `ngb query` had not ended 30 s after its SIGTERM, 2026-11-29). Here the cancel lands in
    exactly that window; the query must still stop within seconds."""
    import duckdb
    from ngb.sweeps.store.snapshot import QueryJob

    store.ingest_results("r1", "a", [make_result(0)])
    cancelled = threading.Event()
    real_connect = duckdb.connect

    class HeldBeforeExecute:
        """The copy's connection; its execute waits until the cancel has been sent."""

        def __init__(self, conn: duckdb.DuckDBPyConnection) -> None:
            self._conn = conn

        def execute(self, sql: str, *args: object) -> duckdb.DuckDBPyConnection:
            if sql == LONG_SQL:  # not the settings applied before it
                assert cancelled.wait(10)
            return self._conn.execute(sql, *args)

        def __getattr__(self, name: str) -> object:
            return getattr(self._conn, name)

    def connect(*args: object, **kwargs: object) -> object:
        conn = real_connect(*args, **kwargs)  # type: ignore[arg-type]
        # only the query's own connection (the copy's), not the copy's checks before it
        return HeldBeforeExecute(conn) if sys._getframe(1).f_code.co_name == "_run_on" else conn

    monkeypatch.setattr(duckdb, "connect", connect)
    job = QueryJob(store, LONG_SQL, threads=1)  # no hold_s: straight to a copy
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            job.run()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    deadline = time.monotonic() + 30
    while job._conn is None and time.monotonic() < deadline:  # noqa: SLF001
        time.sleep(0.01)
    assert job._conn is not None  # noqa: SLF001 - named, and DuckDB not started
    job.cancel()
    cancelled.set()
    began = time.monotonic()
    worker.join(15)
    assert not worker.is_alive(), "the cancelled query ran on"
    assert time.monotonic() - began < 5
    assert len(outcome) == 1 and str(outcome[0]) == "query cancelled", outcome


@pytest.mark.parametrize("burst", [(signal.SIGINT,), (signal.SIGTERM,) * 20 + (signal.SIGHUP,)])
def test_ngb_query_ends_with_one_line_however_the_signals_come(
    store: Store, burst: tuple[int, ...]
) -> None:
    """ctrl+c, or a burst of signals: the query is cancelled, its copy removed, and the
    command says so in one line. (A SIGTERM raised as KeyboardInterrupt inside the wait's lock
    once ended a CI run's ``ngb query`` in "release unlocked lock" and SIGABRT.) Exit status 1,
    or the burst's own signal where one came after that line: the command has restored the
    signals' handlers by then, and a late SIGTERM ends it as it ends any process (a loaded
    CI run's burst outlasted the cancel)."""
    store.ingest_results("r1", "a", [make_result(0)])
    reader = subprocess.Popen(
        [NGB, "query", LONG_SQL, "--db", str(store.path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TMPDIR": str(store.path.parent)},
    )  # fmt: skip
    try:
        time.sleep(1.5)  # started, and past the interpreter's start-up
        assert reader.poll() is None, reader.communicate()
        for signum in burst:
            reader.send_signal(signum)
            time.sleep(0.001)
        _, said = reader.communicate(timeout=30)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.communicate()
    assert said == "error: query cancelled\n", (reader.returncode, said)
    assert reader.returncode in (1, *(-signum for signum in burst)), (reader.returncode, said)
    assert not list(store.path.parent.glob("ngb-query-*"))  # its copy is gone


def test_a_query_leaves_no_timer_thread_holding_its_connection(store: Store) -> None:
    """The timers a query starts (``hold_s`` on the file, ``timeout_s``) have ended when it
    returns. A cancelled timer's thread still held the connection for a moment, and an
    ``ngb query`` whose reader had gone (``| head``) could exit in that moment: DuckDB then
    printed "nanobind: leaked ... DuckDBPyConnection" on stderr (make test, 2026-11-29)."""
    from ngb.sweeps.store.snapshot import QueryJob

    store.ingest_results("r1", "a", [make_result(0)])
    for _ in range(20):  # a thread that had not yet run its last lines is caught most times
        before = set(threading.enumerate())
        job = QueryJob(store, "SELECT count(*) FROM trials", hold_s=30.0, timeout_s=60.0)
        assert job.run() == (["count_star()"], [(1,)])
        left = [t.name for t in threading.enumerate() if t not in before]
        assert left == [], left


def test_select_reads_what_query_reads_without_an_instance_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Store.select`` (ngb's own SQL) answers as ``query`` does, on the instance the process
    keeps for the file: no ``duckdb.connect`` of the file. Bad SQL is one line; a missing file
    reads as empty and is not created."""
    store = Store(tmp_path / "r.duckdb")
    store.create_run("r1", "demo", "", ["localhost"], 1, {})
    sql = "SELECT run_id, sweep_name FROM runs WHERE run_id = ?"
    assert (
        store.select(sql, ["r1"])
        == store.query(sql, ["r1"])
        == (
            ["run_id", "sweep_name"],
            [("r1", "demo")],
        )
    )
    opened = record_connects(monkeypatch)
    assert store.select(sql, ["r1"])[1] == [("r1", "demo")]
    assert str(store.path) not in opened, opened
    store.query(sql, ["r1"])
    assert str(store.path) in opened  # the operator's door: an instance of its own
    with pytest.raises(NgbError) as bad:
        store.select("SELECT no_such_column FROM runs")
    assert "\n" not in str(bad.value)
    missing = Store(tmp_path / "missing.duckdb")
    assert missing.select("SELECT 1 AS one") == (["one"], [(1,)])
    assert not missing.path.exists()
