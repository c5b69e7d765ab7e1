"""Are ngb's intervals honest? How often a trial's 95 % interval holds what the other runs measured.

Why: a 95 % interval that a re-run's mean falls outside of far more than 5 % of the time makes
"n.s." and every ranking built on it wrong. This script runs ``ngb measure`` on the same workload
``--trials`` times (fresh processes, one after another, fixed repetitions so the stopping rule
does not choose the sample size), and for every trial asks whether its interval of the mean holds
the mean of all the *other* trials (leave one out: the nearest thing to "what a re-run gets").
It prints that coverage, and the median half-width, for two intervals built from the same
repetitions:

- ``independent``: Student-t over the repetitions as if they were independent (ngb before
  ``ngb.core.serial``);
- ``serial``: the same widened for the repetitions' lag-1 autocorrelation (``ngb.core.serial``,
  what ngb uses now).

A method is honest when its coverage is near 95 %; far below means intervals that are too narrow.
The grand mean of the other trials has an error of its own, so coverage reads slightly low even
for an exact interval. The median of the estimated autocorrelations is printed beside them.

    .venv/bin/ngb bench coverage
    .venv/bin/python benchmarks/coverage.py --trials 12 --repetitions 12 \
        --workload conv:64:16:identity --workload mha:128:1:torchscript
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys


def measure(model: str, width: str, batch: str, compiler: str, args: argparse.Namespace) -> list:
    cmd = [sys.executable, "-m", "ngb.sweeps.cli", "measure", model, "-c", compiler, "-b", batch,
           "--repetitions", str(args.repetitions), "--workers", str(args.workers),
           "--min-duration", str(args.window), "--no-verify", "--json"]  # fmt: skip
    if width:
        cmd += ["--width", width]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        raise SystemExit(f"ngb measure {' '.join(cmd[4:])} failed: {tail}")
    result = json.loads(proc.stdout)
    return [float(r["throughput"]) for r in result["repetitions"]]


def coverage(trials: list[list[float]], serial: bool) -> tuple[float, float]:
    """(share of trials whose interval holds the others' grand mean, median relative half-width)."""
    from ngb.core.stopping import interval

    hits, widths = 0, []
    for i, reps in enumerate(trials):
        others = [statistics.fmean(t) for j, t in enumerate(trials) if j != i]
        target = statistics.fmean(others)
        ci = interval(reps, serial=serial)
        hits += abs(ci.mean - target) <= ci.half_width
        widths.append(ci.half_width / ci.mean)
    return hits / len(trials), statistics.median(widths)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=12, help="ngb measure runs per workload")
    parser.add_argument("--repetitions", type=int, default=12, help="fixed, per trial")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--window", type=float, default=0.3, help="seconds per repetition")
    parser.add_argument(
        "--workload", action="append", metavar="MODEL:WIDTH:BATCH:COMPILER",
        help="repeatable; WIDTH empty for a timm model (resnet18::8:openvino)",
    )  # fmt: skip
    parser.add_argument("--save", help="write every trial's repetitions here (JSON)")
    args = parser.parse_args()
    if args.trials < 3:
        raise SystemExit("--trials must be >= 3 (leave-one-out needs others)")
    workloads = args.workload or ["conv:64:16:identity", "mha:128:1:torchscript"]
    load = os.getloadavg()
    print(f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"{args.trials} trials x {args.repetitions} repetitions of {args.window} s over "
          f"{args.workers} processes each")  # fmt: skip
    from ngb.core.serial import lag1

    saved = {}
    for workload in workloads:
        parts = workload.split(":")
        if len(parts) != 4:
            raise SystemExit(f"--workload {workload!r}: want MODEL:WIDTH:BATCH:COMPILER")
        trials = [measure(*parts, args) for _ in range(args.trials)]
        saved[workload] = trials
        means = [statistics.fmean(t) for t in trials]
        spread = statistics.stdev(means) / statistics.fmean(means)
        rho = statistics.median(lag1(t) for t in trials)
        print(f"{workload}: trial means {min(means):.1f}-{max(means):.1f}/s (CoV between "
              f"trials {spread:.1%}); median lag-1 autocorrelation {rho:.2f}")  # fmt: skip
        for name, serial in (("independent", False), ("serial", True)):
            share, width = coverage(trials, serial)
            print(f"  {name:12} 95 % interval holds the others' mean in {share:.0%} of trials "
                  f"(median ±{width:.1%})")  # fmt: skip
    if args.save:
        with open(args.save, "w") as f:
            json.dump(saved, f)
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if any(math.isnan(v) for t in saved.values() for r in t for v in r):
        print("note: some repetitions were not finite and were left out")


if __name__ == "__main__":
    main()
