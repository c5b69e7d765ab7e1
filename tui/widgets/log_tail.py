"""The run log tail.

Textual's ``Log`` already follows new lines only while the view sits at the bottom, which is
exactly what an operator wants: scroll up to read an error and the view stays put; scroll back to
the end and it follows again. This subclass bounds its size, adds a one-call append, and keeps
following when the log is resized: it takes the rows the device panels leave, so it shrinks when a
device appears, and without this a log that sat at the end would stop a few lines short of it.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual import events
from textual.widgets import Log


class LogTail(Log):
    DEFAULT_CSS = """
    LogTail { height: 8; min-height: 3; border: round $panel; }
    """

    def __init__(self, *, max_lines: int = 2000, id: str | None = None) -> None:
        super().__init__(max_lines=max_lines, auto_scroll=True, id=id)
        self._height: int | None = None

    def append(self, lines: Iterable[str]) -> None:
        batch = list(lines)
        if batch:
            self.write_lines(batch)

    def on_resize(self, event: events.Resize) -> None:
        old, self._height = self._height, self.scrollable_content_region.height
        if old is None or old == self._height:
            return
        was_at_end = self.scroll_y >= max(0, self.virtual_size.height - old) - 1
        if was_at_end:
            self.call_after_refresh(self.scroll_end, animate=False)
