"""A plotext chart of one ``results_data.Chart``: a line per compiler with 95 % error bars, a
reference line where 1 means "as fast as eager", and bars when a series has a single point.

Batches and depths are drawn at evenly spaced positions labelled with their values: batch sizes
grow geometrically (1, 8, 32 ...), and even spacing keeps every point readable on a terminal. A
single batch would be one dot per compiler, so it is drawn as bars named by compiler instead.
The y axis goes logarithmic when the operator asks (``l`` on the Results screen).
"""

from __future__ import annotations

from ngb.tui.results_data import Chart
from textual_plotext import PlotextPlot


class ResultChart(PlotextPlot):
    DEFAULT_CSS = """
    ResultChart { height: 1fr; min-height: 10; }
    """

    def draw(self, chart: Chart) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        if chart.note:
            plt.title(f"{chart.title}: {chart.note}")
            self.refresh()
            return
        plt.title(chart.title if not chart.subtitle else f"{chart.title} | {chart.subtitle}")
        if chart.log_y:
            plt.yscale("log")
        if len(chart.xticks) == 1:
            self._bars(chart)
        else:
            self._lines(chart)
        if chart.reference is not None:
            plt.hline(chart.reference, "gray")
            if not chart.log_y:
                self._no_negative_axis(chart)
        plt.ylabel(chart.ylabel + (" (log)" if chart.log_y else ""))
        self.refresh()

    def _no_negative_axis(self, chart: Chart) -> None:
        """A ratio (speed-up, BSR) is never negative: a wide interval's bar stops at 0 rather
        than pulling the axis below it."""
        tops = [
            y + (h or 0.0)
            for name, ys in chart.series.items()
            for y, h in zip(ys, chart.errors.get(name) or [None] * len(ys), strict=False)
            if y is not None
        ]
        lows = [
            y - (h or 0.0)
            for name, ys in chart.series.items()
            for y, h in zip(ys, chart.errors.get(name) or [None] * len(ys), strict=False)
            if y is not None
        ]
        if tops and min(lows) < 0:
            self.plt.ylim(0, max(max(tops), (chart.reference or 0.0) * 1.05))

    def _lines(self, chart: Chart) -> None:
        plt = self.plt
        positions = [float(i) for i in range(1, len(chart.xticks) + 1)]
        for name, ys in chart.series.items():
            errs = chart.errors.get(name) or [None] * len(ys)
            points = [
                (x, y, e) for x, y, e in zip(positions, ys, errs, strict=False) if y is not None
            ]
            if not points:
                continue
            xs, vals, halves = (list(t) for t in zip(*points, strict=True))
            marker = "braille" if len(points) > 1 else "hd"
            plt.plot(xs, vals, label=name, marker=marker)
            if any(h is not None for h in halves):
                plt.error(xs, vals, yerr=[h or 0.0 for h in halves])
        plt.xticks(positions, [str(x) for x in chart.xticks])
        plt.xlabel(chart.xlabel)

    def _bars(self, chart: Chart) -> None:
        plt = self.plt
        named = [(n, ys[0]) for n, ys in chart.series.items() if ys and ys[0] is not None]
        if not named:
            return
        names, vals = [n for n, _ in named], [v for _, v in named]
        plt.bar(names, vals)
        halves = [(chart.errors.get(n) or [None])[0] for n in names]
        if any(h is not None for h in halves):
            plt.error(list(range(1, len(names) + 1)), vals, yerr=[h or 0.0 for h in halves])
        plt.xlabel(f"compiler ({chart.xlabel} {chart.xticks[0]})")
