"""Every run at a glance, for the console's Runs view: the store's runs, what this process
follows live, and (``probe``) what the devices themselves say is running on them.

``list_runs`` merges three sources, newest run first:

- the store: every run ever recorded, with its status and per-device rows;
- the orchestrator's live runs: their device states and counts replace the stored ones, and
  ``followed`` is True (their events arrive through ``Orchestrator.subscribe``);
- with ``probe``: each device of the inventory is asked who holds it (``device_claim``). A run
  holding a device but missing from the store (started from another workstation, or another
  results file) is listed too, with ``in_store=False``; a stored run's devices get ``agent``
  ("running" when their agent holds the device, else "not running", or why the device could
  not be asked). Unreachable devices cost at most one connect timeout, concurrently.

What to do with a listed run: ``Orchestrator.attach(run_id)`` follows it (also after a crash),
``Orchestrator.cancel(run_id)`` stops it, ``Orchestrator.check(run_id)`` asks its agents.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from ngb.core.base.errors import NgbError, first_line
from ngb.devices.inventory import Device
from ngb.devices.transport import TransportError
from ngb.sweeps.rows import StoreRow, integer
from ngb.sweeps.run import device_claim
from ngb.sweeps.run.device_claim import Holder
from ngb.sweeps.run.device_links import DeviceLinks
from ngb.sweeps.run.state import Run
from ngb.sweeps.store.result_store import ResultStore

#: runs a blocking store read off the event loop (``RunWriter.store_call``)
StoreCall = Callable[[Callable[[], list[StoreRow]]], Awaitable[list[StoreRow]]]


@dataclass(frozen=True)
class DeviceOverview:
    device: str
    state: str  # pending, running, finished, failed, detached... (run_events states)
    done: int = 0
    failed: int = 0
    total: int | None = None
    message: str = ""
    agent: str | None = None  # probe only: running, not running, or why it was not asked


@dataclass(frozen=True)
class RunOverview:
    run_id: str
    sweep_name: str
    status: str  # running, finished, failed, cancelled, detached; "elsewhere" if not in store
    created_at: datetime | None = None  # UTC, from the store
    followed: bool = False  # this process follows it live
    in_store: bool = True
    devices: tuple[DeviceOverview, ...] = ()

    @property
    def live(self) -> bool:
        """Something of it runs now (followed here, or an agent answered on a device)."""
        return self.followed or any(d.agent == "running" for d in self.devices)


async def list_runs(
    store: ResultStore,
    store_call: StoreCall,
    live: Mapping[str, Run],
    links: DeviceLinks,
    devices: list[Device],
    *,
    probe: bool = False,
) -> list[RunOverview]:
    runs = await store_call(store.runs)
    rows = await store_call(store.run_devices)
    per_run: dict[str, list[StoreRow]] = {}
    for row in rows:
        per_run.setdefault(str(row["run_id"]), []).append(row)
    out = [
        _from_store(info, per_run.get(str(info["run_id"]), []), live.get(str(info["run_id"])))
        for info in runs
    ]
    for run_id, run in live.items():  # followed here but not (yet) readable from the store
        if run_id not in {r.run_id for r in out}:
            out.insert(0, _from_store({"run_id": run_id, "sweep_name": run.sweep_name,
                                       "status": run.status}, [], run))  # fmt: skip
    if probe:
        out = _with_holders(out, await holders(links, devices))
    return out


async def holders(links: DeviceLinks, devices: list[Device]) -> dict[str, Holder | str | None]:
    """Who holds each device: a ``Holder``, None when free, or why it could not be asked."""

    async def ask(device: Device) -> tuple[str, Holder | str | None]:
        try:
            res = await links.run_once(device, None, device_claim.who_argv(device.workdir))
            return device.name, device_claim.parse_answer(device.name, res.stdout)
        except (NgbError, TransportError, OSError) as exc:
            return device.name, f"unreachable: {first_line(exc)}"

    return dict(await asyncio.gather(*(ask(d) for d in devices)))


def _from_store(
    info: Mapping[str, object], rows: Sequence[Mapping[str, object]], run: Run | None
) -> RunOverview:
    devices = {
        str(r["device"]): DeviceOverview(
            str(r["device"]),
            str(r.get("state") or ""),
            integer(r.get("n_done")) or 0,
            integer(r.get("n_failed")) or 0,
            integer(r.get("n_trials")),
            str(r.get("message") or ""),
        )  # fmt: skip
        for r in rows
    }
    followed = run is not None and not run.finished.is_set()
    if run is not None and followed:
        for name, d in run.devices.items():
            devices[name] = DeviceOverview(name, d.state, d.done, d.failed, len(d.keys) or None,
                                           d.error or d.current)  # fmt: skip
    created = info.get("created_at")
    return RunOverview(
        run_id=str(info["run_id"]),
        sweep_name=str(info.get("sweep_name") or ""),
        status=run.status if followed and run is not None else str(info.get("status") or ""),
        created_at=created if isinstance(created, datetime) else None,
        followed=followed,
        devices=tuple(devices[n] for n in sorted(devices)),
    )


def _with_holders(
    runs: list[RunOverview], held: Mapping[str, Holder | str | None]
) -> list[RunOverview]:
    known = {r.run_id for r in runs}
    out = []
    for run in runs:
        devs = []
        for d in run.devices:
            h = held.get(d.device, "not in the inventory")
            if isinstance(h, str):
                agent = h
            else:
                agent = "running" if h is not None and h.run_id == run.run_id else "not running"
            devs.append(replace(d, agent=agent))
        out.append(replace(run, devices=tuple(devs)))
    elsewhere: dict[str, list[DeviceOverview]] = {}
    for device, h in held.items():
        if isinstance(h, Holder) and h.run_id not in known:
            elsewhere.setdefault(h.run_id, []).append(
                DeviceOverview(device, "running", message=h.describe(), agent="running")
            )
    extra = [RunOverview(rid, "", "elsewhere", in_store=False, devices=tuple(devs))
             for rid, devs in sorted(elsewhere.items())]  # fmt: skip
    return extra + out
