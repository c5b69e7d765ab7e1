"""Schema migrations of the results database: read the file's version, apply missing steps.

The steps themselves are data in ``ngb.sweeps.store.schema.MIGRATIONS`` (append-only; to add a
column, append a step with its ``ALTER TABLE`` and the schema version follows). This module applies
them in one transaction, so two processes racing to upgrade the same file cannot both apply a step.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

from ngb.core.base.errors import NgbError
from ngb.sweeps.store import schema
from ngb.sweeps.store.ingest import now

if TYPE_CHECKING:
    import duckdb


def _number(conn: duckdb.DuckDBPyConnection, sql: str) -> int:
    """The one integer a count or max query answers (0 for no row or NULL)."""
    row = conn.execute(sql).fetchone()
    return int(row[0] or 0) if row is not None else 0


def read_version(conn: duckdb.DuckDBPyConnection) -> int:
    has_table = _number(
        conn,
        "SELECT count(*) FROM information_schema.tables WHERE table_catalog = current_database() "
        "AND table_schema = 'main' AND table_name = 'schema_version'",
    )
    if not has_table:
        return 0
    return _number(conn, "SELECT coalesce(max(version), 0) FROM schema_version")


def other_tables(conn: duckdb.DuckDBPyConnection) -> int:
    """How many tables besides ``schema_version``: some in a file of version 0 make it another
    program's DuckDB file, not an ngb store of before the version table."""
    return _number(
        conn,
        "SELECT count(*) FROM information_schema.tables WHERE table_catalog = current_database() "
        "AND table_schema = 'main' AND table_name NOT IN ('schema_version')",
    )


# Every catalog query names the connection's own database (``current_database()``): another file
# may be attached beside the store in one connection (``merge``'s source), and the catalog lists
# every attached database.
_COUNT_TABLES = (
    "SELECT count(*) FROM information_schema.tables "
    "WHERE table_catalog = current_database() AND table_schema = 'main'"
)


def migrate(conn: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Apply every missing migration step in one transaction (another process may race us)."""
    conn.execute("BEGIN TRANSACTION")
    try:
        other = other_tables(conn)
        version = read_version(conn)
        if version == 0 and other:
            raise NgbError(f"{path} is a DuckDB file but not an ngb results database")
        if version > schema.latest_version():
            raise NgbError(
                f"results database {path} has schema version {version}, newer than this ngb "
                f"understands ({schema.latest_version()}); upgrade ngb"
            )
        if not other and not _number(conn, _COUNT_TABLES):  # a new file: all steps at once
            for statement in schema_at_once():
                conn.execute(statement)
        else:
            conn.execute(schema.VERSION_TABLE)
            for number, (_description, statements) in enumerate(schema.MIGRATIONS, start=1):
                if number > version:
                    for statement in statements:
                        conn.execute(statement)
        done = [
            (number, description, now())
            for number, (description, _statements) in enumerate(schema.MIGRATIONS, start=1)
            if number > version
        ]
        if done:  # one statement: one INSERT a step was ~8 of a new store's ~50 ms of CPU
            rows = ", ".join("(?, ?, ?)" for _ in done)
            conn.execute(
                f"INSERT INTO schema_version VALUES {rows}",  # noqa: S608 - placeholders only
                [value for row in done for value in row],
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def stepped_database() -> duckdb.DuckDBPyConnection:
    """An in-memory database that went through every step, one after another."""
    import duckdb
    from ngb.sweeps.store.sql_files import BASE_CONFIG

    conn = duckdb.connect(":memory:", config=BASE_CONFIG)
    conn.execute(schema.VERSION_TABLE)
    for _description, statements in schema.MIGRATIONS:
        for statement in statements:
            conn.execute(statement)
    return conn


def schema_at_once(*, version_table: bool = True) -> list[str]:
    """The statements that create the latest schema in one go: the tables (the version table
    too, unless told otherwise) and views of a database that went through the steps, read back
    from DuckDB's catalog once a process (``_latest``). The steps stay the one definition; a new
    store runs these instead of ~90 CREATE and ALTER statements one after another (~65 ms of CPU
    -> ~15 ms on the 2-core VM, once the first store of a process has paid for the stepped
    database: the console, a sweep's fresh homes and the test suite make many)."""
    return [sql for name, sql in _latest() if version_table or name != "schema_version"]


@functools.cache
def _latest() -> tuple[tuple[str, str], ...]:
    """(name, CREATE statement) of every table, then every view, in the order they were made."""
    conn = stepped_database()
    try:
        tables = conn.execute(
            "SELECT table_name, sql FROM duckdb_tables() WHERE schema_name = 'main' "
            "ORDER BY table_oid"
        ).fetchall()
        views = conn.execute(
            "SELECT view_name, sql FROM duckdb_views() WHERE schema_name = 'main' AND NOT internal "
            "ORDER BY view_oid"
        ).fetchall()
    finally:
        conn.close()
    return tuple((str(name), str(sql)) for name, sql in tables + views)


def empty_database() -> duckdb.DuckDBPyConnection:
    """An in-memory database with the current schema: what a file not yet written reads as (no
    version table, as a file no step has touched)."""
    import duckdb
    from ngb.sweeps.store.sql_files import BASE_CONFIG

    conn = duckdb.connect(":memory:", config=BASE_CONFIG)
    for statement in schema_at_once(version_table=False):
        conn.execute(statement)
    return conn
