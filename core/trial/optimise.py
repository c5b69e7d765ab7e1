"""The DLAS optimisation axis: model transforms applied before compilation.

A trial's ``optimisation`` names one transform (``TrialSpec.optimisation``):

- ``none``            the model as built (the baseline every other row is compared with)
- ``fp16``            weights and input cast to float16 (``Module.half()``)
- ``int8``            post-training static quantisation, torch FX graph mode, calibrated on a
                      small synthetic set (``CALIBRATION_BATCHES`` seeded ``randn`` batches
                      shaped like the example, ``ngb.core.models.compress``: the ranges only, no
                      accuracy: the "uncalibrated" row of DLAS). Engine ``x86`` where torch has
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

**On a DLAS zoo model** (``ngb.core.models.dlas_zoo``: a small CNN trained on real digits, which
carries its recipe): ``prune-l1-R`` and ``prune-ch-R`` are fine-tuned steps of the DLAS ladder
(``ngb.core.models.dlas_ladder``), not one-shot cuts; ``int8-cal`` is ``int8`` calibrated on real
training samples instead of ``randn`` (``int8`` stays the uncalibrated row beside it);
``elbow-prune-l1`` / ``elbow-prune-ch`` are the ladder's elbow, chosen by its stated rule; and
every optimisation's facts carry ``dlas``: the step's eager top-1 on the 540 held-out digits,
paired against the trained model's, and for pruning the technique's whole curve. These three
names refuse any other model (``UnsupportedOptimisation``): they need the model's own data.

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
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ngb.core.base.errors import ConfigError, UnknownNameError, UnsupportedOptimisation

if TYPE_CHECKING:
    from ngb.core.models.model_types import Example
    from torch import nn

#: what an optimisation reports (``TrialResult.extra["optimisation"]``): names, counts, ratios
Facts = dict[str, object]

NONE = "none"
KINDS = ("none", "fp16", "int8", "int8-cal", "prune-l1", "prune-ch", "elbow-prune-l1",
         "elbow-prune-ch")  # fmt: skip
#: kinds that only a DLAS zoo model can take: they need the model's own training data
ZOO_ONLY = ("int8-cal", "elbow-prune-l1", "elbow-prune-ch")
VALID_FORMS = (
    "none, fp16, int8, prune-l1-R, prune-ch-R (R a ratio with 0 < R < 1, e.g. prune-l1-0.5); "
    "for a DLAS zoo model also int8-cal, elbow-prune-l1, elbow-prune-ch"
)
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
    if text in ("none", "fp16", "int8", *ZOO_ONLY):
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
    if opt.kind not in ("int8", "int8-cal"):
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
    reason = refused.get("int8")
    if reason:
        raise UnsupportedOptimisation(f"{opt.name} is unsupported with {compiler}: {reason}")


def apply(
    model: nn.Module | None, example: Example | None, name: str
) -> tuple[nn.Module | None, Example | None]:
    """The hook ``ngb.core.trial.measure`` calls: the transformed model and example."""
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
    from ngb.core.models import compress, dlas_ladder, dlas_zoo

    tag = dlas_zoo.tag_of(model)
    if opt.kind in ZOO_ONLY and tag is None:
        raise UnsupportedOptimisation(
            f"{opt.name} needs a model that carries its own training data: a DLAS zoo model "
            "(source = ngb.core.models.dlas_zoo:digits_net)"
        )
    start = time.perf_counter()
    before = compress.model_size(model)
    dlas: dict[str, object] | None = None
    if opt.kind == "fp16":
        model, example = compress.to_fp16(model, example)
        facts: Facts = {"dtype": "float16"}
        size_unit = "bytes"
    elif opt.kind in ("int8", "int8-cal"):
        real = dlas_zoo.calibration_inputs() if opt.kind == "int8-cal" else None
        model, facts = compress.quantise_int8(model, example, real)
        size_unit = "bytes"
    elif tag is not None:  # a zoo model: pruning is a fine-tuned step of the DLAS ladder
        model, facts, dlas = dlas_ladder.ladder_step(model, opt.kind, opt.ratio, tag)
        size_unit = "nonzero parameters" if opt.kind.endswith("prune-l1") else "parameters"
    elif opt.kind == "prune-l1":
        assert opt.ratio is not None
        facts = compress.prune_unstructured(model, opt.ratio)
        size_unit = "nonzero parameters"
    else:
        assert opt.ratio is not None
        facts = compress.prune_channels(model, example, opt.ratio)
        size_unit = "parameters"
    if tag is not None:
        dlas = dlas_ladder.step_facts(tag, opt.name, opt.kind, opt.ratio, model, dlas)
    facts["size_unit"] = size_unit
    after = compress.model_size(model)
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
    if dlas is not None:
        facts["dlas"] = dlas  # type: ignore[assignment]  # a nested record (see _dlas_facts)
    return model, example, facts


def percent_of_expected(achieved: float, expected: float) -> float:
    """DLAS's "% of expected speed-up": ``100 * achieved / expected``."""
    if not expected or not math.isfinite(expected) or expected <= 0:
        raise ConfigError(f"expected speed-up must be a finite number > 0, got {expected!r}")
    return 100.0 * achieved / expected
