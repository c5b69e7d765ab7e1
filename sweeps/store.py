"""The results store: one DuckDB file on the workstation.

DuckDB lets one process hold a file read-write, and while it does no other process can open the
file at all (not even read-only). So the store never keeps a connection open: every write opens a
read-write connection for one batch (one transaction) and closes it, and every read opens a
read-only connection and closes it. Between batches another terminal's ``ngb query`` gets in; if it
arrives during a batch it retries for a bounded time and then fails with one clear line.
``IngestBuffer`` collects a run's events and writes at most about once a second, which keeps the
file free most of the time.

Inside one process a lock serialises connections to the same file, because DuckDB also refuses two
simultaneous connections with different settings (read-write vs read-only) in one process — the TUI
may ingest and run the SQL console at once.

Ingest is idempotent: a result already stored for (run_id, device, key) is skipped together with
its measurements and CPU samples (checked inside the writer's transaction, and DuckDB admits one
writer process), so ingesting the same checkpoint twice (e.g. after a reconnect) stores every
trial exactly once. Batches go in as Arrow
tables, which DuckDB appends without per-row Python work.

Read-only SQL (``query``) runs on a read-only connection with ``enable_external_access = false``,
so it can neither change the results nor read or write other files; ``allow_write=True`` is the
operator's explicit opt-in.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from ngb.core.errors import NgbError, UnknownNameError, first_line
from ngb.core.types import BLOCK_MODELS, TrialResult
from ngb.sweeps import schema

BUSY_MESSAGE = "results database is busy (being written by another ngb process); try again"
TERMINAL_RUN_STATES = ("done", "failed", "cancelled", "finished", "error")
# Inventory fields that must never reach the database (key material, passwords, tokens).
_SECRET_FIELD = re.compile(r"pass|secret|token|private|key_data|identity|credential", re.I)
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

_process_locks: dict[str, threading.RLock] = {}
_process_locks_guard = threading.Lock()


class DatabaseBusy(NgbError):
    """Another process holds the results file; the message says to try again."""


def _lock_for(path: Path) -> threading.RLock:
    key = str(path.resolve())
    with _process_locks_guard:
        return _process_locks.setdefault(key, threading.RLock())


def _is_lock_error(exc: Exception) -> bool:
    import duckdb

    return isinstance(exc, duckdb.IOException) and "lock" in str(exc).lower()


# ---------------------------------------------------------------- value helpers


def _num(value: Any) -> float | None:
    """NaN/inf (unknown statistics) become NULL rather than poisoning aggregates."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _ts(seconds: Any) -> int | None:
    """Unix seconds -> microseconds for an Arrow timestamp; 0/None mean 'not known'."""
    if not seconds:
        return None
    return int(float(seconds) * 1_000_000)


def _json(value: Any) -> str | None:
    if value is None:
        return None
    return json.dumps(value, sort_keys=True, default=str)


def model_family(model: str) -> str:
    """The family of a model: the paper's (``ngb.core.models.family_of``; ``block`` for conv
    and mha), else the name's leading letters (``regnety_040`` -> ``regnety``)."""
    from ngb.core.models import family_of  # stdlib-only at import; torch/timm stay unloaded

    family = family_of(model)
    if family:
        return family
    match = re.match(r"[A-Za-z]+", model)
    return match.group(0).lower() if match else model


def _stats(result_stats: Any) -> dict[str, Any]:
    if result_stats is None:
        return {}
    if isinstance(result_stats, Mapping):
        return dict(result_stats)
    return dict(vars(result_stats))


def _decode_row(columns: Sequence[str], row: Sequence[Any]) -> dict[str, Any]:
    out = {}
    for name, value in zip(columns, row, strict=True):
        if name in _JSON_COLUMNS and isinstance(value, str):
            with suppress(ValueError):
                value = json.loads(value)
        out[name] = value
    return out


