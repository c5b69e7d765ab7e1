"""Results store: ingest rate (goal >= 100k measurement rows/s) and 1M-row aggregate query time.

Builds synthetic trial results (not timed), ingests them through ``Store.ingest_results`` in
batches the way a run does (one connection and transaction per batch), then times an aggregate
over every measurement row (GROUP BY compiler, batch; goal < 200 ms), and the same joined to
the trials table:
- cold: a fresh ``Store.query`` (open the file read-only, run, close: what ``ngb query`` does)
- first: the first run on a newly opened connection (buffer pool empty)
- warm: the median of repeated runs on that connection

Then, on a generated store of ``--size-gb`` (``_store_scale``): console query latency, peak RSS
of ``ngb report energy`` and ``ngb advise`` (child processes), and how long a live run's writes
wait while a ``--query-s`` query and an export of every repetition run in other processes.

Usage: python benchmarks/store.py [--trials 10000] [--reps 100] [--batch 1000] [--db PATH]
       [--size-gb 0.1] [--store DB] [--query-s 60] [--scale-only] [--delays-only]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

COMPILERS = ("identity", "torchscript", "onnxruntime", "openvino", "tvm")
BATCHES = (1, 2, 4, 8, 16, 32)

# The chart query: throughput by compiler and batch over every repetition (no join needed:
# measurements carry the trial's axes).
AGGREGATE = """
SELECT compiler, batch, count(*) AS reps, avg(throughput) AS mean_thr,
       stddev_samp(throughput) AS std_thr, min(throughput) AS min_thr
