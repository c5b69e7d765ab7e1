"""``ngb query``, ``ngb export`` and ``ngb sweeps``: the results database and sweep files.

``query`` and ``export`` open the results file read-only and only for as long as they need it, so
they work from another terminal while a run is writing (see ``ngb.sweeps.store``).
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

import click
from ngb.core.errors import NgbError
from ngb.sweeps.cli.options import results_db_options


def _store(db: str | None, wait: float) -> Any:
    from ngb.sweeps.store import Store

    return Store(db, busy_timeout_s=wait)


def _statements(sql: str) -> list[Any]:
    """The statements in ``sql``, split by DuckDB's own parser (no database needed).

    A syntax error gives an empty list: the query itself then reports it, with its position.
    """
    import duckdb

    try:
        return list(duckdb.extract_statements(sql))
    except duckdb.Error:
        return []


def _one_statement(sql: str) -> Any | None:
    """Refuse several statements: only the last one's rows would be shown (or exported)."""
    statements = _statements(sql)
    if len(statements) > 1:
        raise NgbError(
            f"one SQL statement at a time, got {len(statements)}: only the last one's rows "
            "would show; run them one by one"
        )
    return statements[0] if statements else None


# Statement kinds that return rows to export (PIVOT parses as MULTI).
_ROW_STATEMENTS = ("SELECT", "EXPLAIN", "PRAGMA", "MULTI")


def _check_destination(dest: Path) -> None:
    """Refuse a destination whose folder is missing or is a file (export creates no folders)."""
    folder = dest.parent
    if not folder.exists():
        raise NgbError(f"cannot export to {dest}: folder {folder} does not exist")
    if not folder.is_dir():
        raise NgbError(f"cannot export to {dest}: {folder} is not a folder")


def _plain(value: Any) -> Any:
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
    _one_statement(sql)
    store = _store(db, wait)
    if not write:
        store.require_file()  # read-only SQL on a missing file: say so, create nothing
    columns, rows = store.query(sql, allow_write=write, allow_files=allow_files)
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
        statement = _one_statement(sql)
        kind = statement.type.name if statement is not None else "SELECT"
        if kind not in _ROW_STATEMENTS:
            raise NgbError(f"export needs a query that returns rows (SELECT ...), not {kind}")
    if output is not None and not output.strip():
        raise NgbError("--output is empty: give a file name")
    source = sql or table or "trials"
    dest = Path(output) if output else Path(f"{table or ('query' if sql else 'trials')}.{fmt}")
    _check_destination(dest.expanduser())
    n = _store(db, wait).export(dest, fmt, source, overwrite=force)
    click.echo(f"wrote {n} rows to {dest}")


@click.group("sweeps", invoke_without_command=True)
@click.pass_context
def sweeps(ctx: click.Context) -> None:
    """List sweep presets, show one, or validate a sweep file."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_cmd)


@sweeps.command("list")
def list_cmd() -> None:
    """Presets shipped with ngb, with their trial counts."""
    from ngb.sweeps.spec import list_presets, load_sweep

    for name in list_presets():
        sweep = load_sweep(name)
        n = len(sweep.trials())
        click.echo(f"{name:<16} {n:>5} trials  {sweep.description}")


@sweeps.command("show")
@click.argument("name")
@click.option("--trials", "show_trials", is_flag=True, help="List every trial too.")
def show(name: str, show_trials: bool) -> None:
    """Print a preset (or file) as TOML, with its trial count."""
    from ngb.sweeps.spec import load_sweep

    sweep = load_sweep(name)
    trials = sweep.trials()
    click.echo(sweep.to_toml().rstrip())
    click.echo(f"\n# {len(trials)} trials")
    if show_trials:
        for spec in trials:
            click.echo(f"#   {spec.key}  {spec.label}")


@sweeps.command("check")
@click.argument("file")
@click.option(
    "--no-models",
    is_flag=True,
    help="Skip checking timm names and importing [[models]] factories (imports timm, your code).",
)
def check(file: str, no_models: bool) -> None:
    """Validate a sweep file (or preset) and print its number of trials."""
    from ngb.sweeps.spec import load_sweep

    sweep = load_sweep(file)
    n = len(sweep.trials())
    if not no_models and (sweep.models() or sweep.model_sources):
        sweep.check_models()  # timm names exist, [[models]] factories import
    click.echo(f"ok: {sweep.name}: {n} trials")
