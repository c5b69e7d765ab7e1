"""``identity``: torch eager, the paper's baseline every speed-up is measured against.

Also home of the small torch helpers the other torch-based backends (torchscript, inductor)
share: moving a model to the target device, binding the example batch, and a ``Compiled`` whose
``run`` is one synchronous call under ``torch.inference_mode``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ngb.core.compilers.base import (
    CompileContext,
    Compiled,
    Compiler,
    CompilerConfig,
)
from ngb.core.errors import CompilerUnavailable, ConfigError


def check_bool(name: str, value: Any) -> None:
    """Reject truthy look-alikes ("false" is a non-empty string, hence truthy)."""
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be true or false; got {value!r}")


def torch_device(device: str) -> Any:
    """The torch device for a ``CompileContext.device``; unavailable CUDA is a clear error."""
    import torch

    if device == "cuda":
        if not torch.cuda.is_available():
            raise CompilerUnavailable("device 'cuda' asked for, but torch sees no CUDA GPU")
        return torch.device("cuda")
    if device != "cpu":
        raise ConfigError(f"device must be cpu or cuda; got {device!r}")
    return torch.device("cpu")


def apply_threads(ctx: CompileContext) -> int:
    """Honour ``ctx.threads`` for torch's intra-op pool; return the count in effect."""
    import torch

    if ctx.threads:
        torch.set_num_threads(ctx.threads)
    return torch.get_num_threads()


def prepare(
    model: Any, example: Any, ctx: CompileContext, *, channels_last: bool = False
) -> tuple[Any, tuple[Any, ...]]:
    """Eval-mode model and example inputs on the target device (optionally channels-last)."""
    import torch
    from ngb.core.compilers.onnx_export import example_tuple

    device = torch_device(ctx.device)
    model = model.eval().to(device)
    inputs = tuple(t.to(device) for t in example_tuple(example))
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        inputs = tuple(
            t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t for t in inputs
        )
    return model, inputs


#: what every torch-based backend records (the default ``Compiler.versions`` reads these)
TORCH_VERSIONS = {"torch": ("torch",)}


class TorchCompiled(Compiled):
    """A torch callable bound to its inputs; ``run`` waits for the GPU so timings are real."""

    def __init__(self, fn: Callable[..., Any], inputs: tuple[Any, ...], device: str) -> None:
        super().__init__()
        import torch

        self._fn = fn
        self._inputs = inputs
        self._sync = torch.cuda.synchronize if device == "cuda" else None
        self._inference_mode = torch.inference_mode

    def run(self) -> Any:
        with self._inference_mode():
            out = self._fn(*self._inputs)
        if self._sync is not None:
            self._sync()
        return out

    def close(self) -> None:
        self._fn = None  # type: ignore[assignment]
        self._inputs = ()


@dataclass(frozen=True)
class IdentityConfig(CompilerConfig):
    channels_last: bool = False  # NHWC memory format for 4-D inputs (often faster conv kernels)

    def __post_init__(self) -> None:
        check_bool("channels_last", self.channels_last)


class IdentityCompiler(Compiler[IdentityConfig]):
    name = "identity"
    description = "torch eager (the baseline)"
    devices = ("cpu", "cuda")
    requires = ("torch",)
    version_packages = TORCH_VERSIONS

    def compile(self, model: Any, example: Any, ctx: CompileContext) -> Compiled:
        with ctx.phase("compile"):
            threads = apply_threads(ctx)
            model, inputs = prepare(model, example, ctx, channels_last=self.config.channels_last)
        compiled = TorchCompiled(model, inputs, ctx.device)
        compiled.extra.update(torch_threads=threads, channels_last=self.config.channels_last)
        return compiled
