"""Do forked workers share their interpreter's speed? Plain loops in P interpreters x F forks each.

Why (issue 30): ngb's interval is a Student-t over worker processes' means, which holds a re-run
only if each worker is an independent draw of the level a process runs at. Workers forked from one
trial process inherit its address-space layout and heap; if that sets the speed, forks agree with
each other and not with the next trial, and the interval is too narrow (mha:128:1: 50 % coverage
at width ratio 0.35). This script starts ``--interpreters`` fresh ``python`` processes one after
another; each imports torch (as ngb's trial process does before forking) and forks ``--forks``
children one after another, each of which builds the model, warms up and times windows (the same
plain loop as ``benchmarks/parity.py``, ``torch.inference_mode``). A one-way analysis of variance
splits the spread of the fork means into a part between interpreters and a part between forks of
one interpreter. Printed per thread count (``--threads``, default 1 and 2: on the 2-core VM
2-thread plain loops once spread 10.8-11.7 % between processes against 1.5 % for one thread):

- CoV between interpreters: the SD of the interpreter-level effect over the mean (the share of a
  process's level that forks inherit; what ``NGB_WORKER_START=auto`` leaves out of the interval);
- CoV between forks of one interpreter, and of the windows inside one fork.

    .venv/bin/ngb bench levels
    .venv/bin/python benchmarks/levels.py --workload mha:128:1 --interpreters 6 --forks 3
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

from _args import positive, positive_int  # this folder: the script runs as a file

# One interpreter: import torch, then fork the children one after another.
INTERPRETER = r"""
import json, os, sys, time
threads, forks, model, width, batch, warm, nwin, win = sys.argv[1:9]
os.environ["OMP_NUM_THREADS"] = threads
import torch
from ngb.core.models.models import create_model
from ngb.core.records.types import TrialSpec

out = []
for _ in range(int(forks)):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        torch.set_num_threads(int(threads))
        spec = TrialSpec(model=model, compiler="identity", batch=int(batch),
                         width=int(width) if width else None)
        net, x = create_model(spec)
        rates = []
        with torch.inference_mode():
            end = time.perf_counter() + float(warm)
            while time.perf_counter() < end:
                net(x)
            for _ in range(int(nwin)):
                calls, start = 0, time.perf_counter()
                while time.perf_counter() - start < float(win) or calls < 3:
                    net(x)
                    calls += 1
                rates.append(calls * int(batch) / (time.perf_counter() - start))
        os.write(w, json.dumps(rates).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.waitpid(pid, 0)
    out.append(json.loads(data))
print(json.dumps(out))
"""


def interpreter(threads: int, args: argparse.Namespace) -> list[list[float]]:
    """One fresh interpreter's forks: each fork's window rates."""
    model, width, batch = args.workload.split(":")
    cmd = [sys.executable, "-c", INTERPRETER, str(threads), str(args.forks), model, width, batch,
           str(args.warmup), str(args.windows), str(args.window)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"interpreter failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return [[float(v) for v in fork] for fork in json.loads(proc.stdout.strip().splitlines()[-1])]


def split(data: list[list[list[float]]]) -> dict[str, float]:
    """One-way ANOVA of fork means by interpreter: CoV of the interpreter effect, between forks
    of one interpreter, and of windows inside a fork (each over the grand mean)."""
    means = [[statistics.fmean(fork) for fork in forks] for forks in data]
    grand = statistics.fmean(m for forks in means for m in forks)
    forks = len(means[0])
    within = statistics.fmean(statistics.variance(m) for m in means) if forks > 1 else math.nan
    between = statistics.variance([statistics.fmean(m) for m in means])
    # E[variance of interpreter means] = sigma_i^2 + sigma_f^2 / forks
    interp = max(0.0, between - (within / forks if forks > 1 else 0.0))
    windows = statistics.fmean(
        statistics.stdev(fork) / statistics.fmean(fork) for forks_ in data for fork in forks_
    )
    return {
        "interpreters": math.sqrt(interp) / grand,
        "forks": math.sqrt(within) / grand,
        "windows": windows,
        "all": statistics.stdev([m for f in means for m in f]) / grand,
        "mean": grand,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="mha:128:1", metavar="MODEL:WIDTH:BATCH")
    parser.add_argument("--interpreters", type=positive_int, default=6)
    parser.add_argument("--forks", type=positive_int, default=3)
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--warmup", type=positive, default=1.0, help="seconds per fork")
    parser.add_argument("--windows", type=positive_int, default=4, help="timed windows per fork")
    parser.add_argument("--window", type=positive, default=0.4, help="seconds per window")
    args = parser.parse_args()
    if args.interpreters < 2 or args.forks < 2:
        raise SystemExit("--interpreters and --forks must be >= 2 (the split needs both)")
    load = os.getloadavg()
    print(f"{args.workload}: {args.interpreters} interpreters x {args.forks} forks; "
          f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
          flush=True)  # fmt: skip
    threads = [int(t) for t in args.threads.split(",") if t.strip()]
    data: dict[int, list[list[list[float]]]] = {t: [] for t in threads}
    for i in range(args.interpreters):
        for t in threads:  # interleaved, so a drift of the machine favours no thread count
            started = time.monotonic()
            data[t].append(interpreter(t, args))
            rates = " ".join(f"{statistics.fmean(f):,.0f}" for f in data[t][-1])
            print(f"  {t} thread(s), interpreter {i + 1}: forks {rates}/s "
                  f"({time.monotonic() - started:.1f} s, load {os.getloadavg()[0]:.2f})",
                  flush=True)  # fmt: skip
    for t in threads:
        s = split(data[t])
        print(f"{t} thread(s): mean {s['mean']:,.0f}/s; CoV between interpreters "
              f"{s['interpreters']:.1%}, between forks of one interpreter {s['forks']:.1%}, "
              f"windows in one fork {s['windows']:.1%}; all forks {s['all']:.1%}")  # fmt: skip
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
