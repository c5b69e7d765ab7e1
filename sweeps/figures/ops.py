"""The per-operator figure of a model: one stacked bar per compiler, operator classes stacked.

Each bar is as tall as the compiler's *timed* milliseconds per call (the trial the profile pass
followed, or the newest timed trial of the same point), so bars compare as the timed numbers do;
its segments split that height in the shares of the time its profiler recorded per operator
class (``Profile.by_class``). A compiler with no timed trial stands at its profiled latency,
hatched and starred in its label, so a bar never passes for a timed one. The kernel count per
inference is written over each bar (fusion shows as fewer kernels).

A bar more than ``OFF_SCALE`` times the tallest of the others (untuned TVM ran resnet18 b8 70x
slower than eager on the 2-core VM) would flatten every other bar to a line: the axis then ends
at ``CAP_OVER_REST`` times that tallest other bar, and the outlier is drawn at the axis top, its
segments in the same shares, broken by two slashes and labelled with its real latency and "off
scale", so no bar is read at a height it does not have.

Colours are the Okabe-Ito palette (colour-blind safe), one per class in every figure; the
legend and title stay inside the canvas (``figures_plot.text_outside_canvas`` checks it in the
tests). Headless and reproducible as every ngb figure (``figures_plot.save``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ngb.core.compilers.profiling import OP_CLASSES, Profile
from ngb.sweeps.figures.plot import FORMATS, require_matplotlib, save

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from ngb.sweeps.store.database import Store

#: Okabe & Ito (2008) colours, one per operator class; "other" takes their grey
CLASS_COLOURS = {
    "convolution": "#0072B2",
    "matmul/linear": "#E69F00",
    "attention": "#CC79A7",
    "normalisation": "#009E73",
    "activation/elementwise": "#F0E442",
    "pooling": "#56B4E9",
    "layout/copy": "#D55E00",
    "other": "#999999",
}
assert set(CLASS_COLOURS) == set(OP_CLASSES)

#: a bar this many times the tallest other bar is drawn off scale (see the module docstring)
OFF_SCALE = 4.0
#: where the axis ends then, over the tallest other bar
CAP_OVER_REST = 1.6


def axis_cap(heights: Sequence[float]) -> float | None:
    """The axis top when a bar is off scale, else None."""
    ordered = sorted((h for h in heights if h > 0), reverse=True)
    if len(ordered) < 2 or ordered[0] <= OFF_SCALE * ordered[1]:
        return None
    return CAP_OVER_REST * ordered[1]


def bar_segments(profile: Profile) -> tuple[float, bool, dict[str, float]]:
    """(bar height in ms, timed?, ms per class): the timed latency split in the recorded shares
    (the profiled latency where no timed one is known)."""
    timed = profile.timed_ms is not None and profile.timed_ms > 0
    height = profile.timed_ms if profile.timed_ms and timed else profile.profiled_ms
    recorded = profile.kernel_ms
    per_class = profile.by_class()
    scale = height / recorded if recorded > 0 else 0.0
    return height, timed, {cls: ms * scale for cls, ms in per_class.items()}


def draw(label: str, bars: Sequence[tuple[str, Profile]]) -> Figure:
    """One model's figure: a bar per (column name, profile)."""
    from matplotlib.figure import Figure

    width_in = max(4.5, 1.0 + 0.9 * len(bars)) + 2.2  # the legend's column on the right
    fig = Figure(figsize=(width_in, 3.6), layout="constrained")
    ax = fig.subplots()
    xs = list(range(len(bars)))
    names = []
    tops = []
    present = set()
    bottoms = [0.0] * len(bars)
    segments = [bar_segments(p) for _, p in bars]
    cap = axis_cap([height for height, _, _ in segments])
    # an off-scale bar is drawn at the axis top, its segments shrunk in proportion
    shrink = [cap / h if cap is not None and h > cap else 1.0 for h, _, _ in segments]
    for cls in OP_CLASSES:
        heights = [seg[cls] * k for (_, _, seg), k in zip(segments, shrink, strict=True)]
        if not any(h > 0 for h in heights):
            continue
        present.add(cls)
        hatches = [None if timed else "//" for _, timed, _ in segments]
        drawn = ax.bar(
            xs, heights, bottom=bottoms, color=CLASS_COLOURS[cls], edgecolor="white",
            linewidth=0.5, label=cls, width=0.65,
        )  # fmt: skip
        for patch, hatch in zip(drawn.patches, hatches, strict=True):
            if hatch:
                patch.set_hatch(hatch)
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    for (name, _p), (height, timed, _) in zip(bars, segments, strict=True):
        names.append(name if timed else f"{name}*")
        tops.append(height)
    for x, top, (_, p), k in zip(xs, tops, bars, shrink, strict=True):
        drawn_top = top * k
        if k < 1.0:  # the break: two slashes across the bar just under the axis top
            for dy in (0.90, 0.94):
                ax.plot([x - 0.36, x + 0.36], [drawn_top * (dy - 0.02), drawn_top * (dy + 0.02)],
                        color="black", linewidth=0.9, clip_on=False)  # fmt: skip
        ax.annotate(
            f"{top:.3g} ms{' (off scale)' if k < 1.0 else ''}\n{p.kernels_per_inference:.0f} k",
            (x, drawn_top), xytext=(0, 2), textcoords="offset points", ha="center",
            va="bottom", fontsize=7,
        )  # fmt: skip
    ax.set_xticks(xs, names, fontsize=8)
    ax.tick_params(axis="x", labelrotation=20 if len(bars) > 4 else 0)
    ax.tick_params(axis="y", labelsize=7)
    ax.set_ylabel("ms per call (timed)", fontsize=8)
    highest = cap if cap is not None else max(tops, default=1.0)
    ax.set_ylim(0, highest * 1.22 or 1.0)  # room for the labels over the bars
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title(label, fontsize=9, loc="left")
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(
        handles[::-1], labels[::-1], loc="outside right upper", fontsize=7, frameon=False,
        title="operator class", title_fontsize=7,
    )  # fmt: skip
    starred = not all(timed for _, timed, _ in segments)
    note = "bar = timed ms/call split in the profiler's shares; k = kernels per inference"
    if starred:
        note += "; * hatched: no timed trial, profiled latency"
    if cap is not None:
        note += "; // a bar off scale, drawn at the axis top in its shares"
    fig.supxlabel(note, fontsize=6)
    if not bars:
        ax.text(0.5, 0.5, "no profiles", ha="center", va="center", transform=ax.transAxes)
    return fig


def file_name(label: str) -> str:
    """``ops-resnet18-b8-localhost``: the group's label as a safe file name."""
    return "ops-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", label.replace(" on ", " ")).strip("-")


def write_figures(
    store: Store,
    out_dir: Path,
    run_id: str | None = None,
    device: str | None = None,
    formats: tuple[str, ...] = FORMATS,
    model: str | None = None,
) -> list[Path]:
    """A figure per model, batch and device with stored profiles; the paths written."""
    from ngb.sweeps.report.data import ReportData
    from ngb.sweeps.report.ops import by_model, column_names, load_with_timed

    require_matplotlib()
    data = ReportData(store, run_id=run_id, device=device)
    data.model = model
    stored, _ = load_with_timed(data)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for label, found in by_model(stored):
        names = column_names([pt for pt, _ in found])
        bars = list(zip(names, (p for _, p in found), strict=True))
        written += save(draw(label, bars), out_dir / file_name(label), formats)
    return written
