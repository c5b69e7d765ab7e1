"""The console's one door to the layers below (inventory, host keys, sweeps, store, orchestrator).

Screens talk to this facade only, for three reasons: every heavy or I/O-bound module
(``duckdb``, ``asyncssh``, the orchestrator) is imported lazily here, so ``ngb-tui`` paints its
first frame without them; the ``--db`` / ``--inventory`` overrides live in one place; and the
blocking calls are plainly marked (``*_sync``: run them in a thread worker, never on the event
loop; ``async``: await them from an async worker).

Every result is typed (the lower layers' own classes under ``TYPE_CHECKING``, ``TypedDict`` rows
for what the store returns, small dataclasses for compound answers), so a screen that reads a
field the store does not have is a type error, not a blank cell.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, cast

if TYPE_CHECKING:  # the real classes, imported lazily at run time
    import asyncssh
    from ngb.devices.inventory import Device, Inventory
    from ngb.devices.transport import Transport
    from ngb.sweeps.run.orchestrator import Orchestrator
    from ngb.sweeps.spec.sweep import Sweep
    from ngb.sweeps.store.database import Store
    from ngb.sweeps.store.snapshot import QueryJob


class RunRow(TypedDict, total=False):
    """One row of the store's ``runs`` table (the columns the console reads)."""

    run_id: str
    sweep_name: str
    devices: list[str] | str  # device names (JSON text in older stores)
    n_trials: int
    status: str
    created_at: datetime | None
    updated_at: datetime | None
    finished_at: datetime | None


class RunDeviceRow(TypedDict, total=False):
    """One row of ``run_devices``: a device's part of a run."""

    run_id: str
    device: str
    state: str
    n_trials: int
    n_done: int
    n_failed: int
    n_skipped: int


class TrialRow(TypedDict, total=False):
    """One row of ``trials`` as ``Store.trials`` gives it (the columns the console reads; SQL NULL
    is None) and, on the Results screen, its per-repetition throughputs (``samples``). The same
    rows go to ``ngb.sweeps.report.derived``, which reads its own columns of them."""

    run_id: str
    device: str
    key: str
    model: str
    family: str | None
    compiler: str
    batch: int
    depth: int | None  # None: a model without a depth axis (timm models)
    width: int | None
    optimisation: str | None
    status: str
    error: str | None
    repetitions: int | None
    throughput_mean: float | None  # None for a failed trial
    throughput_std: float | None
    throughput_cov: float | None
    unstable: bool | None
    verdict: str | None  # VALID | INVALID; None for failed trials and older rows
    disturbed: bool | None
    samples: list[float]


class ProbeRow(TypedDict, total=False):
    """The newest stored probe of a device (hardware and software, the README's Tables I/II)."""

    device: str
    probed_at: datetime


@dataclass(frozen=True)
class HostKeyOffer:
    """The key a device offers, and whether it is trusted / unknown / changed."""

    key_type: str
    fingerprint: str
    key: asyncssh.SSHKey  # handed back to ``trust_sync`` unchanged
    status: str


#: one row of a query's answer: DuckDB values of whatever SQL types the query selects (shown
#: as text, numbers right-aligned), so ``object``
SqlRow = tuple[object, ...]


@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    rows: list[SqlRow]


class OrchestratorOptions(TypedDict, total=False):
    """Keywords of ``Orchestrator(...)`` a backend passes on (tests: a transport factory,
    shorter timeouts)."""

    max_handshakes: int
    connect_timeout: float
    keepalive: float
    backoff: tuple[float, float]
    reconnect_window: float
    connect_attempts: int
    max_restarts: int
    flush_interval: float
    local_flush_interval: float
    offset_every: float
    queue_size: int
    transport_factory: Callable[[Device], Transport] | None
    watchdog: float
    seed: int | None


@dataclass(frozen=True)
class ExportResult:
    path: Path
    rows: int


