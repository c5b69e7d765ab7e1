"""``ngb import STORE``: merge another results file's runs into this one, ids kept.

A lab collects results from several workstations into one history, so runs keep the ids they
were given (reports, CI logs and notes cite them) and every trial arrives exactly once. A trial
is identified as everywhere in the store by ``(run_id, device, key)`` (ingest's rule), so:

- a run only in STORE is copied whole: its run row, per-device rows, trials, repetitions, CPU
  samples, tuning progress and errors;
- a run in both files *and the same run* (same ``created_at`` and sweep name: e.g. STORE was
  imported before, while the run was still going) gets only the trials not here yet, with
  their repetitions and samples; importing the same file twice therefore changes nothing;
- a run id in both files for *different* runs (``ngb measure --run nb`` on two machines) is a
  clash, and the import is refused with one line naming it, before anything is written. Not
  renamed: a renamed id no longer matches what was cited, and a silent rename on every re-import
  would duplicate the run; the operator renames it in STORE (``ngb query --write --db STORE``).

Devices, probes and package lists (``environments``) are added where missing; ours are kept.
STORE itself is never changed: it is copied to a temporary folder and the copy is migrated to
this ngb's schema, so an older file imports too. All inserts run in one transaction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ngb.core.base.errors import NgbError
from ngb.core.base.scratch import scratch_dir
from ngb.sweeps.store.connect import connection, write_errors
from ngb.sweeps.store.database import Store
from ngb.sweeps.store.raw_files import copy_file

if TYPE_CHECKING:
    import duckdb

# tables whose rows hang off a trial: (run_id, device, key) says which trial
_PER_TRIAL = ("measurements", "cpu_samples", "tuning_progress")
# tables copied where their key is missing here
_BY_KEY = {"devices": ("name",), "probes": ("device", "probed_at"), "environments": ("env_hash",)}
_HANDLED = {"runs", "run_devices", "trials", "errors", "schema_version", *_PER_TRIAL, *_BY_KEY}


@dataclass
class ImportSummary:
    new_runs: list[str] = field(default_factory=list)
    merged_runs: list[str] = field(default_factory=list)  # the same run, trials added
    trials_imported: int = 0
    trials_already_here: int = 0
    skipped_tables: list[str] = field(default_factory=list)

    def text(self) -> str:
        parts = [
            f"imported {self.trials_imported} trials",
            f"{len(self.new_runs)} new runs",
            f"{len(self.merged_runs)} runs merged",
            f"{self.trials_already_here} trials already here",
        ]
        if self.skipped_tables:
            parts.append("tables not merged: " + ", ".join(self.skipped_tables))
        return ", ".join(parts)


def _ident(name: str) -> str:
    """A table name from STORE as a quoted SQL identifier (the file is not ours to trust)."""
    return '"' + name.replace('"', '""') + '"'


def _quote(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def _count(conn: duckdb.DuckDBPyConnection, sql: str) -> int:
    row = conn.execute(sql).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def import_store(target: Store, source: Path) -> ImportSummary:
    """Merge ``source``'s runs into ``target`` (see module); returns what was done."""
    source = Path(source).expanduser()
    if not source.is_file():
        raise NgbError(f"no results file at {source}")
    if target.path.exists() and source.resolve() == target.path.resolve():
        raise NgbError(f"{source} is this store itself: nothing to import")
    with scratch_dir("import") as tmp:
        copy = Path(tmp) / "source.duckdb"
        copy_file(source, copy)  # never unlocks a store this process holds (``raw_files``)
        if Path(f"{source}.wal").exists():
            copy_file(Path(f"{source}.wal"), Path(f"{copy}.wal"))
        other = Store(copy)
        try:
            if other.schema_version() == 0:
                raise NgbError(f"{source} is not an ngb results database")
            with other.batch():  # migrates the copy to this ngb's schema (refuses a newer one)
                pass
        except NgbError as exc:  # name the operator's file, not the temporary copy
            raise NgbError(str(exc).replace(str(copy), str(source))) from None
        with target.batch():  # creates or migrates this store
            pass
        with (
            write_errors(target.path),
            connection(target.path, write=True, timeout=target.write_timeout_s) as conn,
        ):
            conn.execute(f"ATTACH {_quote(copy)} AS src (READ_ONLY)")
            try:
                conn.execute("BEGIN TRANSACTION")
                try:
                    summary = _merge(conn)
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
            finally:
                conn.execute("DETACH src")
    return summary


