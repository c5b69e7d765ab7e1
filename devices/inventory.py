"""The device inventory: a human-editable TOML file of devices and groups.

The file lives at ``get_paths().inventory`` (``devices.toml``)::

    [groups.edge]                 # optional: explicit members and nested groups
    members = ["nano1"]
    children = ["jetsons"]

    [devices.nano1]
    host = "10.0.0.5"
    user = "ubuntu"
    groups = ["jetsons"]          # a device may also name its groups itself

``localhost`` is built in (transport ``"local"``) and exists even without a file; a
``[devices.localhost]`` table may adjust it (python, workdir, groups...).

Why the strictness: the file is edited by hand, and a typo (``hots = ...``) or a group that names a
missing device would otherwise surface much later as a confusing connection failure. Every error is
one line naming the file and the device. Loading never modifies the file, and saving writes a
temporary file and renames it, so a malformed or half-written inventory is never lost.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from pathlib import Path

import tomllib
from ngb.core.base.errors import ConfigError, UnknownNameError
from ngb.core.base.safe_files import read_text, write_atomic
from ngb.devices import slurm

# One device's record and checks live in device_entry (below this module and ngb.devices.pricing);
# they are re-exported here, where callers have always imported them.
from ngb.devices.device_entry import ALL_GROUP as ALL_GROUP
from ngb.devices.device_entry import DEVICE_KEYS as DEVICE_KEYS
from ngb.devices.device_entry import GROUP_KEYS as GROUP_KEYS
from ngb.devices.device_entry import LOCALHOST as LOCALHOST
from ngb.devices.device_entry import MAX_PRICE_PER_HOUR as MAX_PRICE_PER_HOUR
from ngb.devices.device_entry import NAME_RE as NAME_RE
from ngb.devices.device_entry import RESERVED_NAMES as RESERVED_NAMES
from ngb.devices.device_entry import TRANSPORTS as TRANSPORTS
from ngb.devices.device_entry import Device as Device
from ngb.devices.device_entry import FieldValue as FieldValue
from ngb.devices.device_entry import Group as Group
from ngb.devices.device_entry import Price as Price
from ngb.devices.device_entry import builtin_localhost as builtin_localhost
from ngb.devices.device_entry import check_device as check_device
from ngb.devices.device_entry import check_price as check_price
from ngb.devices.device_entry import device_from_table as device_from_table
from ngb.devices.device_entry import reserved as reserved
from ngb.devices.device_entry import suggestion as suggestion
from ngb.devices.device_entry import with_changes as with_changes
from ngb.devices.paths import get_paths

HEADER = (
    "# ngb device inventory. Edit by hand or with `ngb devices add/edit/remove/import`;\n"
    "# check it with `ngb devices check`. One [devices.NAME] table per device.\n\n"
)


class Inventory:
    """Devices and groups, validated. ``localhost`` is always present."""

    def __init__(
        self,
        devices: Iterable[Device] = (),
        groups: Iterable[Group] = (),
        *,
        path: Path | None = None,
    ) -> None:
        self.path = path
        self.devices: dict[str, Device] = {}
        self.groups: dict[str, Group] = {g.name: g for g in groups}
        for dev in devices:
            self.devices[dev.name] = dev
        if LOCALHOST not in self.devices:
            self.devices = {LOCALHOST: builtin_localhost(), **self.devices}

    # -- queries --------------------------------------------------------------------------------

    def __contains__(self, name: object) -> bool:
        return name in self.devices

    def __iter__(self) -> Iterator[Device]:
        return iter(self.devices.values())

    def __len__(self) -> int:
        return len(self.devices)

    def get(self, name: str) -> Device:
        try:
            return self.devices[name]
        except KeyError:
            raise UnknownNameError("device", name, list(self.devices)) from None

    def group_names(self) -> list[str]:
        """Every group: declared in [groups] or named by a device, plus the implicit ``all``."""
        names = set(self.groups)
        for dev in self.devices.values():
            names.update(dev.groups)
        return sorted(names | {ALL_GROUP})

    def group_members(self, group: str) -> list[Device]:
        """Devices of a group, following nested ``children`` groups, in inventory order."""
        if group == ALL_GROUP:
            return list(self.devices.values())
        if group not in self.group_names():
            raise UnknownNameError("group", group, self.group_names())
        wanted: set[str] = set()
        for name in self._expand_groups(group):
            wanted.update(d.name for d in self.devices.values() if name in d.groups)
            if name in self.groups:
                wanted.update(self.groups[name].members)
        return [d for d in self.devices.values() if d.name in wanted]

    def groups_of(self, device: str) -> list[str]:
        """Every group a device belongs to, directly or through a parent group's children."""
        return [
            g
            for g in self.group_names()
            if g != ALL_GROUP and device in {d.name for d in self.group_members(g)}
        ]

    def subgroups(self, group: str) -> list[str]:
        """``group`` and every group nested below it (through ``children``)."""
        return self._expand_groups(group)

    def _expand_groups(self, group: str) -> list[str]:
        seen: list[str] = []
        stack = [group]
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.append(name)
            if name in self.groups:
                stack.extend(self.groups[name].children)
        return seen

    def resolve(self, targets: str | Sequence[str] | None) -> list[Device]:
        """Turn ``"A,B"``, a group name, or a list of those into devices (order kept, no dups).

        ``None`` means every device (so does the group ``all``). Targets that name nothing (``""``,
        ``","``) are an error, not "every device": a run on the whole fleet must be asked for.
        Unknown names raise ``UnknownNameError`` with close matches among devices and groups.
        """
        if targets is None:
            return list(self.devices.values())
        tokens = [targets] if isinstance(targets, str) else list(targets)
        names = [t.strip() for tok in tokens for t in tok.split(",") if t.strip()]
        if not names:
            raise ConfigError(
                f"{', '.join(map(repr, tokens)) or 'the device list'} names no device: "
                "give device or group names (or 'all')"
            )
        out: dict[str, Device] = {}
        for name in names:
            found = [self.devices[name]] if name in self.devices else None
            if found is None and name in self.group_names():
                found = self.group_members(name)
            found = found if found is not None else slurm.slot_named(self.devices, name)
            if found is not None:  # a Slurm entry runs as one device per wanted node
                out.update({s.name: s for d in found for s in slurm.slots(d) if s.name not in out})
            else:
                choices = list(self.devices) + self.group_names()
                raise UnknownNameError("device or group", name, choices)
        return list(out.values())

    # -- edits ----------------------------------------------------------------------------------

    def add(self, device: Device, *, replace_existing: bool = False) -> None:
        if not replace_existing and _find_casefold(self.devices, device.name):
            raise ConfigError(f"device {device.name!r} already exists (remove it first)")
        merged = {**self.devices, device.name: device}
        Inventory(merged.values(), self.groups.values(), path=self.path).validate()
        self.devices = merged

    def remove(self, name: str) -> Device:
        if name == LOCALHOST and self.devices[LOCALHOST] == builtin_localhost():
            raise ConfigError("'localhost' is built in and cannot be removed")
        dev = self.get(name)
        del self.devices[name]
        for group in self.groups.values():
            if name in group.members:
                group.members.remove(name)
        if name == LOCALHOST:  # removing an override restores the built-in default
            self.devices = {LOCALHOST: builtin_localhost(), **self.devices}
        return dev

    # -- validation and persistence ---------------------------------------------------------------

    def validate(self) -> None:
        """Raise ``ConfigError`` (one line naming the file and device) for the first problem."""
        where = f"{self.path}: " if self.path else ""
        seen: dict[str, str] = {}
        for dev in self.devices.values():
            check_device(dev, where)
            key = dev.name.casefold()
            if key in seen:
                raise ConfigError(
                    f"{where}duplicate device name {dev.name!r} (also {seen[key]!r}; names are "
                    "case-insensitive)"
                )
            seen[key] = dev.name
        for group in self.groups.values():
            gwhere = f"{where}group {group.name!r}: "
            if not NAME_RE.match(group.name):
                raise ConfigError(f"{gwhere}bad name (use letters, digits, '.', '_', '-')")
            if group.name.casefold() in seen:
                raise ConfigError(f"{gwhere}a device has the same name")
            if group.name == ALL_GROUP:
                raise ConfigError(f"{gwhere}'all' is the implicit group of every device")
            for member in group.members:
                if member not in self.devices:
                    hint = suggestion(member, self.devices)
                    raise ConfigError(f"{gwhere}unknown device {member!r} in members{hint}")
            for child in group.children:
                if child not in self.group_names():
                    hint = suggestion(child, self.group_names())
                    raise ConfigError(f"{gwhere}unknown group {child!r} in children{hint}")
            if group.name in self._expand_groups(group.name)[1:] or any(
                group.name in self._expand_groups(c) for c in group.children
            ):
                raise ConfigError(f"{gwhere}groups nest in a cycle")
        for dev in self.devices.values():
            for g in dev.groups:
                if g.casefold() in seen:
                    raise ConfigError(
                        f"{where}device {dev.name!r}: group {g!r} has the name of a device"
                    )
            jump = dev.jump_host
            if jump and NAME_RE.match(jump) and "." not in jump and jump not in self.devices:
                # A bare word is meant as a device name; a dotted one may be a host name.
                hint = suggestion(jump, self.devices)
                raise ConfigError(
                    f"{where}device {dev.name!r}: unknown jump_host {jump!r}{hint} (a bare word "
                    "names a device; write [user@]host:port for a host outside the inventory)"
                )
            if jump == dev.name:
                raise ConfigError(f"{where}device {dev.name!r}: jump_host is the device itself")
            slurm.check_login(dev, self.devices, f"{where}device {dev.name!r}: ")
        self._check_slot_names(where)
        for name in self.devices:  # two unrelated groups pricing a device differently
            try:
                self.price_of(name)
            except ConfigError as exc:
                raise ConfigError(f"{where}{exc}") from None

    def _check_slot_names(self, where: str) -> None:
        """A Slurm entry's nodes are devices ``NAME.1``, ``NAME.2``... of a run, which ``-d``
        names too: another device or a group of that name would be what ``-d`` picks instead."""
        taken = {n.casefold(): n for n in [*self.group_names(), *self.devices]}
        for dev in self.devices.values():
            for slot in slurm.slots(dev):
                other = taken.get(slot.name.casefold()) if slot.name != dev.name else None
                if other is not None:
                    kind = "device" if other in self.devices else "group"
                    raise ConfigError(
                        f"{where}{kind} {other!r} has the name of a node of Slurm entry "
                        f"{dev.name!r} (`-d {slot.name}` names that node); rename one of them"
                    )

    def price_of(self, device: str) -> Price | None:
        """The price per hour of ``device`` (``ngb.devices.pricing`` says how), or None when none
        is set. Raises ``ConfigError`` when two unrelated groups give it different prices."""
        dev = self.devices.get(device)
        if dev is None:
            return None
        if dev.price_per_hour is not None:
            return Price(float(dev.price_per_hour), "device")
        priced = [
            g
            for g in self.groups_of(device)
            if g in self.groups and self.groups[g].price_per_hour is not None
        ]
        # a group whose descendant also prices the device gives way to that descendant
        nested = self.subgroups  # every group below one, itself first
        specific = [g for g in priced if not any(o != g and o in nested(g) for o in priced)]
        values = {self.groups[g].price_per_hour for g in specific}
        if not specific:
            return None
        if len(values) > 1:
            named = ", ".join(f"{g} = {self.groups[g].price_per_hour}" for g in specific)
            raise ConfigError(
                f"device {device!r}: its groups give different prices per hour ({named}); set "
                "price_per_hour on the device"
            )
        return Price(float(values.pop() or 0.0), f"group {specific[0]}")

    def _tables(self) -> dict[str, dict[str, dict[str, FieldValue]]]:
        doc: dict[str, dict[str, dict[str, FieldValue]]] = {}
        if self.groups:
            doc["groups"] = {g.name: g.to_table() for g in self.groups.values()}
        doc["devices"] = {
            d.name: d.to_table()
            for d in self.devices.values()
            if not (d.name == LOCALHOST and d == builtin_localhost())
        }
        return doc

    def to_toml(self, existing: str | None = None) -> str:
        """The inventory as TOML; given the file's current text, an edit of it.

        An edit keeps what the operator wrote by hand (comments, order, layout) and changes only
        the devices, groups and keys that differ (tomlkit), so `devices add` loses no comment.
        """
        if existing is not None:
            import tomlkit

            doc = tomlkit.parse(existing)
            for section, wanted in self._tables().items():
                if section not in doc:
                    doc[section] = tomlkit.table(is_super_table=True)
                _sync_tables(doc[section], wanted)
            if "groups" in doc and not self.groups:
                del doc["groups"]
            return tomlkit.dumps(doc)
        import tomli_w

        return HEADER + tomli_w.dumps(self._tables())

    def save(self, path: Path | None = None) -> Path:
        """Validate, then write atomically (temp file in the same folder + rename)."""
        target = Path(path or self.path or get_paths().inventory)
        self.validate()
        existing = read_text(target, "inventory") if target.is_file() else None
        text = self.to_toml(existing)
        atomic_write_text(target, text)
        self.path = target
        return target


