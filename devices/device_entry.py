"""One device's entry in the inventory: the ``Device`` and ``Group`` records and the checks of
one table (names, hosts, ports, prices, control characters).

These sit below ``ngb.devices.inventory`` (the whole file: groups, validation, load and save) and
``ngb.devices.pricing`` (the cost of inferences), which both use them: ``Price`` is here, and the
inventory resolves a price through its groups itself (``Inventory.price_of``), so the imports
point one way, pricing -> inventory -> device_entry. ``ngb.devices.inventory`` re-exports every
public name here.
"""

from __future__ import annotations

import difflib
import math
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ngb.core.base.errors import ConfigError
from ngb.devices import slurm

# \A...\Z, not ^...$: "$" also matches before a final newline ("gpu\n" was a name, issue 41)
NAME_RE = re.compile(r"\A[A-Za-z0-9._][A-Za-z0-9._-]*\Z")
TRANSPORTS = ("ssh", "local", "slurm")  # slurm: a partition (ngb.devices.slurm)
LOCALHOST = "localhost"
ALL_GROUP = "all"  # implicit group of every device (as in Ansible)
# Words `-d` gives a meaning of its own: a device of that name would be what `-d all` picked
# instead of every device (issue 41). Names are case-insensitive, so `ALL` is refused too.
RESERVED_NAMES = (ALL_GROUP,)

#: a device or group field's value as TOML and JSON write it (``Device.to_dict``/``to_table``)
FieldValue = str | int | float | list[str] | slurm.SlurmTable | None


@dataclass
class Device:
    """One device of the testbed. Only ``name`` and ``host`` are required.

    ``port`` 22, ``user`` None and ``identity_file`` None mean "let ~/.ssh/config (and ssh-agent)
    decide", so host aliases from the operator's ssh config keep working.
    """

    name: str
    host: str
    port: int = 22
    user: str | None = None
    identity_file: str | None = None
    jump_host: str | None = None  # another device's name, or [user@]host[:port]
    python: str = "python3"  # the interpreter on the device (one argv word, never a shell string)
    workdir: str = "~/.ngb"
    groups: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    notes: str = ""
    transport: str = "ssh"
    # what an hour of this device costs (any currency, the reports say "per hour's price");
    # None: the device's groups may give one (ngb.devices.pricing)
    price_per_hour: float | None = None
    # transport "slurm" only: partition, gres, nodes... (checked by ngb.devices.slurm)
    slurm: slurm.SlurmTable | None = None

    @property
    def is_local(self) -> bool:
        return self.transport == "local"

    def to_dict(self) -> dict[str, FieldValue]:
        """All fields, JSON/TOML friendly (for ``--json`` output and the store)."""
        return {f.name: _copy(getattr(self, f.name)) for f in fields(self)}

    def to_table(self) -> dict[str, FieldValue]:
        """The TOML table for this device: only fields that differ from the defaults."""
        default = Device(name=self.name, host="")
        table: dict[str, FieldValue] = {"host": self.host}
        for f in fields(self):
            if f.name in ("name", "host"):
                continue
            value = getattr(self, f.name)
            if value != getattr(default, f.name) and value is not None:
                table[f.name] = _copy(value)
        return table


def _copy(value: FieldValue) -> FieldValue:
    if isinstance(value, dict):
        return dict(value)
    return list(value) if isinstance(value, list) else value


DEVICE_KEYS = tuple(f.name for f in fields(Device) if f.name != "name")
GROUP_KEYS = ("members", "children", "notes", "price_per_hour")


def builtin_localhost() -> Device:
    """The embedded default device: this machine, reached without SSH.

    Its python is the interpreter running ngb, which has the agent's dependencies (psutil, numpy),
    whereas a bare ``python3`` on PATH may not. Its work directory sits in ngb's own data dir
    (so ``NGB_HOME`` keeps a throwaway setup, and the tests, out of the operator's home).
    """
    from ngb.devices.paths import get_paths

    return Device(
        name=LOCALHOST,
        host=LOCALHOST,
        transport="local",
        python=sys.executable,
        workdir=str(get_paths().data / "localhost"),
        notes="built-in",
    )


@dataclass
class Group:
    name: str
    members: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    notes: str = ""
    price_per_hour: float | None = None  # for members without a price of their own

    def to_table(self) -> dict[str, FieldValue]:
        table: dict[str, FieldValue] = {}
        if self.price_per_hour is not None:
            table["price_per_hour"] = self.price_per_hour
        if self.members:
            table["members"] = list(self.members)
        if self.children:
            table["children"] = list(self.children)
        if self.notes:
            table["notes"] = self.notes
        return table


@dataclass(frozen=True)
class Price:
    """A device's price per hour and where it came from (``ngb.devices.pricing``)."""

    per_hour: float
    source: str  # "device" or "group NAME"


def suggestion(name: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=3, cutoff=0.6)
    return f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""


