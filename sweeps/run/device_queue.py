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
  passed on (``foreign_cancel``), and once the agent is gone its trial in flight is failed with
  the scheduler's reason, appended to the checkpoint on the device (so a resumed agent neither
  loses nor repeats it), and the slot fails with that reason instead of queueing again at once
  (``refuse_restart``). ``ngb attach`` (the resume) then asks for a new allocation: a marker file
  per ended job says its trial was already failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Sequence

from ngb.core import events as ev
from ngb.core.errors import NgbError, first_line
from ngb.core.types import TrialResult, TrialSpec
from ngb.devices import protocol as remote
from ngb.devices import slurm, slurm_nodes
from ngb.devices.inventory import Inventory
from ngb.devices.transport import JobQueue, TransportError
from ngb.sweeps.run.state import DeviceRun

POLL_S = 3.0
DRIFT_S = 15.0  # a running job's time left is said again when off the counted-down one by more
CANCEL_MARKER = "ngb-cancel"  # in the run dir: ngb's own cancel went through the scheduler
STORED_AS = "stored_as"  # on a live sample event: the device name its trial's result gets
QUEUE_PREFIX = "slurm: "  # the queue state's messages (the CLI's progress shows them)
_LAST_STARTED = 'test -f "$1" || exit 0; grep -F trial_started "$1" | tail -n 1'
_APPEND = 'printf "%s\\n" "$2" >> "$1"'


def queue_of(dev: DeviceRun) -> JobQueue | None:
    return dev.transport.queue if dev.transport is not None else None


async def foreign_cancel(dev: DeviceRun, event: dict[str, object]) -> bool:
    """A ``run_done`` saying "cancelled" that ngb did not ask for (here or in another process:
    the cancel marker) and whose job the scheduler ended: the scheduler's signal, not a cancel."""
    queue = queue_of(dev)
    if queue is None or event.get("type") != ev.RUN_DONE or not event.get("cancelled"):
        return False
    if dev.cancel_requested or dev.cancel_sent or await _ngb_cancelled(dev):
        return False
    with contextlib.suppress(TransportError, NgbError, OSError):
        return await queue.ended(dev.run_id, settle=5.0) is not None
    return False


async def _ngb_cancelled(dev: DeviceRun) -> bool:
    """Whether an ``ngb cancel`` (of any process) went through the scheduler for this run."""
    if dev.transport is None or dev.paths is None:
        return False
    argv = remote.read_file_argv(f"{dev.paths.run_dir}/{CANCEL_MARKER}")
    if (await dev.transport.run(argv, timeout=60)).returncode != 0:
        return False
    dev.cancel_requested = True  # ends as cancelled, never queued again
    return True


async def poll(dev: DeviceRun, say: Callable[[str], None] | None, every: float = POLL_S) -> None:
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
        await asyncio.sleep(every)


def _news(line: str, last: str, since: float) -> bool:
    """Whether a queue line says more than ``last`` did ``since`` seconds ago, counted down."""
    if slurm.steady_part(line) != slurm.steady_part(last):
        return True
    now, then = slurm.time_left_s(line), slurm.time_left_s(last)
    return now is None or then is None or abs((then - since) - now) > DRIFT_S