def _sync_tables(
    container: MutableMapping[str, object], wanted: Mapping[str, Mapping[str, FieldValue]]
) -> None:
    """Make a tomlkit table of tables (a ``MutableMapping`` of tomlkit items) hold ``wanted``,
    touching only what differs."""
    import tomlkit

    for name in [n for n in container if n not in wanted]:
        del container[name]
    for name, table in wanted.items():
        current = container.get(name)
        if isinstance(_plain(current), list) and dict(table) == {"members": _plain(current)}:
            continue  # the shorthand groups.NAME = [...] already says this
        if not isinstance(current, MutableMapping):
            new = tomlkit.table()
            for key, value in table.items():
                new[key] = value
            container[name] = new
            continue
        for key in [k for k in current if k not in table]:
            del current[key]
        for key, value in table.items():
            if _plain(current.get(key)) != value:
                current[key] = value


def _plain(item: object) -> object:
    """A tomlkit item as plain Python (lists and tables compare with ours)."""
    return item.unwrap() if hasattr(item, "unwrap") else item


def _find_casefold(names: Iterable[str], name: str) -> str | None:
    for n in names:
        if n.casefold() == name.casefold():
            return n
    return None


def inventory_from_dict(doc: Mapping[str, object], *, path: Path | None = None) -> Inventory:
    where = f"{path}: " if path else ""
    for key in doc:
        if key not in ("devices", "groups"):
            raise ConfigError(
                f"{where}unknown top-level key {key!r}{suggestion(key, ['devices', 'groups'])}"
            )
    devices_doc = doc.get("devices", {})
    groups_doc = doc.get("groups", {})
    if not isinstance(devices_doc, Mapping) or not isinstance(groups_doc, Mapping):
        raise ConfigError(f"{where}'devices' and 'groups' must be tables")
    for name in devices_doc:
        why = reserved(name) if isinstance(name, str) else None
        if why is not None:  # written before the name was reserved: say how to leave it
            raise ConfigError(
                f"{where}device name {name!r} is reserved ({why}): rename its table "
                f"[devices.{name}] in this file (and the name in any group's members)"
            )
    devices = [device_from_table(n, t, where=where) for n, t in devices_doc.items()]
    groups = []
    for name, table in groups_doc.items():
        if isinstance(table, list):  # shorthand: groups.NAME = ["dev1", "dev2"]
            table = {"members": table}
        if not isinstance(table, Mapping):
            raise ConfigError(f"{where}group {name!r}: expected a table or a list of devices")
        for key in table:
            if key not in GROUP_KEYS:
                raise ConfigError(
                    f"{where}group {name!r}: unknown key {key!r}{suggestion(key, GROUP_KEYS)}"
                )
        members, children = table.get("members", []), table.get("children", [])
        for label, value in (("members", members), ("children", children)):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{where}group {name!r}: {label} must be a list of names")
        price = table.get("price_per_hour")
        check_price(price, f"{where}group {name!r}: ")
        groups.append(
            Group(name, list(members), list(children), str(table.get("notes", "")), price)
        )
    inv = Inventory(devices, groups, path=path)
    inv.validate()
    return inv


