"""``ngb paths`` and ``ngb devices ...``: the inventory, host-key trust and probing.

Every edit loads and validates the inventory first, so a malformed file is reported (one line) and
never overwritten; saves are atomic. ``probe`` talks to all devices concurrently: one failing
device prints its one-line error while the others still report, and the exit status says whether
any failed.
Probe answers go into the DuckDB store when ``ngb.sweeps.store.database`` is importable.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import click
from ngb.core.base.errors import NgbError, first_line
from ngb.devices.ansible import import_ansible
from ngb.devices.inventory import (
    Device,
    Inventory,
    load_inventory,
    merge_devices,
    with_changes,
)
from ngb.devices.paths import get_paths
from ngb.devices.transport import TransportError
from ngb.sweeps.cli import safe_text
from ngb.sweeps.cli.options import POSITIVE
from ngb.sweeps.rows import StoreRow, mapping

if TYPE_CHECKING:
    import asyncssh
    from ngb.sweeps.store.database import Store


def _render(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return [line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def _address(dev: Device) -> str:
    if dev.transport == "slurm" and dev.slurm:
        return f"slurm:{dev.slurm.get('partition')} via {dev.host}"
    if dev.is_local:
        return "(local)"
    user = f"{dev.user}@" if dev.user else ""
    port = f":{dev.port}" if dev.port != 22 else ""
    return f"{user}{dev.host}{port}"


def _store() -> Store | None:
    """The results store, or None when it is not importable here (or has no file yet)."""
    try:
        from ngb.sweeps.store.database import Store
    except ImportError:
        return None
    return Store()


def _last_probes() -> dict[str, StoreRow]:
    if not get_paths().database.exists():
        return {}
    store = _store()
    if store is None:
        return {}
    try:
        rows = store.probes()
    except Exception:  # noqa: BLE001 - a busy or foreign file must not break `devices list`
        return {}
    return {str(row["device"]): row for row in rows}  # ordered by time: the last one wins


@click.command("paths")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def paths(as_json: bool) -> None:
    """Print where config, data and cache live."""
    p = get_paths()
    rows = {
        "config": p.config,
        "data": p.data,
        "cache": p.cache,
        "inventory": p.inventory,
        "known_hosts": p.known_hosts,
        "database": p.database,
        "runs": p.runs,
    }
    if as_json:
        click.echo(json.dumps({k: str(v) for k, v in rows.items()}, indent=2))
        return
    for key, value in rows.items():
        click.echo(f"{key:<12} {value}")


@click.group("devices")
def devices() -> None:
    """Manage the device inventory (devices.toml) and probe devices."""


@devices.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def list_devices(as_json: bool) -> None:
    """List devices with their groups and last probe."""
    inv = load_inventory()
    probes = _last_probes()
    if as_json:
        out = []
        for dev in inv:
            item = dev.to_dict()
            item["all_groups"] = inv.groups_of(dev.name)
            probe = probes.get(dev.name)
            item["last_probe"] = str(probe["probed_at"]) if probe else None
            out.append(item)
        click.echo(json.dumps(out, indent=2, default=str))
        return
    rows = []
    for dev in inv:
        probe = probes.get(dev.name)
        last = "-"
        if probe:
            stamp = str(probe.get("probed_at", ""))[:19]
            last = f"{stamp} {probe.get('cpu_model') or ''}".strip()
        rows.append(
            [dev.name, _address(dev), ",".join(inv.groups_of(dev.name)) or "-", dev.python, last]
        )
    for line in _render(["NAME", "ADDRESS", "GROUPS", "PYTHON", "LAST PROBE"], rows):
        click.echo(safe_text(line))  # values from a hand-edited file must not drive the terminal


@devices.command("add")
@click.argument("name")
@click.option("--host", required=True, help="Host name, IP address or ~/.ssh/config alias.")
@click.option("--port", type=int, default=22, show_default=True)
@click.option("--user", default=None, help="Login user (default: ~/.ssh/config or yours).")
@click.option("--identity", default=None, help="Private key file (default: ssh-agent/config).")
@click.option("--jump", default=None, help="Jump host: a device name or [user@]host[:port].")
@click.option("--python", "python", default="python3", show_default=True)
@click.option("--workdir", default="~/.ngb", show_default=True)
@click.option("--group", "groups", multiple=True, help="Group (repeatable).")
@click.option("--tag", "tags", multiple=True, help="Tag (repeatable).")
@click.option("--notes", default="")
@click.option("--local", "local", is_flag=True, help="Reach it without SSH (this machine).")
def add(
    name: str,
    host: str,
    port: int,
    user: str | None,
    identity: str | None,
    jump: str | None,
    python: str,
    workdir: str,
    groups: tuple[str, ...],
    tags: tuple[str, ...],
    notes: str,
    local: bool,
) -> None:
    """Add a device to the inventory."""
    inv = load_inventory()
    dev = Device(
        name=name,
        host=host,
        port=port,
        user=user,
        identity_file=identity,
        jump_host=jump,
        python=python,
        workdir=workdir,
        groups=list(groups),
        tags=list(tags),
        notes=notes,
        transport="local" if local else "ssh",
    )
    inv.add(dev)
    path = inv.save()
    click.echo(f"added {name} ({_address(dev)}) to {path}")
    if not local:
        click.echo(f"next: `ngb devices trust {name}` to check and accept its host key")


@devices.command("edit")
@click.argument("name")
@click.option("--host", default=None, help="Host name, IP address or ~/.ssh/config alias.")
@click.option("--port", type=int, default=None)
@click.option("--user", default=None, help="Login user.")
@click.option("--identity", default=None, help="Private key file.")
@click.option("--jump", default=None, help="Jump host: a device name or [user@]host[:port].")
@click.option("--python", "python", default=None, help="Interpreter on the device.")
@click.option("--workdir", default=None)
@click.option("--group", "groups", multiple=True, help="Group (repeatable; replaces the list).")
@click.option("--tag", "tags", multiple=True, help="Tag (repeatable; replaces the list).")
@click.option("--notes", default=None)
def edit(
    name: str,
    host: str | None,
    port: int | None,
    user: str | None,
    identity: str | None,
    jump: str | None,
    python: str | None,
    workdir: str | None,
    groups: tuple[str, ...],
    tags: tuple[str, ...],
    notes: str | None,
) -> None:
    """Change some settings of a device; the rest of the file (comments too) stays as it is."""
    inv = load_inventory()
    old = inv.get(name)
    changes = {
        "host": host, "port": port, "user": user, "identity_file": identity, "jump_host": jump,
        "python": python, "workdir": workdir, "groups": list(groups) or None,
        "tags": list(tags) or None, "notes": notes,
    }  # fmt: skip
    if all(v is None for v in changes.values()):
        raise NgbError(f"nothing to change for {name}: give at least one option (see --help)")
    inv.add(with_changes(old, **changes), replace_existing=True)  # validated before saving
    path = inv.save()
    click.echo(f"edited {name} ({_address(inv.get(name))}) in {path}")


@devices.command("remove")
@click.argument("name")
def remove(name: str) -> None:
    """Remove a device from the inventory."""
    inv = load_inventory()
    inv.remove(name)
    path = inv.save()
    click.echo(f"removed {name} from {path}")


@devices.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def show(name: str, as_json: bool) -> None:
    """Show one device's settings."""
    inv = load_inventory()
    dev = inv.get(name)
    data = dev.to_dict()
    data["all_groups"] = inv.groups_of(name)
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    for key, value in data.items():
        if isinstance(value, list):
            value = ", ".join(value) or "-"
        # notes are free text from a hand-edited file: escape sequences are shown, not obeyed
        click.echo(safe_text(f"{key:<14} {'-' if value in (None, '') else value}"))


