"""Add / edit a device: a form validated by the inventory's own rules before anything is saved.

The form turns its text fields into the same table a ``[devices.NAME]`` TOML entry holds and asks
``ngb.devices.inventory`` to build the Device, so the console and the file can never disagree on
what is valid. Errors show inline (one line) and the form stays open with the input intact.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, ClassVar

from ngb.core.base.errors import NgbError
from ngb.tui.screens.confirm import ConfirmScreen
from ngb.tui.widgets.cursor import apply_cursor_blink
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select

if TYPE_CHECKING:  # the inventory is loaded lazily, through the backend
    from ngb.devices.inventory import Device

# (field, label, placeholder)
TEXT_FIELDS = (
    ("name", "Name", "e.g. jetson-nano-1 (letters, digits, . _ -)"),
    ("host", "Host", "address or ~/.ssh/config alias"),
    ("port", "Port", "22"),
    ("user", "User", "default: from ~/.ssh/config"),
    ("identity_file", "Identity file", "default: ssh-agent / ~/.ssh/config"),
    ("jump_host", "Jump host", "device name or user@host:port"),
    ("python", "Python", "python3"),
    ("workdir", "Work dir", "~/.ngb"),
    ("groups", "Groups", "comma separated, e.g. jetsons,edge"),
    ("notes", "Notes", ""),
)
LIST_FIELDS = ("groups", "tags")
FORM_CHROME = 12  # rows around the fields: border, padding, title, error line, buttons


def form_values(raw: Mapping[str, str], transport: str) -> dict[str, str | int | list[str]]:
    """Form strings -> an inventory table (empty fields fall back to the inventory defaults)."""
    values: dict[str, str | int | list[str]] = {"transport": transport}
    for key, text in raw.items():
        text = text.strip()
        if not text:
            continue
        if key in LIST_FIELDS:
            values[key] = [part.strip() for part in text.split(",") if part.strip()]
        elif key == "port":
            try:
                values[key] = int(text)
            except ValueError:
                raise NgbError(f"port must be a number, got {text!r}") from None
        else:
            values[key] = text
    return values


class DeviceFormScreen(ModalScreen["Device | None"]):
    """Dismisses with the validated Device, or None when cancelled."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(
        self, make_device: Callable[[Mapping[str, object]], Device], device: Device | None = None
    ) -> None:
        super().__init__()
        self.make_device = make_device  # Backend.make_device: values -> Device (validates)
        self.device = device
        self._start: dict[str, str] = {}  # the values as the form opened (edits ask on Escape)

    def compose(self) -> ComposeResult:
        title = f"Edit device {self.device.name}" if self.device else "Add a device"
        with Vertical(classes="modal-body", id="device-form"):
            yield Label(f"[b]{title}[/b]")
            with VerticalScroll(id="device-form-fields"):
                for key, label, placeholder in TEXT_FIELDS:
                    with Horizontal(classes="form-row"):
                        yield Label(label, classes="form-label")
                        yield Input(self._initial(key), placeholder=placeholder, id=f"field-{key}")
                with Horizontal(classes="form-row"):
                    yield Label("Transport", classes="form-label")
                    yield Select(  # a Slurm entry keeps its kind (its table is edited in the file)
                        [("ssh", "ssh"), ("local", "local"), *self._slurm_choice()],
                        allow_blank=False,
                        value=getattr(self.device, "transport", "ssh"),
                        id="field-transport",
                    )
            yield Label("", id="form-error")
            with Horizontal(classes="modal-buttons"):
                yield Button("Save", id="save", variant="success")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        apply_cursor_blink(self)
        self._fit(self.app.size.height)
        self.query_one("#field-name", Input).focus()  # typing goes into the form at once
        self._start = self.values()

    def on_resize(self, event: events.Resize) -> None:
        self._fit(event.size.height)

    def _fit(self, height: int) -> None:
        """The fields scroll; the title, error line and Save/Cancel always fit (80x24 too)."""
        self.query_one("#device-form-fields").styles.max_height = max(6, height - FORM_CHROME)

    def _initial(self, key: str) -> str:
        if self.device is None:
            return ""
        value = getattr(self.device, key, None)
        if value is None:
            return ""
        if isinstance(value, list):
            return ", ".join(value)
        return str(value)

    def on_input_submitted(self) -> None:
        self.action_save()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self.action_save()
        else:
            self.action_cancel()

    def action_save(self) -> None:
        raw = {key: self.query_one(f"#field-{key}", Input).value for key, _, _ in TEXT_FIELDS}
        transport = str(self.query_one("#field-transport", Select).value)
        try:
            slurm = self.device.slurm if self.device and transport == "slurm" else None
            device = self.make_device({**form_values(raw, transport), "slurm": slurm})
        except NgbError as exc:
            self.query_one("#form-error", Label).update(f"[red]{exc}[/]")
            return
        self.dismiss(device)

    def _slurm_choice(self) -> list[tuple[str, str]]:
        return [("slurm", "slurm")] if self.device and self.device.transport == "slurm" else []

    def values(self) -> dict[str, str]:
        """What the form holds now (the text fields and the transport)."""
        raw = {key: self.query_one(f"#field-{key}", Input).value for key, _, _ in TEXT_FIELDS}
        raw["transport"] = str(self.query_one("#field-transport", Select).value)
        return raw

    def action_cancel(self) -> None:
        """Close; with edits made, ask first (Escape must not silently throw typing away)."""
        if self.values() == self._start:
            self.dismiss(None)
            return

        def answered(discard: bool | None) -> None:
            if discard:
                self.dismiss(None)

        self.app.push_screen(
            ConfirmScreen("Discard the changes to this device?", yes="Discard"), answered
        )
