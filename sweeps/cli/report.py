"""``ngb report [NAME]``: regenerate a paper table from the results database (read-only).

``NAME`` may be ``all`` (every report, in the paper's order). ``--format latex`` gives booktabs
tables for a paper; ``--format html`` gives a self-contained page: without NAME (or with ``all``)
the whole-run report with figures, testbed and failures, with NAME that report's tables only.
``-o FILE`` writes to a file instead of stdout.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import click
from ngb.sweeps.cli.options import emit_text, results_db_options

if TYPE_CHECKING:
    from ngb.sweeps.store.database import Store

ALL = "all"
FORMATS = ("table", "markdown", "csv", "latex", "html")


@click.command("report")
@click.argument("name", required=False)
@click.option("--run", "run_id", default=None, help="Only this run (default: newest per point).")
@click.option("--device", default=None, help="Only this testbed device.")
@click.option(
    "--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
    help="Output format (html: a self-contained page; without NAME, the whole-run report).",
)  # fmt: skip
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, writable=True), default=None,
    help="Write to this file instead of stdout.",
)  # fmt: skip
@click.option("--family", default=None, help="html whole-run report: only this model family.")
@click.option(
    "--precision", default=None, help="html whole-run report: only results at this precision."
)
@click.option(
    "--no-figures", is_flag=True, help="html whole-run report: leave the figures out (faster)."
)
@click.option("--model", default=None, help="ops: only this model (its profiles' name).")
@click.option(
    "--compilers", "-c", default=None,
    help="ops: only these comma-separated compilers' columns, in this order.",
)  # fmt: skip
@click.option(
    "--figure", "figure_dir", type=click.Path(file_okay=False), default=None,
    help="ops: also draw a stacked bar per compiler for each model into this folder.",
)  # fmt: skip
@results_db_options
def report(
    name: str | None, run_id: str | None, device: str | None, fmt: str, output: str | None,
    family: str | None, precision: str | None, no_figures: bool, model: str | None,
    compilers: str | None, figure_dir: str | None, db: str | None, wait: float,
) -> None:  # fmt: skip
    """Print report NAME (or `all`); without NAME, list the reports."""
    from ngb.sweeps.report import catalog as reports

    if name is None and fmt != "html":
        width = max(len(n) for n, _ in reports.list_reports())
        for report_name, description in reports.list_reports():
            click.echo(f"{report_name.ljust(width)}  {description}")
        click.echo(f"{ALL.ljust(width)}  Every report above, in order")
        return
    from ngb.sweeps.store.database import Store

    if figure_dir is not None and name != "ops":
        from ngb.core.base.errors import ConfigError

        raise ConfigError("--figure applies to `ngb report ops` only")
    if model is not None and name != "ops":
        from ngb.core.base.errors import ConfigError

        raise ConfigError("--model applies to `ngb report ops` only")
    asked = [c.strip() for c in compilers.split(",") if c.strip()] if compilers else None
    if compilers is not None and (name != "ops" or not asked):
        from ngb.core.base.errors import ConfigError

        raise ConfigError("--compilers applies to `ngb report ops` only and names compilers")
    store = Store(db, busy_timeout_s=wait)
    whole = fmt == "html" and name in (None, ALL)
    if (family is not None or precision is not None) and not whole:
        from ngb.core.base.errors import ConfigError

        raise ConfigError("--family and --precision apply to the html whole-run report only")
    if whole:
        from ngb.sweeps.figures.data import FigureData
        from ngb.sweeps.figures.html_report import run_report

        data = FigureData(store, run_id=run_id, device=device, family=family, precision=precision)
        emit_text(run_report(data, figures=not no_figures), output)
        return
    if figure_dir is not None:  # the per-operator figures (ngb.sweeps.figures.ops)
        _ops_figures(store, figure_dir, run_id, device, model)
    names = [n for n, _ in reports.list_reports()] if name == ALL else [str(name)]
    # table, Markdown and CSV are written a row at a time: a report of every point never whole
    # in memory (``render_to``), where there are enough points to pay for it; LaTeX and HTML lay
    # a table out whole
    streaming = fmt in ("table", "markdown", "csv") and reports.worth_streaming(
        names, store, run_id=run_id, device=device
    )
    built = [
        reports.build_report(
            n,
            store,
            run_id=run_id,
            device=device,
            streaming=streaming,
            model=model,
            compilers=asked,
        )
        for n in names
    ]
    if fmt == "html":
        from ngb.sweeps.figures.html_report import single_report_page

        emit_text(single_report_page(built[0]), output, store.path)
        return
    from ngb.sweeps.report.render import render_to

    def write_all(write: Callable[[str], object]) -> None:
        for index, one in enumerate(built):
            if index:
                write("\n")
            render_to(one, write, fmt)

    emit_text(write_all, output, store.path)


def _ops_figures(
    store: Store, out_dir: str, run_id: str | None, device: str | None, model: str | None
) -> None:
    from pathlib import Path

    from ngb.core.base.errors import NgbError
    from ngb.sweeps.cli.figures import check_out_dir
    from ngb.sweeps.figures.ops import write_figures

    check_out_dir(out_dir)
    try:
        written = write_figures(store, Path(out_dir), run_id=run_id, device=device, model=model)
    except OSError as exc:
        raise NgbError(f"cannot write figures to {out_dir}: {exc.strerror or exc}") from None
    click.echo(f"figures: {len(written)} file(s) in {out_dir}", err=True)
