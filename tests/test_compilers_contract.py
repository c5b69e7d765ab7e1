"""The contract every registered compiler keeps, parametrized over the registry.

A new compiler is covered by registering it: it must say whether it can run here (and why not),
compile a tiny conv net and a tiny MHA net that agree with torch eager, run a timed loop, reject
bad options with a ConfigError, and keep ``available()`` free of heavy imports.

The tiny models are built here, not via ``ngb.core.models.models``, so this test pins the compilers
alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import fields
from typing import Any

import numpy as np
import pytest
from ngb.core.base.errors import ConfigError
from ngb.core.compilers import CompileContext, compiler_class, list_compilers

NAMES = list_compilers()

# (rtol, atol) against torch eager in fp32. OpenVINO on CPUs with AVX512-BF16/AMX infers in bf16
# by default (its "performance" precision), hence its loose bound; TVM schedules reorder sums.
TOLERANCE: dict[str, tuple[float, float]] = {
    "identity": (0.0, 0.0),
    "torchscript": (1e-5, 1e-5),
    "inductor": (1e-4, 1e-4),
    "onnxruntime": (1e-4, 1e-4),
    "openvino": (5e-2, 5e-2),
    "tvm": (1e-3, 1e-3),
    "tvm-ms": (1e-3, 1e-3),
}
DEFAULT_TOLERANCE = (1e-3, 1e-3)

# Options that keep a compiler quick enough for a unit test (tuning budgets and the like);
# a renamed option fails loudly with a ConfigError.
FAST_OPTIONS: dict[str, dict[str, Any]] = {
    "tvm-ms": {
        "max_trials_global": 16,
        "num_trials_per_iter": 8,
        "reuse_database": False,
        "cost_model": "random",
    },
}

# (compiler, model) cases too slow for the CI subset; one tiny case per compiler stays fast.
SLOW_CASES = {("tvm", "mha"), ("tvm-ms", "conv"), ("tvm-ms", "mha")}

HEAVY_MODULES = ("torch", "onnx", "onnxruntime", "openvino", "tvm", "tensorrt", "timm")


def load(name: str) -> type:
    """The compiler class; a backend whose module is not written yet is skipped, not failed."""
    try:
        return compiler_class(name)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("ngb.core.compilers."):
            pytest.skip(f"{name}: module {exc.name} is not written yet")
        raise


def tiny_model(kind: str) -> tuple[Any, Any]:
    """A small conv net (conv-bn-relu x2, pool, linear) or MHA block (attn, residual, LN, relu)."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    if kind == "conv":
        model = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.Conv2d(8, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(8, 10),
        )
        # Non-trivial BN statistics, so folding them into the convs is actually exercised.
        for bn in (model[1], model[4]):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 1.5)
        return model.eval(), torch.randn(2, 3, 16, 16)

    class MhaBlock(nn.Module):
        def __init__(self, dim: int = 32) -> None:
            super().__init__()
            self.attn = nn.MultiheadAttention(dim, 4, batch_first=True)
            self.norm = nn.LayerNorm(dim, elementwise_affine=False)

        def forward(self, x: Any) -> Any:
            y, _ = self.attn(x, x, x, need_weights=False)
            return torch.relu(self.norm(x + y))

    return MhaBlock().eval(), torch.randn(2, 10, 32)


def eager_output(model: Any, example: Any) -> np.ndarray:
    import torch

    with torch.inference_mode():
        return model(example).numpy().copy()


def _cases() -> list[Any]:
    cases = []
    for name in NAMES:
        for kind in ("conv", "mha"):
            marks = [pytest.mark.slow] if (name, kind) in SLOW_CASES else []
            cases.append(pytest.param(name, kind, marks=marks, id=f"{name}-{kind}"))
    return cases


@pytest.mark.parametrize(("name", "kind"), _cases())
def test_compiles_runs_and_matches_eager(name: str, kind: str, tmp_path: Any) -> None:
    cls = load(name)
    ok, reason = cls.available()
    if not ok:
        assert isinstance(reason, str) and reason.strip()
        pytest.skip(f"{name} unavailable: {reason}")
    if "cpu" not in cls.devices:
        pytest.skip(f"{name} targets {cls.devices} only")
    model, example = tiny_model(kind)
    expected = eager_output(model, example)

    ctx = CompileContext(workdir=tmp_path)
    compiled = cls(FAST_OPTIONS.get(name)).compile(model, example, ctx)
    try:
        out = compiled.output_numpy()
        assert out.shape == expected.shape
        rtol, atol = TOLERANCE.get(name, DEFAULT_TOLERANCE)
        np.testing.assert_allclose(out, expected, rtol=rtol, atol=atol)

        loop = compiled.timed_loop(min_iters=3, min_duration_s=0.0)
        assert loop.iters >= 3
        assert len(loop.latencies_ns) == loop.iters
        assert loop.elapsed_s > 0 and all(ns > 0 for ns in loop.latencies_ns)
        assert compiled.extra["requests_in_flight"] >= 1
        compiled.drain()  # what a steady-state loop left in flight; the next loop still works
        assert compiled.timed_loop(min_iters=2, min_duration_s=0.0).iters >= 2

        assert compiled.precision in ("fp32", "bf16", "fp16"), "say which precision ran"
        json.dumps(compiled.precision_flags)

        assert "compile" in ctx.phases and ctx.phases["compile"] >= 0
        json.dumps(compiled.extra)  # recorded with the result: must be plain JSON
    finally:
        compiled.close()


