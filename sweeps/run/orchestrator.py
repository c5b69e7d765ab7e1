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
  Restarts are bounded (``max_restarts``) and each one is recorded as an error. Only the
  follower that owns the device (``ownership``: the one that started the run, or took over from
  one gone) starts, restarts or resubmits; any other follower only follows and takes the
  owner's outcome from the store. A job a batch scheduler ended is not an agent fault: its
  trial fails with the scheduler's reason or runs again in a new allocation (``job_end``);
- the end of a device's run -> fetch the checkpoint (the authoritative record) and ingest whatever
  the event stream missed; the store is idempotent per (run, device, key), so a result that
  arrives twice is stored once. Then remove the run dir unless ``keep``;
- a failing trial is a failed trial row, never a stopped sweep; an unreachable device or a refused
  host key fails that device only, with a one-line message.

Around it, in this package: ``events`` (what front ends read), ``writer`` (the write path),
``state``, ``device_io`` / ``device_links`` / ``device_claim`` (the device side; one run per
device), ``ownership`` (one follower acts for a device) and ``listing`` (every run); the typed seam
to the store is ``ngb.sweeps.store.result_store``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping

from ngb.core.base.errors import NgbError, first_line
from ngb.core.records.types import TrialResult, TrialSpec
from ngb.devices import protocol as remote
from ngb.devices.inventory import Device, Inventory
from ngb.devices.protocol import RunPaths
from ngb.devices.transport import CommandResult, HostKeyError, Transport, TransportError
from ngb.sweeps.run import device_io, job_end
from ngb.sweeps.run.device_claim import DeviceBusy, Holder
from ngb.sweeps.run.device_links import DeviceLinks
from ngb.sweeps.run.device_links import close as close_transport
from ngb.sweeps.run.device_queue import QUEUE_PREFIX
from ngb.sweeps.run.events import (
    CANCELLED,
    CONNECTING,
    DEPLOYING,
    DETACHED,
    FAILED,
    FINAL_STATES,
    FINISHED,
    LOST,
    PENDING,
    RECONNECTING,
    RUNNING,
    EventHub,
    RunEvent,
    Subscription,
    event_line,
)
from ngb.sweeps.run.listing import RunOverview, list_runs
from ngb.sweeps.run.owner_watch import OwnerWatch
from ngb.sweeps.run.ownership import Owners
from ngb.sweeps.run.state import DeviceRun, Run, new_run_id, resumed_run, started_devices
from ngb.sweeps.run.writer import LOCAL_FLUSH_S, PendingWrites, RunWriter, record_agent_event
from ngb.sweeps.spec.sweep import Sweep
from ngb.sweeps.store.result_store import DatabaseBusy, ResultStore, StoreUnwritable

__all__ = ["FINAL_STATES", "Orchestrator", "RunEvent", "Subscription", "new_run_id"]  # front ends

log = logging.getLogger(__name__)
#: seconds a device's end waits for a busy store before it decides without the stored row
BUSY_STORE_S = 30.0


