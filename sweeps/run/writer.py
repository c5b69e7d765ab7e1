"""The write path of a live run: buffer what devices report, flush it to the store in batches.

This is the one batching policy of the project: every device's results, CPU samples, tuning
progress and errors are buffered here and written every ``flush_interval`` seconds (sooner when a
state change asks for it) by one writer task, all devices in one transaction (one DuckDB open), so
readers in other processes get in between. While a device of an active run is this machine the
period is ``local_flush_interval`` (10 s; ``NGB_LOCAL_FLUSH_S`` sets the default, for tests): its
trials would share the CPU with the writes (opening DuckDB every second cost the ``localhost``
orchestrator ~9 % of a core on the 2-core VM). A
device's ``run_devices`` row (its consumed offset, pid and paths) is written *after* the results
before it, so ``ngb attach RUN`` after a workstation restart continues exactly there; for a moved
offset alone the row is rewritten at most every ``offset_every`` seconds (re-reading a few events
after a crash costs nothing: the store ignores results it has).

The writer keeps to a duty cycle (``duty``, 5 %): after a flush that took ``w`` seconds the next
one waits at least ``w * (1 / duty - 1)`` (at most ``local_flush_interval``, 10 s, however slow a
loaded machine made the flush), a wake included; a ``flush_now`` (a teardown, which must see its
results stored) waits at most as long as the last flush took, and never over 0.5 s
(``URGENT_DUTY``), once every device still running waits for one too; while others still
follow their agents it waits up to ``SHARE_WAIT_S`` (1 s, or the duty cycle's time if sooner)
for them, so devices that end one after another share flushes. Why: a flush costs per
device (each device's trials, samples and row are statements of their own), so with 128 loopback
devices one flush took ~1-2 s of CPU, a flush a second was more than the whole workstation could
give, and the runs fell behind (64 devices did not finish in 595 s). Paced, a small run still
flushes every second and a fleet's flushes carry more each, at the same share of a core; the live
view does not wait for the store (front ends read the orchestrator's events). Results this writer
has stored are not written again when the checkpoint is read at a device's end
(``PendingWrites.add_to``).

A timed flush also waits, up to ``max_defer_s``, while a local device's worker is warming up or
in its timed loops (its ``warmup``/``measure`` phase events): a DuckDB write beside worker 0's
loop was one of the things a localhost sweep measured and a standalone trial did not. Its next
gap comes soon (the next worker's build, the next trial's start); a wake (a state change, a
teardown's ``flush_now``) never waits.

While the writer runs, its flushes leave their commits in DuckDB's log and checkpoint only once
it is long (``wal_marker.deferred_checkpoints``), never while a reader is copying the store: a
console query, ``ngb query`` or ``ngb export`` in another process copies the unchanged main file
and the log's committed prefix, so no flush ever waits for a reader (issue 31). ``close``
checkpoints what is left, so the store at rest has no log.

What a failed write means decides what happens next (see ``ngb.sweeps.store.result_store``):

- the database is busy (another process reads or writes it): keep buffering and try again; one
  quiet ``RunEvent(kind="store", state="waiting")`` says so, ``state="ok"`` when it passes;
- a result can never be stored (``RowRejected``): it is stored as a failed trial carrying the
  reason, and everything else in the batch goes in; the flush never retries it forever;
- the database cannot be written at all (``StoreUnwritable``): flushing stops and
  ``on_unwritable(message)`` tells the orchestrator, which stops following (the agents keep
  their checkpoints; ``ngb attach`` resumes once the database is fixed).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ParamSpec, TypeVar

from ngb.core.base.errors import NgbError, first_line
from ngb.core.records import events as ev
from ngb.core.records.types import TrialResult
from ngb.sweeps.rows import Event
from ngb.sweeps.run.events import FINAL_STATES, RunEvent
from ngb.sweeps.run.state import DeviceRun
from ngb.sweeps.store.connect import checkpoint
from ngb.sweeps.store.result_store import (
    DatabaseBusy,
    IngestBatch,
    ResultStore,
    RowRejected,
    StoreUnwritable,
)
from ngb.sweeps.store.wal_marker import deferred_checkpoints

log = logging.getLogger(__name__)

#: the duty cycle a ``flush_now`` keeps to: after a flush that took ``w`` it waits up to ``w``
#: more. A fleet's devices end one after another and each asked for a flush of its own, twice
#: (its results, then its final row): 106 flushes in the last 20 s of a 128-device run, ~7.8
#: CPU-s, the writer a whole core (2026-11-30). Paced, those that end meanwhile share a flush.
URGENT_DUTY = 0.5
#: ... and never waits longer than this: a flush slowed by a loaded machine (9 s once, at 128
#: devices) must not hold every teardown after it as long
URGENT_WAIT_MAX_S = 0.5
#: ... but while other devices of the runs still follow their agents, a ``flush_now`` waits up to
#: this long for them to end too, so that devices ending one after another share a flush: a
#: 128-device fleet's teardown made ~25 flushes of 20-100 ms CPU each in its last 8 s, paced by
#: URGENT_DUTY alone (2026-12-01). The last device never waits for it (nobody is left to share)
SHARE_WAIT_S = 1.0
#: ``local_flush_interval``'s default, 10 s; ``NGB_LOCAL_FLUSH_S`` sets it (tests that wait for a
#: ``localhost`` run's first stored trials, issue 47)
LOCAL_FLUSH_S = float(os.environ.get("NGB_LOCAL_FLUSH_S", "10"))

T = TypeVar("T")
P = ParamSpec("P")

# How often a held flush looks whether the local worker's timed loops are over.
_GAP_POLL_S = 0.25
# Phases in which a worker's loops are timed or settling (``ngb.core.trial.timing``).
TIMED_PHASES = frozenset({"warmup", "measure"})
# How long the checkpoint at the end of a run may wait for a reader on the file itself.
CLOSE_CHECKPOINT_S = 5.0

# A string spec value that is only text is never rejected; numbers may not fit their column.
_TEXT_AXES = ("model", "compiler", "optimisation", "algorithm", "device")


@dataclass
class PendingWrites:
    """What one device reported since the last flush (flushed together: the offset follows)."""

    results: dict[str, TrialResult] = field(default_factory=dict)
    cpu: list[Event] = field(default_factory=list)
    tuning: dict[str, list[Event]] = field(default_factory=dict)
    errors: list[tuple[str | None, str, str]] = field(default_factory=list)
    fields: dict[str, object] = field(default_factory=dict)  # extra run_devices columns
    dirty: bool = False  # run_devices row needs an update

    def has_data(self) -> bool:
        return bool(self.results or self.cpu or self.tuning or self.errors)

    def empty(self) -> bool:
        return not (self.dirty or self.fields or self.has_data())

    def merged(self, newer: PendingWrites | None) -> PendingWrites:
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

    def add_to(
        self,
        batch: IngestBatch,
        run_id: str,
        device: str,
        results: bool = True,
        stored: set[str] | frozenset[str] = frozenset(),
    ) -> None:
        """Add this buffer to ``batch``; results whose key is in ``stored`` (this writer wrote
        them already) are left out."""
        if results:
            for key, result in self.results.items():
                if key not in stored:
                    batch.add_result(run_id, stored_as(result, device), result)
        for event in self.cpu:
            batch.add_cpu_sample(run_id, str(event.get("stored_as") or device), event)
        for key, events in self.tuning.items():
            for event in events:  # stored_as: beside the result (a Slurm job's node@partition)
                batch.add_tuning(run_id, str(event.get("stored_as") or device), key, event)
        for trial_key, kind, message in self.errors:
            batch.add_error(run_id, device, trial_key, kind, message)


Flushed = tuple[DeviceRun, PendingWrites, dict[str, object] | None]
Rejected = tuple[DeviceRun, str, str]  # device, trial key, why it could not be stored


class RunWriter:
    """Buffers and writes every active run's data (see the module docstring)."""

    def __init__(
        self,
        store: ResultStore,
        *,
        device_of: Callable[[str, str], DeviceRun | None],
        publish: Callable[[RunEvent], None],
        following: Callable[[], int] | None = None,
        on_unwritable: Callable[[str], None],
        flush_interval: float = 1.0,
        offset_every: float = 5.0,
        local_flush_interval: float = LOCAL_FLUSH_S,
        max_defer_s: float = 60.0,
        duty: float = 0.05,
    ) -> None:
        self.store = store
        self.flush_interval = flush_interval
        self.duty = min(1.0, max(duty, 1e-3))
        self.local_flush_interval = max(local_flush_interval, flush_interval)
        self.offset_every = offset_every
        self.max_defer_s = max_defer_s
        self.broken: str | None = None  # why the store cannot be written (flushing stopped)
        self.waiting = False  # the store was busy at the last try
        self._device_of = device_of
        self._publish = publish
        # how many device tasks still run (None: flush_now never waits for others to share)
        self._following = following
        self._on_unwritable = on_unwritable
        self._pending: dict[tuple[str, str], PendingWrites] = {}
        self._store_lock = asyncio.Lock()
        self._flusher: asyncio.Task[None] | None = None
        self._wakeup = asyncio.Event()
        self._cond = asyncio.Condition()
        self._started = 0
        self._done = 0
        self._urgent = 0  # flush_now calls waiting: they keep to URGENT_DUTY, not to duty
        self._next_at = 0.0  # loop time before which a timed or woken flush waits (duty cycle)
        self._urgent_at = 0.0  # ... and a flush_now (URGENT_DUTY)
        self._asked_at: float | None = None  # loop time of the first flush_now since a flush
        # (run, device) -> keys of the results this writer stored (not written twice)
        self._stored: dict[tuple[str, str], set[str]] = {}
        # a store with a file: checkpoints deferred while this writer runs (``ensure_running``)
        path = getattr(store, "path", None)
        self._path = path if isinstance(path, Path) else None
        self._deferral: contextlib.ExitStack | None = None

    # ------------------------------------------------------------ buffering

    def pending_for(self, dev: DeviceRun) -> PendingWrites:
        key = (dev.run_id, dev.name)
        pending = self._pending.get(key)  # not setdefault: it would build one per agent event
        if pending is None:
            pending = self._pending[key] = PendingWrites()
        return pending

    def mark_dirty(self, dev: DeviceRun) -> None:
        self.pending_for(dev).dirty = True

    def wake(self) -> None:
        """Flush soon (a state change worth recording), without waiting for it."""
        self._wakeup.set()

    async def store_call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Store calls block (DuckDB): run them in a thread, one at a time."""
        async with self._store_lock:
            return await asyncio.to_thread(fn, *args, **kwargs)

    # ------------------------------------------------------------ the flush task

    def ensure_running(self) -> None:
        if (self._flusher is None or self._flusher.done()) and self.broken is None:
            self._flusher = asyncio.create_task(self._loop(), name="ngb-ingest")
            if self._deferral is None and self._path is not None:
                # the main file stands still between checkpoints, so a reader's copy never
                # makes this writer wait (``ngb.sweeps.store.wal_marker``)
                self._deferral = contextlib.ExitStack()
                self._deferral.enter_context(deferred_checkpoints(self._path))

    async def close(self) -> None:
        if self._flusher:
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
            self._flusher = None
        await self.flush_quietly()
        if self._deferral is not None and self._path is not None:
            self._deferral.close()
            self._deferral = None
            # a store at rest has no log: checkpoint now, unless a reader is copying
            with contextlib.suppress(NgbError):  # busy, unwritable: the next open replays the log
                await self.store_call(checkpoint, self._path, timeout=CLOSE_CHECKPOINT_S)

    def interval(self) -> float:
        """Seconds until the next timed flush: longer while a local device is measuring."""
        for run_id, name in self._pending:
            dev = self._device_of(run_id, name)
            if dev is not None and dev.device.is_local and dev.state not in FINAL_STATES:
                return self.local_flush_interval
        return self.flush_interval

    def local_timing(self) -> bool:
        """A device of an active run is this machine and one of its workers is timing."""
        for run_id, name in self._pending:
            dev = self._device_of(run_id, name)
            if dev is None or not (dev.device.is_local and dev.timing):
                continue
            if dev.state not in FINAL_STATES:
                return True
        return False

    async def _loop(self) -> None:
        while self.broken is None:
            woken = False
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), self.interval())
                woken = True
            if not woken:
                await self._wait_for_gap()
            await self._pace()
            self._wakeup.clear()
            await self.flush_quietly()

    async def _pace(self) -> None:
        """Keep to the duty cycle: wait until ``_next_at``, or ``_urgent_at`` while a
        ``flush_now`` waits (``_flush_at``)."""
        loop = asyncio.get_running_loop()
        while (left := self._flush_at() - loop.time()) > 0:
            self._wakeup.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), left)

    def _flush_at(self) -> float:
        """When the next flush may start: the duty cycle's time; while a ``flush_now`` waits,
        the urgent one if every device still running waits too, else at most ``SHARE_WAIT_S``
        after the first of them asked (others ending meanwhile share that flush)."""
        if not self._urgent:
            return self._next_at
        running = self._following() if self._following is not None else 0
        if self._urgent >= running or self._asked_at is None:
            return self._urgent_at
        return max(self._urgent_at, min(self._next_at, self._asked_at + SHARE_WAIT_S))

    async def _wait_for_gap(self) -> None:
        """Hold a timed flush while a local worker times (see the module docstring)."""
        give_up = time.monotonic() + self.max_defer_s
        while self.local_timing() and not self._wakeup.is_set() and time.monotonic() < give_up:
            await asyncio.sleep(_GAP_POLL_S)

    async def flush_quietly(self) -> bool:
        """Flush; a busy or unwritable store is reported as events, not raised. True if done."""
        try:
            await self.flush()
        except DatabaseBusy:
            if not self.waiting:
                self.waiting = True
                self._store_event("waiting", _waiting())
            return False
        except StoreUnwritable as exc:
            self._give_up(first_line(exc))
            return False
        except Exception:  # a bug: say so once per flush, keep the data, try again later
            log.exception("ingest failed; retrying")
            return False
        if self.waiting:
            self.waiting = False
            self._store_event("ok", "the results database is free again")
        return True

    def _store_event(self, state: str, message: str) -> None:
        for run_id in sorted({run_id for run_id, _ in self._pending}):
            self._publish(RunEvent(run_id, "", "store", state, message=message))

    def _give_up(self, message: str) -> None:
        if self.broken is None:
            self.broken = message
            self._on_unwritable(message)

    async def flush_now(self, dev: DeviceRun) -> None:
        """Wait until everything buffered for ``dev`` is in the store (before a teardown)."""
        while True:
            if self.broken is not None:
                raise StoreUnwritable(self.broken)
            target = self._started + 1
            self._urgent += 1
            if self._asked_at is None:
                self._asked_at = asyncio.get_running_loop().time()
            try:
                self._wakeup.set()
                if self._flusher is None or self._flusher.done():
                    await self.flush_quietly()
                else:
                    async with self._cond:
                        await self._cond.wait_for(functools.partial(self._flushed, target))
            finally:
                self._urgent -= 1
            pending = self._pending.get((dev.run_id, dev.name))
            if pending is None or pending.empty():
                return
            await asyncio.sleep(self.flush_interval)  # that flush failed: the store is busy

    def _flushed(self, target: int) -> bool:
        return self._done >= target

    async def flush(self) -> None:
        """Write every device's buffer in one batch (one DuckDB open for all of them)."""
        if self.broken is not None:
            return
        async with self._store_lock:
            self._started += 1
            self._asked_at = None  # a flush_now from here on waits for the next one
            batch = self._take()
            try:
                if batch:
                    loop = asyncio.get_running_loop()
                    began = loop.time()
                    rejected = await asyncio.to_thread(self._write, batch)
                    took = loop.time() - began
                    pause = min(self.local_flush_interval, took * (1 / self.duty - 1))
                    self._next_at = loop.time() + pause
                    urgent = min(pause, took * (1 / URGENT_DUTY - 1), URGENT_WAIT_MAX_S)
                    self._urgent_at = loop.time() + urgent
                    self._after_write(batch, rejected)
            except BaseException:
                for dev, pending, row in batch:  # put it back in front of anything newer
                    key = (dev.run_id, dev.name)
                    self._pending[key] = pending.merged(self._pending.get(key))
                    if row is not None:
                        dev.row_sig = None  # rewrite the row next time
                raise
            finally:
                self._done = self._started
                async with self._cond:
                    self._cond.notify_all()

    def _take(self) -> list[Flushed]:
        """Swap out every buffer worth writing, with a snapshot of its run_devices row."""
        now = time.monotonic()
        batch: list[Flushed] = []
        for key, pending in list(self._pending.items()):
            dev = self._device_of(*key)
            if dev is None:
                continue
            sig = dev.signature()
            row_due = (
                pending.dirty
                or bool(pending.fields)
                or sig != dev.row_sig
                or (dev.offset != dev.row_offset and now - dev.row_at >= self.offset_every)
            )
            if not dev.owner:  # one follower writes the row: the one that acts (issue 41)
                row_due, pending.dirty = False, False
                pending.fields.clear()
            if not (row_due or pending.has_data()):
                continue
            # Snapshot the row now (event-loop side): its offset covers only events whose
            # results are in this batch or an earlier one.
            row = device_row(dev, pending) if row_due else None
            if row_due:
                dev.row_sig, dev.row_offset, dev.row_at = sig, dev.offset, now
            batch.append((dev, pending, row))
            self._pending[key] = PendingWrites()
        return batch

    def _after_write(self, batch: list[Flushed], rejected: list[Rejected]) -> None:
        for dev, key, message in rejected:
            dev.rejected.add(key)
            dev.results[key] = False
            self.mark_dirty(dev)  # its failed count changed
            self._publish(RunEvent(
                dev.run_id, dev.name, "connection", dev.state, message=message,
                done=dev.done, failed=dev.failed, total=len(dev.keys) or None,
            ))  # fmt: skip
        for dev, pending, _ in batch:
            self._stored.setdefault((dev.run_id, dev.name), set()).update(
                key for key in pending.results if key not in dev.rejected
            )
            if pending.results:
                self._publish(RunEvent(
                    dev.run_id, dev.name, "ingest", dev.state,
                    message=f"{len(pending.results)} results stored",
                    done=dev.done, failed=dev.failed, total=len(dev.keys) or None,
                ))  # fmt: skip

    # ------------------------------------------------------------ in the worker thread

    def _write(self, batch: list[Flushed]) -> list[Rejected]:
        """All devices' data in one transaction, then the changed rows; returns rejected keys."""
        rejected: list[Rejected] = []
        with self.store.batch():
            ingest = IngestBatch()
            for dev, pending, _ in batch:
                stored = self._stored.get((dev.run_id, dev.name), set())
                pending.add_to(ingest, dev.run_id, dev.name, stored=stored)
            try:
                self.store.write_batch(ingest)
            except RowRejected:
                rejected = self._write_one_by_one(batch)
            # after the results: an offset never runs ahead of them; every row in one go
            rows = [(dev.run_id, dev.name, row) for dev, _, row in batch if row is not None]
            self.store.upsert_run_devices(rows)
        return rejected

    def _write_one_by_one(self, batch: list[Flushed]) -> list[Rejected]:
        """Something in the batch cannot be stored: find it, store it as a failed trial."""
        rejected = []
        for dev, pending, _ in batch:
            for result in pending.results.values():
                try:
                    name = stored_as(result, dev.name)
                    self.store.write_batch(IngestBatch(results=[(dev.run_id, name, result)]))
                except RowRejected as exc:
                    reason = first_line(exc)
                    self._store_stand_in(dev, result, reason)
                    rejected.append((dev, result.key, f"trial {result.key} not stored: {reason}"))
            rest = IngestBatch()
            pending.add_to(rest, dev.run_id, dev.name, results=False)
            try:
                self.store.write_batch(rest)
            except RowRejected as exc:  # a sample or progress tick that cannot fit: keep errors
                errors = IngestBatch(errors=rest.errors)
                errors.add_error(dev.run_id, dev.name, None, "ingest", f"dropped: {exc}")
                self.store.write_batch(errors)
        return rejected

    def _store_stand_in(self, dev: DeviceRun, result: TrialResult, reason: str) -> None:
        """A failed trial in place of one that cannot be stored (its spec kept as text)."""
        failed = dataclasses.replace(
            TrialResult(key=result.key, spec=result.spec, host=result.host),
            status="failed", error=f"result could not be stored: {reason}", error_kind="ingest",
            started_at=result.started_at, finished_at=result.finished_at,
        )  # fmt: skip
        text_only = {k: v for k, v in result.spec.items() if k in _TEXT_AXES}
        name = stored_as(result, dev.name)
        for spec in (result.spec, text_only):  # the axes themselves may be what does not fit
            candidate = dataclasses.replace(failed, spec=spec, extra={"spec": result.spec})
            try:
                self.store.write_batch(IngestBatch(results=[(dev.run_id, name, candidate)]))
                return
            except RowRejected:
                continue
        self.store.write_batch(
            IngestBatch(errors=[(dev.run_id, dev.name, result.key, time.time(), "ingest", reason)])
        )


