"""Draw a ``FigureSpec`` with matplotlib and save it as PNG, SVG or PDF.

Headless by construction: figures are ``matplotlib.figure.Figure`` objects created without pyplot,
so no GUI backend is ever selected and nothing global (pyplot's figure list) is touched; saving
goes through the Agg/SVG/PDF canvases. Output is reproducible: SVG ids are salted with a fixed
string and the date metadata of SVG and PDF is left out, so the same data gives the same bytes.

Each compiler keeps one colour in every figure (its position in the compiler registry picks a
colour of the colour-blind-safe "tab10" cycle); hollow markers are weak points (see
``figures_series``).
"""

from __future__ import annotations

import importlib.util
import io
import math
import re
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from ngb.core.base.errors import NgbError
from ngb.core.base.safe_files import write_atomic
from ngb.sweeps.figures.spec import BarPanel, FigureSpec, HeatPanel, LinePanel, Panel
from ngb.sweeps.report.paper import compiler_order

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure
    from matplotlib.legend import Legend

FORMATS = ("png", "svg", "pdf")
PANEL_W, PANEL_H = 3.4, 2.7  # inches per panel
PNG_DPI = 150
MARKERS = "osD^vP*Xh<>"
LEGEND_ROW_IN = 0.2  # one row of the 8 pt legend


class _SaveOptions(TypedDict, total=False):
    dpi: int
    metadata: dict[str, str | None]  # None: leave the key out (no dates: reproducible files)


SAVE_OPTIONS: dict[str, _SaveOptions] = {
    "png": {"dpi": PNG_DPI, "metadata": {"Software": None}},
    "svg": {"metadata": {"Date": None}},
    "pdf": {"metadata": {"CreationDate": None}},
}


def _colour(key: str, index: int) -> str:
    """A compiler's colour (registry position); other keys take their index in the panel."""
    import matplotlib as mpl

    cycle = mpl.color_sequences["tab10"]
    if key:
        position, _ = compiler_order(key)
        return mpl.colors.to_hex(cycle[position % len(cycle)])
    return mpl.colors.to_hex(cycle[(index + 3) % len(cycle)])


def _grid(n: int, kind: type) -> tuple[int, int]:
    cols = 1 if n == 1 else 2 if (n in (2, 4) or kind is not LinePanel) else 3 if n <= 9 else 4
    return math.ceil(n / cols), cols


def require_matplotlib() -> None:
    """One clear line instead of a traceback where the workstation extra is not installed."""
    if importlib.util.find_spec("matplotlib") is None:
        raise NgbError(
            "figures need matplotlib, which is not installed here: `make setup` installs it "
            "(or pip install 'ngb[workstation]'); --no-figures leaves them out of an HTML report"
        )


