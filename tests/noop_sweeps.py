"""No-op sweeps for orchestrator and fault tests: fast trials that exercise the machinery only."""

from __future__ import annotations

from ngb.sweeps.spec.sweep import Sweep, loads_sweep


def noop_sweep(n: int, *, compile_s: float = 0.05, failing: int = 0, name: str = "noop") -> Sweep:
    """``n`` no-op trials (distinct batches) plus ``failing`` trials whose compile raises."""
    text = f"""
name = "{name}"
[measure]
warmup_iters = 0
warmup_s = 0
min_iters = 1
min_duration_s = 0
repetitions = 2
workers = 1  # one process per trial: these tests exercise the machinery
quiet_check_s = 0
verify = false
cpu_interval_s = 0.05
[[matrix]]
models = ["resnet18"]
compilers = ["noop"]
batches = {list(range(1, n + 1))}
compiler_options.noop = {{ compile_s = {compile_s} }}
"""
    if failing:
        text += f"""
[[matrix]]
models = ["resnet50"]
compilers = ["noop"]
batches = {list(range(1, failing + 1))}
compiler_options.noop = {{ fail = true }}
"""
    return loads_sweep(text)
