"""The paper's synthetic blocks (Table V): a conv block and a multi-head-attention block.

- conv block: ``Conv2d 3x3 (c -> c, padding 1, bias) -> BatchNorm2d(c) -> ReLU``;
  parameters per block = 9c^2 + c (conv) + 2c (BN affine) = 9c^2 + 3c
  (64/96/128/256 -> 37,056 / 83,232 / 147,840 / 590,592).
- MHA block: ``MultiheadAttention(d) -> residual add -> LayerNorm(d, no affine) -> ReLU`` over a
  sequence of 10 tokens; parameters per block = 4d^2 + 4d (Q/K/V/out projections with biases; the
  LayerNorm carries no affine parameters, which is what makes the paper's counts come out exactly:
  128/256/384/512 -> 66,048 / 263,168 / 591,360 / 1,050,624).

Choices the paper leaves open, recorded here:

- **Heads**: ``width // 64`` heads (at least 1), i.e. a head size of 64 as in ViT/DeiT, the
  transformers the paper benchmarks; 128/256/384/512 -> 2/4/6/8 heads. For a width that is not a
  multiple of 64 the count steps down to the nearest divisor of the width. Heads do not change the
  parameter count, only how the attention matmuls are split.
- **Conv spatial size**: 56x56 by default, the feature-map size at which ResNet's first stage runs
  its 64-channel 3x3 convolutions on a 224x224 image, so a conv64 block costs what the equivalent
  layer of a real network costs. ``TrialSpec.input_size`` overrides it.
- **Sequence length**: 10 tokens (the paper's); for MHA blocks ``TrialSpec.input_size`` overrides
  the sequence length (there is no image side to override).
- MHA blocks are exported to ONNX through the unfused composite attention (standard linear and
  scaled-dot-product ops): eager torch's fused fast path has no ONNX translation.
- The conv weights use Kaiming-normal init (fan-in, ReLU gain) so activations keep their scale
  through a deep stack; with PyTorch's default init they shrink layer by layer and a deep stack
  would compare compilers on near-zero outputs.

torch is imported inside the factory functions only (``ngb.core`` stays importable without it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ngb.core.base.errors import ConfigError, UnknownNameError

if TYPE_CHECKING:
    from torch import nn

BLOCK_KINDS = ("conv", "mha")
CONV_SPATIAL = 56
MHA_SEQ_LEN = 10
HEAD_DIM = 64

# The paper's Table V: block widths and the exact per-block parameter counts.
PAPER_BLOCK_PARAMS: dict[str, dict[int, int]] = {
    "conv": {64: 37_056, 96: 83_232, 128: 147_840, 256: 590_592},
    "mha": {128: 66_048, 256: 263_168, 384: 591_360, 512: 1_050_624},
}
PAPER_BLOCK_WIDTHS: dict[str, tuple[int, ...]] = {
    k: tuple(v) for k, v in PAPER_BLOCK_PARAMS.items()
}


def mha_heads(width: int) -> int:
    """Number of attention heads for an embedding of ``width`` (head size 64, must divide width)."""
    heads = max(1, width // HEAD_DIM)
    while width % heads:
        heads -= 1
    return heads


def block_params(kind: str, width: int) -> int:
    """Closed-form parameter count of one block (checked against the built module in tests)."""
    check_block(kind, width)
    return 9 * width * width + 3 * width if kind == "conv" else 4 * width * width + 4 * width


def check_block(kind: str, width: int | None, depth: int = 1) -> None:
    if kind not in BLOCK_KINDS:
        raise UnknownNameError("block", kind, BLOCK_KINDS)
    if not isinstance(width, int) or isinstance(width, bool) or width <= 0:
        raise ConfigError(f"block {kind!r} needs a positive integer width, got {width!r}")
    if not isinstance(depth, int) or isinstance(depth, bool) or depth <= 0:
        raise ConfigError(f"block depth must be a positive integer, got {depth!r}")


def block_input_shape(kind: str, width: int, batch: int = 1, size: int | None = None) -> tuple:
    """Input shape of a block stack: ``(B, C, S, S)`` for conv, ``(B, L, D)`` for MHA."""
    check_block(kind, width)
    if kind == "conv":
        side = size or CONV_SPATIAL
        return (batch, width, side, side)
    return (batch, size or MHA_SEQ_LEN, width)


def _classes() -> tuple[type[nn.Module], type[nn.Module]]:
    """Define the block classes on first use, so torch is imported lazily.

    They are published as ``ngb.core.models.blocks.ConvBlock`` / ``MhaBlock`` (module
    ``__getattr__``) with matching ``__qualname__``, so pickle, copy and torch.save find them like
    module-level classes (the agent may hand a model to a child process).
    """
    global _CLASSES
    if _CLASSES is not None:
        return _CLASSES
    import torch
    from torch import nn

    class ConvBlock(nn.Module):
        """Conv 3x3 (same padding, bias) -> BatchNorm -> ReLU; keeps the shape (B, C, H, W)."""

        def __init__(self, width: int) -> None:
            super().__init__()
            self.conv = nn.Conv2d(width, width, kernel_size=3, padding=1, bias=True)
            self.bn = nn.BatchNorm2d(width)
            self.relu = nn.ReLU()
            nn.init.kaiming_normal_(self.conv.weight, mode="fan_in", nonlinearity="relu")

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.relu(self.bn(self.conv(x)))

    class MhaBlock(nn.Module):
        """Self-attention -> residual add -> LayerNorm (no affine) -> ReLU on (B, L, D)."""

        def __init__(self, width: int) -> None:
            super().__init__()
            self.attn = nn.MultiheadAttention(width, mha_heads(width), batch_first=True)
            self.norm = nn.LayerNorm(width, elementwise_affine=False)
            self.relu = nn.ReLU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if torch.onnx.is_in_onnx_export():
                attended = self._composite_attention(x)
            else:
                attended, _ = self.attn(x, x, x, need_weights=False)
            return self.relu(self.norm(x + attended))

        def _composite_attention(self, x: torch.Tensor) -> torch.Tensor:
            # In eval + no_grad, nn.MultiheadAttention runs the fused
            # aten::_native_multi_head_attention, which the TorchScript-based ONNX exporter cannot
            # translate. Same weights, same math, spelled in standard ops (linear, SDPA).
            attn = self.attn
            seq_first = x.transpose(0, 1)
            out, _ = nn.functional.multi_head_attention_forward(
                seq_first, seq_first, seq_first, attn.embed_dim, attn.num_heads,
                attn.in_proj_weight, attn.in_proj_bias, None, None, False, 0.0,
                attn.out_proj.weight, attn.out_proj.bias,
                training=False, need_weights=False,
            )  # fmt: skip
            return out.transpose(0, 1)

    for cls in (ConvBlock, MhaBlock):
        cls.__qualname__ = cls.__name__
        cls.__module__ = __name__
    _CLASSES = (ConvBlock, MhaBlock)
    return _CLASSES


_CLASSES: tuple[type[nn.Module], type[nn.Module]] | None = None


def __getattr__(name: str) -> type[nn.Module]:
    if name == "ConvBlock":
        return _classes()[0]
    if name == "MhaBlock":
        return _classes()[1]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_block_stack(kind: str, width: int, depth: int = 1) -> nn.Sequential:
    """``depth`` blocks of ``kind`` in an ``nn.Sequential``; weights come from the global RNG."""
    check_block(kind, width, depth)
    from torch import nn

    conv_block, mha_block = _classes()
    cls = conv_block if kind == "conv" else mha_block
    return nn.Sequential(*(cls(width) for _ in range(depth)))
