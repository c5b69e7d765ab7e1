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

Time's part (``ngb.core.statistics.reruns``): ngb widens each trial's interval by the design effect
that re-runs on the host showed, learnt from a history that ``ngb measure`` keeps in its cache. By
default this script gives the runs a fresh ngb home (``--history fresh``), so the first trial of the
first workload meets a host with no history, as a new user's first runs do; the workloads then share
that history, in the order given. ``--history keep`` uses the caller's own cache. Coverage is
checked on the printed interval, ``mean * exp(-+ half / mean)``
(``ngb.core.statistics.intervals.positive``).

The machine itself can drift: on the 2-core development VM, MHA-128 b1 ran at ~12,200/s for five
trials and ~16,000/s for the next seven (2026-11-26), every trial's interval narrow and right for
its minutes. No interval stated from inside one trial can cover a host that changes speed between
trials, so before each trial a probe -- a plain loop of a fixed small workload (``--probe``,
e.g. ``mha:128:1``, ``torch.inference_mode``, 1 s warm-up, 6 x 0.4 s windows) in a fresh process
-- reads the machine's speed. The script prints the probe's spread between trials beside its
spread within a process, and the coverage a second time with each trial's mean and half-width
scaled by (mean probe / its probe): coverage under the machine's drift removed. The probe's own
noise is left in, so the adjusted figures, if anything, under-state the coverage.

    .venv/bin/ngb bench coverage
    .venv/bin/python benchmarks/coverage.py --trials 12 \
        --workload mha:128:1:identity --workload conv:64:16:identity --workload resnet18::8:identity
