"""What a run tells its front ends: device states, ``RunEvent`` records and their pub/sub.

The CLI progress bars and the TUI read a run through ``EventHub.subscribe()``, an async iterator
of ``RunEvent``. Each subscriber has its own bounded queue: a slow subscriber loses its oldest CPU
samples / progress ticks (a newer one supersedes them), never trial results or state changes.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ngb.core.records import events as ev
from ngb.core.trial.live_state import STATE

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

# Agent event types a lagging subscriber may lose (a newer one supersedes them); ``state`` is the
# agent's periodic snapshot of its last state (``ngb.core.trial.live_state``), never stored, and so
# is a serving trial's progress (``serving``: live only, the outcome is stored when it ends).
DROPPABLE_TYPES = frozenset({ev.CPU, ev.PROGRESS, ev.TUNING, ev.SERVING, STATE})


@dataclass(frozen=True)
class RunEvent:
    """One thing that happened in a run, for front ends. Stable; the TUI consumes it.

    - ``kind="connection"``: ``state`` is the device's new state: ``pending``, ``connecting``,
      ``deploying``, ``running``, ``reconnecting``, ``lost``, ``detached``, ``finished``,
      ``failed``, ``cancelled``; ``message`` says why (e.g. the one-line connection error).
    - ``kind="agent"``: ``event`` is the agent's event dict as sent (``core/records/events.py``
      types: run_started, trial_started, phase, progress, cpu, tuning, serving, trial_done,
      trial_failed, log, run_done, and ``state``: the agent's snapshot for a follower that attached
      mid-trial); ``state`` is the device's current state.
    - ``kind="ingest"``: a batch of the device's results reached the database; ``message``
      says how many (results the store already had are ignored there, so none is stored twice).
    - ``kind="store"``: the results database is busy (another process holds it; the run waits
      and keeps everything buffered) or usable again; ``state`` is ``waiting`` or ``ok``,
      ``device`` is ``""``. One quiet status line, never an error.
    - ``kind="run"``: the run as a whole (``device`` is ``""``): ``state`` is ``started``,
      ``attached``, then one of ``finished`` (every device), ``failed`` (some device failed; the
      others' results are stored), ``cancelled`` or ``detached`` (some device is still running
      unfollowed: detached on purpose, link lost, or the database could not be written;
      ``attach`` picks it up).

    ``done``/``failed``/``total`` are the device's trial counts where known (``done`` counts ok
    and failed trials; ``failed`` the failed ones), for progress bars without bookkeeping.
    """

    run_id: str
    device: str
    kind: str
    state: str = ""
    event: dict[str, Any] | None = None  # Any: the agent's event as sent (JSON)
    message: str = ""
    done: int | None = None
    failed: int | None = None
    total: int | None = None
    ts: float = field(default_factory=time.time)


class Subscription:
    """An async iterator over RunEvents with a bounded queue (see the module docstring)."""

    def __init__(self, hub: EventHub, maxsize: int, run_id: str | None) -> None:
        self._hub = hub
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
        self._hub.discard(self)


class EventHub:
    """Fans RunEvents out to every open subscription (all runs, or one run each)."""

    def __init__(self, queue_size: int = 10_000) -> None:
        self.queue_size = queue_size
        self._subscribers: set[Subscription] = set()

    def subscribe(self, run_id: str | None = None) -> Subscription:
        sub = Subscription(self, self.queue_size, run_id)
        self._subscribers.add(sub)
        return sub

    def publish(self, item: RunEvent) -> None:
        for sub in list(self._subscribers):
            sub._put(item)

    def discard(self, sub: Subscription) -> None:
        self._subscribers.discard(sub)

    def close(self) -> None:
        for sub in list(self._subscribers):
            sub.close()


def event_line(event: Mapping[str, object]) -> str:
    """A one-line description of an agent event (RunEvent.message for kind "agent")."""
    kind = event.get("type")
    if kind == ev.TRIAL_STARTED:
        return f"trial {event.get('index', '?')}/{event.get('total', '?')}: {event.get('label')}"
    if kind == ev.TRIAL_FAILED:
        return f"failed: {event.get('error')}"
    if kind == ev.LOG:
        return str(event.get("msg", ""))
    return str(kind)
