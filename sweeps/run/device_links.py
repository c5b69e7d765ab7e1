"""Reaching devices: transports made per device, bounded handshakes, timeouts and backoff.

By default local devices get ``LocalTransport`` and the others ``SshTransport`` with the
orchestrator's ``connect_timeout`` and ``keepalive`` seconds; a ``transport_factory`` replaces that
(tests, custom known_hosts). At most ``max_handshakes`` connections are being set up at once
(64: a handshake's wall time is the server's and the link's, so a fleet's overlap; the SSH
transport also keeps to 10 per server address, so a jump host is not stampeded).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Sequence

from ngb.core.base.errors import first_line
from ngb.devices.inventory import Device, Inventory
from ngb.devices.protocol import RunPaths
from ngb.devices.transport import CommandResult, Transport, TransportError
from ngb.sweeps.run.events import RunEvent
from ngb.sweeps.run.state import DeviceRun


class DeviceLinks:
    def __init__(
        self,
        inventory: Callable[[], Inventory],
        *,
        transport_factory: Callable[[Device], Transport] | None = None,
        max_handshakes: int = 64,
        connect_timeout: float = 10.0,
        keepalive: float = 15.0,
        backoff: tuple[float, float] = (0.5, 30.0),
        seed: int | None = None,
    ) -> None:
        self._inventory = inventory
        self._factory = transport_factory or self._default_transport
        self._handshakes = asyncio.Semaphore(max_handshakes)
        self.connect_timeout = connect_timeout
        self.keepalive = keepalive
        self.backoff = backoff
        self._rng = random.Random(seed)

    def _default_transport(self, device: Device) -> Transport:
        from ngb.devices.ssh import make_transport

        if device.is_local:
            return make_transport(device)
        return make_transport(
            device,
            connect_timeout=self.connect_timeout,
            keepalive_interval=self.keepalive,
            inventory=self._inventory(),
        )

    async def open(self, device: Device) -> Transport:
        """A connected transport (a hung handshake counts as a connection error)."""
        transport = self._factory(device)
        async with self._handshakes:
            try:
                await asyncio.wait_for(transport.connect(), self.connect_timeout * 2)
            except asyncio.TimeoutError:
                await close(transport)
                raise TransportError(f"{device.name}: connect timed out") from None
            except BaseException:
                await close(transport)
                raise
        return transport

    async def run_once(
        self, device: Device, transport: Transport | None, argv: Sequence[str], timeout: float = 30
    ) -> CommandResult:
        """One command: over ``transport`` if given, else on a connection of its own."""
        own = transport is None
        link = await self.open(device) if transport is None else transport
        try:
            return await link.run(list(argv), timeout=timeout)
        finally:
            if own:
                await close(link)

    async def on_each(
        self,
        devices: Sequence[DeviceRun],
        build: Callable[[RunPaths, int | None], list[str]],
        what: str,
        publish: Callable[[RunEvent], None],
    ) -> dict[str, CommandResult | str]:
        """One command per device of a run, concurrently (over its live link where it has one).

        Returns ``{device: CommandResult}``, or the one-line reason for a device out of reach;
        each device gets a ``connection`` RunEvent saying ``what`` was done or why it failed.
        """

        async def one(dev: DeviceRun) -> tuple[str, CommandResult | str]:
            if dev.paths is None:
                return dev.name, "not started yet"
            try:
                res = await self.run_once(dev.device, dev.transport, build(dev.paths, dev.pid))
            except (TransportError, OSError) as exc:
                msg = f"{what} failed: {first_line(exc)}"
                publish(RunEvent(dev.run_id, dev.name, "connection", dev.state, message=msg))
                return dev.name, first_line(exc)
            publish(RunEvent(dev.run_id, dev.name, "connection", dev.state, message=what))
            return dev.name, res

        return dict(await asyncio.gather(*(one(dev) for dev in devices)))

    def delay(self, failures: int) -> float:
        """Exponential backoff with jitter before reconnect number ``failures``."""
        lo, hi = self.backoff
        return min(hi, lo * 2 ** (failures - 1)) * self._rng.uniform(0.5, 1.0)


async def close(transport: Transport | None) -> None:
    if transport is not None:
        with contextlib.suppress(Exception):
            await transport.close()
