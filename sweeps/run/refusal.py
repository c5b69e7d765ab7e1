"""A run that no device took never started: it is refused, said in one line, and not stored.

The orchestrator creates the run in the store before its devices answer; a device busy with a run
of another process (or unreachable) refuses it a moment later. ``ngb run`` and the console's Start
both go through ``start_or_refuse``: it waits until every device runs the sweep or gave up, and
when none took it, waits for the run to end, removes every row of it, and raises ``RunRefused``
(the caller prints its one line; nothing says "started", no failed run is left behind for the
Results screen to open on). A run that some device took is a run: the refusals of the others are
returned as lines to show beside "started". A Slurm slot busy with another run takes the run and
queues its job there (``device_claim``): its line (``queued: ...``) is returned beside them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ngb.core.base.errors import NgbError
from ngb.sweeps.run.device_claim import QUEUED
from ngb.sweeps.run.events import FINAL_STATES

if TYPE_CHECKING:
    from ngb.sweeps.run.orchestrator import Orchestrator, Subscription
    from ngb.sweeps.spec.sweep import Sweep
    from ngb.sweeps.store.database import Store


class RunRefused(NgbError):
    """No device started the run; it was removed from the store."""

    def __init__(self, run_id: str, refusals: list[str]) -> None:
        super().__init__("run refused: " + "; ".join(refusals))
        self.run_id = run_id
        self.refusals = refusals


async def until_started(
    orch: Orchestrator, run_id: str, sub: Subscription
) -> tuple[bool, list[str]]:
    """Wait until every device's agent runs or its device gave up: (any runs, the refusals and
    the lines of devices whose job was queued behind another run, ``queued: ...``).

    ``sub`` must have been subscribed before the run started, so no refusal is missed.
    """
    failures: list[str] = []
    while True:
        states = orch.device_states(run_id)
        if all(s["state"] in ("running", *FINAL_STATES) for s in states.values()):
            break
        item = await sub.__anext__()
        if item.run_id != run_id or item.kind != "connection":
            continue
        if item.state == "failed":
            message = item.message or "failed"
            failures.append(message if item.device in message else f"{item.device}: {message}")
        elif item.message.startswith(QUEUED):
            failures.append(item.message)
    started = any(s["state"] == "running" or s.get("done") for s in states.values())
    if not started and all(line.startswith(QUEUED) for line in failures):
        failures.append("no device started the run")
    return started, failures


def forget_run(store: Store, run_id: str) -> None:
    """Remove every row of a run that never started (each table that has a ``run_id``), in one
    transaction: a statement each through ``Store.query`` opened its own DuckDB instance and
    checkpointed twelve times (~0.7 s of CPU on the 2-core VM for every refused run)."""
    with store.transaction() as conn:
        tables = conn.execute(
            "SELECT DISTINCT table_name FROM information_schema.columns c "
            "JOIN information_schema.tables t USING (table_catalog, table_schema, table_name) "
            "WHERE column_name = 'run_id' AND table_type = 'BASE TABLE' "
            "AND table_catalog = current_database() AND table_schema = 'main'"
        ).fetchall()
        for (table,) in tables:
            conn.execute(f'DELETE FROM "{table}" WHERE run_id = ?', [run_id])  # noqa: S608 - names from the catalogue


async def start_or_refuse(
    orch: Orchestrator,
    store: Store,
    sub: Subscription,
    *,
    sweep: Sweep,
    device_names: str | Iterable[str],
    keep: bool = False,
    isolate: str | None = None,
) -> tuple[str, list[str]]:
    """Start a run and wait until it runs: (run id, the devices' refusals), or ``RunRefused``.

    ``sub``: a subscription taken before this call (the caller may go on reading it).
    """
    run_id = await orch.start(sweep, device_names, keep=keep, isolate=isolate)
    started, failures = await until_started(orch, run_id, sub)
    if not started:
        await orch.wait(run_id)
        await asyncio.to_thread(forget_run, store, run_id)
        raise RunRefused(run_id, failures)
    return run_id, failures