def draw(spec: FigureSpec) -> Figure:
    """The matplotlib ``Figure`` of a spec with at least one panel."""
    require_matplotlib()
    from matplotlib.figure import Figure

    if not spec.panels:
        raise ValueError(f"{spec.name}: nothing to draw")
    kind = type(spec.panels[0])
    rows, cols = _grid(len(spec.panels), kind)
    scale = 1.3 if kind is HeatPanel else 1.15 if kind is BarPanel else 1.0
    fig = Figure(
        figsize=(PANEL_W * cols * scale, PANEL_H * rows * scale + 0.9), layout="constrained"
    )
    axes = fig.subplots(rows, cols, squeeze=False)
    handles: dict[str, Artist] = {}
    # one colour scale for every heatmap of a figure, so panels compare at a glance
    shared = [float(v) for p in spec.panels if isinstance(p, HeatPanel) for row in _shades(p)
              for v in row if v is not None and math.isfinite(v)]  # fmt: skip
    for index, ax in enumerate(axes.flat):
        if index >= len(spec.panels):
            ax.set_axis_off()
            continue
        panel = spec.panels[index]
        if isinstance(panel, LinePanel):
            _lines(ax, panel, handles)
        elif isinstance(panel, HeatPanel):
            _heat(fig, ax, panel, shared)
        else:
            _bars(ax, panel, handles)
    fig.suptitle(spec.title, fontsize=11)
    if any(m for p in spec.panels if isinstance(p, LinePanel) for ln in p.lines for m in ln.ringed):
        from matplotlib.lines import Line2D

        handles[spec.ring_label] = Line2D(
            [], [], marker="o", linestyle="none", markerfacecolor="none", color="black",
            markersize=9,
        )  # fmt: skip
    if handles:
        weak = any(
            w for p in spec.panels if isinstance(p, LinePanel) for ln in p.lines for w in ln.weak
        )
        from matplotlib.lines import Line2D

        if weak:
            handles["hollow: n.s. / INVALID"] = Line2D(
                [], [], marker="o", linestyle="none", markerfacecolor="white", color="0.3"
            )
        lines = [ln for p in spec.panels if isinstance(p, LinePanel) for ln in p.lines]
        if any(m for ln in lines for m in ln.mismatch):
            handles["× ≠prec: precisions differ"] = Line2D(
                [], [], marker="x", linestyle="none", color="black"
            )
        bars = [s for p in spec.panels if isinstance(p, BarPanel) for s in p.series]
        if any(w for b in bars for w in b.weak):
            from matplotlib.patches import Patch

            handles["hatched: n.s. (interval includes 0)"] = Patch(
                facecolor="white", edgecolor="0.3", hatch="///"
            )
        _fit_texts(fig, handles)
    else:
        _fit_texts(fig, {})
    return fig


def _legend(fig: Figure, handles: dict[str, Artist], columns: int) -> Legend:
    return fig.legend(
        list(handles.values()),
        list(handles),
        loc="outside lower center",
        ncols=columns,
        fontsize=8,
        frameon=False,
    )


def _wrapped(text: str, have: float, need: float) -> str:
    """``text`` rewrapped so its widest line, ``need`` wide now, takes about ``have``."""
    longest = max(len(line) for line in text.splitlines())
    chars = max(8, int(longest * have / need * 0.92))
    return textwrap.fill(" ".join(text.split()), chars, break_long_words=False)


def _fit_texts(fig: Figure, handles: dict[str, Artist]) -> None:
    """Wrap titles wider than their space and give the legend fewer columns until each fits the
    canvas: the figure keeps the size a paper column expects, and nothing is cut at its edges.
    Measured with the renderer after the layout, so long compiler names or a long title of a
    one-panel figure are handled whatever the font.

    The layout it ends on is then frozen (layout engine "none"): constrained layout would
    otherwise run again at every ``savefig``, three formats after the fitting passes, for the
    same boxes (it works in figure fractions: laid out again at the PNG's dpi, a box moves by a
    pixel or two); that was a quarter of the time ``ngb figures`` took."""
    width = fig.bbox.width * 0.98
    base_height = fig.get_figheight()  # room for one legend row is in it (see draw)
    columns = min(len(handles), 5)
    legend = _legend(fig, handles, columns) if handles else None
    for _ in range(3):  # each pass sizes what sticks out from its measured width: one usually does
        fig.draw_without_rendering()
        renderer = fig._get_renderer()  # type: ignore[attr-defined]  # noqa: SLF001
        changed = False
        for title in fig.texts:  # the suptitle (draw makes no other figure text)
            need = title.get_window_extent(renderer).width
            if need > width:
                title.set_text(_wrapped(title.get_text(), width, need))
                changed = True
        for ax in fig.axes:
            need = ax.title.get_window_extent(renderer).width
            have = min(ax.bbox.width * 1.1, width)  # a title may reach a little over its axes
            if ax.get_title() and need > have:
                ax.set_title(_wrapped(ax.get_title(), have, need))
                changed = True
        if legend is not None and columns > 1:
            need = legend.get_window_extent(renderer).width
            if need > width:
                columns = max(1, min(columns - 1, int(columns * width / need)))
                legend.remove()  # its box is laid out when made: a new one with fewer columns
                legend = _legend(fig, handles, columns)
                # the rows it gains are added to the canvas, not taken from the panels
                rows = math.ceil(len(handles) / columns) - 1
                fig.set_figheight(base_height + rows * LEGEND_ROW_IN)
                changed = True
        if not changed:
            break
    else:  # the last pass changed something: lay that out before freezing it
        fig.draw_without_rendering()
    fig.set_layout_engine("none")


