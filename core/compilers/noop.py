"""``noop``: a compiler that does nothing, for harness-overhead benchmarks and fast tests.

It needs no torch model, so a sweep of no-op trials exercises the agent, the transports and the
store without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ngb.core.base.errors import ConfigError
from ngb.core.compilers.base import CompileContext, Compiled, Compiler, CompilerConfig, Style


@dataclass(frozen=True)
class NoopConfig(CompilerConfig):
    compile_s: float = 0.0  # pretend compile time (sleeps), to exercise progress displays
    fail: bool = False  # raise during compile, to exercise failure handling
    crash: bool = False  # os.abort() during compile: a hard crash the agent must survive
    sleep_s: float = 0.0  # pretend run time per call (sleeps), to exercise the timed loop

    def __post_init__(self) -> None:
        for name in ("compile_s", "sleep_s"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")


class _NoopCompiled(Compiled):
    def run(self) -> object:
        return None


class _SleepingCompiled(Compiled):
    """A call that takes ``sleep_s``: lets tests see both stop conditions of the timed loop."""

    def __init__(self, sleep_s: float) -> None:
        super().__init__()
        self.sleep_s = sleep_s

    def run(self) -> object:
        import time

        time.sleep(self.sleep_s)
        return None


class NoopCompiler(Compiler[NoopConfig]):
    name = "noop"
    description = "does nothing; measures the harness itself"
    needs_model = False
    devices = ("cpu", "cuda")
    # It computes nothing, so every precision is accepted and none is recorded as having run.
    precisions = {
        "cpu": ("default", "fp32", "tf32", "bf16", "fp16"),
        "cuda": ("default", "fp32", "tf32", "bf16", "fp16"),
    }
    style = Style((187, 187, 187), "✱", "✲")  # Paul Tol's grey
    short_name = "noop"
    profiler = None  # nothing runs to profile
    algorithms = {"default": "nothing: it runs no model"}
    algorithm_refusals = {
        kind: "it runs no model" for kind in ("direct", "gemm", "sparse-csr", "sparse-bsr")
    }
    version_libraries = ()

    def compile(self, model: object, example: object, ctx: CompileContext) -> Compiled:
        # needs_model is False: the harness passes no model (None), which is all this takes
        import time

        with ctx.phase("compile"):
            if self.config.fail:
                raise RuntimeError("noop compiler asked to fail")
            if self.config.crash:
                import os

                os.abort()
            time.sleep(self.config.compile_s)
        return _SleepingCompiled(self.config.sleep_s) if self.config.sleep_s else _NoopCompiled()
