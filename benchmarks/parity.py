"""Does ngb cost anything measurable? ngb measure beside a plain hand-written loop, alternating.

Why: a harness that takes the GIL from the launch thread, warms up too briefly or runs a
different allocator reports its own cost as the model's. For each workload this script runs, in
fresh processes, one after another and alternating, (a) a plain loop a user would write -- build
the same model, ``torch.inference_mode()``, warm up ``--warmup`` seconds, then ``--windows`` x
``--window`` s timed windows of ``model(x)``, the mean of the windows -- under the same allocator
and thread settings as ngb's defaults, and (b) ``ngb measure`` at its defaults (``-c identity``).
It prints each round's ratio ngb / plain and the median over rounds. Goal: >= 0.98 on every
workload, with the machine quiet (the load average is printed before and after).

    .venv/bin/ngb bench parity
    .venv/bin/python benchmarks/parity.py --rounds 3 --workload resnet18::8 --device cuda
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from _args import non_negative, positive, positive_int  # this folder: the script runs as a file

# (model, width, batch): per-call times from ~0.1 ms to ~100 ms on a 2-core CPU
WORKLOADS = ["mha:128:1", "conv:64:16", "resnet18::1", "resnet18::8", "resnet50::8"]

PLAIN = r"""
import json, sys, time
import torch
from ngb.core.models import create_model
from ngb.core.types import TrialSpec

model, width, batch, device, warmup, windows, window = sys.argv[1:8]
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
    cmd = [sys.executable, "-c", PLAIN, model, width, batch, args.device, str(args.warmup),
           str(args.windows), str(args.window)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"plain loop failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return float(json.loads(proc.stdout)["mean"])


def ngb(model: str, width: str, batch: str, args: argparse.Namespace) -> tuple[float, float]:
    cmd = [sys.executable, "-m", "ngb.sweeps.cli", "measure", model, "-c", "identity", "-b", batch,
           "--device", args.device, "--no-verify", "--json"]  # fmt: skip
    if width:
        cmd += ["--width", width]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"ngb measure failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    result = json.loads(proc.stdout)
    return float(result["throughput"]["mean"]), time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=positive_int, default=3)
    parser.add_argument("--workload", action="append", metavar="MODEL:WIDTH:BATCH",
                        help=f"repeatable (default: {' '.join(WORKLOADS)})")  # fmt: skip
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--warmup", type=non_negative, default=1.0, help="plain loop: seconds")
    parser.add_argument(
        "--windows", type=positive_int, default=10, help="plain loop: timed windows"
    )
    parser.add_argument("--window", type=positive, default=0.5, help="plain loop: seconds each")
    args = parser.parse_args()
    load = os.getloadavg()
    print(f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"device {args.device}; {args.rounds} alternating rounds per workload")  # fmt: skip
    worst = []
    for workload in args.workload or WORKLOADS:
        parts = workload.split(":")
        if len(parts) != 3:
            raise SystemExit(f"--workload {workload!r}: want MODEL:WIDTH:BATCH")
        ratios, walls = [], []
        for round_ in range(args.rounds):
            # alternate which goes first, so a slow drift of the machine favours neither
            if round_ % 2:
                ours, wall = ngb(*parts, args)
                theirs = plain(*parts, args)
            else:
                theirs = plain(*parts, args)
                ours, wall = ngb(*parts, args)
            ratios.append(ours / theirs)
            walls.append(wall)
            print(f"  {workload} round {round_ + 1}: ngb {ours:,.1f}/s, plain {theirs:,.1f}/s, "
                  f"ratio {ours / theirs:.3f} (ngb measure took {wall:.1f} s)",
                  flush=True)  # fmt: skip
        median = statistics.median(ratios)
        worst.append(median)
        print(f"{workload}: ngb / plain median {median:.3f} (min {min(ratios):.3f}, "
              f"max {max(ratios):.3f}); ngb measure wall median "
              f"{statistics.median(walls):.1f} s")  # fmt: skip
    load = os.getloadavg()
    print(f"lowest median ratio {min(worst):.3f}; load average after: "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
