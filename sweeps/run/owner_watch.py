"""What a follower does about a device it does not own (``ownership``): follow the owner.

A follower that is not the device's owner never starts, restarts or resubmits its agent. When
the agent is gone it waits for the owner: it watches the device's pid file until the owner's
next agent appears (then it follows that one), or the owner's lock comes free. A free lock means
the owner's device task ended, after storing the device's final state (``Orchestrator``'s
``_device_main``): that state is taken as this follower's own outcome; or the owner died without
one, and this follower owns the device now and acts.

It watches the device, not the store: a reader polling the results file every few seconds keeps
the owner from opening it to write (DuckDB admits one writer process and no reader beside it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timezone

from ngb.devices.protocol import RunPaths
from ngb.sweeps.run import device_io
from ngb.sweeps.run.events import FAILED, FINAL_STATES
from ngb.sweeps.run.ownership import Owners
from ngb.sweeps.run.state import DeviceRun

RowReader = Callable[[DeviceRun], Awaitable[Mapping[str, object]]]


class OwnerWatch:
    """``owns``/``acts``/``wait`` for one orchestrator's devices. ``stored_row(dev)`` reads the
    device's ``run_devices`` row (empty when it cannot now); ``say(dev, line)`` tells the front
    ends; ``poll`` is how often the pid file is looked at."""

    def __init__(
        self,
        owners: Owners,
        stored_row: RowReader,
        say: Callable[[DeviceRun, str], None],
        poll: float,
    ) -> None:
        self.owners = owners
        self.stored_row = stored_row
        self.say = say
        self.poll = poll

    def owns(self, dev: DeviceRun) -> bool:
        """Whether this follower acts for the device (taking it over if its owner is gone)."""
        dev.owner = dev.owner or self.owners.take(dev.run_id, dev.name)
        return dev.owner

    async def acts(self, dev: DeviceRun) -> bool | None:
        """``owns``, and None when the device ended while another follower owned it: that one
        stored its outcome before letting go, which this one takes as its own. Taking over, it
        also learns from the stored row what only a start records (the agent's path)."""
        if dev.owner:
            return True
        if not self.owns(dev):
            return False
        row = await self.stored_row(dev)
        if row.get("state") in FINAL_STATES and updated_since(row, dev.followed_since):
            dev.state = str(row["state"])
            message = str(row.get("message") or "")
            dev.error = message if dev.state == FAILED else dev.error
            dev.row_sig = dev.signature()  # the owner wrote the row; leave it be
            self.say(dev, message)
            return None
        found = DeviceRun.from_row(dev.run_id, dev.device, row) if row else None
        if found is not None and found.started and dev.agent_path is None:
            dev.started, dev.agent_path = True, found.agent_path
            dev.paths = dev.paths or found.paths
            dev.pid = dev.pid or found.pid
        return True

    async def wait(self, dev: DeviceRun) -> bool:
        """Wait for what the owner does: True once the device ended (its outcome taken). False:
        go on following, because the owner started an agent, or went away and this follower
        owns the device now."""
        said = False
        while True:
            owner = await self.acts(dev)
            if owner is None:
                return True
            if owner:
                self.say(dev, "this follower now acts for the device (its owner went away)")
                return False
            assert dev.transport is not None
            if dev.paths is None:
                workdir = await device_io.remote_workdir(dev.transport, dev.device.workdir)
                dev.paths = RunPaths(workdir, dev.run_id)
            pid = await device_io.read_pid(dev)
            if pid is not None and pid != dev.pid:  # the owner started it (again)
                dev.started, dev.pid, dev.run_done = True, pid, None
                return False
            if not said:
                said = True
                self.say(dev, "another ngb process acts for this device; following it")
            await asyncio.sleep(self.poll)


def updated_since(row: Mapping[str, object], since: float) -> bool:
    """Whether a ``run_devices`` row was written at or after ``since`` (epoch seconds; the
    store's timestamps are naive UTC): a final state from before a follower came is not news."""
    stamp = row.get("updated_at")
    if not isinstance(stamp, datetime):
        return False
    return stamp.replace(tzinfo=timezone.utc).timestamp() >= since - 1.0
