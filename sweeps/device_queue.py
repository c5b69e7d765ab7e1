"""A device handed out by a batch scheduler (``Transport.queue``, a Slurm slot): what the run's
device side adds there. Every function is a no-op for a device without a queue.

- While the agent's event log is followed, the job's queue state (``PENDING (Resources)``,
  ``RUNNING on node1@gpu, 1:59:10 left``) is polled and sent on as a log event and, while no
  trial is in flight, as the device's message (the ``run_devices`` row: ``ngb status``).
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
from ngb.devices.inventory import Inventory
from ngb.devices.transport import JobQueue, TransportError
from ngb.sweeps.run_state import DeviceRun

POLL_S = 3.0
CANCEL_MARKER = "ngb-cancel"  # in the run dir: ngb's own cancel went through the scheduler
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
    """Say the job's queue state (``slurm: PENDING (Resources)``) whenever it changes, as the
    device's connection message (the console's device row shows it between trials) and, while no
    trial is in flight, as its current line (the ``run_devices`` row); runs until cancelled."""
    queue = queue_of(dev)
    if queue is None or say is None:
        return
    last = ""
    while True:
        with contextlib.suppress(TransportError, NgbError, OSError):
            text = await queue.state(dev.run_id)
            if text and f"{QUEUE_PREFIX}{text}" != last:
                if not dev.current or dev.current == last:  # no trial in flight: say why
                    dev.current = f"{QUEUE_PREFIX}{text}"
                last = f"{QUEUE_PREFIX}{text}"
                say(last)
        await asyncio.sleep(every)


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
            line = json.dumps({**result.to_dict(), "run_id": dev.run_id}, sort_keys=True)
            await _checked(dev, ["sh", "-c", _APPEND, "ngb-append", paths.checkpoint, line],
                           "record the failed trial")  # fmt: skip
    await _checked(dev, ["sh", "-c", _APPEND, "ngb-mark", marker, why], "mark the job as seen")
    queue.ended_by_scheduler = why
    return checkpoint_text + (line + "\n" if line else "")


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
