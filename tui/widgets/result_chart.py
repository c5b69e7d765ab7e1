"""A plotext chart of one ``results_data.Chart``: a line per compiler with 95 % error bars, a
reference line where 1 means "as fast as eager", and bars when a series has a single point.

Batches and depths are drawn at evenly spaced positions labelled with their values: batch sizes
grow geometrically (1, 8, 32 ...), and even spacing keeps every point readable on a terminal. A
single batch would be one dot per compiler, so it is drawn as bars named by compiler instead.
The y axis goes logarithmic where the values span more than ``results_data.WIDE_RANGE`` (series
50x apart would share the bottom row of a linear axis) or when the operator asks (``l`` on the
Results screen flips it). Every point's whisker runs between its printed 95 % bounds (asymmetric:
a ratio's or a throughput's interval is built on the log scale), and a log axis never sees a
value at or below zero.

Readable by everyone: each series has its own colour from the Okabe-Ito palette (told apart with
the common colour-vision deficiencies; plotext's defaults gave two near-identical reds) and its
own point marker, so shapes tell them apart in monochrome too. The legend sits under the plot,
never over the data (plotext puts it inside the plot area, where it hid points); the title and
the chart's note sit above it as text that wraps (``caption``), never as plotext's title. Both
axes are fixed to the data with its whiskers plus a margin, so no line or error bar runs past
the frame.
"""

from __future__ import annotations

import math
import zlib

from ngb.core.compilers import compiler_classes
from ngb.core.compilers.base import Style
from ngb.tui.results_data import Chart
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static
from textual_plotext import PlotextPlot

#: Okabe & Ito (2008): orange, sky blue, bluish green, vermillion, blue, reddish purple, yellow
PALETTE: tuple[tuple[int, int, int], ...] = (
    (230, 159, 0),
    (86, 180, 233),
    (0, 158, 115),
    (213, 94, 0),
    (0, 114, 178),
    (204, 121, 167),
    (240, 228, 66),
)
MARKERS = ("●", "■", "▲", "◆", "✚", "✖", "★")

RGB = tuple[int, int, int]
#: a compiler keeps its colour and marker on every chart and every start (eager first): each
#: declares its own (``Compiler.style``, in its module under ``ngb.core.compilers``; the internal
#: ``noop`` too), and ``tests/test_compilers_describe.py`` fails on a registered compiler without
#: one or two sharing one (a hashed fallback gave ``tvm-ms`` TorchScript's vermillion diamond).
#: Okabe-Ito has seven colours; the two beyond them are Tol's red and grey (told apart from the
#: rest by their markers where colour vision cannot).
STYLES: dict[str, Style] = {
    name: cls.style for name, cls in compiler_classes(include_internal=True).items()
}
#: a compiler's series at another precision ("openvino bf16" beside "openvino fp32", as
#: ``report.data.series_names`` splits them) keeps the compiler's colour and takes the hollow
#: form of its marker (``Style.hollow``), so the two differ in shape
PLAIN_PRECISIONS = ("fp32", "default")


def style_of(name: str) -> tuple[RGB, str]:
    """The colour and marker of series ``name``: fixed for the registered compilers (a
    precision's series in its compiler's colour), else by a hash of the name (stable across
    runs, unlike Python's ``hash``)."""
    compiler, _, precision = name.partition(" ")
    style = STYLES.get(compiler)
    if style is not None:
        plain = precision in ("", *PLAIN_PRECISIONS)
        return style.colour, style.marker if plain else style.hollow
    index = zlib.crc32(name.encode())
    return PALETTE[index % len(PALETTE)], MARKERS[index % len(MARKERS)]


def legend(names: list[str]) -> Text:
    """``● eager  ■ onnxruntime ...`` in the series' colours (wraps on a narrow terminal)."""
    text = Text()
    for i, name in enumerate(names):
        (r, g, b), marker = style_of(name)
        if i:
            text.append("  ")
        text.append(f"{marker} {name}", style=f"rgb({r},{g},{b})")
    return text


def y_range(chart: Chart) -> tuple[float, float] | None:
    """Low and high of every point and whisker (with the reference line), None without data;
    on a log axis only the positive ones (a log of zero or less is undefined)."""
    values: list[float] = []
    for name, ys in chart.series.items():
        errs = chart.errors.get(name) or [None] * len(ys)
        for y, e in zip(ys, errs, strict=False):
            if y is None or not math.isfinite(y):
                continue
            values += [y, *(e or ())]
    if chart.reference is not None:
        values.append(chart.reference)
    if chart.log_y:
        values = [v for v in values if v > 0]
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return None
    return min(values), max(values)


def drawable(chart: Chart, y: float | None) -> bool:
    """A value the axis can show (a log axis takes positive values only)."""
    return y is not None and math.isfinite(y) and (y > 0 or not chart.log_y)


def whisker(chart: Chart, bounds: tuple[float, float] | None) -> tuple[float, float] | None:
    """A point's interval as drawn: on a log axis a bound at or below zero (a slope's, say)
    stops at the smallest positive value shown, so the log never sees it."""
    if bounds is None:
        return None
    low, high = bounds
    if chart.log_y:
        floor = (y_range(chart) or (1.0, 1.0))[0]
        low, high = max(low, floor), max(high, floor)
    return (low, high)


