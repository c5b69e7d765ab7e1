"""The host-key trust modal: shows the key a device offers and asks before trusting it.

Nothing is trusted silently: the operator sees the SHA256 fingerprint (to compare with
``ssh-keygen -lf`` on the device) and, when the key differs from the one on record, a warning that
this may be an attack. Dismisses with True only on an explicit "Trust".
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label


class HostKeyScreen(ModalScreen[bool]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "refuse", "Do not trust")]

    def __init__(
        self, device: str, address: str, key_type: str, fingerprint: str, status: str = "unknown"
    ) -> None:
        super().__init__()
        self.device, self.address = device, address
        self.key_type, self.fingerprint, self.status = key_type, fingerprint, status

    def compose(self) -> ComposeResult:
        with Vertical(classes="modal-body", id="host-key-body"):
            yield Label(f"[b]Host key of {self.device}[/b] ({self.address})")
            if self.status == "changed":
                yield Label(
                    "[b red]WARNING: this key differs from the one on record. Someone "
                    "may be intercepting the connection, or the device was "
                    "reinstalled.[/]",
                    id="host-key-warning",
                )
            elif self.status == "trusted":
                yield Label("[green]This key is already trusted.[/]", id="host-key-warning")
            else:
                yield Label("This host key is not known yet.", id="host-key-warning")
            yield Label(f"{self.key_type}  [b]{self.fingerprint}[/b]", id="host-key-fingerprint")
            yield Label(
                "Compare it with `ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub` on the "
                "device before trusting it.",
                classes="hint",
            )
            with Horizontal(classes="modal-buttons"):
                yield Button("Trust", id="trust", variant="warning")
                yield Button("Do not trust", id="refuse", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#refuse", Button).focus()  # the safe choice is the default

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "trust")

    def action_refuse(self) -> None:
        self.dismiss(False)
