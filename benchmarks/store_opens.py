"""Store calls: CPU per read and per write through ngb, beside a fresh DuckDB instance per call.

Every store call opens the file and closes it again, so other processes can take it between
calls (``sweeps/store/connect.py``). ngb's own connections attach the file to a DuckDB
instance this process keeps for it (``host``); before that, each call made a new instance
(``duckdb.connect``), whose catalog of built-in functions costs more than the call. Side by
side in one process, on a small store: a read (``Store.runs``), a write (``Store.set_run_status``,
with its checkpoint), and a plain loop that makes an instance per read, as ngb did.

Usage: python benchmarks/store_opens.py [--calls 200]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def cpu_per_call(fn: Callable[[], object], calls: int) -> tuple[float, float]:
    """(CPU ms, wall ms) per call, over ``calls`` calls after one untimed."""
    fn()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(calls):
        fn()
    return (
        1000 * (time.process_time() - cpu0) / calls,
        1000 * (time.perf_counter() - wall0) / calls,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    if args.calls < 1:
        parser.error("argument --calls: must be at least 1")
    import duckdb
    from ngb.sweeps.store.database import Store
    from ngb.sweeps.store.sql_files import BASE_CONFIG

    with tempfile.TemporaryDirectory(prefix="ngb-bench-") as tmp:
        store = Store(Path(tmp) / "r.duckdb")
        store.create_run("r0", "demo", "", ["localhost"], 1)

        def fresh_instance() -> object:
            conn = duckdb.connect(str(store.path), read_only=True, config=BASE_CONFIG)
            try:
                return conn.execute("SELECT * FROM runs").fetchall()
            finally:
                conn.close()

        print(f"{args.calls} calls each, load {os.getloadavg()[0]:.2f} before")
        rows = (
            ("ngb read (Store.runs)", lambda: store.runs()),
            ("ngb write (set_run_status)", lambda: store.set_run_status("r0", "running")),
            ("plain: an instance per read", fresh_instance),
        )
        for label, fn in rows:
            cpu_ms, wall_ms = cpu_per_call(fn, args.calls)
            print(f"{label:30} {cpu_ms:6.2f} ms CPU  {wall_ms:6.2f} ms wall per call")
        print(f"load {os.getloadavg()[0]:.2f} after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
