"""The headless ``ngb`` command.

Subcommands live in their own modules and are imported only when invoked (``LazyGroup``),
so ``ngb --help`` imports neither torch nor duckdb nor asyncssh.

Bad input gets one line on stderr and exit status 1, always ``error: ...`` (``OneLineError``;
click's own ``Error:`` is not used): ``NgbError``, click's usage errors (a mistyped option would
otherwise print usage, a hint and the error on several lines) and ``OSError`` (an unwritable or
missing path is the operator's environment, not a bug). Control characters in the line are escaped
so a hostile name cannot drive the terminal, and any word longer than 120 characters is shortened
(a 10,000-character name echoed in full buries the message). Anything else is a bug and keeps its
traceback. A closed stdout (``ngb report | head``) ends the command quietly.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import IO

import click
from ngb.core.base.errors import NgbError, one_line
from ngb.core.base.safe_files import MAX_SHOWN, shorten
from ngb.core.base.scratch import sweep_once

# command name -> (module, attribute, one-line help shown by `ngb --help` without importing it)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "measure": ("ngb.sweeps.cli.measure", "measure", "Measure one trial on this machine."),
    "models": ("ngb.sweeps.cli.models", "models", "List the paper's models and blocks."),
    "compilers": (
        "ngb.sweeps.cli.measure",
        "compilers",
        "List compilers and whether they run here.",
    ),
    "devices": ("ngb.sweeps.cli.devices", "devices", "Manage the device inventory."),
    "paths": ("ngb.sweeps.cli.devices", "paths", "Print where config, data and cache live."),
    "run": ("ngb.sweeps.cli.runs", "run", "Run a sweep on devices."),
    "attach": ("ngb.sweeps.cli.runs", "attach", "Re-attach to a run still going on devices."),
    "status": ("ngb.sweeps.cli.runs", "status", "Show runs and their progress."),
    "cancel": ("ngb.sweeps.cli.runs", "cancel", "Cancel a run on its devices."),
    "sweeps": (
        "ngb.sweeps.cli.sweeps_list",
        "sweeps",
        "List sweep presets or validate a sweep file.",
    ),
    "query": ("ngb.sweeps.cli.query", "query", "Run read-only SQL over the results."),
    "export": ("ngb.sweeps.cli.export", "export", "Export results as Parquet or CSV."),
    "report": ("ngb.sweeps.cli.report", "report", "Regenerate a paper table from the results."),
    "advise": ("ngb.sweeps.cli.advise", "advise", "What to deploy on a device, from the results."),
    "figures": ("ngb.sweeps.cli.figures", "figures", "Write the paper's figures (PNG/SVG/PDF)."),
    "bench": ("ngb.sweeps.cli.bench", "bench", "Run ngb's own benchmarks and print figures."),
    "compare": (
        "ngb.sweeps.cli.compare",
        "compare",
        "Compare two runs point by point; --fail-above gates on slowdowns.",
    ),
    "history": (
        "ngb.sweeps.cli.history",
        "history",
        "A point's results over every run, with change points.",
    ),
    "import": ("ngb.sweeps.cli.store_import", "import_", "Merge another results file's runs."),
    "recover": (
        "ngb.sweeps.cli.recover",
        "recover",
        "Open a results file whose log DuckDB refuses (the log kept aside).",
    ),
    "profile": (
        "ngb.sweeps.cli.profile",
        "profile",
        "Where a model's time goes per operator, compilers side by side.",
    ),
    "serve": (
        "ngb.sweeps.cli.serve",
        "serve",
        "A model under load: p99 from the scheduled time; --find-peak.",
    ),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module, attr, _ = entry
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            # A command whose module is missing (e.g. an extra not installed) still shows in help.
            reason = str(exc)  # `exc` itself is unbound once the except block ends

            @click.command(cmd_name, help=entry[2])
            def _unavailable() -> None:
                raise OneLineError(f"'ngb {cmd_name}' is unavailable here: {reason}")

            return _unavailable

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: object,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:  # e.g. `ngb --bogus`
            raise _usage_line(exc) from None

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise _usage_line(exc) from None
        except OneLineError:
            raise
        except click.ClickException as exc:
            raise OneLineError(exc.format_message()) from None
        except BrokenPipeError:
            raise  # the reader went away (`| head`): main() ends quietly
        except _environment_errors() as exc:
            raise OneLineError(one_line(exc)) from None


class OneLineError(click.ClickException):
    """The CLI's one error format: ``error: <message>`` on one line of stderr, exit status 1.

    The message is made safe (control characters escaped, long words shortened) once, here.
    """

    def __init__(self, message: str) -> None:
        super().__init__(short_words(safe_text(" ".join(message.split()))))

    def show(self, file: IO[str] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", file=file or sys.stderr)


def short_words(text: str, limit: int = MAX_SHOWN) -> str:
    """``text`` with every word longer than ``limit`` characters shortened with an ellipsis."""
    if len(text) <= limit:
        return text
    return " ".join(shorten(word, limit) for word in text.split(" "))


def _environment_errors() -> tuple[type[BaseException], ...]:
    """What the operator's files and machine cause, as opposed to bugs: our own NgbError, OSError
    (unwritable or missing paths) and DuckDB's I/O errors (a damaged or unreadable results file).
    DuckDB is looked up only if a command imported it (``ngb --help`` must not)."""
    errors: list[type[BaseException]] = [NgbError, OSError]
    duckdb = sys.modules.get("duckdb")
    if duckdb is not None:
        errors.append(duckdb.IOException)
    return tuple(errors)


def safe_text(text: str) -> str:
    """``text`` with control characters (escape sequences, newlines, NUL...) shown escaped.

    For anything printed that came from files or the command line: notes, names, error lines.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def _usage_line(exc: click.UsageError) -> OneLineError:
    """A usage error as one line with the help hint, instead of usage + hint + error."""
    where = exc.ctx.command_path if exc.ctx is not None else "ngb"
    return OneLineError(f"{exc.format_message()} (see '{where} --help')")


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ngb")
def cli() -> None:
    """ngb: benchmark neural graph compilers across an edge-cloud testbed."""


def main(argv: list[str] | None = None) -> int:
    sweep_once()  # what killed ngb processes left in the temp dir (ngb.core.base.scratch)
    try:
        cli.main(args=argv, prog_name="ngb", standalone_mode=True)
        sys.stdout.flush()
    except SystemExit as exc:
        return int(exc.code or 0)
    except BrokenPipeError:
        return _closed_stdout()
    return 0


def _closed_stdout() -> int:
    """The reader of stdout went away (``ngb report | head``): no traceback, no "Exception
    ignored" at exit (stdout now points at /dev/null so the interpreter's final flush succeeds);
    status 1, as click gives when a write inside the command meets the closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return 1


if __name__ == "__main__":
    sys.exit(main())
