"""``ngb import STORE``: merge another results file's runs into this one (ids kept; see
``ngb.sweeps.store.merge`` for what happens to a run id both files hold)."""

from __future__ import annotations

from pathlib import Path

import click
from ngb.sweeps.cli.options import results_db_options


@click.command("import")
@click.argument("source", type=click.Path(dir_okay=False))
@results_db_options
def import_(source: str, db: str | None, wait: float) -> None:
    """Merge the runs of results file SOURCE into this store (STORE is not changed)."""
    from ngb.sweeps.store.database import Store
    from ngb.sweeps.store.merge import import_store

    summary = import_store(Store(db, write_timeout_s=max(wait, 30.0)), Path(source))
    click.echo(summary.text())
