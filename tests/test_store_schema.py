"""A new store is created by the schema at once (``migrations.schema_at_once``), an older one by
the steps it lacks: both must end in the same database, column for column."""

from __future__ import annotations

from pathlib import Path

import duckdb
from ngb.sweeps.store import schema
from ngb.sweeps.store.database import Store
from ngb.sweeps.store.migrations import empty_database, migrate, stepped_database

CATALOG = {
    "columns": "SELECT table_name, column_index, column_name, data_type, column_default, "
    "is_nullable FROM duckdb_columns() WHERE schema_name = 'main' ORDER BY ALL",
    "constraints": "SELECT table_name, constraint_type, constraint_text, constraint_column_names "
    "FROM duckdb_constraints() WHERE schema_name = 'main' ORDER BY ALL",
    "views": "SELECT view_name, sql FROM duckdb_views() WHERE schema_name = 'main' "
    "AND NOT internal ORDER BY ALL",
}


def catalog(conn: duckdb.DuckDBPyConnection) -> dict[str, list[tuple[object, ...]]]:
    return {what: conn.execute(sql).fetchall() for what, sql in CATALOG.items()}


def test_a_new_store_has_the_schema_the_steps_build(tmp_path: Path) -> None:
    stepped = stepped_database()
    want = catalog(stepped)
    assert len(want["columns"]) > 100 and want["views"]  # the comparison is of something

    new = duckdb.connect(str(tmp_path / "new.duckdb"))
    migrate(new, tmp_path / "new.duckdb")
    assert catalog(new) == want
    versions = [
        v for (v,) in new.execute("SELECT version FROM schema_version ORDER BY 1").fetchall()
    ]
    assert versions == list(range(1, len(schema.MIGRATIONS) + 1))

    # a file that stopped half way (version 3 here) takes the remaining steps, one by one
    old = duckdb.connect(str(tmp_path / "old.duckdb"))
    old.execute(schema.VERSION_TABLE)
    for number, (description, statements) in enumerate(schema.MIGRATIONS[:3], start=1):
        for statement in statements:
            old.execute(statement)
        old.execute("INSERT INTO schema_version VALUES (?, ?, now())", [number, description])
    migrate(old, tmp_path / "old.duckdb")
    assert catalog(old) == want

    # what a missing file reads as: the same tables, without the version table
    empty = catalog(empty_database())
    assert empty["columns"] == [c for c in want["columns"] if c[0] != "schema_version"]
    assert empty["views"] == want["views"]


def test_the_store_creates_its_file_at_the_latest_version(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.duckdb")
    store.create_run("r1", "demo", "", ["localhost"], 1, {})
    assert store.schema_version() == schema.latest_version()
    assert [r["run_id"] for r in store.runs()] == ["r1"]
