"""Names for what the model modules and the compilers hand each other (for annotations only).

A model reaches a compiler as a torch module or, for a user's ONNX file, an ``OnnxModel`` handle
(``ngb.core.models.onnx_model``); its example batch is one tensor or a tuple of positional tensors
(``NamedInputs`` is such a tuple). torch is imported for the type checker only, so importing this
module stays as cheap as the rest of ``ngb.core``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import torch
    from ngb.core.models.onnx_model import OnnxModel

#: a model as a compiler receives it
Model: TypeAlias = "torch.nn.Module | OnnxModel"
#: an example batch: one tensor, or positional inputs (``NamedInputs`` is a tuple of tensors)
Example: TypeAlias = "torch.Tensor | tuple[torch.Tensor, ...] | list[torch.Tensor]"
#: a numpy array of any element type (outputs compared between compilers)
Array: TypeAlias = "npt.NDArray[np.generic]"
