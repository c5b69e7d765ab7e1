"""Does ngb drive OpenVINO as well as OpenVINO's own ``benchmark_app``?

Exports one timm model once, then measures on the *same* ONNX file, one after the other:
  1. ngb's ``openvino`` backend, THROUGHPUT hint, ``timed_loop`` (async queue, OPTIMAL nireq);
  2. ``benchmark_app -m model.onnx -d CPU -hint throughput -t T -shape [B,3,H,W]``;
  3. for contrast, one synchronous request under the same hint (what a naive harness measures).
Prints the three throughputs (samples/s) and the ngb / benchmark_app ratio (goal >= 0.97).

    .venv/bin/python benchmarks/openvino_check.py --model resnet18 --batch 8 --seconds 10 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def benchmark_app_fps(onnx: Path, batch: int, size: int, seconds: int) -> float:
    exe = shutil.which("benchmark_app") or str(Path(sys.executable).with_name("benchmark_app"))
    argv = [exe, "-m", str(onnx), "-d", "CPU", "-hint", "throughput", "-t", str(seconds),
            "-shape", f"[{batch},3,{size},{size}]"]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    match = re.search(r"Throughput:\s*([\d.]+)\s*FPS", out)
    if not match:
        raise SystemExit(f"could not find the throughput in benchmark_app's output:\n{out}")
    return float(match.group(1))  # benchmark_app's FPS counts samples (batch x iterations / s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--seconds", type=int, default=10, help="per measurement")
    parser.add_argument("--rounds", type=int, default=1, help="alternate ngb/benchmark_app runs")
    args = parser.parse_args()

    import timm
    import torch
    from ngb.core.compilers import CompileContext, get_compiler
    from ngb.core.compilers.base import Compiled

    model = timm.create_model(args.model, pretrained=False).eval()
    example = torch.randn(args.batch, 3, args.size, args.size)
    ngb_runs: list[float] = []
    vendor_runs: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        ctx = CompileContext(workdir=Path(tmp))
        compiled = get_compiler("openvino", {"hint": "THROUGHPUT"}).compile(model, example, ctx)
        onnx = Path(compiled.extra["onnx_path"])
        compiled.timed_loop(min_iters=compiled.extra["nireq"], min_duration_s=1.0)  # warm-up
        # Alternating runs: on a shared machine, background load drifts; pairing each ngb
        # run with a benchmark_app run right after it keeps the comparison fair.
        for _ in range(args.rounds):
            loop = compiled.timed_loop(min_iters=1, min_duration_s=args.seconds)
            ngb_runs.append(loop.iters * args.batch / loop.elapsed_s)
            vendor_runs.append(benchmark_app_fps(onnx, args.batch, args.size, args.seconds))
        compiled.drain()  # the async queue stays full between loops; empty it first
        sync = Compiled.timed_loop(compiled, min_iters=1, min_duration_s=args.seconds / 2)
        sync_fps = sync.iters * args.batch / sync.elapsed_s
        compiled.close()

    load = os.getloadavg()
    ngb_fps, vendor_fps = statistics.median(ngb_runs), statistics.median(vendor_runs)
    print(f"model {args.model} batch {args.batch}, {os.cpu_count()} CPUs, "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")  # fmt: skip
    for i, (ours, theirs) in enumerate(zip(ngb_runs, vendor_runs, strict=True), 1):
        print(f"  round {i}: ngb {ours:8.2f}   benchmark_app {theirs:8.2f}   "
              f"ratio {ours / theirs:.3f}")  # fmt: skip
    print(f"ngb openvino (THROUGHPUT, nireq {compiled.extra['nireq']}, "
          f"streams {compiled.extra.get('num_streams')}, "
          f"{compiled.extra.get('inference_precision')}): {ngb_fps:8.2f} samples/s (median; "
          f"mean in flight {compiled.extra.get('mean_in_flight')})")  # fmt: skip
    print(f"benchmark_app -hint throughput:                {vendor_fps:8.2f} samples/s (median)")
    print(f"one synchronous request (naive harness):       {sync_fps:8.2f} samples/s")
    ratios = [ours / theirs for ours, theirs in zip(ngb_runs, vendor_runs, strict=True)]
    print(f"ngb / benchmark_app: median of per-round ratios {statistics.median(ratios):.3f}, "
          f"ratio of medians {ngb_fps / vendor_fps:.3f}   (goal >= 0.97)")  # fmt: skip


if __name__ == "__main__":
    main()
