"""A yes/no modal (removing a device, cancelling a run, discarding a form).

The safe answer has the focus, so Enter (or a reflexive Space) keeps things as they are; the
destructive one takes ``y`` or a deliberate Tab first.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label


class ConfirmScreen(ModalScreen[bool]):
    AUTO_FOCUS = "#no"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "answer(False)", "No"),
        Binding("y", "answer(True)", "Yes"),
        Binding("n", "answer(False)", "No"),
    ]

    def __init__(self, question: str, yes: str = "Yes") -> None:
        super().__init__()
        self.question, self.yes = question, yes

    def compose(self) -> ComposeResult:
        with Vertical(classes="modal-body"):
            yield Label(self.question, id="confirm-question")
            with Horizontal(classes="modal-buttons"):
                yield Button(self.yes, id="yes", variant="error")
                yield Button("No", id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)
