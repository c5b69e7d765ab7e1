"""Click options and value types shared by the commands."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import click
from ngb.core.base.errors import ConfigError
from ngb.sweeps.rows import JsonValue

F = TypeVar("F", bound=Callable[..., object])


class FiniteFloat(click.FloatRange):
    """A float option that refuses NaN and the infinities (``--wait nan`` waited forever: NaN
    passes every range comparison), with an optional range as ``click.FloatRange`` has.

    Every float option of the CLI uses it (``tests/test_cli_options.py`` checks).
    """

    name = "number"

    def convert(
        self, value: float | str, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a valid float.", param, ctx)  # click's own words
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return float(super().convert(number, param, ctx))  # the range


#: any finite float (the command checks its own range)
FINITE = FiniteFloat()
#: a finite float >= 0
NON_NEGATIVE = FiniteFloat(min=0)
#: a finite float > 0 (time limits)
POSITIVE = FiniteFloat(min=0, min_open=True)


def parse_option(text: str) -> tuple[str, JsonValue]:
    """``key=value`` -> (key, value); the value is read as JSON when it parses (``3``, ``true``,
    ``0.5``, ``[1,2]``), else kept as a string (``hint=throughput``)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--option wants key=value, got {text!r}")
    try:
        return key, json.loads(raw)
    except ValueError:
        return key, raw


def results_db_options(fn: F) -> F:
    """``--db`` and ``--wait``: which results file, and how long to wait while another has it."""
    fn = click.option(
        "--wait",
        type=NON_NEGATIVE,
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


def emit_text(
    text: str | Callable[[Callable[[str], object]], None],
    output: str | None,
    reading: Path | None = None,
) -> None:
    """Print ``text``, or write it atomically to ``output`` -- never over ngb's own files, nor
    over ``reading`` (the results file a command reads: ``--db`` may name any path). One door
    for ``ngb report -o``, ``ngb compare -o`` and ``ngb history -o``. ``text`` may be a callable
    that writes its text in pieces to the ``write`` it is given (a report of every point,
    streamed: never whole in memory)."""
    if output is None:
        if callable(text):
            pending: list[str] = []

            def write(piece: str) -> None:  # echoed in runs of pieces: a call per row is slow
                pending.append(piece)
                if len(pending) >= 512 or len(piece) > 1 << 16:
                    click.echo("".join(pending), nl=False)
                    pending.clear()

            text(write)
            click.echo("".join(pending), nl=False)
        else:
            click.echo(text, nl=False)
        return
    from ngb.core.base.safe_files import refuse_protected, write_atomic
    from ngb.devices.paths import get_paths

    protected: dict[str, Path] = dict(get_paths().own_files())
    if reading is not None:
        protected["results database being read"] = reading
    refuse_protected(output, protected)
    if callable(text):
        produce = text

        def writer(tmp: Path) -> None:
            with open(tmp, "w", encoding="utf-8") as out:
                produce(out.write)

        write_atomic(output, writer, what="report")
    else:
        write_atomic(output, text, what="report")
    click.echo(f"wrote {output}", err=True)
