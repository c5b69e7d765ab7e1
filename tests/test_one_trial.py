"""``ngb measure`` and ``ngb.measure`` build their trial in one place
(``ngb.sweeps.spec.one_trial``): the same arguments give the same ``TrialSpec`` -- every field,
so the same key and the same stored point -- whichever surface a user calls."""

from __future__ import annotations

from pathlib import Path

import ngb
import pytest
from click.testing import CliRunner
from ngb.core.records.types import TrialSpec
from ngb.core.trial import measure as core_measure
from ngb.sweeps.api import notebook as api
from ngb.sweeps.cli import cli


class Built(Exception):
    """Raised where the trial would run: the spec is all these tests want."""

    def __init__(self, spec: TrialSpec) -> None:
        super().__init__(spec.label)
        self.spec = spec


def _stop(spec: TrialSpec, *args: object, **kwargs: object) -> object:
    raise Built(spec)


def _from_cli(args: list[str], monkeypatch: pytest.MonkeyPatch) -> TrialSpec:
    monkeypatch.setattr(core_measure, "run_trial", _stop)
    result = CliRunner().invoke(cli, ["measure", *args])
    assert isinstance(result.exception, Built), result.output
    return result.exception.spec


def _from_api(model: str, kwargs: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> TrialSpec:
    monkeypatch.setattr(api, "_run", _stop)
    with pytest.raises(Built) as built:
        ngb.measure(model, progress=False, **kwargs)  # type: ignore[arg-type]
    return built.value.spec


def test_a_block_with_every_setting_is_one_trial(monkeypatch: pytest.MonkeyPatch) -> None:
    cli_spec = _from_cli(
        ["conv", "-c", "noop", "-b", "2", "--width", "8", "--depth", "2", "--algorithm", "gemm",
         "-o", "compile_s=0.25", "--precision", "fp32", "--repetitions", "3", "--workers", "1",
         "--min-iters", "7", "--no-verify"],
        monkeypatch,
    )  # fmt: skip
    api_spec = _from_api(
        "conv",
        {"compiler": "noop", "batch": 2, "width": 8, "depth": 2, "algorithm": "gemm",
         "options": {"compile_s": 0.25}, "precision": "fp32", "repetitions": 3, "workers": 1,
         "min_iters": 7, "verify": False},
        monkeypatch,
    )  # fmt: skip
    assert api_spec == cli_spec and api_spec.key == cli_spec.key
    assert (cli_spec.measure.repetitions, cli_spec.measure.verify) == (3, False)


def test_your_own_model_file_is_one_trial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mymodel.py").write_text(
        "import torch\n\ndef build(width=4):\n"
        "    return torch.nn.Sequential(torch.nn.Linear(6, width), torch.nn.ReLU())\n"
    )
    model = f"{tmp_path / 'mymodel.py'}:build"
    cli_spec = _from_cli(
        [model, "-c", "identity", "-b", "4", "-k", "width=16", "-i", "x:batch,6"], monkeypatch
    )
    api_spec = _from_api(
        model,
        {"compiler": "identity", "batch": 4, "kwargs": {"width": 16}, "inputs": ["x:batch,6"]},
        monkeypatch,
    )
    assert api_spec == cli_spec and api_spec.key == cli_spec.key
    assert cli_spec.model == "mymodel.py:build" and cli_spec.source is not None
