"""Does ngb cost anything measurable? ngb measure beside a plain hand-written loop, round by round.

Why: a harness that takes the GIL from the launch thread, warms up too briefly or runs a
different allocator reports its own cost as the model's. For each workload this script runs, in
fresh processes, one after another and alternating, (a) a plain loop a user would write -- build
the same model, ``torch.inference_mode()``, warm up ``--warmup`` seconds, then ``--windows`` x
``--window`` s timed windows of ``model(x)``, the mean of the windows -- under the same allocator
and thread settings as ngb's defaults, and (b) ``ngb measure`` at its defaults (``-c identity``).

Each round is one ``ngb measure`` with plain processes on both sides of it, in time: half of
them just before and half just after (an A-B-A round), as many as ngb's previous round ran workers
(``--plain-processes N`` fixes the count; the first round takes ngb's default ``workers``). ngb's
figure is the mean over its worker processes (4-10 fresh interpreters), and a process keeps one of
two speed levels for its life on some machines (conv:64:16 on the 2-core VM: worker means 230,
235, 330, 334 and 369/s in one trial), so one plain process could not stand beside ngb's mean of
five (ratio 1.62); each plain process is a fresh interpreter too.

**The round is the unit, not the process.** On the 2-core VM the machine's speed moves by 10-20 %
from one minute to the next, and every process of a round meets the same minute. Counting each
process as an independent draw gave intervals that did not overlap from one session to the next,
same code (mha:128:1: 1.112 [1.045, 1.183] on 2026-11-28 at 20:00, 0.903 [0.776, 1.051] at 23:15;
rounds 0.80-1.22). So the ratio is taken per round (ngb's mean over its processes / the plain
processes' mean around it), and the figure is the geometric mean of the rounds' ratios with a
Student-t interval over rounds on the log scale (``rounds - 1`` df): what the minutes between
rounds do is in it, and the plain processes on both sides of each ngb measure cancel a drift
within the round. The interval that counts processes as independent (the reports' speed-up of two
means, ``ngb.core.statistics.intervals.speedup``) is printed beside it for comparison. Goal:
>= 0.98 on every workload, with the machine quiet (the load average is printed before and after);
an interval that holds 1 says the two differ by no more than the minutes between rounds do.

The plain loop times its process from 1 s to 6 s after the first call; ngb's workers time theirs
from ~0.5 s to ~1.5 s (a settled warm-up, then two or three 0.3 s values). Where a process's speed
moves with its age, that alone parts the two: 42 recorded plain mha processes (2026-11-28,
23:08-23:39, four batches) read 0.92, 1.01, 1.05 and 1.01 at ngb's position against their own
1-6 s mean. ``--warmup 0.6 --windows 2 --window 0.3`` times the plain processes where ngb times
its own.

``--allocator`` puts glibc's mode (``ngb.core.trial.allocator``) in force on both sides. Under the
default ``system`` a process's speed on conv:64:16 follows its minor page faults per call (0 to
~12,000 on the 2-core VM: 650 down to 280 samples/s), which the heap's layout -- anything the
process imported or allocated before -- decides: there ngb / plain read 1.22 [1.04, 1.44] under
``system`` and 0.978 [0.913, 1.047] under ``retain`` (2026-11-27, 3 rounds each), so the gap was
the allocator's state, not the harness (``ngb.core.trial.page_faults`` says so in the verdict).

    .venv/bin/ngb bench parity
    .venv/bin/python benchmarks/parity.py --rounds 6 --workload resnet18::8 --device cuda
    .venv/bin/python benchmarks/parity.py --rounds 3 --workload conv:64:16 --allocator retain
    .venv/bin/python benchmarks/parity.py --workload mha:128:1 --warmup 0.6 --windows 2 --window 0.3
    .venv/bin/python benchmarks/parity.py --rounds 2 --workload mha:64:1 --windows 2 \\
        --window 0.05 -- --repetitions 2 --workers 2 --min-duration 0.05 --warmup-s 0.1  # smoke
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

from _args import non_negative, positive, positive_int  # this folder: the script runs as a file
from ngb.core.records.types import MeasureSettings
from ngb.core.statistics.intervals import Estimate, Mean, speedup
from ngb.core.statistics.significance import confidence_interval

# (model, width, batch): per-call times from ~0.1 ms to ~100 ms on a 2-core CPU
WORKLOADS = ["mha:128:1", "conv:64:16", "resnet18::1", "resnet18::8", "resnet50::8"]
START_ENV = (
    "NGB_WORKER_START"  # ngb.core.trial.worker_start: ngb's own default (fresh interpreters)
)

PLAIN = r"""
import json, sys, time
import torch
from ngb.core.models.models import create_model
from ngb.core.records.types import TrialSpec

