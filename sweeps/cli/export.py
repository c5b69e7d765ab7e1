"""``ngb export``: a table, view or read-only query of the results database as Parquet or CSV.

Like ``ngb query`` it holds the results file only while it reads, so it works during a run.
"""

from __future__ import annotations

from pathlib import Path

import click
from ngb.core.base.errors import NgbError
from ngb.sweeps.cli.options import results_db_options
from ngb.sweeps.cli.query import ROW_STATEMENTS, one_statement, open_store


def _check_destination(dest: Path) -> None:
    """Refuse a destination whose folder is missing or is a file (export creates no folders)."""
    folder = dest.parent
    if not folder.exists():
        raise NgbError(f"cannot export to {dest}: folder {folder} does not exist")
    if not folder.is_dir():
        raise NgbError(f"cannot export to {dest}: {folder} is not a folder")


@click.command("export")
@click.option(
    "--format", "fmt", type=click.Choice(["parquet", "csv"]), default="parquet", show_default=True
)
@click.option("--table", "table", default=None, help="Table or view to export (default: trials).")
@click.option("--sql", "sql", default=None, help="A read-only query to export instead of a table.")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    default=None,
    help="Destination file (default: TABLE.FORMAT in the current directory).",
)
@click.option("--force", is_flag=True, help="Replace DEST if it exists already.")
@results_db_options
def export(
    fmt: str,
    table: str | None,
    sql: str | None,
    output: str | None,
    force: bool,
    db: str | None,
    wait: float,
) -> None:
    """Export a table, view or query as Parquet or CSV."""
    if table and sql:
        raise NgbError("give --table or --sql, not both")
    if sql is not None:
        statement = one_statement(sql)
        kind = statement.type.name if statement is not None else "SELECT"
        if kind not in ROW_STATEMENTS:
            raise NgbError(f"export needs a query that returns rows (SELECT ...), not {kind}")
    if output is not None and not output.strip():
        raise NgbError("--output is empty: give a file name")
    source = sql or table or "trials"
    dest = Path(output) if output else Path(f"{table or ('query' if sql else 'trials')}.{fmt}")
    _check_destination(dest.expanduser())
    from ngb.sweeps.store.snapshot import export

    n = export(open_store(db, wait), dest, fmt, source, overwrite=force)
    click.echo(f"wrote {n} rows to {dest}")