@devices.command("check")
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
def check(file: Path | None) -> None:
    """Validate the inventory file (or FILE)."""
    target = file or get_paths().inventory
    if file is not None and not file.exists():
        raise NgbError(f"{file}: no such file")
    inv = load_inventory(target)
    from ngb.devices.device_checks import first_problem

    for dev in inv:  # what probe and run would refuse, refused now with the same words
        problem = first_problem(dev)
        if problem is not None:
            raise NgbError(f"{target}: device {dev.name!r}: {problem}")
    where = target if target.exists() else f"{target} (absent: only the built-in localhost)"
    n_groups = len([g for g in inv.group_names() if g != "all"])
    click.echo(f"ok: {where}: {len(inv)} devices, {n_groups} groups")


@devices.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--dry-run", is_flag=True, help="Show what would change; write nothing.")
@click.option("--replace", is_flag=True, help="Overwrite devices that already exist.")
def import_(file: Path, dry_run: bool, replace: bool) -> None:
    """Import an Ansible inventory (YAML or INI)."""
    inv = load_inventory()
    imported = import_ansible(file)
    report = merge_devices(inv, imported, replace_existing=replace)
    for dev in imported:
        state = next(k for k, names in report.items() if dev.name in names)
        groups = ",".join(dev.groups) or "-"
        click.echo(f"{state:<9} {dev.name:<20} {_address(dev):<28} groups={groups}")
    summary = ", ".join(f"{len(v)} {k}" for k, v in report.items())
    if dry_run:
        click.echo(f"dry run: {summary}; nothing written")
        return
    path = inv.save()
    click.echo(f"{summary}; saved {path}")


