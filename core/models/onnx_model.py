"""The handle for a model given as an ONNX file (``OnnxModel``).

It lives in its own module, below both ``ngb.core.models.model_types`` (which names it in the
``Model`` alias) and ``ngb.core.models.model_build`` (which builds it), so neither imports the
other: the type names stay a leaf that the compilers and the model modules can all import.
onnxruntime is imported only when a reference output is asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ngb.core.models.model_inputs import InputSpec

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import torch


class OnnxModel:
    """A model given as an ONNX file: compilers that take ONNX read ``path`` directly."""

    def __init__(self, path: Path, inputs: tuple[InputSpec, ...]) -> None:
        self.onnx_path = Path(path)
        self.inputs = inputs

    def eval(self) -> OnnxModel:
        return self

    def __repr__(self) -> str:
        return f"OnnxModel({self.onnx_path.name})"

    def reference(self, example: Sequence[torch.Tensor]) -> npt.NDArray[np.generic]:
        """First output from ONNX Runtime's CPU provider, graph optimisations off."""
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = ort.InferenceSession(
            str(self.onnx_path), opts, providers=["CPUExecutionProvider"]
        )
        feeds = {
            i.name: t.detach().cpu().numpy() for i, t in zip(self.inputs, example, strict=True)
        }
        return session.run(None, feeds)[0]