@pytest.mark.parametrize("name", NAMES)
def test_available_gives_a_reason_when_not(name: str) -> None:
    ok, reason = load(name).available()
    assert isinstance(ok, bool) and isinstance(reason, str)
    if not ok:
        assert reason.strip(), "an unavailable compiler must say why"
        assert "\n" not in reason.strip(), "the reason is one line for the operator"


@pytest.mark.parametrize("name", NAMES)
def test_available_imports_no_heavy_library(name: str) -> None:
    """Listing what can run on a device must not pay for importing torch/TVM/OpenVINO."""
    load(name)
    code = textwrap.dedent(
        f"""
        import json, sys
        from ngb.core.compilers import compiler_class
        ok, reason = compiler_class({name!r}).available()
        heavy = sorted(m for m in {HEAVY_MODULES!r} if m in sys.modules)
        print(json.dumps({{"ok": ok, "heavy": heavy}}))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["heavy"] == [], f"{name}.available() imported {report['heavy']}"


@pytest.mark.parametrize("name", NAMES)
def test_default_config_is_valid_and_serialisable(name: str) -> None:
    compiler = load(name)()
    json.dumps(compiler.config.to_dict())


@pytest.mark.parametrize("name", NAMES)
def test_unknown_option_names_the_valid_ones(name: str) -> None:
    cls = load(name)
    with pytest.raises(ConfigError) as err:
        cls({"no_such_option": 1})
    message = str(err.value)
    assert "no_such_option" in message
    for field in fields(cls.Config):
        assert field.name in message


class _Nonsense:
    """A value no option can sensibly accept."""

    def __repr__(self) -> str:
        return "<nonsense>"


@pytest.mark.parametrize("name", NAMES)
def test_every_option_rejects_a_nonsense_value(name: str) -> None:
    cls = load(name)
    for field in fields(cls.Config):
        with pytest.raises(ConfigError):
            cls({field.name: _Nonsense()})


# ----------------------------------------------------------------------------- self-description


@pytest.mark.parametrize("name", NAMES)
def test_config_type_is_the_generic_parameter(name: str) -> None:
    from ngb.core.compilers.base import Compiler, CompilerConfig

    cls = load(name)
    assert issubclass(cls, Compiler)
    assert cls.Config is not CompilerConfig, f"{name}: declare it as Compiler[XConfig]"
    assert type(cls().config) is cls.Config


@pytest.mark.parametrize("name", NAMES)
def test_declared_precisions_and_optimisations_are_known(name: str) -> None:
    from ngb.core.compilers.base import PRECISIONS
    from ngb.core.trial.optimise import KINDS

    cls = load(name)
    assert set(cls.precisions) <= set(cls.devices), "precisions for a device it cannot target"
    for device in cls.devices:
        supported = cls.supported_precisions(device)
        assert supported[0] == "default" and set(supported) <= set(PRECISIONS)
    for kind, reason in cls.unsupported_optimisations.items():
        assert kind in KINDS and kind != "none"
        assert reason.strip() and "\n" not in reason


@pytest.mark.parametrize("name", NAMES)
def test_declared_unsupported_errors_are_classified_unsupported(name: str) -> None:
    from ngb.core.trial.measure import classify_error

    for error_name in load(name).unsupported_errors:
        assert error_name.isidentifier()
        exc = type(error_name, (Exception,), {})("something went wrong")
        assert classify_error(exc) == "unsupported", error_name


@pytest.mark.parametrize("name", NAMES)
def test_declared_version_packages_are_recorded(name: str) -> None:
    from ngb.core.trial.versions import dist_version, library_versions

    cls = load(name)
    recorded = library_versions()
    for label, dists in cls.version_packages.items():
        installed = dist_version(*dists)
        assert recorded.get(label) == installed, label
        if installed and cls.available()[0]:
            assert cls().versions().get(label), f"{name} does not report {label}"
