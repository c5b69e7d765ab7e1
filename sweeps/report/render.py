"""Render a ``Report`` as a rich table, Markdown, CSV or LaTeX.

Human formats show a ``Cell`` as ``mean [low, high] note`` (its 95 % interval) or ``mean ± sd``
(a standard deviation), rounded to the digits the interval supports (``ngb.sweeps.report.numbers``);
CSV keeps numbers numeric, rounded the same way, and puts bounds, spreads and notes in their own
columns named for what they hold (``<col> 95% lo``, ``<col> 95% hi``, ``<col> sd``,
``<col> note``), added only where a column has any, so a spreadsheet or pandas reads the values
directly. A report with several tables writes each CSV
table after a ``# title`` line and a blank line between them.

LaTeX (booktabs tables for a paper) lives in ``report_latex``.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable
from typing import Protocol

from ngb.sweeps.report.data import Cell, Report, Table
from ngb.sweeps.report.formatting import fmt_cell, fmt_number
from ngb.sweeps.report.latex import latex
from ngb.sweeps.report.numbers import Printed, printed_bounds, round_with_interval

__all__ = ["FORMATS", "fmt_cell", "fmt_number", "render"]

FORMATS = ("table", "markdown", "csv", "latex")


def render(report: Report, fmt: str = "table", width: int = 200) -> str:
    if fmt == "markdown":
        return _markdown(report)
    if fmt == "csv":
        return _csv(report)
    if fmt == "latex":
        return latex(report)
    return _rich(report, width)


def _rich(report: Report, width: int) -> str:
    from rich.console import Console
    from rich.table import Table as RichTable

    console = Console(file=io.StringIO(), width=width, color_system=None, highlight=False)
    console.print(f"[bold]{report.title}[/bold]")
    for table in report.tables:
        rich_table = RichTable(title=table.title, header_style="bold", show_edge=False)
        for name in table.columns:
            rich_table.add_column(name, overflow="fold")
        for row in table.rows:
            rich_table.add_row(*(fmt_cell(v) for v in row))
        console.print(rich_table)
        if not table.rows:
            console.print("(no matching results)")
        for note in table.notes:
            console.print(f"note: {note}", markup=False)
    for note in report.notes:
        console.print(f"note: {note}", markup=False)
    return console.file.getvalue()  # type: ignore[attr-defined]


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def _markdown(report: Report) -> str:
    lines = [f"# {report.title}", ""]
    for table in report.tables:
        lines += [f"## {table.title}", ""]
        lines.append("| " + " | ".join(_md_escape(c) for c in table.columns) + " |")
        lines.append("|" + "|".join("---" for _ in table.columns) + "|")
        for row in table.rows:
            lines.append("| " + " | ".join(_md_escape(fmt_cell(v)) for v in row) + " |")
        if not table.rows:
            lines.append("\n(no matching results)")
        lines += [""] + [f"_{_md_escape(note)}_" for note in table.notes]
        lines.append("")
    lines += [f"- {note}" for note in report.notes]
    return "\n".join(lines).rstrip() + "\n"


class CsvWriter(Protocol):
    """What ``csv.writer`` returns, as far as it is used here."""

    def writerow(self, row: Iterable[object], /) -> object: ...


def _csv_value(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return ""
    return "" if value is None else value


def _cells(table: Table, column: int) -> list[Cell]:
    """The ``Cell`` values of one column (a column may also hold plain values)."""
    return [value for row in table.rows if isinstance(value := row[column], Cell)]


def _csv_table(table: Table, writer: CsvWriter) -> None:
    columns = range(len(table.columns))
    has_ci = [any(c.interval is not None for c in _cells(table, i)) for i in columns]
    has_std = [any(c.std is not None for c in _cells(table, i)) for i in columns]
    has_note = [any(c.note for c in _cells(table, i)) for i in columns]
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
    for row in table.rows:
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


def _csv(report: Report) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    several = len(report.tables) > 1
    for index, table in enumerate(report.tables):
        if several:
            if index:
                buffer.write("\n")
            buffer.write(f"# {table.title}\n")
        _csv_table(table, writer)
    return buffer.getvalue()
