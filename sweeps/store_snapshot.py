"""Cancellable SQL for a console: a reader that never stops the writer.

A live run's writer (the orchestrator's ingest) and a long query of the operator must not share a
connection or the store's per-file lock: DuckDB lets a process hold a file either read-write or
read-only, so a query held open on the results file would stall every ingest behind it (and a
quit that flushes them). A read-only ``QueryJob`` therefore copies the file under the lock (a
read-only connection is open meanwhile, so no other process is half-way through a write), lets
the lock go, and runs the query on its own connection to the private copy. The writer waits only
for the copy, never for the query.

The job can be stopped from another thread (``cancel``: ``connection.interrupt()``) and stops
itself after ``timeout_s``; either way the query ends within milliseconds and the next job does not
queue behind it. A copy reads the results as of when the query started, which is what a console
wants. Queries run on one DuckDB thread: the console shares its machine with the benchmark when
the device is ``localhost``.

``allow_write`` queries must change the real file, so they run on it (under the lock, like any
writer) and the timeout bounds how long an ingest can wait for them.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ngb.core.errors import NgbError
from ngb.sweeps.store_connect import lock_for, read_errors, write_errors
from ngb.sweeps.store_query import sql_error

if TYPE_CHECKING:
    import duckdb
    from ngb.sweeps.store import Store

#: (column names, rows) of one query, as DuckDB gives them
SqlAnswer = tuple[list[str], list[tuple[object, ...]]]

#: DuckDB threads for a console's query (the benchmark may be running on this machine)
QUERY_THREADS = 1


class QueryCancelled(NgbError):
    """The operator cancelled the query, or it ran past its time limit."""


class QueryJob:
    """One query, on its own connection, that any thread may cancel."""

    def __init__(
        self,
        store: Store,
        sql: str,
        *,
        allow_write: bool = False,
        timeout_s: float | None = None,
    ) -> None:
        if not sql or not sql.strip():
            raise NgbError("empty SQL query")
        self.store = store
        self.sql = sql
        self.allow_write = allow_write
        self.timeout_s = timeout_s if timeout_s and timeout_s > 0 else None
        self._conn: duckdb.DuckDBPyConnection | None = None
        self._guard = threading.Lock()
        self._why = ""  # "cancelled" or "timeout" once stopped
        self.done = threading.Event()

    # -- control (any thread) ------------------------------------------------------------------
    def cancel(self, why: str = "cancelled") -> None:
        """Stop the query now (a no-op once it has ended)."""
        with self._guard:
            if self.done.is_set() or self._why:
                return
            self._why = why
            if self._conn is not None:
                self._conn.interrupt()

    @property
    def cancelled(self) -> bool:
        return bool(self._why)

    # -- running (a worker thread) -------------------------------------------------------------
    # Any: the cells of the caller's own SQL, whose types only that query knows
    def run(self) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Run the query; raises NgbError (``QueryCancelled`` when stopped) with one line."""
        timer = None
        if self.timeout_s is not None:
            timer = threading.Timer(self.timeout_s, self.cancel, args=("timeout",))
            timer.daemon = True
            timer.start()
        try:
            if self.allow_write:
                return self._run_on_store()
            with tempfile.TemporaryDirectory(prefix="ngb-query-") as tmp:
                copy = self._snapshot(Path(tmp))
                return self._run_on(copy)
        finally:
            if timer is not None:
                timer.cancel()
            with self._guard:
                self._conn = None
                self.done.set()

    def _snapshot(self, folder: Path) -> Path | None:
        """A private copy of the results file (None: no file yet, an empty database answers)."""
        path = self.store.path
        with lock_for(path), self.store._reader():  # noqa: SLF001 - checks version and integrity
            if not path.exists():
                return None
            copy = folder / "results.duckdb"
            try:
                shutil.copyfile(path, copy)
                wal = Path(f"{path}.wal")
                if wal.exists():
                    shutil.copyfile(wal, Path(f"{copy}.wal"))
            except OSError as exc:
                raise NgbError(f"cannot read results database {path}: {exc.strerror}") from None
        return copy

    def _run_on(self, copy: Path | None) -> SqlAnswer:
        import duckdb

        config: dict[str, str | bool | int | float | list[str]] = {
            "enable_external_access": False,
            "threads": QUERY_THREADS,
        }
        with read_errors(self.store.path):
            if copy is None:
                from ngb.sweeps.store import _empty_database

                conn = _empty_database()
                conn.execute(f"SET threads = {QUERY_THREADS}")
                conn.execute("SET enable_external_access = false")
            else:
                conn = duckdb.connect(str(copy), read_only=True, config=config)
        try:
            return self._execute(conn)
        finally:
            conn.close()

    def _run_on_store(self) -> SqlAnswer:
        with write_errors(self.store.path):
            self.store._ensure_schema()  # noqa: SLF001 - what Store.query does before a write
        with self.store._connection(write=True) as conn:  # noqa: SLF001 - holds the lock
            return self._execute(conn)

    def _execute(self, conn: duckdb.DuckDBPyConnection) -> SqlAnswer:
        import duckdb

        with self._guard:
            if self._why:  # cancelled before the connection opened
                raise self._stopped()
            self._conn = conn
        try:
            cur = conn.execute(self.sql)
            if cur.description is None:
                return [], []
            columns = [d[0] for d in cur.description]
            return columns, cur.fetchall()
        except duckdb.InterruptException:
            raise self._stopped() from None
        except duckdb.Error as exc:
            if self._why:
                raise self._stopped() from None
            raise sql_error(exc, self.allow_write) from None

    def _stopped(self) -> QueryCancelled:
        if self._why == "timeout":
            return QueryCancelled(f"query stopped after its time limit of {self.timeout_s:g} s")
        return QueryCancelled("query cancelled")
