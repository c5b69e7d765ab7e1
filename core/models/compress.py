"""The transforms behind ``ngb.core.trial.optimise``'s names, and the sizes they are judged by.

``model_size`` counts parameters, non-zero parameters and bytes of a model's state;
``to_fp16``, ``quantise_int8`` (torch FX post-training static quantisation, calibrated on real
samples where given, else on seeded ``randn`` batches shaped like the example),
``prune_unstructured`` (global L1 over Conv/Linear and attention projections, made permanent)
and ``prune_channels`` (torch-pruning, the classifier left whole) change a model in place or
return a new one, with facts for the record. ``ngb.core.trial.optimise`` names them for a trial;
``ngb.core.models.dlas_ladder`` uses the same cuts between its fine-tuning steps. torch and
torch-pruning are imported inside functions (``ngb.core`` stays light).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np
from ngb.core.base.errors import UnsupportedOptimisation, one_line

if TYPE_CHECKING:
    import torch
    from ngb.core.models.model_types import Example
    from torch import nn

#: what a transform reports (``TrialResult.extra["optimisation"]``): names, counts, ratios
Facts = dict[str, object]

CALIBRATION_BATCHES = 8
CALIBRATION_SEED = 4321
CALIBRATION_REAL_BATCH = 32


# ---------------------------------------------------------------- sizes


def _tensors(value: object) -> list[torch.Tensor]:
    """Tensors inside a state-dict value (quantised Linear keeps a (weight, bias) tuple)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _tensors(v)]
    return []


def model_size(model: nn.Module) -> dict[str, int]:
    """Parameters, non-zero parameters and bytes of a model's state (weights and buffers)."""
    import torch

    params = nonzero = nbytes = 0
    for value in model.state_dict().values():
        for t in _tensors(value):
            nbytes += t.numel() * t.element_size()
            if t.is_quantized:
                params += t.numel()
                nonzero += int(torch.count_nonzero(t.int_repr()))
            elif t.is_floating_point():
                params += t.numel()
                nonzero += int(torch.count_nonzero(t))
    # BatchNorm's running stats count as state but not as parameters for an fp32 model; keep the
    # parameter count the usual one where the model still has ordinary parameters.
    plain = sum(p.numel() for p in model.parameters())
    if plain:
        params = plain
        nonzero = int(sum(int(torch.count_nonzero(p)) for p in model.parameters()))
    return {"params": params, "nonzero": nonzero, "bytes": nbytes}


# ---------------------------------------------------------------- transforms


def to_fp16(model: nn.Module, example: Example) -> tuple[nn.Module, Example]:
    from ngb.core.models.model_build import map_inputs

    model = model.half()
    # several inputs keep their names; integer inputs (token ids) stay integers
    example = map_inputs(example, lambda t: t.half() if t.is_floating_point() else t)
    return model, example


def _args(example: Example) -> tuple[torch.Tensor, ...]:
    """Positional inputs as a plain tuple (one tensor, or a user model's ``NamedInputs``)."""
    return tuple(example) if isinstance(example, tuple | list) else (example,)


def _quant_engine() -> str:
    import torch

    engines = torch.backends.quantized.supported_engines
    for engine in ("x86", "fbgemm", "qnnpack"):
        if engine in engines:
            return engine
    raise UnsupportedOptimisation(f"int8: torch has no quantised engine here ({engines})")


def quantise_int8(
    model: nn.Module, example: Example, real: np.ndarray | None = None
) -> tuple[nn.Module, Facts]:
    with warnings.catch_warnings():
        # torch.ao.quantization warns that it is deprecated (torchao's pt2e flow replaces it);
        # it is still the route that ships with torch 2.15, so keep the agent's stderr readable.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        return _quantise_fx(model, example, real)


