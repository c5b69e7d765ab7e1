"""Compilers for tests that need a behaviour no real backend offers on demand (issue 32):
``busy-child`` starts a busy helper process, as TVM's ``popen_worker`` pool does; ``slow-tuner``
searches like ``tvm-ms`` (worker 0 only, the real ``TuningProgress`` events and milestones) at a
known pace, so an ETA can be checked against the truth. Register them with ``register``; their
workers must be forked from the test process (``NGB_WORKER_START=fork``)."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass

import pytest
from ngb.core.compilers import _REGISTRY
from ngb.core.compilers.base import CompileContext, Compiled, Compiler, CompilerConfig, Style
from ngb.core.compilers.tvm_tuning import TuningProgress


def register(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(_REGISTRY, "busy-child", "tests.fake_compilers:BusyChildCompiler")
    monkeypatch.setitem(_REGISTRY, "slow-tuner", "tests.fake_compilers:SlowTunerCompiler")
    monkeypatch.setenv("NGB_WORKER_START", "fork")


class _Sleeping(Compiled):
    """A call that sleeps ``call_s`` (the trial itself leaves the CPU to its helper)."""

    def __init__(self, call_s: float, helpers: list[subprocess.Popen[bytes]] | None = None) -> None:
        super().__init__()
        self.call_s, self.helpers = call_s, helpers or []

    def run(self) -> object:
        time.sleep(self.call_s)
        return None

    def close(self) -> None:
        for helper in self.helpers:
            helper.kill()
            helper.wait()
        self.helpers = []


@dataclass(frozen=True)
class BusyChildConfig(CompilerConfig):
    call_s: float = 0.01
    helpers: int = 1  # busy helper processes (one per core: they get a share even under load)


class BusyChildCompiler(Compiler[BusyChildConfig]):
    name = "busy-child"
    description = "starts a busy helper process that lives until the model is closed"
    needs_model = False
    style = Style((68, 119, 170), "⬟", "⬠")  # Paul Tol's blue
    short_name = "busy"
    profiler = None
    version_libraries = ()

    def compile(self, model: object, example: object, ctx: CompileContext) -> Compiled:
        busy = [sys.executable, "-c", "while True: pass"]
        return _Sleeping(
            self.config.call_s, [subprocess.Popen(busy) for _ in range(self.config.helpers)]
        )


@dataclass(frozen=True)
class SlowTunerConfig(CompilerConfig):
    max_trials_global: int = 40  # the search's budget (``tuning_budget_option``), as tvm-ms's
    trial_s: float = 0.1  # seconds per tuning trial
    num_trials_per_iter: int = 4
    call_s: float = 0.005


class SlowTunerCompiler(Compiler[SlowTunerConfig]):
    name = "slow-tuner"
    description = "a MetaSchedule-like search at a known pace (worker 0 only)"
    needs_model = False
    tuning_budget_option = "max_trials_global"  # what the ETA weighs its trials by
    style = Style((34, 136, 51), "⬢", "⬡")  # Paul Tol's green
    short_name = "slow"
    profiler = None
    version_libraries = ()

    def compile(self, model: object, example: object, ctx: CompileContext) -> Compiled:
        cfg = self.config
        if ctx.worker == 0:
            with ctx.phase("tune"):
                progress = TuningProgress(
                    ["fused_conv2d", "dense"], [1.0, 0.5], budget=cfg.max_trials_global,
                    early_stop=None, emit=ctx.emit,
                )  # fmt: skip
                progress.emit()
                while progress.trials_done < cfg.max_trials_global:
                    batch = min(
                        cfg.num_trials_per_iter, cfg.max_trials_global - progress.trials_done
                    )
                    time.sleep(batch * cfg.trial_s)
                    best = 0.010 / (1 + progress.trials_done)
                    progress.record(progress.trials_done % 2, [best] * batch)
                    progress.emit()
                    progress.log_milestones()
                progress.log_milestones(done=True)
        return _Sleeping(cfg.call_s)