def caption(chart: Chart) -> Text:
    """The chart's title, then its subtitle or the reason it is empty: text that wraps. Plotext
    drops a title wider than the plot whole, which left the Depth tab an empty box at 80
    columns (its reason, or its slopes and retentions, ran past the edge)."""
    text = Text(chart.title, style="bold")
    more = chart.note or chart.subtitle
    if more:
        text.append(": " if chart.note else " | ")
        text.append(more, style="" if chart.note else "italic")
    return text


class ResultChart(Vertical):
    DEFAULT_CSS = """
    ResultChart { height: 1fr; }
    ResultChart > .chart-caption { height: auto; padding: 0 1; text-align: center; }
    /* the plot gives way first: with a floor on the whole chart, a long note or advice above
       it pushed the axis labels and the legend off an 80x24 screen */
    ResultChart > PlotextPlot { height: 1fr; min-height: 5; }
    ResultChart > .chart-legend { height: auto; max-height: 2; padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        yield Static("", classes="chart-caption")
        yield PlotextPlot()
        yield Static("", classes="chart-legend")

    @property
    def plt(self):  # type: ignore[no-untyped-def]  # plotext's module-like figure
        return self.query_one(PlotextPlot).plt

    def draw(self, chart: Chart) -> None:
        plot = self.query_one(PlotextPlot)
        plt = plot.plt
        plt.clear_data()
        plt.clear_figure()
        names = [n for n, ys in chart.series.items() if any(y is not None for y in ys)]
        self.query_one(".chart-caption", Static).update(caption(chart))
        self.query_one(".chart-legend", Static).update(legend(names) if not chart.note else "")
        # an empty chart is its reason alone: no empty frame under it
        plot.display = not chart.note
        if chart.note:
            return
        if chart.log_y:
            plt.yscale("log")
        if len(chart.xticks) == 1:
            if chart.reference is not None:
                plt.hline(chart.reference, "gray")
            self._bars(chart, names)
        else:
            self._lines(chart, names)
        self._fit_y(chart)
        plt.ylabel(chart.ylabel + (" (log)" if chart.log_y else ""))
        plot.refresh()

    def _fit_y(self, chart: Chart) -> None:
        """The y axis holds every whisker with a margin, and no axis goes below 0 for them."""
        span = y_range(chart)
        if span is None:
            return
        low, high = span
        if chart.log_y:
            return  # plotext ranges a log axis itself (its limits are not in data units)
        pad = (high - low) * 0.08 or abs(high) * 0.1 or 1.0
        # throughputs, speed-ups, RTR, ASE and BSR are never negative: no axis below 0, even
        # where a wide interval's whisker would reach there
        floor = max(low - pad, 0.0)
        self.plt.ylim(floor, high + pad)

    def _lines(self, chart: Chart, names: list[str]) -> None:
        plt = self.plt
        positions = [float(i) for i in range(1, len(chart.xticks) + 1)]
        drawn: list[tuple[list[float], list[float], tuple[int, int, int], str]] = []
        if chart.reference is not None and drawable(chart, chart.reference):
            # as data, first: plotext draws an hline over everything, and the baseline's own
            # markers sit on it
            ends = [0.5, len(positions) + 0.5]
            plt.plot(ends, [chart.reference] * 2, marker="─", color="gray")
        # each series a little to the side of the batch it belongs to (a dodge), so two series
        # with close values never share one character cell and hide a marker or a whisker
        step = min(0.12, 0.6 / max(len(names), 1))
        for i, name in enumerate(names):
            ys = chart.series[name]
            color, marker = style_of(name)
            errs = chart.errors.get(name) or [None] * len(ys)
            shift = (i - (len(names) - 1) / 2) * step
            points = [
                (x + shift, y, e)
                for x, y, e in zip(positions, ys, errs, strict=False)
                if y is not None and drawable(chart, y)
            ]
            if not points:
                continue
            # whiskers, then the line: every series' before any marker, so no line of a later
            # series paints over an earlier series' marker
            for x, _, bounds in points:
                self._whisker(chart, x, bounds, color)
            xs, vals = [p[0] for p in points], [p[1] for p in points]
            if len(points) > 1:
                plt.plot(xs, vals, marker="braille", color=color)
            drawn.append((xs, vals, color, marker))
        for xs, vals, rgb, mark in drawn:
            plt.scatter(xs, vals, marker=mark, color=rgb)
        plt.xlim(0.5, len(positions) + 0.5)  # whiskers at the ends stay inside the frame
        plt.xticks(positions, [str(x) for x in chart.xticks])
        plt.xlabel(chart.xlabel)

    def _whisker(
        self, chart: Chart, x: float, bounds: tuple[float, float] | None, color: object
    ) -> None:
        """One point's interval as a vertical line from its lower to its upper bound (plotext's
        ``error`` draws a symmetric one)."""
        drawn = whisker(chart, bounds)
        if drawn is not None and drawn[1] > drawn[0]:
            self.plt.plot([x, x], list(drawn), marker="│", color=color)

    def _bars(self, chart: Chart, names: list[str]) -> None:
        plt = self.plt
        named = [(n, chart.series[n][0]) for n in names if drawable(chart, chart.series[n][0])]
        if not named:
            return
        labels, vals = [n for n, _ in named], [v for _, v in named]
        colors = [style_of(n)[0] for n in labels]
        plt.bar(labels, vals, color=colors)
        for i, label in enumerate(labels, start=1):
            self._whisker(chart, float(i), (chart.errors.get(label) or [None])[0], "white")
        plt.xlabel(f"compiler ({chart.xlabel} {chart.xticks[0]})")
