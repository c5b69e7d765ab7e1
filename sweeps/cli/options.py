"""Click options shared by the commands that read the results file."""

from __future__ import annotations

from typing import Any

import click


def results_db_options(fn: Any) -> Any:
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
