"""Helpers shared by the TUI tests (no tests here): a tiny no-op sweep, an inventory whose
``localhost`` runs the agent with this venv's python, app construction, and waiting helpers."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ngb.tui.app import NgbApp
from ngb.tui.backend import Backend

SIZE = (160, 48)

# How long Escape or q may take to end a long query or quit the console in a test. Alone they take
# 0.1-0.3 s here, even beside two busy loops on the 2 cores; inside `make test`, four test
# processes and their agents share those cores, and one quit took 1.003 s. 3 s still tells a
# cancelled query from one that was waited for (LONG runs for more than 20 s); timing goals live in
# benchmarks, not in these tests.
PROMPT_S = 3.0

NOOP_SWEEP = """\
name = "noop-tiny"
description = "no-op trials: exercises agent, transport, store and screens in seconds"
[measure]
warmup_iters = 0
warmup_s = 0.0
min_iters = 2
min_duration_s = 0.01
repetitions = 2
workers = 1
quiet_check_s = 0
verify = false
[[matrix]]
models = ["conv"]
widths = [8]
depths = [1, 2]
compilers = ["noop"]
batches = [1, 4]
[compiler_options.noop]
compile_s = 0.0
"""


def write_noop_sweep(folder: Path) -> Path:
    path = folder / "noop.toml"
    path.write_text(NOOP_SWEEP)
    return path


def write_local_inventory(folder: Path, extra: str = "") -> Path:
    """``localhost`` with this interpreter (the built-in default's ``python3`` may lack numpy)."""
    path = folder / "devices.toml"
    path.write_text(f'[devices.localhost]\npython = "{sys.executable}"\n{extra}')
    return path


def make_app(
    folder: Path,
    *,
    inventory: Path | None = None,
    screen: str = "run",
    isolate: str | None = "inprocess",
    **backend_kw: Any,
) -> NgbApp:
    backend = Backend(
        db_path=folder / "results.duckdb",
        inventory_path=inventory or write_local_inventory(folder),
        isolate=isolate,
        **backend_kw,
    )
    return NgbApp(backend, start_screen=screen)


async def wait_for(
    pilot: Any, predicate: Callable[[], Any], timeout: float = 60.0, step: float = 0.1
) -> Any:
    """Pump the app until ``predicate()`` is truthy; fail with a clear message on timeout."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await pilot.pause(step)
    raise AssertionError(f"condition not met within {timeout:.0f}s: {predicate}")
