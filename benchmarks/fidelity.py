"""Does `ngb measure` (its defaults) agree with the vendors' own tools? Side by side, alternating.

Cases, each measured in every round by ngb and by an independent reference, the order of the two
swapped every round so that a drift in background load does not favour one side:

  ov-throughput  `ngb measure MODEL -c openvino -b 8`                 vs `benchmark_app -hint
                 throughput -t T -shape [8,3,224,224]` on the same ONNX export
  ov-latency     `ngb measure MODEL -c openvino -b 1 -o hint=LATENCY`  vs `benchmark_app -hint
                 latency -shape [1,3,224,224]`
  eager-cpu      `ngb measure MODEL -c identity -b 8`                  vs
                 `torch.utils.benchmark.Timer("model(x)").adaptive_autorange()` in a fresh process
  eager-cpu-system  the same with `--allocator system` named on both sides (ngb's default today,
                 so the two eager cases agree unless that default changes; see
                 ngb.core.trial.allocator)
  eager-cuda     the same at batch 32 on the GPU (`--device cuda`), only where torch sees CUDA

Both sides run at their defaults, which are the same precision: OpenVINO's default inference
precision in both (the ngb result records which one ran; benchmark_app's is read from its config
dump) and strict fp32 for eager (torch's default on both sides), and the same allocator setting
(the reference process applies ngb's). ngb runs as a new user would run
it, with its stopping rule and worker processes; its 95 % CI and verdict are printed beside each
figure. Ratio = ngb / reference (goal >= 0.97); ngb's median is printed beside it, as the torch
Timer reference reports a median. On a busy machine the figures are noisy: the load average is
printed with them, and `--self-check` runs each reference twice per round, so that the ratio of
the vendor's tool to itself shows how close this machine lets any two runs come.

    .venv/bin/ngb bench fidelity -- --rounds 2
    .venv/bin/python benchmarks/fidelity.py --rounds 3 --cases ov-throughput,eager-cpu
    .venv/bin/python benchmarks/fidelity.py --rounds 3 --self-check
    .venv/bin/python benchmarks/fidelity.py --rounds 1 --seconds 2 --cases ov-latency,eager-cpu \\
        -- --repetitions 2 --workers 1 --warmup-s 0.2     # a smoke run: does every path still work
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _args import positive_int  # this folder: the script runs as a file
from ngb.core.records.types import MeasureSettings
from ngb.core.statistics.intervals import Mean, positive

CASES = ("ov-throughput", "ov-latency", "eager-cpu", "eager-cpu-system", "eager-cuda")

#: the allocator ngb measure runs with when not told: the eager references apply it too. They
#: applied "retain" after ngb's default had become "system", and eager-cpu then read 0.837 where
#: eager-cpu-system, the same on both sides, read 0.989 (2026-11-29)
DEFAULT_ALLOCATOR = MeasureSettings().allocator

_TIMER = """
import json, sys, timm, torch
from torch.utils import benchmark
from ngb.core.trial import allocator
name, batch, device = sys.argv[1], int(sys.argv[2]), sys.argv[3]
# The same allocator setting as the ngb side (an environment fact, like the precision).
in_force = allocator.apply(sys.argv[4])
model = timm.create_model(name, pretrained=False).eval().to(device)
x = torch.randn(batch, 3, 224, 224, device=device)
with torch.inference_mode():
    for _ in range(3):
        model(x)
    # Timer runs single-threaded unless told: give it torch's default, as ngb's eager uses.
    timer = benchmark.Timer(
        stmt="model(x)", globals={"model": model, "x": x}, num_threads=torch.get_num_threads()
    )
    m = timer.adaptive_autorange(min_run_time=2.0)
print(json.dumps({"median_s": m.median, "iqr_s": m.iqr, "runs": len(m.times),
                  "threads": torch.get_num_threads(), "allocator": in_force}))
