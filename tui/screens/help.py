"""The ``?`` help modal: the global keys, then each main screen's purpose and keys.

Built from ``ngb.tui.registry.SCREENS`` and each screen's own ``BINDINGS``, so a new screen or key
shows up here without anyone editing help text.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

GLOBAL_KEYS = (
    ("ctrl+p", "command palette (screens, start, themes; the theme is remembered)"),
    ("y / Y / o", "in a table: copy the cell / the row, sort by the column (or click its header)"),
    ("?", "this help"),
    ("q", "quit (runs go on on their devices; restart re-attaches)"),
    ("escape", "leave a text box or editor (then the keys above work again)"),
    ("tab", "next field (also out of the SQL editor; ctrl+space completes there)"),
    ("1-N", "switch screens; in the SQL editor only until you type there, then they are digits"),
    ("/", "filter the table on Devices and Results"),
)


def key_text(binding: Binding) -> str:
    return binding.key_display or binding.key.replace("question_mark", "?").replace("slash", "/")


def help_markdown() -> str:
    from ngb.tui.registry import SCREENS  # the registry imports every screen: import it late

    lines = ["# ngb-tui", "", "| key | what |", "|---|---|"]
    for entry in SCREENS:
        lines.append(f"| `{entry.key}` | {entry.title}: {entry.summary} |")
    last = SCREENS[-1].key  # "1-N": as many screen keys as the registry has
    lines += [f"| `{key.replace('N', last)}` | {what} |" for key, what in GLOBAL_KEYS]
    for entry in SCREENS:
        screen_keys = [
            f"`{key_text(b)}` {b.description.lower()}"
            for b in entry.build.__dict__.get("BINDINGS", [])
            if isinstance(b, Binding) and b.description
        ]
        lines += ["", f"**{entry.title}** ({entry.key}): {entry.summary}."]
        if screen_keys:
            lines.append("Keys: " + ", ".join(screen_keys) + ".")
    lines += ["", "Press `escape` to close."]
    return "\n".join(lines)


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Close"),
        Binding("question_mark", "dismiss", "Close", show=False),
    ]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-body", classes="modal-body"):
            yield Markdown(help_markdown())

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