def _merge(conn: duckdb.DuckDBPyConnection) -> ImportSummary:
    """The inserts, on ``conn`` inside its transaction with STORE's copy attached as ``src``."""
    c, ex = conn, conn.execute
    clashes = ex(
        "SELECT s.run_id, s.created_at, m.created_at FROM src.runs s JOIN main.runs m USING "
        "(run_id) WHERE s.created_at IS DISTINCT FROM m.created_at "
        "OR s.sweep_name IS DISTINCT FROM m.sweep_name ORDER BY 1"
    ).fetchall()
    if clashes:
        run_id, theirs, ours = clashes[0]
        more = f" (and {len(clashes) - 1} more)" if len(clashes) > 1 else ""
        raise NgbError(
            f"run id {run_id!r} names different runs here (created {ours}) and in the imported "
            f"store (created {theirs}){more}; nothing imported: rename the run in that store "
            "first (ngb query --write --db STORE, on each table holding run_id)"
        )
    summary = ImportSummary()
    summary.new_runs = [
        r[0]
        for r in ex(
            "SELECT run_id FROM src.runs WHERE run_id NOT IN (SELECT run_id FROM main.runs) "
            "ORDER BY run_id"
        ).fetchall()
    ]
    # every trial of STORE not here yet, by the store's identity of a trial
    ex(
        "CREATE TEMP TABLE _ngb_import AS SELECT run_id, device, key FROM src.trials s "
        "WHERE NOT EXISTS (SELECT 1 FROM main.trials m WHERE m.run_id = s.run_id "
        "AND m.device = s.device AND m.key = s.key)"
    )
    try:
        summary.trials_imported = _count(c, "SELECT count(*) FROM _ngb_import")
        summary.trials_already_here = _count(c, "SELECT count(*) FROM src.trials") - (
            summary.trials_imported
        )
        summary.merged_runs = [
            r[0]
            for r in ex(
                "SELECT DISTINCT run_id FROM _ngb_import WHERE run_id IN "
                "(SELECT run_id FROM main.runs) ORDER BY 1"
            ).fetchall()
        ]
        # the new runs as a literal list: main.runs gains them below, a subquery would not see them
        new = [summary.new_runs]
        new_runs = "list_contains(?, s.run_id)"
        ex(f"INSERT INTO main.runs BY NAME SELECT * FROM src.runs s WHERE {new_runs}", new)  # noqa: S608
        ex(
            "INSERT INTO main.run_devices BY NAME SELECT * FROM src.run_devices s WHERE NOT EXISTS "
            "(SELECT 1 FROM main.run_devices m WHERE m.run_id = s.run_id AND m.device = s.device)"
        )
        in_import = (
            "EXISTS (SELECT 1 FROM _ngb_import i WHERE i.run_id = s.run_id "
            "AND i.device = s.device AND i.key = s.key)"
        )
        ex(f"INSERT INTO main.trials BY NAME SELECT * FROM src.trials s WHERE {in_import}")  # noqa: S608
        for table in (*_PER_TRIAL, *map(_ident, _later_tables(c, "key"))):
            # rows without a trial key (live CPU samples) follow their run when the run is new
            ex(
                f"INSERT INTO main.{table} BY NAME SELECT * FROM src.{table} s "  # noqa: S608
                f"WHERE {in_import} OR (s.key IS NULL AND {new_runs})",
                new,
            )
        ex(
            "INSERT INTO main.errors BY NAME SELECT * FROM src.errors s "  # noqa: S608
            f"WHERE {in_import} OR {new_runs}",
            new,
        )
        for table in _later_tables(c, "run_id"):  # per-run tables a later migration adds
            name = _ident(table)
            sql = f"INSERT INTO main.{name} BY NAME SELECT * FROM src.{name} s WHERE "  # noqa: S608
            ex(sql + new_runs, new)  # a quoted identifier; the runs are a parameter
        for table, keys in _BY_KEY.items():
            same = " AND ".join(f"m.{k} = s.{k}" for k in keys)
            ex(
                f"INSERT INTO main.{table} BY NAME SELECT * FROM src.{table} s "  # noqa: S608
                f"WHERE NOT EXISTS (SELECT 1 FROM main.{table} m WHERE {same})"
            )
    finally:
        ex("DROP TABLE _ngb_import")
    theirs = {r[0] for r in ex(_TABLES, ["src"]).fetchall()}
    merged = {t for t, cols in _columns(c).items() if "run_id" in cols}
    summary.skipped_tables = sorted(theirs - _HANDLED - merged)
    return summary


_TABLES = "SELECT table_name FROM duckdb_tables() WHERE database_name = ?"


def _columns(conn: duckdb.DuckDBPyConnection) -> dict[str, set[str]]:
    """Tables of both files not handled by name above (a later migration's), with their
    columns; a table only STORE has (an operator's own) is left out, and named as skipped."""
    ours = conn.execute("SELECT current_database()").fetchone()
    both = {r[0] for r in conn.execute(_TABLES, ["src"]).fetchall()}
    both &= {r[0] for r in conn.execute(_TABLES, [ours[0] if ours else ""]).fetchall()}
    out: dict[str, set[str]] = {}
    for table, column in conn.execute(
        "SELECT table_name, column_name FROM duckdb_columns() WHERE database_name = 'src'"
    ).fetchall():
        if table in both and table not in _HANDLED:
            out.setdefault(table, set()).add(column)
    return out


def _later_tables(conn: duckdb.DuckDBPyConnection, kind: str) -> list[str]:
    """Tables a later migration may add, merged by their shape: ``key``: rows of one trial
    (``run_id``, ``device``, ``key``), ``run_id``: rows of one run (without a trial key)."""
    trial = {"run_id", "device", "key"}
    return sorted(
        t
        for t, cols in _columns(conn).items()
        if (trial <= cols if kind == "key" else "run_id" in cols and not trial <= cols)
    )
