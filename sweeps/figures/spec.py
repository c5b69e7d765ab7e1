"""What a figure is before it is drawn: panels of lines, heatmaps or grouped bars.

The builders (``figures_series``) produce these plain objects from the store; the painter
(``figures_plot``) turns them into matplotlib figures. Keeping the two apart lets tests check the
numbers without drawing and lets the TUI or HTML report reuse either half.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ngb.sweeps.rows import TrialRow

ErrorBar = tuple[float, float] | None  # (below, above) the value


class FigureTrial(TrialRow, total=False):
    """A report trial with what the figures add to it (``figures_data.FigureData``)."""

    n_reps: int | None
    unstable: bool | None
    workers: int | None
    measure: Mapping[str, object]
    ngb_version: str | None
    ci_half: float | None
    ci_source: str


@dataclass
class Line:
    """One series; ``errs`` are (below, above) error bar lengths (None: no bar), ``weak`` marks
    points to draw hollow (not significantly different from the baseline, or a trial the stopping
    rule called INVALID)."""

    label: str
    xs: list[float]
    ys: list[float]
    errs: list[ErrorBar]
    weak: list[bool]
    colour_key: str = ""  # the compiler: one colour per compiler across every figure
    # per point: a ratio between results of different precisions (the reports' "≠prec")
    mismatch: list[bool] = field(default_factory=list)
    # per point: drawn inside a ring, a point the figure singles out (``FigureSpec.ring_label``)
    ringed: list[bool] = field(default_factory=list)
    dashed: bool = False  # a second series of the same compiler (the serving figure's p50)


@dataclass
class LinePanel:
    title: str
    lines: list[Line]
    xlabel: str
    ylabel: str
    logx: bool = False
    logy: bool = False
    reference: float | None = None  # a dashed horizontal line (1.0 for speed-up and BSR)
    xticklabels: list[str] | None = None  # categorical x axis (xs are 0..n-1)
    # a log x axis ticked at every x (batch sizes); False: 1-2-5 ticks (offered rates)
    tick_every_x: bool = True


@dataclass
class HeatPanel:
    title: str
    rows: list[str]
    cols: list[str]
    values: list[list[float | None]]
    label: str  # the colour bar's name
    centre: float | None = None  # diverging colours around this value (BSR: 1.0)
    # the printed text of each cell ("1.10 ± 0.05 n.s."), as the reports print it; None: value
    texts: list[list[str | None]] | None = None


@dataclass
class BarSeries:
    label: str
    values: list[float | None]
    errs: list[float | None]
    colour_key: str = ""
    # per bar: no effect (its interval includes the reference): drawn hatched and hollow
    weak: list[bool] = field(default_factory=list)


@dataclass
class BarPanel:
    title: str
    groups: list[str]
    series: list[BarSeries]
    ylabel: str
    reference: float | None = None
    # the axis spans at least +- this around the reference, so a tiny effect looks tiny
    min_span: float | None = None


Panel = LinePanel | HeatPanel | BarPanel


@dataclass
class FigureSpec:
    """A whole figure: its panels, what it shows (for the caption) and the trials behind it."""

    name: str
    title: str
    description: str
    panels: list[Panel] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    trials: list[FigureTrial] = field(default_factory=list)
    ring_label: str = "ringed: singled out"  # the legend's words for ``Line.ringed`` points
    # the caption's facts where the figure is not drawn from trials (the serving figure: its
    # runs, ``figures.serving``); None: ``figures.data.caption_facts`` of ``trials``
    facts: str | None = None
