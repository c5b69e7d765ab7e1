"""How noisy is this machine? A plain timed loop of a block beside `ngb measure` of the same block.

Why: when most trials of a sweep end INVALID, the question is whether ngb's harness adds the noise
or the machine has it. This script times ngb's conv block (width 64, batch 16) in back-to-back
windows of the length ngb uses, with nothing of ngb's harness around it (no sampler thread, no
worker processes), once single-threaded and once with torch's default threads. For every window
it also reads what the kernel can see: this process's page faults, and the machine's system,
idle and steal time (shares of all CPUs' time during the windows). Then it runs `ngb measure` on
the same block with the same window length. Printed per line: the windows' coefficient of
variation, their spread (min/max over the mean), their lag-1 autocorrelation (a wander that lasts
several windows; `ngb.core.statistics.autocorrelation`), those kernel counts, and the repetitions a
±2 % 95 % interval needs at that spread and correlation
(`ngb.core.statistics.stopping.repetitions_for_cov`).

If the plain loop is as noisy as `ngb measure` while the kernel sees nothing (no faults, no
steal), the noise comes from below the guest (a VM's host, a shared core), and only a quieter
machine, more repetitions or a wider target help.

    .venv/bin/ngb bench noise
    .venv/bin/python benchmarks/noise.py --seconds 20 --window 0.3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time


def _cpu_ticks() -> list[int]:
    """user, nice, system, idle, iowait, irq, softirq, steal of the whole machine."""
    with open("/proc/stat") as f:
        return [int(v) for v in f.readline().split()[1:9]]


def plain_loop(threads: int, seconds: float, window: float) -> dict:
    import torch
    from ngb.core.models.blocks import block_input_shape, build_block_stack
    from ngb.core.trial import allocator

    allocator.apply("retain")  # as ngb measures by default: no page faults from freed buffers
    torch.set_num_threads(threads)
    model = build_block_stack("conv", 64, 1).eval()
    x = torch.randn(*block_input_shape("conv", 64, batch=16))

    def timed() -> float:
        calls, start = 0, time.perf_counter()
        while True:
            model(x)
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= window and calls >= 5:
                return calls * 16 / elapsed

    values, faults, ticks = [], 0, [0] * 8
    with torch.inference_mode():
        for _ in range(3):
            timed()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            r0, t0 = resource.getrusage(resource.RUSAGE_SELF), _cpu_ticks()
            values.append(timed())
            r1, t1 = resource.getrusage(resource.RUSAGE_SELF), _cpu_ticks()
            faults += (r1.ru_minflt - r0.ru_minflt) + (r1.ru_majflt - r0.ru_majflt)
            ticks = [a + b - c for a, b, c in zip(ticks, t1, t0, strict=True)]
    total = sum(ticks) or 1
    return {
        "values": values,
        "faults_per_window": faults / len(values),
        # shares of the machine's time during the windows (all CPUs, every process)
        "system": ticks[2] / total,
        "idle": (ticks[3] + ticks[4]) / total,
        "steal": ticks[7] / total,
    }


def ngb_measure(window: float, seconds: float) -> dict:
    # A target no run meets: the repetitions go on for ``seconds``, as the plain loop does.
    cmd = [sys.executable, "-m", "ngb.sweeps.cli", "measure", "conv", "--width", "64", "-b", "16",
           "-c", "identity", "--min-duration", str(window), "--max-measure-s", str(seconds),
           "--max-repetitions", "1000", "--ci-target", "0.0001", "--no-verify",
           "--json"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        raise SystemExit(f"ngb measure failed: {tail}")
    result = json.loads(proc.stdout)
    return {
        "values": [float(r["throughput"]) for r in result["repetitions"]],
        "workers": result.get("workers"),
    }


def line(name: str, values: list[float], extra: str) -> str:
    """One line: mean, CoV, spread, lag-1 autocorrelation and the repetitions ±2 % needs."""
    from ngb.core.statistics.autocorrelation import lag1, long_run_factor
    from ngb.core.statistics.stopping import repetitions_for_cov

    mean = statistics.fmean(values)
    cov = statistics.stdev(values) / mean if len(values) > 1 else float("nan")
    rho = lag1(values)
    # Correlated windows are worth less each (ngb.core.statistics.autocorrelation): as if the spread
    # were wider.
    needed = repetitions_for_cov(cov * long_run_factor(rho) ** 0.5, 0.02)
    return (
        f"{name:28} {mean:9.1f}/s  CoV {cov:6.1%}  spread {min(values) / mean:.2f}-"
        f"{max(values) / mean:.2f}  lag-1 {rho:.2f}  n={len(values):<4} ±2% needs ~{needed:<5} "
        f"{extra}"
    )


def _child(threads: int, seconds: float, window: float) -> dict:
    """The plain loop in a fresh process, so torch's thread pool starts as ngb's does."""
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[4]); import noise; "
        "print(json.dumps(noise.plain_loop(int(sys.argv[1]), float(sys.argv[2]), "
        "float(sys.argv[3]))))"
    )
    here = os.path.dirname(os.path.abspath(__file__))
    argv = [sys.executable, "-c", code, str(threads), str(seconds), str(window), here]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"plain loop failed: {proc.stderr.strip()[-400:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per line")
    parser.add_argument("--window", type=float, default=0.5, help="seconds per timed window")
    args = parser.parse_args()
    import torch

    cores = os.cpu_count() or 1
    load = os.getloadavg()
    print(f"conv block, width 64, batch 16; {cores} CPUs; windows of {args.window} s; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")  # fmt: skip
    for threads in sorted({1, torch.get_num_threads()}):
        out = _child(threads, args.seconds, args.window)
        extra = (f"faults/window {out['faults_per_window']:.1f}; machine: system "
                 f"{out['system']:.1%}, idle {out['idle']:.1%}, "
                 f"steal {out['steal']:.1%}")  # fmt: skip
        print(line(f"plain loop, {threads} thread(s)", out["values"], extra))
    m = ngb_measure(args.window, args.seconds)
    print(line("ngb measure, default threads", m["values"], f"{m['workers']} worker processes"))


if __name__ == "__main__":
    main()
