"""The DLAS optimisation axis: model transforms applied before compilation.

A trial's ``optimisation`` names one transform (``TrialSpec.optimisation``):

- ``none``            the model as built (the baseline every other row is compared with)
- ``fp16``            weights and input cast to float16 (``Module.half()``)
- ``int8``            post-training static quantisation, torch FX graph mode, calibrated on a
                      small synthetic set (``CALIBRATION_BATCHES`` seeded ``randn`` batches shaped
                      like the example: no data set can be downloaded, and for throughput only the
                      quantisation ranges matter, not accuracy). Engine ``x86`` where torch has
                      it, else ``qnnpack`` (ARM boards). Conv/Linear layers become int8 kernels.
- ``prune-l1-R``      global L1 unstructured pruning of ratio R (0 < R < 1) over every Conv/Linear
                      (and attention projection) weight with ``torch.nn.utils.prune``, made
                      permanent: weights are zeroed, shapes unchanged.
- ``prune-ch-R``      L1 channel (filter) pruning of ratio R with the ``torch-pruning`` package,
                      which removes channels physically and follows the dependency graph (residual
                      adds, BatchNorm, depthwise convs). timm models keep their classifier (the
                      output stays ``num_classes`` wide); block stacks have every conv pruned, so a
                      conv block's output gets narrower. Attention stacks have no prunable channel
                      (the embedding is tied to the input by the residual) and timm ViTs need
                      head-aware pruning: both fail with ``UnsupportedOptimisation``.

Every transform returns *facts* recorded with the result (``TrialResult.extra["optimisation"]``):
sizes before/after, the achieved compression ratio and the expected speed-up.

**Expected speed-up (DLAS).** ``expected_speedup = compression_ratio = size_before / size_after``,
where size is the bytes of parameters and buffers for ``fp16`` / ``int8``, the number of non-zero
parameters for ``prune-l1-R`` (about ``1 / (1 - R)``) and the number of parameters for
``prune-ch-R`` (about ``1 / (1 - R)^2``, since both sides of an inner conv shrink). The achieved
speed-up is ``T_opt / T_none`` (same model, compiler, batch, device) and "% of expected" is
``100 * achieved / expected`` (see ``percent_of_expected``).

Which compilers take which transform (``check_supported``): fp16 and pruning go everywhere the
torch model goes. The int8 model is a torch-quantised graph: eager (identity), TorchScript,
inductor (torch.compile graph-breaks around the quantised kernels and runs them eagerly) and the
ONNX route (the exporter writes QLinear ops that ONNX Runtime and OpenVINO run) take it -- all
checked on the conv block. TVM's ``torch.export`` import fails on the packed quantised params, and
TensorRT takes explicit Q/DQ graphs only, so those trials fail with a clear error up front instead
of deep inside an importer. fp16 into untuned/tuned TVM fails in TVM's importer on the conv block
(mixed float16/float32 operands after BatchNorm): a failed trial with TVM's message. int8 is CPU
only (torch's quantised kernels).

torch / torch-pruning are imported inside functions only (``ngb.core`` stays light).
"""

from __future__ import annotations

import math
import re
import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ngb.core.errors import ConfigError, UnknownNameError, UnsupportedOptimisation, one_line

if TYPE_CHECKING:
    import torch
    from ngb.core.model_types import Example
    from torch import nn

#: what an optimisation reports (``TrialResult.extra["optimisation"]``): names, counts, ratios
Facts = dict[str, str | float | None]

NONE = "none"
KINDS = ("none", "fp16", "int8", "prune-l1", "prune-ch")
VALID_FORMS = (
    "none, fp16, int8, prune-l1-R, prune-ch-R (R a ratio with 0 < R < 1, e.g. prune-l1-0.5)"
)
CALIBRATION_BATCHES = 8
CALIBRATION_SEED = 4321
_PRUNE = re.compile(r"\A(prune-l1|prune-ch)-(\d*\.?\d+)\Z")


@dataclass(frozen=True)
class Optimisation:
    """A parsed optimisation name: its kind and, for pruning, the ratio."""

    name: str
    kind: str
    ratio: float | None = None


def parse(name: object) -> Optimisation:
    """Parse an optimisation name; anything else is a ``ConfigError`` listing the valid forms."""
    if not isinstance(name, str):
        raise ConfigError(f"optimisation must be a string; valid: {VALID_FORMS}")
    text = name.strip()
    if text in ("none", "fp16", "int8"):
        return Optimisation(text, text)
    match = _PRUNE.match(text)
    if match:
        ratio = float(match.group(2))
        if not 0.0 < ratio < 1.0:
            raise ConfigError(f"optimisation {name!r}: ratio must be 0 < R < 1, got {ratio:g}")
        return Optimisation(text, match.group(1), ratio)
    raise ConfigError(f"unknown optimisation {name!r}; valid: {VALID_FORMS}")


