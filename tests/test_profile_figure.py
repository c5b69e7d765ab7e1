"""The per-operator figure (issue 34): a stacked bar per compiler scaled to its timed latency,
operator classes in Okabe-Ito colours, legend and title inside the canvas; `ngb report ops
--figure DIR` writes one per model."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from ngb.sweeps.cli import cli
from ngb.sweeps.figures.ops import CLASS_COLOURS, axis_cap, bar_segments, draw, file_name
from ngb.sweeps.figures.plot import text_outside_canvas
from ngb.sweeps.store.database import Store
from ngb.tui import ops_view

from tests.test_tui_ops import filled, profile


def test_a_bar_is_the_timed_latency_split_in_the_recorded_shares() -> None:
    p = profile("identity", 1)
    p.timed_ms = 2.0
    height, timed, per_class = bar_segments(p)
    assert timed and height == 2.0 and sum(per_class.values()) == pytest.approx(2.0)
    shares = p.by_class()
    assert per_class["convolution"] / 2.0 == pytest.approx(shares["convolution"] / p.kernel_ms)
    p.timed_ms = None  # no timed trial: the profiled latency, said so in the figure
    height, timed, _ = bar_segments(p)
    assert not timed and height == p.profiled_ms


def test_the_figure_keeps_its_text_inside_and_uses_okabe_ito(tmp_path: Path) -> None:
    stored = ops_view.load(Store(filled(tmp_path / "r.duckdb")), "ops-snap", None)
    bars = [(pt.compiler, p) for pt, p in stored if pt.batch == 8]
    fig = draw("conv w16 b8 on localhost", bars)
    assert text_outside_canvas(fig) == []
    ax = fig.axes[0]
    from matplotlib.colors import to_hex

    colours = {c.get_label(): to_hex(c.patches[0].get_facecolor()) for c in ax.containers}
    assert "convolution" in colours
    assert all(CLASS_COLOURS[cls] == colour.upper() for cls, colour in colours.items())
    tops = [
        max(r.get_y() + r.get_height() for r in bar) for bar in zip(*ax.containers, strict=True)
    ]
    assert tops == pytest.approx([p.timed_ms for _, p in bars])  # scaled to the timed latency
    # crowded: eight columns with long names still fit
    many = [(f"compiler-{i} fp32 prune-l1-0.5", p) for i, (_, p) in enumerate(bars * 3)][:8]
    assert text_outside_canvas(draw("resnet50 b32 on a-long-device-name", many)) == []


def test_an_outlier_bar_is_drawn_off_scale_and_the_others_stay_readable(tmp_path: Path) -> None:
    """Untuned TVM ran resnet18 b8 at 14,200 ms where eager ran 324 ms (2-core VM, 2026-11-27):
    on one linear axis every other bar was a line. The outlier is drawn at the axis top, in its
    shares, labelled with its real latency."""
    assert axis_cap([324.0, 203.0, 14200.0]) == pytest.approx(1.6 * 324.0)
    assert axis_cap([324.0, 203.0, 1000.0]) is None  # 3.1x: on scale
    assert axis_cap([14200.0]) is None
    stored = ops_view.load(Store(filled(tmp_path / "r.duckdb")), "ops-snap", None)
    bars = [(pt.compiler, p) for pt, p in stored if pt.batch == 8]
    bars[0][1].timed_ms = 50.0 * max(p.timed_ms or 0.0 for _, p in bars[1:])
    fig = draw("conv w16 b8 on localhost", bars)
    ax = fig.axes[0]
    top_of_axis = ax.get_ylim()[1]
    tops = [
        max(r.get_y() + r.get_height() for r in bar) for bar in zip(*ax.containers, strict=True)
    ]
    assert tops[0] < top_of_axis and tops[0] == pytest.approx(
        axis_cap([b[1].timed_ms or 0 for b in bars])
    )
    assert tops[1:] == pytest.approx([p.timed_ms for _, p in bars[1:]])  # the rest to scale
    labels = [t.get_text() for t in ax.texts]
    assert any("off scale" in t for t in labels)
    assert sum("off scale" in t for t in labels) == 1
    assert text_outside_canvas(fig) == []


def test_report_ops_writes_a_figure_per_model(tmp_path: Path) -> None:
    db = filled(tmp_path / "r.duckdb")
    out = tmp_path / "figs"
    run = CliRunner().invoke(
        cli, ["report", "ops", "--db", str(db), "--figure", str(out), "--format", "csv"]
    )
    assert run.exit_code == 0, run.output
    names = sorted(p.name for p in out.iterdir())
    base = file_name("conv w16 b1 on localhost")
    assert base == "ops-conv-w16-b1-localhost"
    assert f"{base}.png" in names and f"{base}.svg" in names and len(names) == 6  # b1, b8
    bad = CliRunner().invoke(cli, ["report", "dlas", "--db", str(db), "--figure", str(out)])
    assert bad.exit_code == 1 and "--figure applies to `ngb report ops` only" in bad.output


def test_report_ops_model_keeps_one_model_and_names_a_missing_one(tmp_path: Path) -> None:
    db = filled(tmp_path / "r.duckdb")
    whole = CliRunner().invoke(cli, ["report", "ops", "--db", str(db), "--format", "markdown"])
    one = CliRunner().invoke(
        cli, ["report", "ops", "--db", str(db), "--format", "markdown", "--model", "conv"]
    )
    assert whole.exit_code == 0 and one.exit_code == 0, one.output
    assert one.output == whole.output  # the seeded store profiles one model only
    out = tmp_path / "figs"
    figs = CliRunner().invoke(
        cli, ["report", "ops", "--db", str(db), "--model", "conv", "--figure", str(out)]
    )
    assert figs.exit_code == 0 and len(list(out.iterdir())) == 6
    missing = CliRunner().invoke(cli, ["report", "ops", "--db", str(db), "--model", "cnv"])
    assert missing.exit_code == 1
    assert "unknown model with profiles 'cnv'; did you mean: conv?" in missing.output
    assert len(missing.output.strip().splitlines()) == 1
    other = CliRunner().invoke(cli, ["report", "energy", "--db", str(db), "--model", "conv"])
    assert other.exit_code == 1 and "--model applies to `ngb report ops` only" in other.output
