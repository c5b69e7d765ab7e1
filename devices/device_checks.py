"""What an SSH device's entry must satisfy before ngb connects to it.

``ngb devices check`` and the SSH transport (``probe``, ``run``) ask the same questions with the
same words, so an entry check calls fine is never refused later:

- ``host`` is only the address: ``bob@10.0.0.1:2222`` in ``host`` would be looked up as a name
  (the user and port belong in ``user`` and ``port``);
- no ``host``, ``user`` or ``jump_host`` starts with ``-``: handed to ssh tools, such a value
  is read as an option (``-oProxyCommand=...`` runs a command);
- ``user`` is a user name: no space, ``:`` or ``/`` (``"bob smith"`` passed ``devices check``);
- a given ``identity_file`` exists and is a regular file.

The structural validation (types, names, control characters) stays in ``inventory.check_device``;
these are the connection facts, checked where a connection is meant (not on ``devices list``, so a
missing key file on one board does not block listing the others).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ngb.core.base.safe_files import shorten
from ngb.devices.inventory import Device


def connection_problems(dev: Device) -> list[str]:
    """One line per problem with the device's connection settings (empty when none)."""
    if dev.is_local:
        return []
    problems: list[str] = []
    host = dev.host
    for key in ("host", "user", "jump_host"):
        value = getattr(dev, key)
        if isinstance(value, str) and value.startswith("-"):
            problems.append(
                f"{key} {shorten(value)!r} starts with '-' (ssh would read it as an option)"
            )
    user_name = dev.user
    if isinstance(user_name, str) and any(c.isspace() or c in ":/" for c in user_name):
        # ssh would log in as another user, or as none ("bob smith" is two words to a shell)
        problems.append(
            f"user {shorten(user_name)!r} is not a user name (no spaces, ':' or '/' in one)"
        )
    if "@" in host:
        user = host.rpartition("@")[0]
        problems.append(
            f"host {shorten(host)!r} has a user in it: write host without it and user = "
            f"{shorten(user)!r}"
        )
    address = host.rpartition("@")[2]
    port = _port_in(address)
    if port is not None:
        problems.append(
            f"host {shorten(host)!r} has a port in it: write host without it and port = {port}"
        )
    if dev.identity_file:
        key_path = Path(dev.identity_file).expanduser()
        try:
            mode = os.stat(key_path).st_mode
        except OSError:
            problems.append(f"identity file not found: {shorten(key_path)}")
        else:
            if not stat.S_ISREG(mode):
                problems.append(f"identity file {shorten(key_path)} is not a regular file")
    return problems


def _port_in(address: str) -> str | None:
    """The ``:port`` of ``host:port`` or ``[v6]:port``; None for a bare name or IPv6 address."""
    if address.startswith("[") and "]:" in address:
        return address.rpartition("]:")[2]
    if address.count(":") == 1:
        return address.partition(":")[2]
    return None


def first_problem(dev: Device) -> str | None:
    """The first problem, with how many more there are; None when the entry is fine."""
    problems = connection_problems(dev)
    if not problems:
        return None
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{problems[0]}{more}"