def stored_as(result: TrialResult, device: str) -> str:
    """The device name a result is stored under: the run's device, or the node a scheduler
    handed it (``extra["stored_device"]``, ``node@partition``: ``ngb.devices.slurm_nodes``)."""
    name = result.extra.get("stored_device") if isinstance(result.extra, dict) else None
    return name if isinstance(name, str) and name else device


def record_agent_event(dev: DeviceRun, pending: PendingWrites, event: Event) -> None:
    """What an agent event changes: the device's counts and trial in flight, and the buffer."""
    kind = event.get("type")
    sent = event.get("result")
    if kind in (ev.TRIAL_DONE, ev.TRIAL_FAILED) and isinstance(sent, dict):
        result = TrialResult.from_dict(sent)
        dev.results[result.key] = result.ok and result.key not in dev.rejected
        pending.results[result.key] = result
        dev.current = ""
    elif kind == ev.TRIAL_STARTED:
        dev.current = str(event.get("label") or event.get("key") or "")
    if kind == ev.PHASE:
        dev.timing = event.get("phase") in TIMED_PHASES
    elif kind in (ev.TRIAL_DONE, ev.TRIAL_FAILED, ev.TRIAL_STARTED, ev.RUN_DONE):
        dev.timing = False
    elif kind == ev.CPU:
        pending.cpu.append(event)
    elif kind == ev.TUNING and event.get("key"):
        pending.tuning.setdefault(str(event["key"]), []).append(event)
    # its own test, not another branch of the chain above: run_done also ends the timing there,
    # and as an ``elif`` it was never reached -- no follower saw an agent's goodbye, so each
    # waited, asked whether the agent lived and followed its log again (~1-1.5 s a device)
    if kind == ev.RUN_DONE:
        dev.run_done = dict(event)


def device_row(dev: DeviceRun, pending: PendingWrites) -> dict[str, object]:
    """The run_devices columns (and ``extra`` facts) for a device as it is now."""
    fields = dict(pending.fields)
    row: dict[str, object] = {
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


def _waiting() -> str:
    return "waiting for the results database (another process has it open); results are kept"
