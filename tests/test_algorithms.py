"""The algorithm axis (issue 48): names, the rewritten layers computing what they replace, the
facts a sparse format's real size comes from, and every compiler saying what it runs or why not.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from ngb.core.base.errors import ConfigError, UnsupportedTrial
from ngb.core.compilers import compiler_class, list_compilers
from ngb.core.models import algorithms
from ngb.core.models.algorithm_layers import Im2colConv2d, SparseConv2d, SparseLinear
from ngb.core.records import algorithm_names
from ngb.core.records.types import MeasureSettings, TrialSpec
from ngb.core.trial.measure import run_trial
from torch import nn

NAMES = ("gemm", "sparse-csr", "sparse-bsr", "sparse-bsr-8")


def _model() -> nn.Module:
    """Every conv geometry the im2col must get right, a grouped conv it must leave alone, and a
    classifier; 70 % of the weights zeroed, as after pruning."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 12, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(12, 12, 3, stride=2, padding=2, dilation=2, bias=False),
        nn.Conv2d(12, 12, 3, padding=1, groups=3),
        nn.Conv2d(12, 10, (1, 3), padding=(0, 1)),
        nn.Conv2d(10, 6, 1),
        nn.Flatten(),
        nn.Linear(6 * 5 * 5, 7),
    ).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Conv2d | nn.Linear):
                module.weight.mul_((torch.rand_like(module.weight) > 0.7).float())
    return model


@pytest.mark.parametrize("name", NAMES)
def test_each_algorithm_computes_what_the_model_as_built_does(name: str) -> None:
    model = _model()
    x = torch.randn(2, 3, 10, 10)
    with torch.no_grad():
        expected = model(x)
        rewritten, facts = algorithms.apply(copy.deepcopy(model), name)
        got = rewritten(x)
    assert got.shape == expected.shape
    assert torch.allclose(got, expected, atol=1e-5), float((got - expected).abs().max())
    # the grouped conv keeps its own convolution and is named; the others are rewritten
    assert facts["kept"] == ["3: grouped convolution (groups=3)"]
    assert facts["layers_changed"] == (5 if name.startswith("sparse") else 4)
    kinds = {type(m) for m in rewritten.modules()}
    assert (Im2colConv2d in kinds) == (name == "gemm")
    assert (SparseConv2d in kinds and SparseLinear in kinds) == name.startswith("sparse")
    assert nn.Conv2d in kinds  # the grouped one


def test_csr_stores_its_values_column_indices_and_row_pointers() -> None:
    """The stored bytes are the format's real ones: 4 per value, 8 per column index, 8 per row
    pointer (torch's int64 indices) -- so 70 % pruning stores less than the dense matrix by far
    less than the 3.3x its non-zeros promise."""
    torch.manual_seed(1)
    layer = nn.Linear(40, 30, bias=False)
    with torch.no_grad():
        layer.weight.mul_((torch.rand_like(layer.weight) > 0.7).float())
    nnz = int((layer.weight != 0).sum())
    model = nn.Sequential(layer)
    _, facts = algorithms.apply(model, "sparse-csr")
    assert facts["stored_bytes"] == nnz * 4 + nnz * 8 + (30 + 1) * 8
    assert facts["dense_bytes"] == 30 * 40 * 4
    assert facts["weight_nonzero"] == nnz and facts["weight_elements"] == 1200
    assert facts["expected_speedup_nnz"] == pytest.approx(1200 / nnz)
    assert facts["expected_speedup_bytes"] == pytest.approx(4800 / facts["stored_bytes"])
    assert facts["expected_speedup_bytes"] < facts["expected_speedup_nnz"] / 2


