"""How far off is the ETA? The console's own figures, sampled every second of a real run.

Follows one run (starts it, or ``--attach`` to one already going, as one more follower) and
folds its events into the console's model (``ngb.tui.live_run.RunModel``), then reads, every
second, the two figures an operator plans by: the device line's ETA
(``ngb.tui.widgets.device_panel.eta_seconds``) and, while TVM searches, the tuning panel's
search time left (``TuningState.search_left_s``) -- the same functions the Run screen calls, so
what is printed here is what the screen showed. When the run has ended it prints the error of
each at 25 / 50 / 75 %: of the search's trial budget (predicted search time left against the
time the search really had left), and of the run's wall time (the device ETA against the time
the device really took). Error = predicted / true - 1: +100 % is an ETA twice too long.

Issue 46's job is the default: a 64-trial MetaSchedule search on one conv block (early stop
above the budget, so the search runs its whole budget), compiled and timed after: 3 min 40 s on
the quiet 2-core VM (2026-11-28; the issue's run took half an hour). A fresh ``NGB_HOME`` (the
device's tuning cache) is made unless ``--attach`` or ``--home``, so the search is not reused
from an earlier run.

    .venv/bin/ngb bench eta                              # the default tuning job
    .venv/bin/ngb bench eta --sweep demo                 # the demo preset's device ETA
    .venv/bin/ngb bench eta --print-sweep > job.toml     # the default job, to run another way
    .venv/bin/ngb bench eta --attach RUN --db r.duckdb   # one more follower of a running run
    .venv/bin/ngb bench eta --home h; .venv/bin/ngb bench eta --home h --batch 2
                                        # the second run's ETA from the first run's evidence
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _args import positive_int, sweep_ref  # this folder: the script runs as a file

JOB = """\
name = "eta-tuning"
[measure]
workers = 2
max_workers = 4
values_per_worker = 3
ci_target = 0.05
max_measure_s = 6.0
timeout_s = 7200.0

[compiler_options."tvm-ms"]
max_trials_global = {trials}
num_trials_per_iter = 16

