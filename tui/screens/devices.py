"""Devices screen: the inventory with connection status and what each device can run.

Add / edit / remove go through validated forms and the inventory's atomic save; probe connects,
deploys the agent and lists the compilers available there; an unknown host key opens the trust
modal (fingerprint shown, explicit yes) instead of failing silently.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from ngb.core.base.errors import NgbError
from ngb.devices.transport import HostKeyError, TransportError
from ngb.tui.backend import Backend
from ngb.tui.screens.base import ConsoleScreen
from ngb.tui.screens.confirm import ConfirmScreen
from ngb.tui.screens.device_form import DeviceFormScreen
from ngb.tui.screens.host_key import HostKeyScreen
from ngb.tui.widgets.probe_details import (
    ProbeData,
    details_text,
    probe_row,
    shorten,
    stored_probe,
)
from ngb.tui.widgets.steady_footer import SteadyFooter
from ngb.tui.widgets.table_fill import fill_table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.reactive import reactive
from textual.widgets import DataTable, Header, Input, Label, Static

if TYPE_CHECKING:  # the inventory is loaded lazily, through the backend
    from ngb.devices.inventory import Device

COLUMNS = ("name", "transport", "address", "groups", "status", "compilers")
STATUS_WIDTH = 40  # a long probe error is cut here; the details pane below shows all of it


def address_of(device: Device) -> str:
    if device.transport == "local":
        return "this machine"
    user = f"{device.user}@" if device.user else ""
    port = f":{device.port}" if device.port and device.port != 22 else ""
    return f"{user}{device.host}{port}"


def compilers_of(probe: ProbeData) -> list[str]:
    """Available compiler names from a probe, whichever shape the agent reports: ``{name:
    {available, reason}}``, ``{name: bool or [ok, reason]}``, or a list of names or
    ``{name, available}`` objects (anything else in the list is skipped)."""
    comps = probe.get("compilers") or probe.get("available_compilers") or {}
    if isinstance(comps, dict):
        out = []
        for name, info in comps.items():
            ok = info.get("available", info.get("ok")) if isinstance(info, dict) else info
            if isinstance(ok, list | tuple):
                ok = ok[0] if ok else False
            if ok:
                out.append(name)
        return out
    if not isinstance(comps, list | tuple):
        return []
    return [
        c if isinstance(c, str) else str(c.get("name"))
        for c in comps
        if isinstance(c, str) or (isinstance(c, Mapping) and c.get("available", True))
    ]


class DevicesScreen(ConsoleScreen):
    AUTO_FOCUS = "#devices-table"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "add", "Add"),
        Binding("e", "edit", "Edit"),
        Binding("d", "remove", "Remove"),
        Binding("p", "probe", "Probe"),
        Binding("t", "trust", "Trust key"),
        Binding("r", "reload", "Reload", show=False),
        Binding("slash", "filter", "Filter", key_display="/"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    filter_text: reactive[str] = reactive("")

    def __init__(self, backend: Backend) -> None:
        super().__init__(backend, id="devices")
        self.devices: list[Device] = []
        self.status: dict[str, str] = {}
        self.compilers: dict[str, list[str]] = {}
        self.probes: dict[str, ProbeData] = {}  # newest stored probe per device

    def compose(self) -> ComposeResult:
        yield Header()
        yield Input(
            placeholder="filter devices (name, host, group)", id="devices-filter", classes="filter"
        )
        table: DataTable[Text] = DataTable(
            id="devices-table", cursor_type="row", zebra_stripes=True
        )
        table.add_columns(*COLUMNS)
        yield table
        yield Label("", id="devices-error")
        yield Static("", id="device-details")
        yield SteadyFooter(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        super().on_mount()
        self.action_reload()

    # -- loading ---------------------------------------------------------------------------------
    def action_reload(self) -> None:
        self.load_devices()

    @work(thread=True, group="load", exclusive=True, exit_on_error=False)
    def load_devices(self) -> None:
        try:
            devices = self.backend.devices_sync()
            error = ""
        except NgbError as exc:  # a bad file: show why, keep the last good list, touch nothing
            devices, error = self.devices, str(exc)
        # The inventory first, the stored probes when the store answers: while a run is
        # followed its writer holds the store now and then, and the list must not wait for it
        # (64 devices followed: 10-32 s before this screen showed anything).
        self.app.call_from_thread(self._show_devices, devices, error)
        try:  # the last probe of each device, so its status survives a restart
            probes = self.backend.probes_sync()
        except NgbError:
            probes = {}
        if probes:
            self.app.call_from_thread(self._show_devices, devices, error, probes)

    def _show_devices(
        self,
        devices: list[Device],
        error: str = "",
        probes: Mapping[str, ProbeData] | None = None,
    ) -> None:
        self.devices = devices
        for name, row in (probes or {}).items():
            self.probes[name] = row
            if name not in self.status:
                self.status[name] = f"ok {str(row.get('probed_at') or '')[:16]}".strip()
                self.compilers[name] = compilers_of(stored_probe(row))
        self.query_one("#devices-error", Label).update(f"[red]{error}[/]" if error else "")
        self._render_table()

    def _render_table(self) -> None:
        table = self.query_one("#devices-table", DataTable)
        cursor = table.cursor_row
        needle = self.filter_text.casefold()
        shown: list[tuple[str, ...]] = []
        for dev in self.devices:
            row = (
                dev.name,
                dev.transport,
                address_of(dev),
                ",".join(dev.groups),
                shorten(self.status.get(dev.name, "-"), STATUS_WIDTH),
                " ".join(self.compilers.get(dev.name, [])),
            )
            if needle and not any(needle in str(cell).casefold() for cell in row):
                continue
            shown.append(row)
        fill_table(table, COLUMNS, shown, keys=[row[0] for row in shown])
        if table.row_count:
            table.move_cursor(row=min(cursor, table.row_count - 1))
        self._show_details()

    @on(DataTable.RowHighlighted, "#devices-table")
    def _show_details(self) -> None:
        """Hardware and software of the highlighted device (the README's Tables I and II)."""
        dev = self.selected()
        pane = self.query_one("#device-details", Static)
        if dev is None:
            pane.update("")
            return
        status = self.status.get(dev.name, "")
        pane.update(details_text(dev.name, self.probes.get(dev.name), status))

    def selected(self) -> Device | None:
        table = self.query_one("#devices-table", DataTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return next((d for d in self.devices if d.name == key), None)

    # -- filter ----------------------------------------------------------------------------------
    def action_filter(self) -> None:
        box = self.query_one("#devices-filter", Input)
        box.add_class("-visible")
        box.focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#devices-filter", Input)
        box.value = ""
        box.remove_class("-visible")
        self.query_one("#devices-table", DataTable).focus()

    @on(Input.Changed, "#devices-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value

    @on(Input.Submitted, "#devices-filter")
    def _filter_done(self) -> None:
        self.query_one("#devices-table", DataTable).focus()

    def watch_filter_text(self) -> None:
        if self.is_mounted:
            self._render_table()

    # -- add / edit / remove ---------------------------------------------------------------------
    def action_add(self) -> None:
        backend = self.backend
        self.app.push_screen(
            DeviceFormScreen(backend.make_device), lambda dev: self._saved(dev, None)
        )

    def action_edit(self) -> None:
        dev = self.selected()
        if dev is None:
            return
        backend = self.backend
        self.app.push_screen(
            DeviceFormScreen(backend.make_device, dev), lambda new: self._saved(new, dev.name)
        )

    def _saved(self, device: Device | None, replace: str | None) -> None:
        if device is not None:
            self.save_device(device, replace)

    @work(thread=True, group="save", exit_on_error=False)
    def save_device(self, device: Device, replace: str | None) -> None:
        try:
            self.backend.save_device_sync(device, replace)
        except NgbError as exc:
            self.app.call_from_thread(self.notify, str(exc), severity="error")
            return
        self.app.call_from_thread(self.notify, f"saved device {device.name}")
        self.app.call_from_thread(self._forget_status, device.name, replace)
        self.load_devices()
        self.app.call_from_thread(self._refresh_run_choices)

    def _forget_status(self, name: str, replaced: str | None) -> None:
        """An edited device is a new connection: its old probe error (or "ok") says nothing
        about the new port or host until it is probed again."""
        for old in {name, replaced} - {None}:
            self.status.pop(str(old), None)
            self.compilers.pop(str(old), None)
            self.probes.pop(str(old), None)
        if replaced is not None:
            self.status[name] = "changed: p probes it"

    def _refresh_run_choices(self) -> None:
        run = self.app.get_screen("run")
        loader = getattr(run, "load_choices", None)
        if loader is not None and run.is_mounted:
            loader()

    def action_remove(self) -> None:
        dev = self.selected()
        if dev is None:
            return

        def on_answer(ok: bool | None) -> None:
            if ok:
                self.remove_device(dev.name)

        self.app.push_screen(
            ConfirmScreen(f"Remove device {dev.name!r} from the inventory?", yes="Remove"),
            on_answer,
        )

    @work(thread=True, group="save", exit_on_error=False)
    def remove_device(self, name: str) -> None:
        try:
            self.backend.remove_device_sync(name)
        except NgbError as exc:
            self.app.call_from_thread(self.notify, str(exc), severity="error")
            return
        self.app.call_from_thread(self.notify, f"removed device {name}")
        self.load_devices()
        self.app.call_from_thread(self._refresh_run_choices)

    # -- probe and host keys ---------------------------------------------------------------------
    def _set_status(self, name: str, status: str) -> None:
        self.status[name] = status
        self._render_table()

    def action_probe(self) -> None:
        dev = self.selected()
        if dev is not None:
            self.probe(dev)

    @work(group="probe", exit_on_error=False)
    async def probe(self, device: Device) -> None:
        backend = self.backend
        self._set_status(device.name, "probing...")
        try:
            probe = await backend.probe(device)
        except HostKeyError as exc:
            what = "CHANGED" if exc.changed else "unknown"
            self._set_status(device.name, f"host key {what}: press t")
            return
        except (TransportError, NgbError) as exc:
            self._set_status(device.name, f"error: {exc}")
            return
        self.compilers[device.name] = compilers_of(probe)
        self.probes[device.name] = probe_row(probe)
        self._set_status(device.name, "ok")
        await asyncio.to_thread(self._record_probe, device.name, probe)

    def _record_probe(self, name: str, probe: ProbeData) -> None:
        try:
            self.backend.store().record_probe(name, probe)
        except NgbError as exc:  # the store is optional for a probe: say so, lose nothing
            self.app.call_from_thread(self.notify, f"probe not recorded: {exc}", severity="warning")

    def action_trust(self) -> None:
        dev = self.selected()
        if dev is None:
            return
        if dev.transport == "local":
            self.notify(f"{dev.name} is reached without SSH: no host key", severity="warning")
            return
        self.fetch_key(dev)

    @work(group="trust", exclusive=True, exit_on_error=False)
    async def fetch_key(self, device: Device) -> None:
        backend = self.backend
        try:
            offer = await backend.fetch_host_key(device)
        except (TransportError, NgbError) as exc:
            self.notify(str(exc), severity="error")
            return
        modal = HostKeyScreen(
            device.name, address_of(device), offer.key_type, offer.fingerprint, offer.status
        )
        trusted = await self.app.push_screen_wait(modal)
        if not trusted:
            self.notify(f"host key of {device.name} not trusted")
            return
        try:
            await asyncio.to_thread(backend.trust_sync, device, offer.key)
        except (OSError, NgbError) as exc:
            self.notify(f"could not save the host key: {exc}", severity="error")
            return
        self._set_status(device.name, "key trusted")
        self.notify(f"trusted {offer.key_type} {offer.fingerprint} for {device.name}")
