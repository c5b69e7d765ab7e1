"""Workstation-side state of a run and of each device in it (what the orchestrator steers).

``DeviceRun`` is also what ``attach`` rebuilds from a ``run_devices`` row: ``extra()`` is exactly
what is stored there and ``from_row`` reads it back.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ngb.core.base.errors import NgbError
from ngb.core.records.types import TrialSpec
from ngb.devices import protocol as remote
from ngb.devices.inventory import Device
from ngb.devices.protocol import RunPaths
from ngb.devices.transport import Transport
from ngb.sweeps.rows import integer
from ngb.sweeps.run.events import (
    CANCELLED,
    DETACHED,
    FAILED,
    FINAL_STATES,
    FINISHED,
    LOST,
    PENDING,
)


@dataclass
class DeviceRun:
    """Workstation-side state of one device in one run."""

    run_id: str
    device: Device
    keys: set[str]  # every trial key this device must end up with
    trials_text: str | None = None  # trials.jsonl to upload (None when re-attaching)
    state: str = PENDING
    paths: RunPaths | None = None
    agent_path: str | None = None
    pid: int | None = None
    offset: int = 0
    started: bool = False  # the agent was launched at least once
    # this follow saw the agent's goodbye and then its exit (``tail --pid`` ended the stream):
    # with every result streamed, its end needs no checkpoint read (``device_io.streamed_whole``)
    exit_seen: bool = False
    # why the last follow ended at once without a line (the device's tail refused its options):
    # said once, and the next follow waits longer (``device_io.follow_events``)
    follow_error: str | None = None
    results: dict[str, bool] = field(default_factory=dict)  # key -> ok
    rejected: set[str] = field(default_factory=set)  # results the store could not take as sent
    restarts: int = 0  # the agent died and was started again (an agent's fault, not the queue's)
    restart_base: int = 0  # restarts before this follower attached (the budget is per follow)
    # this follower acts for the device (starts, restarts, resubmits, writes its row): a lone
    # follower does; among several, the one holding the device's lock (``ownership``)
    owner: bool = True
    # attached to go on (``ngb attach``, ``--resume``): a slot whose job the scheduler ended may
    # be given a new allocation; a follower that only watches (the console's re-attach) may not
    resuming: bool = False
    # what the scheduler's end of the slot's job leaves for the next start (``job_end``):
    # ("fail", why), ("requeue", line) or ("resume", line)
    after_end: tuple[str, str] | None = None
    followed_since: float = 0.0  # when this follower took the device up (epoch seconds)
    owner_asked: float = 0.0  # when this follower, not the owner, last tried to take it over
    # Any: the agent's run_done event (JSON) as sent; the orchestrator reads its fields
    run_done: dict[str, Any] | None = None
    cancel_requested: bool = False
    cancel_sent: bool = False
    error: str | None = None
    current: str = ""  # label of the trial in flight
    # a worker of the trial in flight is warming up or in its timed loops: on this machine the
    # writer's timed flushes wait for the gap (``ngb.sweeps.run.writer``)
    timing: bool = False
    transport: Transport | None = None
    task: asyncio.Task[None] | None = None
    row_sig: tuple[object, ...] | None = None  # what the stored run_devices row says (RunWriter)
    row_offset: int = 0
    row_at: float = 0.0

    def signature(self) -> tuple[object, ...]:
        """The run_devices facts whose change is worth a write at once (the offset is not)."""
        return (self.state, self.done, self.failed, self.pid, self.started, self.restarts,
                self.error, self.current, self.agent_path, self.paths)  # fmt: skip

    @property
    def name(self) -> str:
        return self.device.name

    @property
    def done(self) -> int:
        return len(self.results)

    @property
    def failed(self) -> int:
        return sum(1 for ok in self.results.values() if not ok)

    def extra(self) -> dict[str, object]:
        """What ``attach`` needs to pick this device up again (stored in run_devices.extra)."""
        return {
            "run_dir": self.paths.run_dir if self.paths else None,
            "offset": self.offset,
            "pid": self.pid,
            "agent_path": self.agent_path,
            "started": self.started,
            "restarts": self.restarts,
        }

    @classmethod
    def from_row(
        cls, run_id: str, device: Device, row: Mapping[str, object], *, state: bool = False
    ) -> DeviceRun:
        """What a ``run_devices`` row recorded (``attach`` continues from it); with ``state``,
        its recorded state too (else the device starts as pending)."""
        extra = json_field(row.get("extra"))
        dev = cls(run_id, device, keys=set())
        if state and row.get("state"):
            dev.state = str(row["state"])
        dev.started = bool(extra.get("started"))
        dev.offset = integer(extra.get("offset")) or 0
        dev.pid = integer(extra.get("pid"))
        agent_path, run_dir = extra.get("agent_path"), extra.get("run_dir")
        dev.agent_path = agent_path if isinstance(agent_path, str) else None
        dev.restarts = dev.restart_base = integer(extra.get("restarts")) or 0
        if row.get("workdir") and run_dir and isinstance(run_dir, str):
            dev.paths = RunPaths(parent_workdir(run_dir), run_id)
        return dev


@dataclass
class Run:
    run_id: str
    sweep_name: str
    devices: dict[str, DeviceRun]
    keep: bool = False
    isolate: str | None = None
    status: str = "running"
    error: str | None = None  # why the run as a whole stopped, when not a device's fault
    attached: bool = False  # found in the store (``attach``), not started by this follower
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    watcher: asyncio.Task[None] | None = None

    def device_states(self) -> dict[str, dict[str, object]]:
        """Current state, counts, pid and trial in flight per device."""
        return {
            name: {
                "state": d.state, "done": d.done, "failed": d.failed, "total": len(d.keys),
                "pid": d.pid, "current": d.current, "error": d.error, "restarts": d.restarts,
                "run_dir": d.paths.run_dir if d.paths else None,
            }
            for name, d in self.devices.items()
        }  # fmt: skip

    def summary(self) -> dict[str, object]:
        """What ``Orchestrator.wait`` returns: the run's status and each device's outcome."""
        return {
            "run_id": self.run_id,
            "status": self.status,
            "error": self.error,
            "devices": {
                name: {"state": d.state, "done": d.done, "failed": d.failed,
                       "total": len(d.keys), "error": d.error, "restarts": d.restarts}
                for name, d in self.devices.items()
            },
        }  # fmt: skip

    def outcome(self, store_broken: str | None) -> tuple[str, str]:
        """The run's final status once no device is followed any more, and a line saying why."""
        states = [d.state for d in self.devices.values()]
        if store_broken is not None:  # nothing more can be recorded; the devices keep results
            self.error = (
                f"results database cannot be written ({store_broken}); the agents go on and "
                f"keep their results: `ngb attach {self.run_id}` once it is fixed"
            )
            return "failed", self.error
        if any(s == CANCELLED for s in states):
            return "cancelled", self.summary_line()
        if all(s == FINISHED for s in states):
            return "finished", self.summary_line()
        if any(s in (DETACHED, LOST) for s in states):
            # still going on some devices: `ngb attach` picks it up
            return "detached", self.summary_line()
        return "failed", self.summary_line()  # some device failed (run_devices says why)

    def summary_line(self) -> str:
        return "; ".join(f"{n}: {d.state} {d.done}/{len(d.keys)}" for n, d in self.devices.items())