def _lines(ax: Axes, panel: LinePanel, handles: dict[str, Artist]) -> None:
    for i, line in enumerate(panel.lines):
        colour = _colour(line.colour_key, i)
        marker = MARKERS[(compiler_order(line.colour_key)[0] if line.colour_key else i) % 11]
        below = [e[0] if e is not None else 0.0 for e in line.errs]
        above = [e[1] if e is not None else 0.0 for e in line.errs]
        # an interval reaching zero cannot be drawn on a log axis: cut it there, with an arrow
        cut = [panel.logy and b >= y for b, y in zip(below, line.ys, strict=True)]
        below = [y * 0.9 if c else b for b, y, c in zip(below, line.ys, cut, strict=True)]
        has_err = any(e is not None and max(e) > 0 for e in line.errs)
        (drawn,) = ax.plot(
            line.xs,
            line.ys,
            color=colour,
            marker=marker,
            markersize=4.5,
            linewidth=1.3,
            linestyle="--" if line.dashed else "-",
            label=line.label,
        )
        if has_err:
            ax.errorbar(
                line.xs,
                line.ys,
                yerr=[below, above],
                fmt="none",
                ecolor=colour,
                elinewidth=0.9,
                capsize=2.5,
            )
        if any(cut):
            ax.plot(
                [x for x, c in zip(line.xs, cut, strict=True) if c],
                [y * 0.1 for y, c in zip(line.ys, cut, strict=True) if c],
                linestyle="none",
                marker="v",
                markersize=4,
                color=colour,
            )
        # the elbow's ring (DLAS Fig. 3), and the reports' "≠prec" (a ratio that includes the
        # number format) as a cross: black marks over the points they flag
        _mark(ax, line.xs, line.ys, line.ringed, marker="o", markersize=11,
              markerfacecolor="none", markeredgewidth=1.4)  # fmt: skip
        _mark(ax, line.xs, line.ys, line.mismatch, marker="x", markersize=7)
        hollow = [(x, y) for x, y, w in zip(line.xs, line.ys, line.weak, strict=True) if w]
        if hollow:
            ax.plot(
                [p[0] for p in hollow],
                [p[1] for p in hollow],
                linestyle="none",
                marker=marker,
                markersize=4.5,
                markerfacecolor="white",
                color=colour,
            )
        # Lines keyed by compiler share one legend entry; per-panel labels (models in Fig. 1)
        # are labelled inside the panel instead.
        if line.colour_key:
            handles.setdefault(line.label, drawn)
    if not any(ln.colour_key for ln in panel.lines):
        ax.legend(fontsize=7, frameon=False)
    if panel.reference is not None:
        ax.axhline(panel.reference, color="0.5", linestyle="--", linewidth=0.8)
    if panel.logx and not panel.tick_every_x:
        from matplotlib import ticker

        ax.set_xscale("log")
        ax.xaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    elif panel.logx:
        ax.set_xscale("log", base=2)
        xs = sorted({x for ln in panel.lines for x in ln.xs})
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.minorticks_off()
    elif panel.xticklabels is not None:
        ax.set_xticks(range(len(panel.xticklabels)), panel.xticklabels)
        ax.set_xlim(-0.3, len(panel.xticklabels) - 0.7)
    else:
        xs = sorted({x for ln in panel.lines for x in ln.xs})
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
    if panel.logy:
        from matplotlib import ticker

        ax.set_yscale("log")
        # 1-2-5 ticks printed as plain numbers: a ratio axis reads "0.5 1 2", not "10^0"
        ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_title(panel.title, fontsize=9)
    ax.set_xlabel(panel.xlabel, fontsize=8)
    ax.set_ylabel(panel.ylabel, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, which="major", linewidth=0.4, alpha=0.5)


