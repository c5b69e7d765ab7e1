"""The results store: one DuckDB file on the workstation, opened only for each operation.

How the file is opened, shared with other processes and what failures mean: ``store_connect``.
How results become rows (idempotent per run, device and key): ``store_ingest``. Schema steps:
``schema`` (the tables) and ``store_migrations`` (applying them). Export: ``store_snapshot.export``
(from a copy, streamed).

Reading never creates anything: a missing file reads as an empty database (``runs()`` is
``[]``), except that free SQL (``query``) says the file is missing; a file that is not an ngb
database, or is damaged, fails with one line. Only writers create the file and its folder, and
only writers upgrade an older ngb's file (readers read an upgraded copy: ``store.older``).

Read-only SQL (``query``) runs on a read-only connection with ``enable_external_access = false``,
so it can neither change the results nor read or write other files; ``allow_write=True`` is the
operator's explicit opt-in.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ngb.core.base.errors import NgbError, UnknownNameError
from ngb.core.records.types import TrialResult
from ngb.sweeps.rows import Event, StoreRow
from ngb.sweeps.store import schema
from ngb.sweeps.store.connect import (
    check_intact,
    connection,
    held_open,
    lock_for,
    read_errors,
    write_errors,
)
from ngb.sweeps.store.devices import DEVICE_INSERT, PROBE_INSERT, device_row, probe_row
from ngb.sweeps.store.errors import BUSY_MESSAGE, DatabaseBusy, RowRejected, StoreUnwritable
from ngb.sweeps.store.ingest import now, to_datetime, to_json, write_batch
from ngb.sweeps.store.migrations import empty_database, migrate, read_version
from ngb.sweeps.store.older import reading
from ngb.sweeps.store.query import (
    sql_error,
)
from ngb.sweeps.store.result_store import IngestBatch
from ngb.sweeps.store.run_device_rows import RowFields, upsert_rows
from ngb.sweeps.store.serving_rows import SERVED_TRIALS
from ngb.sweeps.store.sql_files import FileGrant, apply_grant, plan_files

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

# Rows come back as ``rows.StoreRow`` (dict[str, object]): a DuckDB value is whatever the column
# holds (str, float, datetime, list ...), so callers narrow the columns they read.

__all__ = ["BUSY_MESSAGE", "DatabaseBusy", "RowRejected", "Store", "StoreUnwritable"]

TERMINAL_RUN_STATES = ("done", "failed", "cancelled", "finished", "error")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_JSON_COLUMNS = {
    "versions",
    "threads",
    "compiler_options",
    "measure",
    "spec",
    "extra",
    "meta",
    "devices",
    "groups",
    "compilers",
    "probe",
    "tasks",
}


def _decode_row(columns: Sequence[str], row: Sequence[object]) -> StoreRow:
    out = {}
    for name, value in zip(columns, row, strict=True):
        if name in _JSON_COLUMNS and isinstance(value, str):
            with suppress(ValueError):
                value = json.loads(value)
        out[name] = value
    return out


class Store:
    """The DuckDB results file. Cheap to create; opens the file only for each operation.

    ``busy_timeout_s`` bounds how long a reader waits for a writer in another process;
    ``write_timeout_s`` how long a writer waits for readers (they hold the file only briefly).
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        busy_timeout_s: float = 5.0,
        write_timeout_s: float = 30.0,
    ) -> None:
        if path is None:
            from ngb.devices.paths import get_paths

            path = get_paths().database
        self.path = Path(path).expanduser()
        self.busy_timeout_s = busy_timeout_s
        self.write_timeout_s = write_timeout_s
        self._schema_checked = False
        # a connection ``one_connection`` holds open for several reads of one thread
        self._shared = threading.local()

    # ------------------------------------------------------------ connections

    def _connection(
        self, *, write: bool, external_access: bool | FileGrant = True, own_instance: bool = False
    ) -> AbstractContextManager[duckdb.DuckDBPyConnection]:
        timeout = self.write_timeout_s if write else self.busy_timeout_s
        return connection(
            self.path,
            write=write,
            timeout=timeout,
            external_access=external_access,
            own_instance=own_instance,
        )

    @contextmanager
    def _writer(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-write connection inside one transaction (committed on success)."""
        with write_errors(self.path):
            self._ensure_schema()
            with self._connection(write=True) as conn:
                conn.execute("BEGIN TRANSACTION")
                try:
                    yield conn
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")

    def transaction(self) -> AbstractContextManager[duckdb.DuckDBPyConnection]:
        """A read-write connection in one transaction, for the store's satellite writers
        (``store_profiles``): the schema is current, the lock is taken as for ingest."""
        return self._writer()

    @contextmanager
    def _reader(
        self, *, external_access: bool | FileGrant = True, own_instance: bool = False
    ) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-only connection; a missing file reads as an empty database (nothing created).
        ``own_instance``: on a DuckDB instance of its own (``connect.open_connection``)."""
        shared = getattr(self._shared, "conn", None)
        if shared is not None and external_access is True and not own_instance:  # one_connection
            yield shared
            return
        with read_errors(self.path):
            if not self.path.exists():
                empty = empty_database()
                apply_grant(empty, external_access)  # no file, yet none of the operator's either
                yield empty
                return
            # Check the version on the connection we read with: one open instead of two,
            # which is most of the cost of a one-shot `ngb query`.
            if not self._schema_checked:
                with self._connection(
                    write=False, external_access=external_access, own_instance=own_instance
                ) as conn:
                    check_intact(conn, self.path)
                    version = read_version(conn)
                    if version == schema.latest_version():
                        self._schema_checked = True
                        yield conn
                        return
                    self._check_readable(conn, version)
                # an older ngb's file: read an upgraded copy, never upgrade the file (``older``)
                with reading(
                    self.path, timeout=self.busy_timeout_s, external_access=external_access
                ) as conn:
                    yield conn
                return
            with self._connection(
                write=False, external_access=external_access, own_instance=own_instance
            ) as conn:
                yield conn

    @contextmanager
    def one_connection(self) -> Iterator[None]:
        """Several of ngb's own reads on one connection, in this thread: a read opens the file
        otherwise (~25 ms of CPU on the 2-core VM; the console's Results screen reads a run's
        devices, trials and repetitions at once). The file is held for the block, so keep it
        short, and keep ``query`` out of it: DuckDB opens a file in one process with one
        configuration at a time, and ``query``'s grant is another."""
        if getattr(self._shared, "conn", None) is not None:
            yield
            return
        with self._reader() as conn:
            self._shared.conn = conn
            try:
                yield
            finally:
                self._shared.conn = None

    def _check_readable(self, conn: duckdb.DuckDBPyConnection, version: int) -> None:
        if version > schema.latest_version():
            raise NgbError(
                f"results database {self.path} has schema version {version}, newer than this "
                f"ngb understands ({schema.latest_version()}); upgrade ngb or use another file"
            )
        counted = conn.execute(
            "SELECT count(*) FROM information_schema.tables "
            "WHERE table_catalog = current_database() AND table_schema = 'main'"
        ).fetchone()
        tables = counted[0] if counted else 0
        if version == 0 and tables:
            raise NgbError(f"{self.path} is a DuckDB file but not an ngb results database")

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Several store calls that share one open of the file (a live ingest's flush).

        Each call opens the file (~0.1 s: open, checkpoint, close). DuckDB shares one database
        instance among a process's connections to the same file, so while this extra connection
        is open the calls inside only attach to it, and the checkpoint happens once at the end.
        The per-file lock is held meanwhile (it is re-entrant), so this process's other threads
        (a TUI's readers) wait for the batch instead of colliding with it. If the file is busy in
        another process the calls inside fall back to their own retry. For writers only: DuckDB
        refuses a read-only open of a file this process holds read-write, so query after it.
        """
        with lock_for(self.path):
            # The schema check may open the file read-only: do it before holding it read-write.
            with write_errors(self.path):
                self._ensure_schema()
            with held_open(self.path):  # one checkpoint, at the end (``connect.held_open``)
                yield

    # ------------------------------------------------------------ schema

    def schema_version(self) -> int:
        """The version recorded in the file (0 for a file that does not exist yet)."""
        if not self.path.exists():
            return 0
        with read_errors(self.path), self._connection(write=False) as conn:
            check_intact(conn, self.path)
            return read_version(conn)

    def _ensure_schema(self) -> None:
        """Before a write: create or upgrade the file's schema (refusing foreign files)."""
        if self._schema_checked:
            return
        latest = schema.latest_version()
        version = self.schema_version()
        if version > latest:
            raise NgbError(
                f"results database {self.path} has schema version {version}, newer than this "
                f"ngb understands ({latest}); upgrade ngb or use another file (NGB_DB)"
            )
        if version < latest:
            with self._connection(write=True) as conn:
                migrate(conn, self.path)
        self._schema_checked = True

    # ------------------------------------------------------------ writers

    def create_run(
        self,
        run_id: str,
        sweep_name: str,
        sweep_toml: str,
        devices: Sequence[str],
        n_trials: int,
        meta: Mapping[str, object] | None = None,
    ) -> bool:
        """Record a new run; returns False (and changes nothing) if ``run_id`` exists already."""
        stamp = now()
        with self._writer() as conn:
            exists = conn.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone()
            if exists:
                return False
            conn.execute(
                "INSERT INTO runs VALUES (?, ?, ?, ?, ?, 'created', ?, ?, NULL, ?)",
                [
                    run_id,
                    sweep_name,
                    sweep_toml,
                    to_json(list(devices)),
                    n_trials,
                    stamp,
                    stamp,
                    to_json(dict(meta or {})),
                ],
            )
            return True

    def set_run_status(self, run_id: str, status: str) -> None:
        stamp = now()
        finished = stamp if status in TERMINAL_RUN_STATES else None
        with self._writer() as conn:
            found = conn.execute(
                "UPDATE runs SET status = ?, updated_at = ?, finished_at = ? WHERE run_id = ? "
                "RETURNING run_id",
                [status, stamp, finished, run_id],
            ).fetchall()
            if not found:
                raise UnknownNameError(
                    "run",
                    run_id,
                    [r[0] for r in conn.execute("SELECT run_id FROM runs").fetchall()],
                )

    _RUN_DEVICE_FIELDS = (
        "state",
        "workdir",
        "n_trials",
        "n_done",
        "n_failed",
        "n_skipped",
        "message",
        "started_at",
        "finished_at",
    )

    def upsert_run_device(self, run_id: str, device: str, **fields: object) -> None:
        """Create or update the per-device state of a run; only the given fields change.

        Times (``started_at``, ``finished_at``) are unix seconds. Fields without a column are
        merged into the row's ``extra`` JSON rather than dropped.
        """
        known = {k: v for k, v in fields.items() if k in self._RUN_DEVICE_FIELDS}
        other = {k: v for k, v in fields.items() if k not in self._RUN_DEVICE_FIELDS}
        for name in ("started_at", "finished_at"):
            stamp = known.get(name)
            if isinstance(stamp, int | float):
                known[name] = to_datetime(stamp)
        with self._writer() as conn:
            row = conn.execute(
                "SELECT extra FROM run_devices WHERE run_id = ? AND device = ?", [run_id, device]
            ).fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO run_devices (run_id, device, updated_at) VALUES (?, ?, ?)",
                    [run_id, device, now()],
                )
            if other:
                extra = json.loads(row[0]) if row and row[0] else {}
                extra.update(other)
                known["extra"] = to_json(extra)
            known["updated_at"] = now()
            sets = ", ".join(f"{name} = ?" for name in known)
            conn.execute(
                f"UPDATE run_devices SET {sets} WHERE run_id = ? AND device = ?",  # noqa: S608 - names from a fixed list
                [*known.values(), run_id, device],
            )

    def upsert_run_devices(self, rows: Sequence[RowFields]) -> None:
        """``upsert_run_device`` for many ``(run_id, device, fields)`` in one transaction and a
        few statements (``run_device_rows``): a live flush's rows."""
        if rows:
            with self._writer() as conn:
                upsert_rows(conn, rows, self._RUN_DEVICE_FIELDS)

    def upsert_device(self, device: Event) -> None:
        """Store an inventory entry (no secrets: key material and passwords are dropped)."""
        row = device_row(device)
        with self._writer() as conn:
            conn.execute(DEVICE_INSERT, row)

    def record_probe(self, device_name: str, probe: Event) -> None:
        """Store one probe answer (the whole JSON, plus the facts the paper's tables need)."""
        with self._writer() as conn:
            conn.execute(PROBE_INSERT, probe_row(device_name, probe))

    def write_batch(self, batch: IngestBatch) -> int:
        """Write a live run's flush in one transaction; returns the number of new trials.

        A trial already stored for (run_id, device, key) is skipped, so writing twice is safe.
        Raises ``RowRejected`` for data that can never fit (nothing of the batch is written),
        ``StoreUnwritable`` when the file cannot be written and ``DatabaseBusy`` while another
        process holds it.
        """
        if not len(batch):
            return 0
        with self._writer() as conn:
            return write_batch(conn, batch)

    def ingest_results(
        self, run_id: str, device: str, results: Iterable[TrialResult | Event]
    ) -> int:
        """Store finished trials with their repetitions and CPU samples; returns new trials."""
        batch = IngestBatch()
        for item in results:
            result = item if isinstance(item, TrialResult) else TrialResult.from_dict(item)
            batch.add_result(run_id, device, result)
        return self.write_batch(batch)

    def ingest_cpu_samples(self, run_id: str, device: str, samples: Iterable[Event]) -> int:
        """Store live CPU events (``{ts, key, percent, proc_percent}``) from the event stream."""
        batch = IngestBatch(cpu=[(run_id, device, event) for event in samples])
        self.write_batch(batch)
        return len(batch.cpu)

    def ingest_tuning(self, run_id: str, device: str, key: str, events: Iterable[Event]) -> int:
        """Store TVM tuning progress events (``{ts, trials_done, budget, best_ms, tasks}``)."""
        batch = IngestBatch(tuning=[(run_id, device, key, event) for event in events])
        self.write_batch(batch)
        return len(batch.tuning)

    def record_error(
        self, run_id: str | None, device: str | None, key: str | None, kind: str, message: str
    ) -> None:
        """A trial or connection error, with the time it was seen."""
        batch = IngestBatch()
        batch.add_error(run_id, device, key, kind, message)
        self.write_batch(batch)

    # ------------------------------------------------------------ readers

    def _rows(self, sql: str, params: Sequence[object] | None = None) -> list[StoreRow]:
        with self._reader() as conn:
            cur = conn.execute(sql, list(params or []))
            columns = [d[0] for d in cur.description]
            return [_decode_row(columns, row) for row in cur.fetchall()]

    def runs(self) -> list[StoreRow]:
        return self._rows("SELECT * FROM runs ORDER BY created_at DESC, run_id")

    def run(self, run_id: str) -> StoreRow:
        rows = self._rows("SELECT * FROM runs WHERE run_id = ?", [run_id])
        if not rows:
            raise UnknownNameError("run", run_id, [str(r["run_id"]) for r in self.runs()])
        return rows[0]

    def run_devices(self, run_id: str | None = None) -> list[StoreRow]:
        """The per-device rows of a run (of every run when ``run_id`` is None)."""
        where, params = _filters(run_id=run_id)
        return self._rows(f"SELECT * FROM run_devices{where} ORDER BY run_id, device", params)  # noqa: S608

    def trials(
        self,
        run_id: str | None = None,
        device: str | None = None,
        *,
        status: str | None = None,
        model: str | None = None,
        compiler: str | None = None,
        key: str | None = None,
        limit: int | None = None,
    ) -> list[StoreRow]:
        """Stored trials filtered by the given columns, oldest first."""
        where, params = _filters(
            run_id=run_id, device=device, status=status, model=model, compiler=compiler, key=key
        )
        sql = f"SELECT * FROM trials{where} ORDER BY run_id, device, finished_at, key"  # noqa: S608
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return self._rows(sql, params)

    def repetition_throughputs(
        self, run_id: str, device: str | None = None
    ) -> dict[tuple[str, str, str], list[float]]:
        """(run, device, key) -> the throughput of each repetition, in order: what a
        significance test compares."""
        where = "WHERE run_id = ? AND device = ?" if device else "WHERE run_id = ?"
        sql = (
            "SELECT run_id, device, key, list(throughput ORDER BY rep) "  # noqa: S608 - fixed text
            f"FROM measurements {where} GROUP BY ALL"
        )
        with self._reader() as conn:
            rows = conn.execute(sql, [run_id, device] if device else [run_id]).fetchall()
        return {
            (str(r[0]), str(r[1]), str(r[2])): [float(v) for v in r[3] if v is not None]
            for r in rows
        }

    def served_trials(self, run_id: str) -> list[StoreRow]:
        """A run's finished serving trials (a sweep's ``[serve]``) read as ``trials`` rows are
        (device, key, status, extra with the slot): they are stored as ``serving`` rows, not
        ``trials`` (``ngb.sweeps.store.serving_ingest``), each naming its trial, so ``attach``
        counts them done before it reads the devices' checkpoints."""
        return self._rows(SERVED_TRIALS, [run_id])

    def completed_keys(self, run_id: str, device: str) -> set[str]:
        """Keys of the trials of a run already stored for a device (to resume without repeats)."""
        with self._reader() as conn:
            rows = conn.execute(
                "SELECT key FROM trials WHERE run_id = ? AND device = ?", [run_id, device]
            ).fetchall()
        return {r[0] for r in rows}

    def measurements(
        self, run_id: str, device: str | None = None, key: str | None = None
    ) -> list[StoreRow]:
        where, params = _filters(run_id=run_id, device=device, key=key)
        return self._rows(
            f"SELECT * FROM measurements{where} ORDER BY device, key, rep",  # noqa: S608
            params,
        )

    def cpu_samples(
        self, run_id: str, device: str | None = None, key: str | None = None
    ) -> list[StoreRow]:
        where, params = _filters(run_id=run_id, device=device, key=key)
        return self._rows(
            f"SELECT * FROM cpu_samples{where} ORDER BY device, key, ts, t_s",  # noqa: S608
            params,
        )

    def tuning_progress(
        self, run_id: str, device: str | None = None, key: str | None = None
    ) -> list[StoreRow]:
        where, params = _filters(run_id=run_id, device=device, key=key)
        return self._rows(
            f"SELECT * FROM tuning_progress{where} ORDER BY device, key, ts",  # noqa: S608
            params,
        )

    def errors(self, run_id: str | None = None, device: str | None = None) -> list[StoreRow]:
        where, params = _filters(run_id=run_id, device=device)
        return self._rows(f"SELECT * FROM errors{where} ORDER BY ts", params)  # noqa: S608

    def devices(self) -> list[StoreRow]:
        return self._rows("SELECT * FROM devices ORDER BY name")

    def probes(self, device: str | None = None) -> list[StoreRow]:
        where, params = _filters(device=device)
        return self._rows(f"SELECT * FROM probes{where} ORDER BY probed_at", params)  # noqa: S608

    def tables(self) -> list[str]:
        """Tables and views a user may query or export."""
        with self._reader() as conn:
            rows = conn.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_catalog = current_database() AND table_schema = 'main' "
                "ORDER BY table_name"
            ).fetchall()
        return [r[0] for r in rows]

    # Any: the cells of arbitrary SQL (the console's and ``ngb query``'s), whose types only the
    # caller's query knows
    def query(
        self,
        sql: str,
        params: Sequence[object] | None = None,
        *,
        allow_write: bool = False,
        allow_files: bool = False,
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Run SQL and return (column names, rows). Read-only unless ``allow_write``.

        SQL reaches no file but the store (``enable_external_access = false``: no
        ``read_csv('/etc/passwd')``, no ``COPY ... TO``) unless ``allow_files``: write access to
        the store is not access to the operator's files.

        Bad SQL and attempts to write on the read-only connection raise ``NgbError`` with one
        line; a busy file raises ``DatabaseBusy``. Read-only SQL never creates the file: a
        missing one reads as empty (``require_file`` first where that should be an error).
        """
        import duckdb

        if not sql or not sql.strip():
            raise NgbError("empty SQL query")
        grant = plan_files(sql, allow_files=allow_files, store=self.path)
        if allow_write:
            with write_errors(self.path):
                self._ensure_schema()
            ctx = self._connection(write=True, external_access=grant)
        else:
            ctx = self._reader(external_access=grant)
        with ctx as conn:
            try:
                return _answer(conn, sql, params)
            except duckdb.Error as exc:
                raise sql_error(exc, allow_write, allow_files) from None

    def select(
        self, sql: str, params: Sequence[object] | None = None
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        """ngb's own read-only SQL (fixed text, values as ``params``): (column names, rows), on
        the DuckDB instance this process keeps for the file (``connect.attach``).

        Why not ``query``: that is the door for an operator's SQL, which gets a DuckDB instance
        of its own with external access off, and a fresh instance costs more than the read. On
        this 2-core VM: ``query("select 1")`` 22.5 ms of CPU, ``trials()`` (this path) 6.3 ms
        (2026-11-30); a report makes dozens of reads, and in ``make test`` ``query`` was 40.6
        of the 85 CPU-s the test processes spent in the store. Text built from what a user
        typed belongs in ``query``, never here. A missing file reads as an empty database."""
        import duckdb

        with self._reader() as conn:
            try:
                return _answer(conn, sql, params)
            except duckdb.Error as exc:
                raise sql_error(exc, False) from None

    def frame(self, sql: str, params: Sequence[object] | None = None) -> pd.DataFrame:
        """Read-only SQL as a pandas DataFrame (DuckDB's own ``.df()``; the Python API)."""
        import duckdb

        with self._reader(external_access=False) as conn:
            try:
                return conn.execute(sql, list(params) if params else None).df()
            except duckdb.Error as exc:
                raise sql_error(exc, False) from None

    def reading(self) -> AbstractContextManager[duckdb.DuckDBPyConnection]:
        """A read-only connection held for a block, for ngb's own SQL only (its settings are
        open: ``ngb.sweeps.store.spill`` bounds its memory and points its spill folder at a
        temporary one), streaming one answer out in batches, briefly. Those settings are the
        instance's, so the connection is on an instance of its own, not the kept one."""
        return self._reader(own_instance=True)

    def require_file(self) -> None:
        """Raise a one-line NgbError when the results file does not exist."""
        if not self.path.exists():
            raise NgbError(f"no results database at {self.path} (nothing has been stored yet)")


def _answer(
    conn: duckdb.DuckDBPyConnection, sql: str, params: Sequence[object] | None
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """(column names, rows) of one statement (``query``'s and ``select``'s); none for one that
    answers nothing. DuckDB's errors come out as they are."""
    cur = conn.execute(sql, list(params) if params else None)
    if cur.description is None:
        return [], []
    return [d[0] for d in cur.description], cur.fetchall()


def _filters(**columns: object) -> tuple[str, list[object]]:
    given = {k: v for k, v in columns.items() if v is not None}
    if not given:
        return "", []
    return " WHERE " + " AND ".join(f"{k} = ?" for k in given), list(given.values())