def resumed_run(
    info: Mapping[str, object],
    rows: Sequence[Mapping[str, object]],
    stored: Sequence[Mapping[str, object]],
    resolve: Callable[[list[str]], list[Device]],
    *,
    cancel: bool = False,
    resume: bool = True,
) -> Run:
    """The run as the store recorded it, with every device that is not finished or cancelled.

    ``info`` is its ``runs`` row, ``rows`` its ``run_devices`` rows, ``stored`` its trials (and
    its finished serving trials, read as trials: ``Store.served_trials``). A
    device whose agent never started (the workstation stopped before the launch) gets its trial
    list again from the sweep stored with the run, so it can be started now. Without ``resume``
    (a follower that only watches) a failed device is left as it is.
    """
    run_id = str(info["run_id"])
    meta = json_field(info.get("meta"))
    isolate = meta.get("isolate")
    run = Run(
        run_id=run_id,
        sweep_name=str(info.get("sweep_name") or ""),
        keep=bool(meta.get("keep")),
        isolate=isolate if isinstance(isolate, str) else None,
        devices={},
    )
    trials_text: str | None = None
    owners = [run_device_of(t) for t in stored]
    for row in rows:
        name = str(row["device"])
        if row.get("state") in (FINISHED, CANCELLED) or (not resume and row.get("state") == FAILED):
            continue
        dev = DeviceRun.from_row(run_id, resolve([name])[0], row)
        dev.cancel_requested = cancel
        dev.resuming = resume and not cancel
        dev.results = {
            str(t["key"]): t.get("status") == "ok"
            for t, owner in zip(stored, owners, strict=True)
            if owner == name
        }
        if not dev.started:
            trials_text = trials_text or _trials_text(info)
            dev.trials_text = trials_text
            dev.keys = {TrialSpec.from_dict(d).key for d in remote.parse_jsonl(trials_text)}
        run.devices[name] = dev
    return run


def run_device_of(trial: Mapping[str, object]) -> str:
    """The run device a stored trial counts for: its device, or for a result stored under the
    name of the node a scheduler handed out (``node@partition``), the slot that ran it."""
    name = str(trial["device"])
    if "@" not in name:
        return name
    return str(json_field(trial.get("extra")).get("run_device") or name)


def started_devices(
    run_id: str,
    rows: Sequence[Mapping[str, object]],
    resolve: Callable[[list[str]], list[Device]],
) -> list[DeviceRun]:
    """The unfinished devices of a stored run whose agent was started (run dir known)."""
    devs = [
        DeviceRun.from_row(run_id, resolve([str(row["device"])])[0], row, state=True)
        for row in rows
        if row.get("state") not in FINAL_STATES
    ]
    return [dev for dev in devs if dev.paths is not None]


def _trials_text(info: Mapping[str, object]) -> str:
    from ngb.sweeps.spec.sweep import loads_sweep

    try:
        sweep = loads_sweep(str(info.get("sweep_toml") or ""), source=f"run {info['run_id']}")
    except NgbError as exc:
        raise NgbError(f"run {info['run_id']}: its stored sweep no longer loads: {exc}") from None
    return remote.trials_jsonl(s.to_dict() for s in sweep.trials())


def new_run_id(sweep_name: str) -> str:
    stem = "".join(c if c.isalnum() or c in "._-" else "-" for c in sweep_name)[:40] or "run"
    return f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def json_field(value: object) -> dict[str, object]:
    """A JSON column as a dict (the store decodes most; tolerate text and junk)."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value:
        try:
            out = json.loads(value)
        except ValueError:
            return {}
        return out if isinstance(out, dict) else {}
    return {}


def parent_workdir(run_dir: str) -> str:
    """``<workdir>/runs/<run_id>`` -> ``<workdir>``."""
    return os.path.dirname(os.path.dirname(run_dir.rstrip("/"))) or "/"