def _heat(fig: Figure, ax: Axes, panel: HeatPanel, shared: list[float]) -> None:
    import numpy as np
    from matplotlib import ticker
    from matplotlib.colors import LogNorm, Normalize

    grid = np.array([[math.nan if v is None else float(v) for v in row] for row in panel.values])
    shades = np.array(
        [[math.nan if v is None else float(v) for v in row] for row in _shades(panel)]
    )
    finite = np.array(shared)
    if panel.centre is not None:
        # a ratio: log colours symmetric around the centre, so 0.5 and 2 are equally strong
        spread = panel.centre * 1.1
        if finite.size:
            spread = max(spread, float(finite.max()), panel.centre**2 / float(finite.min()))
        norm: Normalize = LogNorm(panel.centre**2 / spread, spread)
        cmap = "RdBu_r"
    else:
        norm = Normalize(0.0, max(1.0, float(finite.max()) if finite.size else 1.0))
        cmap = "viridis"
    image = ax.imshow(np.ma.masked_invalid(shades), cmap=cmap, norm=norm, aspect="auto")
    ax.set_xticks(range(len(panel.cols)), panel.cols)
    ax.set_yticks(range(len(panel.rows)), panel.rows)
    for (r, c), value in np.ndenumerate(grid):
        if math.isfinite(value):
            shade = norm(shades[r, c])
            dark = (shade > 0.25 and shade < 0.75) if panel.centre is not None else shade > 0.55
            text = panel.texts[r][c] if panel.texts is not None else None
            ax.text(
                c,
                r,
                (text or f"{value:.2f}").replace(" [", "\n[", 1),
                ha="center",
                va="center",
                fontsize=7,
                color="black" if dark else "white",
            )
    ax.set_title(panel.title, fontsize=9)
    ax.tick_params(labelsize=7)
    bar = fig.colorbar(image, ax=ax, shrink=0.85)
    if panel.centre is not None:
        bar.ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        bar.ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        bar.ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    bar.set_label(panel.label, fontsize=8)
    bar.ax.tick_params(labelsize=7)


def _shades(panel: HeatPanel) -> list[list[float | None]]:
    """The values the cells are coloured by: a cell the reports call n.s. (its interval includes
    the centre: no effect shown) takes the centre's neutral colour, whatever its mean; a deep red
    for "10 [1, 100] n.s." would show an effect the data do not."""
    if panel.centre is None or panel.texts is None:
        return panel.values
    return [
        [
            panel.centre if v is not None and "n.s." in (t or "") else v
            for v, t in zip(vs, ts, strict=True)
        ]
        for vs, ts in zip(panel.values, panel.texts, strict=True)
    ]


def _bars(ax: Axes, panel: BarPanel, handles: dict[str, Artist]) -> None:
    n = max(len(panel.series), 1)
    width = 0.8 / n
    for i, series in enumerate(panel.series):
        xs = [g + (i - (n - 1) / 2) * width for g in range(len(panel.groups))]
        ys = [v if v is not None else math.nan for v in series.values]
        errs = [e if e is not None else 0.0 for e in series.errs]
        colour = _colour(series.colour_key, i)
        drawn = ax.bar(
            xs,
            ys,
            width,
            yerr=errs,
            capsize=2,
            color=colour,
            error_kw={"elinewidth": 0.8},
            label=series.label,
        )
        for patch, weak in zip(drawn.patches, series.weak, strict=False):
            if weak:  # no effect: an outline, not a solid bar
                patch.set_facecolor("white")
                patch.set_edgecolor(colour)
                patch.set_hatch("///")
        if drawn.patches:  # the legend draws a bar series as its first bar (matplotlib's
            handles.setdefault(series.label, drawn.patches[0])  # BarContainer handler does too)
    if panel.reference is not None:
        ax.axhline(panel.reference, color="0.5", linewidth=0.8)
        if panel.min_span is not None:
            low, high = ax.get_ylim()
            ref, span = panel.reference, panel.min_span
            ax.set_ylim(min(low, ref - span), max(high, ref + span))
    ax.set_xticks(range(len(panel.groups)), panel.groups)
    ax.set_title(panel.title, fontsize=9)
    ax.set_ylabel(panel.ylabel, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, axis="y", linewidth=0.4, alpha=0.5)


