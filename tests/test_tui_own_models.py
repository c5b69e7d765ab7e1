"""The console runs a sweep of the user's own models (a factory in a package, an ONNX file the test
makes) and its Results screen shows each model under the name the user gave it."""

from __future__ import annotations

from pathlib import Path

import pytest
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
                await results.show_tab("table")
                await pilot.pause(0.2)
                table = results.query_one("#results-table", DataTable)
                for i in range(table.row_count):
                    seen.update(str(c) for c in table.get_row_at(i))
        assert {"My Pair Encoder", "tiny onnx"} <= seen


# ---------------------------------------------------------------- one model, every path (issue 31)

MYMODEL = """\
import torch
import helper  # a sibling module: the file's folder travels with it


class Net(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, width, 3, padding=1)
        self.head = torch.nn.Linear(width, helper.CLASSES)

    def forward(self, image):
        return self.head(self.conv(image).mean((2, 3)))


def build(width: int = 4) -> torch.nn.Module:
    return Net(width)
"""

BESIDE_SWEEP = """\
name = "beside"
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
name = "mine"
source = "mymodel.py:build"
kwargs = { width = 8 }
family = "mine"
inputs = [{ name = "image", shape = ["batch", 3, 16, 16] }]

[[models]]
name = "ext"
source = "ext.onnx"

[[matrix]]
models = ["mine", "ext"]
compilers = ["onnxruntime"]
batches = [2]
"""

QUICK = {"repetitions": 2, "workers": 1, "quiet_check_s": 0.0, "min_duration_s": 0.01,
         "min_iters": 2, "warmup_iters": 1, "warmup_s": 0.0}  # fmt: skip
CLI_QUICK = ["--repetitions", "2", "--workers", "1", "--min-duration", "0.01", "--min-iters", "2",
             "--warmup-iters", "1", "--warmup-s", "0"]  # fmt: skip


def make_project(folder: Path) -> Path:
    """A user's project folder: a single-file model with a sibling module, an ONNX model whose
    weights sit in an external data file (``ext.onnx`` + ``ext.onnx.data``), a sweep naming both,
    and (later) the results store beside them."""
    import onnx
    import torch

    (folder / "helper.py").write_text("CLASSES = 5\n")
    (folder / "mymodel.py").write_text(MYMODEL)
    net = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))
    torch.onnx.export(
        net.eval(), (torch.randn(2, 6),), str(folder / "plain.onnx"), input_names=["features"],
        dynamic_axes={"features": {0: "batch"}}, dynamo=False, opset_version=17,
    )  # fmt: skip
    graph = onnx.load(str(folder / "plain.onnx"))
    onnx.save_model(
        graph, str(folder / "ext.onnx"), save_as_external_data=True,
        all_tensors_to_one_file=True, location="ext.onnx.data", size_threshold=0,
    )  # fmt: skip
    (folder / "plain.onnx").unlink()
    sweep = folder / "sweep.toml"
    sweep.write_text(BESIDE_SWEEP)
    return sweep


def settings_by_run(db: Path) -> dict[str, dict[str, tuple[object, ...]]]:
    """run id -> model kind -> what was measured: the source's reference, factory arguments,
    inputs and artifact hashes, the compiler, batch, parameters and MACs, and the status."""
    import json

    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute(
            "SELECT run_id, spec, compiler, batch, params, macs, status, error FROM trials"
        ).fetchall()
    out: dict[str, dict[str, tuple[object, ...]]] = {}
    for run_id, spec, compiler, batch, params, macs, status, error in rows:
        source = json.loads(spec)["source"]
        arts = tuple((a["name"], a["sha256"], tuple(a.get("data_files", ()))) for a in
                     source["artifacts"])  # fmt: skip
        out.setdefault(run_id, {})[source["kind"]] = (
            source["ref"], json.dumps(source.get("kwargs"), sort_keys=True),
            json.dumps(source.get("inputs"), sort_keys=True), arts, compiler, batch, params,
            macs, status, error,
        )  # fmt: skip
    return out