"""


def ngb_measure(model: str, args: list[str]) -> dict:
    cmd = [sys.executable, "-m", "ngb.sweeps.cli", "measure", model, *args, "--json"]
    # ngb's default worker start (a fresh interpreter each), whatever the caller's shell set
    env = {k: v for k, v in os.environ.items() if k != "NGB_WORKER_START"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        raise SystemExit(f"ngb measure {' '.join(args)} failed: {tail}")
    result = json.loads(proc.stdout)
    t = result["throughput"]
    return {
        "value": t["mean"],
        "median": t["median"],
        "ci": result.get("ci_half_width"),
        "df": ((result.get("extra") or {}).get("measure") or {}).get("df"),
        "n": t["n"],
        "verdict": result.get("verdict"),
        "disturbed": result.get("disturbed"),
        "precision": result.get("precision"),
        "workers": result.get("workers"),
    }


def benchmark_app(onnx: Path, batch: int, hint: str, seconds: int) -> dict:
    exe = shutil.which("benchmark_app") or str(Path(sys.executable).with_name("benchmark_app"))
    argv = [exe, "-m", str(onnx), "-d", "CPU", "-hint", hint, "-t", str(seconds),
            "-shape", f"[{batch},3,224,224]"]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=600).stdout
    fps = re.search(r"Throughput:\s*([\d.]+)\s*FPS", out)
    if not fps:
        raise SystemExit(f"no throughput in benchmark_app's output:\n{out[-2000:]}")
    precision = re.search(r"INFERENCE_PRECISION_HINT:\s*(?:<Type:\s*)?'?([\w.]+)", out)
    # benchmark_app's FPS counts samples: batch x completed requests per second.
    return {"value": float(fps.group(1)), "precision": precision.group(1) if precision else None}


def timer_reference(model: str, batch: int, device: str, alloc: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", _TIMER, model, str(batch), device, alloc],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode != 0:
        raise SystemExit(f"torch Timer reference failed: {proc.stderr.strip()[-500:]}")
    m = json.loads(proc.stdout.strip().splitlines()[-1])
    alloc_text = "retain" if m["allocator"].startswith("glibc retain") else m["allocator"]
    return {
        "value": batch / m["median_s"],
        "precision": f"fp32, {m['threads']} threads, allocator {alloc_text}",
    }


def export(model: str, folder: Path, batch: int) -> Path:
    import timm
    import torch
    from ngb.core.compilers.onnx_export import export_onnx

    net = timm.create_model(model, pretrained=False).eval()
    return export_onnx(net, torch.randn(batch, 3, 224, 224), folder / f"{model}_b{batch}.onnx")


def plan(args: argparse.Namespace, folder: Path) -> dict[str, tuple]:
    """case -> (ngb arguments, reference callable)."""
    import torch

    cases: dict[str, tuple] = {}
    wanted = args.cases.split(",")
    if "ov-throughput" in wanted:
        onnx8 = export(args.model, folder, 8)
        cases["ov-throughput"] = (
            ["-c", "openvino", "-b", "8"],
            lambda: benchmark_app(onnx8, 8, "throughput", args.seconds),
        )
    if "ov-latency" in wanted:
        onnx1 = export(args.model, folder, 1)
        cases["ov-latency"] = (
            ["-c", "openvino", "-b", "1", "-o", "hint=LATENCY"],
            lambda: benchmark_app(onnx1, 1, "latency", args.seconds),
        )
    if "eager-cpu" in wanted:
        cases["eager-cpu"] = (
            ["-c", "identity", "-b", "8"],
            lambda: timer_reference(args.model, 8, "cpu", DEFAULT_ALLOCATOR),
        )
    if "eager-cpu-system" in wanted:  # both sides with glibc's own allocator settings
        cases["eager-cpu-system"] = (
            ["-c", "identity", "-b", "8", "--allocator", "system"],
            lambda: timer_reference(args.model, 8, "cpu", "system"),
        )
    if "eager-cuda" in wanted:
        if torch.cuda.is_available():
            cases["eager-cuda"] = (
                ["-c", "identity", "-b", "32", "--device", "cuda"],
                lambda: timer_reference(args.model, 32, "cuda", DEFAULT_ALLOCATOR),
            )
        else:
            print("eager-cuda: skipped (torch sees no CUDA GPU)")
    return cases


def fmt(side: dict) -> str:
    """A figure with ngb's interval as the reports print it (``intervals.positive``: the stated
    half-width carried to the log scale, so no bound of a throughput falls to or below zero)."""
    text = f"{side['value']:9.2f}"
    if side.get("ci") is not None and side.get("df"):
        est = positive(Mean(side["value"], side["ci"], side["df"]))
        if est.known:
            text += f" [{est.lo:.2f}, {est.hi:.2f}]"
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--rounds", type=positive_int, default=3)
    parser.add_argument("--seconds", type=positive_int, default=10, help="benchmark_app -t")
    parser.add_argument("--cases", default=",".join(CASES), help=f"any of {', '.join(CASES)}")
    parser.add_argument(
        "--self-check", action="store_true",
        help="also run each reference a second time and print reference / reference: how far "
        "this machine lets two runs of the same tool agree",
    )  # fmt: skip
    parser.add_argument("extra", nargs="*", help="more ngb measure options, after -- (a smoke run)")
    args = parser.parse_args()
    unknown = set(args.cases.split(",")) - set(CASES)
    if unknown:
        raise SystemExit(f"unknown case(s) {sorted(unknown)}; valid: {', '.join(CASES)}")

    load = os.getloadavg()
    print(f"{args.model}, {os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f}; ngb measure options: {' '.join(args.extra) or 'defaults'}; "
          f"{args.rounds} alternating rounds")  # fmt: skip
    ratios: dict[str, list[float]] = {}
    selves: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="ngb-fidelity-") as tmp:
        cases = plan(args, Path(tmp))
        for r in range(args.rounds):
            for case, (ngb_args, reference) in cases.items():
                if r % 2 == 0:  # swap the order every round
                    ours, theirs = ngb_measure(args.model, [*ngb_args, *args.extra]), reference()
                else:
                    theirs, ours = reference(), ngb_measure(args.model, [*ngb_args, *args.extra])
                ratio = ours["value"] / theirs["value"]
                ratios.setdefault(case, []).append(ratio)
                flag = " disturbed" if ours.get("disturbed") else ""
                print(
                    f"round {r + 1} {case:13} ngb {fmt(ours)} (n={ours['n']}, "
                    f"{ours['workers']} proc, {ours['verdict']}{flag}, {ours['precision']})  "
                    f"ref {fmt(theirs)} ({theirs['precision']})  ratio {ratio:.3f} "
                    f"(ngb's median: {ours['median'] / theirs['value']:.3f})",
                    flush=True,
                )
                if args.self_check:  # the reference against itself: the machine's own floor
                    again = reference()
                    floor = again["value"] / theirs["value"]
                    selves.setdefault(case, []).append(floor)
                    print(f"round {r + 1} {case:13} ref again {fmt(again)}  ref / ref {floor:.3f}")
    print("median ratio ngb / reference (goal >= 0.97):")
    for case, values in ratios.items():
        print(f"  {case:13} {statistics.median(values):.3f}   "
              f"(rounds: {', '.join(f'{v:.3f}' for v in values)})")  # fmt: skip
    if selves:
        print("the reference against itself, run again straight after (same goal, same machine):")
        for case, values in selves.items():
            print(f"  {case:13} {statistics.median(values):.3f}   "
                  f"(rounds: {', '.join(f'{v:.3f}' for v in values)})")  # fmt: skip
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
