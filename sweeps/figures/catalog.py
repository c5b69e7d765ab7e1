"""The paper's figures from the results database, as PNG / SVG / PDF files with captions.

Public API::

    list_figures() -> [(name, description)]
    build_figure(name, data) -> FigureSpec             # the numbers, nothing drawn
    caption(spec, data) -> str                          # what a paper's caption needs
    write_figures(data, out_dir, names=None, formats=FORMATS) -> [Written]
    save_figure(name, store, out_dir, run_id=None, device=None) -> [Path]   # one figure (TUI)

Each figure ``NAME`` is written as ``NAME.png``, ``NAME.svg``, ``NAME.pdf`` and
``NAME.caption.txt``. A figure without data (e.g. the depth figure for a sweep without stacked
blocks) is skipped with a reason, never drawn empty. ``data`` is a ``FigureData`` (filters:
run, device, model family, precision).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ngb.core.base.errors import ConfigError, UnknownNameError
from ngb.core.base.safe_files import write_atomic
from ngb.sweeps.figures import dlas_curves, series, serving
from ngb.sweeps.figures.data import FigureData, caption_facts
from ngb.sweeps.figures.plot import FORMATS
from ngb.sweeps.figures.spec import FigureSpec, HeatPanel

if TYPE_CHECKING:
    from ngb.sweeps.store.database import Store

# name -> (builder, one-line description); the paper's figure order.
FIGURES: dict[str, tuple[Callable[[FigureData], FigureSpec], str]] = {
    "fig01-reversals": (series.reversals, "Ranking-reversal pairs (Fig. 1)"),
    "fig05-throughput": (series.throughput, "Throughput vs batch per model and compiler (Fig. 5)"),
    "fig06-speedup-batch": (series.speedup_batch, "Speed-up over eager vs batch (Fig. 6)"),
    "fig07-speedup-depth": (series.speedup_depth, "Speed-up over eager vs block depth (Fig. 7)"),
    "fig08-ase-family": (series.ase_family, "ASE by family (Fig. 8)"),
    "fig09-bsr-family": (series.bsr_family, "BSR by family (Fig. 9)"),
    "fig10-ase-heatmap": (series.ase_heatmap, "ASE heatmaps, model/width x batch (Fig. 10)"),
    "fig11-block-bsr": (series.block_bsr, "BSR of the blocks, width x batch (Fig. 11)"),
    "fig12-cpu": (series.cpu_usage, "CPU usage and its reduction vs eager (Fig. 12)"),
    "fig13-energy": (series.energy, "Energy per sample vs batch, where a meter was read"),
    "fig14-serving-latency": (
        serving.latency_vs_load,
        "Latency under load: p99 [95 %] and p50 vs offered QPS per compiler (ngb serve --db)",
    ),
    dlas_curves.NAME: (
        dlas_curves.accuracy_curves,
        "Top-1 vs compression ratio per technique, elbows ringed (DLAS Fig. 3)",
    ),
}


@dataclass(frozen=True)
class Written:
    """One figure's outcome: the files written, or why there were none."""

    name: str
    paths: tuple[Path, ...] = ()
    skipped: str = ""


def list_figures() -> list[tuple[str, str]]:
    return [(name, description) for name, (_, description) in FIGURES.items()]


def resolve(names: Sequence[str] | None) -> list[str]:
    """Figure names in the paper's order; a prefix such as ``fig05`` is accepted."""
    if not names:
        return list(FIGURES)
    out = []
    for name in names:
        matches = [f for f in FIGURES if f == name or f.split("-", 1)[0] == name]
        if not matches:
            raise UnknownNameError("figure", name, list(FIGURES))
        out += [m for m in matches if m not in out]
    return [f for f in FIGURES if f in out]


def check_formats(formats: Sequence[str]) -> tuple[str, ...]:
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise ConfigError(
            f"unknown figure format {(bad or [''])[0]!r}; valid: {', '.join(FORMATS)}"
        )
    return tuple(dict.fromkeys(formats))


def build_figure(name: str, data: FigureData) -> FigureSpec:
    (name,) = resolve([name])
    builder, _ = FIGURES[name]
    return builder(data)


def caption(spec: FigureSpec, data: FigureData) -> str:
    """Title, what is shown, notes, then device / precision / repetitions / ngb version (or the
    facts of what the figure is drawn from, where that is not trials: ``FigureSpec.facts``)."""
    parts = [spec.title + ".", spec.description]
    parts += [note.rstrip(".") + "." for note in spec.notes]
    if spec.facts is not None:
        parts.append(spec.facts)
        return " ".join(parts)
    heat = bool(spec.panels) and all(isinstance(p, HeatPanel) for p in spec.panels)
    parts.append(caption_facts(data, spec.trials or data.trials(), heat=heat))
    return " ".join(parts)


def write_figures(
    data: FigureData,
    out_dir: str | Path,
    names: Sequence[str] | None = None,
    formats: Sequence[str] = FORMATS,
) -> list[Written]:
    """Build, draw and save the figures; see the module docstring."""
    from ngb.sweeps.figures.plot import draw, save

    formats = check_formats(formats)
    wanted = resolve(names)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for name in wanted:
        spec = build_figure(name, data)
        if not spec.panels:
            reason = "; ".join(spec.notes) or "no matching results"
            results.append(Written(name, skipped=reason))
            continue
        fig = draw(spec)
        paths = save(fig, out / name, formats)
        text_path = out / f"{name}.caption.txt"
        write_atomic(text_path, caption(spec, data) + "\n", what="caption")
        results.append(Written(name, (*paths, text_path)))
    return results


# The TUI Results screen's chart tabs and the figure each one corresponds to.
TUI_TABS = {
    "throughput": "fig05-throughput",
    "speedup": "fig06-speedup-batch",
    "bsr": "fig09-bsr-family",
    "ase": "fig10-ase-heatmap",
    "depth": "fig07-speedup-depth",
}


def save_figure(
    name: str,
    store: Store,
    out_dir: str | Path,
    *,
    run_id: str | None = None,
    device: str | None = None,
    family: str | None = None,
    formats: Sequence[str] = FORMATS,
) -> list[Path]:
    """Write one figure (a figure name or a TUI tab id) for a run; raises NgbError if empty."""
    figure = TUI_TABS.get(name, name)
    data = FigureData(store, run_id=run_id, device=device, family=family)
    (written,) = write_figures(data, out_dir, [figure], formats)
    if written.skipped:
        raise ConfigError(f"{figure}: nothing to draw ({written.skipped})")
    return list(written.paths)