class Orchestrator:
    """Runs sweeps on devices. Construct it inside the event loop that will drive it.

    ``inventory`` resolves device names and groups (``ngb.devices.inventory.Inventory``).
    ``transport_factory(device) -> Transport`` overrides how devices are reached (tests, custom
    known_hosts); by default local devices get ``LocalTransport`` and the others ``SshTransport``
    with ``connect_timeout`` and ``keepalive`` seconds.
    """

    def __init__(
        self,
        store: ResultStore,
        inventory: Inventory,
        *,
        max_handshakes: int = 64,
        connect_timeout: float = 10.0,
        keepalive: float = 15.0,
        backoff: tuple[float, float] = (0.5, 30.0),
        reconnect_window: float = 600.0,
        connect_attempts: int = 3,
        max_restarts: int = 5,
        flush_interval: float = 1.0,
        local_flush_interval: float = LOCAL_FLUSH_S,
        offset_every: float = 5.0,
        queue_size: int = 10_000,
        transport_factory: Callable[[Device], Transport] | None = None,
        watchdog: float = 30.0,
        seed: int | None = None,
        owner_poll: float = 2.0,
    ) -> None:
        self.store = store
        self.inventory = inventory
        self.connect_timeout = connect_timeout
        self.reconnect_window = reconnect_window
        self.connect_attempts = connect_attempts
        self.max_restarts = max_restarts
        self.watchdog = watchdog
        self.owner_poll = owner_poll  # how often a follower that does not own a device looks
        self._owners = Owners(store)
        self._owner = OwnerWatch(self._owners, self._stored_row, self._say, owner_poll)
        self._host_agents = device_io.HostAgents()  # one upload of the agent per machine
        self._links = DeviceLinks(
            lambda: self.inventory, transport_factory=transport_factory,
            max_handshakes=max_handshakes, connect_timeout=connect_timeout, keepalive=keepalive,
            backoff=backoff, seed=seed,
        )  # fmt: skip
        self._runs: dict[str, Run] = {}
        self._events = EventHub(queue_size)
        self._writer = RunWriter(
            store,
            device_of=self._device_of,
            following=self._following,
            publish=self._publish,
            on_unwritable=self._store_unwritable,
            flush_interval=flush_interval,
            local_flush_interval=local_flush_interval,
            offset_every=offset_every,
        )

    # ------------------------------------------------------------------ public API

    def subscribe(self, run_id: str | None = None) -> Subscription:
        """A new event stream (all runs, or one). Close it (``sub.close()``) when done."""
        return self._events.subscribe(run_id)

    def active_runs(self) -> list[str]:
        return [rid for rid, run in self._runs.items() if not run.finished.is_set()]

    def device_states(self, run_id: str) -> dict[str, dict[str, object]]:
        """Current state, counts, pid and trial in flight per device of an active run."""
        return self._get_run(run_id).device_states()

    async def start(
        self,
        sweep: Sweep,
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
        for other in (r for r in self._runs.values() if not r.finished.is_set()):
            # a Slurm slot is not refused: its job waits in the scheduler's queue (device_claim)
            busy = (d for d in devices if d.name in other.devices and d.transport != "slurm")
            for held in (other.devices[d.name] for d in busy):
                raise DeviceBusy(held.name, Holder(other.run_id, held.pid))
        if isolate not in (None, "subprocess", "inprocess"):
            raise NgbError(f"isolate must be subprocess or inprocess, not {isolate!r}")
        text = remote.trials_jsonl(s.to_dict() for s in specs)
        keys = {s.key for s in specs}
        meta = {"keep": keep, "isolate": isolate, "trial_keys": len(keys)}
        run = Run(
            run_id=run_id,
            sweep_name=sweep.name,
            keep=keep,
            isolate=isolate,
            devices={d.name: DeviceRun(run_id, d, set(keys), trials_text=text) for d in devices},
        )

        def create() -> None:
            with self.store.batch():
                if not self.store.create_run(
                    run_id, sweep.name, sweep.to_toml(), list(run.devices), len(keys), meta
                ):
                    raise NgbError(f"run {run_id!r} exists already (`ngb attach {run_id}`?)")
                self.store.set_run_status(run_id, "running")
                self.store.upsert_run_devices([  # one statement per column set, not per device
                    (run_id, dev.name, {
                        "state": PENDING, "workdir": dev.device.workdir, "n_trials": len(keys),
                        "n_done": 0, "n_failed": 0, **dev.extra(),
                    })
                    for dev in run.devices.values()
                ])  # fmt: skip

        await self._writer.store_call(create)
        self._launch(run, "started")
        return run_id

    async def attach(self, run_id: str, *, cancel: bool = False, resume: bool = True) -> str:
        """Follow a run found in the store again (e.g. after a workstation restart).

        Finished and cancelled devices are left alone; the others (failed ones too: an agent
        that died too often, a device that was unreachable) are reconnected and followed from
        their recorded offsets, or started if their agent never was, with a fresh restart budget;
        a Slurm slot whose job the scheduler ended gets a new allocation. ``resume=False`` only
        follows (the console's re-attach at start-up): failed devices are left as they are, and
        a job the scheduler ends is never resubmitted by this follower.
        """
        if run_id in self._runs and not self._runs[run_id].finished.is_set():
            return run_id
        runs = {r["run_id"]: r for r in await self._writer.store_call(self.store.runs)}
        if run_id not in runs:
            raise NgbError(f"unknown run {run_id!r}; `ngb status` lists the runs")
        rows = await self._writer.store_call(self.store.run_devices, run_id)
        stored = await self._writer.store_call(self.store.trials, run_id=run_id)
        # a sweep's served trials are ``serving`` rows, no ``trials`` row: counted done too, or
        # the device reads short until its checkpoint is read
        stored += await self._writer.store_call(self.store.served_trials, run_id)
        run = resumed_run(runs[run_id], rows, stored, self._resolve, cancel=cancel, resume=resume)
        if not run.devices:
            raise NgbError(
                f"run {run_id!r} has no device left to follow (all finished or cancelled)"
            )
        if not cancel:
            await self._writer.store_call(self.store.set_run_status, run_id, "running")
        run.attached = True
        self._launch(run, "attached")
        return run_id

    async def cancel(self, run_id: str) -> dict[str, object]:
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

    async def wait(self, run_id: str) -> dict[str, object]:
        """Wait until every device of the run is finished, failed, cancelled, lost or detached."""
        run = self._get_run(run_id)
        await run.finished.wait()
        return run.summary()

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
            await self._writer.flush_quietly()
            if run.watcher:
                await asyncio.gather(run.watcher, return_exceptions=True)

    async def close(self) -> None:
        """Detach from everything, flush, close subscriptions."""
        await self.detach()
        await self._writer.close()
        self._events.close()

    # ------------------------------------------------------------------ run lifecycle

    def _launch(self, run: Run, how: str) -> None:
        self._runs[run.run_id] = run
        self._writer.ensure_running()
        self._publish(RunEvent(run.run_id, "", "run", how, message=f"{len(run.devices)} devices"))
        for dev in run.devices.values():  # owned before any task runs: the starter acts
            dev.owner = self._owners.take(run.run_id, dev.name)
            dev.followed_since = time.time()
        for dev in run.devices.values():
            dev.task = asyncio.create_task(self._device_main(run, dev), name=f"ngb-{dev.name}")
        run.watcher = asyncio.create_task(self._watch(run), name=f"ngb-run-{run.run_id}")

    async def _watch(self, run: Run) -> None:
        tasks = [d.task for d in run.devices.values() if d.task]
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._writer.flush_quietly()
        status, message = run.outcome(self._writer.broken)
        run.status = status
        if status != "detached":
            with contextlib.suppress(Exception):
                await self._writer.store_call(self.store.set_run_status, run.run_id, status)
        self._publish(RunEvent(run.run_id, "", "run", status, message=message))
        run.finished.set()

    def _store_unwritable(self, message: str) -> None:
        """The store cannot be written: stop following every device (their agents go on)."""
        current = asyncio.current_task()
        for run in self._runs.values():
            for dev in run.devices.values():
                if dev.task is not None and dev.task is not current and not dev.task.done():
                    dev.task.cancel()

    async def _device_main(self, run: Run, dev: DeviceRun) -> None:
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
                except StoreUnwritable:  # nothing more can be recorded: leave the agent be
                    self._detached(dev, "the results database cannot be written")
                    return
                except NgbError as exc:  # e.g. too many agent restarts, a refused command
                    await self._fail(dev, first_line(exc), kind="device")
                    return
                except Exception as exc:
                    if not device_io.is_link_error(exc):
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
                    await asyncio.sleep(self._links.delay(failures))
        except asyncio.CancelledError:
            self._detached(dev, "the workstation stopped following")
            raise
        except Exception as exc:  # a bug: fail this device loudly, keep the others going
            log.exception("device %s crashed the orchestrator task", dev.name)
            await self._fail(dev, f"internal error: {first_line(exc)}", kind="internal")
        finally:
            await self._drop_transport(dev)
            if dev.owner and dev.state in FINAL_STATES:  # the outcome stored before another acts
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._writer.flush_now(dev), 30.0)
            # another follower may act now; this one's last row (detached...) is still written
            self._owners.release(run.run_id, dev.name)

    async def _drive(self, run: Run, dev: DeviceRun) -> bool:
        """With a live connection: start/follow/restart/finish. True when the device is done."""
        transport = dev.transport
        assert transport is not None
        if not dev.started and not self._owner.owns(dev) and await self._owner.wait(dev):
            return True  # another follower is starting it, and ended it
        if dev.paths is None and dev.started:  # attached without a recorded run dir
            workdir = await device_io.remote_workdir(transport, dev.device.workdir)
            dev.paths = RunPaths(workdir, run.run_id)
        if not dev.started and run.attached and await device_io.started_unrecorded(dev):
            self._mark_dirty(dev)  # its start is recorded now
        if not dev.started:
            await self._set_state(dev, DEPLOYING, "deploying the agent")
            await self._deploy_and_start(run, dev)
            if not dev.started:  # cancelled while deploying
                await self._set_state(dev, CANCELLED, "cancelled before it started")
                return True
        if dev.started and dev.pid is None:  # attached without a recorded pid
            dev.pid = await device_io.read_pid(dev)
        if dev.started and not dev.keys:  # attached: the device's own trial list is the truth
            dev.keys = await device_io.read_trial_keys(dev)
            self._publish(self._conn_event(dev, "attached"))
        if dev.resuming and dev.pid is not None:  # its job lives: a later end is not the one
            dev.resuming = not await device_io.alive(dev, self.connect_timeout)  # resumed
        if dev.cancel_requested and not dev.cancel_sent and dev.run_done is None:
            await self._send_cancel(dev)
        while True:
            if dev.run_done is None:
                await self._set_state(dev, RUNNING, dev.current or "following the agent")
                await self._follow(dev)
            if dev.run_done is not None or not await device_io.alive(dev, self.connect_timeout):
                owner = await self._owner.acts(dev)
                if owner is None:  # the follower it took over from ended the device
                    return True
                if await self._finish_if_complete(run, dev, owner=owner):
                    return True
                if await self._finished_elsewhere(dev):
                    return True
                if owner:
                    await self._restart(run, dev)
                elif await self._owner.wait(dev):
                    return True
            else:  # the follower ended but the agent lives (tail killed?): follow again, calmly
                await asyncio.sleep(device_io.FOLLOW_RETRY_S if dev.follow_error else 1.0)

    async def _deploy_and_start(self, run: Run, dev: DeviceRun) -> None:
        """Deploy and first start in as few round trips as the safety checks allow.

        Every SSH exec pays for the device's login shell, so the common case (agent already
        there) is one remote command: resolve the work dir, check the agent's sha256, write the
        trials (stdin) and start the agent detached. A missing or stale agent adds one SFTP upload
        to a temporary name and one more such command, which verifies the upload's hash before
        renaming it into place.
        """
        if dev.trials_text is None:  # attached to a run whose agent never started
            raise NgbError(f"{dev.name}: run {run.run_id} was never started there; start it again")
        if dev.cancel_requested:
            return
        say = functools.partial(self._say, dev)
        launched = await device_io.deploy_and_launch(dev, run.isolate, say, self._host_agents)
        self._agent_started(dev, launched)

    async def _start_agent(self, run: Run, dev: DeviceRun) -> None:
        """Start the agent again (it resumes from its checkpoint)."""
        self._agent_started(dev, await device_io.start_agent(dev, run.isolate))
        dev.resuming = False  # one new allocation per resume

    def _agent_started(self, dev: DeviceRun, pid: int) -> None:
        dev.pid = pid
        if not dev.started:
            self._pending_for(dev).fields["started_at"] = time.time()
        dev.started = True
        dev.run_done = None
        dev.exit_seen = False
        self._mark_dirty(dev)
        self._writer.wake()  # record pid + paths soon: `attach` needs them

    async def _follow(self, dev: DeviceRun) -> None:
        say = functools.partial(self._say, dev)  # a scheduler's queue state (device_queue)
        poll_s = device_io.follow_poll_s(self._following())  # a big fleet's tails poll less
        await device_io.follow_events(dev, self._on_agent_event, watchdog=self.watchdog,
                                      timeout=self.connect_timeout, say=say,
                                      poll_s=poll_s)  # fmt: skip
        self._mark_dirty(dev)

    def _on_agent_event(self, dev: DeviceRun, event: dict[str, object]) -> None:
        now = time.monotonic()
        if not dev.owner and now - dev.owner_asked >= self.owner_poll:  # its owner gone?
            dev.owner_asked = now
            if self._owner.owns(dev):
                self._mark_dirty(dev)  # this follower keeps the device's row from now on
        record_agent_event(dev, self._pending_for(dev), event)
        self._publish(
            RunEvent(dev.run_id, dev.name, "agent", dev.state, event=event,
                     message=event_line(event), done=dev.done, failed=dev.failed,
                     total=len(dev.keys) or None)
        )  # fmt: skip

    async def _finish_if_complete(self, run: Run, dev: DeviceRun, *, owner: bool = True) -> bool:
        """Agent gone: ingest the checkpoint; finish if complete, cancelled or cancel asked.

        Only the owner finishes: it writes the final row and removes the run dir. A follower
        that does not own the device takes the results and returns False, to wait for the
        owner's row (``OwnerWatch.wait``): finishing itself, it would remove the run dir under
        the owner, whose row it may not write (the owner then read "vanished" and failed).
        """
        if device_io.streamed_whole(dev):  # every result came live, the agent's exit too
            complete = True
        else:
            # it said goodbye: let it exit first (the device is free then), in the same command
            exit_wait = self.connect_timeout if dev.run_done is not None else None
            checkpoint = await device_io.read_checkpoint(dev, owner=owner, exit_wait=exit_wait)
            if not dev.keys:
                dev.keys = await device_io.read_trial_keys(dev)
            for key, data in checkpoint.items():
                result = TrialResult.from_dict(data)
                dev.results[key] = result.ok and key not in dev.rejected
                self._pending_for(dev).results[key] = result
            complete = bool(dev.keys) and dev.keys <= set(checkpoint)
        cancelled = bool(dev.run_done and dev.run_done.get("cancelled")) or dev.cancel_requested
        if not owner or not (complete or cancelled):
            return False
        await self._writer.flush_now(dev)  # results stored before the run dir may go
        state = FINISHED if complete and not cancelled else CANCELLED
        n_skipped = int((dev.run_done or {}).get("skipped") or 0)
        await self._set_state(
            dev, state, f"{dev.done - dev.failed} ok, {dev.failed} failed", n_skipped=n_skipped,
            finished=True,
        )  # fmt: skip
        await self._writer.flush_now(dev)  # the final row too: a second follower must see it
        try:  # the device is free for the next run (one run per device: device_claim)
            await device_io.release(dev, remove=not run.keep)
        except (NgbError, TransportError, OSError) as exc:
            await self._record_error(dev, None, "teardown", first_line(exc))
        return True

    async def _finished_elsewhere(self, dev: DeviceRun) -> bool:
        """The run dir is gone: another ngb process (a second `attach`) finished this device.

        Only the owner calls a run dir without a final row "vanished": a follower that does
        not own the device leaves the word to the owner (``OwnerWatch.wait``), whose final row
        may not be readable yet (under a 128-device ``--detach`` start and an ``attach``, load
        ~25, followers failed 3 and 30 finished devices "vanished"; the owner's last 1-3 were
        a second first start after a lost answer, whose interpreter check removed the run dir:
        ``protocol._READY_BY_START`` keeps it now). And a store busy in another
        process is asked again, not taken for an answer: ``DatabaseBusy`` is an ``NgbError``,
        which failed the device."""
        assert dev.paths is not None
        if await device_io.fetch_text(dev, dev.paths.trials) is not None:
            return False
        row = await self._stored_row(dev)
        waited = 0.0
        while not row and waited < BUSY_STORE_S:  # busy (or, briefly, no row yet): ask again
            await asyncio.sleep(1.0)
            waited += 1.0
            row = await self._stored_row(dev)
        state = row.get("state")
        if state in FINAL_STATES:
            dev.state = str(state)
            dev.row_sig = dev.signature()  # the other process wrote the row; leave it be
            self._publish(self._conn_event(dev, "finished by another ngb process"))
            return True
        if not dev.owner:
            return False
        raise NgbError(f"the run directory {dev.paths.run_dir} vanished from the device")

    async def _stored_row(self, dev: DeviceRun) -> Mapping[str, object]:
        """The device's ``run_devices`` row; empty while the store is busy."""
        try:
            rows = await self._writer.store_call(self.store.run_devices, dev.run_id)
        except DatabaseBusy:
            return {}
        return next((r for r in rows if r["device"] == dev.name), {})

    async def _restart(self, run: Run, dev: DeviceRun) -> None:
        # a job the scheduler ended: the slot fails (NgbError), or a new allocation goes on
        after_end = job_end.next_start(dev)
        if after_end is not None:
            await self._record_error(dev, None, "scheduler", after_end)
            self._publish(self._conn_event(dev, after_end))
            await self._start_agent(run, dev)
            return
        dev.restarts += 1
        why = await device_io.stderr_tail(dev)
        msg = f"agent died without finishing (restart {dev.restarts}/{self.max_restarts})"
        if why:
            msg += f"; stderr: {why}"
        await self._record_error(dev, None, "agent", msg)
        if dev.restarts - dev.restart_base > self.max_restarts:
            raise NgbError(
                f"agent died {dev.restarts} times (last stderr: {why or '-'}); its results are "
                f"kept on the device: `ngb attach {run.run_id}` tries again"
            )
        self._publish(self._conn_event(dev, msg))
        await self._start_agent(run, dev)

    # ------------------------------------------------------------------ connections

    async def _connect(self, dev: DeviceRun, *, reconnect: bool) -> None:
        await self._set_state(dev, RECONNECTING if reconnect else CONNECTING, "")
        dev.transport = await self._links.open(dev.device)

    async def _drop_transport(self, dev: DeviceRun) -> None:
        transport, dev.transport = dev.transport, None
        await close_transport(transport)

    async def _send_cancel(self, dev: DeviceRun) -> None:
        self._say(dev, await device_io.send_cancel(dev))

    async def _on_each_device(
        self, run_id: str, build: Callable[[RunPaths, int | None], list[str]], what: str
    ) -> dict[str, CommandResult | str]:
        """Run one command per device of a run (live here, or found in the store), concurrently.

        Returns ``{device: CommandResult}``, or the one-line error for a device out of reach.
        """
        run = self._runs.get(run_id)
        if run is not None:
            targets = list(run.devices.values())
        else:
            rows = await self._writer.store_call(self.store.run_devices, run_id)
            if not rows:
                raise NgbError(f"unknown run {run_id!r}; `ngb status` lists the runs")
            targets = started_devices(run_id, rows, self._resolve)
        return await self._links.on_each(targets, build, what, self._publish)

    async def list_runs(self, *, probe: bool = False) -> list[RunOverview]:
        """Every run in the store, live state where followed here; ``probe``: ask the devices."""
        devices = list(self.inventory.devices.values())
        return await list_runs(self.store, self._writer.store_call, self._runs, self._links,
                               devices, probe=probe)  # fmt: skip

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

    # ------------------------------------------------------------------ state, store, events

    async def _set_state(self, dev: DeviceRun, state: str, message: str, **fields: object) -> None:
        changed = dev.state != state
        dev.state = state
        if state in FINAL_STATES and dev.current.startswith(QUEUE_PREFIX):
            dev.current = ""  # a queue line ("RUNNING ... 9:51 left") is not the row's last word
        if message and state in (FAILED, LOST):
            dev.error = message
        self._mark_dirty(dev)
        self._pending_for(dev).fields.update(fields)
        if changed or message:
            self._publish(self._conn_event(dev, message))
        if changed and state in (*FINAL_STATES, LOST):
            self._writer.wake()  # record it soon, without waiting for it here

    async def _fail(self, dev: DeviceRun, message: str, *, kind: str) -> None:
        await self._record_error(dev, None, kind, message)
        await self._set_state(dev, FAILED, message, finished=True)

    async def _record_error(self, dev: DeviceRun, key: str | None, kind: str, msg: str) -> None:
        self._pending_for(dev).errors.append((key, kind, msg))
        self._mark_dirty(dev)

    def _conn_event(self, dev: DeviceRun, message: str) -> RunEvent:
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

    def _detached(self, dev: DeviceRun, message: str) -> None:
        if dev.state not in FINAL_STATES:
            dev.state = DETACHED
            self._mark_dirty(dev)
            self._publish(self._conn_event(dev, message))

    def _say(self, dev: DeviceRun, message: str) -> None:
        self._publish(self._conn_event(dev, message))

    def _publish(self, item: RunEvent) -> None:
        self._events.publish(item)

    def _following(self) -> int:
        """Devices whose task still runs here (following, starting or tearing down)."""
        return sum(
            1
            for run in self._runs.values()
            for dev in run.devices.values()
            if dev.task is not None and not dev.task.done()
        )

    def _device_of(self, run_id: str, device: str) -> DeviceRun | None:
        run = self._runs.get(run_id)
        return run.devices.get(device) if run else None

    def _pending_for(self, dev: DeviceRun) -> PendingWrites:
        return self._writer.pending_for(dev)

    def _mark_dirty(self, dev: DeviceRun) -> None:
        self._writer.mark_dirty(dev)

    # ------------------------------------------------------------------ helpers

    def _resolve(self, names: str | Iterable[str]) -> list[Device]:
        if isinstance(names, str):
            return self.inventory.resolve(names)
        return self.inventory.resolve(list(names))

    def _get_run(self, run_id: str) -> Run:
        try:
            return self._runs[run_id]
        except KeyError:
            raise NgbError(
                f"run {run_id!r} is not active here (try `ngb attach {run_id}`)"
            ) from None
