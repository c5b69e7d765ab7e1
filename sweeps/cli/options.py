"""Click options shared by the commands that read the results file."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

F = TypeVar("F", bound=Callable[..., object])


def results_db_options(fn: F) -> F:
    """``--db`` and ``--wait``: which results file, and how long to wait while another has it."""
    fn = click.option(
        "--wait",
        type=click.FloatRange(min=0),
        default=5.0,
        show_default=True,
        help="Seconds to wait while another ngb process is writing the results file.",
    )(fn)
    return click.option(
        "--db",
        type=click.Path(dir_okay=False),
        default=None,
        help="Results file (default: the data dir's results.duckdb, or $NGB_DB).",
    )(fn)
