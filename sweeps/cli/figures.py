"""``ngb figures [NAME...]``: the paper's figures from the results database as image files."""

from __future__ import annotations

import click
from ngb.sweeps.cli.options import results_db_options


@click.command("figures")
@click.argument("names", nargs=-1)
@click.option("--list", "list_only", is_flag=True, help="List the figures and exit.")
@click.option(
    "-o", "--out", "out_dir", type=click.Path(file_okay=False), default="figures",
    show_default=True, help="Directory to write NAME.png/.svg/.pdf and NAME.caption.txt into.",
)  # fmt: skip
@click.option(
    "--format", "formats", default="png,svg,pdf", show_default=True,
    help="Comma-separated image formats: png, svg, pdf.",
)  # fmt: skip
@click.option("--run", "run_id", default=None, help="Only this run (default: newest per point).")
@click.option("--device", default=None, help="Only this testbed device.")
@click.option(
    "--family", default=None,
    help="Only this model family (resnet, deit, block ...) or block kind (conv, mha).",
)  # fmt: skip
@click.option(
    "--precision", default=None, help="Only results at this precision (stores that record it)."
)
@results_db_options
def figures(
    names: tuple[str, ...], list_only: bool, out_dir: str, formats: str, run_id: str | None,
    device: str | None, family: str | None, precision: str | None, db: str | None, wait: float,
) -> None:  # fmt: skip
    """Write figures NAME... (default: all; `fig05` is short for `fig05-throughput`)."""
    from ngb.sweeps.figures import catalog as figs

    if list_only:
        width = max(len(n) for n, _ in figs.list_figures())
        for name, description in figs.list_figures():
            click.echo(f"{name.ljust(width)}  {description}")
        return
    wanted = figs.resolve(names)  # bad names and formats fail before the database is opened
    chosen = figs.check_formats([f.strip() for f in formats.split(",") if f.strip()])
    from ngb.core.base.errors import NgbError

    check_out_dir(out_dir)
    from ngb.sweeps.figures.data import FigureData
    from ngb.sweeps.store.database import Store

    data = FigureData(
        Store(db, busy_timeout_s=wait), run_id=run_id, device=device, family=family,
        precision=precision,
    )  # fmt: skip
    try:
        written = figs.write_figures(data, out_dir, wanted, chosen)
    except OSError as exc:
        raise NgbError(f"cannot write figures to {out_dir}: {exc.strerror or exc}") from None
    drawn = 0
    for item in written:
        if item.skipped:
            click.echo(f"skip {item.name}: {item.skipped}", err=True)
            continue
        drawn += 1
        click.echo(f"{item.name}: " + ", ".join(str(p) for p in item.paths))
    if not drawn:
        raise NgbError("no figure had data to draw (see the reasons above)")


def check_out_dir(out_dir: str) -> None:
    """Refuse a ``-o`` that is not a folder (or a place for one) in words: a FIFO, a device or a
    dangling link gave "File exists" from ``mkdir``."""
    import os
    import stat

    from ngb.core.base.errors import NgbError
    from ngb.core.base.safe_files import kind_name, shorten

    shown = shorten(out_dir)
    try:
        link = os.lstat(out_dir)
    except FileNotFoundError:
        return  # made when the figures are written
    except OSError as exc:
        raise NgbError(f"cannot write figures to {shown}: {exc.strerror or exc}") from None
    try:
        mode = os.stat(out_dir).st_mode
    except OSError:
        if stat.S_ISLNK(link.st_mode):
            target = shorten(os.readlink(out_dir))
            raise NgbError(
                f"cannot write figures to {shown}: it is a link to {target}, which does not exist"
            ) from None
        raise
    if not stat.S_ISDIR(mode):
        raise NgbError(f"cannot write figures to {shown}: it is a {kind_name(mode)}, not a folder")