def reserved(name: str) -> str | None:
    """Why ``name`` cannot name a device (a word ``-d`` reads otherwise), or None."""
    if name.casefold() in RESERVED_NAMES:
        return f"`-d {name.casefold()}` means every device"
    return None


def check_device(dev: Device, where: str) -> None:
    dwhere = f"{where}device {dev.name!r}: "
    if not isinstance(dev.name, str) or not NAME_RE.match(dev.name):
        raise ConfigError(
            f"{where}bad device name {dev.name!r} (use letters, digits, '.', '_', '-'; "
            "not starting with '-')"
        )
    why = reserved(dev.name)
    if why is not None:
        raise ConfigError(f"{where}device name {dev.name!r} is reserved ({why}); choose another")
    if not isinstance(dev.host, str):
        raise ConfigError(f"{dwhere}host must be a string, got {dev.host!r}")
    if not dev.host.strip():
        raise ConfigError(f"{dwhere}host is empty")
    if any(c.isspace() for c in dev.host):
        raise ConfigError(f"{dwhere}host {dev.host!r} contains whitespace")
    if isinstance(dev.port, bool) or not isinstance(dev.port, int) or not 1 <= dev.port <= 65535:
        raise ConfigError(f"{dwhere}bad port {dev.port!r} (must be an integer 1-65535)")
    if dev.transport not in TRANSPORTS:
        raise ConfigError(
            f"{dwhere}bad transport {dev.transport!r} (one of: {', '.join(TRANSPORTS)})"
        )
    for key in ("user", "identity_file", "jump_host"):
        value = getattr(dev, key)
        if value is not None and (not isinstance(value, str) or not value):
            raise ConfigError(f"{dwhere}{key} must be a non-empty string")
    for key in ("python", "workdir"):
        value = getattr(dev, key)
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{dwhere}{key} must be a non-empty string")
    if not isinstance(dev.notes, str):
        raise ConfigError(f"{dwhere}notes must be a string")
    check_price(dev.price_per_hour, dwhere)
    slurm.check_entry(dev.transport, dev.slurm, dwhere)
    for key in ("groups", "tags"):
        value = getattr(dev, key)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{dwhere}{key} must be a list of strings")
    for g in dev.groups:
        if not NAME_RE.match(g):
            raise ConfigError(f"{dwhere}bad group name {g!r} (use letters, digits, '.', '_', '-')")
    # Values that reach ssh, shell scripts and terminals: a newline in workdir was read as two
    # lines by the remote script. Notes are free text (escaped when shown), so they may.
    for key in ("host", "user", "identity_file", "jump_host", "python", "workdir"):
        _refuse_control(getattr(dev, key), f"{dwhere}{key}")
    for key in ("groups", "tags"):
        for value in getattr(dev, key):
            _refuse_control(value, f"{dwhere}{key}")


#: a price per hour above this is a typo, and its costs would overflow (any currency)
MAX_PRICE_PER_HOUR = 1e9


def check_price(value: object, where: str) -> None:
    """A price per hour is a finite number >= 0 (or absent)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{where}price_per_hour must be a number, got {value!r}")
    if value < 0:
        raise ConfigError(f"{where}price_per_hour must be >= 0, got {value!r}")
    if value > MAX_PRICE_PER_HOUR:  # 1e308 overflowed every cost to a 309-digit number
        raise ConfigError(
            f"{where}price_per_hour must be at most {MAX_PRICE_PER_HOUR:g}, got {value!r}"
        )


def _refuse_control(value: str | None, where: str) -> None:
    if value is not None and not value.isprintable():
        bad = next(c for c in value if not c.isprintable())
        raise ConfigError(f"{where}: control character {bad!r} in {value!r}")


# Any: a TOML table read from disk (or form/CLI values): Device(**table) takes it unchecked and
# check_device then checks every field's type and value
def device_from_table(name: str, table: Mapping[str, Any], *, where: str = "") -> Device:
    """Build a Device from one TOML table, refusing unknown keys (typos) with a suggestion."""
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}device {name!r}: expected a table, got {type(table).__name__}")
    for key in table:
        if key not in DEVICE_KEYS:
            hint = suggestion(key, DEVICE_KEYS)
            raise ConfigError(f"{where}device {name!r}: unknown key {key!r}{hint}")
    if name == LOCALHOST:  # an override of the built-in: unspecified fields keep its values
        base = builtin_localhost().to_dict()
        del base["name"]
        table = {**base, **table}
    if "host" not in table:
        raise ConfigError(f"{where}device {name!r}: host is missing")
    dev = Device(name=name, **dict(table))
    check_device(dev, where)
    return dev


def with_changes(device: Device, **changes: object) -> Device:
    """A copy of ``device`` with some fields changed (None values are ignored), checked like a
    table of the inventory file (unknown keys and bad values raise ``ConfigError``)."""
    table = device.to_dict()
    del table["name"]
    return device_from_table(
        device.name, {**table, **{k: v for k, v in changes.items() if v is not None}}
    )
