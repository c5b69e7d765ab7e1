"""The accuracy pass (issue 42): the compiled model over the whole labelled set after its timed
loops, beside eager fp32, through real compilers (identity, ONNX Runtime), ``ngb measure
--accuracy``, a sweep's ``[accuracy]``, the store and ``ngb report accuracy``.

The model is real: a linear classifier fitted to scikit-learn's digits by least squares (numpy),
~95 % top-1 on the set; a pass that fed the compiled model nothing new would score ~10 %."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import duckdb
import numpy as np
import pytest
from ngb.core.base.errors import ConfigError, NgbError
from ngb.core.compilers import CompileContext, get_compiler
from ngb.core.records.types import AccuracySettings
from ngb.core.statistics import accuracy_stats
from ngb.core.trial import accuracy_pass
from ngb.sweeps.spec.sweep import loads_sweep

from tests.cli_helpers import invoke
from tests.installed import needs

torch = pytest.importorskip("torch")
pytestmark = needs("sklearn")

FAST = ["--repetitions", "1", "--min-duration", "0.01", "--min-iters", "2", "--warmup-iters", "1"]
FAST += ["--warmup-s", "0"]

MODEL = '''
import numpy as np
import torch
from ngb.core.models.labelled_data import load
from torch import nn


def build():
    """A linear classifier fitted to the digits by least squares (deterministic)."""
    data = load("digits")
    x = np.hstack([data.inputs.reshape(len(data.inputs), -1), np.ones((len(data.inputs), 1))])
    y = np.eye(10)[data.labels]
    w = np.linalg.solve(x.T @ x + 1e-2 * np.eye(65), x.T @ y)
    linear = nn.Linear(64, 10)
    with torch.no_grad():
        linear.weight.copy_(torch.from_numpy(w[:64].T.astype(np.float32)))
        linear.bias.copy_(torch.from_numpy(w[64].astype(np.float32)))
    return nn.Sequential(nn.Flatten(), linear).eval()


def two_inputs():
    class Two(nn.Module):
        def forward(self, a, b):
            return a.flatten(1)[:, :10] + b.flatten(1)[:, :10]

    return Two()
'''


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("acc")
    (root / "digits_model.py").write_text(MODEL)
    return root


def _linear(model_dir: Path) -> torch.nn.Module:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "digits_model_test", model_dir / "digits_model.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build()


@pytest.mark.parametrize("compiler", ["identity", "onnxruntime"])
def test_the_compiled_model_runs_the_whole_set(
    compiler: str, model_dir: Path, tmp_path: Path
) -> None:
    model = _linear(model_dir)
    example = torch.zeros(32, 1, 8, 8)  # 1,797 = 56 x 32 + 5: the last batch is padded
    prepared = accuracy_pass.prepare(AccuracySettings("digits"), model, example, "linear")
    assert prepared.eager.shape == (1797, 10) and prepared.batch == 32
    compiled = get_compiler(compiler).compile(model, example, CompileContext(workdir=tmp_path))
    try:
        for _ in range(3):  # as the timed loops do, on the bound example
            compiled.run()
        record = accuracy_pass.run_compiled(prepared, compiled)
    finally:
        compiled.close()
    assert record["samples"] == 1797 and record["classes"] == 10 and record["batch"] == 32
    assert record["eager_top1"] > 0.9
    assert record["top1"] == pytest.approx(record["eager_top1"], abs=0.002)
    assert record["agreement"] > 0.998 and record["verdict"] == accuracy_stats.NS
    assert record["top1_ci"][0] < record["top1"] < record["top1_ci"][1]
    assert record["pass_s"] >= record["compiled_s"] > 0 and record["eager_s"] > 0


def test_what_the_pass_cannot_take_is_one_line(model_dir: Path) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("digits_model_two", model_dir / "digits_model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    settings = AccuracySettings("digits")
    pair = (torch.zeros(4, 1, 8, 8), torch.zeros(4, 1, 8, 8))
    with pytest.raises(NgbError, match="takes a model with one input; 'two' takes 2"):
        accuracy_pass.prepare(settings, module.two_inputs(), pair, "two")
    five = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 5))
    with pytest.raises(NgbError, match="labels go up to 9 but the model scores 5 classes"):
        accuracy_pass.prepare(settings, five, torch.zeros(4, 1, 8, 8), "five")
    with pytest.raises(ConfigError, match="do not fit the model, which takes 3x8x8"):
        accuracy_pass.prepare(settings, five, torch.zeros(4, 3, 8, 8), "five")

    class Nan(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.flatten(1)[:, :10] * float("nan")

    with pytest.raises(NgbError, match="eager model gave NaN outputs for 1797 of 1797"):
        accuracy_pass.prepare(settings, Nan(), torch.zeros(4, 1, 8, 8), "nan")


@pytest.mark.parametrize("compiler", ["identity", "onnxruntime"])
def test_ngb_measure_accuracy_end_to_end(compiler: str, model_dir: Path, tmp_path: Path) -> None:
    db = tmp_path / "results.duckdb"
    code, out, err = invoke(
        "measure", "digits_model.py:build", "-i", "x:batch,1,8,8:float32", "-c", compiler,
        "-b", "64", "--accuracy", "digits", "--db", str(db), "--run", "acc", *FAST, "--json",
        cwd=model_dir,
    )  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    record = result["extra"]["accuracy"]
    assert "accuracy_error" not in result["extra"]
    assert record["data"] == "digits" and record["samples"] == 1797 and record["batch"] == 64
    assert record["top1"] > 0.9 and record["agreement"] > 0.998
    assert record["verdict"] == "n.s."
    # the pass is apart from the timed loops: a small share of the trial's wall time here
    wall = result["finished_at"] - result["started_at"]
    assert record["pass_s"] < 0.25 * wall, (record["pass_s"], wall)
    with duckdb.connect(str(db), read_only=True) as conn:
        row = conn.execute(
            "SELECT accuracy_data, accuracy_samples, top1, top1_lo, top1_hi, top5, eager_top1,"
            " agreement, accuracy_drop, accuracy_verdict, accuracy_pass_s, accuracy_error"
            " FROM trials"
        ).fetchone()
        view = conn.execute("SELECT top1, accuracy_verdict FROM results").fetchone()
    assert row is not None and view is not None
    assert row[0] == "digits" and row[1] == 1797 and row[2] == pytest.approx(record["top1"])
    assert row[3] < row[2] < row[4] and row[5] > row[2] and row[9] == "n.s." and row[11] is None
    assert view == (row[2], "n.s.")
    code, out, err = invoke("report", "accuracy", "--db", str(db), cwd=model_dir)
    assert code == 0, err
    assert "top-1 %" in out and "digits" in out and compiler in out


def test_ngb_measure_prints_the_accuracy_line(model_dir: Path) -> None:
    code, out, err = invoke(
        "measure", "digits_model.py:build", "-i", "x:batch,1,8,8:float32", "-c", "identity",
        "-b", "128", "--accuracy", "digits", *FAST, cwd=model_dir,
    )  # fmt: skip
    assert code == 0, err
    flat = " ".join(out.split())  # the terminal's width wraps the line
    line = flat[flat.index("accuracy (digits): ") :]
    assert line.startswith("accuracy (digits): top-1 9")
    assert "agreement with eager 100.0 % [99.8, 100.0]" in line and "n.s." in line, line


def test_bad_labelled_data_is_refused_before_measuring(model_dir: Path, tmp_path: Path) -> None:
    np.savez(tmp_path / "short.npz", inputs=np.zeros((5, 1, 8, 8)), labels=np.arange(4))
    for data, said in [
        ("missing.npz", "error: --accuracy: labelled data file not found: "),
        (str(tmp_path / "short.npz"), "short.npz: 4 labels for 5 inputs"),
        ("mnist", "expected a built-in name (digits, digits-train, digits-test)"),
    ]:
        code, out, err = invoke(
            "measure", "digits_model.py:build", "-i", "x:batch,1,8,8:float32", "-c", "identity",
            "--accuracy", data, *FAST, cwd=model_dir,
        )  # fmt: skip
        assert code == 1 and out == ""
        assert len(err.strip().splitlines()) == 1 and said in err, err


def test_a_sweep_accuracy_table_reaches_every_trial(tmp_path: Path) -> None:
    np.savez(tmp_path / "set.npz", inputs=np.zeros((3, 4)), labels=np.arange(3))
    text = textwrap.dedent("""
        name = "acc"
        [accuracy]
        data = "set.npz"
        [[matrix]]
        models = ["resnet18"]
        compilers = ["identity", "onnxruntime"]
        batches = [1]
    """)
    sweep = loads_sweep(text, base_dir=tmp_path)
    datas = {t.measure.accuracy.data for t in sweep.trials() if t.measure.accuracy}
    assert datas == {str(tmp_path / "set.npz")} and len(sweep.trials()) == 2
    again = loads_sweep(sweep.to_toml(), base_dir=Path("/"))  # written back: the absolute path
    assert [t.key for t in again.trials()] == [t.key for t in sweep.trials()]
    with pytest.raises(ConfigError, match=r"\[accuracy\]: labelled data file not found"):
        loads_sweep(text.replace("set.npz", "gone.npz"), base_dir=tmp_path)
    with pytest.raises(ConfigError, match="unknown accuracy setting 'batch'"):
        loads_sweep(text.replace('data = "set.npz"', 'data = "digits"\nbatch = 4'))


@pytest.mark.parametrize("compiler", ["torchscript", "openvino", "tvm"])
def test_every_runtime_takes_new_inputs(compiler: str, model_dir: Path, tmp_path: Path) -> None:
    """``Compiled.feed`` writes the bound buffers: the next call answers the new batch."""
    chosen = get_compiler(compiler)
    ok, why = chosen.available()
    if not ok:
        pytest.skip(why)
    model = _linear(model_dir)
    example = torch.zeros(16, 1, 8, 8)
    prepared = accuracy_pass.prepare(AccuracySettings("digits"), model, example, "linear")
    compiled = chosen.compile(model, example, CompileContext(workdir=tmp_path))
    try:
        compiled.run()
        record = accuracy_pass.run_compiled(prepared, compiled)
    finally:
        compiled.close()
    assert record["top1"] > 0.9 and record["agreement"] > 0.998, record


def test_eager_runs_large_batches_or_the_trials_own(model_dir: Path) -> None:
    linear = _linear(model_dir)

    class Bound(torch.nn.Module):  # a model written for batch 4 only
        def __init__(self) -> None:
            super().__init__()
            self.inner = linear

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x.reshape(4, 1, 8, 8))

    settings = AccuracySettings("digits")
    free = accuracy_pass.prepare(settings, linear, torch.zeros(4, 1, 8, 8), "linear")
    bound = accuracy_pass.prepare(settings, Bound(), torch.zeros(4, 1, 8, 8), "bound")
    assert free.eager.shape == bound.eager.shape == (1797, 10)
    np.testing.assert_allclose(free.eager, bound.eager, rtol=1e-4, atol=1e-5)


def test_the_api_takes_accuracy_too(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ngb

    monkeypatch.chdir(model_dir)
    model, shape = "digits_model.py:build", ["x:batch,1,8,8:float32"]
    with pytest.raises(NgbError, match="accuracy: labelled data file not found"):
        ngb.measure(model, compiler="identity", inputs=shape, accuracy="gone.npz")
    fast = {"repetitions": 1, "min_duration_s": 0.01, "min_iters": 2, "warmup_iters": 1}
    result = ngb.measure(
        model, compiler="onnxruntime", batch=32, inputs=shape, accuracy="digits", warmup_s=0, **fast
    )
    assert result.ok, result.error
    assert result.accuracy is not None and result.accuracy["top1"] > 0.9
    assert result.accuracy["verdict"] == "n.s."


def test_sweeps_check_reads_the_labelled_data(tmp_path: Path) -> None:
    (tmp_path / "loaders.py").write_text("def raises():\n    raise OSError('no such archive')\n")
    sweep = tmp_path / "acc.toml"
    sweep.write_text(
        textwrap.dedent("""
        name = "acc"
        [accuracy]
        data = "loaders.py:raises"
        [[matrix]]
        models = ["conv"]
        widths = [8]
        compilers = ["identity"]
        batches = [1]
    """)
    )
    code, out, err = invoke("sweeps", "check", str(sweep), cwd=tmp_path)
    assert code == 1 and out == "", out
    assert err.strip().splitlines() == [
        f"error: {sweep}: accuracy: labelled data loader {tmp_path / 'loaders.py'}:raises raised "
        "OSError: no such archive"
    ]
    code, out, _ = invoke("sweeps", "check", str(sweep), "--no-models", cwd=tmp_path)
    assert code == 0 and "1 trials" in out


def test_the_dlas_report_shows_accuracy_beside_speed(model_dir: Path, tmp_path: Path) -> None:
    db = str(tmp_path / "results.duckdb")
    for optimisation in ("none", "prune-l1-0.9"):
        code, _, err = invoke(
            "measure", "digits_model.py:build", "-i", "x:batch,1,8,8:float32", "-c", "identity",
            "-b", "64", "--optimisation", optimisation, "--accuracy", "digits", "--db", db,
            "--run", "dlas", *FAST, cwd=model_dir,
        )  # fmt: skip
        assert code == 0, err
    code, out, err = invoke("report", "dlas", "--db", db, "--format", "csv", cwd=model_dir)
    assert code == 0, err
    header, row = out.strip().splitlines()[:2]
    columns = dict(zip(header.split(","), row.split(","), strict=False))
    assert float(columns["top-1 % none"]) > 90  # the linear model, unpruned
    assert float(columns["top-1 % opt"]) < float(columns["top-1 % none"])  # 90 % of it pruned
    assert "drop vs eager" in columns  # compiled vs eager of the same pruned model
