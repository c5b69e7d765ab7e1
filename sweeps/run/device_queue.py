"""A device handed out by a batch scheduler (``Transport.queue``, a Slurm slot): what the run's
device side adds there. Every function is a no-op for a device without a queue.

- While the agent's event log is followed, the job's queue state (``PENDING (Resources)``,
  ``RUNNING on node1@gpu, 1:59:10 left``) is polled and sent on when it changes, as a log event
  (the console's queue line) and, while no trial is in flight, as the device's message (the
  ``run_devices`` row: ``ngb status``).
- Each result is named by the node that ran it (``amend``, ``stamped``:
  ``ngb.devices.slurm_nodes``), from the line each job writes on its node into the run dir, so
  it is stored as ``node@partition`` whenever it is read (events, checkpoint, a resume).
- A job the scheduler ends (time limit, preemption, someone's ``scancel``) signals the agent,
  which stops as if ngb had cancelled it. That is not ngb's cancel: its ``run_done`` is not
  passed on (``foreign_cancel``); what the end means for the trial in flight and the slot (fail
  it, or run it again in a new allocation) is ``ngb.sweeps.run.job_end``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

from ngb.core.base.errors import NgbError, first_line
from ngb.core.records import events as ev
from ngb.devices import protocol as remote
from ngb.devices import slurm, slurm_nodes
from ngb.devices.inventory import Inventory
from ngb.devices.transport import TransportError
from ngb.sweeps.rows import mapping
from ngb.sweeps.run import job_end
from ngb.sweeps.run.job_end import queue_of
from ngb.sweeps.run.state import DeviceRun

POLL_S = 3.0
DRIFT_S = 15.0  # a running job's time left is said again when off the counted-down one by more
STORED_AS = "stored_as"  # on a live sample event: the device name its trial's result gets
QUEUE_PREFIX = "slurm: "  # the queue state's messages (the CLI's progress shows them)


async def foreign_cancel(dev: DeviceRun, event: dict[str, object]) -> bool:
    """A ``run_done`` saying "cancelled" that ngb did not ask for (here or in another process:
    the cancel marker) and whose job the scheduler ended: the scheduler's signal, not a cancel."""
    queue = queue_of(dev)
    if queue is None or event.get("type") != ev.RUN_DONE or not event.get("cancelled"):
        return False
    if await job_end.ngb_cancelled(dev):
        return False
    with contextlib.suppress(TransportError, NgbError, OSError):
        return await queue.ended(dev.run_id, settle=5.0) is not None
    return False


async def poll(dev: DeviceRun, say: Callable[[str], None] | None) -> None:
    """Say the job's queue state (``slurm: PENDING (Resources)``) when it changes, as the
    device's connection message (the console keeps it on a line of its own) and, while no trial
    is in flight, as its current line (the ``run_devices`` row); runs until cancelled.

    A running job's time left changes at every poll; the console counts it down itself, so it
    is said again only when the scheduler's figure leaves that count by ``DRIFT_S`` (a
    suspended job, a changed limit), not every few seconds into the log."""
    queue = queue_of(dev)
    if queue is None or say is None:
        return
    loop = asyncio.get_running_loop()
    last, said_at = "", 0.0
    while True:
        with contextlib.suppress(TransportError, NgbError, OSError):
            text = await queue.state(dev.run_id)
            line = f"{QUEUE_PREFIX}{text}" if text else ""
            if line and line != last and _news(line, last, loop.time() - said_at):
                if not dev.current or dev.current == last:  # no trial in flight: say why
                    dev.current = line
                last, said_at = line, loop.time()
                say(line)
        await asyncio.sleep(POLL_S)  # read at each poll: a test shortens it


def _news(line: str, last: str, since: float) -> bool:
    """Whether a queue line says more than ``last`` did ``since`` seconds ago, counted down."""
    if slurm.steady_part(line) != slurm.steady_part(last):
        return True
    now, then = slurm.time_left_s(line), slurm.time_left_s(last)
    return now is None or then is None or abs((then - since) - now) > DRIFT_S


async def amend(dev: DeviceRun, event: dict[str, object]) -> dict[str, object] | None:
    """An agent event as the workstation takes it from a scheduler's device: a trial failed by
    the job's end says so, or is withheld (None: ``job_end.amend_failure``), and a result names
    the node that ran it (``ngb.devices.slurm_nodes``). A new agent start (a new job) reads the
    node lines again."""
    if queue_of(dev) is None:
        return event
    kind = event.get("type")
    if kind == ev.RUN_STARTED:
        _NODES.pop((dev.run_id, dev.name), None)
        job_end.forget_job(dev)
    if kind == ev.TRIAL_FAILED:
        amended = await job_end.amend_failure(dev, event)
        if amended is None:
            return None
        event = amended
    result = event.get("result")
    if kind in (ev.TRIAL_DONE, ev.TRIAL_FAILED) and isinstance(result, dict):
        return {**event, "result": await _named(dev, result)}
    if kind in (ev.CPU, ev.TUNING):  # a trial's live samples: stored beside its result
        facts = _NODES.get((dev.run_id, dev.name))
        facts = facts if facts is not None else await _read_facts(dev)  # once per job
        if facts:  # the agent runs in the newest job
            newest = max(facts, key=lambda f: (f.started, f.job_id))
            return {**event, STORED_AS: newest.device(dev.name)}
    return event


