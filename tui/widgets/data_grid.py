"""A DataTable an operator can work with: sort by any column, copy a cell or a row.

- Sort: click a column header, or press ``o`` on a cell, to order by that column; again to
  reverse. Numbers (``1234.5 ±12.3``, ``3.000 n.s.``) sort by their value, text alphabetically,
  blanks last. The order survives refills (a Results poll, a new query).
- Copy: ``y`` copies the cell under the cursor, ``Y`` the row (tab-separated), to the terminal's
  clipboard (OSC 52, which tmux and most terminals pass on) and to the app's own clipboard.
- Numbers are right-aligned; ``fill`` fixes the column widths up front (see ``table_fill``).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from typing import ClassVar

from ngb.tui.widgets.table_fill import fill_table
from rich.text import Text
from textual import on
from textual.binding import Binding, BindingType
from textual.widgets import DataTable

TABLE_KEYS = Binding.Group("sort/copy ", compact=True)  # the space: a gap to the next key
_NUMBER = re.compile(r"^\s*[-+]?(\d[\d,]*\.?\d*|\.\d+)([eE][-+]?\d+)?")


def number_in(cell: str) -> float | None:
    """The number a cell starts with (``1,234.5 [1,230, 1,240]`` -> 1234.5), or None."""
    match = _NUMBER.match(cell)
    if not match:
        return None
    try:
        return float(match.group(0).replace(",", ""))
    except ValueError:
        return None


def sort_key(cell: str) -> tuple[int, float, str]:
    value = number_in(cell)
    if value is not None:
        return (0, value, "")
    return (1 if cell.strip() not in ("", "--", "NULL") else 2, 0.0, cell.casefold())


class DataGrid(DataTable[Text]):
    # One footer entry for the three ("oyY sort/copy"; the help says which is which): with a grid
    # focused at 80 columns the screen's keys, q Quit and ? Help still fit beside it.
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("o", "sort_column", "Sort by column", group=TABLE_KEYS),
        Binding("y", "copy_cell", "Copy cell", group=TABLE_KEYS),
        Binding("Y", "copy_row", "Copy row", key_display="Y", group=TABLE_KEYS),
    ]

    def __init__(
        self,
        *,
        zebra_stripes: bool = True,
        name: str | None = None,
        id: str | None = None,  # noqa: A002 - Textual's name for it
        classes: str | None = None,
    ) -> None:
        super().__init__(zebra_stripes=zebra_stripes, name=name, id=id, classes=classes)
        self.sort_by: int | None = None
        self.sort_reverse = False
        self._columns: list[str] = []
        self._rows: list[list[str]] = []
        self._keys: list[str | None] = []
        self._numeric: Collection[int] = ()

    def fill(
        self,
        columns: Sequence[str],
        rows: Iterable[Sequence[object]],
        keys: Iterable[str | None] | None = None,
        numeric: Collection[int] | None = None,
    ) -> None:
        """Replace the content; ``numeric`` column indices are right-aligned (default: guessed
        from the cells: a column whose filled cells all start with a number)."""
        self._columns = list(columns)
        self._rows = [[str(c) for c in row] for row in rows]
        self._keys = list(keys) if keys is not None else [None] * len(self._rows)
        self._numeric = numeric if numeric is not None else self._guess_numeric()
        self._refill()

    def _guess_numeric(self) -> set[int]:
        out = set()
        for i in range(len(self._columns)):
            cells = [r[i] for r in self._rows if i < len(r) and r[i] not in ("", "--", "NULL")]
            if cells and all(number_in(c) is not None for c in cells):
                out.add(i)
        return out

    def _refill(self) -> None:
        order = list(range(len(self._rows)))
        if self.sort_by is not None and self.sort_by < len(self._columns):
            col = self.sort_by
            order.sort(key=lambda i: sort_key(self._rows[i][col]), reverse=self.sort_reverse)
        labels = [
            f"{name} {'▼' if self.sort_reverse else '▲'}" if i == self.sort_by else name
            for i, name in enumerate(self._columns)
        ]
        cursor = self.cursor_coordinate
        fill_table(
            self,
            labels,
            (self._rows[i] for i in order),
            keys=[self._keys[i] for i in order],
            right=self._numeric,
        )
        if self.row_count:
            self.move_cursor(
                row=min(cursor.row, self.row_count - 1),
                column=min(cursor.column, max(0, len(self._columns) - 1)),
            )

    # -- sorting -------------------------------------------------------------------------------
    def sort_on(self, column: int) -> None:
        if self.sort_by == column:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_by, self.sort_reverse = column, False
        self._refill()

    @on(DataTable.HeaderSelected)
    def _header(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        self.sort_on(event.column_index)

    def action_sort_column(self) -> None:
        if self._columns:
            self.sort_on(self.cursor_coordinate.column)

    # -- copying -------------------------------------------------------------------------------
    def _copy(self, text: str, what: str) -> None:
        self.app.copy_to_clipboard(text)
        self.notify(f"copied {what}: {text[:60]}", timeout=3)

    def action_copy_cell(self) -> None:
        if self.row_count:
            self._copy(str(self.get_cell_at(self.cursor_coordinate)), "cell")

    def action_copy_row(self) -> None:
        if self.row_count:
            row = self.get_row_at(self.cursor_coordinate.row)
            self._copy("\t".join(str(c) for c in row), "row")
