"""``noop``: a compiler that does nothing, for harness-overhead benchmarks and fast tests.

It needs no torch model, so a sweep of no-op trials exercises the agent, the transports and the
store without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ngb.core.compilers.base import CompileContext, Compiled, Compiler, CompilerConfig
from ngb.core.errors import ConfigError


@dataclass(frozen=True)
class NoopConfig(CompilerConfig):
    compile_s: float = 0.0  # pretend compile time (sleeps), to exercise progress displays
    fail: bool = False  # raise during compile, to exercise failure handling

    def __post_init__(self) -> None:
        if self.compile_s < 0:
            raise ConfigError(f"compile_s must be >= 0, got {self.compile_s}")


class _NoopCompiled(Compiled):
    def run(self) -> Any:
        return None


class NoopCompiler(Compiler):
    name = "noop"
    description = "does nothing; measures the harness itself"
    Config = NoopConfig
    needs_model = False
    devices = ("cpu", "cuda")

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return True, ""

    def compile(self, model: Any, example: Any, ctx: CompileContext) -> Compiled:
        import time

        assert isinstance(self.config, NoopConfig)
        with ctx.phase("compile"):
            if self.config.fail:
                raise RuntimeError("noop compiler asked to fail")
            time.sleep(self.config.compile_s)
        return _NoopCompiled()
