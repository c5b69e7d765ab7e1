"""``ngb recover``: open a store that DuckDB refuses because of its log (``store.recover``)."""

from __future__ import annotations

import click
from ngb.sweeps.cli.options import results_db_options


@click.command("recover")
@results_db_options
def recover(db: str | None, wait: float) -> None:
    """Open a results file whose write-ahead log DuckDB refuses, keeping the log aside.

    Every commit up to the file's last checkpoint stays; the refused log is renamed
    <store>.wal.refused-<time> beside it, never deleted. A store that opens is left alone."""
    from ngb.sweeps.store.database import Store
    from ngb.sweeps.store.recover import recover as recover_store

    del wait  # nothing waits: a store with a refused log is held by no one
    click.echo(recover_store(Store(db).path).text())
