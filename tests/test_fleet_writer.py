"""The live writer at fleet scale (``ngb.sweeps.run.writer``): a duty cycle, not a fixed period.

A flush costs per device, so with a hundred devices a flush a second is more than a workstation
has; the writer paces itself to ``duty`` of the time (a ``flush_now`` to ``URGENT_DUTY``: at most
one flush's time later, so devices that end one after another share flushes), and does not write
again the results it stored when a device's checkpoint is read at its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

import pytest
from ngb.core.records.types import TrialResult
from ngb.devices.inventory import Device
from ngb.sweeps.run import writer as writer_module
from ngb.sweeps.run.state import DeviceRun
from ngb.sweeps.run.writer import URGENT_WAIT_MAX_S, RunWriter
from ngb.sweeps.store.result_store import IngestBatch


class SlowStore:
    """Enough of a store for the writer: every write takes ``write_s``; what was written is kept."""

    path = None

    def __init__(self, write_s: float) -> None:
        self.write_s = write_s
        self.writes: list[tuple[float, IngestBatch]] = []

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        yield

    def write_batch(self, batch: IngestBatch) -> int:
        time.sleep(self.write_s)
        self.writes.append((time.monotonic(), batch))
        return len(batch.results)

    def upsert_run_devices(self, rows: object) -> None:
        pass


def _writer(store: SlowStore, dev: DeviceRun, duty: float) -> RunWriter:
    return RunWriter(store, device_of=lambda run, name: dev, publish=lambda e: None,  # type: ignore[arg-type]
                     on_unwritable=lambda m: None, flush_interval=0.02, duty=duty)  # fmt: skip


async def test_flushes_keep_to_the_duty_cycle_and_flush_now_waits_one_flush_at_most() -> None:
    dev = DeviceRun("r1", Device(name="d", host="d.lab", transport="ssh"), {"a"})
    dev.state = "running"
    store = SlowStore(write_s=0.1)
    writer = _writer(store, dev, duty=0.2)  # 0.1 s of writing, then 0.4 s apart
    writer.ensure_running()
    for i in range(30):  # a sample every 20 ms for 0.6 s, and wakes among them
        writer.pending_for(dev).cpu.append({"type": "cpu", "ts": float(i)})
        if i % 5 == 0:
            writer.wake()
        await asyncio.sleep(0.02)
    times = [t for t, _ in store.writes]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert len(times) <= 3 and all(gap >= 0.45 for gap in gaps), gaps  # 0.1 s write + 0.4 s
    writer.pending_for(dev).cpu.append({"type": "cpu", "ts": 99.0})
    began = time.monotonic()
    await writer.flush_now(dev)  # a teardown: one flush's time at most, whatever the cycle says
    assert time.monotonic() - began < 0.3 + 0.1
    await writer.close()


async def test_devices_that_end_one_after_another_share_flushes() -> None:
    """A fleet's end: each device asks for a flush of its own as it ends (128 devices asked for
    ~256 in their last 20 s and got 106, the writer a whole core). Paced, those that end while a
    flush runs or just after it share the next one, and none waits past the cap."""
    devs = {
        f"d{i}": DeviceRun("r1", Device(name=f"d{i}", host="h.lab", transport="ssh"), {"a"})
        for i in range(12)
    }
    for dev in devs.values():
        dev.state = "running"
    store = SlowStore(write_s=0.05)
    writer = RunWriter(store, device_of=lambda run, name: devs.get(name), publish=lambda e: None,  # type: ignore[arg-type]
                       on_unwritable=lambda m: None, flush_interval=0.02, duty=0.05)  # fmt: skip
    writer.ensure_running()

    async def end(dev: DeviceRun, after: float) -> float:
        await asyncio.sleep(after)
        writer.pending_for(dev).results["a"] = TrialResult(key="a", spec={"model": "m"})
        began = time.monotonic()
        await writer.flush_now(dev)
        return time.monotonic() - began

    # one device ends every 60 ms; a flush takes 50 ms: one flush each, unpaced
    waits = await asyncio.gather(*(end(d, 0.06 * i) for i, d in enumerate(devs.values())))
    await writer.close()
    stored = sorted(name for _, batch in store.writes for _, name, _ in batch.results)
    assert stored == sorted(devs)  # every device's result, once
    assert len(store.writes) <= 8, f"{len(store.writes)} flushes for 12 devices"
    assert max(waits) < 0.05 + URGENT_WAIT_MAX_S + 0.05 + 0.3, waits


async def test_a_teardown_waits_for_devices_still_running_and_the_last_one_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While other devices still follow their agents, an ending device's flush waits up to
    ``SHARE_WAIT_S`` for them to end too (a 128-device fleet's end made ~25 flushes, each of
    20-100 ms of CPU); once every device still running waits, the flush comes at once."""
    share = 2.0  # longer than the writer's 1 s: a wait for others stands out under any load
    monkeypatch.setattr(writer_module, "SHARE_WAIT_S", share)
    devs = {
        f"d{i}": DeviceRun("r1", Device(name=f"d{i}", host="h.lab", transport="ssh"), {"a"})
        for i in range(4)
    }
    running = set(devs)
    store = SlowStore(write_s=0.01)
    writer = RunWriter(
        store,
        device_of=lambda run, name: devs.get(name),
        publish=lambda e: None,  # type: ignore[arg-type]
        on_unwritable=lambda m: None,
        following=lambda: len(running),
        flush_interval=0.02,
        duty=0.001,
    )  # 10 ms a flush: 10 s apart by the duty
    writer.ensure_running()
    writer.pending_for(devs["d0"]).cpu.append({"type": "cpu", "ts": 0.0})
    await writer.flush_now(devs["d0"])  # sets the duty cycle's next time 10 s away

    async def end(name: str, after: float) -> float:
        await asyncio.sleep(after)
        writer.pending_for(devs[name]).results["a"] = TrialResult(key="a", spec={"model": "m"})
        began = time.monotonic()
        await writer.flush_now(devs[name])
        running.discard(name)
        return time.monotonic() - began

    # d0 and d1 end 0.2 s apart while d2 and d3 run: one shared flush, ~``share`` after d0
    waits = await asyncio.gather(end("d0", 0.0), end("d1", 0.2))
    assert len(store.writes) == 2, [len(b.results) for _, b in store.writes]
    assert share - 0.1 <= waits[0] < share + 1.0, waits
    # the last two: d3 ends while d2 still runs and waits for it; d2 then finds nobody running
    # but the two of them, so both go at once
    waits = await asyncio.gather(end("d3", 0.0), end("d2", 0.1))
    assert len(store.writes) == 3 and max(waits) < share - 0.5, waits
    await writer.close()
    stored = sorted(name for _, batch in store.writes for _, name, _ in batch.results)
    assert stored == sorted(devs)