# ---------------------------------------------------------------- the store


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

    # ------------------------------------------------------------ connections

    def _open(self, *, write: bool, external_access: bool, timeout: float) -> Any:
        import duckdb

        config: dict[str, Any] = {} if external_access else {"enable_external_access": False}
        deadline = time.monotonic() + timeout
        delay = 0.01
        while True:
            try:
                return duckdb.connect(str(self.path), read_only=not write, config=config)
            except duckdb.Error as exc:
                if not _is_lock_error(exc):
                    raise NgbError(
                        f"cannot open results database {self.path}: {first_line(exc)}"
                    ) from None
                if time.monotonic() >= deadline:
                    raise DatabaseBusy(BUSY_MESSAGE) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

    @contextmanager
    def _connection(self, *, write: bool, external_access: bool = True) -> Iterator[Any]:
        with _lock_for(self.path):
            if write:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            timeout = self.write_timeout_s if write else self.busy_timeout_s
            conn = self._open(write=write, external_access=external_access, timeout=timeout)
            try:
                yield conn
            finally:
                conn.close()

    @contextmanager
    def _writer(self) -> Iterator[Any]:
        """A read-write connection inside one transaction (committed on success)."""
        self._ensure_schema()
        with self._connection(write=True) as conn:
            conn.execute("BEGIN TRANSACTION")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @contextmanager
    def _reader(self, *, external_access: bool = True) -> Iterator[Any]:
        if not self._schema_checked and self.path.exists():
            # Check the version on the connection we read with: one open instead of two,
            # which is most of the cost of a one-shot `ngb query`.
            with self._connection(write=False, external_access=external_access) as conn:
                if _read_version(conn) == schema.latest_version():
                    self._schema_checked = True
                    yield conn
                    return
        self._ensure_schema()
        with self._connection(write=False, external_access=external_access) as conn:
            yield conn

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
        import duckdb

        with _lock_for(self.path):
            # The schema check may open the file read-only: do it before holding it read-write.
            self._ensure_schema()
            keeper = None
            with suppress(duckdb.Error):
                keeper = duckdb.connect(str(self.path))
            try:
                yield
            finally:
                if keeper is not None:
                    keeper.close()

    # ------------------------------------------------------------ schema

    def schema_version(self) -> int:
        """The version recorded in the file (0 for a file that does not exist yet)."""
        if not self.path.exists():
            return 0
        with self._connection(write=False) as conn:
            return _read_version(conn)

    def _ensure_schema(self) -> None:
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
                _migrate(conn, self.path)
        self._schema_checked = True

    # ------------------------------------------------------------ writers

    def create_run(
        self,
        run_id: str,
        sweep_name: str,
        sweep_toml: str,
        devices: Sequence[str],
        n_trials: int,
        meta: Mapping[str, Any] | None = None,
    ) -> bool:
        """Record a new run; returns False (and changes nothing) if ``run_id`` exists already."""
        now = _now()
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
                    _json(list(devices)),
                    n_trials,
                    now,
                    now,
                    _json(dict(meta or {})),
                ],
            )
            return True

    def set_run_status(self, run_id: str, status: str) -> None:
        now = _now()
        finished = now if status in TERMINAL_RUN_STATES else None
        with self._writer() as conn:
            found = conn.execute(
                "UPDATE runs SET status = ?, updated_at = ?, finished_at = ? WHERE run_id = ? "
                "RETURNING run_id",
                [status, now, finished, run_id],
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

    def upsert_run_device(self, run_id: str, device: str, **fields: Any) -> None:
        """Create or update the per-device state of a run; only the given fields change.

        Times (``started_at``, ``finished_at``) are unix seconds. Fields without a column are
        merged into the row's ``extra`` JSON rather than dropped.
        """
        known = {k: v for k, v in fields.items() if k in self._RUN_DEVICE_FIELDS}
        other = {k: v for k, v in fields.items() if k not in self._RUN_DEVICE_FIELDS}
        for name in ("started_at", "finished_at"):
            if isinstance(known.get(name), int | float):
                known[name] = _datetime(known[name])
        with self._writer() as conn:
            row = conn.execute(
                "SELECT extra FROM run_devices WHERE run_id = ? AND device = ?", [run_id, device]
            ).fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO run_devices (run_id, device, updated_at) VALUES (?, ?, ?)",
                    [run_id, device, _now()],
                )
            if other:
                extra = json.loads(row[0]) if row and row[0] else {}
                extra.update(other)
                known["extra"] = _json(extra)
            known["updated_at"] = _now()
            sets = ", ".join(f"{name} = ?" for name in known)
            conn.execute(
                f"UPDATE run_devices SET {sets} WHERE run_id = ? AND device = ?",  # noqa: S608 - names from a fixed list
                [*known.values(), run_id, device],
            )

    def upsert_device(self, device: Mapping[str, Any]) -> None:
        """Store an inventory entry (no secrets: key material and passwords are dropped)."""
        data = {k: v for k, v in dict(device).items() if not _SECRET_FIELD.search(k)}
        name = data.pop("name", None)
        if not name:
            raise NgbError("a device needs a name")
        columns = ("host", "port", "user", "jump_host", "python", "workdir", "notes")
        values = [data.pop(c, None) for c in columns]
        groups = data.pop("groups", None)
        with self._writer() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO devices VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    name,
                    *values[:6],
                    _json(list(groups) if groups else []),
                    values[6],
                    _json(data),
                    _now(),
                ],
            )

    def record_probe(self, device_name: str, probe: Mapping[str, Any]) -> None:
        """Store one probe answer (the whole JSON, plus the facts the paper's tables need)."""
        probe = dict(probe)

        def pick(*names: str) -> Any:
            for name in names:
                node: Any = probe
                for part in name.split("."):
                    node = node.get(part) if isinstance(node, Mapping) else None
                if node is not None:
                    return node
            return None

        # The agent's probe (ngb.devices.probe) reports ram_mb and cores_logical; older or
        # hand-written probes may use the other names.
        ram_mb = pick("ram_mb")
        ram = ram_mb / 1024 if isinstance(ram_mb, int | float) else pick("ram_gb", "memory_gb")
        cores = pick("cores_logical", "cpu_cores", "cores", "cpu_count")
        gpu = pick("gpu", "gpus")
        with self._writer() as conn:
            conn.execute(
                "INSERT INTO probes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    device_name,
                    _now(),
                    pick("hostname", "host"),
                    pick("cpu_model", "cpu.model"),
                    _int(cores) if isinstance(cores, int) else None,
                    _num(ram) if isinstance(ram, int | float) else None,
                    gpu if isinstance(gpu, str) or gpu is None else _json(gpu),
                    pick("os", "platform"),
                    pick("python", "python_version"),
                    _json(pick("compilers", "available")),
                    _json(pick("versions")),
                    _json(probe),
                ],
            )

    def ingest_results(
        self, run_id: str, device: str, results: Iterable[TrialResult | Mapping[str, Any]]
    ) -> int:
        """Store finished trials with their repetitions and CPU samples; returns new trials.

        A trial already stored for (run_id, device, key) is skipped, so ingesting twice is safe.
        """
        with self._writer() as conn:
            return _ingest_results(conn, run_id, device, results)

    def ingest_cpu_samples(
        self, run_id: str, device: str, samples: Iterable[Mapping[str, Any]]
    ) -> int:
        """Store live CPU events (``{ts, key, percent, proc_percent}``) from the event stream."""
        with self._writer() as conn:
            return _ingest_cpu_events(conn, run_id, device, samples)

    def ingest_tuning(
        self, run_id: str, device: str, key: str, events: Iterable[Mapping[str, Any]]
    ) -> int:
        """Store TVM tuning progress events (``{ts, trials_done, budget, best_ms, tasks}``)."""
        with self._writer() as conn:
            return _ingest_tuning(conn, run_id, device, key, events)

    def record_error(
        self, run_id: str | None, device: str | None, key: str | None, kind: str, message: str
    ) -> None:
        """A trial or connection error, with the time it was seen."""
        with self._writer() as conn:
            _insert_errors(conn, [(run_id, device, key, time.time(), kind, message)])

    def buffer(self, *, max_delay_s: float = 1.0, max_rows: int = 100_000) -> IngestBuffer:
        """A batching writer for a live run (see ``IngestBuffer``)."""
        return IngestBuffer(self, max_delay_s=max_delay_s, max_rows=max_rows)

    # ------------------------------------------------------------ readers

    def _rows(self, sql: str, params: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        with self._reader() as conn:
            cur = conn.execute(sql, list(params or []))
            columns = [d[0] for d in cur.description]
            return [_decode_row(columns, row) for row in cur.fetchall()]

    def runs(self) -> list[dict[str, Any]]:
        return self._rows("SELECT * FROM runs ORDER BY created_at DESC, run_id")

    def run(self, run_id: str) -> dict[str, Any]:
        rows = self._rows("SELECT * FROM runs WHERE run_id = ?", [run_id])
        if not rows:
            raise UnknownNameError("run", run_id, [r["run_id"] for r in self.runs()])
        return rows[0]

    def run_devices(self, run_id: str) -> list[dict[str, Any]]:
        return self._rows("SELECT * FROM run_devices WHERE run_id = ? ORDER BY device", [run_id])

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
    ) -> list[dict[str, Any]]:
        """Stored trials filtered by the given columns, oldest first."""
        where, params = _filters(
            run_id=run_id, device=device, status=status, model=model, compiler=compiler, key=key
        )
        sql = f"SELECT * FROM trials{where} ORDER BY run_id, device, finished_at, key"  # noqa: S608
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return self._rows(sql, params)

    def completed_keys(self, run_id: str, device: str) -> set[str]:
        """Keys of the trials of a run already stored for a device (to resume without repeats)."""
        with self._reader() as conn:
            rows = conn.execute(
                "SELECT key FROM trials WHERE run_id = ? AND device = ?", [run_id, device]
            ).fetchall()
        return {r[0] for r in rows}

    def measurements(
        self, run_id: str, device: str | None = None, key: str | None = None
    ) -> list[dict[str, Any]]:
        where, params = _filters(run_id=run_id, device=device, key=key)
        return self._rows(
            f"SELECT * FROM measurements{where} ORDER BY device, key, rep",  # noqa: S608
            params,
        )

    def cpu_samples(
        self, run_id: str, device: str | None = None, key: str | None = None
    ) -> list[dict[str, Any]]:
        where, params = _filters(run_id=run_id, device=device, key=key)
        return self._rows(
            f"SELECT * FROM cpu_samples{where} ORDER BY device, key, ts, t_s",  # noqa: S608
            params,
        )

    def tuning_progress(
        self, run_id: str, device: str | None = None, key: str | None = None
    ) -> list[dict[str, Any]]:
        where, params = _filters(run_id=run_id, device=device, key=key)
        return self._rows(
            f"SELECT * FROM tuning_progress{where} ORDER BY device, key, ts",  # noqa: S608
            params,
        )

    def errors(self, run_id: str | None = None, device: str | None = None) -> list[dict[str, Any]]:
        where, params = _filters(run_id=run_id, device=device)
        return self._rows(f"SELECT * FROM errors{where} ORDER BY ts", params)  # noqa: S608

    def devices(self) -> list[dict[str, Any]]:
        return self._rows("SELECT * FROM devices ORDER BY name")

    def probes(self, device: str | None = None) -> list[dict[str, Any]]:
        where, params = _filters(device=device)
        return self._rows(f"SELECT * FROM probes{where} ORDER BY probed_at", params)  # noqa: S608

    def tables(self) -> list[str]:
        """Tables and views a user may query or export."""
        with self._reader() as conn:
            rows = conn.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = 'main' ORDER BY table_name"
            ).fetchall()
        return [r[0] for r in rows]

    def query(
        self, sql: str, params: Sequence[Any] | None = None, *, allow_write: bool = False
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Run SQL and return (column names, rows). Read-only unless ``allow_write``.

        Bad SQL and attempts to write on the read-only connection raise ``NgbError`` with one
        line; a busy file raises ``DatabaseBusy``.
        """
        import duckdb

        if not sql or not sql.strip():
            raise NgbError("empty SQL query")
        if allow_write:
            self._ensure_schema()
            ctx = self._connection(write=True)
        else:
            ctx = self._reader(external_access=False)
        with ctx as conn:
            try:
                cur = conn.execute(sql, list(params) if params else None)
                if cur.description is None:
                    return [], []
                columns = [d[0] for d in cur.description]
                return columns, cur.fetchall()
            except duckdb.Error as exc:
                raise _sql_error(exc, allow_write) from None

    def export(self, dest: str | Path, fmt: str = "parquet", table_or_sql: str = "trials") -> int:
        """Write a table, view or read-only query to Parquet or CSV; returns rows written.

        The query runs on the locked-down read-only connection and pyarrow writes the file, so
        an exported query cannot touch any file but ``dest``. The file appears complete or not
        at all (written next to ``dest``, then renamed).
        """
        import duckdb
        import pyarrow as pa

        if fmt not in ("parquet", "csv"):
            raise NgbError(f"unknown export format {fmt!r}; use parquet or csv")
        source = table_or_sql.strip()
        if _IDENTIFIER.match(source):
            tables = self.tables()
            if source not in tables:
                raise UnknownNameError("table", source, tables)
            source = f'SELECT * FROM "{source}"'  # noqa: S608 - a checked table name
        with self._reader(external_access=False) as conn:
            try:
                table = conn.sql(source).to_arrow_table()
            except duckdb.Error as exc:
                raise _sql_error(exc, False) from None
            except AttributeError:  # a statement without a result (e.g. SET)
                raise NgbError("export needs a query that returns rows") from None
        dest = Path(dest).expanduser()
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
        os.close(fd)
        try:
            if fmt == "parquet":
                import pyarrow.parquet as pq

                pq.write_table(table, tmp)
            else:
                import pyarrow.csv as pcsv

                pcsv.write_csv(table, tmp)
            os.replace(tmp, dest)
        except (pa.ArrowException, OSError) as exc:
            raise NgbError(f"cannot export to {dest}: {first_line(exc)}") from None
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return table.num_rows


# ---------------------------------------------------------------- batching for live runs


class IngestBuffer:
    """Collects a run's results and events and writes them in batches.

    ``flush_if_due()`` writes when the oldest buffered item is ``max_delay_s`` old or about
    ``max_rows`` rows are waiting (a result counts 1 + its repetitions); call it on every event
    and on a timer, and ``flush()`` at the end. Each write costs a fixed ~0.1 s (open, commit,
    checkpoint, close), so batches of ~100k rows are what reach >= 100k rows/s. Each flush is
    one connection and one transaction, so between flushes the file is free for readers in
    other processes. Not thread-safe: use it from one task.
    """

    def __init__(self, store: Store, *, max_delay_s: float = 1.0, max_rows: int = 100_000):
        self.store = store
        self.max_delay_s = max_delay_s
        self.max_rows = max_rows
        self._results: list[tuple[str, str, TrialResult | Mapping[str, Any]]] = []
        self._cpu: list[tuple[str, str, Mapping[str, Any]]] = []
        self._tuning: list[tuple[str, str, str, Mapping[str, Any]]] = []
        self._errors: list[tuple[Any, ...]] = []
        self._oldest: float | None = None
        self._rows = 0

    def __len__(self) -> int:
        return len(self._results) + len(self._cpu) + len(self._tuning) + len(self._errors)

    def _touch(self, rows: int = 1) -> None:
        self._rows += rows
        if self._oldest is None:
            self._oldest = time.monotonic()

    def add_result(self, run_id: str, device: str, result: TrialResult | Mapping) -> None:
        self._results.append((run_id, device, result))
        reps = (
            result.repetitions
            if isinstance(result, TrialResult)
            else result.get("repetitions") or []
        )
        self._touch(1 + len(reps))

    def add_cpu_sample(self, run_id: str, device: str, event: Mapping[str, Any]) -> None:
        self._cpu.append((run_id, device, event))
        self._touch()

    def add_tuning(self, run_id: str, device: str, key: str, event: Mapping[str, Any]) -> None:
        self._tuning.append((run_id, device, key, event))
        self._touch()

    def add_error(
        self, run_id: str | None, device: str | None, key: str | None, kind: str, message: str
    ) -> None:
        self._errors.append((run_id, device, key, time.time(), kind, message))
        self._touch()

    def due(self) -> bool:
        if self._oldest is None:
            return False
        return self._rows >= self.max_rows or time.monotonic() - self._oldest >= self.max_delay_s

    def flush_if_due(self) -> int:
        return self.flush() if self.due() else 0

    def flush(self) -> int:
        """Write everything buffered; returns the number of new trials stored."""
        if not len(self):
            return 0
        new = 0
        with self.store._writer() as conn:
            for (run_id, device), results in _group(self._results).items():
                new += _ingest_results(conn, run_id, device, results)
            for (run_id, device), events in _group(self._cpu).items():
                _ingest_cpu_events(conn, run_id, device, events)
            tuning: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
            for run_id, device, key, event in self._tuning:
                tuning.setdefault((run_id, device, key), []).append(event)
            for (run_id, device, key), events in tuning.items():
                _ingest_tuning(conn, run_id, device, key, events)
            if self._errors:
                _insert_errors(conn, self._errors)
        self._results, self._cpu, self._tuning, self._errors = [], [], [], []
        self._oldest = None
        self._rows = 0
        return new


def _group(items: list[tuple[str, str, Any]]) -> dict[tuple[str, str], list[Any]]:
    out: dict[tuple[str, str], list[Any]] = {}
    for run_id, device, item in items:
        out.setdefault((run_id, device), []).append(item)
    return out


# ---------------------------------------------------------------- ingest internals


def _now() -> Any:
    return _datetime(time.time())


def _datetime(seconds: float) -> Any:
    """A naive UTC datetime (DuckDB TIMESTAMP), the way every timestamp here is stored."""
    from datetime import datetime, timezone

    return datetime.fromtimestamp(seconds, tz=timezone.utc).replace(tzinfo=None)


def _filters(**columns: Any) -> tuple[str, list[Any]]:
    given = {k: v for k, v in columns.items() if v is not None}
    if not given:
        return "", []
    return " WHERE " + " AND ".join(f"{k} = ?" for k in given), list(given.values())


def _sql_error(exc: Exception, allow_write: bool) -> NgbError:
    if _is_lock_error(exc):
        return DatabaseBusy(BUSY_MESSAGE)
    line = first_line(exc)
    if not allow_write and "read-only" in line:
        return NgbError(
            f"the results database is opened read-only; use --write to change it ({line})"
        )
    if "file system operations are disabled" in line:
        return NgbError(f"read-only SQL cannot read or write files ({line})")
    return NgbError(f"SQL error: {line}")


def _arrow_table(columns: Sequence[tuple[str, str]], data: Mapping[str, list[Any]]) -> Any:
    """An Arrow table in the column order and types of a schema table."""
    import pyarrow as pa

    arrays = []
    for name, sql_type in columns:
        base = sql_type.split()[0]
        typ = {
            "VARCHAR": pa.string(),
            "INTEGER": pa.int32(),
            "BIGINT": pa.int64(),
            "DOUBLE": pa.float64(),
            "BOOLEAN": pa.bool_(),
            "TIMESTAMP": pa.int64(),
        }[base]
        arr = pa.array(data[name], type=typ)
        if base == "TIMESTAMP":
            arr = arr.cast(pa.timestamp("us"))
        arrays.append(arr)
    return pa.Table.from_arrays(arrays, names=[name for name, _ in columns])


def _append(conn: Any, table: str, arrow_table: Any) -> None:
    view = f"_ngb_new_{table}"
    conn.register(view, arrow_table)
    try:
        conn.execute(f"INSERT INTO {table} SELECT * FROM {view}")  # noqa: S608 - fixed names
    finally:
        conn.unregister(view)


def _ingest_results(
    conn: Any, run_id: str, device: str, results: Iterable[TrialResult | Mapping[str, Any]]
) -> int:
    batch: dict[str, TrialResult] = {}
    for item in results:
        result = item if isinstance(item, TrialResult) else TrialResult.from_dict(item)
        batch.setdefault(result.key, result)  # the first copy of a key wins
    if not batch:
        return 0
    stored = {
        row[0]
        for row in conn.execute(
            "SELECT key FROM trials WHERE run_id = ? AND device = ? AND list_contains(?, key)",
            [run_id, device, list(batch)],
        ).fetchall()
    }
    fresh = [r for key, r in batch.items() if key not in stored]
    if not fresh:
        return 0
    now_us = _ts(time.time())
    trial_cols: dict[str, list[Any]] = {name: [] for name, _ in schema.TRIAL_COLUMNS}
    for r in fresh:
        for name, value in _trial_row(run_id, device, r, now_us).items():
            trial_cols[name].append(value)
    _append(conn, "trials", _arrow_table(schema.TRIAL_COLUMNS, trial_cols))
    measurements = _per_trial_rows(
        run_id,
        device,
        fresh,
        "repetitions",
        {"iters": "iters", "elapsed_s": "elapsed_s", "throughput": "throughput"},
        index_name="rep",
    )
    if measurements is not None:
        _append(conn, "measurements", measurements)
    samples = _per_trial_rows(
        run_id, device, fresh, "cpu_samples", {"t_s": 0, "sys_percent": 1, "proc_percent": 2}
    )
    if samples is not None:
        _append(conn, "cpu_samples", samples)
    return len(fresh)


def _per_trial_rows(
    run_id: str,
    device: str,
    results: Sequence[TrialResult],
    attr: str,
    fields: Mapping[str, Any],
    index_name: str | None = None,
) -> Any:
    """Arrow table of the per-trial rows in ``attr`` (repetitions or CPU samples).

    This is the bulk of an ingest (100 repetitions per trial in the paper's presets), so the
    repeated run/device/key columns are dictionary-encoded (one string per trial, not per row)
    and values go to Arrow without per-value Python calls; NaN becomes NULL on the way.
    """
    import numpy as np
    import pyarrow as pa

    counts = np.fromiter(
        (len(getattr(r, attr)) for r in results), dtype=np.int64, count=len(results)
    )
    total = int(counts.sum())
    if not total:
        return None
    rows = [row for r in results for row in getattr(r, attr)]
    trial_index = np.repeat(np.arange(len(results), dtype=np.int32), counts)
    zeros = np.zeros(total, dtype=np.int32)
    columns: dict[str, Any] = {
        "run_id": pa.DictionaryArray.from_arrays(zeros, pa.array([run_id])),
        "device": pa.DictionaryArray.from_arrays(zeros, pa.array([device])),
        "key": pa.DictionaryArray.from_arrays(trial_index, pa.array([r.key for r in results])),
    }
    if attr == "repetitions":  # the trial's axes, repeated per row (see schema.py)
        take = pa.array(trial_index)
        specs = [r.spec or {} for r in results]
        for name in ("model", "compiler", "optimisation"):
            per_trial = pa.array([s.get(name) for s in specs], type=pa.string())
            columns[name] = pa.DictionaryArray.from_arrays(trial_index, per_trial)
        for name in ("batch", "depth", "width"):
            columns[name] = pa.array([s.get(name) for s in specs], type=pa.int32()).take(take)
    if index_name:
        starts = np.repeat(np.cumsum(counts) - counts, counts)
        columns[index_name] = pa.array(np.arange(total, dtype=np.int32) - starts)
    if attr == "cpu_samples":
        columns["source"] = pa.DictionaryArray.from_arrays(zeros, pa.array(["trial"]))
        columns["ts"] = pa.nulls(total, pa.timestamp("us"))
    for name, field_key in fields.items():
        if isinstance(field_key, int):
            values = [row[field_key] if len(row) > field_key else None for row in rows]
        else:
            values = [row.get(field_key) for row in rows]
        columns[name] = pa.array(values, from_pandas=True)
    table_columns = (
        schema.MEASUREMENT_COLUMNS if attr == "repetitions" else schema.CPU_SAMPLE_COLUMNS
    )
    names = [name for name, _ in table_columns]
    return pa.table({name: columns[name] for name in names})


def _trial_row(run_id: str, device: str, r: TrialResult, now_us: int | None) -> dict[str, Any]:
    spec = dict(r.spec or {})
    model = str(spec.get("model", ""))
    thr = _stats(r.throughput)
    lat = _stats(r.latency_ms)
    # TrialSpec.label without re-validating the spec (that costs more than the rest of the row)
    width, depth = spec.get("width"), spec.get("depth", 1)
    label = f"{model}{width}x{depth}" if model in BLOCK_MODELS else model
    label += f"/{spec.get('compiler')}"
    if spec.get("optimisation", "none") != "none":
        label += f"/{spec['optimisation']}"
    label += f"/b{spec.get('batch')}"
    return {
        "run_id": run_id,
        "device": device,
        "key": r.key,
        "label": label,
        "model": model or None,
        "family": model_family(model) if model else None,
        "compiler": spec.get("compiler"),
        "batch": _int(spec.get("batch")),
        "depth": _int(spec.get("depth")),
        "width": _int(spec.get("width")),
        "optimisation": spec.get("optimisation"),
        "target": spec.get("device"),
        "input_size": _int(spec.get("input_size")),
        "status": r.status,
        "error": r.error,
        "error_kind": r.error_kind,
        "export_s": _num(r.export_s),
        "compile_s": _num(r.compile_s),
        "tune_s": _num(r.tune_s),
        "first_call_s": _num(r.first_call_s),
        "repetitions": len(r.repetitions),
        "throughput_mean": _num(thr.get("mean")),
        "throughput_std": _num(thr.get("std")),
        "throughput_median": _num(thr.get("median")),
        "throughput_min": _num(thr.get("min")),
        "throughput_max": _num(thr.get("max")),
        "throughput_p50": _num(thr.get("p50")),
        "throughput_p90": _num(thr.get("p90")),
        "throughput_p99": _num(thr.get("p99")),
        "throughput_cov": _num(thr.get("cov")),
        "latency_mean_ms": _num(lat.get("mean")),
        "latency_p50_ms": _num(lat.get("p50")),
        "latency_p90_ms": _num(lat.get("p90")),
        "latency_p99_ms": _num(lat.get("p99")),
        "unstable": bool(r.unstable),
        "cpu_percent_mean": _num(r.cpu_percent_mean),
        "cpu_percent_max": _num(r.cpu_percent_max),
        "proc_cpu_percent_mean": _num(r.proc_cpu_percent_mean),
        "peak_rss_mb": _num(r.peak_rss_mb),
        "gpu_mem_mb": _num(r.gpu_mem_mb),
        "params": _int(r.params),
        "macs": _int(r.macs),
        "max_abs_err": _num(r.max_abs_err),
        "host": r.host or None,
        "versions": _json(r.versions),
        "threads": _json(r.threads),
        "compiler_options": _json(spec.get("compiler_options") or {}),
        "measure": _json(spec.get("measure") or {}),
        "spec": _json(spec),
        "extra": _json(r.extra),
        "started_at": _ts(r.started_at),
        "finished_at": _ts(r.finished_at),
        "ingested_at": now_us,
    }


def _ingest_cpu_events(
    conn: Any, run_id: str, device: str, events: Iterable[Mapping[str, Any]]
) -> int:
    cols: dict[str, list[Any]] = {name: [] for name, _ in schema.CPU_SAMPLE_COLUMNS}
    for e in events:
        cols["run_id"].append(run_id)
        cols["device"].append(device)
        cols["key"].append(e.get("key"))
        cols["source"].append("live")
        cols["ts"].append(_ts(e.get("ts")))
        cols["t_s"].append(_num(e.get("t_s")))
        cols["sys_percent"].append(_num(e.get("percent", e.get("sys_percent"))))
        cols["proc_percent"].append(_num(e.get("proc_percent")))
    if cols["run_id"]:
        _append(conn, "cpu_samples", _arrow_table(schema.CPU_SAMPLE_COLUMNS, cols))
    return len(cols["run_id"])


def _ingest_tuning(
    conn: Any, run_id: str, device: str, key: str, events: Iterable[Mapping[str, Any]]
) -> int:
    rows = [
        [
            run_id,
            device,
            key,
            _datetime(e["ts"]) if e.get("ts") else _now(),
            _int(e.get("trials_done")),
            _int(e.get("budget")),
            _num(e.get("best_ms")),
            _json(e.get("tasks")),
        ]
        for e in events
    ]
    if rows:
        conn.executemany("INSERT INTO tuning_progress VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    return len(rows)


def _insert_errors(conn: Any, rows: Sequence[tuple[Any, ...]]) -> None:
    conn.executemany(
        "INSERT INTO errors VALUES (?, ?, ?, ?, ?, ?)",
        [(run, dev, key, _datetime(ts), kind, msg) for run, dev, key, ts, kind, msg in rows],
    )


# ---------------------------------------------------------------- migrations


def _read_version(conn: Any) -> int:
    has_table = conn.execute(
        "SELECT count(*) FROM information_schema.tables "
        "WHERE table_schema = 'main' AND table_name = 'schema_version'"
    ).fetchone()[0]
    if not has_table:
        return 0
    return int(conn.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()[0])


def _migrate(conn: Any, path: Path) -> None:
    """Apply every missing migration step in one transaction (another process may race us)."""
    conn.execute("BEGIN TRANSACTION")
    try:
        other = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'main' "
            "AND table_name NOT IN ('schema_version')"
        ).fetchone()[0]
        version = _read_version(conn)
        if version == 0 and other:
            raise NgbError(f"{path} is a DuckDB file but not an ngb results database")
        if version > schema.latest_version():
            raise NgbError(
                f"results database {path} has schema version {version}, newer than this ngb "
                f"understands ({schema.latest_version()}); upgrade ngb"
            )
        conn.execute(schema.VERSION_TABLE)
        for number, (description, statements) in enumerate(schema.MIGRATIONS, start=1):
            if number <= version:
                continue
            for statement in statements:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_version VALUES (?, ?, ?)", [number, description, _now()]
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