# -- trust --------------------------------------------------------------------------------------


async def _fetch(inv: Inventory, dev: Device) -> tuple[str, str, asyncssh.SSHKey]:
    from ngb.devices.hostkeys import fetch_host_key
    from ngb.devices.ssh import SshTransport

    via = SshTransport(dev, inventory=inv)
    jump = await via.open_jump()
    try:
        return await fetch_host_key(dev, tunnel=jump.connection if jump else None)
    finally:
        if jump is not None:
            await jump.close()


@devices.command("trust")
@click.argument("name")
@click.option("--yes", "-y", is_flag=True, help="Accept without asking (scripts).")
@click.option("--hashed", is_flag=True, help="Write a hashed known_hosts entry.")
def trust(name: str, yes: bool, hashed: bool) -> None:
    """Show a device's host key fingerprint and, once confirmed, trust it."""
    from ngb.devices import hostkeys

    inv = load_inventory()
    dev = inv.get(name)
    if dev.is_local:
        raise NgbError(f"{name} is reached without SSH; there is no host key to trust")
    try:
        key_type, fingerprint, key = asyncio.run(_fetch(inv, dev))
    except TransportError as exc:
        raise NgbError(str(exc)) from None
    status = hostkeys.key_status(dev, key)
    click.echo(f"{name} ({dev.host}:{dev.port}) offers a {key_type} key")
    click.echo(f"fingerprint: {fingerprint}")
    if status == "trusted":
        click.echo("this key is already trusted; nothing to do")
        return
    if status == "changed":
        click.echo(
            "WARNING: this host's key has CHANGED since it was trusted. Unless the device was "
            "reinstalled, someone may be intercepting the connection."
        )
    if not yes:
        if not sys.stdin.isatty():
            raise NgbError(
                "refusing to trust a host key without confirmation (stdin is not a terminal); "
                "check the fingerprint and re-run with --yes"
            )
        if not click.confirm("Does this fingerprint match the device's? Trust it", default=False):
            raise NgbError("not trusted")
    path = hostkeys.trust(dev, key, hashed=hashed)
    click.echo(f"trusted: added {fingerprint} for {name} to {path}")


# -- probe --------------------------------------------------------------------------------------


async def _probe_one(inv: Inventory, dev: Device, timeout: float) -> dict[str, object]:
    from ngb.devices.agent_remote import probe_device
    from ngb.devices.ssh import make_transport

    transport = make_transport(dev, inventory=inv) if not dev.is_local else make_transport(dev)
    try:
        await transport.connect()
        return await probe_device(transport, dev, timeout=timeout)
    finally:
        await transport.close()