async def test_results_already_stored_are_not_written_again() -> None:
    dev = DeviceRun("r1", Device(name="d", host="d.lab", transport="ssh"), {"a", "b"})
    store = SlowStore(write_s=0.0)
    writer = _writer(store, dev, duty=1.0)
    a = TrialResult(key="a", spec={"model": "m"})
    writer.pending_for(dev).results["a"] = a
    await writer.flush_now(dev)
    # the device ended: its checkpoint is read whole (a and b) and handed to the writer again
    writer.pending_for(dev).results.update({"a": a, "b": TrialResult(key="b", spec={})})
    await writer.flush_now(dev)
    written = [r.key for _, batch in store.writes for _, _, r in batch.results]
    assert written == ["a", "b"]
    await writer.close()


def test_many_rows_in_one_go_mean_what_one_by_one_means(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``upsert_run_devices`` (a flush's rows) = ``upsert_run_device`` per row: only the given
    fields change, the rest of the fields merge into ``extra``, a new device gets a row."""
    from ngb.sweeps.store.database import Store

    one, many = Store(tmp_path / "one.duckdb"), Store(tmp_path / "many.duckdb")
    rows = [
        ("r1", "a", {"state": "running", "started_at": 1_700_000_000.0, "pid": 7}),
        ("r1", "b", {"state": "deploying", "message": "x"}),
        ("r1", "a", {"n_done": 2, "offset": 120}),
        ("r2", "a", {"state": "finished", "n_trials": 4, "finished_at": 1_700_000_100.0}),
    ]
    for store in (one, many):
        store.create_run("r1", "p", "", ["a", "b"], 4)
        store.create_run("r2", "p", "", ["a"], 4)
    for run_id, device, fields in rows:
        one.upsert_run_device(run_id, device, **fields)
    many.upsert_run_devices(rows[:2])
    many.upsert_run_devices(rows[2:])

    def table(store: Store) -> list[dict[str, object]]:
        out = []
        for run_id in ("r1", "r2"):
            for row in store.run_devices(run_id):
                out.append({k: v for k, v in row.items() if k != "updated_at"})
        return sorted(out, key=lambda r: (str(r["run_id"]), str(r["device"])))

    assert table(many) == table(one)
    assert table(many)[0]["extra"] == {"pid": 7, "offset": 120}


def test_an_agents_run_done_is_recorded_and_ends_its_timing() -> None:
    """``run_done`` both ends the device's timing and is kept as the agent's goodbye: as a branch
    of the timing chain it never reached ``dev.run_done`` (since issue 19), so no follower saw a
    finished agent, a cancel's "cancelled" or the skipped count, and each waited on the agent."""
    from ngb.core.records import events as ev
    from ngb.devices.inventory import Device
    from ngb.sweeps.run.state import DeviceRun
    from ngb.sweeps.run.writer import PendingWrites, record_agent_event

    dev = DeviceRun("r1", Device(name="here", host="localhost", transport="local"), {"a"})
    pending = PendingWrites()
    record_agent_event(dev, pending, {"type": ev.PHASE, "key": "a", "phase": "measure"})
    assert dev.timing and dev.run_done is None
    goodbye = {"type": ev.RUN_DONE, "ok": 1, "failed": 0, "skipped": 2, "cancelled": True}
    record_agent_event(dev, pending, goodbye)
    assert not dev.timing
    assert dev.run_done == goodbye