FROM measurements GROUP BY compiler, batch ORDER BY compiler, batch
"""
# The same through the trials table (e.g. to group by a column only trials have).
AGGREGATE_JOIN = """
SELECT t.family, t.compiler, t.batch, count(*) AS reps, avg(m.throughput) AS mean_thr
FROM measurements m JOIN trials t USING (run_id, device, key)
GROUP BY ALL ORDER BY ALL
"""


def make_results(n_trials: int, reps: int) -> list:
    from ngb.core.records.types import MeasureSettings, Stats, TrialResult, TrialSpec

    measure = MeasureSettings()
    out = []
    for i in range(n_trials):
        spec = TrialSpec(
            model="conv",
            compiler=COMPILERS[i % len(COMPILERS)],
            batch=BATCHES[(i // len(COMPILERS)) % len(BATCHES)],
            width=8 + i,
            measure=measure,
        )
        base = 100.0 + (i % 97)
        out.append(
            TrialResult(
                key=spec.key,
                spec=spec.to_dict(),
                host="bench",
                started_at=1.7e9 + i,
                finished_at=1.7e9 + i + 1,
                compile_s=0.1,
                throughput=Stats(n=reps, mean=base, std=1.0, median=base, cov=0.01),
                repetitions=[
                    {"iters": 50, "elapsed_s": 0.5, "throughput": base + (r % 7) * 0.1}
                    for r in range(reps)
                ],
            )
        )
    return out


def time_query(store, db: Path, sql: str) -> tuple[float, float, float, float, int]:
    import duckdb
    from ngb.sweeps.store.sql_files import BASE_CONFIG

    fresh = type(store)(db)  # a new Store: checks the schema and opens the file, like the CLI
    t0 = time.perf_counter()
    _, rows = fresh.query(sql)
    cold_ms = (time.perf_counter() - t0) * 1000
    conn = duckdb.connect(str(db), read_only=True, config=BASE_CONFIG)  # as ngb's own
    try:
        t0 = time.perf_counter()
        conn.execute(sql).fetchall()
        first_ms = (time.perf_counter() - t0) * 1000
        warm = []
        c0 = time.process_time()
        for _ in range(7):
            t0 = time.perf_counter()
            conn.execute(sql).fetchall()
            warm.append((time.perf_counter() - t0) * 1000)
        cpu_ms = (time.process_time() - c0) * 1000 / 7
    finally:
        conn.close()
    return cold_ms, first_ms, statistics.median(warm), cpu_ms, len(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=100, help="measurement rows per trial")
    parser.add_argument("--batch", type=int, default=1000, help="trials per ingest batch")
    parser.add_argument("--db", type=Path, default=None, help="results file (default: temp)")
    parser.add_argument(
        "--console", type=Path, default=None, metavar="DB",
        help="only time the console's SQL queries on this existing results file",
    )  # fmt: skip
    parser.add_argument(
        "--size-gb", type=_positive, default=0.1,
        help="size of the generated store the scale figures are measured on (GiB)",
    )  # fmt: skip
    parser.add_argument(
        "--store", type=Path, default=None, metavar="DB",
        help="generate the scale store here once and reuse it (default: a temporary file)",
    )  # fmt: skip
    parser.add_argument("--points", type=int, default=4000, help="points per run in it")
    parser.add_argument(
        "--query-s", type=_positive, default=60.0, help="length of the long query (seconds)"
    )
    parser.add_argument(
        "--scale-only", action="store_true", help="only the figures on the generated store"
    )
    parser.add_argument(
        "--delays-only", action="store_true",
        help="of the scale figures, only how long a live run's writes wait behind readers",
    )  # fmt: skip
    args = parser.parse_args()

    from ngb.sweeps.store.database import Store

    if args.console is not None:
        return console_latency(Store(args.console)) + ingest_delay(Store(args.console))
    if args.scale_only:
        return scale(args)

    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or Path(tmp) / "bench.duckdb"
        store = Store(db)
        store.runs()  # create the schema outside the timed part

        t0 = time.perf_counter()
        results = make_results(args.trials, args.reps)
        build_s = time.perf_counter() - t0
        rows = args.trials * args.reps
        print(
            f"built {args.trials} results ({rows:,} measurement rows) in {build_s:.2f} s "
            "(not timed)"
        )

        load = os.getloadavg()[0]
        t0, c0 = time.perf_counter(), time.process_time()
        for start in range(0, len(results), args.batch):
            store.ingest_results("bench", "dev", results[start : start + args.batch])
        ingest_s = time.perf_counter() - t0
        cpu_s = time.process_time() - c0
        rate = rows / ingest_s
        verdict = "ok" if rate >= 100_000 else "BELOW GOAL"
        print(
            f"ingest: {rows:,} measurement rows + {args.trials:,} trials in {ingest_s:.2f} s "
            f"= {rate:,.0f} measurement rows/s (goal >= 100,000: {verdict}; "
            f"batches of {args.batch} trials)"
        )
        # On a shared machine wall time depends on the neighbours; CPU time much less so.
        print(
            f"  ingest CPU time {cpu_s:.2f} s (all threads of this process) -> "
            f"{rows / cpu_s:,.0f} rows per CPU-second; load average at start {load:.1f} "
            f"on {os.cpu_count()} cores"
        )

        t0 = time.perf_counter()
        again = store.ingest_results("bench", "dev", results[: args.batch])
        print(
            f"re-ingest of {args.batch} stored trials: {again} new rows in "
            f"{(time.perf_counter() - t0) * 1000:.0f} ms (idempotence)"
        )

        measured = store.query("SELECT count(*) FROM measurements")[1][0][0]
        for label, sql in (
            ("GROUP BY compiler, batch", AGGREGATE),
            ("joined to trials", AGGREGATE_JOIN),
        ):
            cold_ms, first_ms, warm_ms, cpu_ms, groups = time_query(store, db, sql)
            verdict = "ok" if max(cold_ms, warm_ms) < 200 else "BELOW GOAL"
            print(
                f"aggregate {label} over {measured:,} measurement rows -> {groups} groups: "
                f"cold (ngb query path: open+run+close) {cold_ms:.0f} ms, first on a new "
                f"connection {first_ms:.0f} ms, warm median of 7 {warm_ms:.0f} ms "
                f"(warm CPU time {cpu_ms:.0f} ms/query, all threads) "
                f"(goal < 200 ms: {verdict})"
            )
        print(f"file size: {db.stat().st_size / 2**20:.1f} MiB")
    return scale(args)


def _positive(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
    return value


def scale(args: argparse.Namespace) -> int:
    """Console latency, peak RSS of report energy and advise, a live run's ingest delay during
    a long query and an export: on a generated store of ``--size-gb`` (issue 31)."""
    from _store_scale import main as scale_main

    if args.store is not None:
        return scale_main(
            args.store, args.size_gb, args.points, args.query_s, console_latency,
            delays_only=args.delays_only,
        )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="ngb-bench-store-") as tmp:
        db = Path(tmp) / "results.duckdb"
        return scale_main(
            db, args.size_gb, args.points, args.query_s, console_latency,
            delays_only=args.delays_only,
        )  # fmt: skip


def console_latency(store, queries: int = 5) -> int:
    """The console's SQL screen (``QueryJob``): each query copied the whole file under the
    store's lock (issue 31, item 12); now a copy is taken without the lock and reused while
    the file is unchanged. Timed both ways on the same file: a copy per query and reuse."""
    from ngb.sweeps.store.snapshot import QueryJob

    size = store.path.stat().st_size / 2**30
    print(f"console queries on {store.path} ({size:.2f} GiB), load {os.getloadavg()[0]:.1f}")
    sql = "SELECT count(*) FROM runs"
    for label, keep in (("copy per query", False), ("reused copy", True)):
        times = []
        for _ in range(queries):
            t0 = time.perf_counter()
            QueryJob(store, sql, keep_copy=keep).run()
            times.append((time.perf_counter() - t0) * 1000)
        print(
            f"  {label}: first {times[0]:.0f} ms, then median {statistics.median(times[1:]):.0f}"
            f" ms over {queries - 1} queries"
        )
    return 0


# `ngb query` in its own process, HOLD_S set as argv[3] says ("default": as shipped)
QUERY_PROCESS = """
import sys
from ngb.sweeps.cli import main, query
if sys.argv[3] != "default":
    query.HOLD_S = float(sys.argv[3])
