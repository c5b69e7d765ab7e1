"""The sweep ``ngb advise`` prints to settle a tie passes ``ngb sweeps check`` (issue 31, item
15): a block's report label (``conv32x1``) is not a model name, so the sweep names the block and
its width and depth, and an input-size override, apiece."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from ngb.sweeps.cli import cli
from ngb.sweeps.report.advise import Candidate, _settle
from ngb.sweeps.report.data import Cell
from ngb.sweeps.rows import TrialRow
from ngb.sweeps.spec.sweep import loads_sweep


def _row(compiler: str, batch: int, **point: object) -> TrialRow:
    row = {"compiler": compiler, "batch": batch, "optimisation": "none", "target": "cpu",
           "precision": "fp32", "precision_asked": "default", **point}  # fmt: skip
    return row  # type: ignore[return-value]  # the columns _settle reads


def test_a_block_tie_settles_with_a_sweep_that_checks(tmp_path: Path) -> None:
    tied = [
        Candidate(_row(c, b, model="conv", width=32, depth=1), Cell(None), Cell(None), Cell(None))
        for c, b in (("noop", 1), ("identity", 4))
    ]
    text = _settle("conv32x1", "localhost", tied)
    sweep = loads_sweep(text.split("\n# then:")[0])
    asked = sorted((t.model, t.width, t.depth, t.compiler, t.batch) for t in sweep.trials())
    assert asked == [("conv", 32, 1, "identity", 4), ("conv", 32, 1, "noop", 1)]
    path = tmp_path / "settle.toml"
    path.write_text(text)
    r = CliRunner().invoke(cli, ["sweeps", "check", str(path)])
    assert r.exit_code == 0, r.output


def test_an_input_size_override_is_kept() -> None:
    tied = [
        Candidate(
            _row("noop", b, model="resnet18", width=None, depth=1, input_size=160),
            Cell(None),
            Cell(None),
            Cell(None),
        )  # fmt: skip
        for b in (1, 2)
    ]
    sweep = loads_sweep(_settle("resnet18@160", "localhost", tied).split("\n# then:")[0])
    assert {(t.model, t.input_size) for t in sweep.trials()} == {("resnet18", 160)}


def test_a_device_whose_trials_all_failed_is_named_as_such(tmp_path: Path) -> None:
    from ngb.core.records.types import MeasureSettings, TrialResult, TrialSpec
    from ngb.sweeps.store.database import Store

    store = Store(tmp_path / "r.duckdb")
    store.create_run("r", "allfail", "", ["localhost"], 1)
    spec = TrialSpec(model="conv", width=8, compiler="tensorrt", batch=1,
                     measure=MeasureSettings())  # fmt: skip
    failed = TrialResult(key=spec.key, spec=spec.to_dict(), status="failed",
                         error="unsupported: tensorrt is not installed",
                         error_kind="unsupported")  # fmt: skip
    store.ingest_results("r", "localhost", [failed])
    argv = ["advise", "conv8x1", "--device", "localhost", "--db", str(store.path)]
    r = CliRunner().invoke(cli, argv)
    assert r.exit_code == 1
    assert r.stderr.strip().splitlines() == [
        "error: no successful results on localhost: its 1 stored trial failed (their errors: "
        "the failures view, through ngb query)"
    ]