model, width, batch, device, warmup, windows, window, alloc = sys.argv[1:9]
if alloc != "system":  # before anything allocates, as ngb's worker does
    from ngb.core.trial import allocator
    allocator.apply(alloc)
spec = TrialSpec(model=model, compiler="identity", batch=int(batch), device=device,
                 width=int(width) if width else None)
net, x = create_model(spec)
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
rates = []
with torch.inference_mode():
    end = time.perf_counter() + float(warmup)
    while time.perf_counter() < end:
        net(x)
    sync()
    for _ in range(int(windows)):
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < float(window):
            net(x)
            calls += 1
        sync()
        rates.append(calls * int(batch) / (time.perf_counter() - start))
print(json.dumps({"mean": sum(rates) / len(rates), "windows": rates}))
"""


def plain(model: str, width: str, batch: str, args: argparse.Namespace) -> float:
    """One plain loop in a fresh interpreter: the mean of its windows."""
    cmd = [sys.executable, "-c", PLAIN, model, width, batch, args.device, str(args.warmup),
           str(args.windows), str(args.window), args.allocator]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"plain loop failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return float(json.loads(proc.stdout)["mean"])


def worker_means(result: dict[str, object]) -> list[float]:
    """The mean of each worker process's repetitions, from ``ngb measure --json``'s output."""
    groups: dict[int, list[float]] = {}
    repetitions = result.get("repetitions")
    for rep in repetitions if isinstance(repetitions, list) else []:
        if isinstance(rep, dict):
            groups.setdefault(int(rep.get("worker", 0)), []).append(float(rep["throughput"]))
    return [statistics.fmean(g) for _, g in sorted(groups.items())]


def ngb(model: str, width: str, batch: str, args: argparse.Namespace) -> tuple[list[float], float]:
    """One ``ngb measure``: its workers' means and its wall time."""
    cmd = [sys.executable, "-m", "ngb.sweeps.cli", "measure", model, "-c", "identity", "-b", batch,
           "--device", args.device, "--allocator", args.allocator, "--no-verify", "--json",
           *args.extra]  # fmt: skip
    if width:
        cmd += ["--width", width]
    # ngb's default worker start (a fresh interpreter each), whatever the caller's shell set
    env = {k: v for k, v in os.environ.items() if k != START_ENV}
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"ngb measure failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    means = worker_means(json.loads(proc.stdout))
    if not means:
        raise SystemExit("ngb measure returned no repetitions")
    return means, time.monotonic() - started


def mean_over(processes: list[float]) -> Mean:
    """The mean over processes with its Student-t interval (k - 1 df; unknown for one)."""
    ci = confidence_interval(processes)
    return Mean(ci.mean, ci.half_width, max(ci.n - 1, 0))


def ratio(ours: list[float], theirs: list[float]) -> Estimate:
    """ngb / plain on the means over processes (each process weighs the same), with the
    speed-up interval the reports print (one computation, ``ngb.core.statistics.intervals``).
    Its interval counts every process as an independent draw: printed for comparison only."""
    return speedup(mean_over(ours), mean_over(theirs))


def over_rounds(ratios: list[float]) -> Estimate:
    """The rounds' ratios as one figure: their geometric mean, with the Student-t interval of
    the mean log ratio (``len(ratios) - 1`` df; unknown for one round)."""
    logs = confidence_interval([math.log(r) for r in ratios])
    value = math.exp(logs.mean)
    if logs.n < 2:
        return Estimate(value)
    return Estimate(value, math.exp(logs.low), math.exp(logs.high), df=logs.n - 1)


def describe(est: Estimate, unknown: str) -> str:
    """The figure with its interval, or with why it has none (``unknown``)."""
    if not est.known:
        return f"{est.value:.3f} (no interval: {unknown})"
    return f"{est.value:.3f} [{est.lo:.3f}, {est.hi:.3f}]"


