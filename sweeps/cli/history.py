"""``ngb history``: a point's (or a filter's) results over every run, with change points.

Each matching point is one series, oldest run first, each result with its 95 % interval, its
compiler's version and what differs from the run before; change points (``sweeps/changepoints``)
are marked and named with the fields that changed there. ``--figure BASE`` also writes the
series as ``BASE.png`` (``.svg``, ``.pdf`` with ``--figure-format``). ``--valid-only`` keeps
INVALID and disturbed runs in the table but out of the change-point search.
"""

from __future__ import annotations

from pathlib import Path

import click
from ngb.sweeps.cli.options import emit_text, results_db_options

FORMATS = ("table", "markdown", "csv", "html")


@click.command("history")
@click.option("--device", default=None, help="Only this testbed device.")
@click.option("--model", "-m", default=None, help="Only this model (as in the results).")
@click.option("--compiler", "-c", default=None, help="Only this compiler.")
@click.option("--batch", "-b", type=int, default=None, help="Only this batch size.")
@click.option("--precision", default=None, help="Only this precision asked for.")
@click.option("--optimisation", default=None, help="Only this optimisation.")
@click.option(
    "--min-change", default="0%", show_default=True, metavar="PCT",
    help="Report change points of at least this size only (e.g. 2%).",
)  # fmt: skip
@click.option(
    "--valid-only", is_flag=True,
    help="Leave INVALID and disturbed runs out of the change-point search (still shown).",
)  # fmt: skip
@click.option(
    "--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
    help="Output format (html: a self-contained page).",
)  # fmt: skip
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, writable=True), default=None,
    help="Write to this file instead of stdout.",
)  # fmt: skip
@click.option(
    "--figure", "figure", type=click.Path(dir_okay=False), default=None, metavar="BASE",
    help="Also draw the series to BASE.png (time series, intervals, change points).",
)  # fmt: skip
@click.option(
    "--figure-format", "figure_formats", multiple=True, type=click.Choice(("png", "svg", "pdf")),
    default=("png",), show_default=True, help="Figure file format (repeat for several).",
)  # fmt: skip
@results_db_options
def history(
    device: str | None, model: str | None, compiler: str | None, batch: int | None,
    precision: str | None, optimisation: str | None, min_change: str, valid_only: bool, fmt: str,
    output: str | None, figure: str | None, figure_formats: tuple[str, ...], db: str | None,
    wait: float,
) -> None:  # fmt: skip
    """Every run's result of the matching points over time, with change points.

    A change point needs 3 runs on each side (6 in a series); each table says how many runs it
    searched and the |t| a change had to exceed (1 % false alarms per series)."""
    from ngb.core.base.errors import ConfigError
    from ngb.sweeps.report import history as hist
    from ngb.sweeps.report.compare import parse_threshold
    from ngb.sweeps.report.render import render
    from ngb.sweeps.store.database import Store

    try:
        min_effect = 0.0 if min_change.strip() in ("0", "0%") else parse_threshold(min_change)
    except ValueError as exc:
        raise ConfigError(f"--min-change: {exc}") from None
    filters = {
        "device": device, "model": model, "compiler": compiler, "batch": batch,
        "precision_asked": precision, "optimisation": optimisation,
    }  # fmt: skip
    store = Store(db, busy_timeout_s=wait)
    series = hist.series_of(hist.load(store, filters), min_effect=min_effect, valid_only=valid_only)
    if not series:
        shown = ", ".join(f"{k}={v}" for k, v in filters.items() if v is not None)
        raise ConfigError(f"no successful result matches {shown or 'anything'} in the store")
    built = hist.report(series, hist.package_lookup(store))
    if fmt == "html":
        from ngb.sweeps.figures.html_report import single_report_page

        text = single_report_page(built)
    else:
        text = render(built, fmt)
    emit_text(text, output, store.path)
    if figure is not None:
        from ngb.core.base.safe_files import refuse_protected
        from ngb.devices.paths import get_paths
        from ngb.sweeps.figures.history import write

        formats = tuple(dict.fromkeys(figure_formats))
        own = {**get_paths().own_files(), "results database being read": store.path}
        for fmt in formats:
            refuse_protected(f"{figure}.{fmt}", own)
        for path in write(series, Path(figure), formats):
            click.echo(f"wrote {path}", err=True)
