"""When the batch scheduler ended a slot's job: its time limit, a preemption, someone's
``scancel``, or ngb's own cancel. Every function is a no-op for a device without a queue.

The scheduler's signal reaches every process of the job: the agent stops as if cancelled, and
the trial's own process may die of it first (a "crash" by SIGTERM or SIGKILL). That is neither
an agent's fault nor the trial's, so it is never restarted as one:

- **ngb's own cancel** (``scancel``, after a marker in the run dir says it is ngb's): the trial
  the signal ended is a cancelled trial, never recorded.
- **Ended by the scheduler**: the trial in flight either runs again in a new allocation, while
  its ``retry_killed`` allows (the sweep's ``[measure]``, ``ngb run --retry-killed N``; the
  count is a line ``<job>\t<key>`` in ``slurm-requeued.tsv`` and each result of the trial
  carries it as ``extra.slurm.killed_retries``), or it fails with the reason
  (``killed by the scheduler: Slurm job 12 TIMEOUT on n1@debug (time limit 1:00)``), appended
  to the checkpoint so a resumed agent neither loses nor repeats it, and the slot fails with the
  same line: no new job until someone asks for one (``ngb attach``, ``--resume``).
- **Only the owner decides** (``ownership``: one follower per device). Every follower withholds
  the killed trial until it is decided: its event when it will run again, and any killed record
  of the checkpoint read by a follower that is not the owner. The store keeps the first result
  of a key, so a trial stored as failed could never be stored as run again.
- **A marker per ended job** (``slurm-ended.<job>``: ``failed <why>`` or ``requeued <key>``)
  says it was decided. A follower that reads it later takes the decision: a requeue is carried
  out, a failed slot stays failed unless this follower was asked to go on (``resuming``), and
  then the slot gets a new allocation.
"""

from __future__ import annotations

import contextlib
import json
import time

from ngb.core.base.errors import NgbError
from ngb.core.records import events as ev
from ngb.core.records.types import TrialResult, TrialSpec
from ngb.devices import protocol as remote
from ngb.devices import slurm_nodes
from ngb.devices.transport import JobQueue, TransportError
from ngb.sweeps.run.state import DeviceRun

CANCEL_MARKER = "ngb-cancel"  # in the run dir: ngb's own cancel went through the scheduler
REQUEUED_FILE = "slurm-requeued.tsv"  # one line per re-run of a killed trial: job, key
_LAST_STARTED = 'test -f "$1" || exit 0; grep -F trial_started "$1" | tail -n 1'
_APPEND = 'printf "%s\\n" "$2" >> "$1"'
_REPLACE = 'cat > "$1.ngb-new" && mv -f "$1.ngb-new" "$1"'

# (run, slot) -> retry_killed of each trial (its list never changes), and the re-runs so far
_ALLOWED: dict[tuple[str, str], dict[str, int]] = {}
_REQUEUED: dict[tuple[str, str], list[tuple[int, str]]] = {}


def queue_of(dev: DeviceRun) -> JobQueue | None:
    return dev.transport.queue if dev.transport is not None else None


def killed(result: dict[str, object]) -> bool:
    """Failed by the signal a job's end sends (a segfault is the trial's own doing)."""
    error = str(result.get("error") or "")
    return result.get("error_kind") == "crash" and ("SIGTERM" in error or "SIGKILL" in error)


async def ngb_cancelled(dev: DeviceRun) -> bool:
    """Whether ngb cancelled this run (here, or in any process: the marker in the run dir)."""
    if dev.cancel_requested or dev.cancel_sent:
        return True
    if dev.transport is None or dev.paths is None:
        return False
    if await _read(dev, f"{dev.paths.run_dir}/{CANCEL_MARKER}") is None:
        return False
    dev.cancel_requested = True  # ends as cancelled, never queued again
    return True


async def amend_failure(dev: DeviceRun, event: dict[str, object]) -> dict[str, object] | None:
    """A trial killed by a signal while the job ended: None (withheld) when ngb cancelled it
    or it will run again; else its error says the scheduler's reason. Other events: as they are."""
    queue, result = queue_of(dev), event.get("result")
    if queue is None or event.get("type") != ev.TRIAL_FAILED or not isinstance(result, dict):
        return event
    if not killed(result):
        return event
    if await ngb_cancelled(dev):
        return None
    with contextlib.suppress(TransportError, NgbError, OSError):
        ended = await queue.ended(dev.run_id, settle=5.0)
        if ended is None:
            return event
        job_id, why = ended
        if await _may_requeue(dev, str(result.get("key") or event.get("key")), job_id):
            return None
        error = f"{why} ({result.get('error')})"
        return {**event, "error": error, "error_kind": "error",
                "result": {**result, "error": error, "error_kind": "error"}}  # fmt: skip
    return event