[[matrix]]
models = ["conv"]
widths = [32]
compilers = ["tvm-ms"]
batches = [{batch}]
"""

QUARTERS = (0.25, 0.5, 0.75)


@dataclass
class Sample:
    """What the console showed at one moment (seconds since the epoch, like the agent's clock)."""

    at: float
    device_left: float | None  # the device line's ETA
    search_left: float | None  # the tuning panel's search time left
    trials_done: int | None  # of the search in flight (None: no search)
    budget: int | None
    tuning_seen_at: float | None  # the latest tuning event's time (the search's last news)


def job_sweep(trials: int, batch: int = 1) -> str:
    """The default job: early stop left at its default (150 trials without a better one), above
    the budget, so the search runs the whole budget."""
    return JOB.format(trials=trials, batch=batch)


async def follow(args: argparse.Namespace) -> tuple[list[Sample], float, float, str]:
    """Samples of one run's first device, with its start and end times and final state."""
    from ngb.devices.inventory import load_inventory
    from ngb.sweeps.run.orchestrator import Orchestrator
    from ngb.sweeps.spec.sweep import load_sweep, loads_sweep
    from ngb.sweeps.store.database import Store
    from ngb.tui.live_run import RunModel
    from ngb.tui.widgets.device_panel import eta_seconds

    store = Store(Path(args.db))
    orch = Orchestrator(store, load_inventory(args.inventory))
    model = RunModel()
    sub = orch.subscribe()
    started = time.time()
    if args.attach:
        run_id = await orch.attach(args.attach)
    else:
        job = job_sweep(args.trials, args.batch)
        sweep = load_sweep(args.sweep) if args.sweep else loads_sweep(job)
        run_id = await orch.start(sweep, args.device)
    print(f"following run {run_id}", flush=True)
    samples: list[Sample] = []
    done = asyncio.Event()

    async def fold() -> None:
        async for ev in sub:
            model.apply(ev)
            if ev.kind == "run" and ev.run_id == run_id and ev.state not in ("started", "attached"):
                done.set()
                return

    folding = asyncio.create_task(fold())
    last_print = 0.0
    while not done.is_set():
        now = time.time()
        states = model.devices_of(run_id)
        if states:
            s = states[0]
            t = s.tuning
            searching = t is not None and not t.reused and s.phase in ("", "tune")
            samples.append(
                Sample(
                    now,
                    None if s.finished else eta_seconds(s, now),
                    t.search_left_s(now) if searching and t is not None else None,
                    t.trials_done if searching and t is not None else None,
                    t.budget if searching and t is not None else None,
                    t.seen_at if t is not None and not t.reused else None,
                )
            )
            if now - last_print >= 60:
                last_print = now
                x = samples[-1]
                print(
                    f"  {now - started:6.0f} s  {s.done}/{s.total} {s.phase or '-':>9}  "
                    f"device ETA {_secs(x.device_left)}  search {x.trials_done}/{x.budget} "
                    f"left {_secs(x.search_left)}",
                    flush=True,
                )
        await asyncio.sleep(1.0)
    folding.cancel()
    summary = await orch.wait(run_id)
    await orch.close()
    return samples, started, time.time(), str(summary.get("status") or model.derived_state(run_id))


def _secs(value: float | None) -> str:
    return "?" if value is None else f"{value:,.0f} s"


def _error(predicted: float | None, true: float) -> str:
    if predicted is None:
        return "ETA ?"
    if true <= 0:
        return "-"
    return f"{100 * (predicted / true - 1):+.0f} %"


def report(samples: list[Sample], started: float, ended: float) -> list[str]:
    """The errors at 25 / 50 / 75 % of the search budget and of the wall time."""
    lines = []
    tuned = [s for s in samples if s.trials_done is not None and s.budget]
    if tuned:
        budget = tuned[-1].budget or 0
        search_end = max(s.tuning_seen_at or 0.0 for s in samples)
        lines.append(
            f"search: {budget} trials, {search_end - tuned[0].at:,.0f} s from the first "
            "tuning news to the last"
        )
        lines.append("  at      trials  search left: shown   true    error   device: shown   true"
                     "    error")  # fmt: skip
        for q in QUARTERS:
            hit = next((s for s in tuned if (s.trials_done or 0) >= q * budget), None)
            if hit is None:
                lines.append(f"  {q:4.0%}   the search never got there")
                continue
            true_search, true_device = search_end - hit.at, ended - hit.at
            lines.append(
                f"  {q:4.0%}   {hit.trials_done:3}/{budget:<3} {_secs(hit.search_left):>12} "
                f"{_secs(true_search):>8} {_error(hit.search_left, true_search):>8} "
                f"{_secs(hit.device_left):>12} {_secs(true_device):>8} "
                f"{_error(hit.device_left, true_device):>8}"
            )
    wall = ended - started
    lines.append(f"wall: {wall:,.0f} s; device ETA at 25 / 50 / 75 % of it:")
    for q in QUARTERS:
        at = started + q * wall
        hit = next((s for s in samples if s.at >= at), None)
        if hit is None:
            continue
        true = ended - hit.at
        lines.append(
            f"  {q:4.0%}   shown {_secs(hit.device_left):>10}  true {_secs(true):>8}  "
            f"error {_error(hit.device_left, true)}"
        )
    unknown = sum(1 for s in samples if s.device_left is None)
    lines.append(f"device ETA '?' in {unknown} of {len(samples)} one-second samples")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sweep", type=sweep_ref, default="", help="a sweep file or preset")
    parser.add_argument("--trials", type=positive_int, default=64, help="the default job's budget")
    parser.add_argument("--batch", type=positive_int, default=1, help="the default job's batch")
    parser.add_argument(
        "--home",
        default="",
        help="keep this NGB_HOME (the device's tuning cache and ETA evidence of earlier runs; "
        "a search already in its cache is reused) instead of a fresh one",
    )
    parser.add_argument("--device", default="localhost")
    parser.add_argument("--inventory", default=None, help="devices file (default: built-in)")
    parser.add_argument("--db", default="", help="results store (default: a temporary one)")
    parser.add_argument("--attach", default="", help="follow this running run instead")
    parser.add_argument("--print-sweep", action="store_true", help="print the default job")
    args = parser.parse_args()
    if args.print_sweep:
        print(job_sweep(args.trials, args.batch), end="")
        return
    if args.attach and not args.db:
        parser.error("--attach needs the run's --db")
    with tempfile.TemporaryDirectory(prefix="ngb-eta-", ignore_cleanup_errors=True) as tmp:
        if args.home:
            os.environ["NGB_HOME"] = str(Path(args.home).resolve())
        elif not args.attach:
            os.environ["NGB_HOME"] = str(Path(tmp) / "home")  # no tuning cache to reuse
        args.db = args.db or str(Path(tmp) / "eta.duckdb")
        load = os.getloadavg()
        print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
        samples, started, ended, state = asyncio.run(follow(args))
        load = os.getloadavg()
        print(f"run {state}; load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
        for line in report(samples, started, ended):
            print(line)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