async def _probe_all(
    inv: Inventory, devs: list[Device], timeout: float
) -> list[tuple[Device, dict[str, object] | None, str | None]]:
    async def one(dev: Device) -> tuple[Device, dict[str, object] | None, str | None]:
        try:
            return dev, await _probe_one(inv, dev, timeout), None
        except (TransportError, NgbError) as exc:
            return dev, None, first_line(exc)
        except OSError as exc:
            return dev, None, f"{dev.name}: {exc}"

    return list(await asyncio.gather(*(one(d) for d in devs)))


def _summary(facts: Mapping[str, object]) -> str:
    compilers = mapping(facts.get("compilers"))
    ok = sorted(n for n, c in compilers.items() if mapping(c).get("available"))
    ram = facts.get("ram_mb")
    ram_text = f"{ram / 1024:.1f} GiB" if isinstance(ram, int | float) else "? GiB"
    return (
        f"{facts.get('cpu_model', '?')}, {facts.get('cores_logical', '?')} cores, {ram_text}, "
        f"python {facts.get('python', '?')}; compilers: {', '.join(ok) or 'none'}"
    )


@devices.command("probe")
@click.argument("targets", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print every answer as JSON.")
@click.option("--timeout", type=POSITIVE, default=180.0, show_default=True, help="Per device (s).")
def probe(targets: tuple[str, ...], as_json: bool, timeout: float) -> None:
    """Deploy the agent and probe devices (NAME..., GROUP or A,B; default: all) concurrently."""
    inv = load_inventory()
    devs = inv.resolve(list(targets) or None)
    results = asyncio.run(_probe_all(inv, devs, timeout))
    store = _store()
    failed = 0
    out: dict[str, object] = {}
    for dev, facts, error in results:
        if error is not None:
            failed += 1
            out[dev.name] = {"error": error}
            if not as_json:
                msg = error if error.startswith(f"{dev.name}:") else f"{dev.name}: {error}"
                click.echo(safe_text(f"error: {msg}"), err=True)  # as every error (README)
            continue
        assert facts is not None
        out[dev.name] = facts
        if store is not None:
            try:
                store.upsert_device(dev.to_dict())
                store.record_probe(dev.name, facts)
            except NgbError as exc:
                click.echo(f"warning: probe of {dev.name} not stored: {exc}", err=True)
        if not as_json:
            click.echo(safe_text(f"ok   {dev.name}: {_summary(facts)}"))  # a device's answers
    if as_json:
        click.echo(json.dumps(out, indent=2, sort_keys=True, default=str))
    if store is None and not as_json:
        click.echo("(results store unavailable: probes were not recorded)", err=True)
    if failed:
        raise click.exceptions.Exit(1)


# -- tune ---------------------------------------------------------------------------------------


async def _tune_one(inv: Inventory, dev: Device, action: str, timeout: float) -> dict[str, object]:
    from ngb.devices.agent_remote import tune_device
    from ngb.devices.ssh import make_transport

    transport = make_transport(dev, inventory=inv) if not dev.is_local else make_transport(dev)
    try:
        await transport.connect()
        return await tune_device(transport, dev, action, timeout=timeout)
    finally:
        await transport.close()


def _items(value: object) -> list[Mapping[str, object]]:
    """A JSON list of objects (anything else: none)."""
    return [mapping(v) for v in value] if isinstance(value, list) else []


def _show_tune(name: str, answer: Mapping[str, object]) -> None:
    state = mapping(answer.get("state"))
    gpus = _items(state.get("gpus"))
    gpu_text = "; ".join(f"gpu {g.get('index')}: {g.get('sm_clock_mhz')}/"
                         f"{g.get('sm_clock_max_mhz')} MHz" for g in gpus)  # fmt: skip
    click.echo(safe_text(
        f"{name}: governor {state.get('governor') or '?'}, boost {state.get('boost') or '?'}"
        + (f", {gpu_text}" if gpu_text else "")
        + (f", nvpmodel {state['nvpmodel']}" if state.get("nvpmodel") else "")
    ))  # fmt: skip
    for change in _items(answer.get("plan")):
        argv = change.get("argv")
        how = " ".join(map(str, argv) if isinstance(argv, list) else ()) or ", ".join(
            f"{path} <- {value}" for path, value in mapping(change.get("files")).items()
        )
        click.echo(safe_text(
            f"  {change['what']}: {change.get('now')} -> {change['wanted']} "
            f"({change['why']}; {how})"
        ))  # fmt: skip
    if not answer.get("plan"):
        click.echo("  nothing to change that ngb knows of")
    if answer.get("undo_pending"):
        click.echo("  changes applied earlier can be undone: ngb devices tune NAME --undo")


@devices.command("tune")
@click.argument("name")
@click.option("--apply", "do_apply", is_flag=True, help="Make the changes (asks first).")
@click.option("--undo", "do_undo", is_flag=True, help="Restore what --apply changed.")
@click.option("--yes", is_flag=True, help="Do not ask (scripts; check the plan first).")
@click.option("--timeout", type=POSITIVE, default=60.0, show_default=True, help="Per device (s).")
def tune(name: str, do_apply: bool, do_undo: bool, yes: bool, timeout: float) -> None:
    """Show what would make NAME measure more quietly (governor, boost, GPU clocks, Jetson
    clocks); --apply makes the changes after you confirm, --undo restores them. NAME is a device,
    a group, `all` or A,B: each device is tuned. Every result records the state it ran under."""
    if do_apply and do_undo:
        raise NgbError("give --apply or --undo, not both")
    inv = load_inventory()
    devs = inv.resolve([name])  # a device, a group, `all` or A,B (unknown: close matches)
    if not devs:
        raise NgbError(f"{name!r} names no device")
    plans = {dev.name: _tune_step(inv, dev, "show", timeout, len(devs)) for dev in devs}
    for dev in devs:
        if plans[dev.name] is not None:
            _show_tune(dev.name, plans[dev.name] or {})
    failed = [d for d in devs if plans[d.name] is None]
    if do_apply or do_undo:
        action = "apply" if do_apply else "undo"
        # what to change: with --apply only the devices that have a plan
        todo = [d for d in devs if plans[d.name] is not None
                and (do_undo or (plans[d.name] or {}).get("plan"))]  # fmt: skip
        if todo:
            _confirm(action, [d.name for d in todo], yes)
        for dev in todo:
            answer = _tune_step(inv, dev, action, timeout, len(devs))
            if answer is None:
                failed.append(dev)
                continue
            errors = answer.get("errors")
            for error in errors if isinstance(errors, list) else []:
                click.echo(safe_text(f"error: {dev.name}: {error}"), err=True)
            _show_tune(dev.name, answer)
            if errors:
                failed.append(dev)
    if failed:
        raise click.exceptions.Exit(1)


def _tune_step(
    inv: Inventory, dev: Device, action: str, timeout: float, how_many: int
) -> Mapping[str, object] | None:
    """One device's answer; a device that cannot be reached is one line (an error for one
    device, a line on stderr and None when several are tuned, so the others still are)."""
    try:
        return asyncio.run(_tune_one(inv, dev, action, timeout))
    except (TransportError, OSError, NgbError) as exc:
        if how_many == 1:
            raise NgbError(first_line(exc)) from None
        click.echo(safe_text(f"error: {dev.name}: {first_line(exc)}"), err=True)
        return None


def _confirm(action: str, names: list[str], yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise NgbError(f"refusing to {action} without confirmation (stdin is not a "
                       "terminal); check the plan above and re-run with --yes")  # fmt: skip
    where = ", ".join(names)
    if not click.confirm(f"{action.capitalize()} these changes on {where}?", default=False):
        raise NgbError(f"nothing changed on {where}")


# `ngb devices add-slurm` lives in its own module (a Slurm partition's options)
from ngb.sweeps.cli.devices_slurm import add_slurm  # noqa: E402

devices.add_command(add_slurm)
