"""ngb.core.models.labelled_data (issue 42): the built-in digits set, .npz files, loaders, and one
line for each way labelled data can be wrong. Real data: scikit-learn's load_digits, and a linear
classifier fitted to it by numpy."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
from ngb.core.base.errors import ConfigError
from ngb.core.models import labelled_data
from ngb.core.records.types import AccuracySettings, MeasureSettings, TrialSpec
from ngb.core.statistics import accuracy_stats

from tests.installed import needs

pytestmark = needs("sklearn")


def fit_linear(inputs: np.ndarray, labels: np.ndarray, ridge: float = 1e-2) -> np.ndarray:
    """A least-squares linear classifier (one-hot targets), weights (features + 1, classes)."""
    x = np.hstack([inputs.reshape(len(inputs), -1), np.ones((len(inputs), 1))])
    y = np.eye(int(labels.max()) + 1)[labels]
    return np.linalg.solve(x.T @ x + ridge * np.eye(x.shape[1]), x.T @ y)


def scores_of(weights: np.ndarray, inputs: np.ndarray) -> np.ndarray:
    x = np.hstack([inputs.reshape(len(inputs), -1), np.ones((len(inputs), 1))])
    return x @ weights


def test_digits_is_scikit_learns_load_digits() -> None:
    data = labelled_data.load("digits")
    from sklearn.datasets import load_digits

    want = load_digits()
    assert data.inputs.shape == (1797, 1, 8, 8) and data.inputs.dtype == np.float32
    assert data.samples == 1797 and data.classes == 10
    np.testing.assert_array_equal(data.labels, want.target)
    np.testing.assert_allclose(data.inputs.reshape(1797, 64), want.data / 16.0, rtol=1e-6)
    assert data.inputs.min() >= 0.0 and data.inputs.max() <= 1.0
    assert labelled_data.describe("digits") == (
        "digits: 1,797 samples of 1x8x8 float32, 10 classes"
    )


def test_a_linear_model_fitted_on_digits_is_accurate_and_equal_to_itself() -> None:
    data = labelled_data.load("digits")
    weights = fit_linear(data.inputs, data.labels)
    scores = scores_of(weights, data.inputs)
    record = accuracy_stats.compare(scores, scores.astype(np.float32), data.labels)
    assert record["top1"] > 0.9 and record["eager_top1"] == record["top1"]
    assert record["top5"] > 0.99
    assert record["verdict"] == accuracy_stats.NS and record["agreement"] == 1.0
    # rounding the weights to fp16 changes a few answers at most, and not significantly
    half = scores_of(weights.astype(np.float16).astype(np.float64), data.inputs)
    rounded = accuracy_stats.compare(scores, half, data.labels)
    assert rounded["agreement"] > 0.99 and rounded["verdict"] == accuracy_stats.NS
    # a model that lost most of its weights is a real, significant drop
    crippled = weights.copy()
    crippled[:48] = 0.0
    worse = accuracy_stats.compare(scores, scores_of(crippled, data.inputs), data.labels)
    assert worse["verdict"] == accuracy_stats.DROP and worse["drop_ci"][0] > 0


def test_npz_and_loaders_by_file_and_by_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    digits = labelled_data.load("digits")
    np.savez(tmp_path / "set.npz", inputs=digits.inputs[:100], labels=digits.labels[:100])
    from_npz = labelled_data.load("set.npz", tmp_path)
    assert from_npz.samples == 100 and from_npz.inputs.shape == (100, 1, 8, 8)
    (tmp_path / "mydata.py").write_text(
        textwrap.dedent("""
        import numpy as np

        def pairs():
            return np.zeros((6, 4), dtype=np.float32), [0, 1, 2, 0, 1, 2]

        def table():
            return {"inputs": np.ones((3, 4)), "labels": np.array([1.0, 0.0, 1.0])}
    """)
    )
    by_file = labelled_data.load("mydata.py:pairs", tmp_path)
    assert by_file.samples == 6 and by_file.classes == 3 and by_file.labels.dtype == np.int64
    assert not (tmp_path / "__pycache__").exists()  # the user's folder left as it was
    monkeypatch.syspath_prepend(str(tmp_path))
    by_module = labelled_data.load("mydata:table")
    assert by_module.labels.tolist() == [1, 0, 1]
    resolved = labelled_data.resolve("set.npz", tmp_path)
    assert resolved == str(tmp_path / "set.npz")
    assert labelled_data.resolve("mydata.py:pairs", tmp_path) == f"{tmp_path / 'mydata.py'}:pairs"
    assert labelled_data.resolve("digits") == "digits"


def _error(ref: str, base: Path) -> str:
    with pytest.raises(ConfigError) as info:
        labelled_data.load(ref, base)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_each_wrong_input_is_one_line(tmp_path: Path) -> None:
    np.savez(tmp_path / "short.npz", inputs=np.zeros((5, 4)), labels=np.arange(4))
    np.savez(tmp_path / "nan.npz", inputs=np.array([[0.0, np.nan], [1.0, 2.0]]), labels=[0, 1])
    np.savez(tmp_path / "nolabels.npz", inputs=np.zeros((5, 4)), targets=np.arange(5))
    np.savez(tmp_path / "onehot.npz", inputs=np.zeros((3, 4)), labels=np.eye(3))
    np.savez(tmp_path / "negative.npz", inputs=np.zeros((3, 4)), labels=[0, -1, 2])
    (tmp_path / "broken.npz").write_bytes(b"not a zip")
    (tmp_path / "loaders.py").write_text(
        textwrap.dedent("""
        def raises():
            raise ValueError("the archive is gone")

        def scalar():
            return 3
    """)
    )
    (tmp_path / "bad_import.py").write_text("import no_such_module_here\n")
    assert _error("short.npz", tmp_path).endswith("short.npz: 4 labels for 5 inputs")
    assert "inputs hold NaN or inf in 1 samples" in _error("nan.npz", tmp_path)
    assert "no 'labels' array in the file (it holds: inputs, targets)" in _error(
        "nolabels.npz", tmp_path
    )
    assert "one class index per sample, got shape (3, 3)" in _error("onehot.npz", tmp_path)
    assert "class indices >= 0, found -1" in _error("negative.npz", tmp_path)
    assert "cannot read it as .npz" in _error("broken.npz", tmp_path)
    assert _error("gone.npz", tmp_path).startswith("labelled data file not found: ")
    assert _error("gone.py:load", tmp_path).startswith("labelled data file not found: ")
    assert _error("loaders.py:raises", tmp_path) == (
        "labelled data loader loaders.py:raises raised ValueError: the archive is gone"
    )
    assert "returned int; expected (inputs, labels)" in _error("loaders.py:scalar", tmp_path)
    assert "has no function 'missing'" in _error("loaders.py:missing", tmp_path)
    assert "cannot import bad_import.py: ModuleNotFoundError" in _error(
        "bad_import.py:load", tmp_path
    )
    said = _error("mnist", tmp_path)
    assert "expected a built-in name (digits, digits-train, digits-test)" in said


def test_samples_must_fit_the_model() -> None:
    digits = labelled_data.load("digits")
    assert labelled_data.fit_inputs(digits, (1, 8, 8)) is digits.inputs
    assert labelled_data.fit_inputs(digits, (64,)).shape == (1797, 64)  # same values, flat
    with pytest.raises(ConfigError, match=r"samples of shape 1x8x8 do not fit the model, which "
                       r"takes 3x32x32 per sample"):  # fmt: skip
        labelled_data.fit_inputs(digits, (3, 32, 32))


def test_accuracy_settings_travel_in_the_trial_key_only_when_given() -> None:
    plain = TrialSpec("resnet18", "identity")
    asked = TrialSpec("resnet18", "identity", measure=MeasureSettings(accuracy="digits"))
    assert asked.measure.accuracy == AccuracySettings("digits")
    assert plain.key != asked.key
    assert TrialSpec("resnet18", "identity", measure=MeasureSettings()).key == plain.key
    again = TrialSpec.from_dict(asked.to_dict())  # JSON round trip (the agent's checkpoint)
    assert again == asked and again.key == asked.key
    table = MeasureSettings.from_dict({"accuracy": {"data": "digits"}})
    assert table.accuracy == AccuracySettings("digits")
    with pytest.raises(ConfigError, match="unknown accuracy setting 'batchsize'"):
        MeasureSettings.from_dict({"accuracy": {"data": "digits", "batchsize": 4}})
    with pytest.raises(ConfigError, match="accuracy data must be a non-empty string"):
        MeasureSettings(accuracy="")
