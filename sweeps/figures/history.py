"""The history figure: each series' throughput over runs with its 95 % intervals, the segment
levels between change points, and each change point marked and labelled with its size.

Headless as ``figures_plot`` (a ``Figure`` without pyplot) and saved through its ``save``
(atomic, reproducible SVG). The x axis is the run's position in the series, not the date: runs
come in bursts, and equal spacing keeps a burst's intervals apart; the run ids label the ticks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ngb.sweeps.figures.plot import FORMATS, save
from ngb.sweeps.report.history import Series

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MAX_PANELS = 8  # one panel per series; more would be unreadable in one file
PANEL_W, PANEL_H = 7.0, 2.6


def draw(series: Sequence[Series]) -> Figure:
    from matplotlib.figure import Figure

    shown = list(series)[:MAX_PANELS]
    fig = Figure(figsize=(PANEL_W, PANEL_H * max(len(shown), 1)), layout="constrained")
    axes = fig.subplots(max(len(shown), 1), 1, squeeze=False)[:, 0]
    for ax, s in zip(axes, shown, strict=False):
        xs = list(range(len(s.entries)))
        ys = [e.throughput.value for e in s.entries]
        low = [e.throughput.low for e in s.entries]
        high = [e.throughput.high for e in s.entries]
        err = [
            [y - lo if lo is not None else 0.0 for y, lo in zip(ys, low, strict=True)],
            [hi - y if hi is not None else 0.0 for y, hi in zip(ys, high, strict=True)],
        ]
        ax.errorbar(xs, ys, yerr=err, fmt="o", ms=3, color="#0072B2", ecolor="#56B4E9", capsize=2)
        index = {e.run_id: i for i, e in enumerate(s.entries)}
        bounds = [0, *(index[c.run_id] for c in s.changes), len(xs)]
        levels = [s.changes[0].at.before] if s.changes else []
        levels += [c.at.after for c in s.changes]
        for (start, end), level in zip(zip(bounds, bounds[1:], strict=False), levels, strict=False):
            ax.hlines(level, start - 0.4, end - 0.6, colors="#D55E00", linewidth=1.5)
        for c in s.changes:
            x = index[c.run_id] - 0.5
            ax.axvline(x, color="#D55E00", linestyle="--", linewidth=1)
            ax.annotate(
                f"{c.percent:+.1f} %",
                (x, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(3, -10),
                textcoords="offset points",
                color="#D55E00",
                fontsize=8,
            )
        ax.set_title(s.label, fontsize=9, loc="left")
        ax.set_ylabel("samples/s", fontsize=8)
        finite = [v for v in ys if math.isfinite(v)]
        if finite:
            ax.set_ylim(bottom=0 if min(finite) < 0.2 * max(finite) else None)
        step = max(1, len(xs) // 12)
        ax.set_xticks(xs[::step], [s.entries[i].run_id[-10:] for i in xs[::step]], fontsize=6)
        ax.tick_params(axis="x", labelrotation=45)
        ax.tick_params(axis="y", labelsize=7)
    if not shown:
        axes[0].text(0.5, 0.5, "no results", ha="center", va="center")
    return fig


def write(series: Sequence[Series], base: Path, formats: tuple[str, ...] = FORMATS) -> list[Path]:
    """``base.png`` etc. for the series (the first ``MAX_PANELS``)."""
    return save(draw(series), base, formats)