"""

from __future__ import annotations

import argparse
import atexit
import json
import math
import os
import runpy
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WORKLOADS = ["mha:128:1:identity", "conv:64:16:identity", "resnet18::8:identity"]
START_ENV = "NGB_WORKER_START"  # ngb.core.trial.worker_start: how ngb measure starts its workers


# the probe is parity.py's plain loop (the same code a user would write), run on the CPU with
# 1 s of warm-up and 6 x 0.4 s windows
def _parity_plain() -> str:
    """parity.py's ``PLAIN``; parity.py imports its neighbour ``_args`` as a script does, so its
    folder is on the path while it loads (this file is also loaded by the tests, not run)."""
    here = str(Path(__file__).parent)
    added = here not in sys.path
    if added:
        sys.path.insert(0, here)
    try:
        return str(runpy.run_path(str(Path(__file__).with_name("parity.py")))["PLAIN"])
    finally:
        if added:
            sys.path.remove(here)


PLAIN = _parity_plain()


def probe(workload: str) -> list[float]:
    """The probe's window rates in a fresh process (see the module docstring)."""
    model, width, batch = workload.split(":")
    cmd = [sys.executable, "-c", PLAIN, model, width, batch, "cpu", "1.0", "6", "0.4"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise SystemExit(f"probe failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return [float(r) for r in json.loads(proc.stdout)["windows"]]


def drift_adjusted(trials: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each trial's mean and half-width scaled by (mean probe / the probe before it)."""
    level = statistics.fmean(t["probe"] for t in trials)
    out = []
    for t in trials:
        scale = level / t["probe"]
        half = None if t["half"] is None else t["half"] * scale
        groups = [[v * scale for v in g] for g in t["groups"]]
        out.append({**t, "mean": t["mean"] * scale, "half": half, "groups": groups})
    return out


def probe_spread(trials: list[dict[str, Any]]) -> tuple[float, float]:
    """(CoV of the probe means between trials, the CoV a probe mean has from its own windows)."""
    means = [t["probe"] for t in trials]
    between = statistics.stdev(means) / statistics.fmean(means)
    within = statistics.median(
        statistics.stdev(w) / statistics.fmean(w) / len(w) ** 0.5
        for w in (t["probe_windows"] for t in trials)
    )
    return between, within


def measure(
    model: str,
    width: str,
    batch: str,
    compiler: str,
    extra: list[str],
    start: str = "",
    home: str = "",
) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "ngb.sweeps.cli", "measure", model, "-c", compiler, "-b", batch,
           "--no-verify", "--json", *extra]  # fmt: skip
    if width:
        cmd += ["--width", width]
    env = {k: v for k, v in os.environ.items() if k != START_ENV}
    if start:
        env[START_ENV] = start
    if home:
        env["NGB_HOME"] = home
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
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
        "worker_start": (result.get("extra") or {}).get("worker_start") or {},
        "reruns": ((result.get("extra") or {}).get("measure") or {}).get("reruns") or {},
    }


def started_text(trials: list[dict[str, Any]]) -> str:
    """How the runs' workers started, and what fresh interpreters cost (seconds per trial)."""
    methods = sorted({str(t["worker_start"].get("method", "?")) for t in trials})
    waits = [
        t["worker_start"]["start_wait_s"] for t in trials if "start_wait_s" in t["worker_start"]
    ]
    processes = statistics.median(len(t["groups"]) for t in trials)
    text = f"workers: {'/'.join(methods)}, median {processes:g} processes a trial"
    if waits:
        wait = statistics.median(waits)
        text += f"; waited for the first interpreters' imports median {wait:.1f} s a trial"
    return text


def stated(trial: dict[str, Any]) -> tuple[float, float]:
    half = trial["half"]
    return trial["mean"], float("inf") if half is None else float(half)


def holds(mean: float, half: float, target: float, log_scale: bool) -> bool:
    """Does the interval hold ``target``? ngb prints ``mean * exp(-+ half / mean)``."""
    if not log_scale:
        return abs(mean - target) <= half
    if not (mean > 0 and target > 0):
        return False
    return abs(math.log(target / mean)) <= half / mean


def allowance_text(trials: list[dict[str, Any]]) -> str:
    """The design effect the runs used, first and last (ngb.core.statistics.reruns)."""
    effects = [t["reruns"].get("design_effect") for t in trials if t.get("reruns")]
    if not effects:
        return "no re-run allowance recorded"
    last = trials[-1]["reruns"]
    return (f"re-run design effect x{effects[0]:g} (first run, {trials[0]['reruns'].get('source')})"
            f" -> x{effects[-1]:g} (last run, {last.get('pooled_runs')} re-runs on the host, "
            f"{last.get('own_runs')} of this workload)")  # fmt: skip


def end_to_end(serial: bool) -> Any:
    """Older ngb: one interval over every repetition in the order they ran."""
    from ngb.core.statistics.stopping import interval

    def method(trial: dict[str, Any]) -> tuple[float, float]:
        ci = interval([v for g in trial["groups"] for v in g], serial=serial)
        return ci.mean, ci.half_width

    return method


def coverage(
    trials: list[dict[str, Any]], method: Any, log_scale: bool = False
) -> tuple[float, float]:
    """(share of trials whose interval holds the others' grand mean, median width ratio)."""
    means = [t["mean"] for t in trials]
    sd = statistics.stdev(means)
    hits, ratios = 0, []
    for i, trial in enumerate(trials):
        target = statistics.fmean(m for j, m in enumerate(means) if j != i)
        mean, half = method(trial)
        hits += holds(mean, half, target, log_scale)
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
    parser.add_argument(
        "--probe", default="", metavar="MODEL:WIDTH:BATCH",
        help="a machine-speed probe run before each trial, e.g. mha:128:1 (default: none)",
    )  # fmt: skip
    parser.add_argument(
        "--history", default="fresh", choices=("fresh", "keep"),
        help="fresh: a new ngb home for these runs, no re-run history (a new host); keep: "
        "the caller's own ngb cache",
    )  # fmt: skip
    parser.add_argument(
        "--start", default="", choices=("", "fresh", "auto", "fork", "forkserver"),
        help=f"how ngb measure starts its workers ({START_ENV}; default: ngb's, a fresh "
        "interpreter each; auto: forked from one, the old way, for comparison)",
    )  # fmt: skip
    parser.add_argument("extra", nargs="*", help="more ngb measure options, after --")
    args = parser.parse_args()
    if args.trials < 3:
        raise SystemExit("--trials must be >= 3 (leave-one-out needs others)")
    load = os.getloadavg()
    print(f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"{args.trials} ngb measure runs per workload, "
          f"options: {args.extra or 'defaults'}")  # fmt: skip
    saved = {}
    home = tempfile.mkdtemp(prefix="ngb-coverage-home-") if args.history == "fresh" else ""
    if home:  # the fresh history's store and caches go when the benchmark ends
        atexit.register(shutil.rmtree, home, True)
    for workload in args.workload or WORKLOADS:
        parts = workload.split(":")
        if len(parts) != 4:
            raise SystemExit(f"--workload {workload!r}: want MODEL:WIDTH:BATCH:COMPILER")
        trials = []
        for _ in range(args.trials):
            windows = probe(args.probe) if args.probe else []
            model, width, batch, compiler = parts
            trial = measure(model, width, batch, compiler, args.extra, start=args.start, home=home)
            if windows:
                trial.update(probe=statistics.fmean(windows), probe_windows=windows)
            trials.append(trial)
        saved[workload] = trials
        means = [t["mean"] for t in trials]
        spread = statistics.stdev(means) / statistics.fmean(means)
        valid = sum(t["verdict"] == "VALID" for t in trials)
        walls = [t["wall_s"] for t in trials]
        print(f"{workload}: trial means {min(means):,.1f}-{max(means):,.1f}/s, CoV between "
              f"trials {spread:.1%}; {valid}/{len(trials)} VALID; wall per run median "
              f"{statistics.median(walls):.1f} s (max {max(walls):.1f})")  # fmt: skip
        print(f"  {started_text(trials)}; load average now {os.getloadavg()[0]:.2f}")
        print(f"  {allowance_text(trials)}")
        for name, method, log_scale in (
            ("ngb (stated)", stated, True),
            ("end-to-end t", end_to_end(False), False),
            ("end-to-end AR1", end_to_end(True), False),
        ):
            share, ratio = coverage(trials, method, log_scale)
            print(f"  {name:15} holds the others' mean in {share:4.0%} of trials; width ratio "
                  f"{ratio:.2f}")  # fmt: skip
        if args.probe:
            between, within = probe_spread(trials)
            low, high = min(t["probe"] for t in trials), max(t["probe"] for t in trials)
            print(f"  machine probe ({args.probe}, plain loop) {low:,.0f}-{high:,.0f}/s: CoV "
                  f"between trials {between:.1%}, from its own windows {within:.1%}")  # fmt: skip
            adjusted = drift_adjusted(trials)
            means = [t["mean"] for t in adjusted]
            cov = statistics.stdev(means) / statistics.fmean(means)
            share, ratio = coverage(adjusted, stated, True)
            print(f"  drift removed: trial means CoV {cov:.1%}; ngb (stated) holds the others' "
                  f"mean in {share:4.0%} of trials; width ratio {ratio:.2f}")  # fmt: skip
    if args.save:
        with open(args.save, "w") as f:
            json.dump(saved, f)
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