def _quantise_fx(
    model: nn.Module, example: Example, real: np.ndarray | None
) -> tuple[nn.Module, Facts]:
    """``real``: calibration samples from the model's training data (``int8-cal``); without
    them, seeded ``randn`` batches shaped like the example (``int8``: only the ranges)."""
    import torch
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    args = _args(example)
    if any(getattr(a, "device", None) is not None and a.device.type != "cpu" for a in args):
        raise UnsupportedOptimisation("int8 (torch post-training quantisation) runs on CPU only")
    engine = _quant_engine()
    torch.backends.quantized.engine = engine
    try:
        prepared = prepare_fx(
            model.eval(), get_default_qconfig_mapping(engine), example_inputs=args
        )
    except Exception as exc:  # FX cannot trace every model (data-dependent control flow)
        raise UnsupportedOptimisation(f"int8: FX cannot trace this model: {exc}") from None
    generator = torch.Generator().manual_seed(CALIBRATION_SEED)
    with torch.inference_mode():
        for begin in range(0, len(real) if real is not None else 0, CALIBRATION_REAL_BATCH):
            assert real is not None
            prepared(
                torch.from_numpy(np.ascontiguousarray(real[begin : begin + CALIBRATION_REAL_BATCH]))
            )
        for _ in range(CALIBRATION_BATCHES if real is None else 0):
            # random floats like the example's; integer inputs (token ids) are reused as given
            prepared(
                *(
                    torch.randn(a.shape, generator=generator, dtype=a.dtype)
                    if a.is_floating_point()
                    else a
                    for a in args
                )
            )
    quantised = convert_fx(prepared)
    # torch.ao.nn.quantized.* and the fused torch.ao.nn.intrinsic.quantized.* (e.g. ConvReLU2d)
    n_int8 = sum(1 for m in quantised.modules() if ".quantized" in type(m).__module__)
    return quantised, {
        "dtype": "int8",
        "engine": engine,
        "method": "torch FX post-training static quantisation",
        "calibration": "synthetic" if real is None else "real",
        "calibration_batches": CALIBRATION_BATCHES
        if real is None
        else -(-len(real) // CALIBRATION_REAL_BATCH),
        "calibration_samples": None if real is None else len(real),
        "quantised_modules": n_int8,
    }


def prunable_weights(model: nn.Module) -> list[tuple[nn.Module, str]]:
    from torch import nn

    found: list[tuple[nn.Module, str]] = []
    for module in model.modules():
        if isinstance(module, nn.Conv1d | nn.Conv2d | nn.Conv3d | nn.Linear):
            found.append((module, "weight"))
        elif isinstance(module, nn.MultiheadAttention) and module.in_proj_weight is not None:
            found.append((module, "in_proj_weight"))  # out_proj is an nn.Linear, found above
    return found


def prune_unstructured(model: nn.Module, ratio: float) -> Facts:
    from torch.nn.utils import prune

    targets = prunable_weights(model)
    if not targets:
        raise UnsupportedOptimisation("prune-l1: the model has no Conv/Linear weights to prune")
    prune.global_unstructured(targets, pruning_method=prune.L1Unstructured, amount=ratio)
    for module, name in targets:
        prune.remove(module, name)  # make the zeros permanent: a plain Parameter again
    total = sum(getattr(m, n).numel() for m, n in targets)
    zeros = sum(int((getattr(m, n) == 0).sum()) for m, n in targets)
    return {
        "method": "torch.nn.utils.prune global L1 unstructured",
        "pruned_tensors": len(targets),
        "sparsity": zeros / total,
    }


def prune_channels(model: nn.Module, example: Example, ratio: float) -> Facts:
    import torch_pruning as tp

    ignored = []
    classifier = getattr(model, "get_classifier", None)
    if callable(classifier):
        head = classifier()
        if head is not None and sum(p.numel() for p in head.parameters()):
            ignored.append(head)
    params_before = sum(p.numel() for p in model.parameters())
    args = _args(example)
    try:
        pruner = tp.pruner.MagnitudePruner(
            model,
            args[0] if len(args) == 1 else args,
            importance=tp.importance.MagnitudeImportance(p=1),
            pruning_ratio=ratio,
            ignored_layers=ignored,
        )
        pruner.step()
        import torch

        with torch.inference_mode():
            model(*args)  # a pruned graph that no longer runs is caught here, not in a compiler
    except Exception as exc:
        raise UnsupportedOptimisation(
            f"prune-ch: torch-pruning cannot prune this model ({one_line(exc)})"
        ) from None
    if sum(p.numel() for p in model.parameters()) == params_before:
        raise UnsupportedOptimisation(
            "prune-ch: no prunable channels (attention embeddings are tied to the input)"
        )
    return {"method": "torch-pruning L1 magnitude channel pruning", "ignored_layers": len(ignored)}
