"""Import an Ansible inventory (YAML or INI) as ngb devices: ``ngb devices import FILE``.

A lab that already keeps its machines in Ansible should not type them again. Only what ngb needs
is read: hosts, groups (nested via ``children``), numeric host ranges (``node[01:03]``) and the
connection variables in ``ANSIBLE_VARS``; every other variable is ignored. Errors are one line
naming the file. The result is a list of ``Device``; ``inventory.merge_devices`` adds them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ngb.core.base.errors import ConfigError, first_line
from ngb.core.base.safe_files import read_text
from ngb.devices.inventory import Device, check_device

# Ansible host variables ngb understands (old ``ansible_ssh_*`` spellings included).
ANSIBLE_VARS = {
    "ansible_host": "host",
    "ansible_ssh_host": "host",
    "ansible_port": "port",
    "ansible_ssh_port": "port",
    "ansible_user": "user",
    "ansible_ssh_user": "user",
    "ansible_python_interpreter": "python",
    "ansible_ssh_private_key_file": "identity_file",
    "ansible_private_key_file": "identity_file",
}
_RANGE_RE = re.compile(r"\[(\d+):(\d+)\]")
# A pattern such as node[0:99999999] is a typo, not a lab: expanding it took 28 s and all memory.
MAX_RANGE_HOSTS = 1024


@dataclass
class _AnsibleTree:
    """Groups with their hosts, vars and children, as both Ansible formats describe them."""

    hosts: dict[str, dict[str, object]] = field(default_factory=dict)  # host -> its own vars
    group_hosts: dict[str, list[str]] = field(default_factory=dict)
    group_vars: dict[str, dict[str, object]] = field(default_factory=dict)
    children: dict[str, list[str]] = field(default_factory=dict)
    where: str = ""  # "FILE: " for messages

    def group(self, name: str) -> None:
        self.group_hosts.setdefault(name, [])
        self.group_vars.setdefault(name, {})
        self.children.setdefault(name, [])

    def add_host(self, group: str, host: str, hostvars: Mapping[str, object]) -> None:
        self.group(group)
        for name in _expand_range(host, self.where):
            self.hosts.setdefault(name, {}).update(hostvars)
            if name not in self.group_hosts[group]:
                self.group_hosts[group].append(name)


def _expand_range(pattern: str, where: str = "") -> list[str]:
    """Ansible's numeric host ranges: ``node[01:03]`` -> node01, node02, node03.

    At most ``MAX_RANGE_HOSTS`` names per pattern (all its ranges together), counted before
    anything is expanded; an empty range (``node[9:1]``) is an error too.
    """
    total = 1
    for lo, hi in _RANGE_RE.findall(pattern):
        if int(hi) < int(lo):
            raise ConfigError(f"{where}host pattern {pattern!r}: empty range [{lo}:{hi}]")
        total *= int(hi) - int(lo) + 1
        if total > MAX_RANGE_HOSTS:
            raise ConfigError(
                f"{where}host pattern {pattern!r} expands to more than {MAX_RANGE_HOSTS} hosts"
            )
    return _expand(pattern)


def _expand(pattern: str) -> list[str]:
    m = _RANGE_RE.search(pattern)
    if not m:
        return [pattern]
    lo, hi = m.group(1), m.group(2)
    width = len(lo) if lo.startswith("0") else 0
    out = []
    for i in range(int(lo), int(hi) + 1):
        out.extend(_expand(pattern[: m.start()] + str(i).zfill(width) + pattern[m.end() :]))
    return out


def _name(value: object, what: str, where: str) -> str:
    """YAML reads unquoted yes/no/on/off, null and numbers as other types: a name must be text."""
    if not isinstance(value, str):
        raise ConfigError(
            f"{where}{what} name {value!r} must be a string (YAML read it as "
            f"{type(value).__name__}; quote it)"
        )
    return value


def _mapping(body: Mapping[str, object], key: str, group: str, where: str) -> Mapping[str, object]:
    value = body.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{where}group {group!r}: {key} must be a mapping (name: ...), "
            f"not a {type(value).__name__}"
        )
    return value


def _parse_ansible_yaml(text: str, where: str) -> _AnsibleTree:
    import yaml

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        first = first_line(exc)
        raise ConfigError(f"{where}invalid YAML: {first}") from None
    except RecursionError:  # PyYAML composes nested nodes recursively
        raise ConfigError(f"{where}invalid YAML: nested too deeply") from None
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{where}expected a YAML mapping of groups (e.g. 'all:')")
    tree = _AnsibleTree(where=where)

    def walk(name: str, body: object) -> None:
        tree.group(name)
        if body is None:
            return
        if not isinstance(body, Mapping):
            raise ConfigError(f"{where}group {name!r}: expected a mapping")
        for key in body:
            if key not in ("hosts", "vars", "children"):
                raise ConfigError(f"{where}group {name!r}: unknown key {key!r}")
        for host, hostvars in _mapping(body, "hosts", name, where).items():
            host = _name(host, "host", where)
            if hostvars is None:
                hostvars = {}
            elif not isinstance(hostvars, Mapping):
                raise ConfigError(f"{where}host {host!r}: vars must be a mapping")
            tree.add_host(name, host, hostvars)
        tree.group_vars[name].update(_mapping(body, "vars", name, where))
        for child, child_body in _mapping(body, "children", name, where).items():
            child = _name(child, "group", where)
            if child not in tree.children[name]:
                tree.children[name].append(child)
            walk(child, child_body)

    try:
        for name, body in doc.items():
            walk(_name(name, "group", where), body)
    except RecursionError:
        raise ConfigError(f"{where}groups nested too deeply") from None
    return tree


def _parse_ansible_ini(text: str, where: str) -> _AnsibleTree:
    import shlex

    tree = _AnsibleTree(where=where)
    section, kind = "ungrouped", "hosts"
    tree.group("ungrouped")
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            if not line.endswith("]"):
                raise ConfigError(f"{where}line {lineno}: unclosed section header {line!r}")
            header = line[1:-1].strip()
            section, _, kind = header.partition(":")
            kind = kind or "hosts"
            if kind not in ("hosts", "vars", "children"):
                raise ConfigError(f"{where}line {lineno}: unknown section kind {kind!r}")
            tree.group(section)
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            raise ConfigError(f"{where}line {lineno}: {exc}") from None
        if kind == "children":
            tree.group(words[0])
            if words[0] not in tree.children[section]:
                tree.children[section].append(words[0])
            continue
        pairs = {}
        for word in words[1:] if kind == "hosts" else words:
            key, eq, value = word.partition("=")
            if not eq:
                raise ConfigError(f"{where}line {lineno}: expected key=value, got {word!r}")
            pairs[key.strip()] = value
        if kind == "vars":
            tree.group_vars[section].update(pairs)
        else:
            host = words[0]
            # INI shorthand host:port
            m = re.fullmatch(r"(.+):(\d+)", host)
            if m and ":" not in m.group(1):
                host = m.group(1)
                pairs.setdefault("ansible_port", m.group(2))
            tree.add_host(section, host, pairs)
    return tree


def _port(value: object, host: str, where: str) -> int:
    """An Ansible port: a number, or text of one (INI values are text)."""
    try:
        # the types int() reads; YAML may give others (a date, a list, null): a bad port too
        if isinstance(value, str | bytes | int | float):
            return int(value)
    except (ValueError, OverflowError):  # OverflowError: YAML's .inf
        pass
    raise ConfigError(f"{where}host {host!r}: bad port {value!r} (must be 1-65535)")


def _device_from_ansible(
    name: str, merged: Mapping[str, object], groups: list[str], where: str
) -> Device:
    values: dict[str, object] = {}  # ngb field -> the first Ansible variable that sets it
    for var, key in ANSIBLE_VARS.items():
        if var in merged and key not in values:
            values[key] = merged[var]
    dev = Device(name=name, host=str(values.get("host", name)), groups=groups)
    if "port" in values:
        dev.port = _port(values["port"], name, where)
    if "user" in values:
        dev.user = str(values["user"])
    if "python" in values:
        dev.python = str(values["python"])
    if "identity_file" in values:
        dev.identity_file = str(values["identity_file"])
    check_device(dev, where)
    return dev


def import_ansible(path: Path | str) -> list[Device]:
    """Read an Ansible inventory (YAML or INI) and return ngb devices.

    Groups become device groups (a host in ``jetsons``, a child of ``edge``, is in both); variables
    apply in Ansible's order: ``all`` < parent group < child group < host. ``all`` and
    ``ungrouped`` are not copied as groups (ngb has its own implicit ``all``).
    """
    src = Path(path)
    where = f"{src}: "
    try:
        text = read_text(src, "Ansible inventory")  # a FIFO is refused, never blocks
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}cannot read: {exc}") from None
    looks_yaml = src.suffix in (".yml", ".yaml") or (
        src.suffix not in (".ini", ".cfg") and re.search(r"^\s*\w+\s*:\s*$", text, re.M)
    )
    tree = _parse_ansible_yaml(text, where) if looks_yaml else _parse_ansible_ini(text, where)

    parents: dict[str, list[str]] = {}
    for parent, kids in tree.children.items():
        for kid in kids:
            if kid not in tree.group_hosts:
                raise ConfigError(f"{where}group {parent!r}: unknown child group {kid!r}")
            parents.setdefault(kid, []).append(parent)

    def depth(group: str, seen: tuple[str, ...] = ()) -> int:
        if group in seen:
            raise ConfigError(f"{where}group {group!r}: groups nest in a cycle")
        ups = parents.get(group, [])
        return 1 + max((depth(p, (*seen, group)) for p in ups), default=0)

    def ancestors(group: str) -> set[str]:
        out, stack = set(), [group]
        while stack:
            g = stack.pop()
            if g not in out:
                out.add(g)
                stack.extend(parents.get(g, []))
        return out

    devices = []
    for host, hostvars in tree.hosts.items():
        direct = [g for g, hs in tree.group_hosts.items() if host in hs]
        all_groups: set[str] = set()
        for g in direct:
            all_groups |= ancestors(g)
        merged: dict[str, object] = dict(tree.group_vars.get("all", {}))
        for g in sorted(all_groups - {"all"}, key=lambda g: (depth(g), g)):
            merged.update(tree.group_vars.get(g, {}))
        merged.update(hostvars)
        groups = sorted(all_groups - {"all", "ungrouped"})
        devices.append(_device_from_ansible(host, merged, groups, where))
    if not devices:
        raise ConfigError(f"{where}no hosts found")
    return devices
