"""Fill a DataTable with plain-text cells and column widths fixed up front.

Why not ``add_columns`` + ``add_row`` and let the table size itself? Textual's DataTable measures
new rows only on its own next idle, and caches rendered rows keyed by an update counter that this
measurement does not bump. When a worker's result lands (``call_from_thread``) and the screen
paints before the table's idle, rows are rendered and cached at header width and stay cut off
(``onnxrunt``) until something else invalidates the cache: a capture then depends on timing. With
explicit widths every paint, early or late, is the same.

Cells become ``rich.text.Text`` so database values and error messages that contain brackets are
shown as typed, never parsed as markup.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from rich.console import JustifyMethod
from rich.text import Text
from textual.widgets import DataTable

MAX_COLUMN_WIDTH = 80  # a long SQL text or error message should not push every other column away


def as_text(value: object, justify: JustifyMethod | None = None) -> Text:
    if isinstance(value, Text):
        return value
    return Text(str(value), justify=justify) if justify else Text(str(value))


def fill_table(
    table: DataTable[Text],
    columns: Sequence[str],
    rows: Iterable[Sequence[object]],
    keys: Iterable[str | None] | None = None,
    right: Collection[int] = (),
) -> None:
    """Replace ``table``'s columns and rows; each column is as wide as its widest cell (capped).
    Columns whose index is in ``right`` (numbers) are right-aligned."""
    text_rows = [
        [as_text(v, "right" if i in right else None) for i, v in enumerate(row)] for row in rows
    ]
    widths = [len(label) for label in columns]
    for row in text_rows:
        for i, cell in enumerate(row[: len(widths)]):
            widths[i] = max(widths[i], cell.cell_len)
    table.clear(columns=True)
    for label, width in zip(columns, widths, strict=True):
        table.add_column(label, width=min(width, MAX_COLUMN_WIDTH))
    row_keys = list(keys) if keys is not None else [None] * len(text_rows)
    for row, key in zip(text_rows, row_keys, strict=True):
        table.add_row(*row, key=key)