async def scheduler_end(dev: DeviceRun, checkpoint_text: str) -> str:
    """After the agent vanished: if the scheduler ended its job, fail the trial in flight with
    the reason in the checkpoint (once per job) and return the checkpoint as it now is."""
    queue, transport, paths = queue_of(dev), dev.transport, dev.paths
    if queue is None or transport is None or paths is None:
        return checkpoint_text
    if dev.run_done is not None and not dev.run_done.get("cancelled"):
        return checkpoint_text  # the agent finished its list: no job was cut short
    if dev.cancel_requested or dev.cancel_sent or await _ngb_cancelled(dev):
        return checkpoint_text
    ended = await queue.ended(dev.run_id)
    if ended is None:
        return checkpoint_text
    job_id, why = ended
    marker = f"{paths.run_dir}/slurm-ended.{job_id}"
    if (await transport.run(remote.read_file_argv(marker), timeout=60)).returncode == 0:
        return checkpoint_text  # seen before (a resume): that trial is failed already
    done = remote.parse_checkpoint(checkpoint_text)
    res = await transport.run(["sh", "-c", _LAST_STARTED, "ngb-last", paths.events], timeout=60)
    started = remote.parse_jsonl(res.stdout)
    key = str(started[-1].get("key")) if started else ""
    prior = done.get(key)
    line = ""
    if key and (prior is None or _killed(prior)):  # lost, or failed by the job's signal
        trials = await transport.run(remote.read_file_argv(paths.trials), timeout=60)
        specs = [TrialSpec.from_dict(d) for d in remote.parse_jsonl(trials.stdout)]
        spec = next((s for s in specs if s.key == key), None)
        if spec is not None:
            error = why if prior is None else f"{why} ({prior.get('error')})"
            result = TrialResult.failed(spec, error, "error", finished_at=time.time())
            result.extra["slurm"] = {"job": job_id}  # its node: that job's (slurm_nodes)
            line = json.dumps({**result.to_dict(), "run_id": dev.run_id}, sort_keys=True)
            await _checked(dev, ["sh", "-c", _APPEND, "ngb-append", paths.checkpoint, line],
                           "record the failed trial")  # fmt: skip
    await _checked(dev, ["sh", "-c", _APPEND, "ngb-mark", marker, why], "mark the job as seen")
    queue.ended_by_scheduler = why
    return checkpoint_text + (line + "\n" if line else "")


async def amend(dev: DeviceRun, event: dict[str, object]) -> dict[str, object]:
    """An agent event as the workstation takes it from a scheduler's device: a trial failed by
    the job's end says so (``amend_failure``), and a result names the node that ran it
    (``ngb.devices.slurm_nodes``). A new agent start (a new job) reads the node lines again."""
    if queue_of(dev) is None:
        return event
    kind = event.get("type")
    if kind == ev.RUN_STARTED:
        _NODES.pop((dev.run_id, dev.name), None)
    if kind == ev.TRIAL_FAILED:
        event = await amend_failure(dev, event)
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
    if fact is None:
        return record
    exclusive = bool((dev.device.slurm or {}).get("exclusive", True))
    return slurm_nodes.stamp(record, fact, dev.name, exclusive)


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


async def amend_failure(dev: DeviceRun, event: dict[str, object]) -> dict[str, object]:
    """A trial killed by a signal while the scheduler ended the job (its signal reaches every
    process of the step, so the trial's process may die before the agent stops): its error says
    the scheduler's reason. Any other event is returned as it is."""
    queue, result = queue_of(dev), event.get("result")
    if queue is None or event.get("type") != ev.TRIAL_FAILED or not isinstance(result, dict):
        return event
    if dev.cancel_requested or dev.cancel_sent or not _killed(result):
        return event
    with contextlib.suppress(TransportError, NgbError, OSError):
        ended = await queue.ended(dev.run_id, settle=5.0)
        if ended is not None:
            error = f"{ended[1]} ({result.get('error')})"
            return {**event, "error": error, "error_kind": "error",
                    "result": {**result, "error": error, "error_kind": "error"}}  # fmt: skip
    return event


def _killed(result: dict[str, object]) -> bool:
    """Failed by the signal a job's end sends (a segfault is the trial's own doing)."""
    error = str(result.get("error") or "")
    return result.get("error_kind") == "crash" and ("SIGTERM" in error or "SIGKILL" in error)


def refuse_restart(dev: DeviceRun) -> None:
    """The scheduler ended this slot's job just now: fail the slot with why, do not queue again."""
    queue = queue_of(dev)
    if queue is not None and queue.ended_by_scheduler:
        why, queue.ended_by_scheduler = queue.ended_by_scheduler, None
        raise NgbError(f"{why}; `ngb attach {dev.run_id}` asks for a new allocation and goes on")


async def cancel(dev: DeviceRun) -> bool:
    """ngb's cancel through the scheduler (``scancel``); False: no live job, signal the agent.

    A marker in the run dir says first that it is ngb's cancel, so a process following the run
    elsewhere ends the device as cancelled instead of taking the scheduler's end for a kill."""
    queue = queue_of(dev)
    if queue is None or dev.paths is None or dev.transport is None:
        return False
    await _checked(dev, ["touch", "--", f"{dev.paths.run_dir}/{CANCEL_MARKER}"], "mark the cancel")
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
