"""Sweep files: parsing, validation messages, deterministic expansion, stable keys, presets."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from ngb.core.base.errors import ConfigError, NgbError, UnknownNameError
from ngb.sweeps.cli.sweeps_list import sweeps as sweeps_cmd
from ngb.sweeps.spec.sweep import list_presets, load_sweep, loads_sweep

BASE = """
name = "t"
[[matrix]]
models = ["resnet18"]
compilers = ["identity", "onnxruntime"]
batches = [1, 8]
"""

BLOCKS = """
name = "blocks"
[measure]
repetitions = 2
[compiler_options.openvino]
hint = "THROUGHPUT"
[[matrix]]
models = ["conv", "mha"]
widths = [64]
depths = [1, 2]
compilers = ["identity", "openvino"]
batches = [8]
"""


def write(tmp_path: Path, text: str, name: str = "s.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_expansion_is_the_cartesian_product_in_a_fixed_order() -> None:
    trials = loads_sweep(BASE).trials()
    assert [(t.model, t.compiler, t.batch) for t in trials] == [
        ("resnet18", "identity", 1),
        ("resnet18", "identity", 8),
        ("resnet18", "onnxruntime", 1),
        ("resnet18", "onnxruntime", 8),
    ]


def test_blocks_get_widths_depths_measure_and_options() -> None:
    trials = loads_sweep(BLOCKS).trials()
    assert len(trials) == 2 * 2 * 2  # models x depths x compilers
    assert {(t.model, t.width, t.depth) for t in trials} == {
        ("conv", 64, 1),
        ("conv", 64, 2),
        ("mha", 64, 1),
        ("mha", 64, 2),
    }
    assert all(t.measure.repetitions == 2 for t in trials)
    ov = [t for t in trials if t.compiler == "openvino"]
    assert all(dict(t.compiler_options) == {"hint": "THROUGHPUT"} for t in ov)
    assert all(dict(t.compiler_options) == {} for t in trials if t.compiler == "identity")


def test_keys_are_stable_across_parses_and_round_trip_through_toml() -> None:
    first = loads_sweep(BLOCKS)
    again = loads_sweep(BLOCKS)
    keys = [t.key for t in first.trials()]
    assert keys == [t.key for t in again.trials()]
    assert len(set(keys)) == len(keys)
    written = loads_sweep(first.to_toml())
    assert [t.key for t in written.trials()] == keys
    assert written.name == "blocks"


def test_to_toml_keeps_per_matrix_overrides() -> None:
    text = (
        BLOCKS
        + """
measure = { min_duration_s = 0.01 }
compiler_options.openvino = { hint = "LATENCY" }
"""
    )
    sweep = loads_sweep(text)
    written = sweep.to_toml()
    assert 'compiler_options = { openvino = { hint = "LATENCY" } }' in written
    again = loads_sweep(written)
    assert [t.key for t in again.trials()] == [t.key for t in sweep.trials()]
    ov = [t for t in again.trials() if t.compiler == "openvino"]
    assert all(dict(t.compiler_options) == {"hint": "LATENCY"} for t in ov)
    assert all(t.measure.min_duration_s == 0.01 for t in again.trials())


def test_overlapping_matrices_are_deduplicated_first_wins() -> None:
    text = (
        BASE
        + """
