"""Cancellable SQL for a console: a reader that never stops the writer.

A live run's writer (the orchestrator's ingest) and a long query of the operator must not share a
connection or the store's per-file lock: DuckDB lets a process hold a file either read-write or
read-only, so a query held open on the results file would stall every ingest behind it (and a
quit that flushes them). A read-only ``QueryJob`` therefore runs on a private copy of the file
(``take_snapshot``), copied without opening the file: the main file and the committed prefix of
DuckDB's log, as the writer's marker names them (``wal_marker``: no checkpoint changes the main
file while a copy is taken), so a writer in another process never waits for the copy nor for
the query. Without a marker (an older ngb wrote last) the files are copied whole and the copy
kept only when nothing wrote to them meanwhile (a store written to throughout is then copied
under the lock after a few tries). The copy is reused by the next queries while the store stays
unchanged (``_Snapshot``: on a 1.1 GB store, 2.5 s per query copying each time and 0.15 s
reusing, on the loaded 2-core VM: ``ngb bench store --console DB``); after a write the next
query copies again, only the log while the main file is the same (a live run checkpoints
seldom). The store's version is checked on the copy (``copy_check``). ``ngb query`` uses the
same job with ``hold_s``: it runs on the file itself (a short query needs no copy) and, still
running after ``hold_s``, lets the file go and runs again on a copy; while a live run writes
the store it reads a copy from the start. ``ngb export`` reads a copy too (``export_rows``),
streaming its rows to the file in batches.

The job can be stopped from another thread (``cancel``: ``connection.interrupt()``) and stops
itself after ``timeout_s``; either way the query ends within milliseconds and the next job does not
queue behind it. A copy reads the results as of when the query started, which is what a console
wants. Queries run on one DuckDB thread: the console shares its machine with the benchmark when
the device is ``localhost``.

``allow_write`` queries must change the real file, so they run on it (under the lock, like any
writer) and the timeout bounds how long an ingest can wait for them. Writing grants the store
only, as ``ngb query --write`` does: no statement reads or writes another file (``sql_files``),
and DuckDB's settings are locked.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ngb.core.base.errors import NgbError, UnknownNameError
from ngb.core.base.scratch import scratch_dir
from ngb.sweeps.store import raw_files
from ngb.sweeps.store import wal_marker as marked
from ngb.sweeps.store.connect import (
    check_is_file,
    connection,
    lock_for,
    read_errors,
    write_errors,
)
from ngb.sweeps.store.copy_check import check_copy
from ngb.sweeps.store.older import is_upgraded
from ngb.sweeps.store.query import EXPORT_FORMATS, check_export_destination, sql_error
from ngb.sweeps.store.sql_files import BASE_CONFIG, apply_grant, plan_files

#: a bare table or view name (anything else is a query)
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

if TYPE_CHECKING:
    import duckdb
    from ngb.sweeps.store.database import Store

#: (column names, rows) of one query, as DuckDB gives them
SqlAnswer = tuple[list[str], list[tuple[object, ...]]]

#: DuckDB threads for a console's query (the benchmark may be running on this machine)
QUERY_THREADS = 1
#: what a refused file statement tells the console's operator
FILES_HINT = "from the console (ngb query --allow-files can)"
#: a live run that wrote within this long may write again any moment: `ngb query` reads a copy
LIVE_S = 300.0
#: seconds between two interrupts of a cancelled query until it stops (``_interrupt_while_running``)
INTERRUPT_AGAIN_S = 0.05


class QueryCancelled(NgbError):
    """The operator cancelled the query, or it ran past its time limit."""


class CopyFailed(NgbError):
    """No private copy of the store could be made (a full disk or temporary folder)."""


class QueryJob:
    """One query, on its own connection, that any thread may cancel."""

    def __init__(
        self,
        store: Store,
        sql: str,
        *,
        allow_write: bool = False,
        timeout_s: float | None = None,
        allow_files: bool = False,
        hold_s: float | None = None,
        hint: str = FILES_HINT,
        threads: int | None = QUERY_THREADS,
        keep_copy: bool = True,
    ) -> None:
        if not sql or not sql.strip():
            raise NgbError("empty SQL query")
        # The console never reaches a file but the store, whether or not it may write;
        # `ngb query --allow-files` the files its SQL names (sql_files)
        self.grant = plan_files(sql, allow_files=allow_files, store=store.path, hint=hint)
        self.store = store
        self.sql = sql
        self.allow_write = allow_write
        self.allow_files = allow_files
        self.timeout_s = timeout_s if timeout_s and timeout_s > 0 else None
        # read-only: first on the file itself for at most this long, then on a copy
        self.hold_s = hold_s
        self.threads = threads  # on the copy; None: DuckDB's default (every core)
        self.keep_copy = keep_copy  # for the next query (the console); False: a one-off
        self._conn: duckdb.DuckDBPyConnection | None = None
        self._guard = threading.Lock()
        self._why = ""  # "cancelled" or "timeout" once stopped
        self._canceller: threading.Thread | None = None  # interrupts a cancelled query
        self.done = threading.Event()

    # -- control (any thread) ------------------------------------------------------------------
    def cancel(self, why: str = "cancelled") -> None:
        """Stop the query now (a no-op once it has ended)."""
        with self._guard:
            if self.done.is_set() or self._why:
                return
            self._why = why
            if self._conn is not None:  # None: the next connection sees _why and stops
                # started under the guard, so run() always finds it started to join
                self._canceller = threading.Thread(
                    target=self._interrupt_while_running, args=(self._conn,),
                    name="ngb-query-cancel", daemon=True,
                )  # fmt: skip
                self._canceller.start()

    def _interrupt_while_running(self, conn: duckdb.DuckDBPyConnection) -> None:
        """Interrupt ``conn`` now, and again every ``INTERRUPT_AGAIN_S`` while its query runs.
        DuckDB forgets an interrupt that lands before the query has begun, and a cancel can land
        between ``_execute`` naming the connection and DuckDB starting on it: the query then ran
        on (a CI run's ``ngb query`` had not ended 30 s after its SIGTERM and was killed,
        2026-11-29; an interrupt sent before ``execute`` let a 2.5 s query run to its end)."""
        import duckdb

        while True:
            with self._guard:
                if self._conn is not conn:  # its query ended (and the connection may be closed)
                    return
                with contextlib.suppress(duckdb.ConnectionException):
                    conn.interrupt()
            if self.done.wait(INTERRUPT_AGAIN_S):
                return

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
            # on the file itself only while no live run writes it: even hold_s would delay a flush
            if self.hold_s is not None and not marked.live_writer(self.store.path, LIVE_S):
                answer = self._run_on_file(self.hold_s)
                if answer is not None:
                    return answer
            try:
                snapshot = self._snapshot()
            except CopyStopped:
                raise self._stopped() from None
            try:
                return self._run_on(snapshot.copy)
            finally:
                _release(snapshot, keep=self.keep_copy)
        finally:
            if timer is not None:
                timer.cancel()
                timer.join()  # see _run_on_file
            with self._guard:
                self._conn = None
                self.done.set()
                canceller = self._canceller
            # it ends at once now; alive at exit, it kept the connection referenced into the
            # interpreter's shutdown (DuckDB then printed "nanobind: leaked ... DuckDBPyConnection")
            if canceller is not None:
                canceller.join()

    def _snapshot(self) -> _Snapshot:
        """A private copy of the results file, its version checked (``copy_check``); copied
        again when that check upgraded the file (an older ngb's store)."""
        for _ in range(2):
            snapshot = self._shared_snapshot()
            try:
                if check_copy(self.store, snapshot.copy):
                    return snapshot
            except BaseException:
                _release(snapshot, keep=False)
                raise
            _release(snapshot, keep=False)
        raise NgbError(f"results database {self.store.path} changed while it was read; try again")

    def _shared_snapshot(self) -> _Snapshot:
        """A private copy of the results file, taken now or reused while the file is unchanged
        (``copy`` None: no file yet, an empty database answers)."""
        path = self.store.path
        check_is_file(path)  # a FIFO, a device, a SQLite file: one line, and nothing copied
        if not path.exists():
            return _Snapshot("", None, None)
        key = str(path.resolve())
        with _snapshots_guard:
            current = _snapshots.get(key)
            signature = _current_signature(path)
            if current is not None and signature is not None and current.signature == signature:
                current.users += 1
                return current
            if current is not None:
                current.users += 1  # its main file may be linked into the new copy
        # a cancel (escape, the console quitting) stops a copy in flight: under the lock a
        # copy of a large store holds a live run's writer, and the console's quit, for seconds
        try:
            fresh = take_snapshot(
                path, key, timeout=self.store.busy_timeout_s, stop=lambda: bool(self._why),
                reuse=current,
            )  # fmt: skip
        finally:
            if current is not None:
                _release(current)
        with _snapshots_guard:
            old = _snapshots.get(key)
            _snapshots[key] = fresh
            if old is not None and old.users == 0:
                old.drop()
        return fresh

    def _run_on_file(self, hold_s: float) -> SqlAnswer | None:
        """The query on the results file itself, stopped after ``hold_s`` (None then: the
        caller runs it again on a copy). A short query needs no copy, and a long one holds
        the file, and so a live run's writer in another process, for ``hold_s`` at most
        (``ngb query`` ran 125 s while a run's ingest waited for it)."""
        held = threading.Event()
        with self.store._reader(external_access=self.grant) as conn:  # noqa: SLF001

            def let_go() -> None:
                held.set()
                conn.interrupt()

            timer = threading.Timer(hold_s, let_go)
            timer.daemon = True
            timer.start()
            try:
                return self._execute(conn)
            except QueryCancelled:
                if held.is_set() and not self._why:
                    return None
                raise
            finally:
                # joined, not only cancelled: until its thread has woken and ended, the timer
                # holds let_go and so the connection, and an `ngb query` whose reader went away
                # (`| head`) could exit in that moment: DuckDB then printed "nanobind: leaked
                # ... DuckDBPyConnection" (make test, 2026-11-29). A cancelled timer ends at once.
                timer.cancel()
                timer.join()

    def _run_on(self, copy: Path | None) -> SqlAnswer:
        import duckdb

        config = {**BASE_CONFIG, "enable_external_access": False}
        if self.threads is not None:
            config["threads"] = self.threads
        with read_errors(self.store.path):
            if copy is None:
                from ngb.sweeps.store.migrations import empty_database

                conn = empty_database()
                if self.threads is not None:
                    conn.execute(f"SET threads = {int(self.threads)}")
            else:
                conn = duckdb.connect(str(copy), read_only=True, config=config)
            apply_grant(conn, self.grant)  # and lock the settings
        try:
            return self._execute(conn)
        finally:
            conn.close()

    def _run_on_store(self) -> SqlAnswer:
        with write_errors(self.store.path):
            self.store._ensure_schema()  # noqa: SLF001 - what Store.query does before a write
        # Under the store's lock, like any writer; the store only, with DuckDB's settings locked.
        with self.store._connection(write=True, external_access=False) as conn:  # noqa: SLF001
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
            raise sql_error(exc, self.allow_write, self.allow_files) from None
        finally:
            # the caller closes this connection next (a query on the file moves to a copy after
            # hold_s): a cancel from then on must not interrupt a closed connection
            with self._guard:
                self._conn = None

    def _stopped(self) -> QueryCancelled:
        if self._why == "timeout":
            return QueryCancelled(f"query stopped after its time limit of {self.timeout_s:g} s")
        return QueryCancelled("query cancelled")


# -- snapshots shared while the file is unchanged ---------------------------------------------
# A console query on an idle store (no run writing, or between a run's flushes) reuses the last
# copy instead of copying the whole file again: on a 1 GB store the copy was most of a query's
# 0.3-0.5 s and a 1 GB temporary file each time. A copy is reused only while the file and its
# WAL keep their inode, size and modification time, and never when the file changed within
# ``FRESH_S`` of the copy (a timestamp's granularity could hide a second write).

#: a file modified this recently when copied may change again within the same timestamp tick
FRESH_S = 0.05

#: (inode, size, mtime_ns) of the file and of its WAL (None when absent)
Signature = tuple[tuple[int, int, int], tuple[int, int, int] | None]


class _Snapshot:
    """One private copy of the results file, shared by the queries that began while the file
    was unchanged; its folder goes once it is neither in use nor the newest copy."""

    def __init__(
        self,
        key: str,
        signature: Signature | None,
        folder: tempfile.TemporaryDirectory[str] | None,
        *,
        users: int = 0,
    ) -> None:
        self.key = key
        self.signature = signature
        self.folder = folder
        self.users = users

    @property
    def copy(self) -> Path | None:
        return None if self.folder is None else Path(self.folder.name) / "results.duckdb"

    def drop(self) -> None:
        if self.folder is not None:
            self.folder.cleanup()


_snapshots: dict[str, _Snapshot] = {}
_snapshots_guard = threading.Lock()


def _signature(path: Path) -> Signature | None:
    """What tells a changed file apart; None (never reuse) for a file changed just now."""
    import time

    main, wal = marked.file_id(path), marked.file_id(marked.wal_path(path))
    if main is None:
        return None
    newest = max(main[2], wal[2] if wal else 0) / 1e9
    if time.time() - newest < FRESH_S:
        return None
    return main, wal


def take_snapshot(
    path: Path, key: str = "", *, timeout: float = 5.0, stop: Stop | None = None,
    reuse: _Snapshot | None = None,
) -> _Snapshot:  # fmt: skip
    """A private copy of the results file (and its WAL), taken without holding the file: a
    writer in another process never waits for it (issue 31: a live run's ingest waited ~8 s
    behind a query that copied a 1 GB store under the lock).

    First as the writer's marker names the store (``wal_marker``): the main file, which no
    checkpoint changes while the copy holds the readers lock (hard-linked from ``reuse``, the
    previous copy, when it is the same), and the log's committed prefix. Else (no marker: an
    older ngb wrote last) the files are copied whole and kept only when their signature (inode,
    size, mtime, neither written within ``FRESH_S``) held from before the copy to after it: the
    file at one instant, what a crash would leave, which DuckDB recovers from (header written
    last, WAL replayed on open, blocks checksummed). A store written to all along is then copied
    under the lock after ``UNLOCKED_TRIES`` tries. ``stop`` returning True ends the copy
    between chunks with ``CopyStopped``."""
    folder = scratch_dir("query")
    copy = Path(folder.name) / "results.duckdb"
    try:
        main_from: Path | None = None
        main_id: marked.FileId | None = None
        # an upgraded copy (``older``: an older ngb's store) is no longer the file's main file
        if (
            reuse is not None
            and reuse.copy is not None
            and reuse.signature is not None
            and not is_upgraded(reuse.copy)
        ):
            main_from, main_id = reuse.copy, reuse.signature[0]
        marker = marked.copy_marked(
            path, copy, lambda s, d, n: _copy_one(s, d, stop, n), wait_s=timeout,
            main_from=main_from, main_id=main_id,
        )  # fmt: skip
        if marker is not None:
            # a main file written just now may change again within its timestamp's tick
            fresh = time.time() - marker.main[2] / 1e9 < FRESH_S
            signature = None if fresh else _marked(marker)
        else:
            signature = _copy_unlocked(path, copy, stop)
        if marker is None and signature is None:
            with lock_for(path), read_errors(path), connection(path, write=False, timeout=timeout):
                # the read-only connection is open: no process is half-way through a write
                signature = _signature(path)
                _copy_files(path, copy, stop)
    except OSError as exc:
        folder.cleanup()
        raise CopyFailed(
            f"cannot copy results database {path} to read it: {exc.strerror}"
        ) from None
    except BaseException:
        folder.cleanup()
        raise
    return _Snapshot(key, signature, folder, users=1)


def _marked(marker: marked.Marker) -> Signature:
    """A copy as the marker names it: the main file's identity and the log's prefix (-1: never
    a file's own modification time, so never the signature of a whole-file copy)."""
    return marker.main, (marker.wal_ino, marker.wal_len, -1)


def _current_signature(path: Path) -> Signature | None:
    """The signature a copy taken now would have: the marker's store while it names the files
    as they are, else the files' own (``_signature``)."""
    marker = marked.read_marker(path)
    if marker is None or marked.file_id(path) != marker.main:
        return _signature(path)
    return _marked(marker) if marked.log_holds(path, marker) else _signature(path)


#: asked while a copy runs: True stops it (a cancelled query)
Stop = raw_files.Stop
CopyStopped = raw_files.CopyStopped


#: copies tried without the lock before one is taken under it (each restarts on a write)
UNLOCKED_TRIES = 6


def _copy_unlocked(path: Path, copy: Path, stop: Stop | None = None) -> Signature | None:
    """Copy ``path`` and its WAL to ``copy`` without the lock; the signature they kept
    throughout, or None when every try saw a write."""
    import time

    for _ in range(UNLOCKED_TRIES):
        before = _signature(path)
        for _wait in range(20):  # a write just now: start right after it, not during the next
            if before is not None:
                break
            time.sleep(FRESH_S)
            before = _signature(path)
        if before is None:
            continue
        _copy_files(path, copy, stop)
        if _signature(path) == before:
            return before
    return None


def _copy_files(path: Path, copy: Path, stop: Stop | None = None) -> None:
    Path(f"{copy}.wal").unlink(missing_ok=True)
    copy.unlink(missing_ok=True)  # may be a link to an earlier copy (wal_marker): never written
    _copy_one(path, copy, stop)
    wal = Path(f"{path}.wal")
    if wal.exists():
        _copy_one(wal, Path(f"{copy}.wal"), stop)


def _copy_one(source: Path, dest: Path, stop: Stop | None, length: int | None = None) -> None:
    """``source`` (its first ``length`` bytes; None: all of it) to ``dest``, by a child process
    (``raw_files``: this process may hold the store open, and its own read would unlock it)."""
    raw_files.copy_file(source, dest, length, stop)


def _release(snapshot: _Snapshot, *, keep: bool = True) -> None:
    with _snapshots_guard:
        snapshot.users -= 1
        if snapshot.users > 0:
            return
        current = _snapshots.get(snapshot.key) is snapshot
        if current and not keep:
            del _snapshots[snapshot.key]
        if not (current and keep):
            snapshot.drop()


# -- export -----------------------------------------------------------------------------------
#: rows per Arrow record batch an export holds at once
EXPORT_BATCH_ROWS = 65_536


def export_rows(
    store: Store, source: str, dest: Path, fmt: str, *, overwrite: bool, table: bool = False
) -> int:
    """Write the rows of read-only SQL ``source`` (``table``: of that table or view) to
    ``dest`` (Parquet or CSV); returns rows written. Read from a private copy of the store
    (``take_snapshot``), so a long export never holds the file a live run writes to (issue 31,
    item 3), and streamed in record batches, so a table larger than memory exports too.
    ``dest`` was checked by the caller; it is written beside itself and renamed into place
    (``store_query.write_export``)."""
    import duckdb

    check_is_file(store.path)
    try:
        snapshot = take_snapshot(store.path, timeout=store.busy_timeout_s)
    except CopyFailed:
        # no room for a copy: read the file itself, holding it while the rows are written
        with store._reader(external_access=False) as conn:  # noqa: SLF001
            return _export_from(conn, source, dest, fmt, store, overwrite=overwrite, table=table)
    try:
        if not check_copy(store, snapshot.copy):  # an older ngb's file, upgraded: again
            snapshot.drop()
            snapshot = take_snapshot(store.path, timeout=store.busy_timeout_s)
        # DuckDB's buffers bounded: the copy is read once, front to back
        config = {**BASE_CONFIG, "enable_external_access": False, "memory_limit": "256MB"}
        with read_errors(store.path):
            conn = duckdb.connect(str(snapshot.copy), read_only=True, config=config)
            apply_grant(conn, False)
        try:
            return _export_from(conn, source, dest, fmt, store, overwrite=overwrite, table=table)
        finally:
            conn.close()
    finally:
        snapshot.drop()


def _export_from(
    conn: duckdb.DuckDBPyConnection, source: str, dest: Path, fmt: str, store: Store, *,
    overwrite: bool, table: bool,
) -> int:  # fmt: skip
    import duckdb
    from ngb.sweeps.store.query import write_export

    try:
        if table:  # named on the copy: the file itself is never opened
            tables = [r[0] for r in conn.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = 'main' ORDER BY table_name"
            ).fetchall()]  # fmt: skip
            if source not in tables:
                raise UnknownNameError("table", source, tables)
            source = f'SELECT * FROM "{source}"'  # noqa: S608 - a checked table name
        relation = conn.sql(source)
        if relation is None:  # a statement without a result (e.g. SET)
            raise NgbError("export needs a query that returns rows")
        reader = relation.to_arrow_reader(EXPORT_BATCH_ROWS)
        return write_export(reader, dest, fmt, store.path, overwrite=overwrite)
    except duckdb.Error as exc:
        raise sql_error(exc, False) from None


def export(
    store: Store,
    dest: str | Path,
    fmt: str = "parquet",
    table_or_sql: str = "trials",
    *,
    overwrite: bool = False,
) -> int:
    """Write a table, view or read-only query to Parquet or CSV; returns rows written.

    The query runs on the locked-down read-only connection and pyarrow writes the file, so
    an exported query cannot touch any file but ``dest``. The file appears complete or not
    at all (written next to ``dest``, then renamed). ``dest`` is never the results database,
    and an existing file is replaced only with ``overwrite``.
    """
    if fmt not in EXPORT_FORMATS:
        raise NgbError(f"unknown export format {fmt!r}; use parquet or csv")
    dest = Path(dest).expanduser()
    check_export_destination(dest, store.path, overwrite=overwrite)
    store.require_file()
    source = table_or_sql.strip()
    table = bool(_IDENTIFIER.match(source))
    if not table:
        plan_files(source, allow_files=False, store=store.path)  # no COPY/ATTACH: rows only
    # from a copy, streamed: a long export never holds the file a live run writes to
    return export_rows(store, source, dest, fmt, overwrite=overwrite, table=table)