#: samples of one trial: (run_id, device, key) -> per-repetition throughputs
SampleMap = dict[tuple[str, str, str], list[float]]
#: variant -> depth -> ``ngb advise``'s lines for it (``Backend.advice_sync``)
Advice = dict[str, dict[int, str]]


class Backend:
    """Shared by every screen of one ``NgbApp``."""

    def __init__(
        self,
        db_path: str | Path | None = None,
        inventory_path: str | Path | None = None,
        *,
        orchestrator_options: OrchestratorOptions | None = None,
        isolate: str | None = None,
    ) -> None:
        self.db_path = Path(db_path).expanduser() if db_path else None
        self.inventory_path = Path(inventory_path).expanduser() if inventory_path else None
        # Extra Orchestrator(...) keywords (tests: transport_factory, shorter timeouts) and the
        # agent's isolation mode (None = the agent's default: one child process per trial).
        self.orchestrator_options = OrchestratorOptions(**(orchestrator_options or {}))
        self.isolate = isolate
        self._orchestrator: Orchestrator | None = None
        self._store: Store | None = None
        self._queries: set[QueryJob] = set()  # SQL console queries in flight (close stops them)
        # Called once with the orchestrator when it is created (the app subscribes to its events
        # there, before any run starts, so no early event is missed).
        self.on_orchestrator: Callable[[Orchestrator], None] | None = None

    # -- inventory -----------------------------------------------------------------------------
    def load_inventory_sync(self) -> Inventory:
        """The inventory (with the built-in ``localhost``); raises NgbError on a bad file."""
        from ngb.devices.inventory import load_inventory

        return load_inventory(self.inventory_path)

    def devices_sync(self) -> list[Device]:
        return list(self.load_inventory_sync().devices.values())

    def device_sync(self, name: str) -> Device:
        return self.load_inventory_sync().get(name)

    def device_fields(self) -> list[str]:
        from ngb.devices.inventory import Device

        return [f.name for f in fields(Device)]

    def make_device(self, values: Mapping[str, object]) -> Device:
        """Build and validate a Device from form values; raises NgbError one-liners."""
        from ngb.devices.inventory import device_from_table

        values = dict(values)
        name = str(values.pop("name", "") or "").strip()
        return device_from_table(name, values)

    def save_device_sync(self, device: Device, replace: str | None = None) -> None:
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

    def transport_for(self, device: Device) -> Transport:
        """LocalTransport for the local device, SshTransport (host keys verified) otherwise."""
        if getattr(device, "transport", "ssh") == "local":
            from ngb.devices.local import LocalTransport

            return LocalTransport(device)
        from ngb.devices.ssh import SshTransport

        return SshTransport(device, inventory=self.load_inventory_sync())

    async def probe(self, device: Device) -> dict[str, object]:
        """Connect, deploy the agent and return its probe, the agent's JSON object
        (``ngb.devices.probe.Probe`` from a current agent; raises TransportError/NgbError)."""
        from ngb.devices.agent_remote import probe_device

        transport = self.transport_for(device)
        try:
            await transport.connect()
            return dict(await probe_device(transport, device))
        finally:
            await transport.close()

    async def fetch_host_key(self, device: Device) -> HostKeyOffer:
        import asyncio

        from ngb.devices.hostkeys import fetch_host_key, key_status

        key_type, fingerprint, key = await fetch_host_key(device)
        status = await asyncio.to_thread(key_status, device, key, self.known_hosts_files())
        return HostKeyOffer(str(key_type), str(fingerprint), key, str(status))

    def known_hosts_files(self) -> list[str] | None:
        from ngb.devices.hostkeys import known_hosts_files

        found = known_hosts_files()
        return None if found is None else [str(f) for f in found]

    def trust_sync(self, device: Device, key: asyncssh.SSHKey) -> None:
        from ngb.devices.hostkeys import trust

        trust(device, key)

    # -- sweeps --------------------------------------------------------------------------------
    def presets(self) -> list[str]:
        from ngb.sweeps.spec.sweep import list_presets

        return list(list_presets())

    def load_sweep_sync(self, name_or_path: str) -> Sweep:
        from ngb.sweeps.spec.sweep import load_sweep

        return load_sweep(name_or_path)

    # -- store (blocking: call from thread workers) -----------------------------------------------
    def store(self) -> Store:
        if self._store is None:
            from ngb.sweeps.store.database import Store

            self._store = Store(self.db_path)
        return self._store

    def database_exists(self) -> bool:
        if self.db_path is not None:
            return self.db_path.exists()
        from ngb.devices.paths import get_paths

        return get_paths().database.exists()

    def runs_sync(self) -> list[RunRow]:
        if not self.database_exists():
            return []
        return cast("list[RunRow]", list(self.store().runs()))

    def run_devices_sync(self, run_id: str) -> list[RunDeviceRow]:
        return cast("list[RunDeviceRow]", list(self.store().run_devices(run_id)))

    def trials_sync(self, run_id: str | None = None, device: str | None = None) -> list[TrialRow]:
        if not self.database_exists():
            return []
        rows = self.store().trials(run_id=run_id, device=device or None)
        return cast("list[TrialRow]", list(rows))

    def advice_sync(self, run_id: str, device: str | None = None) -> Advice:
        """Variant (the Results screen's model choice) -> depth -> ``ngb advise``'s answer for
        the run (objective throughput, no constraints), one line per model and device: the
        answer the CLI prints (``ngb.sweeps.report.advise``), with prices from this console's
        inventory. A block's depths are its own models to ``advise`` (``conv16x1``,
        ``conv16x2``), kept apart so the screen can show the depth its charts show."""
        if not self.database_exists():
            return {}
        from ngb.devices.pricing import price_of
        from ngb.sweeps.report import advise
        from ngb.sweeps.report.data import ReportData

        inventory = self.load_inventory_sync()
        prices = {d.name: p for d in inventory if (p := price_of(inventory, d.name)) is not None}
        data = ReportData(self.store(), run_id=run_id, device=device, prices=prices)
        trials = data.trials()
        devices = sorted({str(r["device"]) for r in trials})
        variant = {
            str(r["label"]): f"{r['model']} w{r['width']}" if r.get("width") else str(r["model"])
            for r in trials
        }
        depth = {str(r["label"]): int(r.get("depth") or 1) for r in trials}
        limits = advise.Constraints()
        out: dict[str, dict[int, list[str]]] = {}
        for model in advise.models_in_scope(data):
            for a in advise.advise(data, [model], devices, limits):
                line = "advise: " + "; ".join(text.strip() for text in a.lines)
                out.setdefault(variant[model], {}).setdefault(depth[model], []).append(line)
        return {v: {d: "\n".join(lines) for d, lines in by.items()} for v, by in out.items()}

    def samples_sync(self, run_id: str, device: str | None = None) -> SampleMap:
        """Per-repetition throughputs of a run's trials (what the significance test compares)."""
        if not self.database_exists():
            return {}
        return self.store().repetition_throughputs(run_id, device)

    def run_results_sync(
        self, run_id: str, device: str | None = None
    ) -> tuple[list[RunDeviceRow], list[TrialRow], SampleMap]:
        """A run's devices, trials and repetitions (``device``: one device's), read on one
        connection (the Results screen's poll)."""
        if not self.database_exists():
            return [], [], {}
        store = self.store()
        with store.one_connection():
            return (
                self.run_devices_sync(run_id),
                self.trials_sync(run_id=run_id, device=device),
                self.samples_sync(run_id, device),
            )

    def probes_sync(self) -> dict[str, dict[str, object]]:
        """The newest stored probe of each device (empty without a database)."""
        if not self.database_exists():
            return {}
        newest: dict[str, dict[str, object]] = {}
        for row in self.store().probes():
            newest[str(row.get("device"))] = dict(row)  # ordered by probed_at: the last wins
        return newest

    def query_job(
        self, sql: str, *, allow_write: bool = False, timeout_s: float | None = None
    ) -> QueryJob:
        """A cancellable query on its own connection (a copy of the store unless it writes)."""
        from ngb.sweeps.store.snapshot import QueryJob

        return QueryJob(self.store(), sql, allow_write=allow_write, timeout_s=timeout_s)

    def run_query_sync(self, job: QueryJob) -> QueryResult:
        """Run ``job`` (a thread worker); ``cancel_queries`` or ``job.cancel()`` stop it."""
        self._queries.add(job)
        try:
            columns, rows = job.run()
        finally:
            self._queries.discard(job)
        return QueryResult(list(columns), [tuple(r) for r in rows])

    def query_sync(self, sql: str, allow_write: bool = False) -> QueryResult:
        return self.run_query_sync(self.query_job(sql, allow_write=allow_write))

    def cancel_queries(self) -> None:
        for job in list(self._queries):
            job.cancel()

    def table_columns_sync(self) -> dict[str, list[str]]:
        """Tables and views of the database with their columns (the SQL editor completes them)."""
        if not self.database_exists():
            return {}
        _, rows = self.store().query(
            "SELECT table_name, column_name FROM information_schema.columns "
            "ORDER BY table_name, ordinal_position"
        )
        out: dict[str, list[str]] = {}
        for table, column in rows:
            out.setdefault(str(table), []).append(str(column))
        return out

    def export_sync(self, dest: str | Path, fmt: str, table_or_sql: str) -> ExportResult:
        """Write a table or query to ``dest``."""
        path = Path(dest).expanduser()
        from ngb.sweeps.store.snapshot import export

        rows = export(self.store(), path, fmt=fmt, table_or_sql=table_or_sql)
        return ExportResult(path, int(rows or 0))

    # -- orchestrator ----------------------------------------------------------------------------
    def import_orchestrator_sync(self) -> None:
        """Import the orchestrator (and with it asyncssh, duckdb) off the event loop."""
        import ngb.sweeps.run.orchestrator  # noqa: F401
        import ngb.sweeps.store.database  # noqa: F401
        import pyarrow

        # pyarrow's first array imports pandas (0.3 s of CPU): here, before the run, rather than
        # in the run's first ingest, where it would land on the cores the trials measure.
        pyarrow.array([0])

    def orchestrator(self) -> Orchestrator:
        """The one Orchestrator of this console; construct it on the event loop's thread."""
        if self._orchestrator is None:
            from ngb.sweeps.run.orchestrator import Orchestrator

            self._orchestrator = Orchestrator(
                self.store(), self.load_inventory_sync(), **self.orchestrator_options
            )
            if self.on_orchestrator is not None:
                self.on_orchestrator(self._orchestrator)
        return self._orchestrator

    def has_orchestrator(self) -> bool:
        return self._orchestrator is not None

    async def start_run(self, sweep: Sweep, devices: list[str]) -> tuple[str, list[str]]:
        """Start and wait until the devices took it: (run id, the refusals of devices that did
        not). Raises ``RunRefused`` (an NgbError) when none took it: the run is then not stored.
        """
        from ngb.sweeps.run.refusal import start_or_refuse

        orch = self.orchestrator()
        # The inventory may have changed since the orchestrator was made (devices screen).
        orch.inventory = self.load_inventory_sync()
        sub = orch.subscribe()  # before the start: no refusal is missed
        try:
            return await start_or_refuse(
                orch, self.store(), sub, sweep=sweep, device_names=devices, isolate=self.isolate
            )
        finally:
            sub.close()

    async def close(self) -> None:
        """Stop following runs (their agents go on; the next start re-attaches) and flush."""
        self.cancel_queries()  # a query in flight ends now, not after the console has gone
        if self._orchestrator is not None:
            await self._orchestrator.close()


def default_backend_from_env() -> Backend:
    """A backend honouring ``NGB_DB`` (tests) when no explicit paths are given."""
    return Backend(db_path=os.environ.get("NGB_DB") or None)