async def scheduler_end(dev: DeviceRun, text: str, *, owner: bool) -> str:
    """After the agent vanished: the checkpoint ``text`` as this follower should take it. The
    owner decides what the scheduler's end of the job means (fail or re-run the trial in
    flight, see the module docstring) and leaves the decision in ``dev.after_end``."""
    queue, paths = queue_of(dev), dev.paths
    if queue is None or dev.transport is None or paths is None:
        return text
    if await ngb_cancelled(dev):  # the trial its scancel ended is a cancelled trial
        return _without_killed(text, await _last_started(dev) or None)
    if dev.run_done is not None and not dev.run_done.get("cancelled"):
        return text  # the agent finished its list: no job was cut short
    if not owner:
        return _without_killed(text)  # the owner decides what they become
    ended = await _ended(dev, queue)
    if ended is None:
        return text
    job_id, why = ended
    marker = f"{paths.run_dir}/slurm-ended.{job_id}"
    seen = await _read(dev, marker)
    if seen is not None:  # decided before (by a follower gone since, or before a resume)
        word, _, rest = seen.strip().partition(" ")
        if word == "requeued":
            dev.after_end = ("requeue", f"{why}; its trial runs again in a new allocation")
        else:
            dev.after_end = _failed(dev, rest if word == "failed" else seen.strip() or why)
        return text
    key = await _last_started(dev)
    prior = remote.parse_checkpoint(text).get(key)
    spec = (await _specs(dev)).get(key) if key else None
    line = ""
    if spec is not None and (prior is None or killed(prior)):  # lost, or failed by the signal
        if await _may_requeue(dev, key, job_id):
            used = len([k for _, k in await _requeued(dev) if k == key]) + 1
            text = _without_killed(text, key)
            await _write(dev, paths.checkpoint, text, "take the killed trial out")
            await _append(dev, f"{paths.run_dir}/{REQUEUED_FILE}", f"{job_id}\t{key}")
            await _append(dev, marker, f"requeued {key}")
            _REQUEUED.pop((dev.run_id, dev.name), None)
            allowed = spec.measure.retry_killed
            dev.after_end = ("requeue", f"{why}; {spec.label} runs again in a new allocation "
                                        f"({used}/{allowed})")  # fmt: skip
            return text
        error = why if prior is None else f"{why} ({prior.get('error')})"
        result = TrialResult.failed(spec, error, "error", finished_at=time.time())
        result.extra["slurm"] = {"job": job_id}  # its node: that job's (slurm_nodes)
        line = json.dumps({**result.to_dict(), "run_id": dev.run_id}, sort_keys=True)
        await _append(dev, paths.checkpoint, line)
    await _append(dev, marker, f"failed {why}")
    dev.after_end = _failed(dev, why)
    return text + (line + "\n" if line else "")


def _failed(dev: DeviceRun, why: str) -> tuple[str, str]:
    """The slot fails with ``why``, unless this follower was asked to go on (a resume)."""
    if dev.resuming:
        return ("resume", f"{why}; a new allocation goes on with the run")
    return ("fail", why)


def next_start(dev: DeviceRun) -> str | None:
    """Before the agent is started again: raises ``NgbError`` (the slot fails, no new job) when
    the scheduler ended its job and nobody asked to go on; a line to record when the start is a
    new allocation after the scheduler's end (not an agent restart); None for a restart."""
    after, dev.after_end = dev.after_end, None
    if after is None:
        return None
    kind, line = after
    if kind == "fail":
        raise NgbError(f"{line}; `ngb attach {dev.run_id}` asks for a new allocation and goes on")
    return line


async def killed_retries(dev: DeviceRun, key: str) -> int:
    """How many times the scheduler killed this trial and it ran again (stamped on results)."""
    found = _REQUEUED.get((dev.run_id, dev.name))
    if found is None:
        found = await _requeued(dev)
    return sum(1 for _, k in found if k == key)


def forget_job(dev: DeviceRun) -> None:
    """A new job started: its re-runs are read afresh."""
    _REQUEUED.pop((dev.run_id, dev.name), None)