def check_supported(name: str, compiler: str, device: str = "cpu") -> None:
    """Raise ``UnsupportedOptimisation`` for a combination known not to work (before any work)."""
    opt = parse(name)
    if opt.kind != "int8":
        return
    if device != "cpu":
        raise UnsupportedOptimisation(
            f"int8 (torch post-training quantisation) runs on CPU only, not {device!r}"
        )
    # Each compiler declares what it refuses (``Compiler.unsupported_optimisations``).
    from ngb.core.compilers import compiler_class

    try:
        refused = compiler_class(compiler).unsupported_optimisations
    except UnknownNameError:  # not ours to judge: the trial fails on the name later
        refused = {}
    reason = refused.get(opt.kind)
    if reason:
        raise UnsupportedOptimisation(f"int8 is unsupported with {compiler}: {reason}")


def apply(
    model: nn.Module | None, example: Example | None, name: str
) -> tuple[nn.Module | None, Example | None]:
    """The hook ``ngb.core.measure`` calls: the transformed model and example."""
    model, example, _ = apply_with_facts(model, example, name)
    return model, example


def apply_with_facts(
    model: nn.Module | None, example: Example | None, name: str
) -> tuple[nn.Module | None, Example | None, Facts]:
    """Transform ``model`` (in place where the transform allows) and report what changed.

    ``model`` may be None (compilers that need no model, e.g. ``noop``): the name is validated
    and the facts say nothing was applied.
    """
    opt = parse(name)
    if opt.kind == NONE:
        return model, example, {"name": NONE, "kind": NONE}
    if model is None or example is None:
        return model, example, {"name": opt.name, "kind": opt.kind, "applied": False}
    start = time.perf_counter()
    before = _size(model)
    if opt.kind == "fp16":
        model, example = _to_fp16(model, example)
        facts: Facts = {"dtype": "float16"}
        size_unit = "bytes"
    elif opt.kind == "int8":
        model, facts = _quantise_int8(model, example)
        size_unit = "bytes"
    elif opt.kind == "prune-l1":
        assert opt.ratio is not None
        facts = _prune_unstructured(model, opt.ratio)
        size_unit = "nonzero parameters"
    else:
        assert opt.ratio is not None
        facts = _prune_channels(model, example, opt.ratio)
        size_unit = "parameters"
    facts["size_unit"] = size_unit
    after = _size(model)
    key = {"bytes": "bytes", "parameters": "params"}.get(size_unit, "nonzero")
    ratio = before[key] / after[key] if after[key] else math.inf
    facts.update(
        name=opt.name,
        kind=opt.kind,
        ratio=opt.ratio,
        applied=True,
        apply_s=time.perf_counter() - start,
        params_before=before["params"],
        params_after=after["params"],
        nonzero_before=before["nonzero"],
        nonzero_after=after["nonzero"],
        bytes_before=before["bytes"],
        bytes_after=after["bytes"],
        compression_ratio=ratio,
        expected_speedup=ratio,
    )
    return model, example, facts


def percent_of_expected(achieved: float, expected: float) -> float:
    """DLAS's "% of expected speed-up": ``100 * achieved / expected``."""
    if not expected or not math.isfinite(expected) or expected <= 0:
        raise ConfigError(f"expected speed-up must be a finite number > 0, got {expected!r}")
    return 100.0 * achieved / expected


# ---------------------------------------------------------------- sizes


def _tensors(value: object) -> list[torch.Tensor]:
    """Tensors inside a state-dict value (quantised Linear keeps a (weight, bias) tuple)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _tensors(v)]
    return []


def _size(model: nn.Module) -> dict[str, int]:
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


def _to_fp16(model: nn.Module, example: Example) -> tuple[nn.Module, Example]:
    from ngb.core.model_build import map_inputs

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


def _quantise_int8(model: nn.Module, example: Example) -> tuple[nn.Module, Facts]:
    with warnings.catch_warnings():
        # torch.ao.quantization warns that it is deprecated (torchao's pt2e flow replaces it);
        # it is still the route that ships with torch 2.15, so keep the agent's stderr readable.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        return _quantise_fx(model, example)


def _quantise_fx(model: nn.Module, example: Example) -> tuple[nn.Module, Facts]:
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
        for _ in range(CALIBRATION_BATCHES):
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
        "calibration_batches": CALIBRATION_BATCHES,
        "quantised_modules": n_int8,
    }


def _prunable_weights(model: nn.Module) -> list[tuple[nn.Module, str]]:
    from torch import nn

    found: list[tuple[nn.Module, str]] = []
    for module in model.modules():
        if isinstance(module, nn.Conv1d | nn.Conv2d | nn.Conv3d | nn.Linear):
            found.append((module, "weight"))
        elif isinstance(module, nn.MultiheadAttention) and module.in_proj_weight is not None:
            found.append((module, "in_proj_weight"))  # out_proj is an nn.Linear, found above
    return found


def _prune_unstructured(model: nn.Module, ratio: float) -> Facts:
    from torch.nn.utils import prune

    targets = _prunable_weights(model)
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


def _prune_channels(model: nn.Module, example: Example, ratio: float) -> Facts:
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
