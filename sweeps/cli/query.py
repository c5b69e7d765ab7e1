"""``ngb query``: SQL over the results database, read-only unless ``--write``.

It opens the results file only for as long as it needs it, so it works from another terminal
while a run is writing (see ``ngb.sweeps.store.database``); a read-only query still running after
``HOLD_S`` lets the file go and finishes on a private copy (``store_snapshot.QueryJob``), so
the run's writer waits seconds, not for the query. Which files SQL may reach, with and without
``--allow-files``: ``ngb.sweeps.store.sql_files``. The statement helpers here are shared with
``ngb export`` (``sweeps/cli/export.py``).
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import signal
import sys
import threading
from typing import TYPE_CHECKING

import click
from ngb.core.base.errors import NgbError
from ngb.sweeps.cli.options import results_db_options

if TYPE_CHECKING:
    import duckdb
    from ngb.sweeps.store.database import Store
    from ngb.sweeps.store.snapshot import QueryJob, SqlAnswer


def open_store(db: str | None, wait: float) -> Store:
    from ngb.sweeps.store.database import Store

    return Store(db, busy_timeout_s=wait)


def _statements(sql: str) -> list[duckdb.Statement]:
    """The statements in ``sql``, split by DuckDB's own parser (no database needed).

    A syntax error gives an empty list: the query itself then reports it, with its position.
    """
    import duckdb

    try:
        return list(duckdb.extract_statements(sql))
    except duckdb.Error:
        return []


def one_statement(sql: str) -> duckdb.Statement | None:
    """Refuse several statements: only the last one's rows would be shown (or exported)."""
    statements = _statements(sql)
    if len(statements) > 1:
        raise NgbError(
            f"one SQL statement at a time, got {len(statements)}: only the last one's rows "
            "would show; run them one by one"
        )
    return statements[0] if statements else None


#: seconds a read-only query holds the results file before it goes on on a copy of it (taken
#: without the lock): what a live run's writer in another process may wait at most. Most
#: aggregates end sooner; at 2 s a run's write waited 1.8 s (``ngb bench store``).
HOLD_S = 0.3
FILES_HINT = "without --allow-files"

# Statement kinds that return rows to export (PIVOT parses as MULTI).
ROW_STATEMENTS = ("SELECT", "EXPLAIN", "PRAGMA", "MULTI")


def run_interruptibly(job: QueryJob) -> SqlAnswer:
    """``job`` in a thread, so ctrl+c (or SIGTERM, SIGHUP) reaches it: a signal waits for DuckDB's
    loop to return to Python, which a long query does not do. The query is then cancelled
    and its copy removed, and the command ends with one line."""
    answer: list[SqlAnswer] = []
    failed: list[BaseException] = []

    finished = threading.Event()

    def work() -> None:
        try:
            answer.append(job.run())
        except BaseException as exc:  # handed to the main thread as it is
            failed.append(exc)
        finally:
            finished.set()

    # The signals only note that they came; the wait below looks. Raising KeyboardInterrupt from
    # the handler instead could land inside the Event's own lock handling (a CI run: "release
    # unlocked lock", then the interpreter ended under DuckDB's running thread: SIGABRT).
    signalled: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        signalled.append(signum)

    worker = threading.Thread(target=work, name="ngb-query", daemon=True)
    previous = {}
    if threading.current_thread() is threading.main_thread():
        # SIGHUP too: a terminal closed under a query would otherwise leave its copy behind
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            previous[signum] = signal.signal(signum, on_signal)
    try:
        worker.start()
        # an Event with a timeout: a signal's handler runs in between, and the loop sees it
        while not finished.wait(0.2) and not signalled:
            pass
        if signalled:
            job.cancel()
            finished.wait(30)  # DuckDB stops within milliseconds; its copy goes with it
            raise NgbError("query cancelled")
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if failed:
        raise failed[0]
    return answer[0]


def _plain(value: object) -> object:
    """JSON-friendly form of a DuckDB value (timestamps, decimals, blobs)."""
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, float) and value != value:
        return None
    return value


@click.command("query")
@click.argument("sql")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "json"]),
    default="table",
    show_default=True,
    help="How to print the rows.",
)
@click.option("--write", is_flag=True, help="Allow statements that change the database.")
@click.option(
    "--allow-files",
    is_flag=True,
    help="Let the SQL read and write other files (read_csv, COPY ... TO); off even with --write.",
)
@results_db_options
def query(sql: str, fmt: str, write: bool, allow_files: bool, db: str | None, wait: float) -> None:
    """Run SQL over the results (read-only unless --write; no other file unless --allow-files).

    Tables: runs, run_devices, trials, measurements, cpu_samples, tuning_progress, errors,
    devices, probes; views: results, failures, run_progress.
    """
    one_statement(sql)
    store = open_store(db, wait)
    if write:
        columns, rows = store.query(sql, allow_write=True, allow_files=allow_files)
    else:
        from ngb.sweeps.store.snapshot import QueryJob

        store.require_file()  # read-only SQL on a missing file: say so, create nothing
        # Past HOLD_S the query lets the file go and finishes on a private copy, so a live
        # run's writer in another process waits seconds, not for the whole query.
        job = QueryJob(
            store, sql, allow_files=allow_files, hold_s=HOLD_S, hint=FILES_HINT, threads=None,
            keep_copy=False,
        )  # fmt: skip
        columns, rows = run_interruptibly(job)
    if fmt == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([[_plain(v) for v in row] for row in rows])
    elif fmt == "json":
        records = [{c: _plain(v) for c, v in zip(columns, row, strict=True)} for row in rows]
        click.echo(json.dumps(records, indent=1, default=str))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(show_edge=False, header_style="bold")
        for name in columns:
            table.add_column(name, overflow="fold")
        for row in rows:
            table.add_row(*("" if v is None else str(_plain(v)) for v in row))
        console = Console()
        if columns:
            console.print(table)
        console.print(f"[dim]{len(rows)} row{'s' if len(rows) != 1 else ''}[/dim]")
