"""Do two runs of the same sweep agree within their stated intervals?

A reviewer's first question of any benchmark table: run it again, do you get the same numbers?
This script answers it for a whole sweep. Goals (issue 19): >= 80 % of each run's trials VALID,
and of the trials VALID in both runs >= 95 % whose difference lies within the stated intervals;
every depth slope's interval from one run overlapping the other's (issue 13):

    # run a sweep twice back to back, each in a fresh NGB_HOME, then compare
    .venv/bin/python benchmarks/agreement.py run --preset benchmarks/sweeps/depth-agreement.toml
    .venv/bin/python benchmarks/agreement.py run --preset cpu-repro --device localhost  # ~1 h
    # compare two runs already made (the newest run in each database, or the named ones)
    .venv/bin/python benchmarks/agreement.py compare A/results.duckdb B/results.duckdb
    .venv/bin/python benchmarks/agreement.py compare DB DB --run-a RUN1 --run-b RUN2

Pairs are matched by (device, trial key), successful trials only. Printed: wall time and VALID
share of each run, the share of pairs whose mean throughputs agree within ±5 % and ±10 %, the
share whose 95 % intervals overlap, the worst ratios, and for every (block, width, batch,
compiler) of the depth table the slope with its bootstrap interval from each run and whether the
two intervals overlap. Run it on a quiet machine: the load average is printed beside the figures.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def run_sweep(preset: str, device: str, home: Path) -> tuple[Path, float]:
    """``ngb run PRESET -d DEVICE`` in a fresh ``NGB_HOME``; the database and wall seconds."""
    env = {**os.environ, "NGB_HOME": str(home)}
    cmd = [sys.executable, "-m", "ngb.sweeps.cli", "run", preset, "-d", device]
    start = time.monotonic()
    proc = subprocess.run(cmd, env=env, text=True, capture_output=True, check=False)
    wall = time.monotonic() - start
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
    print(f"  {' '.join(cmd[3:])} in {home}: exit {proc.returncode}, {wall / 60:.1f} min; "
          + " | ".join(tail))  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"the sweep failed (exit {proc.returncode}); see the lines above")
    return home / "data" / "results.duckdb", wall


class Run:
    """One run's successful trials (newest per point), their samples and the depth table."""

    def __init__(self, db: Path, run_id: str | None) -> None:
        from ngb.sweeps.report.data import ReportData
        from ngb.sweeps.store.database import Store

        store = Store(db)
        if run_id is None:
            runs = store.runs()
            if not runs:
                raise SystemExit(f"no runs in {db}")
            run_id = max(runs, key=lambda r: str(r.get("created_at")))["run_id"]
        self.db, self.run_id = db, run_id
        self.data = ReportData(store, run_id=run_id)
        self.meta = store.run(run_id)
        self.by_key = {(t["device"], t["key"]): t for t in self.data.trials()}

    def wall_min(self) -> float | None:
        start, end = self.meta.get("created_at"), self.meta.get("finished_at")
        if start is None or end is None:
            return None
        return (end - start).total_seconds() / 60

    def valid_share(self) -> tuple[int, int]:
        rows = list(self.by_key.values())
        return sum(1 for t in rows if t.get("verdict") == "VALID"), len(rows)

    def slopes(self) -> dict[tuple[Any, ...], Any]:
        """``(device, block, width, batch, compiler) -> Estimate`` of the depth slope."""
        from ngb.sweeps.report import derived
        from ngb.sweeps.report.data import group

        base = self.data.baseline
        rows = [
            t
            for t in self.by_key.values()
            if t["model"] in ("conv", "mha") and t.get("width") and t.get("throughput_mean")
        ]
        out: dict[tuple[Any, ...], Any] = {}
        for key, members in group(rows, "device", "model", "width", "batch").items():
            by_compiler = group(members, "compiler")
            identity = {t["depth"]: t for t in by_compiler.get((base,), [])}
            for (compiler,), mine_rows in by_compiler.items():
                mine = {t["depth"]: t for t in mine_rows}
                shared = sorted(set(mine) & set(identity))
                if compiler == base or len(shared) < 3:  # a slope over 2 points has no spread
                    continue
                trend, _ = derived.depth_trend(
                    shared, [mine[d] for d in shared], [identity[d] for d in shared]
                )
                out[(*key, compiler)] = trend.estimate
        return out


