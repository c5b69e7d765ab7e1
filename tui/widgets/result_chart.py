"""A plotext chart of one ``results_data.Chart`` (lines per compiler, or an ASE heatmap).

Batches and depths are drawn at evenly spaced positions labelled with their values: batch sizes
grow geometrically (1, 8, 32 ...), and even spacing keeps every point readable on a terminal.
"""

from __future__ import annotations

from ngb.tui.results_data import Chart
from textual_plotext import PlotextPlot


class ResultChart(PlotextPlot):
    DEFAULT_CSS = """
    ResultChart { height: 1fr; min-height: 12; }
    """

    def draw(self, chart: Chart) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        title = chart.title if not chart.subtitle else f"{chart.title} | {chart.subtitle}"
        if chart.note:
            plt.title(f"{chart.title}: {chart.note}")
            self.refresh()
            return
        plt.title(title)
        positions = [float(i) for i in range(1, len(chart.xticks) + 1)]
        labels = [str(x) for x in chart.xticks]
        if chart.matrix is not None:
            plt.matrix_plot(chart.matrix)
            plt.xticks(positions, labels)
            plt.yticks(list(range(1, len(chart.row_labels) + 1)), chart.row_labels)
        else:
            for name, ys in chart.series.items():
                points = [(x, y) for x, y in zip(positions, ys, strict=False) if y is not None]
                if points:
                    xs, vals = zip(*points, strict=False)
                    plt.plot(list(xs), list(vals), label=name, marker="braille")
            plt.xticks(positions, labels)
            plt.ylabel(chart.ylabel)
        plt.xlabel(chart.xlabel)
        self.refresh()
