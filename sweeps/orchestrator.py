"""The orchestrator: runs a sweep on many devices at once and survives links, agents and restarts.

One asyncio task per device (all devices concurrently, one trial at a time on each, which the
agent enforces). Per device the task connects (bounded handshake concurrency), then in one remote
command checks the agent's sha256, writes ``trials.jsonl`` into ``<workdir>/runs/<run_id>/`` and
starts the agent *detached* (see ``remote.launch_argv``; a missing agent adds one SFTP upload and
one more such command), and follows the agent's append-only event log from a byte offset. Round
trips are kept few on purpose: every SSH exec pays for the device's login shell.

Failure handling, and why:

- a dropped link -> reconnect with exponential backoff and jitter, re-follow from the offset: the
  agent never noticed (it runs under ``setsid``), so nothing is lost or repeated;
- the agent dies (pid gone, no ``run_done``) -> start it again; it resumes from its checkpoint.
  Restarts are bounded (``max_restarts``) and each one is recorded as an error;
- the end of a device's run -> fetch the checkpoint (the authoritative record) and ingest whatever
  the event stream missed; the store is idempotent per (run, device, key), so a result that
  arrives twice is stored once. Then remove the run dir unless ``keep``;
- a failing trial is a failed trial row, never a stopped sweep; an unreachable device or a refused
  host key fails that device only, with a one-line message.

Results, CPU samples and tuning progress are written to DuckDB in batches from one writer task
(the store opens the file per batch, so readers in other processes get in between). The consumed
offset, pid and remote paths are recorded in ``run_devices`` *after* the results before them are
stored, so ``ngb attach RUN`` after a workstation restart continues exactly there.

Event stream for front ends (the CLI progress bars and the TUI): ``subscribe()`` yields
``RunEvent`` records; see that class for the vocabulary. Each subscriber has its own bounded queue:
a slow subscriber loses its oldest CPU samples / progress ticks, never trial results or state
changes.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import os
import random
import secrets
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ngb.core import events as ev
from ngb.core.errors import NgbError, first_line
from ngb.core.types import TrialResult, TrialSpec
from ngb.devices import protocol as remote
from ngb.devices.artifacts import describe as describe_shipment
from ngb.devices.artifacts import ship_run_artifacts
from ngb.devices.protocol import EventLogReader, RunPaths
from ngb.devices.transport import HostKeyError, Transport, TransportError

log = logging.getLogger(__name__)

# Connection states of a device in a run (RunEvent.state for kind "connection").
PENDING = "pending"
CONNECTING = "connecting"
DEPLOYING = "deploying"
RUNNING = "running"
RECONNECTING = "reconnecting"
LOST = "lost"  # gave up reconnecting; the agent may still be running (`ngb attach` later)
DETACHED = "detached"  # the workstation stopped following on purpose; the agent goes on
FINISHED = "finished"
FAILED = "failed"
CANCELLED = "cancelled"
FINAL_STATES = (FINISHED, FAILED, CANCELLED)

# Agent event types a lagging subscriber may lose (a newer one supersedes them).
DROPPABLE_TYPES = frozenset({ev.CPU, ev.PROGRESS, ev.TUNING})


@dataclass(frozen=True)
class RunEvent:
    """One thing that happened in a run, for front ends. Stable; the TUI consumes it.

    - ``kind="connection"``: ``state`` is the device's new state: ``pending``, ``connecting``,
      ``deploying``, ``running``, ``reconnecting``, ``lost``, ``detached``, ``finished``,
      ``failed``, ``cancelled``; ``message`` says why (e.g. the one-line connection error).
    - ``kind="agent"``: ``event`` is the agent's event dict as sent (``core/events.py`` types:
      run_started, trial_started, phase, progress, cpu, tuning, trial_done, trial_failed, log,
      run_done); ``state`` is the device's current state.
    - ``kind="ingest"``: a batch of the device's results reached the database; ``message``
      says how many (results the store already had are ignored there, so none is stored twice).
    - ``kind="run"``: the run as a whole (``device`` is ``""``): ``state`` is ``started``,
      ``attached``, then one of ``finished`` (every device), ``failed`` (some device failed; the
      others' results are stored), ``cancelled`` or ``detached`` (some device is still running
      unfollowed: detached on purpose or link lost; ``attach`` picks it up).

    ``done``/``failed``/``total`` are the device's trial counts where known (``done`` counts ok
    and failed trials; ``failed`` the failed ones), for progress bars without bookkeeping.
    """

    run_id: str
    device: str
    kind: str
    state: str = ""
    event: dict[str, Any] | None = None
    message: str = ""
    done: int | None = None
    failed: int | None = None
    total: int | None = None
    ts: float = field(default_factory=time.time)


class Subscription:
    """An async iterator over RunEvents with a bounded queue (see the module docstring)."""

    def __init__(self, owner: Orchestrator, maxsize: int, run_id: str | None) -> None:
        self._owner = owner
        self._maxsize = maxsize
        self._run_id = run_id
        self._items: collections.deque[RunEvent] = collections.deque()
        self._wakeup = asyncio.Event()
        self._closed = False
        self.dropped = 0

    def _put(self, item: RunEvent) -> None:
        if self._closed or (self._run_id and item.run_id != self._run_id):
            return
        if len(self._items) >= self._maxsize:
            for i, old in enumerate(self._items):
                if old.kind == "agent" and (old.event or {}).get("type") in DROPPABLE_TYPES:
                    del self._items[i]
                    self.dropped += 1
                    break
            # Nothing droppable: keep it anyway (results and states are never lost).
        self._items.append(item)
        self._wakeup.set()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> RunEvent:
        while not self._items:
            if self._closed:
                raise StopAsyncIteration
            self._wakeup.clear()
            await self._wakeup.wait()
        return self._items.popleft()

    def get_nowait(self) -> RunEvent | None:
        return self._items.popleft() if self._items else None

    def close(self) -> None:
        self._closed = True
        self._wakeup.set()
        self._owner._subscribers.discard(self)


@dataclass
class _DeviceRun:
    """Workstation-side state of one device in one run."""

    run_id: str
    device: Any  # ngb.devices.inventory.Device
    keys: set[str]  # every trial key this device must end up with
    trials_text: str | None = None  # trials.jsonl to upload (None when re-attaching)
    state: str = PENDING
    paths: RunPaths | None = None
    agent_path: str | None = None
    pid: int | None = None
    offset: int = 0
    started: bool = False  # the agent was launched at least once
    results: dict[str, bool] = field(default_factory=dict)  # key -> ok
    restarts: int = 0
    run_done: dict[str, Any] | None = None
    cancel_requested: bool = False
    cancel_sent: bool = False
    error: str | None = None
    current: str = ""  # label of the trial in flight
    transport: Transport | None = None
    task: asyncio.Task | None = None
    row_sig: tuple | None = None  # what the stored run_devices row says (see _flush)
    row_offset: int = 0
    row_at: float = 0.0

    def signature(self) -> tuple:
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

    def extra(self) -> dict[str, Any]:
        """What ``attach`` needs to pick this device up again (stored in run_devices.extra)."""
        return {
            "run_dir": self.paths.run_dir if self.paths else None,
            "offset": self.offset,
            "pid": self.pid,
            "agent_path": self.agent_path,
            "started": self.started,
            "restarts": self.restarts,
        }


@dataclass
class _Run:
    run_id: str
    sweep_name: str
    devices: dict[str, _DeviceRun]
    keep: bool = False
    isolate: str | None = None
    status: str = "running"
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    watcher: asyncio.Task | None = None


@dataclass
class _Pending:
    """Ingest buffer of one device: flushed together so the offset follows its results."""

    results: dict[str, TrialResult] = field(default_factory=dict)
    cpu: list[dict[str, Any]] = field(default_factory=list)
    tuning: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    errors: list[tuple[str | None, str, str]] = field(default_factory=list)
    fields: dict[str, Any] = field(default_factory=dict)  # extra run_devices columns
    dirty: bool = False  # run_devices row needs an update

    def has_data(self) -> bool:
        return bool(self.results or self.cpu or self.tuning or self.errors)

    def empty(self) -> bool:
        return not (self.dirty or self.fields or self.has_data())

    def merged(self, newer: _Pending | None) -> _Pending:
        """This (older, unwritten) buffer with ``newer`` appended."""
        if newer is not None:
            self.results.update(newer.results)
            self.cpu.extend(newer.cpu)
            for k, v in newer.tuning.items():
                self.tuning.setdefault(k, []).extend(v)
            self.errors.extend(newer.errors)
            self.fields.update(newer.fields)
        self.dirty = True
        return self


def new_run_id(sweep_name: str) -> str:
    stem = "".join(c if c.isalnum() or c in "._-" else "-" for c in sweep_name)[:40] or "run"
    return f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


class Orchestrator:
    """Runs sweeps on devices. Construct it inside the event loop that will drive it.

    ``inventory`` resolves device names and groups (``ngb.devices.inventory.Inventory``).
    ``transport_factory(device) -> Transport`` overrides how devices are reached (tests, custom
    known_hosts); by default local devices get ``LocalTransport`` and the others ``SshTransport``
    with ``connect_timeout`` and ``keepalive`` seconds.
    """

    def __init__(
        self,
        store: Any,
        inventory: Any,
        *,
        max_handshakes: int = 8,
        connect_timeout: float = 10.0,
        keepalive: float = 15.0,
        backoff: tuple[float, float] = (0.5, 30.0),
        reconnect_window: float = 600.0,
        connect_attempts: int = 3,
        max_restarts: int = 5,
        flush_interval: float = 1.0,
        offset_every: float = 5.0,
        queue_size: int = 10_000,
        transport_factory: Callable[[Any], Transport] | None = None,
        watchdog: float = 30.0,
        seed: int | None = None,
    ) -> None:
        self.store = store
        self.inventory = inventory
        self.connect_timeout = connect_timeout
        self.keepalive = keepalive
        self.backoff = backoff
        self.reconnect_window = reconnect_window
        self.connect_attempts = connect_attempts
        self.max_restarts = max_restarts
        self.flush_interval = flush_interval
        self.offset_every = offset_every
        self.queue_size = queue_size
        self.watchdog = watchdog
        self._transport_factory = transport_factory or self._default_transport
        self._handshakes = asyncio.Semaphore(max_handshakes)
        self._rng = random.Random(seed)
        self._runs: dict[str, _Run] = {}
        self._subscribers: set[Subscription] = set()
        self._pending: dict[tuple[str, str], _Pending] = {}
        self._store_lock = asyncio.Lock()
        self._flusher: asyncio.Task | None = None
        self._flush_wakeup = asyncio.Event()
        self._flush_cond = asyncio.Condition()
        self._flushes_started = 0
        self._flushes_done = 0

    # ------------------------------------------------------------------ public API

    def subscribe(self, run_id: str | None = None) -> Subscription:
        """A new event stream (all runs, or one). Close it (``sub.close()``) when done."""
        sub = Subscription(self, self.queue_size, run_id)
        self._subscribers.add(sub)
        return sub

    def active_runs(self) -> list[str]:
        return [rid for rid, run in self._runs.items() if not run.finished.is_set()]

    def device_states(self, run_id: str) -> dict[str, dict[str, Any]]:
        """Current state, counts, pid and trial in flight per device of an active run."""
        run = self._get_run(run_id)
        return {
            name: {
                "state": d.state, "done": d.done, "failed": d.failed, "total": len(d.keys),
                "pid": d.pid, "current": d.current, "error": d.error, "restarts": d.restarts,
                "run_dir": d.paths.run_dir if d.paths else None,
            }
            for name, d in run.devices.items()
        }  # fmt: skip

    async def start(
        self,
        sweep: Any,
        device_names: str | Iterable[str],
        *,
        keep: bool = False,
        run_id: str | None = None,
        isolate: str | None = None,
    ) -> str:
        """Create the run in the store and start one task per device; returns the run id."""
        devices = self._resolve(device_names)
        specs: list[TrialSpec] = sweep.trials()
        if not specs:
            raise NgbError(f"sweep {sweep.name!r} has no trials")
        run_id = remote.check_run_id(run_id or new_run_id(sweep.name))
        if run_id in self._runs:
            raise NgbError(f"run {run_id!r} is already active")
        if isolate not in (None, "subprocess", "inprocess"):
            raise NgbError(f"isolate must be subprocess or inprocess, not {isolate!r}")
        text = remote.trials_jsonl(s.to_dict() for s in specs)
        keys = {s.key for s in specs}
        meta = {"keep": keep, "isolate": isolate, "trial_keys": len(keys)}
        run = _Run(
            run_id=run_id,
            sweep_name=sweep.name,
            keep=keep,
            isolate=isolate,
            devices={d.name: _DeviceRun(run_id, d, set(keys), trials_text=text) for d in devices},
        )

        def create() -> None:
            with self.store.batch():
                if not self.store.create_run(
                    run_id, sweep.name, sweep.to_toml(), list(run.devices), len(keys), meta
                ):
                    raise NgbError(f"run {run_id!r} exists already (`ngb attach {run_id}`?)")
                self.store.set_run_status(run_id, "running")
                for dev in run.devices.values():
                    self.store.upsert_run_device(
                        run_id, dev.name, state=PENDING, workdir=dev.device.workdir,
                        n_trials=len(keys), n_done=0, n_failed=0, **dev.extra(),
                    )  # fmt: skip

        await self._store_call(create)
        self._launch(run, "started")
        return run_id

    async def attach(self, run_id: str, *, cancel: bool = False) -> str:
        """Follow a run found in the store again (e.g. after a workstation restart).

        Devices already in a final state are left alone; the others are reconnected and followed
        from their recorded offsets (or started, if the agent never was).
        """
        if run_id in self._runs and not self._runs[run_id].finished.is_set():
            return run_id
        runs = {r["run_id"]: r for r in await self._store_call(self.store.runs)}
        if run_id not in runs:
            raise NgbError(f"unknown run {run_id!r}; `ngb status` lists the runs")
        info = runs[run_id]
        meta = _json_field(info.get("meta"))
        rows = await self._store_call(self.store.run_devices, run_id)
        run = _Run(
            run_id=run_id,
            sweep_name=info.get("sweep_name") or "",
            keep=bool(meta.get("keep")),
            isolate=meta.get("isolate"),
            devices={},
        )
        stored = await self._store_call(self.store.trials, run_id=run_id)
        for row in rows:
            name = row["device"]
            if row.get("state") in FINAL_STATES:
                continue
            device = self._resolve([name])[0]
            extra = _json_field(row.get("extra"))
            dev = _DeviceRun(run_id, device, keys=set())
            dev.started = bool(extra.get("started"))
            dev.offset = int(extra.get("offset") or 0)
            dev.pid = extra.get("pid")
            dev.agent_path = extra.get("agent_path")
            dev.restarts = int(extra.get("restarts") or 0)
            dev.cancel_requested = cancel
            if row.get("workdir") and extra.get("run_dir"):
                dev.paths = RunPaths(_parent_workdir(extra["run_dir"]), run_id)
            for t in stored:
                if t.get("device") == name:
                    dev.results[t["key"]] = t.get("status") == "ok"
            run.devices[name] = dev
        if not run.devices:
            raise NgbError(
                f"run {run_id!r} has no device left to follow (all finished, failed or cancelled)"
            )
        if not cancel:
            await self._store_call(self.store.set_run_status, run_id, "running")
        self._launch(run, "attached")
        return run_id

    async def cancel(self, run_id: str) -> dict[str, Any]:
        """SIGTERM the agents of a run (live here, or found in the store) and record it."""
        run = self._runs.get(run_id)
        if run is None or run.finished.is_set():
            await self.attach(run_id, cancel=True)
            run = self._runs[run_id]
        for dev in run.devices.values():
            dev.cancel_requested = True
            if dev.transport is not None and dev.started and not dev.cancel_sent:
                with contextlib.suppress(TransportError, OSError):
                    await self._send_cancel(dev)
        return await self.wait(run_id)

    async def pause(self, run_id: str) -> None:
        """Stop after the trial in flight (the agent waits while its pause file exists)."""
        await self._on_each_device(run_id, lambda paths, _: remote.pause_argv(paths), "paused")

    async def resume(self, run_id: str) -> None:
        await self._on_each_device(run_id, lambda paths, _: remote.resume_argv(paths), "resumed")

    async def wait(self, run_id: str) -> dict[str, Any]:
        """Wait until every device of the run is finished, failed, cancelled, lost or detached."""
        run = self._get_run(run_id)
        await run.finished.wait()
        return self._summary(run)

    async def detach(self, run_id: str | None = None) -> None:
        """Stop following (all runs, or one); the agents go on and ``attach`` picks them up."""
        runs = [self._runs[run_id]] if run_id else list(self._runs.values())
        for run in runs:
            if run.finished.is_set():
                continue
            tasks = [d.task for d in run.devices.values() if d.task and not d.task.done()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._flush()
            if run.watcher:
                await asyncio.gather(run.watcher, return_exceptions=True)

    async def close(self) -> None:
        """Detach from everything, flush, close subscriptions."""
        await self.detach()
        if self._flusher:
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
            self._flusher = None
        await self._flush()
        for sub in list(self._subscribers):
            sub.close()

    # ------------------------------------------------------------------ run lifecycle

    def _launch(self, run: _Run, how: str) -> None:
        self._runs[run.run_id] = run
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_loop(), name="ngb-ingest")
        self._publish(RunEvent(run.run_id, "", "run", how, message=f"{len(run.devices)} devices"))
        for dev in run.devices.values():
            dev.task = asyncio.create_task(self._device_main(run, dev), name=f"ngb-{dev.name}")
        run.watcher = asyncio.create_task(self._watch(run), name=f"ngb-run-{run.run_id}")

    async def _watch(self, run: _Run) -> None:
        tasks = [d.task for d in run.devices.values() if d.task]
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._flush()
        states = [d.state for d in run.devices.values()]
        if any(s == CANCELLED for s in states):
            status = "cancelled"
        elif all(s == FINISHED for s in states):
            status = "finished"
        elif any(s in (DETACHED, LOST) for s in states):
            status = "detached"  # still going on some devices: `ngb attach` picks it up
        else:
            status = "failed"  # some device failed (run_devices says which and why)
        run.status = status
        if status != "detached":
            with contextlib.suppress(Exception):
                await self._store_call(self.store.set_run_status, run.run_id, status)
        self._publish(RunEvent(run.run_id, "", "run", status, message=self._summary_line(run)))
        run.finished.set()

    async def _device_main(self, run: _Run, dev: _DeviceRun) -> None:
        failures = 0  # consecutive connection failures
        interrupted = 0  # deploys cut short by a dropped link (before the agent started)
        connected_once = False
        lost_since: float | None = None
        try:
            while True:
                try:
                    if dev.cancel_requested and not dev.started:
                        await self._set_state(dev, CANCELLED, "cancelled before it started")
                        return
                    await self._connect(dev, reconnect=connected_once)
                    connected_once, lost_since, failures = True, None, 0
                    if await self._drive(run, dev):
                        return
                except HostKeyError as exc:
                    await self._fail(dev, first_line(exc), kind="hostkey")
                    return
                except NgbError as exc:  # e.g. too many agent restarts, a refused command
                    await self._fail(dev, first_line(exc), kind="device")
                    return
                except Exception as exc:
                    if not _is_link_error(exc):
                        raise
                    was_connected = dev.transport is not None
                    await self._drop_transport(dev)
                    failures += 1
                    interrupted += was_connected and not dev.started
                    lost_since = lost_since or time.monotonic()
                    msg = first_line(exc)
                    if not dev.started and (
                        failures >= self.connect_attempts or interrupted > self.max_restarts
                    ):
                        await self._fail(dev, msg, kind="connection")
                        return
                    if connected_once and time.monotonic() - lost_since > self.reconnect_window:
                        await self._record_error(dev, None, "connection", msg)
                        await self._set_state(dev, LOST, f"gave up reconnecting: {msg}")
                        return
                    await self._record_error(dev, None, "connection", msg)
                    await self._set_state(dev, RECONNECTING, msg)
                    await asyncio.sleep(self._delay(failures))
        except asyncio.CancelledError:
            if dev.state not in FINAL_STATES:
                dev.state = DETACHED
                self._mark_dirty(dev)
                self._publish(self._conn_event(dev, "the workstation stopped following"))
            raise
        except Exception as exc:  # a bug: fail this device loudly, keep the others going
            log.exception("device %s crashed the orchestrator task", dev.name)
            await self._fail(dev, f"internal error: {first_line(exc)}", kind="internal")
        finally:
            await self._drop_transport(dev)

    async def _drive(self, run: _Run, dev: _DeviceRun) -> bool:
        """With a live connection: start/follow/restart/finish. True when the device is done."""
        transport = dev.transport
        assert transport is not None
        if dev.paths is None and dev.started:  # attached without a recorded run dir
            workdir = await self._remote_workdir(transport, dev.device.workdir)
            dev.paths = RunPaths(workdir, run.run_id)
        if not dev.started:
            await self._set_state(dev, DEPLOYING, "deploying the agent")
            await self._deploy_and_start(run, dev)
            if not dev.started:  # cancelled while deploying
                await self._set_state(dev, CANCELLED, "cancelled before it started")
                return True
        if dev.started and dev.pid is None:  # attached without a recorded pid
            dev.pid = await self._read_pid(dev)
        if dev.started and not dev.keys:  # attached: the device's own trial list is the truth
            dev.keys = await self._read_trial_keys(dev)
            self._publish(self._conn_event(dev, "attached"))
        if dev.cancel_requested and not dev.cancel_sent and dev.run_done is None:
            await self._send_cancel(dev)
        while True:
            if dev.run_done is None:
                await self._set_state(dev, RUNNING, dev.current or "following the agent")
                await self._follow(dev)
            if dev.run_done is not None or not await self._alive(dev):
                if await self._finish_if_complete(run, dev):
                    return True
                if await self._finished_elsewhere(dev):
                    return True
                await self._restart(run, dev)
            else:  # the follower ended but the agent lives (tail killed?): follow again, calmly
                await asyncio.sleep(1.0)

    async def _deploy_and_start(self, run: _Run, dev: _DeviceRun) -> None:
        """Deploy and first start in as few round trips as the safety checks allow.

        Every SSH exec pays for the device's login shell, so the common case (agent already
        there) is one remote command: resolve the work dir, check the agent's sha256, write the
        trials (stdin) and start the agent detached. A missing or stale agent adds one SFTP upload
        to a temporary name and one more such command, which verifies the upload's hash before
        renaming it into place.
        """
        from ngb.devices.deploy import agent_bundle

        transport = dev.transport
        assert transport is not None
        if dev.trials_text is None:  # attached to a run whose agent never started
            raise NgbError(f"{dev.name}: run {run.run_id} was never started there; start it again")
        if dev.cancel_requested:
            return
        local, digest = agent_bundle()

        async def launch(part: str = "") -> int | None:
            argv = remote.launch_argv(
                dev.device.python, dev.device.workdir, local.name, digest, run.run_id,
                part=part, isolate=run.isolate,
            )  # fmt: skip
            out = await _checked(transport, argv, "start the agent", input=dev.trials_text)
            try:
                workdir, pid = remote.parse_launch(out)
            except NgbError as exc:
                raise NgbError(f"{dev.name}: {exc}") from None
            dev.paths = dev.paths or RunPaths(workdir, run.run_id)
            dev.agent_path = f"{workdir.rstrip('/')}/{local.name}"
            return pid

        # The user's model files first: the agent verifies them before each trial uses them.
        shipment = await ship_run_artifacts(transport, dev.device, dev.trials_text)
        if shipment.uploaded or shipment.reused or shipment.unavailable:
            self._publish(self._conn_event(dev, describe_shipment(shipment)))
        pid = await launch()
        if pid is None:  # no agent (or another version) there: upload, then verify + start
            assert dev.agent_path is not None
            part = f"{dev.agent_path}.{uuid.uuid4().hex[:12]}.part"
            await transport.put(str(local), part)
            pid = await launch(part)
            if pid is None:
                raise NgbError(f"{dev.name}: the uploaded agent did not install")
        self._agent_started(dev, pid)

    async def _start_agent(self, run: _Run, dev: _DeviceRun, upload: str | None = None) -> None:
        """Start (or restart) the agent; with ``upload``, write trials.jsonl in the same command."""
        transport, paths = dev.transport, dev.paths
        assert transport is not None and paths is not None and dev.agent_path
        argv = remote.start_agent_argv(
            dev.device.python, dev.agent_path, paths, isolate=run.isolate, upload=upload is not None
        )
        out = await _checked(transport, argv, "start the agent", input=upload)
        try:
            pid = int(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise NgbError(f"{dev.name}: could not start the agent: {out.strip()[:200]}") from None
        self._agent_started(dev, pid)

    def _agent_started(self, dev: _DeviceRun, pid: int) -> None:
        dev.pid = pid
        if not dev.started:
            self._pending_for(dev).fields["started_at"] = time.time()
        dev.started = True
        dev.run_done = None
        self._mark_dirty(dev)
        self._flush_wakeup.set()  # record pid + paths soon: `attach` needs them

    async def _follow(self, dev: _DeviceRun) -> None:
        """Consume the event log from the offset until the agent exits (tail --pid ends).

        A watchdog asks whether the agent lives after ``watchdog`` quiet seconds: ``tail --pid``
        cannot see that an unreaped zombie is dead, and the agent may be silent for hours while
        a compiler tunes, so silence alone proves nothing.
        """
        transport, paths = dev.transport, dev.paths
        assert transport is not None and paths is not None
        if dev.pid is None:
            return  # nothing to follow: the caller's liveness check decides what comes next
        loop = asyncio.get_running_loop()
        last_line = loop.time()
        reader = EventLogReader(dev.offset)
        stream = transport.stream(remote.follow_argv(paths, dev.offset, dev.pid))

        async def consume() -> None:
            nonlocal last_line
            async for line in stream:
                last_line = loop.time()
                event = reader.feed(line)
                dev.offset = reader.offset
                if event is not None:
                    self._on_agent_event(dev, event)
                    if event.get("type") == ev.RUN_DONE:
                        return

        consumer = asyncio.create_task(consume())
        try:
            while True:
                done, _ = await asyncio.wait({consumer}, timeout=self.watchdog)
                if done:
                    consumer.result()  # re-raise a transport error
                    break
                if loop.time() - last_line >= self.watchdog and not await self._alive(dev):
                    break
        finally:
            if not consumer.done():
                consumer.cancel()
                await asyncio.gather(consumer, return_exceptions=True)
            reader.end_of_stream()
            with contextlib.suppress(Exception):
                await stream.aclose()  # type: ignore[attr-defined]
        self._mark_dirty(dev)

    def _on_agent_event(self, dev: _DeviceRun, event: dict[str, Any]) -> None:
        kind = event.get("type")
        pending = self._pending_for(dev)
        if kind in (ev.TRIAL_DONE, ev.TRIAL_FAILED) and isinstance(event.get("result"), dict):
            result = TrialResult.from_dict(event["result"])
            dev.results[result.key] = result.ok
            pending.results[result.key] = result
            dev.current = ""
        elif kind == ev.TRIAL_STARTED:
            dev.current = str(event.get("label") or event.get("key") or "")
        elif kind == ev.CPU:
            pending.cpu.append(event)
        elif kind == ev.TUNING and event.get("key"):
            pending.tuning.setdefault(str(event["key"]), []).append(event)
        elif kind == ev.RUN_DONE:
            dev.run_done = event
        self._publish(
            RunEvent(dev.run_id, dev.name, "agent", dev.state, event=event,
                     message=_event_line(event), done=dev.done, failed=dev.failed,
                     total=len(dev.keys) or None)
        )  # fmt: skip

    async def _alive(self, dev: _DeviceRun) -> bool:
        assert dev.transport is not None
        res = await dev.transport.run(remote.alive_argv(dev.pid), timeout=self.connect_timeout)
        answer = res.stdout.strip()
        if res.returncode != 0 or answer not in ("alive", "dead"):
            # Never conclude "dead" from a broken answer: that would start a second agent.
            raise TransportError(f"{dev.name}: no answer to the liveness check")
        return answer == "alive"

    async def _finish_if_complete(self, run: _Run, dev: _DeviceRun) -> bool:
        """Agent gone: ingest the checkpoint; finish if complete, cancelled or cancel asked."""
        checkpoint = await self._read_checkpoint(dev)
        if not dev.keys:
            dev.keys = await self._read_trial_keys(dev)
        for key, data in checkpoint.items():
            result = TrialResult.from_dict(data)
            dev.results[key] = result.ok
            self._pending_for(dev).results[key] = result
        cancelled = bool(dev.run_done and dev.run_done.get("cancelled")) or dev.cancel_requested
        complete = bool(dev.keys) and dev.keys <= set(checkpoint)
        if not (complete or cancelled):
            return False
        await self._flush_now(dev)  # results stored before the run dir may go
        state = FINISHED if complete and not cancelled else CANCELLED
        n_skipped = int((dev.run_done or {}).get("skipped") or 0)
        await self._set_state(
            dev, state, f"{dev.done - dev.failed} ok, {dev.failed} failed", n_skipped=n_skipped,
            finished=True,
        )  # fmt: skip
        await self._flush_now(dev)  # the final row too: a second follower must see it
        if not run.keep:
            try:
                await _checked(dev.transport, remote.teardown_argv(dev.paths), "remove run dir")
            except (NgbError, TransportError, OSError) as exc:
                await self._record_error(dev, None, "teardown", first_line(exc))
        return True

    async def _finished_elsewhere(self, dev: _DeviceRun) -> bool:
        """The run dir is gone: another ngb process (a second `attach`) finished this device."""
        assert dev.paths is not None
        if await self._fetch_text(dev, dev.paths.trials) is not None:
            return False
        rows = await self._store_call(self.store.run_devices, dev.run_id)
        state = next((r.get("state") for r in rows if r["device"] == dev.name), None)
        if state in FINAL_STATES:
            dev.state = state
            dev.row_sig = dev.signature()  # the other process wrote the row; leave it be
            self._publish(self._conn_event(dev, "finished by another ngb process"))
            return True
        raise _DeviceFailed(f"the run directory {dev.paths.run_dir} vanished from the device")

    async def _restart(self, run: _Run, dev: _DeviceRun) -> None:
        dev.restarts += 1
        why = await self._stderr_tail(dev)
        msg = f"agent died without finishing (restart {dev.restarts}/{self.max_restarts})"
        if why:
            msg += f"; stderr: {why}"
        await self._record_error(dev, None, "agent", msg)
        if dev.restarts > self.max_restarts:
            raise _DeviceFailed(f"agent died {dev.restarts} times; last stderr: {why or '-'}")
        self._publish(self._conn_event(dev, msg))
        await self._start_agent(run, dev)

    # ------------------------------------------------------------------ connections

    def _default_transport(self, device: Any) -> Transport:
        from ngb.devices.ssh import make_transport

        if getattr(device, "is_local", False):
            return make_transport(device)
        return make_transport(
            device,
            connect_timeout=self.connect_timeout,
            keepalive_interval=self.keepalive,
            inventory=self.inventory,
        )

    async def _connect(self, dev: _DeviceRun, *, reconnect: bool) -> None:
        await self._set_state(dev, RECONNECTING if reconnect else CONNECTING, "")
        transport = self._transport_factory(dev.device)
        async with self._handshakes:
            try:
                await asyncio.wait_for(transport.connect(), self.connect_timeout * 2)
            except asyncio.TimeoutError:
                with contextlib.suppress(Exception):
                    await transport.close()
                raise TransportError(f"{dev.name}: connect timed out") from None
            except BaseException:
                with contextlib.suppress(Exception):
                    await transport.close()
                raise
        dev.transport = transport

    async def _drop_transport(self, dev: _DeviceRun) -> None:
        transport, dev.transport = dev.transport, None
        if transport is not None:
            with contextlib.suppress(Exception):
                await transport.close()

    def _delay(self, failures: int) -> float:
        lo, hi = self.backoff
        return min(hi, lo * 2 ** (failures - 1)) * self._rng.uniform(0.5, 1.0)

    async def _remote_workdir(self, transport: Transport, workdir: str) -> str:
        if not workdir.startswith("~"):
            return workdir
        home = (await _checked(transport, remote.home_argv(), "find the home directory")).strip()
        return remote.expand_home(workdir, home)

    async def _send_cancel(self, dev: _DeviceRun) -> None:
        assert dev.transport is not None and dev.paths is not None
        res = await dev.transport.run(remote.signal_argv(dev.paths, dev.pid, "TERM"), timeout=30)
        if res.returncode < 0:
            raise TransportError(f"{dev.name}: connection lost while sending the cancel")
        dev.cancel_sent = True
        self._publish(
            self._conn_event(
                dev, "cancel sent" if res.returncode == 0 else "cancel: the agent was not running"
            )
        )

    async def _on_each_device(
        self, run_id: str, build: Callable[[RunPaths, int | None], list[str]], what: str
    ) -> dict[str, Any]:
        """Run one command per device of a run (live here, or found in the store), concurrently.

        Returns ``{device: CommandResult}``, or the one-line error for a device out of reach.
        """
        run = self._runs.get(run_id)
        if run is not None:
            targets = [(d.device, d.paths, d.pid, d.transport, d.state)
                       for d in run.devices.values()]  # fmt: skip
        else:
            rows = await self._store_call(self.store.run_devices, run_id)
            if not rows:
                raise NgbError(f"unknown run {run_id!r}; `ngb status` lists the runs")
            targets = []
            for row in rows:
                extra = _json_field(row.get("extra"))
                if row.get("state") not in FINAL_STATES and extra.get("run_dir"):
                    paths = RunPaths(_parent_workdir(extra["run_dir"]), run_id)
                    device = self._resolve([row["device"]])[0]
                    targets.append((device, paths, extra.get("pid"), None, row.get("state")))

        async def one(device: Any, paths: RunPaths | None, pid: Any, transport: Any, state: str):
            if paths is None:
                return device.name, "not started yet"
            own = transport is None
            try:
                if own:
                    transport = self._transport_factory(device)
                    async with self._handshakes:
                        await transport.connect()
                res = await transport.run(build(paths, pid), timeout=30)
                self._publish(RunEvent(run_id, device.name, "connection", state, message=what))
                return device.name, res
            except (TransportError, OSError) as exc:
                msg = f"{what} failed: {first_line(exc)}"
                self._publish(RunEvent(run_id, device.name, "connection", state, message=msg))
                return device.name, first_line(exc)
            finally:
                if own and transport is not None:
                    with contextlib.suppress(Exception):
                        await transport.close()

        return dict(await asyncio.gather(*(one(*t) for t in targets)))

    async def check(self, run_id: str) -> dict[str, str]:
        """Ask each unfinished device of a run whether its agent lives: alive, dead, or why not."""
        answers = await self._on_each_device(
            run_id, lambda paths, pid: remote.agent_alive_argv(paths, pid), "checked"
        )
        out = {}
        for name, res in answers.items():
            if isinstance(res, str):
                out[name] = f"unreachable: {res}" if res != "not started yet" else res
            else:
                out[name] = res.stdout.strip() or f"no answer (exit {res.returncode})"
        return out

    # ------------------------------------------------------------------ remote reads

    async def _fetch_text(self, dev: _DeviceRun, path: str) -> str | None:
        assert dev.transport is not None
        res = await dev.transport.run(remote.read_file_argv(path), timeout=120)
        if res.returncode == 3:
            return None
        if res.returncode != 0:  # cut short (link lost) or unreadable: try again after reconnect
            raise TransportError(f"{dev.name}: could not read {path} (exit {res.returncode})")
        return res.stdout

    async def _read_pid(self, dev: _DeviceRun) -> int | None:
        assert dev.paths is not None
        text = (await self._fetch_text(dev, dev.paths.pidfile) or "").strip()
        return int(text) if text.isdigit() else None

    async def _read_checkpoint(self, dev: _DeviceRun) -> dict[str, dict[str, Any]]:
        assert dev.paths is not None
        text = await self._fetch_text(dev, dev.paths.checkpoint)
        return remote.parse_checkpoint(text or "")

    async def _read_trial_keys(self, dev: _DeviceRun) -> set[str]:
        assert dev.paths is not None
        text = await self._fetch_text(dev, dev.paths.trials) or ""
        keys = set()
        for data in remote.parse_jsonl(text):
            keys.add(TrialSpec.from_dict(data).key)
        return keys

    async def _stderr_tail(self, dev: _DeviceRun) -> str:
        assert dev.transport is not None and dev.paths is not None
        with contextlib.suppress(TransportError, OSError):
            res = await dev.transport.run(remote.stderr_tail_argv(dev.paths, 3), timeout=30)
            return " | ".join(x.strip() for x in res.stdout.splitlines() if x.strip())[-300:]
        return ""

    # ------------------------------------------------------------------ state, store, events

    async def _set_state(self, dev: _DeviceRun, state: str, message: str, **fields: Any) -> None:
        changed = dev.state != state
        dev.state = state
        if message and state in (FAILED, LOST):
            dev.error = message
        self._mark_dirty(dev)
        self._pending_for(dev).fields.update(fields)
        if changed or message:
            self._publish(self._conn_event(dev, message))
        if changed and state in (*FINAL_STATES, LOST):
            self._flush_wakeup.set()  # record it soon, without waiting for it here

    async def _fail(self, dev: _DeviceRun, message: str, *, kind: str) -> None:
        await self._record_error(dev, None, kind, message)
        await self._set_state(dev, FAILED, message, finished=True)

    async def _record_error(self, dev: _DeviceRun, key: str | None, kind: str, msg: str) -> None:
        self._pending_for(dev).errors.append((key, kind, msg))
        self._mark_dirty(dev)

    def _conn_event(self, dev: _DeviceRun, message: str) -> RunEvent:
        return RunEvent(
            dev.run_id,
            dev.name,
            "connection",
            dev.state,
            message=message,
            done=dev.done,
            failed=dev.failed,
            total=len(dev.keys) or None,
        )

    def _publish(self, item: RunEvent) -> None:
        for sub in list(self._subscribers):
            sub._put(item)

    def _pending_for(self, dev: _DeviceRun) -> _Pending:
        return self._pending.setdefault((dev.run_id, dev.name), _Pending())

    def _mark_dirty(self, dev: _DeviceRun) -> None:
        self._pending_for(dev).dirty = True

    async def _store_call(self, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        """Store calls block (DuckDB): run them in a thread, one at a time."""
        async with self._store_lock:
            return await asyncio.to_thread(fn, *args, **kwargs)

    async def _flush_loop(self) -> None:
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._flush_wakeup.wait(), self.flush_interval)
            self._flush_wakeup.clear()
            try:
                await self._flush()
            except Exception:  # the store is busy or broken: keep buffering, try again
                log.exception("ingest failed; retrying")

    async def _flush_now(self, dev: _DeviceRun) -> None:
        """Wait until everything buffered for ``dev`` is in the store (before a teardown)."""
        while True:
            target = self._flushes_started + 1
            self._flush_wakeup.set()
            if self._flusher is None or self._flusher.done():
                await self._flush()
            else:
                async with self._flush_cond:
                    await self._flush_cond.wait_for(functools.partial(self._flushed, target))
            pending = self._pending.get((dev.run_id, dev.name))
            if pending is None or pending.empty():
                return
            await asyncio.sleep(self.flush_interval)  # that flush failed: the store is busy

    def _flushed(self, target: int) -> bool:
        return self._flushes_done >= target

    async def _flush(self) -> None:
        """Write every device's buffer in one batch (one DuckDB open for all of them).

        Results, samples and errors of all devices go in one store transaction; a device's
        run_devices row is rewritten only when something in it changed, and for a moved offset
        alone at most every ``offset_every`` seconds (re-reading a few events after a crash costs
        nothing: the store ignores results it has).
        """
        async with self._store_lock:
            self._flushes_started += 1
            now = time.monotonic()
            batch: list[tuple[_DeviceRun, _Pending, dict[str, Any] | None]] = []
            for key, pending in list(self._pending.items()):
                run = self._runs.get(key[0])
                dev = run.devices.get(key[1]) if run else None
                if dev is None:
                    continue
                sig = dev.signature()
                row_due = (
                    pending.dirty
                    or bool(pending.fields)
                    or sig != dev.row_sig
                    or (dev.offset != dev.row_offset and now - dev.row_at >= self.offset_every)
                )
                if not (row_due or pending.has_data()):
                    continue
                # Snapshot the row now (event-loop side): its offset covers only events whose
                # results are in this batch or an earlier one.
                row = self._row(dev, pending) if row_due else None
                if row_due:
                    dev.row_sig, dev.row_offset, dev.row_at = sig, dev.offset, now
                batch.append((dev, pending, row))
                self._pending[key] = _Pending()
            try:
                if batch:
                    await asyncio.to_thread(self._write_batch, batch)
                    for dev, pending, _ in batch:
                        if pending.results:
                            self._publish(self._ingest_event(dev, len(pending.results)))
            except BaseException:
                for dev, pending, row in batch:  # put it back in front of anything newer
                    key = (dev.run_id, dev.name)
                    self._pending[key] = pending.merged(self._pending.get(key))
                    if row is not None:
                        dev.row_sig = None  # rewrite the row next time
                raise
            finally:
                self._flushes_done = self._flushes_started
                async with self._flush_cond:
                    self._flush_cond.notify_all()

    def _row(self, dev: _DeviceRun, pending: _Pending) -> dict[str, Any]:
        fields = dict(pending.fields)
        row: dict[str, Any] = {
            "state": dev.state, "n_done": dev.done, "n_failed": dev.failed,
            "message": dev.error or dev.current or "", **dev.extra(),
            "workdir": dev.paths.workdir if dev.paths else dev.device.workdir,
        }  # fmt: skip
        if fields.pop("finished", False):
            row["finished_at"] = time.time()
        row.update(fields)
        if dev.keys:
            row["n_trials"] = len(dev.keys)
        return row

    def _write_batch(self, batch: list[tuple[_DeviceRun, _Pending, dict[str, Any] | None]]) -> None:
        """In a worker thread: all devices' data in one transaction, then the changed rows."""
        store = self.store
        with store.batch():
            buffer = store.buffer()
            for dev, pending, _ in batch:
                run_id, name = dev.run_id, dev.name
                for result in pending.results.values():
                    buffer.add_result(run_id, name, result)
                for event in pending.cpu:
                    buffer.add_cpu_sample(run_id, name, event)
                for key, events in pending.tuning.items():
                    for event in events:
                        buffer.add_tuning(run_id, name, key, event)
                for trial_key, kind, message in pending.errors:
                    buffer.add_error(run_id, name, trial_key, kind, message)
            buffer.flush()
            for dev, _, row in batch:  # after the results: an offset never runs ahead of them
                if row is not None:
                    store.upsert_run_device(dev.run_id, dev.name, **row)

    def _ingest_event(self, dev: _DeviceRun, n: int) -> RunEvent:
        return RunEvent(
            dev.run_id, dev.name, "ingest", dev.state, message=f"{n} results stored",
            done=dev.done, failed=dev.failed, total=len(dev.keys) or None,
        )  # fmt: skip

    # ------------------------------------------------------------------ helpers

    def _resolve(self, names: str | Iterable[str]) -> list[Any]:
        if isinstance(names, str):
            return self.inventory.resolve(names)
        return self.inventory.resolve(list(names))

    def _get_run(self, run_id: str) -> _Run:
        try:
            return self._runs[run_id]
        except KeyError:
            raise NgbError(
                f"run {run_id!r} is not active here (try `ngb attach {run_id}`)"
            ) from None

    def _summary(self, run: _Run) -> dict[str, Any]:
        return {
            "run_id": run.run_id,
            "status": run.status,
            "devices": {
                name: {"state": d.state, "done": d.done, "failed": d.failed,
                       "total": len(d.keys), "error": d.error, "restarts": d.restarts}
                for name, d in run.devices.items()
            },
        }  # fmt: skip

    def _summary_line(self, run: _Run) -> str:
        parts = [f"{n}: {d.state} {d.done}/{len(d.keys)}" for n, d in run.devices.items()]
        return "; ".join(parts)


