"""Results store: ingest rate (goal >= 100k measurement rows/s) and 1M-row aggregate query time.

Builds synthetic trial results (not timed), ingests them through ``Store.ingest_results`` in
batches the way a run does (one connection and transaction per batch), then times an aggregate
over every measurement row (GROUP BY compiler, batch; goal < 200 ms), and the same joined to
the trials table:
- cold: a fresh ``Store.query`` (open the file read-only, run, close: what ``ngb query`` does)
- first: the first run on a newly opened connection (buffer pool empty)
- warm: the median of repeated runs on that connection

Usage: python benchmarks/store.py [--trials 10000] [--reps 100] [--batch 1000] [--db PATH]
"""

from __future__ import annotations

import argparse
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
    from ngb.core.types import MeasureSettings, Stats, TrialResult, TrialSpec

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

    fresh = type(store)(db)  # a new Store: checks the schema and opens the file, like the CLI
    t0 = time.perf_counter()
    _, rows = fresh.query(sql)
    cold_ms = (time.perf_counter() - t0) * 1000
    conn = duckdb.connect(str(db), read_only=True)
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
    args = parser.parse_args()

    from ngb.sweeps.store import Store

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
    return 0


if __name__ == "__main__":
    sys.exit(main())