def test_block_sparse_pads_to_whole_blocks_and_stores_each_touched_block_whole() -> None:
    weight = torch.zeros(6, 10)
    weight[0, 0] = 1.0  # one non-zero: one 4x4 block stored
    weight[5, 9] = 2.0  # in the padded corner block
    layer = nn.Linear(10, 6, bias=False)
    with torch.no_grad():
        layer.weight.copy_(weight)
    model = nn.Sequential(layer)
    x = torch.randn(3, 10)
    with torch.no_grad():
        expected = model(x)
        rewritten, facts = algorithms.apply(model, "sparse-bsr")
        assert torch.allclose(rewritten(x), expected)
    stored = rewritten[0].matmul.weight
    assert stored.shape == (8, 12)  # padded to whole 4x4 blocks
    blocks = 2
    assert facts["stored_bytes"] == blocks * 16 * 4 + blocks * 8 + (8 // 4 + 1) * 8
    assert facts["block"] == 4


def test_a_model_without_a_layer_to_rewrite_is_refused_with_the_reason() -> None:
    model = nn.Sequential(nn.Conv2d(4, 4, 3, groups=4), nn.ReLU())
    with pytest.raises(UnsupportedTrial, match="no plain Conv2d layer.*groups=4"):
        algorithms.apply(model, "gemm")


@pytest.mark.parametrize(
    "bad",
    [
        None,
        3,
        math.nan,
        "",
        "gem",
        "sparse-bsr-1",
        "sparse-bsr-65",
        "sparse-bsr-x",
        "GEMM",
        "sparse-bsr-\u0664",
    ],  # an Arabic-Indic four is no block side
)
def test_bad_names_get_one_line_listing_the_valid_forms(bad: object) -> None:
    with pytest.raises(ConfigError) as caught:
        algorithm_names.parse(bad)
    assert "\n" not in str(caught.value)
    assert "sparse-bsr" in str(caught.value) or "block side" in str(caught.value)


def test_one_computation_has_one_name_and_one_key() -> None:
    names = {algorithm_names.parse(n).name for n in ("sparse-bsr", "sparse-bsr-4", "sparse-bsr-04")}
    assert names == {"sparse-bsr-4"}
    keys = {
        TrialSpec(model="conv", width=8, compiler="identity", algorithm=n).key
        for n in ("sparse-bsr", "sparse-bsr-4", " sparse-bsr-04")
    }
    assert len(keys) == 1


def test_the_default_keeps_every_trial_key_as_it_was() -> None:
    """Stored trials stay resumable: a spec that names no algorithm keys as before the axis."""
    spec = TrialSpec(model="conv", width=8, compiler="identity")
    assert (
        spec.key == TrialSpec(model="conv", width=8, compiler="identity", algorithm="default").key
    )
    assert "algorithm" in spec.to_dict()
    other = TrialSpec(model="conv", width=8, compiler="identity", algorithm="gemm")
    assert other.key != spec.key
    assert other.label == "conv8x1/identity+gemm/b1"
    assert TrialSpec.from_dict(other.to_dict()) == other
    assert TrialSpec(model="conv", width=8, compiler="identity", algorithm="sparse-bsr").key != (
        TrialSpec(model="conv", width=8, compiler="identity", algorithm="sparse-bsr-8").key
    )


@pytest.mark.parametrize("name", list_compilers(include_internal=True))
def test_every_compiler_runs_or_refuses_each_algorithm_with_a_reason(name: str) -> None:
    cls = compiler_class(name)
    for kind in algorithm_names.KINDS:
        runs, refused = cls.algorithms.get(kind), cls.algorithm_refusals.get(kind)
        assert (runs is None) != (refused is None), f"{name}: {kind} must be run xor refused"
        assert (runs or refused or "").strip(), f"{name}: {kind} says nothing"
    assert "default" in cls.algorithms


def _trial(compiler: str, algorithm: str) -> TrialSpec:
    return TrialSpec(
        model="conv",
        width=8,
        compiler=compiler,
        algorithm=algorithm,
        input_size=16,
        measure=MeasureSettings(repetitions=2, min_iters=2, min_duration_s=0.01),
    )


def test_a_refused_pair_fails_up_front_with_the_compilers_reason() -> None:
    result = run_trial(_trial("tvm", "sparse-csr"))
    assert result.status == "failed" and result.error_kind == "unsupported"
    assert "TVM 0.27's Relax has no sparse operator" in (result.error or "")
    assert result.params is None  # refused before the model was built


def test_a_sparse_trial_is_checked_against_the_model_as_built() -> None:
    result = run_trial(_trial("identity", "sparse-csr"))
    assert result.ok, result.error
    facts = result.extra["algorithm"]
    assert facts["name"] == "sparse-csr" and facts["layers_changed"] >= 1
    assert "CSR" in facts["runs"]
    # the verify pass compared the CSR product with eager's convolution
    assert result.max_abs_err is not None and result.max_abs_err < 1e-4