class _DeviceFailed(NgbError):
    """This device cannot go on (too many agent restarts...)."""


async def _checked(
    transport: Transport | None, argv: list[str], what: str, input: str | None = None
) -> str:
    assert transport is not None
    res = await transport.run(argv, timeout=120, input=input)
    if res.returncode < 0:  # no exit status: the link went away mid-command
        raise TransportError(f"{transport.name}: connection lost while trying to {what}")
    if res.returncode != 0:
        detail = (res.stderr or res.stdout).strip().splitlines()
        raise NgbError(
            f"{transport.name}: could not {what}: {detail[-1] if detail else res.returncode}"
        )
    return res.stdout


def _event_line(event: dict[str, Any]) -> str:
    kind = event.get("type")
    if kind == ev.TRIAL_STARTED:
        return f"trial {event.get('index', '?')}/{event.get('total', '?')}: {event.get('label')}"
    if kind == ev.TRIAL_FAILED:
        return f"failed: {event.get('error')}"
    if kind == ev.LOG:
        return str(event.get("msg", ""))
    return str(kind)


def _json_field(value: Any) -> dict[str, Any]:
    import json

    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value:
        try:
            out = json.loads(value)
        except ValueError:
            return {}
        return out if isinstance(out, dict) else {}
    return {}


def _parent_workdir(run_dir: str) -> str:
    """``<workdir>/runs/<run_id>`` -> ``<workdir>``."""
    return os.path.dirname(os.path.dirname(run_dir.rstrip("/"))) or "/"


def _is_link_error(exc: BaseException) -> bool:
    """Errors that mean "the link is gone" (retry), as opposed to bugs (fail loudly)."""
    if isinstance(exc, TransportError | OSError | EOFError | asyncio.IncompleteReadError):
        return True
    return type(exc).__module__.split(".")[0] == "asyncssh"
