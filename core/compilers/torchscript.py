"""``torchscript``: ``torch.jit.trace`` + ``torch.jit.freeze`` (+ optional optimize_for_inference).

Tracing is the "export" phase (it records the graph for the bound batch shape); freezing inlines
weights and attributes as constants so the JIT can fold them, which is what makes TorchScript a
graph compiler rather than a serialiser. The profiling executor specialises on the first calls;
those land in the harness's first-call and warm-up phases, not in steady state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ngb.core.base.errors import ConfigError
from ngb.core.compilers.base import (
    CompileContext,
    Compiled,
    Compiler,
    CompilerConfig,
    Style,
)
from ngb.core.compilers.identity import (
    TORCH_ALGORITHMS,
    TORCH_PRECISIONS,
    TORCH_VERSIONS,
    TorchCompiled,
    apply_threads,
    check_bool,
    prepare,
    torch_precision,
)

if TYPE_CHECKING:
    import torch
    from ngb.core.models.model_types import Example, Model
    from ngb.core.models.precision import SavedFlags


@dataclass(frozen=True)
class TorchScriptConfig(CompilerConfig):
    freeze: bool = True  # torch.jit.freeze: weights become constants, enabling folding
    optimize_for_inference: bool = False  # extra passes (conv-bn folding, MKLDNN layouts on CPU)

    def __post_init__(self) -> None:
        check_bool("freeze", self.freeze)
        check_bool("optimize_for_inference", self.optimize_for_inference)
        if self.optimize_for_inference and not self.freeze:
            raise ConfigError(
                "optimize_for_inference needs freeze=true (it works on a frozen module)"
            )


class TorchScriptCompiler(Compiler[TorchScriptConfig]):
    name = "torchscript"
    description = "torch.jit.trace + freeze"
    devices = ("cpu", "cuda")
    requires = ("torch",)
    precisions = TORCH_PRECISIONS
    version_packages = TORCH_VERSIONS
    style = Style((213, 94, 0), "◆", "◇")  # Okabe-Ito vermillion
    short_name = "TS"
    profiler = "torch"
    # the trace records the same aten calls eager makes, sparse products included
    algorithms = TORCH_ALGORITHMS
    algorithm_refusals = {}
    version_libraries = ("torch",)

    def compile(self, model: Model, example: Example, ctx: CompileContext) -> Compiled:
        with torch_precision(ctx) as before:  # flags must be set before tracing/codegen
            return self._build(model, example, ctx, before)

    def _build(
        self, model: Model, example: Example, ctx: CompileContext, restore: SavedFlags
    ) -> Compiled:
        import warnings

        threads = apply_threads(ctx)
        model, inputs = prepare(model, example, ctx)
        # torch >= 2.10 marks the torch.jit API deprecated; the paper benchmarks it regardless.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.jit")
            module, folded = self._script(model, inputs, ctx)
        compiled = TorchCompiled(module, inputs, ctx.device, restore=restore)
        compiled.extra.update(
            {
                "torch_threads": threads,
                "frozen": self.config.freeze,
                "optimize_for_inference": self.config.optimize_for_inference,
                "folded_ops": folded,  # a profile marks the kernels that absorbed them fused
            }
        )
        return compiled

    def _script(
        self, model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], ctx: CompileContext
    ) -> tuple[torch.jit.ScriptModule, dict[str, int]]:
        """The frozen module and what freezing folded away (``_folded``)."""
        import torch

        with ctx.phase("export"), torch.no_grad():
            module = torch.jit.trace(model, inputs, check_trace=False)
        with ctx.phase("compile"), torch.no_grad():
            module = module.eval()
            before = _op_counts(module.inlined_graph)
            if self.config.freeze:
                module = torch.jit.freeze(module)
            if self.config.optimize_for_inference:
                module = torch.jit.optimize_for_inference(module)
            folded = _folded(before, _op_counts(module.inlined_graph))
        return module, folded


def _op_counts(graph: torch.Graph) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in graph.nodes():
        counts[node.kind()] = counts.get(node.kind(), 0) + 1
    return counts


def _folded(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """The operators freezing folded away into others (batch norm, a constant add or scale
    into the convolution before it): how many of each fewer the frozen graph runs."""
    from ngb.core.compilers.profiling import FOLDABLE

    out = {}
    for kind in FOLDABLE:
        gone = sum(n for k, n in before.items() if k.removesuffix("_") == kind) - sum(
            n for k, n in after.items() if k.removesuffix("_") == kind
        )
        if gone > 0:
            out[kind] = gone
    return out