def _texts(fig: Figure) -> list[tuple[str, Artist]]:
    """The figure's titles and legends, named for a message."""
    found: list[tuple[str, Artist]] = []
    # the figure's own texts: its title (``suptitle`` is one of them) and any note
    found += [(f"title {t.get_text()!r}", t) for t in fig.texts if t.get_text()]
    found += [(f"figure legend {i + 1}", legend) for i, legend in enumerate(fig.legends)]
    for ax in fig.axes:
        if ax.get_title():
            found.append((f"panel title {ax.get_title()!r}", ax.title))
        legend = ax.get_legend()
        if legend is not None:
            found.append((f"legend of {ax.get_title()!r}", legend))
        for label in (ax.xaxis.label, ax.yaxis.label):
            if label.get_text():
                found.append((f"axis label {label.get_text()!r}", label))
    return found


def text_outside_canvas(fig: Figure, slack_px: float = 0.5) -> list[str]:
    """What sticks out of the canvas once laid out and drawn (empty: everything is inside):
    the renderer's own extent of each title, legend and axis label against the figure's box."""
    fig.draw_without_rendering()  # runs the constrained layout with a real renderer
    renderer = fig._get_renderer()  # type: ignore[attr-defined]  # noqa: SLF001
    box = fig.bbox
    out = []
    for what, artist in _texts(fig):
        ext = artist.get_window_extent(renderer)
        if (
            ext.x0 < box.x0 - slack_px
            or ext.x1 > box.x1 + slack_px
            or ext.y0 < box.y0 - slack_px
            or ext.y1 > box.y1 + slack_px
        ):
            out.append(f"{what}: {ext.x0:.0f}..{ext.x1:.0f} x {ext.y0:.0f}..{ext.y1:.0f} px")
    return out


def _stable_ids(svg: str) -> str:
    """Renumber matplotlib's hashed SVG ids in order of appearance.

    Clip-path ids hash ``id()`` of Python objects, which differ from process to process even with
    ``svg.hashsalt`` set; renumbered, the same data gives the same file (no churn in a repository).
    """
    mapping: dict[str, str] = {}
    for found in re.finditer(r'id="([a-z][0-9a-f]{10})"', svg):
        mapping.setdefault(found.group(1), f"ngb{len(mapping) + 1}")
    if not mapping:
        return svg
    pattern = re.compile("|".join(re.escape(k) for k in mapping))
    return pattern.sub(lambda m: mapping[m.group(0)], svg)


def svg_text(fig: Figure) -> str:
    """The figure as an SVG document (reproducible ids; for files and the HTML report)."""
    import matplotlib as mpl

    buffer = io.StringIO()
    with mpl.rc_context({"svg.hashsalt": "ngb"}):
        fig.savefig(buffer, format="svg", **SAVE_OPTIONS["svg"])
    return _stable_ids(buffer.getvalue())


def _saver(fig: Figure, fmt: str) -> Callable[[Path], None]:
    def write(tmp: Path) -> None:
        fig.savefig(tmp, format=fmt, **SAVE_OPTIONS[fmt])

    return write


def save(fig: Figure, base: Path, formats: tuple[str, ...] = FORMATS) -> list[Path]:
    """Write ``base.<fmt>`` for each format; returns the paths written."""
    written = []
    for fmt in formats:
        path = base.with_name(f"{base.name}.{fmt}")
        # Atomic and refusing devices/FIFOs where a figure file should go (core.safe_files).
        if fmt == "svg":
            write_atomic(path, svg_text(fig), what="figure")
        else:
            write_atomic(path, _saver(fig, fmt), what="figure")
        written.append(path)
    return written


__all__ = ["FORMATS", "Panel", "draw", "save", "svg_text", "text_outside_canvas"]


def _mark(
    ax: Axes, xs: Sequence[float], ys: Sequence[float], flags: Sequence[bool], **style: Any
) -> None:
    """Black markers, no line, over the points whose flag is set (none: nothing drawn)."""
    points = [(x, y) for x, y, m in zip(xs, ys, flags, strict=False) if m]
    if points:
        ax.plot([p[0] for p in points], [p[1] for p in points], linestyle="none",
                color="black", **style)  # fmt: skip