@pytest.mark.slow
async def test_own_models_measure_the_same_on_every_path(tmp_path: Path) -> None:
    """Issue 31: one PyTorch file with factory arguments and one ONNX model with external data,
    through `ngb measure --db`, `ngb run` with the store beside the models, the Python API and
    the console: every path measures the same thing (same source, inputs, files, MACs)."""
    import os
    import subprocess
    import sys

    import ngb
    from click.testing import CliRunner
    from ngb.sweeps.cli import cli

    proj = tmp_path / "projA"
    proj.mkdir()
    sweep = make_project(proj)
    db = proj / "results.duckdb"  # beside the models, as a user keeps it
    env = {**os.environ, "NGB_HOME": str(tmp_path / "home")}

    # 1. the command line, stored
    old = os.getcwd()
    os.chdir(proj)
    try:
        for args in (
            ["mymodel.py:build", "-k", "width=8", "-i", "image:batch,3,16,16"],
            ["ext.onnx"],
        ):
            res = CliRunner().invoke(
                cli, ["measure", *args, "-c", "onnxruntime", "-b", "2", "--db", str(db),
                      "--run", "cli", *CLI_QUICK], catch_exceptions=False,
            )  # fmt: skip
            assert res.exit_code == 0, res.stderr
            assert f"stored: run cli in {db}" in res.stderr
    finally:
        os.chdir(old)

    # 2. a sweep on localhost, writing the store in the models' own folder
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ngb"), "run", str(sweep), "-d", "localhost", "--db",
         str(db), "--isolate", "inprocess"],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "changed since" not in proc.stderr + proc.stdout

    # 3. the Python API (absolute path, factory arguments, inputs, family)
    mine = ngb.measure(
        f"{proj / 'mymodel.py'}:build", compiler="onnxruntime", batch=2, kwargs={"width": 8},
        inputs=["image:batch,3,16,16"], family="mine", db=db, run="api", progress=False, **QUICK,
    )  # fmt: skip
    ext = ngb.measure(proj / "ext.onnx", compiler="onnxruntime", batch=2, db=db, run="api",
                      progress=False, **QUICK)  # fmt: skip
    assert mine.ok and ext.ok, (mine.error, ext.error)

    # 4. the console runs the same sweep, its store the same file beside the models
    app = make_app(proj)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.run_screen
        await wait_for(pilot, lambda: screen.sweep_choice() == "demo")
        screen.query_one("#sweep-file", Input).value = str(sweep)
        await pilot.press("escape", "s")
        run_id = await wait_for(pilot, lambda: screen.current_run)
        await wait_for(
            pilot, lambda: app.run_screen.model.run_states.get(run_id) == "finished", timeout=300
        )
        state = screen.model.device(run_id, "localhost")
        assert (state.done, state.total, state.failed) == (2, 2, 0)

    runs = settings_by_run(db)
    assert len(runs) == 4 and {"cli", "api", run_id} < set(runs)
    runs["sweep"] = runs.pop(next(r for r in runs if r not in ("cli", "api", run_id)))
    for kind in ("python", "onnx"):
        seen = {run: by_kind[kind] for run, by_kind in runs.items()}
        first = seen["cli"]
        assert first[-2:] == ("ok", None), first
        assert all(v == first for v in seen.values()), seen
    # the external data travelled with the model, and nothing of ngb's own was hashed
    _, sha, data_files = runs["sweep"]["onnx"][3][0]
    assert data_files == ("ext.onnx.data",)
    shipped = tmp_path / "home" / "data" / "localhost" / "cache" / "artifacts" / sha
    assert sorted(p.name for p in shipped.iterdir()) == ["ext.onnx", "ext.onnx.data"]
    assert "results.duckdb" not in str(runs["sweep"]["python"])
