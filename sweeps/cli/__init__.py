"""The headless ``ngb`` command.

Subcommands live in their own modules and are imported only when invoked (``LazyGroup``),
so ``ngb --help`` imports neither torch nor duckdb nor asyncssh. ``NgbError`` becomes a one-line
``Error: ...`` on stderr and exit status 1 (click's convention); anything else is a bug and keeps
its traceback.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click
from ngb.core.errors import NgbError

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
    "sweeps": ("ngb.sweeps.cli.data", "sweeps", "List sweep presets or validate a sweep file."),
    "query": ("ngb.sweeps.cli.data", "query", "Run read-only SQL over the results."),
    "export": ("ngb.sweeps.cli.data", "export", "Export results as Parquet or CSV."),
    "report": ("ngb.sweeps.cli.report", "report", "Regenerate a paper table from the results."),
    "figures": ("ngb.sweeps.cli.figures", "figures", "Write the paper's figures (PNG/SVG/PDF)."),
    "bench": ("ngb.sweeps.cli.bench", "bench", "Run ngb's own benchmarks and print figures."),
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
                raise click.ClickException(f"'ngb {cmd_name}' is unavailable here: {reason}")

            return _unavailable

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except NgbError as exc:
            raise click.ClickException(str(exc)) from None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ngb")
def cli() -> None:
    """ngb: benchmark neural graph compilers across an edge-cloud testbed."""


def main(argv: list[str] | None = None) -> int:
    try:
        cli.main(args=argv, prog_name="ngb", standalone_mode=True)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
