"""A device's probe as the Devices screen shows it: hardware (Table I) and software (Table II).

The probe is what the agent reported (``ngb.devices.probe``); the store keeps the newest one per
device (``probes`` table: hostname, cpu_model, cpu_cores, ram_gb, gpu, os, python, and JSON
``compilers``, ``versions`` and the whole ``probe``), which is how the details and the status
survive a console restart. A fresh probe is turned into the same row shape by ``probe_row``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from rich.table import Table
from rich.text import Text

#: a probe (the agent's JSON object) or a stored ``probes`` row: JSON and DuckDB values, each read
#: with ``.get`` and checked before use (older agents and stores have other keys)
ProbeData = Mapping[str, object]


def shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _json(value: object) -> object:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def stored_probe(row: ProbeData) -> dict[str, object]:
    """The agent's whole probe answer from a stored row (empty if it was not kept)."""
    probe = _json(row.get("probe"))
    return probe if isinstance(probe, dict) else {}


def probe_row(probe: ProbeData) -> dict[str, object]:
    """A fresh probe in the stored row's shape (so the details look the same either way)."""
    ram_mb = probe.get("ram_mb")
    return {
        "hostname": probe.get("hostname"),
        "cpu_model": probe.get("cpu_model"),
        "cpu_cores": probe.get("cores_logical") or probe.get("cpu_cores"),
        "ram_gb": ram_mb / 1024 if isinstance(ram_mb, int | float) else probe.get("ram_gb"),
        "gpu": probe.get("gpu"),
        "os": probe.get("os") or probe.get("platform"),
        "python": probe.get("python") or probe.get("python_version"),
        "versions": probe.get("versions"),
        "probe": probe,
    }


def details_text(name: str, row: ProbeData | None, status: str) -> Table | Text:
    if not row:
        note = f" ({status})" if status and status != "-" else ""
        return Text(f"{name}: not probed yet{note}; press p to probe it.", style="italic")
    hardware = Table.grid(padding=(0, 2))
    hardware.add_column(style="bold")
    hardware.add_column()
    ram = row.get("ram_gb")
    gpu = _json(row.get("gpu"))
    for label, value in (
        ("host", row.get("hostname")),
        ("cpu", row.get("cpu_model")),
        ("cores", row.get("cpu_cores")),
        ("ram", f"{ram:.1f} GB" if isinstance(ram, int | float) else None),
        ("gpu", json.dumps(gpu) if isinstance(gpu, list | dict) else gpu),
        ("os", row.get("os")),
        ("python", row.get("python")),
        ("status", status or None),
    ):
        hardware.add_row(label, shorten(str(value), 70) if value not in (None, "") else "--")
    versions = _json(row.get("versions"))
    software = Table.grid(padding=(0, 2))
    software.add_column(style="bold")
    software.add_column()
    if isinstance(versions, dict):
        for lib, version in sorted(versions.items()):
            if version:
                software.add_row(str(lib), shorten(str(version), 30))
    outer = Table.grid(padding=(0, 4))
    outer.add_row(
        Text(f"Table I: {name} hardware", style="bold underline"),
        Text("Table II: software", style="bold underline"),
    )
    outer.add_row(hardware, software)
    return outer
