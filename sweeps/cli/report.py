"""``ngb report [NAME]``: regenerate a paper table from the results database (read-only)."""

from __future__ import annotations

import click


@click.command("report")
@click.argument("name", required=False)
@click.option("--run", "run_id", default=None, help="Only this run (default: newest per point).")
@click.option("--device", default=None, help="Only this testbed device.")
@click.option(
    "--format", "fmt", type=click.Choice(["table", "markdown", "csv"]), default="table",
    show_default=True, help="Output format.",
)  # fmt: skip
@click.option(
    "--db", type=click.Path(dir_okay=False), default=None,
    help="Results file (default: the data dir's results.duckdb, or $NGB_DB).",
)  # fmt: skip
@click.option(
    "--wait", type=click.FloatRange(min=0), default=5.0, show_default=True,
    help="Seconds to wait while another ngb process is writing the results file.",
)  # fmt: skip
def report(
    name: str | None, run_id: str | None, device: str | None, fmt: str, db: str | None,
    wait: float,
) -> None:  # fmt: skip
    """Print report NAME; without NAME, list the reports."""
    from ngb.sweeps import reports

    if name is None:
        width = max(len(n) for n, _ in reports.list_reports())
        for report_name, description in reports.list_reports():
            click.echo(f"{report_name.ljust(width)}  {description}")
        return
    from ngb.sweeps.store import Store

    built = reports.build_report(name, Store(db, busy_timeout_s=wait), run_id=run_id, device=device)
    click.echo(reports.render(built, fmt), nl=False)
