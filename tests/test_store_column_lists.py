"""A flush's rows go to DuckDB as one Python list per column (``values.columns_relation``), not
as Arrow tables: building an Arrow array from Python objects imports pandas (~0.35-0.42 CPU-s
once a process, a run's first flush; a sixth of the orchestrator's CPU at 32 loopback devices).
What is stored must not change with it: the same rows as through Arrow, NaN repetitions as NULL,
timestamps from microseconds, lone surrogates escaped, and a flush with many per-call latencies
still through Arrow (``ingest.LATENCY_LISTS_MAX``)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from ngb.core.records.types import TrialResult, TrialSpec
from ngb.sweeps.store import ingest
from ngb.sweeps.store.database import Store
from ngb.sweeps.store.result_store import IngestBatch
from ngb.sweeps.store.values import columns_relation


def _result(i: int, calls: int) -> TrialResult:
    spec = TrialSpec(model="conv", compiler="identity", width=8 + i, depth=1, batch=2)
    reps = [{"iters": 10, "elapsed_s": 0.1, "throughput": 100.0 + r, "worker": r % 2}
            for r in range(3)]  # fmt: skip
    return TrialResult(
        key=spec.key, spec=spec.to_dict(), host="h", started_at=1.7e9 + i,
        finished_at=1.7e9 + i + 1,
        repetitions=[*reps, {"iters": 10, "elapsed_s": math.nan, "throughput": math.nan}],
        cpu_samples=[[0.1, 50.0, 95.0], [0.2, math.nan]],
        latency_sample_ns=[1_000_000 + 1_000 * c for c in range(calls)], latency_sample_every=3,
        error="bad byte \udcff here",
    )  # fmt: skip


def _batch() -> IngestBatch:
    batch = IngestBatch()
    for i in range(3):
        batch.add_result("r1", "dev", _result(i, calls=5 + i))
    batch.add_cpu_sample("r1", "dev", {"ts": 1.7e9, "key": "k", "percent": 10.0})
    batch.add_tuning("r1", "dev", "k", {"ts": 1.7e9, "trials_done": 4, "budget": 64, "best_ms": 1.5,
                                         "tasks": [{"name": "conv", "best_ms": 1.5}]})  # fmt: skip
    return batch


def _rows(store: Store, sql: str) -> list[tuple[object, ...]]:
    return [tuple(r) for r in store.query(sql)[1]]


def test_a_flush_stores_its_rows_as_they_were(tmp_path: Path, monkeypatch) -> None:
    lists = Store(tmp_path / "lists.duckdb")
    arrow = Store(tmp_path / "arrow.duckdb")
    assert lists.write_batch(_batch()) == 3
    monkeypatch.setattr(ingest, "LATENCY_LISTS_MAX", 0)  # every latency through Arrow
    assert arrow.write_batch(_batch()) == 3
    sql = "SELECT key, call, latency_ms FROM latencies ORDER BY key, call"
    assert _rows(lists, sql) == _rows(arrow, sql) and len(_rows(lists, sql)) == 5 + 6 + 7
    reps = _rows(lists, "SELECT rep, iters, elapsed_s, throughput, worker, model, compiler, batch, "
                        "depth, width FROM measurements WHERE key = (SELECT min(key) FROM trials) "
                        "ORDER BY rep")  # fmt: skip
    assert reps[:3] == [(r, 10, 0.1, 100.0 + r, r % 2, "conv", "identity", 2, 1, 8)
                        for r in range(3)]  # fmt: skip
    samples = _rows(lists, "SELECT source, ts, t_s, sys_percent, proc_percent FROM cpu_samples "
                           "WHERE key = (SELECT min(key) FROM trials) ORDER BY t_s")  # fmt: skip
    assert samples == [("trial", None, 0.1, 50.0, 95.0), ("trial", None, 0.2, None, None)]
    tuning = _rows(lists, "SELECT key, trials_done, budget, best_ms, tasks FROM tuning_progress")
    assert tuning == [("k", 4, 64, 1.5, '[{"best_ms": 1.5, "name": "conv"}]')]
    calls = _rows(lists, "SELECT call, latency_ms FROM latencies WHERE key = "
                         "(SELECT min(key) FROM latencies) ORDER BY call")  # fmt: skip
    assert calls == [(3 * c, 1.0 + c / 1000) for c in range(len(calls))]  # every 3rd call, ms
    nan_rep = _rows(lists, "SELECT elapsed_s, throughput, worker FROM measurements WHERE rep = 3")
    assert set(nan_rep) == {(None, None, None)}  # NaN and a missing field are NULL
    assert _rows(lists, "SELECT DISTINCT error FROM trials") == [("bad byte \\udcff here",)]
    live = _rows(lists, "SELECT ts FROM cpu_samples WHERE source = 'live'")
    assert len(live) == 1 and live[0][0].year >= 2023  # a timestamp from microseconds
    assert lists.write_batch(_batch()) == 0  # stored once: the same trials are skipped
    assert _rows(lists, "SELECT count(*) FROM cpu_samples WHERE source = 'live'") == [(1,)]


def test_a_flush_imports_neither_pandas_nor_pyarrow(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from tests.test_store_column_lists import _batch\n"
        "from ngb.sweeps.store.database import Store\n"
        "assert Store(sys.argv[1]).write_batch(_batch()) == 3\n"
        "print(sorted({'pandas', 'pyarrow', 'numpy'} & set(sys.modules)))\n"
    )
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "r.duckdb")], cwd=root,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_columns_relation_casts_each_list_to_its_column() -> None:
    conn = duckdb.connect()
    columns = [("name", "VARCHAR NOT NULL"), ("n", "INTEGER"), ("x", "DOUBLE"),
               ("ok", "BOOLEAN"), ("at", "TIMESTAMP")]  # fmt: skip
    text, params = columns_relation(columns, {
        "name": ["a", "b\udcff"], "n": [1, None], "x": [2, math.inf], "ok": [True, None],
        "at": [1_700_000_000_000_000, None],
    })  # fmt: skip
    rows = conn.execute(f"SELECT * FROM {text}", params).fetchall()  # noqa: S608 - test text
    assert [r[:4] for r in rows] == [("a", 1, 2.0, True), ("b\\udcff", None, math.inf, None)]
    assert rows[0][4].year == 2023 and rows[1][4] is None
    empty, params = columns_relation(columns, {name: [] for name, _ in columns})
    assert conn.execute(f"SELECT count(*) FROM {empty}", params).fetchone() == (0,)  # noqa: S608
    with pytest.raises(duckdb.ConversionException):  # what does not fit its column is refused
        text, params = columns_relation([("n", "INTEGER")], {"n": [2**40]})
        conn.execute(f"SELECT * FROM {text}", params).fetchall()  # noqa: S608 - test text
