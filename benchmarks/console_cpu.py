"""The console's CPU share while a run goes on (issue 20: under 3 % of a core).

Runs the ``ngb-tui`` app headless (Textual's pilot) in this process on the Run screen, starts a
run on ``localhost`` (the agent and its trials are other processes) and reads this process's CPU
time with psutil: CPU seconds over wall seconds is the console's share of one core (its event
loop, the orchestrator's ingest into the store and the redraws; not the terminal's own drawing).

By default the run is no-op trials, about one a second: the densest event stream a device sends,
so the worst case for the console. ``--sweep demo`` follows the demo preset instead (needs torch
and the compilers; ``--seconds`` ends the window early and cancels the rest). CPU time is fairly
robust on a loaded machine, unlike wall time, but alternate old and new code (``--label``) when
comparing.

    .venv/bin/ngb bench console_cpu --trials 40
    .venv/bin/ngb bench console_cpu --sweep demo --seconds 180
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from _args import non_negative, positive_int, sweep_ref  # this folder: the script runs as a file
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


async def measure(
    trials: int, sweep_choice: str = "", seconds: float = 0.0
) -> tuple[float, float, int, str]:
    """(console CPU seconds, wall seconds, redraws, outcome) over one run, or its first
    ``seconds`` when that is set (the run is then cancelled)."""
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
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
            screen.query_one("#sweep-file", Input).value = sweep_choice or str(sweep)
            await pilot.pause(1.0)
            start_cpu, start_at = me.cpu_times(), time.monotonic()
            screen.action_start()
            # The window opens once the device runs the sweep: starting (importing the
            # orchestrator and DuckDB, opening the store, deploying) is a one-off, printed apart.
            # Plain sleeps, not pilot.pause: the pilot's waiting is work the console does not do.
            while not screen.refusal and not any(
                st.connection == "running" for st in screen.model.devices.values()
            ):
                await asyncio.sleep(0.05)
            before, began = me.cpu_times(), time.monotonic()
            starting = cpu_s(before) - cpu_s(start_cpu), began - start_at
            while not screen._announced and not screen.refusal:  # noqa: SLF001 - the run's end
                if seconds and time.monotonic() - began >= seconds:
                    break
                await asyncio.sleep(0.5)
            after, ended = me.cpu_times(), time.monotonic()
            redraws = screen.redraws
            states = screen.model.devices_of(screen.current_run)
            outcome = ", ".join(f"{st.device} {st.done}/{st.total} trials" for st in states)
            if screen.current_run and not screen._announced:  # noqa: SLF001
                await backend.orchestrator().cancel(screen.current_run)
        # before the folder goes: a device task still tearing down or a last flush would open
        # the store in it again. /tmp kept a `tmp*` folder holding an empty r.duckdb after
        # some full test runs; closing first is the likely fix (the race was not caught by hand)
        await backend.close()
        outcome = outcome or screen.refusal
        outcome += f"; starting took {starting[0]:.2f} CPU s over {starting[1]:.1f} s"
        return cpu_s(after) - cpu_s(before), ended - began, redraws, outcome


def cpu_s(times: Any) -> float:
    """User + system seconds of a ``psutil`` CPU-times record (every thread of the process)."""
    return float(times.user + times.system)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--trials", type=positive_int, default=40, help="no-op trials (default sweep)"
    )
    parser.add_argument(
        "--sweep", type=sweep_ref, default="", help="a preset or sweep file instead (e.g. demo)"
    )
    parser.add_argument("--seconds", type=non_negative, default=0.0, help="measure only this long")
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    used, wall, redraws, outcome = asyncio.run(measure(args.trials, args.sweep, args.seconds))
    if "not started" in outcome or wall <= 0:  # no window to divide by: no share to print
        raise SystemExit(f"the run did not start ({outcome}): no CPU share measured")
    print(
        f"{args.label or 'console'}: CPU share of ngb-tui during the run: "
        f"{100 * used / wall:.1f} % of a core (goal < 3 %): {used:.2f} CPU s over {wall:.1f} s; "
        f"{redraws} redraws; run: {outcome}"
    )


if __name__ == "__main__":
    main()
