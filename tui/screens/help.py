"""The ``?`` help modal: keys and what each screen is for."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

HELP = """\
# ngb-tui

| key | what |
|---|---|
| `1` `2` `3` `4` | Devices, Run, Results, SQL |
| `ctrl+p` | command palette (screens, start, themes) |
| `?` | this help |
| `q` | quit (runs go on on their devices; restart re-attaches) |
| `/` | filter the table on Devices and Results |

**Devices**: `a` add, `e` edit, `d` remove, `p` probe, `t` trust the host key, `r` reload.

**Run**: choose a sweep preset (or type a sweep file) and devices, `s` start, `p` pause or resume
after the trial in flight, `c` cancel. The log follows new lines while it is scrolled to the end.

**Results**: pick run, device, family, model and compilers; the tabs hold the charts and a table.

**SQL**: `ctrl+j` (or `ctrl+enter`) runs the query; read-only unless *allow writes* is on;
export the result (or a table) to CSV or Parquet.

Press `escape` to close.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Close"),
        Binding("question_mark", "dismiss", "Close", show=False),
    ]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-body", classes="modal-body"):
            yield Markdown(HELP)

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
