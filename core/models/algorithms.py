"""The DLAS algorithm axis: which convolution primitive a trial's model runs (issue 48).

A trial's ``algorithm`` (``TrialSpec.algorithm``) names how its convolutions (and, for the
sparse forms, its fully connected layers) are computed:

- ``default``      the compiler's own choice: the model as built (every trial before this axis).
- ``direct``       the model as built, on a compiler whose own convolution is a direct one and
                   says so (``Compiler.algorithms``): PyTorch's oneDNN convolution, whose
                   primitive log names ``alg:convolution_direct`` on x86; TVM's
                   ``topi.nn.conv2d_nchw`` loop nest, which MetaSchedule tiles when tuned.
                   Runtimes that pick a kernel per shape (ONNX Runtime, OpenVINO, TensorRT)
                   refuse it: ngb cannot make them run a direct convolution.
- ``gemm``         im2col + matrix multiply, written into the graph (``Im2colConv2d``): the
                   input's k x k shifted views stacked into columns, one matmul with the weight
                   as a [out, in*k*k] matrix. Built from slices, stack and matmul only, so every
                   exporter and importer takes it, and the compiler runs the GEMM it is given.
- ``sparse-csr``   the GEMM with the weight matrix in CSR (``torch.sparse_csr``): only the
                   non-zeros are stored and multiplied. Made from the model's real weights
                   (after pruning), so its stored bytes (values, column indices, row pointers)
                   are the model's real sparse size.
- ``sparse-bsr-B`` the same in block CSR with B x B blocks (``sparse-bsr`` names B = 4, and is
                   stored as ``sparse-bsr-4``): a block with any non-zero is stored whole.

Grouped and depthwise convolutions keep their own convolution under every algorithm (an im2col
per group would be another primitive); the facts count them (``kept``). Each algorithm computes
the same function: the trial's verify pass compares it with the model as built (``max_abs_err``).

The facts (``TrialResult.extra["algorithm"]``, ``apply``) carry what the DLAS discussion needs:
how many layers changed, the weights' non-zeros, the model's bytes dense and as stored, and the
expected speed-up two ways: by non-zeros (DLAS's pruning figure) and by stored bytes (what the
format really costs: CSR keeps a column index per value and a row pointer per row).

Its names (``Algorithm``, ``parse``, ``KINDS``) are ``ngb.core.records.algorithm_names``, below the
trial records that carry them. torch is imported inside functions only (``ngb.core`` stays light).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from ngb.core.base.errors import UnsupportedTrial
from ngb.core.records.algorithm_names import SPARSE, Algorithm, parse

if TYPE_CHECKING:
    from torch import nn

#: what an algorithm reports (``TrialResult.extra["algorithm"]``)
Facts = dict[str, object]


def apply(model: nn.Module, name: str) -> tuple[nn.Module, Facts]:
    """Rewrite ``model``'s layers for ``name`` (in place) and report what changed."""
    algorithm = parse(name)
    start = time.perf_counter()
    before = _weights(model)
    changed, kept = 0, list[str]()
    if algorithm.kind in ("gemm", *SPARSE):
        changed, kept = _rewrite(model, algorithm)
    stored = _stored_bytes(model)
    facts: Facts = {
        "name": algorithm.name,
        "kind": algorithm.kind,
        "block": algorithm.block,
        "layers_changed": changed,
        "kept": kept,
        "apply_s": time.perf_counter() - start,
        "dense_bytes": before["bytes"],
        "stored_bytes": stored,
        "weight_elements": before["layer_elements"],
        "weight_nonzero": before["layer_nonzero"],
    }
    facts.update(expected(before, stored))
    return model, facts


def expected(before: dict[str, int], stored: int) -> Facts:
    """The expected speed-up by non-zeros of the rewritten layers' weights (DLAS's pruning
    figure, ~1/(1-R)) and by the model's bytes as stored against dense (the format's real
    cost); inf where nothing is left."""
    elements, nonzero = before["layer_elements"], before["layer_nonzero"]
    return {
        "expected_speedup_nnz": elements / nonzero if nonzero else math.inf,
        "expected_speedup_bytes": before["bytes"] / stored if stored else math.inf,
    }


def _weights(model: nn.Module) -> dict[str, int]:
    """The model's parameter and buffer bytes, and the Conv2d/Linear weights' elements and
    non-zeros (the layers an algorithm can rewrite)."""
    from torch import nn

    total = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    elements = nonzero = 0
    for module in model.modules():
        if isinstance(module, nn.Conv2d | nn.Linear):
            elements += module.weight.numel()
            nonzero += int((module.weight != 0).sum())
    return {"bytes": total, "layer_elements": elements, "layer_nonzero": nonzero}


def _stored_bytes(model: nn.Module) -> int:
    """Bytes the model holds: dense tensors whole, sparse ones by their values and indices."""
    seen: set[int] = set()
    total = 0
    for tensor in (*model.parameters(), *model.buffers()):
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        total += tensor_bytes(tensor)
    return total


def tensor_bytes(tensor: Any) -> int:
    """A tensor's stored bytes: every component of a compressed layout."""
    import torch

    if tensor.layout in (torch.sparse_csr, torch.sparse_bsr):
        parts = (tensor.values(), tensor.col_indices(), tensor.crow_indices())
        return sum(p.numel() * p.element_size() for p in parts)
    return int(tensor.numel() * tensor.element_size())


def _rewrite(model: nn.Module, algorithm: Algorithm) -> tuple[int, list[str]]:
    """Swap every plain Conv2d (and, for sparse, Linear) for its algorithm's module."""
    from ngb.core.models import algorithm_layers
    from torch import nn

    changed, kept = 0, list[str]()
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            if isinstance(child, nn.Conv2d):
                why = algorithm_layers.why_kept(child)
                if why:
                    kept.append(f"{child_name}: {why}")
                    continue
                setattr(
                    parent,
                    child_name,
                    algorithm_layers.conv_for(child, algorithm.kind, algorithm.block),
                )
                changed += 1
            elif isinstance(child, nn.Linear) and algorithm.kind in SPARSE:
                setattr(parent, child_name, algorithm_layers.linear_for(child, algorithm.block))
                changed += 1
    if not changed:
        raise UnsupportedTrial(
            f"algorithm {algorithm.name}: the model has no plain Conv2d"
            + (" or Linear" if algorithm.kind in SPARSE else "")
            + " layer to run with it"
            + (f" ({len(kept)} kept: {kept[0]})" if kept else "")
        )
    return changed, kept


def facts_text(facts: dict[str, object]) -> str:
    """One line for a trial's algorithm facts: what ran, what changed, what it stores."""
    text = f"{facts.get('name')}: {facts.get('runs', '-')}"
    changed = facts.get("layers_changed")
    if changed:
        kept = facts.get("kept") or []
        n_kept = len(kept) if isinstance(kept, list) else 0
        text += f"; {changed} layers rewritten" + (f", {n_kept} kept" if n_kept else "")
    stored, dense = facts.get("stored_bytes"), facts.get("dense_bytes")
    if isinstance(stored, int) and isinstance(dense, int) and stored != dense:
        text += f"; stores {stored:,} B against {dense:,} B dense"
    by_nnz, by_bytes = facts.get("expected_speedup_nnz"), facts.get("expected_speedup_bytes")
    if facts.get("kind") in SPARSE and isinstance(by_nnz, float) and isinstance(by_bytes, float):
        text += f"; expected speed-up x{by_nnz:.3g} by non-zeros, x{by_bytes:.3g} by bytes stored"
    return text
