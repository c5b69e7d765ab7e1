"""What an author pastes into a paper: every LaTeX table compiled with pdflatex on a two-column
IEEE page, and every figure drawn with its legend and titles inside the canvas.

The data is test_figures' fixed dataset (a real DuckDB file). pdflatex comes from Debian's
texlive-latex-base and texlive-latex-recommended (booktabs), which scripts/setup.sh installs; where
it is missing the compile test skips, except in CI (``CI`` set), where a skip would hide a failure.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from ngb.sweeps.cli import cli
from ngb.sweeps.figures.catalog import FIGURES, build_figure
from ngb.sweeps.figures.data import FigureData
from ngb.sweeps.report.latex import escape, inline
from ngb.sweeps.store.database import Store

from tests.cli_helpers import scaled
from tests.test_figures import _build_store

# IEEEtran's two-column page: 516 pt of text, two 252 pt columns (letter paper, 10 pt type).
PAPER = r"""\documentclass[10pt,twocolumn]{article}
\usepackage[letterpaper,textwidth=516pt,columnsep=12pt,textheight=682pt]{geometry}
\usepackage{booktabs,graphicx}
\begin{document}
\input{tables}
\end{document}
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return _build_store(tmp_path_factory.mktemp("paper") / "results.duckdb")


def _latex_all(store: Store) -> str:
    out = CliRunner().invoke(
        cli, ["report", "all", "--format", "latex", "--db", str(store.path), "--run", "r1"]
    )
    assert out.exit_code == 0, out.output
    return out.output


def _pdflatex() -> str:
    found = shutil.which("pdflatex")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("pdflatex missing in CI: scripts/setup.sh installs texlive-latex-*")
        pytest.skip("pdflatex not installed (scripts/setup.sh installs texlive-latex-recommended)")
    return found


def test_every_latex_table_compiles_within_a_two_column_ieee_page(
    store: Store, tmp_path: Path
) -> None:
    pdflatex = _pdflatex()
    (tmp_path / "tables.tex").write_text(_latex_all(store))
    (tmp_path / "paper.tex").write_text(PAPER)
    done = subprocess.run(
        [pdflatex, "-interaction=nonstopmode", "-halt-on-error", "paper.tex"],
        cwd=tmp_path, capture_output=True, text=True, timeout=scaled(120), check=False,
    )  # fmt: skip
    log = (tmp_path / "paper.log").read_text(errors="replace")
    assert done.returncode == 0, log[-3000:]
    over = [float(x) for x in re.findall(r"Overfull \\hbox \(([\d.]+)pt too wide\)", log)]
    assert [x for x in over if x > 1.0] == [], log
    assert "Missing character" not in log
    assert (tmp_path / "paper.pdf").stat().st_size > 5000


def test_latex_typesetting_of_code_quotes_minus_and_captions(store: Store) -> None:
    # `--precision fp32` in typewriter with its two hyphens kept apart (no en-dash, no ‘ quotes)
    assert inline("use `--precision fp32` here") == r"use \texttt{-{}-{}precision fp32} here"
    assert inline("`ngb report bsr`") == r"\texttt{ngb report bsr}"
    assert escape('the "fast" path --no-figures') == r"the ``fast'' path -{}-no-figures"
    # a minus sign in maths, a rounded negative zero without its sign, hyphens in words kept
    assert escape("-1.25 [-3.5, 0.2] -0.000 -0 b2-4 compile-times") == (
        r"$-$1.25 [$-$3.5, 0.2] 0.000 0 b2-4 compile-times"
    )
    assert escape("a_b & 5 % ± {x}") == r"a\_b \& 5 \% $\pm$ \{x\}"
    text = _latex_all(store)
    # one number per caption: LaTeX's; the paper's own numbering is a comment
    captions = re.findall(r"\\caption\{(.*)\}", text)
    assert captions and not [c for c in captions if re.match(r"Tables? [IVX]", c)]
    assert "% the paper's Table III" in text and r"\caption{Compile time (s)}" in text
    assert "% the paper's Tables VII/VIII" in text
    body = "\n".join(ln for ln in text.splitlines() if not ln.startswith("%"))
    assert "`" not in body.replace("``", "") and "--" not in body.replace("---", "")
    assert not re.search(r"(?<![\w.\]])-\d", body)  # every minus sign is $-$


# ---------------------------------------------------------------- figures


