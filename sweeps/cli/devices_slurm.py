"""``ngb devices add-slurm``: a Slurm partition as a device of the inventory.

The entry's ``host`` says how the scheduler is reached: ``localhost`` (this workstation is a
login node) or the name of an SSH device of the inventory (the cluster's login host). Each of the
``--nodes`` wanted becomes one device of a run (``NAME`` for one, ``NAME.1``... for more), whose
agent runs in a Slurm job of its own (``ngb.devices.slurm``).
"""

from __future__ import annotations

import click
from ngb.devices.inventory import LOCALHOST, Device, load_inventory
from ngb.devices.slurm import SlurmTable


@click.command("add-slurm")
@click.argument("name")
@click.option("--partition", required=True, help="The Slurm partition (-p).")
@click.option(
    "--login", default=LOCALHOST, show_default=True,
    help="Where sbatch/srun run: localhost, or an SSH device of the inventory (the login host).",
)  # fmt: skip
@click.option(
    "--nodes", type=int, default=1, show_default=True, help="Nodes wanted (one job each)."
)
@click.option("--gres", default=None, help="Generic resources per node, e.g. gpu:1 (--gres).")
@click.option("--constraint", default=None, help="Node features, e.g. a100 (--constraint).")
@click.option("--account", default=None, help="Account to charge (--account).")
@click.option("--qos", default=None, help="Quality of service (--qos).")
@click.option("--time", "time_limit", default=None, help="Time limit per job, e.g. 02:00:00.")
@click.option("--cpus-per-task", type=int, default=None, help="CPUs for the agent's task.")
@click.option("--mem", default=None, help="Memory per node, e.g. 64G (--mem).")
@click.option(
    "--shared", is_flag=True,
    help="Do not ask for whole nodes (timings are then flagged as taken on a shared node).",
)  # fmt: skip
@click.option("--python", "python", default="python3", show_default=True, help="On the nodes.")
@click.option(
    "--workdir", default="~/.ngb", show_default=True,
    help="On a file system the login host and the nodes share.",
)  # fmt: skip
@click.option("--group", "groups", multiple=True, help="Group (repeatable).")
@click.option("--notes", default="")
def add_slurm(
    name: str,
    partition: str,
    login: str,
    nodes: int,
    gres: str | None,
    constraint: str | None,
    account: str | None,
    qos: str | None,
    time_limit: str | None,
    cpus_per_task: int | None,
    mem: str | None,
    shared: bool,
    python: str,
    workdir: str,
    groups: tuple[str, ...],
    notes: str,
) -> None:
    """Add a Slurm partition to the inventory as a device (one per node wanted)."""
    table: SlurmTable = {"partition": partition}
    for key, value in (("gres", gres), ("constraint", constraint), ("account", account),
                       ("qos", qos), ("time_limit", time_limit), ("mem", mem)):  # fmt: skip
        if value is not None:
            table[key] = value
    if nodes != 1:
        table["nodes"] = nodes
    if cpus_per_task is not None:
        table["cpus_per_task"] = cpus_per_task
    if shared:
        table["exclusive"] = False
    inv = load_inventory()
    dev = Device(name=name, host=login, transport="slurm", slurm=table, python=python,
                 workdir=workdir, groups=list(groups), notes=notes)  # fmt: skip
    inv.add(dev)  # checks the table and the login host (one line on error)
    path = inv.save()
    where = "this workstation" if login == LOCALHOST else f"login host {login}"
    click.echo(f"added {name} (Slurm partition {partition} via {where}) to {path}")
    click.echo(f"next: `ngb devices probe {name}` probes a node of the partition through srun")