def load_inventory(path: Path | str | None = None) -> Inventory:
    """Load and validate the inventory; a missing file gives just the built-in localhost."""
    target = Path(path) if path else get_paths().inventory
    if not target.exists():
        if target.is_symlink():  # a dangling link is a mistake to show, not "no inventory"
            raise ConfigError(
                f"device inventory {target} is a link to {target.readlink()}, which does not exist"
            )
        return Inventory(path=target)
    try:
        text = read_text(target, "inventory")  # a FIFO or device is refused, never blocks
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{target}: invalid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses once per nesting level
        raise ConfigError(f"{target}: invalid TOML: nested too deeply") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{target}: cannot read: {exc}") from None
    try:
        return inventory_from_dict(doc, path=target)
    except TypeError as exc:  # a value of the wrong type reaching the dataclass
        raise ConfigError(f"{target}: {exc}") from None


def atomic_write_text(target: Path, text: str) -> None:
    """Write ``text`` to ``target`` so readers see either the old or the new file, never half.

    Through ``ngb.core.base.safe_files.write_atomic``: a symlinked file is written through (the link
    stays), a FIFO or device in its place is refused, a full disk is an error.
    """
    write_atomic(target, text, make_parent=True)


def merge_devices(
    inv: Inventory, devices: Sequence[Device], *, replace_existing: bool
) -> dict[str, list[str]]:
    """Add imported devices; returns {"added": [...], "replaced": [...], "unchanged": [...]}.

    A name that exists with different settings is an error unless ``replace_existing``.
    """
    report: dict[str, list[str]] = {"added": [], "replaced": [], "unchanged": []}
    conflicts = []
    for dev in devices:
        old = _find_casefold(inv.devices, dev.name)
        if old is None:
            report["added"].append(dev.name)
        elif inv.devices[old] == dev:
            report["unchanged"].append(dev.name)
        elif replace_existing:
            report["replaced"].append(dev.name)
        else:
            conflicts.append(dev.name)
    if conflicts:
        raise ConfigError(
            f"devices already in the inventory with other settings: {', '.join(conflicts)} "
            "(use --replace to overwrite them)"
        )
    merged = dict(inv.devices)
    for dev in devices:
        if dev.name in report["unchanged"]:
            continue
        old = _find_casefold(merged, dev.name)
        if old is not None:
            del merged[old]
        merged[dev.name] = dev
    # validate the result before touching ``inv``, so a failed import changes nothing
    Inventory(merged.values(), inv.groups.values(), path=inv.path).validate()
    inv.devices = merged
    return report
