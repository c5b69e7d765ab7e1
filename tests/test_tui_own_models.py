"""The console runs a sweep of the user's own models (a factory in a package, an ONNX file the test
makes) and its Results screen shows each model under the name the user gave it."""

from __future__ import annotations

from pathlib import Path

from ngb.tui import results_data as rd
from ngb.tui.screens.results import ResultsScreen
from textual.widgets import DataTable, Input, Select

from tests.test_tui_support import SIZE, make_app, wait_for

FACTORY = """\
import torch


class Pair(torch.nn.Module):
    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.a = torch.nn.Linear(dim, 4)
        self.b = torch.nn.Linear(6, 4)

    def forward(self, x, y):
        return self.a(x) + self.b(y)


def pair(dim: int = 8) -> torch.nn.Module:
    return Pair(dim)
"""

SWEEP = """\
name = "own-console"
baseline = "onnxruntime"
[measure]
repetitions = 2
workers = 1
quiet_check_s = 0
min_duration_s = 0.01
min_iters = 2
warmup_iters = 1
warmup_s = 0.0

[[models]]
name = "My Pair Encoder"
source = "mynets.pair:pair"
kwargs = { dim = 8 }
inputs = [{ name = "x", shape = ["batch", 8] }, { name = "y", shape = ["batch", 6] }]

[[models]]
name = "tiny onnx"
source = "tiny.onnx"

[[matrix]]
models = ["My Pair Encoder", "tiny onnx"]
compilers = ["onnxruntime"]
batches = [2]
"""


def _make_parts(folder: Path) -> Path:
    import torch

    pkg = folder / "mynets"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "pair.py").write_text(FACTORY)
    model = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.ReLU()).eval()
    torch.onnx.export(
        model,
        (torch.randn(2, 5),),
        str(folder / "tiny.onnx"),
        input_names=["features"],
        dynamic_axes={"features": {0: "batch"}},
        dynamo=False,
        opset_version=17,
    )
    sweep = folder / "own.toml"
    sweep.write_text(SWEEP)
    return sweep


async def test_console_runs_own_models_and_shows_their_names(tmp_path: Path) -> None:
    sweep = _make_parts(tmp_path)
    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.run_screen
        await wait_for(pilot, lambda: screen.sweep_choice() == "demo")
        screen.query_one("#sweep-file", Input).value = str(sweep)
        await pilot.press("escape", "s")
        run_id = await wait_for(pilot, lambda: screen.current_run)
        await wait_for(
            pilot, lambda: app.run_screen.model.run_states.get(run_id) == "finished", timeout=240
        )
        state = screen.model.device(run_id, "localhost")
        assert (state.done, state.total, state.failed) == (2, 2, 0)

        await pilot.press("3")
        results = app.screen
        assert isinstance(results, ResultsScreen)
        await wait_for(pilot, lambda: len(results.rows) == 2)
        assert sorted(str(r["model"]) for r in results.rows) == ["My Pair Encoder", "tiny onnx"]
        # Every model the user named is offered in the pickers, and the table shows it by name.
        family = results.query_one("#results-family", Select)
        variant = results.query_one("#results-variant", Select)
        seen: set[str] = set()
        for fam_value in rd.families(results.rows):
            family.value = fam_value
            await pilot.pause(0.2)
            for var_value in rd.variants(results.rows, fam_value):
                variant.value = var_value
                await pilot.pause(0.2)
                results.query_one("#results-tabs").active = "tab-table"
                await pilot.pause(0.2)
                table = results.query_one("#results-table", DataTable)
                for i in range(table.row_count):
                    seen.update(str(c) for c in table.get_row_at(i))
        assert {"My Pair Encoder", "tiny onnx"} <= seen