async def stamped(
    dev: DeviceRun, checkpoint: dict[str, dict[str, object]]
) -> dict[str, dict[str, object]]:
    """The checkpoint's results, each named by the node that ran it (see ``amend``)."""
    if queue_of(dev) is None or not checkpoint:
        return checkpoint
    _NODES.pop((dev.run_id, dev.name), None)  # read afresh: a job may have started since
    return {key: await _named(dev, record) for key, record in checkpoint.items()}


# (run, slot) -> its jobs' node lines, read from the run dir (dropped when a job may have begun)
_NODES: dict[tuple[str, str], list[slurm_nodes.NodeFact]] = {}


async def _named(dev: DeviceRun, record: dict[str, object]) -> dict[str, object]:
    """``record`` stamped with its node (``slurm_nodes.stamp``); as it is when no job line
    matches (a run started before ngb recorded nodes: it stays under the slot's name)."""
    facts = _NODES.get((dev.run_id, dev.name))
    fact = slurm_nodes.fact_for(facts, record) if facts is not None else None
    if fact is None:  # not read yet, or a job this list does not know yet
        fact = slurm_nodes.fact_for(await _read_facts(dev), record)
    if fact is not None:
        exclusive = bool((dev.device.slurm or {}).get("exclusive", True))
        record = slurm_nodes.stamp(record, fact, dev.name, exclusive)
    retries = await job_end.killed_retries(dev, str(record.get("key") or ""))
    if retries:  # the scheduler killed it before: how many times it ran again is stored with it
        extra = mapping(record.get("extra"))
        job = {**mapping(extra.get("slurm")), "killed_retries": retries}
        record = {**record, "extra": {**extra, "slurm": job}}
    return record


async def _read_facts(dev: DeviceRun) -> list[slurm_nodes.NodeFact]:
    """The slot's node lines, read from its run dir (and kept until a job may have begun)."""
    transport, paths = dev.transport, dev.paths
    if transport is None or paths is None:
        return []
    path = f"{paths.run_dir}/{slurm_nodes.FACTS_FILE}"
    res = await transport.run(remote.read_file_argv(path), timeout=60)
    if res.returncode not in (0, 3):  # 3: no such file; else never guess a name
        raise TransportError(f"{dev.name}: could not read {slurm_nodes.FACTS_FILE}")
    facts = slurm_nodes.parse_facts(res.stdout if res.returncode == 0 else "")
    _NODES[(dev.run_id, dev.name)] = facts
    return facts


async def cancel(dev: DeviceRun) -> bool:
    """ngb's cancel through the scheduler (``scancel``); False: no live job, signal the agent.

    A marker in the run dir says first that it is ngb's cancel, so a process following the run
    elsewhere ends the device as cancelled instead of taking the scheduler's end for a kill."""
    queue = queue_of(dev)
    if queue is None or dev.paths is None or dev.transport is None:
        return False
    marker = f"{dev.paths.run_dir}/{job_end.CANCEL_MARKER}"
    await _checked(dev, ["touch", "--", marker], "mark the cancel")
    return await queue.cancel(dev.run_id, dev.paths.run_dir)


async def job_states(inventory: Inventory, run_id: str, names: Sequence[str]) -> dict[str, str]:
    """The queue state of each named device of a run that a scheduler hands out (``ngb status``:
    asked live, so it holds while no workstation follows the run); why not, in a few words."""
    from ngb.devices.ssh import make_transport

    async def one(name: str) -> tuple[str, str]:
        try:
            found = inventory.resolve(name)
        except NgbError:
            return name, ""
        if len(found) != 1 or found[0].transport != "slurm":
            return name, ""
        transport = make_transport(found[0], inventory=inventory)
        try:
            await transport.connect()
            queue = transport.queue
            return name, (await queue.state(run_id) if queue else "") or "no job"
        except (NgbError, TransportError, OSError) as exc:
            return name, f"squeue: {first_line(exc)}"
        finally:
            with contextlib.suppress(Exception):
                await transport.close()

    return {name: text for name, text in await asyncio.gather(*map(one, names)) if text}


async def _checked(dev: DeviceRun, argv: list[str], what: str) -> None:
    assert dev.transport is not None
    res = await dev.transport.run(argv, timeout=60)
    if res.returncode != 0:
        raise TransportError(f"{dev.name}: could not {what} in the run directory")
