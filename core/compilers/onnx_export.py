"""One ONNX export for every ONNX-consuming backend (ONNX Runtime, OpenVINO, TensorRT, TVM).

All of them must read the *same* graph so their figures compare runtimes, not exporters. We use
the TorchScript-based exporter (``dynamo=False``) at opset 17 with static shapes: it exports every
timm family the paper uses in seconds, while the dynamo exporter is slower and still misses some
ops. Shapes are static because ngb compiles per batch size, exactly as the paper does.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ngb.core.base.errors import NgbError, one_line
from ngb.core.models.model_build import OnnxModel

if TYPE_CHECKING:
    import torch
    from ngb.core.models.model_types import Example, Model

DEFAULT_OPSET = 17
#: torch.onnx's "this op has no ONNX rule" errors: unsupported, for every ONNX-consuming backend
EXPORT_UNSUPPORTED_ERRORS = ("UnsupportedOperatorError", "OnnxExporterError")


def example_tuple(example: Example) -> tuple[torch.Tensor, ...]:
    """The example batch as a tuple of positional inputs (a bare tensor is the common case)."""
    if isinstance(example, tuple):
        return example
    if isinstance(example, list):
        return tuple(example)
    return (example,)


def input_names(example: Example) -> list[str]:
    """Stable input names: ``input`` for one tensor, ``input0``, ``input1``... for several;
    a user's model declares its own (``ngb.core.models.model_build.NamedInputs``)."""
    names = getattr(example, "names", None)
    if names:
        return list(names)
    n = len(example_tuple(example))
    return ["input"] if n == 1 else [f"input{i}" for i in range(n)]


def export_onnx(
    model: Model,
    example: Example,
    path: str | Path,
    *,
    opset: int = DEFAULT_OPSET,
    output_names: Sequence[str] | None = None,
) -> Path:
    """Export ``model`` (eval mode, no grad) for ``example`` to ``path``; return the path.

    Raises ``NgbError`` with the exporter's message when the model cannot be exported, so a trial
    fails with a readable reason (e.g. an op without an ONNX symbolic) instead of a long traceback.
    """
    import torch

    if isinstance(model, OnnxModel):  # a user's ONNX file: every runtime reads it as given
        return model.onnx_path
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    args = example_tuple(example)
    model = model.eval()
    # nn.MultiheadAttention takes a fused fast path in eval/no-grad mode that has no ONNX
    # symbolic; the exported graph must use the plain ops instead.
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        # The TorchScript exporter is deprecated upstream and tracing warns about Python-level
        # shape checks; neither is actionable per trial, so keep the agent's log readable.
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", category=torch.jit.TracerWarning)
            warnings.simplefilter("ignore", category=DeprecationWarning)
            warnings.simplefilter("ignore", category=FutureWarning)
            torch.onnx.export(
                model,
                args,
                str(path),
                dynamo=False,
                opset_version=opset,
                input_names=input_names(example),
                output_names=list(output_names or ["output"]),
                do_constant_folding=True,
            )
    except Exception as exc:  # the exporter raises many types; keep its message, one line
        raise NgbError(f"ONNX export failed: {one_line(exc)}") from exc
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
    if not path.is_file():
        raise NgbError(f"ONNX export wrote no file at {path}")
    return path


def onnx_output_names(path: str | Path) -> list[str]:
    """Graph output names of an exported model (reads the graph without its weights)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return [o.name for o in model.graph.output]
