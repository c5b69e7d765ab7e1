"""Render a ``Report`` as a rich table, Markdown, CSV or LaTeX.

Human formats show a ``Cell`` as ``mean [low, high] note`` (its 95 % interval) or ``mean ± sd``
(a standard deviation), rounded to the digits the interval supports (``ngb.sweeps.report.numbers``);
CSV keeps numbers numeric, rounded the same way, and puts bounds, spreads and notes in their own
columns named for what they hold (``<col> 95% lo``, ``<col> 95% hi``, ``<col> sd``,
``<col> note``), added only where a column has any, so a spreadsheet or pandas reads the values
directly. A report with several tables writes each CSV
table after a ``# title`` line and a blank line between them.

``render_to`` writes a report as it goes, a row at a time, so a report of every point (its rows
in a ``RowSpool``) never needs its text, or a rich Table of it, in memory: a terminal table
longer than ``LONG_TABLE`` rows is printed plain (columns padded to their widest cell, found in
a first reading of the rows) instead of through rich, whose layout holds every row.

LaTeX (booktabs tables for a paper) lives in ``report_latex``.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Iterable
from typing import Protocol

from ngb.sweeps.report.data import Cell, Report, Table
from ngb.sweeps.report.formatting import fmt_cell, fmt_number
from ngb.sweeps.report.latex import latex
from ngb.sweeps.report.numbers import Printed, printed_bounds, round_with_interval

__all__ = ["FORMATS", "fmt_cell", "fmt_number", "render", "render_to"]

FORMATS = ("table", "markdown", "csv", "latex")
#: rows above which a terminal table is printed plain rather than as one rich Table (see module)
LONG_TABLE = 2000

#: where rendered text goes, a piece at a time (``sys.stdout.write``, a file's ``write``)
Write = Callable[[str], object]


def render(report: Report, fmt: str = "table", width: int = 200) -> str:
    buffer = io.StringIO()
    render_to(report, buffer.write, fmt, width)
    return buffer.getvalue()


def render_to(report: Report, write: Write, fmt: str = "table", width: int = 200) -> None:
    """``render``, written to ``write`` as it is made (see module)."""
    if fmt == "markdown":
        _markdown(report, write)
    elif fmt == "csv":
        _csv(report, write)
    elif fmt == "latex":
        write(latex(report))
    else:
        _rich(report, write, width)


class _Forward(io.StringIO):
    """A text file whose writes go to ``write`` (rich's console and csv's writer want a file;
    nothing is kept in it)."""

    def __init__(self, write: Write) -> None:
        super().__init__()
        self._write = write

    def write(self, text: str) -> int:
        self._write(text)
        return len(text)


def _rich(report: Report, write: Write, width: int) -> None:
    from rich.console import Console
    from rich.table import Table as RichTable

    console = Console(file=_Forward(write), width=width, color_system=None, highlight=False)
    console.print(f"[bold]{report.title}[/bold]")
    for table in report.tables:
        if table.row_count() > LONG_TABLE:
            _plain(table, write)
        else:
            rich_table = RichTable(title=table.title, header_style="bold", show_edge=False)
            for name in table.columns:
                rich_table.add_column(name, overflow="fold")
            for row in table.each_row():
                rich_table.add_row(*(fmt_cell(v) for v in row))
            console.print(rich_table)
        if not table.row_count():
            console.print("(no matching results)")
        for note in table.notes:
            console.print(f"note: {note}", markup=False)
    for note in report.notes:
        console.print(f"note: {note}", markup=False)


def _plain(table: Table, write: Write) -> None:
    """A long table as plain text, a line per row (see module)."""
    widths = [len(name) for name in table.columns]
    for row in table.each_row():
        for i, value in enumerate(row):
            widths[i] = max(widths[i], len(fmt_cell(value)))

    def line(cells: Iterable[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip() + "\n"

    write(f"{table.title}\n")
    write(line(table.columns))
    write(line("-" * w for w in widths))
    for row in table.each_row():
        write(line(fmt_cell(v) for v in row))


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def _md_cell(value: object) -> str:
    text = _md_escape(fmt_cell(value))
    return f"**{text}**" if isinstance(value, Cell) and value.bold and text != "-" else text


def _markdown(report: Report, write: Write) -> None:
    # every line but the last ends in a newline; trailing blank lines are held back, so the text
    # ends in exactly one newline as the whole-text version's rstrip() + "\n" did
    held: list[str] = []

    def out(line: str) -> None:
        if not line:
            held.append("\n")
            return
        write("".join(held) + line + "\n")
        held.clear()

    out(f"# {report.title}")
    out("")
    for table in report.tables:
        out(f"## {table.title}")
        out("")
        out("| " + " | ".join(_md_escape(c) for c in table.columns) + " |")
        out("|" + "|".join("---" for _ in table.columns) + "|")
        for row in table.each_row():
            out("| " + " | ".join(_md_cell(v) for v in row) + " |")
        if not table.row_count():
            out("")
            out("(no matching results)")
        out("")
        for note in table.notes:
            out(f"_{_md_escape(note)}_")
        out("")
    for note in report.notes:
        out(f"- {note}")


class CsvWriter(Protocol):
    """What ``csv.writer`` returns, as far as it is used here."""

    def writerow(self, row: Iterable[object], /) -> object: ...


def _csv_value(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return ""
    return "" if value is None else value


def _extras(table: Table) -> tuple[list[bool], list[bool], list[bool]]:
    """Per column: whether any of its cells has an interval, a spread, a note (one reading)."""
    n = len(table.columns)
    has_ci, has_std, has_note = [False] * n, [False] * n, [False] * n
    for row in table.each_row():
        for i, value in enumerate(row):
            if isinstance(value, Cell):
                has_ci[i] = has_ci[i] or value.interval is not None
                has_std[i] = has_std[i] or value.std is not None
                has_note[i] = has_note[i] or bool(value.note)
    return has_ci, has_std, has_note


def _csv_table(table: Table, writer: CsvWriter) -> None:
    has_ci, has_std, has_note = _extras(table)
    header: list[str] = []
    for i, name in enumerate(table.columns):
        header.append(name)
        if has_ci[i]:
            header += [f"{name} 95% lo", f"{name} 95% hi"]
        if has_std[i]:
            header.append(f"{name} sd")
        if has_note[i]:
            header.append(f"{name} note")
    writer.writerow(header)
    for row in table.each_row():
        out: list[object] = []
        for i, value in enumerate(row):
            cell = value if isinstance(value, Cell) else None
            out.append(_csv_value(_shown(cell) if cell else value))
            if has_ci[i]:
                # the same rounded bounds as the other formats (the verdicts are decided on them)
                printed = _printed(cell)
                out += [printed.low, printed.high] if printed else ["", ""]
            if has_std[i]:
                out.append(_csv_value(_spread(cell)))
            if has_note[i]:
                out.append(cell.note if cell else "")
        writer.writerow(out)


def _printed(cell: Cell | None) -> Printed | None:
    """A cell's value and interval as the other formats print them (None without both)."""
    if cell is None or cell.value is None or cell.interval is None:
        return None
    return printed_bounds(cell.value, *cell.interval)


def _shown(cell: Cell) -> float | None:
    """A cell's value as the other formats round it."""
    printed = _printed(cell)
    if printed is not None:
        return printed.value
    if cell.value is not None and cell.std:
        return round_with_interval(cell.value, cell.std)[0]
    return cell.value


def _spread(cell: Cell | None) -> float | None:
    if cell is None or cell.std is None:
        return None
    if cell.value is not None and cell.std and cell.interval is None:
        return round_with_interval(cell.value, cell.std)[1]
    return cell.std


def _csv(report: Report, write: Write) -> None:
    writer = csv.writer(_Forward(write), lineterminator="\n")
    several = len(report.tables) > 1
    for index, table in enumerate(report.tables):
        if several:
            if index:
                write("\n")
            write(f"# {table.title}\n")
        _csv_table(table.machine or table, writer)