@pytest.mark.parametrize("name", list(FIGURES))
def test_every_figure_keeps_its_legends_and_titles_inside_the_canvas(
    store: Store, name: str
) -> None:
    from ngb.sweeps.figures.plot import draw, text_outside_canvas

    spec = build_figure(name, FigureData(store, run_id="r1"))
    if not spec.panels:
        pytest.skip(f"{name}: no data in the fixture ({'; '.join(spec.notes)})")
    fig = draw(spec)
    assert text_outside_canvas(fig) == []
    titled = [a for a in fig.axes if a.get_title()]
    assert fig.get_suptitle() and titled  # the check had something to look at


def test_the_canvas_check_sees_a_legend_cut_at_the_edge(store: Store) -> None:
    """The check itself: a legend far wider than its figure is reported, entry by entry."""
    from ngb.sweeps.figures.plot import draw, text_outside_canvas

    fig = draw(build_figure("fig09-bsr-family", FigureData(store, run_id="r1")))
    fig.legend(["x" * 400], loc="lower center")
    assert any("legend" in what for what in text_outside_canvas(fig))


@pytest.mark.parametrize(("kind", "panels"), [("line", 1), ("line", 3), ("bar", 2), ("heat", 1)])
def test_a_crowded_figure_keeps_its_legend_and_title_inside(kind: str, panels: int) -> None:
    """Every compiler of the registry at two precisions, hollow, crossed and hatched marks, and
    the longest titles ngb writes, at the sizes ``draw`` picks for 1 to 3 panels."""
    from ngb.core.compilers import list_compilers
    from ngb.sweeps.figures.plot import draw, text_outside_canvas
    from ngb.sweeps.figures.spec import BarPanel, BarSeries, FigureSpec, HeatPanel, Line, LinePanel

    names = [f"{c} {p}" for c in list_compilers(include_internal=True) for p in ("fp32", "bf16")]
    title = "Fig. 8: average scaling efficiency (ASE) by family, a long scope [dev1, cpu]"
    spec = FigureSpec("crowded", title, "")
    for i in range(panels):
        scope = f"transformer-family models on device number {i} [dev1, cpu, int8]"
        if kind == "line":
            lines = [
                Line(n, [1, 2, 4], [1.0, 1.1 + j / 10, 0.9], [None, (0.1, 0.1), None],
                     [False, True, False], n, [False, False, True])
                for j, n in enumerate(names)
            ]  # fmt: skip
            spec.panels.append(LinePanel(scope, lines, "batch", "ASE", logx=True))
        elif kind == "bar":
            series = [BarSeries(n, [1.2, 0.8], [0.1, 0.5], n, [False, True]) for n in names]
            spec.panels.append(BarPanel(scope, ["resnet", "vit"], series, "BSR", 1.0))
        else:
            rows = [f"deit3_small_patch16_224 {j}" for j in range(4)]
            values: list[list[float | None]] = [[1.0, 0.5, 2.0], [1.1, None, 0.9]] * 2
            texts = [[f"{v} [0.5, 2.1] n.s." if v else None for v in r] for r in values]
            spec.panels.append(HeatPanel(scope, rows, ["b1", "b4", "b16"], values, "BSR", 1.0,
                                         texts))  # fmt: skip
    assert text_outside_canvas(draw(spec)) == []


def test_a_heatmap_cell_without_an_effect_takes_the_neutral_colour() -> None:
    """Fig. 11: "10 [1, 100] n.s." is white (the centre), not the deepest red of the scale."""
    from matplotlib.image import AxesImage
    from ngb.sweeps.figures.plot import draw
    from ngb.sweeps.figures.spec import FigureSpec, HeatPanel

    values: list[list[float | None]] = [[10.0, 1.2], [0.8, None]]
    texts: list[list[str | None]] = [["10 [1, 100] n.s.", "1.2 [1.1, 1.3]"],
                                     ["0.8 [0.7, 0.9]", None]]  # fmt: skip
    spec = FigureSpec("heat", "BSR", "", [HeatPanel("conv", ["w16", "w32"], ["b1", "b8"], values,
                                                    "BSR", 1.0, texts)])  # fmt: skip
    fig = draw(spec)
    (image,) = [a for a in fig.axes[0].get_children() if isinstance(a, AxesImage)]
    shades = image.get_array()
    assert shades[0][0] == 1.0 and shades[0][1] == 1.2 and shades[1][0] == 0.8
    low, high = image.norm.vmin, image.norm.vmax
    assert high < 2 and low > 0.5  # the scale spans the effects shown, not the n.s. mean