def trial_name(trial: dict[str, Any]) -> str:
    """``resnet18 openvino b8`` (``+ int8`` for an optimisation): how a reader finds the trial."""
    opt = trial.get("optimisation") or "none"
    return f"{trial['label']} {trial['compiler']} b{trial['batch']}" + (
        f" + {opt}" if opt != "none" else ""
    )


def ci_overlap(a: dict[str, Any], b: dict[str, Any]) -> bool | None:
    ha, hb = a.get("throughput_ci_half"), b.get("throughput_ci_half")
    if ha is None or hb is None or not (math.isfinite(ha) and math.isfinite(hb)):
        return None
    return abs(a["throughput_mean"] - b["throughput_mean"]) <= ha + hb


def within_intervals(a: dict[str, Any], b: dict[str, Any]) -> bool | None:
    """Do two runs' means agree within their stated 95 % intervals? The difference of two
    independent estimates has half-width sqrt(ha^2 + hb^2): |A - B| must be inside it (stricter
    than the intervals merely overlapping, which allows ha + hb)."""
    ha, hb = a.get("throughput_ci_half"), b.get("throughput_ci_half")
    if ha is None or hb is None or not (math.isfinite(ha) and math.isfinite(hb)):
        return None
    return abs(a["throughput_mean"] - b["throughput_mean"]) <= math.hypot(ha, hb)


