"""``ngb advise``: what to deploy on a device (or each device of a group), from the store.

The ranking, ties and constraints are ``ngb.sweeps.report.advise``'s; this module only parses
options (``--max-drop``'s text: ``advise.parse_drop``).
"""

from __future__ import annotations

import click
from ngb.sweeps.cli.options import NON_NEGATIVE, results_db_options


class DropBound(click.ParamType):
    """``--max-drop``: percentage points of top-1 (``1``, ``1%``, ``0.5%``), refused in one line
    (NaN, the infinities, a sign, beyond 100, other text)."""

    name = "points"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        from ngb.core.base.errors import ConfigError
        from ngb.sweeps.report.advise import parse_drop

        try:
            return parse_drop(value if isinstance(value, str | float) else str(value))
        except ConfigError as exc:
            # after click's "Invalid value for '--max-drop':", without the name again
            self.fail(str(exc).removeprefix("max-drop "), param, ctx)


@click.command("advise")
@click.argument("model", required=False)
@click.option("--sweep", "sweep_run", default=None, help="Every model of this run (a run id).")
@click.option("--device", default=None, help="The device to deploy on.")
@click.option("--group", default=None, help="Each device of this inventory group.")
@click.option("--p99-ms", type=NON_NEGATIVE, help="p99 latency per call at most (ms).")
@click.option("--max-err", type=NON_NEGATIVE, help="Max abs error against eager at most.")
@click.option("--max-mem-mb", type=NON_NEGATIVE, help="Peak memory at most (MB).")
@click.option(
    "--max-drop", type=DropBound(),
    help="Top-1 accuracy drop at most, in percentage points (1, 1% or 0.5%): a row beyond it, "
    "or with no accuracy measured, is refused.",
)  # fmt: skip
@click.option(
    "--objective", type=click.Choice(("throughput", "energy", "cost")), default="throughput",
    show_default=True, help="What to maximise (throughput) or minimise (energy, cost).",
)  # fmt: skip
@results_db_options
def advise(
    model: str | None, sweep_run: str | None, device: str | None, group: str | None,
    p99_ms: float | None, max_err: float | None, max_mem_mb: float | None,
    max_drop: float | None, objective: str, db: str | None, wait: float,
) -> None:  # fmt: skip
    """The configuration to deploy for MODEL (or --sweep RUN's models) on --device or --group."""
    from ngb.core.base.errors import ConfigError
    from ngb.sweeps.report import advise as advice
    from ngb.sweeps.report.data import ReportData
    from ngb.sweeps.store.database import Store

    if (model is None) == (sweep_run is None):
        raise ConfigError("give a MODEL or --sweep RUN (one of them)")
    if (device is None) == (group is None):
        raise ConfigError("give --device NAME or --group NAME (one of them)")
    limits = advice.Constraints(p99_ms, max_err, max_mem_mb, objective, max_drop)
    members: list[str] = []
    slurm = False  # a member whose results are stored under its nodes
    if group is not None:
        from ngb.devices.inventory import load_inventory

        inventory = load_inventory()
        if group not in inventory.group_names():
            from ngb.core.base.errors import UnknownNameError

            raise UnknownNameError("group", group, inventory.group_names())
        members = [d.name for d in inventory.group_members(group)]
        slurm = any(d.transport == "slurm" for d in inventory.group_members(group))
    store = Store(db, busy_timeout_s=wait)
    data = ReportData(store, run_id=sweep_run)
    devices = [str(device)]
    if group is not None:  # a Slurm member's results are stored under its nodes (gpu07@a100)
        devices = data.devices_under(members) if slurm else members
    known_devices = data.devices()  # no trial read: advise reads one model and device at once
    if device is not None and device not in known_devices:
        from ngb.core.base.errors import NgbError, UnknownNameError

        # a device whose every trial failed is known, with nothing to rank: say that
        _, counted = store.select("SELECT count(*) FROM trials WHERE device = ?", [device])
        failed = int(counted[0][0]) if counted else 0
        if failed:
            raise NgbError(
                f"no successful results on {device}: its {failed} stored trial"
                f"{'s' if failed != 1 else ''} failed (their errors: the failures view, "
                "through ngb query)"
            )
        raise UnknownNameError("device with results", device, known_devices)
    models = [str(model)] if model is not None else advice.models_in_scope(data)
    click.echo(advice.render(advice.advise(data, models, devices, limits), limits, data), nl=False)
