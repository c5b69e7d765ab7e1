"""``ngb sweeps``: list the sweep presets, show one, or validate a sweep file."""

from __future__ import annotations

import click


@click.group("sweeps", invoke_without_command=True)
@click.pass_context
def sweeps(ctx: click.Context) -> None:
    """List sweep presets, show one, or validate a sweep file."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_cmd)


@sweeps.command("list")
def list_cmd() -> None:
    """Presets shipped with ngb, with their trial counts."""
    from ngb.sweeps.spec.sweep import list_presets, load_sweep

    for name in list_presets():
        sweep = load_sweep(name)
        n = len(sweep.trials())
        click.echo(f"{name:<16} {n:>5} trials  {sweep.description}")


@sweeps.command("show")
@click.argument("name")
@click.option("--trials", "show_trials", is_flag=True, help="List every trial too.")
def show(name: str, show_trials: bool) -> None:
    """Print a preset (or file) as TOML, with its trial count."""
    from ngb.sweeps.spec.sweep import load_sweep

    sweep = load_sweep(name)
    trials = sweep.trials()
    click.echo(sweep.to_toml().rstrip())
    click.echo(f"\n# {len(trials)} trials")
    if show_trials:
        for spec in trials:
            click.echo(f"#   {spec.key}  {spec.label}")


@sweeps.command("check")
@click.argument("file")
@click.option(
    "--no-models",
    is_flag=True,
    help="Skip checking timm names, importing [[models]] factories and reading [accuracy] data "
    "(imports timm, your code).",
)
def check(file: str, no_models: bool) -> None:
    """Validate a sweep file (or preset) and print its number of trials."""
    from ngb.sweeps.spec.sweep import load_sweep

    sweep = load_sweep(file)
    n = len(sweep.trials())
    reads_data = any(t.measure.accuracy for t in sweep.trials())
    if not no_models and (sweep.models() or sweep.model_sources or reads_data):
        sweep.check_models()  # timm names exist, [[models]] factories import, [accuracy] reads
    click.echo(f"ok: {sweep.name}: {n} trials")