[[matrix]]
models = ["resnet18", "resnet50"]
compilers = ["identity"]
batches = [8, 1]
"""
    )
    trials = loads_sweep(text).trials()
    labels = [t.label for t in trials]
    assert labels == [
        "resnet18/identity/b1",
        "resnet18/identity/b8",
        "resnet18/onnxruntime/b1",
        "resnet18/onnxruntime/b8",
        "resnet50/identity/b8",
        "resnet50/identity/b1",
    ]
    assert len({t.key for t in trials}) == len(trials)


def test_matrix_measure_override_changes_keys() -> None:
    text = BASE.replace("batches = [1, 8]", "batches = [1]\nmeasure = { repetitions = 9 }")
    (trial, *_) = loads_sweep(text).trials()
    assert trial.measure.repetitions == 9
    assert trial.key != loads_sweep(BASE).trials()[0].key


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (BASE + "colour = 1\n", "unknown key 'colour'"),
        (BASE.replace("batches", "batchs"), "unknown key 'batchs'; did you mean 'batches'"),
        (BASE.replace("batches = [1, 8]", "batches = []"), "matrix[0].batches is empty"),
        (BASE.replace("batches = [1, 8]", "batches = [0]"), "values must be positive, got 0"),
        (BASE.replace("batches = [1, 8]", "batches = [-4]"), "values must be positive"),
        (BASE.replace("batches = [1, 8]", "batches = [true]"), "expected int values"),
        (BASE.replace("batches = [1, 8]", 'batches = ["8"]'), "expected int values"),
        (
            BASE.replace('"onnxruntime"', '"onnxrunt"'),
            "unknown compiler 'onnxrunt'; did you mean 'onnxruntime'",
        ),
        (BASE.replace('compilers = ["identity", "onnxruntime"]\n', ""), "missing 'compilers'"),
        (BASE.replace("[1, 8]", "[1, 8]\nwidths = [64]"), "widths apply to blocks only"),
        (BASE.replace("[1, 8]", "[1, 8]\ndepths = [2]"), "depths apply to blocks only"),
        (BLOCKS.replace("widths = [64]\n", ""), "block model 'conv' needs widths"),
        (
            BLOCKS.replace("widths = [64]", "widths = [0]"),
            "matrix[0].widths: values must be positive",
        ),
        (BLOCKS.replace("repetitions = 2", "repetitions = 0"), "[measure]: repetitions must be"),
        (BLOCKS.replace("repetitions = 2", "repetitons = 2"), "did you mean 'repetitions'"),
        (
            BLOCKS.replace("[compiler_options.openvino]", "[compiler_options.openvin]"),
            "unknown compiler 'openvin'",
        ),
        (BASE + 'device = "tpu"\n', "device must be one of cpu, cuda"),
        ('name = "x"\n', "no [[matrix]] table"),
        ("name = [", "not valid TOML"),
    ],
)
def test_bad_sweeps_give_one_line_errors_naming_file_and_key(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_sweep(path)
    text_of_error = str(info.value)
    assert message in text_of_error
    assert text_of_error.startswith(str(path))
    assert "\n" not in text_of_error.strip() or "not valid TOML" in message


def test_scalar_axis_values_are_accepted_as_one_value() -> None:
    trials = loads_sweep(BASE.replace("batches = [1, 8]", "batches = 4")).trials()
    assert {t.batch for t in trials} == {4}


def test_name_defaults_to_the_file_stem(tmp_path: Path) -> None:
    path = write(tmp_path, BASE.replace('name = "t"\n', ""), name="my_sweep.toml")
    assert load_sweep(path).name == "my_sweep"


def test_missing_file_and_unknown_preset() -> None:
    with pytest.raises(NgbError, match="sweep file not found"):
        load_sweep("/nonexistent/x.toml")
    with pytest.raises(UnknownNameError, match="did you mean: demo"):
        load_sweep("dem")


def test_demo_preset_is_small_and_valid() -> None:
    assert "demo" in list_presets()
    sweep = load_sweep("demo")
    trials = sweep.trials()
    assert 8 <= len(trials) <= 24
    assert {t.compiler for t in trials} == {"identity", "torchscript", "onnxruntime", "openvino"}
    assert all(t.is_block for t in trials)  # no timm model: nothing heavy to build
    # short: a few repetitions, but over >= 3 processes (an interval over process means)
    assert all(t.measure.repetitions <= 6 and t.measure.workers >= 3 for t in trials)
    # each trial starts its workers' fresh interpreters: 60 s failed 4 of 8 on a loaded machine
    assert all(t.measure.timeout_s >= 300 for t in trials)


def test_every_preset_parses() -> None:
    for name in list_presets():
        assert load_sweep(name).trials()


def test_check_models_uses_timm_names() -> None:
    pytest.importorskip("ngb.core.models.models")
    pytest.importorskip("timm")
    loads_sweep(BASE).check_models()
    bad = loads_sweep(BASE.replace("resnet18", "resnet19x"), source="bad.toml")
    with pytest.raises(ConfigError, match="bad.toml: models: .*resnet19x"):
        bad.check_models()


def test_cli_sweeps_list_show_check(tmp_path: Path) -> None:
    runner = CliRunner()
    listed = runner.invoke(sweeps_cmd, ["list"])
    assert listed.exit_code == 0, listed.output
    n_demo = len(load_sweep("demo").trials())
    assert f"{n_demo} trials" in listed.output and "demo" in listed.output

    shown = runner.invoke(sweeps_cmd, ["show", "demo", "--trials"])
    assert shown.exit_code == 0
    assert f"# {n_demo} trials" in shown.output and "conv32x1/identity/b1" in shown.output

    good = write(tmp_path, BLOCKS)
    checked = runner.invoke(sweeps_cmd, ["check", str(good)])
    assert checked.exit_code == 0 and "ok: blocks: 8 trials" in checked.output

    bad = write(tmp_path, BASE.replace("[1, 8]", "[0]"), name="bad.toml")
    failed = runner.invoke(sweeps_cmd, ["check", "--no-models", str(bad)])
    assert failed.exit_code != 0
    assert isinstance(failed.exception, ConfigError)