sys.exit(main(["query", sys.argv[2], "--db", sys.argv[1]]))
"""
LONG_QUERY = "SELECT sum((a.range * b.range) % 7) FROM range(40000) a, range(40000) b"


def ingest_delay(store) -> int:
    """A live run's write while a long `ngb query` runs in another process (issue 31, item 13):
    how long the write waits, with the query holding the file throughout (before) and letting
    it go after HOLD_S (now)."""
    import subprocess

    from ngb.sweeps.store.database import DatabaseBusy, Store

    print(f"a write during a long ngb query ({LONG_QUERY})")
    for label, hold in (("query holds the file (before)", "1e9"), ("as shipped", "default")):
        began = time.perf_counter()
        reader = subprocess.Popen(
            [sys.executable, "-c", QUERY_PROCESS, str(store.path), LONG_QUERY, hold],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        probe = Store(store.path, busy_timeout_s=0, write_timeout_s=0)
        while reader.poll() is None:  # until the query holds the file
            try:
                probe.query("SELECT 1", allow_write=True)
            except DatabaseBusy:
                break
            time.sleep(0.05)
        writer = Store(store.path, write_timeout_s=600)
        t0 = time.perf_counter()
        writer.create_run(f"delay-{time.time_ns()}", "bench", "", ["dev"], 1)
        waited = time.perf_counter() - t0
        _, err = reader.communicate()
        query_s = time.perf_counter() - began
        print(
            f"  {label}: the write waited {waited:.1f} s; the query took {query_s:.1f} s"
            + (f" ({err.strip()})" if reader.returncode else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
