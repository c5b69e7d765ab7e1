"""The console's own CPU while a run goes on (issue 20, point 5: it must not disturb what it
measures when the device is this machine).

Runs ``ngb-tui`` headless (Textual's pilot) on the Run screen, starts a no-op sweep on localhost
(the agent is another process), and reads this process's CPU time with psutil over the run:
``cpu %`` is the console's share of one core (its event loop, the orchestrator's ingest and the
redraws; the agent and its trials are not in it). Use ``--label`` to tell runs apart and alternate
old and new code in the same conditions: the figure moves with the machine's load.

    .venv/bin/python benchmarks/console_cpu.py --trials 40 --label after
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import psutil
from ngb.tui.app import NgbApp
from ngb.tui.backend import Backend
from textual.widgets import Input

SWEEP = """\
name = "console-cpu"
[measure]
warmup_iters = 0
warmup_s = 0.0
min_iters = 2
min_duration_s = 0.2
repetitions = 2
workers = 1
quiet_check_s = 0
verify = false
[[matrix]]
models = ["conv"]
widths = [8]
depths = [1]
compilers = ["noop"]
batches = [{batches}]
[compiler_options.noop]
compile_s = 0.2
"""


async def measure(trials: int) -> tuple[float, float, int, str]:
    """(console CPU seconds, wall seconds, redraws, outcome) over one run of no-op trials."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        sweep = folder / "sweep.toml"
        sweep.write_text(SWEEP.format(batches=", ".join(str(b + 1) for b in range(trials))))
        inventory = folder / "devices.toml"
        inventory.write_text(
            f'[devices.localhost]\npython = "{sys.executable}"\nworkdir = "{folder / "device"}"\n'
        )  # a workdir of its own: no claim left by another run can refuse this one
        backend = Backend(folder / "r.duckdb", inventory, isolate="inprocess")
        app = NgbApp(backend, start_screen="run", attach_on_start=False, cursor_blink=True,
                     settings_path=folder / "tui.json")  # fmt: skip
        me = psutil.Process()
        async with app.run_test(size=(120, 40)) as pilot:
            screen = app.run_screen
            screen.query_one("#sweep-file", Input).value = str(sweep)
            await pilot.pause(1.0)
            before, began = me.cpu_times(), time.monotonic()
            screen.action_start()
            while not screen._announced:  # noqa: SLF001 - the run's end, as the screen saw it
                await pilot.pause(0.5)
            after, ended = me.cpu_times(), time.monotonic()
            redraws = screen.redraws
            states = screen.model.devices_of(screen.current_run)
            outcome = ", ".join(f"{st.connection} {st.done}/{st.total}" for st in states)
        used = (after.user - before.user) + (after.system - before.system)
        return used, ended - began, redraws, outcome or screen.refusal


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    used, wall, redraws, outcome = asyncio.run(measure(args.trials))
    print(
        f"{args.label or 'console'}: cpu {used:.2f} s over {wall:.1f} s = "
        f"{100 * used / wall:.1f} % of a core; {redraws} redraws; run: {outcome}"
    )


if __name__ == "__main__":
    main()
