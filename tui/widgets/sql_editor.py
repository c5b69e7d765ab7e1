"""The SQL editor: Textual's TextArea with SQL highlighting and completion of the database's
table and column names (and SQL keywords).

ctrl+space completes the word before the cursor: one candidate is inserted, several are narrowed
to their common prefix and listed (``CompletionShown``, the SQL screen shows them on its status
line). Tab is left alone so it moves focus out of the editor like everywhere else (a key that
traps focus is a dead end for keyboard users). Highlighting needs the ``tree-sitter-sql`` grammar
(a workstation dependency); without it the editor still works, uncoloured.

``typed`` says whether the operator has worked in the editor since it last got focus (a key that
reached it, or a click): until then the app's number keys switch screens (``4`` then ``5`` goes
from SQL to Runs), after it they type digits.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import ClassVar

from textual import events
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import TextArea

# fmt: off
KEYWORDS = (
    "SELECT", "FROM", "WHERE", "GROUP", "BY", "ORDER", "HAVING", "LIMIT", "JOIN", "LEFT",
    "RIGHT", "INNER", "OUTER", "ON", "AS", "AND", "OR", "NOT", "NULL", "IS", "IN", "LIKE",
    "ILIKE", "BETWEEN", "DISTINCT", "COUNT", "AVG", "MIN", "MAX", "SUM", "ROUND", "WITH",
    "UNION", "ALL", "DESC", "ASC", "CASE", "WHEN", "THEN", "ELSE", "END", "QUALIFY", "OVER",
    "PARTITION", "arg_max", "arg_min", "median", "stddev", "quantile_cont",
)
# fmt: on
# keys that leave the editor: pressing them is not typing (the next digit still switches screens)
LEAVE_KEYS = ("tab", "shift+tab", "escape")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")


def complete(prefix: str, names: Iterable[str]) -> list[str]:
    """Candidates for ``prefix`` (case-insensitive), names before keywords, no duplicates."""
    low = prefix.casefold()
    seen: dict[str, None] = {}
    for name in names:
        if name.casefold().startswith(low) and name.casefold() != low:
            seen.setdefault(name)
    return list(seen)


class SqlEditor(TextArea):
    BINDINGS: ClassVar[list[BindingType]] = [
        # ctrl+space arrives as NUL, which Textual names ctrl+@
        Binding("ctrl+space,ctrl+@", "complete", "Complete", key_display="^space"),
    ]

    class CompletionShown(Message):
        def __init__(self, candidates: list[str]) -> None:
            super().__init__()
            self.candidates = candidates

    def __init__(
        self,
        text: str = "",
        *,
        name: str | None = None,
        id: str | None = None,  # noqa: A002 - Textual's name for it
        classes: str | None = None,
    ) -> None:
        language = "sql" if self._sql_available() else None
        super().__init__(
            text,
            language=language,
            show_line_numbers=True,
            soft_wrap=False,
            name=name,
            id=id,
            classes=classes,
        )
        self.names: list[str] = []  # tables and columns of the database, set by the SQL screen
        self.typed = False

    @staticmethod
    def _sql_available() -> bool:
        from textual._tree_sitter import get_language

        return get_language("sql") is not None

    def set_names(self, tables: dict[str, list[str]]) -> None:
        names = list(tables)
        for columns in tables.values():
            names.extend(c for c in columns if c not in names)
        self.names = names

    def word_before_cursor(self) -> str:
        row, col = self.cursor_location
        line = self.document.get_line(row)[:col]
        match = _WORD.search(line)
        return match.group(0) if match else ""

    def _on_focus(self, event: events.Focus) -> None:
        self.typed = False
        super()._on_focus(event)

    async def _on_mouse_down(self, event: events.MouseDown) -> None:
        self.typed = True  # a click into the text means editing
        await super()._on_mouse_down(event)

    def check_consume_key(self, key: str, character: str | None = None) -> bool:
        """Digits are the app's screen keys until the operator types here (see module doc)."""
        if not self.typed and character is not None and character.isdigit():
            return False
        return super().check_consume_key(key, character)

    def _forward_event(self, event: events.Event) -> None:
        """The app hands this editor a key it did not bind: from now on the editor owns the keys.

        Set here, while the app still holds the key, not when the editor gets to it: keys typed
        fast queue up in the app, which checks its digit bindings for ``range(2`` before the
        editor has read the ``r``; ``typed`` set any later lets the "2" switch screens."""
        if isinstance(event, events.Key) and event.key not in LEAVE_KEYS:
            self.typed = True
        super()._forward_event(event)

    async def _on_key(self, event: events.Key) -> None:
        if event.key not in LEAVE_KEYS:
            self.typed = True
        await super()._on_key(event)

    def action_complete(self) -> None:
        self.typed = True
        self.complete_word()

    def complete_word(self) -> list[str]:
        """Complete the word before the cursor; returns the candidates it chose from."""
        prefix = self.word_before_cursor()
        candidates = complete(prefix, [*self.names, *KEYWORDS]) if prefix else []
        if not candidates:
            return []
        common = os.path.commonprefix([c.casefold() for c in candidates])
        chosen = candidates[0] if len(candidates) == 1 else candidates[0][: len(common)]
        row, col = self.cursor_location
        self.replace(chosen, (row, col - len(prefix)), (row, col))
        if len(candidates) > 1:
            self.post_message(self.CompletionShown(candidates))
        return candidates
