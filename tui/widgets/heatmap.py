"""A heatmap as a grid of values: each cell shows its number on a colour from a scale, with the
scale drawn beneath (low .. high), so it reads without a legend lookup and at any width.

Plotext's matrix plot draws colour only (two one-character cells for a two-batch sweep); here every
cell carries its value, the row and column labels say what varies, and missing cells are ``--``.
"""

from __future__ import annotations

from ngb.tui.results_data import Chart
from rich.color import Color
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

# blue (low) -> white -> red (high): the diverging scale reads the same in light and dark themes
LOW, MID, HIGH = (49, 99, 206), (235, 235, 235), (200, 50, 45)
SCALE_STEPS = 9


def _mix(a: tuple[int, int, int], b: tuple[int, int, int], t: float) -> Color:
    r, g, bl = (round(x + (y - x) * t) for x, y in zip(a, b, strict=True))
    return Color.from_rgb(r, g, bl)


def colour(value: float, low: float, high: float) -> Color:
    t = 0.5 if high <= low else (value - low) / (high - low)
    t = min(1.0, max(0.0, t))
    return _mix(LOW, MID, t * 2) if t < 0.5 else _mix(MID, HIGH, (t - 0.5) * 2)


def heat_cell(value: float | None, low: float, high: float, text: str | None = None) -> Text:
    """One cell: its printed text (value [interval], from ``ngb.sweeps.report.derived``) on its
    colour."""
    if value is None:
        return Text("--", justify="right")
    return Text(
        text or f"{value:.3f}",
        justify="right",
        style=Style(color="black", bgcolor=colour(value, low, high)),
    )


def scale_line(low: float, high: float) -> Text:
    line = Text(f"{low:.3f} ")
    for i in range(SCALE_STEPS):
        v = low + (high - low) * i / (SCALE_STEPS - 1)
        line.append("   ", Style(bgcolor=colour(v, low, high)))
    line.append(f" {high:.3f}")
    return line


def heat_table(chart: Chart) -> Table:
    values = [v for row in chart.matrix or [] for v in row if v is not None]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    table = Table(expand=False)
    table.add_column("")
    for x in chart.xticks:
        table.add_column(f"{chart.xlabel} {x}", justify="right")
    texts = chart.cells or [[None] * len(row) for row in chart.matrix or []]
    for label, row, words in zip(chart.row_labels, chart.matrix or [], texts, strict=True):
        table.add_row(label, *(heat_cell(v, low, high, t) for v, t in zip(row, words, strict=True)))
    return table


class HeatmapView(Static):
    DEFAULT_CSS = """
    HeatmapView { height: 1fr; min-height: 8; padding: 0 1; overflow-y: auto; }
    """

    def draw(self, chart: Chart) -> None:
        if chart.note or chart.matrix is None:
            self.update(Text(f"{chart.title}: {chart.note or 'nothing to show'}"))
            return
        values = [v for row in chart.matrix for v in row if v is not None]
        low, high = (min(values), max(values)) if values else (0.0, 1.0)
        from rich.console import Group

        self.update(
            Group(
                Text(chart.title, style="bold"),
                heat_table(chart),
                Text(chart.subtitle, style="italic"),
                Text("scale: ") + scale_line(low, high),
            )
        )
