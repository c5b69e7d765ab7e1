"""What building any model needs, below both model modules: the fixed seeds, the check of a model
name, and the parameter and MAC counters of a torch module.

``ngb.core.models.models`` (the paper's models and blocks, and the dispatcher for every model)
imports ``ngb.core.models.model_build`` (users' own models), and both need these; keeping them here
is what lets ``models`` import ``model_build`` at module level with no loop back (issue 22).
``models`` re-exports every name, so callers keep importing them from there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ngb.core.base.errors import ConfigError, UnknownNameError
from ngb.core.models.blocks import BLOCK_KINDS

if TYPE_CHECKING:
    from ngb.core.models.model_types import Array, Example
    from torch import nn

# Fixed seeds: weights and example inputs are the same on every machine and every run.
WEIGHT_SEED = 0
EXAMPLE_SEED = 1234


def resolve_model(name: str) -> str:
    """Check that ``name`` is a block kind or a timm model without building anything.

    Returns the name unchanged; raises ``UnknownNameError`` listing close timm names otherwise.
    """
    if not isinstance(name, str) or not name:
        raise ConfigError(f"model name must be a non-empty string, got {name!r}")
    if name in BLOCK_KINDS:
        return name
    import timm

    if timm.is_model(name):
        return name
    raise UnknownNameError("model", name, [*BLOCK_KINDS, *timm.list_models()])


def count_macs(model: nn.Module, example: Example) -> int:
    """MACs of one forward pass (FLOPs / 2) as PyTorch's FlopCounterMode counts them.

    Grad mode is left on: in eval + no_grad, ``nn.MultiheadAttention`` takes a fused fast path the
    counter does not see, which would report 0 for the attention projections.
    """
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    args = tuple(example) if isinstance(example, tuple | list) else (example,)
    with FlopCounterMode(display=False) as counter, torch.enable_grad():
        model(*args)
    return int(counter.get_total_flops()) // 2


def count_torch_params(model: nn.Module) -> int:
    """Parameters of a torch module (``ngb.core.models.models.count_params`` also takes ONNX
    models)."""
    return int(sum(p.numel() for p in model.parameters()))


def to_numpy(out: object) -> Array:
    """A model's or a compiled model's output as one numpy array: the first of a sequence or a
    mapping, a tensor detached to float32 on the CPU (the reference and the compiled output
    compared the same way)."""
    import numpy as np

    if isinstance(out, list | tuple):
        out = out[0]
    if isinstance(out, dict):
        out = next(iter(out.values()))
    if hasattr(out, "detach"):
        out = out.detach().float().cpu().numpy()
    elif hasattr(out, "numpy") and not isinstance(out, np.ndarray):
        out = out.numpy()
    return np.asarray(out)