def spread(means: list[float]) -> str:
    if len(means) == 1:
        return f"1 process {means[0]:,.1f}/s"
    return (f"{len(means)} processes {min(means):,.1f}-{max(means):,.1f}/s, "
            f"mean {statistics.fmean(means):,.1f}/s")  # fmt: skip


def first_count(extra: list[str]) -> int:
    """The workers the first ngb measure will start at least: its ``--workers`` where the
    options after ``--`` give it, else ngb's default (a bad value is ngb measure's to refuse)."""
    for i, arg in enumerate(extra):
        value = arg.split("=", 1)[1] if arg.startswith("--workers=") else None
        if arg == "--workers" and i + 1 < len(extra):
            value = extra[i + 1]
        if value is not None and value.isdigit() and int(value) > 0:
            return int(value)
    return MeasureSettings().workers


def run_workload(parts: list[str], args: argparse.Namespace) -> Estimate:
    """Every round of one workload; the ratio over rounds."""
    workload = ":".join(parts)
    all_ours: list[float] = []
    all_theirs: list[float] = []
    ratios: list[float] = []
    walls: list[float] = []
    count = args.plain_processes or first_count(args.extra)  # later: ngb's previous round's
    for round_ in range(args.rounds):
        # A-B-A: half the plain processes before ngb measure and half after, so a drift of the
        # machine within the round favours neither side
        before = [plain(*parts, args) for _ in range((count + 1) // 2)]
        ours, wall = ngb(*parts, args)
        theirs = before + [plain(*parts, args) for _ in range(count // 2)]
        count = args.plain_processes or len(ours)
        all_ours += ours
        all_theirs += theirs
        ratios.append(statistics.fmean(ours) / statistics.fmean(theirs))
        walls.append(wall)
        print(f"  {workload} round {round_ + 1}: ngb {spread(ours)}; plain {spread(theirs)}; "
              f"ratio of means {ratios[-1]:.3f} (ngb measure took {wall:.1f} s)",
              flush=True)  # fmt: skip
    est = over_rounds(ratios)
    pooled = ratio(all_ours, all_theirs)
    print(f"{workload}: ngb / plain {describe(est, 'one round')} over {len(ratios)} rounds "
          f"({len(all_ours)} ngb and {len(all_theirs)} plain processes, means "
          f"{statistics.fmean(all_ours):,.1f} and {statistics.fmean(all_theirs):,.1f}/s); "
          f"counting every process as independent: {describe(pooled, 'one process on a side')}; "
          f"ngb measure wall median {statistics.median(walls):.1f} s", flush=True)  # fmt: skip
    return est


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=positive_int, default=6)
    parser.add_argument("--workload", action="append", metavar="MODEL:WIDTH:BATCH",
                        help=f"repeatable (default: {' '.join(WORKLOADS)})")  # fmt: skip
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument(
        "--plain-processes", type=positive_int, default=None, metavar="N",
        help="plain-loop processes per round (default: as many as ngb measure ran workers)",
    )  # fmt: skip
    parser.add_argument(
        "--allocator", choices=("system", "retain"), default="system",
        help=(
             "glibc's mode on both sides (ngb.core.trial.allocator; "
             "default: ngb's default, system)"
         ),
    )  # fmt: skip
    parser.add_argument("--warmup", type=non_negative, default=1.0, help="plain loop: seconds")
    parser.add_argument(
        "--windows", type=positive_int, default=10, help="plain loop: timed windows"
    )
    parser.add_argument("--window", type=positive, default=0.5, help="plain loop: seconds each")
    parser.add_argument("extra", nargs="*", help="more ngb measure options, after --")
    args = parser.parse_args()
    workloads = [w.split(":") for w in args.workload or WORKLOADS]
    for parts in workloads:  # every workload checked before the first one runs
        if len(parts) != 3:
            raise SystemExit(f"--workload {':'.join(parts)!r}: want MODEL:WIDTH:BATCH")
    load = os.getloadavg()
    print(f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"device {args.device}; {args.rounds} rounds per workload (plain, ngb, plain); plain "
          f"processes per round: {args.plain_processes or 'as many as ngb ran workers'}; "
          f"allocator {args.allocator} on both sides; "
          f"ngb measure options: {' '.join(args.extra) or 'defaults'}")  # fmt: skip
    lowest = min(run_workload(parts, args).value for parts in workloads)
    load = os.getloadavg()
    print(f"lowest ratio {lowest:.3f}; load average after: "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
