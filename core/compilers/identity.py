"""``identity``: torch eager, the paper's baseline every speed-up is measured against.

Also home of the small torch helpers the other torch-based backends (torchscript, inductor)
share: moving a model to the target device, binding the example batch, setting torch's precision
flags for the trial (``torch_precision``; see ``ngb.core.models.precision``), and a ``Compiled``
whose ``run`` is one synchronous call under ``torch.inference_mode`` and which records the precision
torch runs at.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ngb.core.base.errors import CompilerUnavailable, ConfigError, UnsupportedTrial
from ngb.core.compilers.base import (
    CompileContext,
    Compiled,
    Compiler,
    CompilerConfig,
    LoopResult,
    Style,
    timed_calls,
)
from ngb.core.models.precision import (
    SavedFlags,
    resolve_torch,
    restore_torch_flags,
    set_torch_flags,
    torch_dtype,
    torch_flags,
)

if TYPE_CHECKING:
    import torch
    from ngb.core.models.model_types import Array, Example, Model

#: what the torch backends can run: strict fp32 or TF32 are flags (TF32 exists on NVIDIA GPUs only),
#: bf16/fp16 cast the model; fp16 convolutions on the CPU are slow or missing in torch, so GPU only
TORCH_PRECISIONS = {
    "cpu": ("default", "fp32", "bf16"),
    "cuda": ("default", "fp32", "tf32", "bf16", "fp16"),
}


def check_bool(name: str, value: object) -> None:
    """Reject truthy look-alikes ("false" is a non-empty string, hence truthy)."""
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be true or false; got {value!r}")


def torch_device(device: str) -> torch.device:
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


def torch_module(model: Model) -> torch.nn.Module:
    """The torch module a torch backend compiles (an ONNX file is refused before the build, by
    ``compilers.check_compiler_takes``; this says so again should one get this far)."""
    from torch import nn

    if not isinstance(model, nn.Module):
        raise UnsupportedTrial(f"a torch backend needs a torch module, not {model!r}")
    return model


def prepare(
    model: Model, example: Example, ctx: CompileContext, *, channels_last: bool = False
) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """Eval-mode model and example inputs on the target device (optionally channels-last),
    cast to bf16/fp16 when the trial asks for it (floating inputs only)."""
    import torch
    from ngb.core.compilers.onnx_export import example_tuple

    device = torch_device(ctx.device)
    model = torch_module(model).eval().to(device)
    inputs = tuple(t.to(device) for t in example_tuple(example))
    dtype = torch_dtype(ctx.precision)
    if dtype is not None:
        model = model.to(dtype)
        inputs = tuple(t.to(dtype) if t.is_floating_point() else t for t in inputs)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        inputs = tuple(
            t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t for t in inputs
        )
    return model, inputs


#: what every torch-based backend records (the default ``Compiler.versions`` reads these)
TORCH_VERSIONS = {"torch": ("torch",)}
# What torch runs for each algorithm (ngb.core.models.algorithms). Its convolution on x86 is
# oneDNN's, whose primitive log (ONEDNN_VERBOSE=1) reads "alg:convolution_direct" with a
# channel-blocked layout (aBcd16b), checked on the 2-core VM for 3x3 and 1x1 convs at batch 1 and 2.
TORCH_DIRECT = "torch's convolution: oneDNN's direct kernel on x86 (alg:convolution_direct)"
TORCH_GEMM = "im2col + torch.matmul (the BLAS GEMM) written into the graph"
TORCH_SPARSE = "im2col + a torch.sparse weight times the dense columns (sparse-dense matmul)"
TORCH_ALGORITHMS = {
    "default": TORCH_DIRECT,
    "direct": TORCH_DIRECT,
    "gemm": TORCH_GEMM,
    "sparse-csr": TORCH_SPARSE.replace("torch.sparse", "CSR"),
    "sparse-bsr": TORCH_SPARSE.replace("torch.sparse", "block-CSR"),
}


@contextlib.contextmanager
def torch_precision(ctx: CompileContext) -> Iterator[SavedFlags]:
    """Set torch's process-wide flags for ``ctx.precision`` (strict fp32 or TF32) for a compile.

    Yields the previous flags, which the ``TorchCompiled`` takes over and puts back on ``close``;
    a compile that fails puts them back at once.
    """
    before = set_torch_flags(ctx.precision)
    try:
        yield before
    except BaseException:
        restore_torch_flags(before)
        raise


class TorchCompiled(Compiled):
    """A torch callable bound to its inputs; ``run`` waits for the GPU so timings are real."""

    def __init__(
        self,
        fn: Callable[..., object],
        inputs: tuple[torch.Tensor, ...],
        device: str,
        restore: SavedFlags | None = None,
    ) -> None:
        super().__init__()
        import torch

        self._fn = fn
        self._inputs = inputs
        self._restore = restore  # torch flags to put back on close
        floating = [t.dtype for t in inputs if t.is_floating_point()]
        self.precision_flags = dict(torch_flags(floating[0] if floating else None))
        self.precision = resolve_torch(self.precision_flags, device)
        self._sync = torch.cuda.synchronize if device == "cuda" else None
        self._inference_mode = torch.inference_mode
        self._group = 1  # GPU loop: calls per CUDA-event group (``group_size``)

    def run(self) -> object:
        with self._inference_mode():
            out = self._fn(*self._inputs)
        if self._sync is not None:
            self._sync()
        return out

    def feed(self, arrays: Sequence[Array]) -> None:
        import numpy as np
        import torch

        with self._inference_mode():  # an input made under inference mode is written there only
            for tensor, array in zip(self._inputs, arrays, strict=True):
                tensor.copy_(torch.from_numpy(np.ascontiguousarray(array)))

    def timed_loop(self, min_iters: int, min_duration_s: float) -> LoopResult:
        # Inference mode entered once around the loop, as a user's own loop has it: entering it
        # per call costs ~2-3 us, which was 2-3 % of a 0.1 ms call (MHA-128 b1: ngb / plain 0.971).
        self.extra["requests_in_flight"] = 1
        fn, inputs = self._fn, self._inputs
        with self._inference_mode():
            if self._sync is not None:
                self.extra["gpu_loop"] = GPU_LOOP
                loop = queued_cuda_calls(fn, inputs, min_iters, min_duration_s, self._group)
                # the next window's groups from this one's call time (warm-up windows set it)
                self._group = group_size(loop.iters, loop.elapsed_s)
                self.extra["gpu_group_calls"] = self._group
                return loop

            def call() -> object:
                return fn(*inputs)

            return timed_calls(call, min_iters, min_duration_s)

    def close(self) -> None:
        self._fn = None  # type: ignore[assignment]
        self._inputs = ()
        if self._restore is not None:
            restore_torch_flags(self._restore)
            self._restore = None


#: groups of calls the GPU loop lets the CPU run ahead: enough to hide the launch of the next call
#: behind the current one; without a bound a CPU far faster than the GPU queues hundreds of calls
#: and a 0.3 s window takes seconds
GPU_QUEUE = 2
#: a group of calls between two CUDA events lasts about this long. An event, its wait and its
#: Python object cost ~5-10 us: one per call cost 10-15 % of a 0.12 ms call (MHA-128 b1 on an
#: H200, ngb / plain loop 0.85); one per 2 ms costs under 0.5 %.
GPU_GROUP_S = 0.002
#: calls a group holds at most (a window still ends within a few ms of its time)
GPU_GROUP_MAX = 256
#: how the GPU loop times (recorded in ``extra["gpu_loop"]``)
GPU_LOOP = (
    "queued calls, one synchronize per window; latencies from CUDA events between groups of "
    "calls (each call: its group's mean)"
)


def group_size(calls: int, elapsed_s: float) -> int:
    """Calls per CUDA-event group for a call that took ``elapsed_s / calls`` in the last window."""
    if calls <= 0 or elapsed_s <= 0:
        return 1
    return max(1, min(GPU_GROUP_MAX, int(GPU_GROUP_S * calls / elapsed_s)))


def queued_cuda_calls(
    fn: Callable[..., object],
    inputs: tuple[torch.Tensor, ...],
    min_iters: int,
    min_duration_s: float,
    group: int = 1,
) -> LoopResult:
    """Time calls on a GPU as a user's loop runs them: queued, one synchronize at the window's
    end. A synchronize after every call (what ``run`` does) leaves the GPU idle while the CPU
    launches the next call, which on launch-bound work (deit3_small b32 on an H100, ~4 ms a
    call) is where ngb read 5-25 % below a plain loop. A CUDA event closes every ``group`` calls;
    the CPU waits for the event ``GPU_QUEUE`` groups back, so it is never far ahead. A call's
    latency is its group's CUDA-event time (from the previous event, the first from the
    window's start) over the calls in it: the GPU's time per call in steady state, launch gaps
    included."""
    import torch

    clock = time.perf_counter_ns
    min_ns = int(min_duration_s * 1e9)
    opened = torch.cuda.Event(enable_timing=True)
    marks: list[torch.cuda.Event] = []
    sizes: list[int] = []
    calls = 0
    start = clock()
    opened.record()
    while calls < min_iters or clock() - start < min_ns:
        if len(marks) >= GPU_QUEUE:  # at most GPU_QUEUE groups ahead: the window ends on time
            marks[-GPU_QUEUE].synchronize()
        for _ in range(group):
            fn(*inputs)
        mark = torch.cuda.Event(enable_timing=True)
        mark.record()
        marks.append(mark)
        sizes.append(group)
        calls += group
    torch.cuda.synchronize()
    elapsed_ns = clock() - start
    latencies: list[int] = []
    previous = opened
    for mark, size in zip(marks, sizes, strict=True):
        latencies.extend([int(previous.elapsed_time(mark) * 1e6 / size)] * size)  # ms -> ns
        previous = mark
    return LoopResult(iters=calls, elapsed_s=elapsed_ns / 1e9, latencies_ns=latencies)


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
    precisions = TORCH_PRECISIONS
    version_packages = TORCH_VERSIONS
    style = Style((230, 159, 0), "●", "○")  # Okabe-Ito orange
    short_name = "eager"
    profiler = "torch"
    algorithms = TORCH_ALGORITHMS
    algorithm_refusals = {}
    version_libraries = ("torch",)

    def compile(self, model: Model, example: Example, ctx: CompileContext) -> Compiled:
        with ctx.phase("compile"), torch_precision(ctx) as before:
            threads = apply_threads(ctx)
            model, inputs = prepare(model, example, ctx, channels_last=self.config.channels_last)
            compiled = TorchCompiled(model, inputs, ctx.device, restore=before)
        compiled.extra.update(
            {"torch_threads": threads, "channels_last": self.config.channels_last}
        )
        return compiled