def compare(a: Run, b: Run) -> bool:
    """Print the agreement figures; True when both goals are met."""
    for name, run in (("A", a), ("B", b)):
        valid, total = run.valid_share()
        wall = run.wall_min()
        print(f"run {name}: {run.run_id} in {run.db}: {total} ok trials, {valid} VALID "
              f"({valid / max(total, 1):.0%})"
              + (f", {wall:.1f} min wall" if wall is not None else ""))  # fmt: skip
    shared = sorted(set(a.by_key) & set(b.by_key))
    if not shared:
        raise SystemExit("the two runs share no successful trial")
    ratios = {k: b.by_key[k]["throughput_mean"] / a.by_key[k]["throughput_mean"] for k in shared}
    values = list(ratios.values())
    within5 = sum(1 for r in values if abs(r - 1) <= 0.05) / len(values)
    within10 = sum(1 for r in values if abs(r - 1) <= 0.10) / len(values)
    overlaps = [ci_overlap(a.by_key[k], b.by_key[k]) for k in shared]
    known = [o for o in overlaps if o is not None]
    both_valid = [
        k for k in shared if a.by_key[k].get("verdict") == b.by_key[k].get("verdict") == "VALID"
    ]
    valid_within5 = (
        sum(1 for k in both_valid if abs(ratios[k] - 1) <= 0.05) / len(both_valid)
        if both_valid
        else math.nan
    )
    print(f"\n{len(shared)} trials in both runs; throughput B / A:")
    print(f"  within ±5 %:  {within5:.0%}")
    print(f"  within ±10 %: {within10:.0%}")
    print(f"  median |B/A - 1|: {statistics.median(abs(r - 1) for r in values):.1%}")
    print(f"  95 % intervals overlap: {sum(known)}/{len(known)}")
    print(f"  VALID in both: {len(both_valid)}, of which within ±5 %: {valid_within5:.0%}")
    agree = [within_intervals(a.by_key[k], b.by_key[k]) for k in both_valid]
    agree_share = sum(1 for x in agree if x) / len(both_valid) if both_valid else math.nan
    print(f"  VALID in both, B - A within their stated intervals (|A-B| <= sqrt(hA^2+hB^2)): "
          f"{agree_share:.0%}   (goal >= 95 %)")  # fmt: skip
    valid_shares = [run.valid_share() for run in (a, b)]
    valid_min = min(v / max(t, 1) for v, t in valid_shares)
    worst = sorted(ratios.items(), key=lambda kv: kv[1])
    for label, (key, ratio) in (("lowest", worst[0]), ("highest", worst[-1])):
        print(f"  {label} B/A {ratio:.3f}: {trial_name(a.by_key[key])} on {key[0]}")
    outside = [(k, r) for k, r in worst if abs(r - 1) > 0.05]
    if outside:
        print("  outside ±5 % (B/A, verdicts A/B):")
        for key, ratio in outside:
            va, vb = a.by_key[key].get("verdict"), b.by_key[key].get("verdict")
            print(f"    {ratio:.3f}  {trial_name(a.by_key[key])}  {va}/{vb}")

    slopes_a, slopes_b = a.slopes(), b.slopes()
    keys = sorted(set(slopes_a) & set(slopes_b), key=str)
    print(f"\ndepth slopes (speed-up per block, 95 % bootstrap interval), {len(keys)} in both:")
    overlapping = 0
    for key in keys:
        ea, eb = slopes_a[key], slopes_b[key]
        ok = ea.known and eb.known and ea.low <= eb.high and eb.low <= ea.high
        overlapping += ok
        device, block, width, batch, compiler = key
        print(f"  {block}{width} b{batch} {compiler:12} A {ea.value:+.4f} [{ea.low:+.4f}, "
              f"{ea.high:+.4f}]  B {eb.value:+.4f} [{eb.low:+.4f}, {eb.high:+.4f}]  "
              f"{'overlap' if ok else 'NO OVERLAP'}")  # fmt: skip
    print(f"  intervals overlap: {overlapping}/{len(keys)} (goal: all)")
    met = agree_share >= 0.95 and valid_min >= 0.80 and overlapping == len(keys)
    print(f"VALID share (lower of the two runs): {valid_min:.0%} (goal >= 80 %)")
    load = os.getloadavg()
    print(f"\ngoals {'met' if met else 'NOT met'}; load average now {load[0]:.2f} "
          f"{load[1]:.2f} {load[2]:.2f}")  # fmt: skip
    return met


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # no subcommand (as `ngb bench all` calls every script): say how to use it, measure nothing --
    # a `run` takes two sweeps' time, which nobody should start by accident
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", help="run the sweep twice, back to back, then compare")
    run.add_argument("--preset", default="cpu-repro")
    run.add_argument("--device", default="localhost")
    run.add_argument("--homes", type=Path, help="folder for the two NGB_HOMEs (default: a temp)")
    cmp_ = sub.add_parser("compare", help="compare two runs already in databases")
    cmp_.add_argument("db_a", type=Path)
    cmp_.add_argument("db_b", type=Path)
    cmp_.add_argument("--run-a")
    cmp_.add_argument("--run-b")
    args = parser.parse_args()
    if args.command is None:
        parser.print_help()
        print("\nnothing measured: give `run` (two sweeps, ~1 h for cpu-repro) or `compare A B`")
        return

    load = os.getloadavg()
    print(f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if args.command == "run":
        root = args.homes or Path(tempfile.mkdtemp(prefix="ngb-agreement-"))
        dbs = []
        for name in ("a", "b"):
            db, _ = run_sweep(args.preset, args.device, root / name)
            dbs.append(db)
        a, b = Run(dbs[0], None), Run(dbs[1], None)
        if not args.homes:  # kept for `compare`: say where
            again = f"ngb bench agreement compare {dbs[0]} {dbs[1]}"
            print(f"the two runs are kept in {root}: `{again}` compares them again")
    else:
        a, b = Run(args.db_a, args.run_a), Run(args.db_b, args.run_b)
    sys.exit(0 if compare(a, b) else 1)


if __name__ == "__main__":
    main()
