"""One name per user's model on every surface (issue 45): ``ngb measure``, ``ngb.measure``, a
sweep's ``[[models]]`` and ``ngb profile`` store a model under ``--name`` / ``name=`` / the table's
name, or else under ``core.model_sources.default_name`` -- never the path typed -- so the same file
forms one series in ``ngb history`` from any working directory; stores written before are
renamed by a migration.

The model is a python file measured by the ``noop`` compiler (which builds no model), so the real
CLI, API and sweep paths run in seconds.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner
from ngb.core.base.errors import ConfigError
from ngb.core.models.model_inputs import InputSpec
from ngb.core.models.model_sources import ModelSource, check_name, default_name, trial_name
from ngb.sweeps.cli import cli
from ngb.sweeps.report import history
from ngb.sweeps.store import schema
from ngb.sweeps.store.database import Store

FAST = ["--repetitions", "2", "--workers", "1", "--min-duration", "0.01", "--min-iters", "2",
        "--warmup-iters", "1", "--warmup-s", "0", "--no-verify"]  # fmt: skip


def _model_file(tmp_path: Path) -> Path:
    code = tmp_path / "code"
    code.mkdir()
    (code / "net.py").write_text("def build():\n    return None\n")
    return code / "net.py"


def _measure(cwd: Path, *args: str) -> None:
    old = os.getcwd()
    os.chdir(cwd)
    try:
        r = CliRunner().invoke(cli, ["measure", *args], catch_exceptions=False)
    finally:
        os.chdir(old)
    assert r.exit_code == 0, r.output


def test_default_names_do_not_depend_on_the_path_typed():
    onnx = ModelSource("onnx", "tiny_cnn.onnx")
    assert default_name(onnx) == "tiny_cnn.onnx"
    file = ModelSource("python", "sub/resmlp.py:build", inputs=(InputSpec("x", ("batch", 4)),))
    assert default_name(file) == "resmlp.py:build"
    assert default_name(ModelSource("python", "tiny_nets.text:build")) == "tiny_nets.text:build"
    assert default_name(ModelSource("timm", "vit_tiny_patch16_224")) == "vit_tiny_patch16_224"
    assert trial_name("a/b/tiny_cnn.onnx", onnx.to_dict(), None, "--name") == "tiny_cnn.onnx"
    assert trial_name("a/b/tiny_cnn.onnx", onnx.to_dict(), " cnn ", "--name") == "cnn"
    for bad in ("", "a/b", "conv", "x\n"):
        with pytest.raises(ConfigError, match="--name"):
            check_name(bad, "--name")
    with pytest.raises(ConfigError, match="built-in or timm name"):
        trial_name("resnet18", None, "mine", "--name")


@pytest.mark.timeout(300)
async def test_cli_api_and_sweep_form_one_series(tmp_path, monkeypatch):
    """The same file measured from two working directories with the CLI, once with the API
    (an absolute path) and once by a sweep whose [[models]] table has no name: one series."""
    import ngb
    from ngb.devices.inventory import Device, Inventory
    from ngb.sweeps.run.orchestrator import Orchestrator
    from ngb.sweeps.spec.sweep import loads_sweep

    monkeypatch.setenv("NGB_HOME", str(tmp_path / "home"))
    net = _model_file(tmp_path)
    db = tmp_path / "results.duckdb"
    common = ["-c", "noop", "-i", "x:batch,4", *FAST, "--db", str(db)]
    _measure(net.parent, "net.py:build", *common, "--run", "cli-here")
    _measure(tmp_path, "code/net.py:build", *common, "--run", "cli-there")
    result = ngb.measure(f"{net}:build", "noop", inputs=["x:batch,4"], db=db, run="api",
                         progress=False, repetitions=2, workers=1, min_duration_s=0.01,
                         min_iters=2, warmup_iters=1, warmup_s=0, verify=False)  # fmt: skip
    assert result.ok
    sweep = loads_sweep(
        f"""