# -- helpers ------------------------------------------------------------------------------------


async def _ended(dev: DeviceRun, queue: JobQueue) -> tuple[int, str] | None:
    """``queue.ended``; for a job squeue no longer lists, the end slurmstepd wrote into the
    agent's stderr, which counts only for the slot's newest job (an older job's line says
    nothing of this one, whose agent may have died of its own fault)."""
    assert dev.paths is not None
    ended = await queue.ended(dev.run_id)
    if ended is not None:
        return ended
    stderr = await _read(dev, dev.paths.stderr) or ""
    ended = await queue.ended(dev.run_id, settle=0.0, stderr=stderr[-20000:])
    if ended is None:
        return None
    facts = slurm_nodes.parse_facts(
        await _read(dev, f"{dev.paths.run_dir}/{slurm_nodes.FACTS_FILE}") or ""
    )
    newest = max((f.job_id for f in facts), default=ended[0])
    return ended if newest == ended[0] else None


async def _may_requeue(dev: DeviceRun, key: str, job_id: int) -> bool:
    """Whether the trial killed with ``job_id`` runs again: its re-runs by other jobs' ends are
    fewer than its ``retry_killed`` (the same answer in every follower, before and after the
    owner counted this one)."""
    allowed = (await _allowed(dev)).get(key, 0)
    if allowed <= 0:
        return False
    used = [k for job, k in await _requeued(dev) if k == key and job != job_id]
    return len(used) < allowed


async def _allowed(dev: DeviceRun) -> dict[str, int]:
    found = _ALLOWED.get((dev.run_id, dev.name))
    if found is None:
        found = {key: spec.measure.retry_killed for key, spec in (await _specs(dev)).items()}
        _ALLOWED[(dev.run_id, dev.name)] = found
    return found


async def _specs(dev: DeviceRun) -> dict[str, TrialSpec]:
    assert dev.paths is not None
    text = await _read(dev, dev.paths.trials) or ""
    specs = (TrialSpec.from_dict(d) for d in remote.parse_jsonl(text))
    return {spec.key: spec for spec in specs}


async def _requeued(dev: DeviceRun) -> list[tuple[int, str]]:
    assert dev.paths is not None
    text = await _read(dev, f"{dev.paths.run_dir}/{REQUEUED_FILE}") or ""
    found = []
    for line in text.splitlines():
        job, _, key = line.strip().partition("\t")
        if job.isdigit() and key:
            found.append((int(job), key))
    _REQUEUED[(dev.run_id, dev.name)] = found
    return found


async def _last_started(dev: DeviceRun) -> str:
    """The key of the last trial the agent started (the one in flight when the job ended)."""
    assert dev.transport is not None and dev.paths is not None
    argv = ["sh", "-c", _LAST_STARTED, "ngb-last", dev.paths.events]
    started = remote.parse_jsonl((await dev.transport.run(argv, timeout=60)).stdout)
    return str(started[-1].get("key") or "") if started else ""


def _without_killed(text: str, key: str | None = None) -> str:
    """The checkpoint without its records of trials killed by a signal (of ``key`` only)."""
    kept = []
    for line in text.splitlines(keepends=True):
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and killed(record) and key in (None, record.get("key")):
                continue
        kept.append(line)
    return "".join(kept)


async def _read(dev: DeviceRun, path: str) -> str | None:
    """A file of the run dir; None when it does not exist."""
    assert dev.transport is not None
    res = await dev.transport.run(remote.read_file_argv(path), timeout=60)
    if res.returncode == 3:
        return None
    if res.returncode != 0:
        raise TransportError(f"{dev.name}: could not read {path} (exit {res.returncode})")
    return res.stdout


async def _append(dev: DeviceRun, path: str, line: str) -> None:
    await _checked(dev, ["sh", "-c", _APPEND, "ngb-append", path, line], "append", None)


async def _write(dev: DeviceRun, path: str, text: str, what: str) -> None:
    await _checked(dev, ["sh", "-c", _REPLACE, "ngb-write", path], what, text)


async def _checked(dev: DeviceRun, argv: list[str], what: str, input: str | None) -> None:
    assert dev.transport is not None
    res = await dev.transport.run(argv, timeout=60, input=input)
    if res.returncode != 0:
        raise TransportError(f"{dev.name}: could not {what} in the run directory")
