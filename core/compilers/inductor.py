"""``inductor``: ``torch.compile`` with the inductor backend, static shapes.

``torch.compile`` is lazy: it only traces and generates code on the first call. So the compile
phase here includes that first call; otherwise the compile time would be ~0 and the harness's
"first call" would hide tens of seconds of code generation (resnet18 takes ~35 s on 2 cores).
Dynamo's caches are reset first so each trial compiles from scratch and does not run into the
recompile limit when a process compiles many models.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ngb.core.base.errors import NgbError
from ngb.core.compilers.base import (
    CompileContext,
    Compiled,
    Compiler,
    CompilerConfig,
    Style,
    choice,
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
    from ngb.core.models.model_types import Example, Model
    from ngb.core.models.precision import SavedFlags

MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclass(frozen=True)
class InductorConfig(CompilerConfig):
    mode: str = "default"  # torch.compile mode
    fullgraph: bool = False  # True: a graph break is an error instead of a fallback to eager
    cache: bool = True  # False: bypass inductor's on-disk FX graph cache (cold compile times)

    def __post_init__(self) -> None:
        choice("mode", self.mode, MODES)
        check_bool("fullgraph", self.fullgraph)
        check_bool("cache", self.cache)


class InductorCompiler(Compiler[InductorConfig]):
    name = "inductor"
    description = "torch.compile (inductor backend)"
    devices = ("cpu", "cuda")
    requires = ("torch",)
    precisions = TORCH_PRECISIONS
    version_packages = TORCH_VERSIONS
    #: torch._dynamo.exc.Unsupported: dynamo cannot trace a construct
    unsupported_errors = ("Unsupported",)
    style = Style((0, 114, 178), "✚", "✜")  # Okabe-Ito blue
    short_name = "ind"
    profiler = "torch"
    algorithms = {
        "default": "its own lowering (convolutions as extern oneDNN kernels on CPU)",
        "direct": "convolutions as extern oneDNN kernels: direct on x86",
        "gemm": TORCH_ALGORITHMS["gemm"],
    }
    algorithm_refusals = {
        "sparse-csr": "torch.compile does not trace sparse tensors (a graph break runs it eagerly)",
        "sparse-bsr": "torch.compile does not trace sparse tensors (a graph break runs it eagerly)",
    }
    version_libraries = ("torch",)

    def compile(self, model: Model, example: Example, ctx: CompileContext) -> Compiled:
        with torch_precision(ctx) as before:  # flags must be set before tracing/codegen
            return self._build(model, example, ctx, before)

    def _build(
        self, model: Model, example: Example, ctx: CompileContext, restore: SavedFlags
    ) -> Compiled:
        import torch
        import torch._dynamo
        import torch._inductor.config as inductor_config

        cfg = self.config
        threads = apply_threads(ctx)
        model, inputs = prepare(model, example, ctx)
        with ctx.phase("compile"):
            torch._dynamo.reset()
            compiled_fn = torch.compile(
                model, mode=cfg.mode, dynamic=False, fullgraph=cfg.fullgraph, backend="inductor"
            )
            try:
                with inductor_config.patch(fx_graph_cache=cfg.cache), torch.inference_mode():
                    compiled_fn(*inputs)  # triggers tracing + code generation
            except torch._dynamo.exc.TorchDynamoException as exc:
                # Dynamo's messages run to pages; the trial record wants the first line.
                lines = str(exc).strip().splitlines() or [""]
                where = " with fullgraph=true" if cfg.fullgraph else ""
                raise NgbError(
                    f"inductor could not compile the model{where} ({type(exc).__name__}): "
                    f"{lines[0]}"
                ) from exc
            if ctx.device == "cuda":
                torch.cuda.synchronize()
        compiled = TorchCompiled(compiled_fn, inputs, ctx.device, restore=restore)
        compiled.extra.update(
            {
                "torch_threads": threads,
                "mode": cfg.mode,
                "fullgraph": cfg.fullgraph,
                "cache": cfg.cache,
            }
        )
        return compiled
