"""Are ngb's intervals honest? How often a trial's 95 % interval holds what re-runs measured.

Why: a 95 % interval that a re-run's mean falls outside of far more than 5 % of the time makes
"n.s." and every ranking built on it wrong; one many times wider than the real spread says
nothing. This script runs ``ngb measure`` on the same workload ``--trials`` times (fresh
processes, one after another, at ngb's defaults unless told otherwise) and, for every trial,
asks whether the interval it *stated* holds the mean of all the *other* trials (leave one out:
the nearest thing to "the between-process truth"). Per workload it prints:

- coverage: the share of trials whose stated 95 % interval holds the others' mean (goal 90-97 %);
- width ratio: the median stated half-width over 1.96 x the standard deviation of the trial
  means -- the half-width an exact interval would have (goal 0.8-1.5);
- the same two figures for the intervals older ngb built from the same repetitions laid end to
  end (independent Student-t, and widened for AR(1) serial correlation), for comparison.

The grand mean of the other trials has an error of its own and the trial-to-trial SD is itself
estimated from ``--trials`` values (about +-20 % at 12), so read the figures with that slack.

    .venv/bin/ngb bench coverage
    .venv/bin/python benchmarks/coverage.py --trials 12 \
        --workload mha:128:1:identity --workload conv:64:16:identity --workload resnet18::8:identity
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

WORKLOADS = ["mha:128:1:identity", "conv:64:16:identity", "resnet18::8:identity"]


def measure(model: str, width: str, batch: str, compiler: str, extra: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "ngb.sweeps.cli", "measure", model, "-c", compiler, "-b", batch,
           "--no-verify", "--json", *extra]  # fmt: skip
    if width:
        cmd += ["--width", width]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        raise SystemExit(f"ngb measure {' '.join(cmd[4:])} failed: {tail}")
    result = json.loads(proc.stdout)
    groups: dict[int, list[float]] = {}
    for rep in result["repetitions"]:
        groups.setdefault(int(rep.get("worker", 0)), []).append(float(rep["throughput"]))
    return {
        "mean": float(result["throughput"]["mean"]),
        "half": result.get("ci_half_width"),
        "groups": list(groups.values()),
        "verdict": result.get("verdict"),
        "wall_s": time.monotonic() - started,
    }


def stated(trial: dict[str, Any]) -> tuple[float, float]:
    half = trial["half"]
    return trial["mean"], float("inf") if half is None else float(half)


def end_to_end(serial: bool) -> Any:
    """Older ngb: one interval over every repetition in the order they ran."""
    from ngb.core.stopping import interval

    def method(trial: dict[str, Any]) -> tuple[float, float]:
        ci = interval([v for g in trial["groups"] for v in g], serial=serial)
        return ci.mean, ci.half_width

    return method


def coverage(trials: list[dict[str, Any]], method: Any) -> tuple[float, float]:
    """(share of trials whose interval holds the others' grand mean, median width ratio)."""
    means = [t["mean"] for t in trials]
    sd = statistics.stdev(means)
    hits, ratios = 0, []
    for i, trial in enumerate(trials):
        target = statistics.fmean(m for j, m in enumerate(means) if j != i)
        mean, half = method(trial)
        hits += abs(mean - target) <= half
        ratios.append(half / (1.96 * sd) if sd > 0 else float("inf"))
    return hits / len(trials), statistics.median(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=12, help="ngb measure runs per workload")
    parser.add_argument(
        "--workload", action="append", metavar="MODEL:WIDTH:BATCH:COMPILER",
        help=f"repeatable; WIDTH empty for a timm model (default: {' '.join(WORKLOADS)})",
    )  # fmt: skip
    parser.add_argument("--save", help="write every trial's figures here (JSON)")
    parser.add_argument("extra", nargs="*", help="more ngb measure options, after --")
    args = parser.parse_args()
    if args.trials < 3:
        raise SystemExit("--trials must be >= 3 (leave-one-out needs others)")
    load = os.getloadavg()
    print(f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"{args.trials} ngb measure runs per workload, "
          f"options: {args.extra or 'defaults'}")  # fmt: skip
    saved = {}
    for workload in args.workload or WORKLOADS:
        parts = workload.split(":")
        if len(parts) != 4:
            raise SystemExit(f"--workload {workload!r}: want MODEL:WIDTH:BATCH:COMPILER")
        trials = [measure(*parts, args.extra) for _ in range(args.trials)]
        saved[workload] = trials
        means = [t["mean"] for t in trials]
        spread = statistics.stdev(means) / statistics.fmean(means)
        valid = sum(t["verdict"] == "VALID" for t in trials)
        walls = [t["wall_s"] for t in trials]
        print(f"{workload}: trial means {min(means):,.1f}-{max(means):,.1f}/s, CoV between "
              f"trials {spread:.1%}; {valid}/{len(trials)} VALID; wall per run median "
              f"{statistics.median(walls):.1f} s (max {max(walls):.1f})")  # fmt: skip
        for name, method in (
            ("ngb (stated)", stated),
            ("end-to-end t", end_to_end(False)),
            ("end-to-end AR1", end_to_end(True)),
        ):
            share, ratio = coverage(trials, method)
            print(f"  {name:15} holds the others' mean in {share:4.0%} of trials; width ratio "
                  f"{ratio:.2f}")  # fmt: skip
    if args.save:
        with open(args.save, "w") as f:
            json.dump(saved, f)
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
