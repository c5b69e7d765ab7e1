"""The console's one door to the layers below (inventory, host keys, sweeps, store, orchestrator).

Screens talk to this facade only, for three reasons: every heavy or I/O-bound module
(``duckdb``, ``asyncssh``, the orchestrator) is imported lazily here, so ``ngb-tui`` paints its
first frame without them; the ``--db`` / ``--inventory`` overrides live in one place; and the
blocking calls are plainly marked (``*_sync``: run them in a thread worker, never on the event
loop; ``async``: await them from an async worker).
"""

from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path
from typing import Any


class Backend:
    """Shared by every screen of one ``NgbApp``."""

    def __init__(
        self,
        db_path: str | Path | None = None,
        inventory_path: str | Path | None = None,
        *,
        orchestrator_options: dict[str, Any] | None = None,
        isolate: str | None = None,
    ) -> None:
        self.db_path = Path(db_path).expanduser() if db_path else None
        self.inventory_path = Path(inventory_path).expanduser() if inventory_path else None
        # Extra Orchestrator(...) keywords (tests: transport_factory, shorter timeouts) and the
        # agent's isolation mode (None = the agent's default: one child process per trial).
        self.orchestrator_options = dict(orchestrator_options or {})
        self.isolate = isolate
        self._orchestrator: Any = None
        self._store: Any = None

    # -- inventory -----------------------------------------------------------------------------
    def _inventory_module(self) -> Any:
        from ngb.devices import inventory

        return inventory

    def load_inventory_sync(self) -> Any:
        """The inventory (with the built-in ``localhost``); raises NgbError on a bad file."""
        inv = self._inventory_module()
        return inv.load_inventory(self.inventory_path)

    def devices_sync(self) -> list[Any]:
        return list(self.load_inventory_sync().devices.values())

    def device_sync(self, name: str) -> Any:
        return self.load_inventory_sync().get(name)

    def device_fields(self) -> list[str]:
        inv = self._inventory_module()
        return [f.name for f in fields(inv.Device)]

    def make_device(self, values: dict[str, Any]) -> Any:
        """Build and validate a Device from form values; raises NgbError one-liners."""
        inv = self._inventory_module()
        values = dict(values)
        name = str(values.pop("name", "") or "").strip()
        return inv.device_from_table(name, values)

    def save_device_sync(self, device: Any, replace: str | None = None) -> None:
        """Add ``device`` (or replace the one named ``replace``); validated, written atomically."""
        inventory = self.load_inventory_sync()
        if replace and replace != device.name and replace in inventory:
            inventory.remove(replace)
        inventory.add(device, replace_existing=bool(replace) and replace == device.name)
        inventory.save(self.inventory_path)

    def remove_device_sync(self, name: str) -> None:
        inventory = self.load_inventory_sync()
        inventory.remove(name)
        inventory.save(self.inventory_path)

    def transport_for(self, device: Any) -> Any:
        """LocalTransport for the local device, SshTransport (host keys verified) otherwise."""
        if getattr(device, "transport", "ssh") == "local":
            from ngb.devices.local import LocalTransport

            return LocalTransport(device)
        from ngb.devices.ssh import SshTransport

        return SshTransport(device, inventory=self.load_inventory_sync())

    async def probe(self, device: Any) -> dict[str, Any]:
        """Connect, deploy the agent and return its probe (raises TransportError/NgbError)."""
        from ngb.devices.deploy import probe_device

        transport = self.transport_for(device)
        try:
            await transport.connect()
            return await probe_device(transport, device)
        finally:
            await transport.close()

    async def fetch_host_key(self, device: Any) -> tuple[str, str, Any, str]:
        """``(key_type, fingerprint, key, status)``; status is trusted / unknown / changed."""
        import asyncio

        from ngb.devices.hostkeys import fetch_host_key, key_status

        key_type, fingerprint, key = await fetch_host_key(device)
        status = await asyncio.to_thread(key_status, device, key, self.known_hosts_files())
        return key_type, fingerprint, key, status

    def known_hosts_files(self) -> list[str] | None:
        from ngb.devices.hostkeys import known_hosts_files

        return known_hosts_files()

    def trust_sync(self, device: Any, key: Any) -> None:
        from ngb.devices.hostkeys import trust

        trust(device, key)

    # -- sweeps --------------------------------------------------------------------------------
    def presets(self) -> list[str]:
        from ngb.sweeps.spec import list_presets

        return list(list_presets())

    def load_sweep_sync(self, name_or_path: str) -> Any:
        from ngb.sweeps.spec import load_sweep

        return load_sweep(name_or_path)

    # -- store (blocking: call from thread workers) -----------------------------------------------
    def store(self) -> Any:
        if self._store is None:
            from ngb.sweeps.store import Store

            self._store = Store(self.db_path)
        return self._store

    def database_exists(self) -> bool:
        if self.db_path is not None:
            return self.db_path.exists()
        from ngb.devices.paths import get_paths

        return get_paths().database.exists()

    def runs_sync(self) -> list[dict[str, Any]]:
        if not self.database_exists():
            return []
        return list(self.store().runs())

    def run_devices_sync(self, run_id: str) -> list[dict[str, Any]]:
        return list(self.store().run_devices(run_id))

    def trials_sync(
        self, run_id: str | None = None, device: str | None = None
    ) -> list[dict[str, Any]]:
        if not self.database_exists():
            return []
        kwargs: dict[str, Any] = {}
        if device:
            kwargs["device"] = device
        return list(self.store().trials(run_id=run_id, **kwargs))

    def query_sync(self, sql: str, allow_write: bool = False) -> tuple[list[str], list[tuple]]:
        store = self.store()
        if allow_write:
            return store.query(sql, allow_write=True)
        return store.query(sql)

    def export_sync(self, dest: str | Path, fmt: str, table_or_sql: str) -> tuple[Path, int]:
        """Write a table or query to ``dest``; returns (path, rows written)."""
        dest = Path(dest).expanduser()
        rows = self.store().export(dest, fmt=fmt, table_or_sql=table_or_sql)
        return dest, int(rows or 0)

    # -- orchestrator ----------------------------------------------------------------------------
    def import_orchestrator_sync(self) -> None:
        """Import the orchestrator (and with it asyncssh, duckdb) off the event loop."""
        import ngb.sweeps.orchestrator  # noqa: F401
        import ngb.sweeps.store  # noqa: F401

    def orchestrator(self) -> Any:
        """The one Orchestrator of this console; construct it on the event loop's thread."""
        if self._orchestrator is None:
            from ngb.sweeps.orchestrator import Orchestrator

            self._orchestrator = Orchestrator(
                self.store(), self.load_inventory_sync(), **self.orchestrator_options
            )
        return self._orchestrator

    def has_orchestrator(self) -> bool:
        return self._orchestrator is not None

    async def start_run(self, sweep: Any, devices: list[str]) -> str:
        orch = self.orchestrator()
        # The inventory may have changed since the orchestrator was made (devices screen).
        orch.inventory = self.load_inventory_sync()
        return await orch.start(sweep, devices, isolate=self.isolate)

    async def close(self) -> None:
        """Stop following runs (their agents go on; the next start re-attaches) and flush."""
        if self._orchestrator is not None:
            await self._orchestrator.close()


def default_backend_from_env() -> Backend:
    """A backend honouring ``NGB_DB`` (tests) when no explicit paths are given."""
    return Backend(db_path=os.environ.get("NGB_DB") or None)
