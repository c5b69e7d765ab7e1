"""The run log tail.

Textual's ``Log`` already follows new lines only while the view sits at the bottom, which is
exactly what an operator wants: scroll up to read an error and the view stays put; scroll back to
the end and it follows again. This subclass only bounds its size and adds a one-call append.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual.widgets import Log


class LogTail(Log):
    DEFAULT_CSS = """
    LogTail { height: 8; min-height: 3; border: round $panel; }
    """

    def __init__(self, *, max_lines: int = 2000, id: str | None = None) -> None:
        super().__init__(max_lines=max_lines, auto_scroll=True, id=id)

    def append(self, lines: Iterable[str]) -> None:
        batch = list(lines)
        if batch:
            self.write_lines(batch)
