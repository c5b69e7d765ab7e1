"""Is the harness right, and is it cheap? Two figures, printed side by side in one run.

1. ngb vs OpenVINO's own ``benchmark_app`` on timm resnet18, batch 8, CPU, THROUGHPUT hint, same
   measured duration, on the *same ONNX file* (the one ngb's openvino compiler exported for the
   trial). Goal: ngb / benchmark_app >= 0.97. Rounds alternate ngb and benchmark_app so drift on a
   shared machine hits both alike; the median ratio is the headline.
2. Harness overhead per timed call: the noop compiler's ``run`` does nothing, so the time per call
   of the timed loop is the harness's own cost. Goal: <= 20 µs.

Usage: ``python benchmarks/engine.py [--duration 10] [--rounds 1] [--skip-openvino]``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ngb.core.records.types import MeasureSettings, TrialSpec
from ngb.core.trial.measure import run_trial

MODEL, BATCH, REPETITIONS = "resnet18", 8, 5
RATIO_GOAL, OVERHEAD_GOAL_US = 0.97, 20.0
_FPS = re.compile(r"Throughput:\s*([0-9.]+)\s*FPS")


def benchmark_app_path() -> str:
    found = shutil.which("benchmark_app") or str(Path(sys.executable).with_name("benchmark_app"))
    if not Path(found).exists():
        raise SystemExit("benchmark_app not found (it ships with the openvino wheel)")
    return found


def ngb_openvino(duration_s: float, workdir: Path) -> tuple[float, float, Path, dict]:
    """ngb's throughput (mean over repetitions) and CoV; the ONNX file it compiled."""
    spec = TrialSpec(
        model=MODEL,
        compiler="openvino",
        batch=BATCH,
        compiler_options={"hint": "THROUGHPUT"},
        measure=MeasureSettings(
            warmup_iters=1,
            warmup_s=1.0,
            min_iters=1,
            min_duration_s=duration_s / REPETITIONS,
            repetitions=REPETITIONS,
            verify=False,
        ),
    )
    result = run_trial(spec, workdir=workdir)
    if not result.ok:
        raise SystemExit(f"ngb trial failed: {result.error}")
    onnx = Path(result.extra["onnx_path"])
    return result.throughput.mean, result.throughput.cov, onnx, result.extra


def vendor_openvino(onnx: Path, duration_s: float) -> tuple[float, str]:
    """benchmark_app's throughput on the same file, device, hint, shape and duration."""
    cmd = [
        benchmark_app_path(),
        "-m",
        str(onnx),
        "-d",
        "CPU",
        "-hint",
        "throughput",
        "-t",
        f"{duration_s:g}",
        "-shape",
        f"[{BATCH},3,224,224]",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=duration_s * 10 + 120)
    match = _FPS.search(proc.stdout)
    if proc.returncode != 0 or not match:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        raise SystemExit(f"benchmark_app failed (status {proc.returncode}): {' | '.join(tail)}")
    nireq = re.search(r"Number of infer requests:?\s*(\d+)|(\d+) infer requests", proc.stdout)
    return float(match.group(1)), (nireq.group(0) if nireq else "")


def harness_overhead(duration_s: float) -> dict[str, float]:
    """Per-call cost of the timed loop with a compiler whose run() does nothing."""
    spec = TrialSpec(
        model="noop",
        compiler="noop",
        measure=MeasureSettings(
            warmup_iters=1000,
            warmup_s=0.2,
            min_iters=10_000,
            min_duration_s=duration_s / REPETITIONS,
            repetitions=REPETITIONS,
        ),
    )
    result = run_trial(spec)
    if not result.ok:
        raise SystemExit(f"noop trial failed: {result.error}")
    per_call_ns = [r["elapsed_s"] / r["iters"] * 1e9 for r in result.repetitions]
    return {
        "per_call_ns_median": statistics.median(per_call_ns),
        "per_call_ns_max": max(per_call_ns),
        "latency_p50_ns": result.latency_ms.p50 * 1e6,
        "latency_p99_ns": result.latency_ms.p99 * 1e6,
        "calls": sum(r["iters"] for r in result.repetitions),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds measured per side")
    parser.add_argument("--rounds", type=int, default=1, help="alternating ngb/vendor rounds")
    parser.add_argument("--skip-openvino", action="store_true", help="only the overhead figure")
    args = parser.parse_args(argv)

    print(f"ngb engine benchmark  (python {sys.version.split()[0]})")
    ratios: list[float] = []
    if not args.skip_openvino:
        print(
            f"\n[1] OpenVINO throughput, timm {MODEL} b{BATCH}, CPU, THROUGHPUT hint, "
            f"{args.duration:g} s per side"
        )
        print(
            f"{'round':>5}  {'ngb (samples/s)':>16}  {'ngb CoV':>8}  "
            f"{'benchmark_app (FPS)':>20}  {'ratio':>6}"
        )
        with tempfile.TemporaryDirectory(prefix="ngb-engine-") as tmp:
            extra: dict = {}
            onnx: Path | None = None
            for round_no in range(1, args.rounds + 1):
                workdir = Path(tmp) / f"r{round_no}"
                if onnx is not None and round_no % 2 == 0:  # even rounds: the vendor goes first
                    vendor_tput, _ = vendor_openvino(onnx, args.duration)
                    ngb_tput, cov, onnx, extra = ngb_openvino(args.duration, workdir)
                else:
                    ngb_tput, cov, onnx, extra = ngb_openvino(args.duration, workdir)
                    vendor_tput, _ = vendor_openvino(onnx, args.duration)
                ratio = ngb_tput / vendor_tput
                ratios.append(ratio)
                print(
                    f"{round_no:>5}  {ngb_tput:>16.2f}  {cov:>8.2%}  {vendor_tput:>20.2f}  "
                    f"{ratio:>6.3f}"
                )
            facts = {
                k: extra.get(k)
                for k in (
                    "nireq",
                    "optimal_nireq",
                    "num_streams",
                    "inference_num_threads",
                    "inference_precision",
                    "mean_in_flight",
                )
            }
            print(f"  ngb openvino settings: {facts}")
        median_ratio = statistics.median(ratios)
        verdict = "meets" if median_ratio >= RATIO_GOAL else "MISSES"
        print(
            f"  median ratio ngb/benchmark_app = {median_ratio:.3f} "
            f"({verdict} the >= {RATIO_GOAL} goal)"
        )

    print("\n[2] Harness overhead per timed call (noop compiler)")
    over = harness_overhead(min(args.duration, 5.0))
    us = over["per_call_ns_median"] / 1000
    print(
        f"  per call (elapsed/iters, median of {REPETITIONS} reps): "
        f"{over['per_call_ns_median']:.0f} ns = {us:.3f} µs  (max {over['per_call_ns_max']:.0f} ns)"
    )
    print(
        f"  per-call latency p50 / p99: {over['latency_p50_ns']:.0f} / "
        f"{over['latency_p99_ns']:.0f} ns over {over['calls']:,} calls"
    )
    verdict = "meets" if us <= OVERHEAD_GOAL_US else "MISSES"
    print(f"  {verdict} the <= {OVERHEAD_GOAL_US:g} µs goal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
