"""The DLAS transforms on real (small) torch models, and their hook into the measurement."""

from __future__ import annotations

import pytest
from ngb.core.base.errors import ConfigError
from ngb.core.models.models import create_model
from ngb.core.records.types import MeasureSettings, TrialSpec
from ngb.core.trial import optimise
from ngb.core.trial.measure import UnsupportedOptimisation, run_trial

from tests.installed import needs

torch = pytest.importorskip("torch")
pytestmark = needs("torch_pruning")

QUICK = MeasureSettings(
    warmup_iters=1,
    warmup_s=0.0,
    min_iters=2,
    min_duration_s=0.0,
    repetitions=2,
    workers=1,
    quiet_check_s=0.0,
)


def _conv(width: int = 16, depth: int = 2, batch: int = 2):
    return create_model(TrialSpec(model="conv", compiler="identity", width=width, depth=depth,
                                  batch=batch, input_size=16))  # fmt: skip


def test_parse_valid_and_invalid_names() -> None:
    assert optimise.parse("prune-l1-0.5") == optimise.Optimisation("prune-l1-0.5", "prune-l1", 0.5)
    assert optimise.parse("prune-ch-.3").ratio == pytest.approx(0.3)
    assert optimise.parse("int8").kind == "int8"
    with pytest.raises(ConfigError, match=r"unknown optimisation 'int4'; valid: none, fp16"):
        optimise.parse("int4")
    with pytest.raises(ConfigError, match="0 < R < 1"):
        optimise.parse("prune-l1-1.5")
    with pytest.raises(ConfigError, match="valid"):
        optimise.parse("prune-l1-")


def test_unstructured_pruning_reaches_the_ratio() -> None:
    model, example = _conv()
    params = sum(p.numel() for p in model.parameters())
    model, example, facts = optimise.apply_with_facts(model, example, "prune-l1-0.5")
    weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    zeros = sum(int((w == 0).sum()) for w in weights)
    total = sum(w.numel() for w in weights)
    assert zeros / total == pytest.approx(0.5, abs=1 / total)
    assert facts["sparsity"] == pytest.approx(zeros / total)
    assert sum(p.numel() for p in model.parameters()) == params  # shapes unchanged
    assert not any(name.endswith("_orig") for name, _ in model.named_parameters())  # permanent
    assert facts["expected_speedup"] == pytest.approx(
        facts["nonzero_before"] / facts["nonzero_after"]
    )
    assert 1.9 < facts["expected_speedup"] < 2.0  # biases and BN stay dense


def test_channel_pruning_removes_channels() -> None:
    model, example = _conv(width=16, depth=2)
    before = sum(p.numel() for p in model.parameters())
    model, example, facts = optimise.apply_with_facts(model, example, "prune-ch-0.5")
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [c.out_channels for c in convs] == [8, 8]
    assert convs[0].in_channels == 16  # the input keeps its shape
    after = sum(p.numel() for p in model.parameters())
    assert facts["params_before"] == before and facts["params_after"] == after
    assert facts["compression_ratio"] == pytest.approx(before / after)
    with torch.inference_mode():
        assert model(example).shape == (2, 8, 16, 16)


def test_channel_pruning_refuses_attention_stacks() -> None:
    model, example = create_model(TrialSpec(model="mha", compiler="identity", width=64))
    with pytest.raises(UnsupportedOptimisation, match="no prunable channels"):
        optimise.apply(model, example, "prune-ch-0.3")


def test_fp16_casts_weights_and_input() -> None:
    model, example = _conv()
    model, example, facts = optimise.apply_with_facts(model, example, "fp16")
    assert {p.dtype for p in model.parameters()} == {torch.float16}
    assert example.dtype == torch.float16
    assert facts["compression_ratio"] == pytest.approx(2.0, rel=0.01)
    with torch.inference_mode():
        assert torch.isfinite(model(example)).all()


def test_int8_runs_close_to_fp32() -> None:
    model, example = _conv(width=16, depth=2)
    with torch.inference_mode():
        reference = model(example)
    quantised, example, facts = optimise.apply_with_facts(model, example, "int8")
    with torch.inference_mode():
        out = quantised(example)
    assert out.shape == reference.shape
    scale = float(reference.abs().max())
    assert float((out - reference).abs().max()) < 0.1 * scale  # loose: int8 rounding
    assert facts["dtype"] == "int8" and facts["quantised_modules"] >= 2
    assert 3.0 < facts["compression_ratio"] <= 4.0  # fp32 -> int8 weights, fp32 scales left


def test_check_supported_routes() -> None:
    optimise.check_supported("int8", "onnxruntime")
    optimise.check_supported("fp16", "tvm")
    with pytest.raises(UnsupportedOptimisation, match="int8 is unsupported with tvm"):
        optimise.check_supported("int8", "tvm")
    with pytest.raises(UnsupportedOptimisation, match="CPU only"):
        optimise.check_supported("int8", "identity", "cuda")


def test_run_trial_records_facts_and_fails_cleanly() -> None:
    spec = TrialSpec(model="conv", compiler="identity", width=8, batch=2, input_size=8,
                     optimisation="prune-l1-0.5", measure=QUICK)  # fmt: skip
    result = run_trial(spec)
    assert result.ok, result.error
    facts = result.extra["optimisation"]
    assert facts["name"] == "prune-l1-0.5" and facts["expected_speedup"] > 1.5
    refused = run_trial(TrialSpec(model="conv", compiler="tvm", width=8, batch=2,
                                  optimisation="int8", measure=QUICK))  # fmt: skip
    assert refused.status == "failed" and refused.error_kind == "unsupported"
    assert "int8 is unsupported with tvm" in refused.error


@pytest.mark.slow
def test_channel_pruning_on_timm_models() -> None:
    pytest.importorskip("timm")
    model, example = create_model(TrialSpec(model="resnet18", compiler="identity", batch=1))
    model, example, facts = optimise.apply_with_facts(model, example, "prune-ch-0.3")
    with torch.inference_mode():
        assert model(example).shape == (1, 1000)  # the classifier is kept whole
    assert 1.6 < facts["compression_ratio"] < 2.4  # ~1 / 0.7^2 on the inner convs
    vit, vit_example = create_model(
        TrialSpec(model="deit3_small_patch16_224", compiler="identity", batch=1)
    )
    with pytest.raises(UnsupportedOptimisation, match="prune-ch: torch-pruning cannot prune"):
        optimise.apply(vit, vit_example, "prune-ch-0.3")
