"""The layers the algorithm axis puts in a model (``ngb.core.models.algorithms``): a convolution as
im2col + GEMM, the same with a CSR or block-CSR weight, and a Linear with a sparse weight.

Each computes what the layer it replaces computed (the trial's verify pass checks it). The
im2col is written with slices and ``stack`` rather than ``F.unfold``, so exporters and importers
see ops they all know, and the convolution arithmetic is the plain one: the input padded once,
the k x k shifted, strided views of it stacked into a [N, C*k*k, Ho*Wo] column matrix, one
matmul with the weight as a [O, C*k*k] matrix. The column rows are channel-major then kernel
row then kernel column, which is the order of ``weight.reshape(O, -1)``.

torch is imported at module level: this module is only imported where a model is rewritten.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn


def why_kept(conv: nn.Conv2d) -> str | None:
    """Why ``conv`` keeps its own convolution under every algorithm; None: it can be rewritten."""
    if conv.groups != 1:
        return f"grouped convolution (groups={conv.groups})"
    if isinstance(conv.padding, str):
        return f"padding {conv.padding!r}"
    if conv.padding_mode != "zeros":
        return f"padding mode {conv.padding_mode!r}"
    return None


def conv_for(conv: nn.Conv2d, kind: str, block: int | None) -> nn.Module:
    """The module that runs ``conv`` as ``kind`` (gemm, or sparse: CSR, or BSR with ``block``)."""
    if kind == "gemm":
        return Im2colConv2d(conv)
    return SparseConv2d(conv, block)


def linear_for(linear: nn.Linear, block: int | None) -> nn.Module:
    """The Linear with its weight sparse: CSR, or BSR with ``block`` x ``block`` blocks."""
    return SparseLinear(linear, block)


class _Columns(nn.Module):
    """The geometry of one convolution and its im2col."""

    def __init__(self, conv: nn.Conv2d) -> None:
        super().__init__()
        self.kernel = tuple(conv.kernel_size)
        self.stride = tuple(conv.stride)
        self.dilation = tuple(conv.dilation)
        pad_h, pad_w = (int(p) for p in conv.padding)  # why_kept refused a string
        self.padding = (pad_w, pad_w, pad_h, pad_h)  # F.pad: the last dimension first
        self.out_channels = conv.out_channels
        self.bias = None if conv.bias is None else nn.Parameter(conv.bias.detach().clone())

    def columns(self, x: torch.Tensor) -> tuple[torch.Tensor, int, int]:
        """[N, C*kh*kw, Ho*Wo] and the output's height and width."""
        (kh, kw), (sh, sw), (dh, dw) = self.kernel, self.stride, self.dilation
        if any(self.padding):
            x = F.pad(x, self.padding)
        n, c, h, w = x.shape
        out_h = (h - dh * (kh - 1) - 1) // sh + 1
        out_w = (w - dw * (kw - 1) - 1) // sw + 1
        if kh == kw == sh == sw == 1:  # a 1x1 convolution's columns are the input itself
            return x.reshape(n, c, h * w), out_h, out_w
        views = [
            x[:, :, i * dh : i * dh + sh * (out_h - 1) + 1 : sh,
              j * dw : j * dw + sw * (out_w - 1) + 1 : sw]
            for i in range(kh)
            for j in range(kw)
        ]  # fmt: skip
        cols = torch.stack(views, dim=2)  # [N, C, kh*kw, Ho, Wo]
        return cols.reshape(n, c * kh * kw, out_h * out_w), out_h, out_w

    def finish(self, out: torch.Tensor, n: int, out_h: int, out_w: int) -> torch.Tensor:
        """[N, O, Ho*Wo] plus the bias, as [N, O, Ho, Wo]."""
        if self.bias is not None:
            out = out + self.bias.reshape(1, -1, 1)
        return out.reshape(n, self.out_channels, out_h, out_w)


class Im2colConv2d(_Columns):
    """A Conv2d as im2col + one dense matrix multiply."""

    def __init__(self, conv: nn.Conv2d) -> None:
        super().__init__(conv)
        self.weight = nn.Parameter(conv.weight.detach().reshape(conv.out_channels, -1).clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cols, out_h, out_w = self.columns(x)
        return self.finish(torch.matmul(self.weight, cols), x.shape[0], out_h, out_w)


def sparse_matrix(dense: torch.Tensor, block: int | None) -> torch.Tensor:
    """``dense`` (2-D) in CSR, or in block CSR with ``block`` x ``block`` blocks after padding
    its sides with zeros up to a multiple of the block (the padded rows/columns store nothing
    in CSR terms but their blocks' zeros, which is the format's real cost)."""
    dense = dense.detach().contiguous()
    with warnings.catch_warnings():  # "sparse CSR support is in beta": said once per layer
        warnings.simplefilter("ignore", UserWarning)
        if block is None:
            return dense.to_sparse_csr()
        rows, cols = dense.shape
        padded = F.pad(dense, (0, -cols % block, 0, -rows % block))
        return padded.to_sparse_bsr((block, block))


class _SparseMatmul(nn.Module):
    """Multiplies a stored sparse [O, K] matrix with dense [K, M] columns."""

    weight: torch.Tensor  # a buffer: a sparse tensor is no trainable Parameter

    def __init__(self, dense: torch.Tensor, block: int | None) -> None:
        super().__init__()
        self.rows, self.inner = dense.shape
        self.register_buffer("weight", sparse_matrix(dense, block))
        self.padded_inner = int(self.weight.shape[1])

    def product(self, cols: torch.Tensor) -> torch.Tensor:
        """[O, M] = W @ cols, ``cols`` [K, M]."""
        if self.padded_inner != self.inner:
            cols = F.pad(cols, (0, 0, 0, self.padded_inner - self.inner))
        out = self.weight @ cols
        return out[: self.rows] if out.shape[0] != self.rows else out


class SparseConv2d(_Columns):
    """A Conv2d as im2col + a sparse (CSR or BSR) weight times the dense columns."""

    def __init__(self, conv: nn.Conv2d, block: int | None) -> None:
        super().__init__(conv)
        self.matmul = _SparseMatmul(conv.weight.reshape(conv.out_channels, -1), block)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cols, out_h, out_w = self.columns(x)
        n, k, length = cols.shape
        flat = cols.permute(1, 0, 2).reshape(k, n * length)  # one product for the whole batch
        out = self.matmul.product(flat).reshape(self.out_channels, n, length).permute(1, 0, 2)
        return self.finish(out, n, out_h, out_w)


class SparseLinear(nn.Module):
    """A Linear with its weight in CSR or BSR: y = (W @ x^T)^T + b."""

    def __init__(self, linear: nn.Linear, block: int | None) -> None:
        super().__init__()
        self.matmul = _SparseMatmul(linear.weight, block)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        out = self.matmul.product(x.reshape(-1, x.shape[-1]).t()).t()
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*lead, self.matmul.rows)