name = "named"
[measure]
repetitions = 2
workers = 1
min_duration_s = 0.01
min_iters = 2
warmup_iters = 1
warmup_s = 0
quiet_check_s = 0
verify = false
[[models]]
source = "{net}:build"
inputs = [{{ name = "x", shape = ["batch", 4] }}]
[[matrix]]
models = ["net.py:build"]
compilers = ["noop"]
batches = [1]
"""
    )
    inventory = Inventory(
        [Device(name="localhost", host="localhost", transport="local",
                python=sys.executable, workdir=str(tmp_path / "device"))]
    )  # fmt: skip
    orch = Orchestrator(Store(db), inventory)
    run_id = await orch.start(sweep, "localhost", isolate="inprocess")
    assert (await orch.wait(run_id))["status"] == "finished"
    await orch.close()

    _, rows = Store(db).select("SELECT DISTINCT model FROM trials")
    assert rows == [("net.py:build",)]
    [series] = history.series_of(history.load(Store(db), {}))
    assert sorted(e.run_id for e in series.entries) == sorted(
        ["cli-here", "cli-there", "api", run_id]
    )

    _measure(tmp_path, "code/net.py:build", *common, "--run", "cli-named", "--name", "net")
    _, rows = Store(db).select("SELECT model FROM trials WHERE run_id = 'cli-named'")
    assert rows == [("net",)]


def test_an_older_store_names_its_own_models_by_their_files(tmp_path):
    """Rows an ngb before issue 45 stored under the typed path get the file's own name; a
    [[models]] name and a timm name stay as they were."""
    path = tmp_path / "old.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute(schema.VERSION_TABLE)
        # the store as the last ngb before the own-name migration left it (later migrations
        # come after it in the list)
        names = [description for description, _ in schema.MIGRATIONS]
        before = schema.MIGRATIONS[: names.index(schema.OWN_MODEL_NAMES_MIGRATION)]
        for version, (description, statements) in enumerate(before, start=1):
            for statement in statements:
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version VALUES (?, ?, now())", [version, description])
        rows = [
            ("k1", "examples/own-models/tiny_cnn.onnx", '{"source": {"kind": "onnx", '
             '"ref": "tiny_cnn.onnx"}}'),
            ("k2", "/home/me/models/sub/resmlp.py:build", '{"source": {"kind": "python", '
             '"ref": "sub/resmlp.py:build"}}'),
            ("k3", "cnn-onnx", '{"source": {"kind": "onnx", "ref": "tiny_cnn.onnx"}}'),
            ("k4", "resnet18", "{}"),
        ]  # fmt: skip
        for key, model, spec in rows:
            conn.execute(
                "INSERT INTO trials (run_id, device, key, model, spec, status) "
                "VALUES ('old', 'localhost', ?, ?, ?, 'ok')",
                [key, model, spec],
            )
        conn.execute(
            "INSERT INTO profiles (run_id, device, key, model) VALUES "
            "('old', 'localhost', 'k1', 'examples/own-models/tiny_cnn.onnx')"
        )
    store = Store(path)
    _, got = store.select("SELECT key, model FROM trials ORDER BY key")
    assert got == [("k1", "tiny_cnn.onnx"), ("k2", "resmlp.py:build"), ("k3", "cnn-onnx"),
                   ("k4", "resnet18")]  # fmt: skip
    _, got = store.select("SELECT model FROM profiles")
    assert got == [("tiny_cnn.onnx",)]


def test_profile_takes_an_own_model_and_names_it_as_measure_does(tmp_path, monkeypatch):
    """``ngb profile`` with a python file and -i, stored under the name ``ngb measure`` gives
    it; --sweep takes a [[models]] entry (an unknown one is one line)."""
    monkeypatch.setenv("NGB_HOME", str(tmp_path / "home"))
    code = tmp_path / "code"
    code.mkdir()
    (code / "mlp.py").write_text(
        "import torch\n\ndef build():\n"
        "    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())\n"
    )
    db = tmp_path / "p.duckdb"
    r = CliRunner().invoke(
        cli, ["profile", f"{code}/mlp.py:build", "-i", "x:batch,4", "-c", "identity",
              "--calls", "2", "--warmup", "1", "--db", str(db), "--run", "p1"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "mlp.py:build b1" in r.output
    _, rows = Store(db).select("SELECT DISTINCT model FROM profiles")
    assert rows == [("mlp.py:build",)]

    sweep = tmp_path / "s.toml"
    sweep.write_text(
        f'name = "s"\n[[models]]\nname = "mlp"\nsource = "{code}/mlp.py:build"\n'
        'inputs = [{ name = "x", shape = ["batch", 4] }]\n'
        '[[matrix]]\nmodels = ["mlp"]\ncompilers = ["identity"]\nbatches = [1]\n'
    )
    r = CliRunner().invoke(cli, ["profile", "nosuch", "--sweep", str(sweep), "-c", "identity"])
    assert r.exit_code == 1 and "has no [[models]] entry 'nosuch'" in r.output
    r = CliRunner().invoke(cli, ["profile", "mlp", "--sweep", str(sweep), "-c", "identity",
                                 "--calls", "2", "--warmup", "1", "--format", "csv"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "mlp b1" in r.output
