"""What the store keeps of a device: its inventory entry (without secrets) and its probe answers.

The rows are built here, from the inventory's and the agent's JSON, and
``ngb.sweeps.store.database.Store`` writes them (``upsert_device``, ``record_probe``) in its own
transaction.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from ngb.core.base.errors import NgbError
from ngb.sweeps.rows import Event
from ngb.sweeps.store.ingest import as_int, now, num, to_json

# Inventory fields that must never reach the database (key material, passwords, tokens).
_SECRET_FIELD = re.compile(r"pass|secret|token|private|key_data|identity|credential", re.I)

DEVICE_INSERT = "INSERT OR REPLACE INTO devices VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
PROBE_INSERT = "INSERT INTO probes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"


def device_row(device: Event) -> list[object]:
    """The ``devices`` row of an inventory entry (secret-looking fields dropped)."""
    data = {k: v for k, v in dict(device).items() if not _SECRET_FIELD.search(k)}
    name = data.pop("name", None)
    if not name:
        raise NgbError("a device needs a name")
    columns = ("host", "port", "user", "jump_host", "python", "workdir", "notes")
    values = [data.pop(c, None) for c in columns]
    groups = data.pop("groups", None)
    return [
        name,
        *values[:6],
        to_json(list(groups) if isinstance(groups, Iterable) and groups else []),
        values[6],
        to_json(data),
        now(),
    ]


def probe_row(device_name: str, probe: Event) -> list[object]:
    """The ``probes`` row of one probe answer: the whole JSON, plus the facts the paper's tables
    need."""
    answer = dict(probe)

    def pick(*names: str) -> object:
        for name in names:
            node: object = answer
            for part in name.split("."):
                node = node.get(part) if isinstance(node, Mapping) else None
            if node is not None:
                return node
        return None

    # The agent's probe (ngb.devices.probe) reports ram_mb and cores_logical; older or
    # hand-written probes may use the other names.
    ram_mb = pick("ram_mb")
    ram = ram_mb / 1024 if isinstance(ram_mb, int | float) else pick("ram_gb", "memory_gb")
    cores = pick("cores_logical", "cpu_cores", "cores", "cpu_count")
    gpu = pick("gpu", "gpus")
    return [
        device_name,
        now(),
        pick("hostname", "host"),
        pick("cpu_model", "cpu.model"),
        as_int(cores) if isinstance(cores, int) else None,
        num(ram) if isinstance(ram, int | float) else None,
        gpu if isinstance(gpu, str) or gpu is None else to_json(gpu),
        pick("os", "platform"),
        pick("python", "python_version"),
        to_json(pick("compilers", "available")),
        to_json(pick("versions")),
        to_json(answer),
    ]
