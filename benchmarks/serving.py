"""How well the serving load generator keeps its schedule here, and how the peak search calibrates.

Why a benchmark and not unit tests: whether the issuing thread wakes within a millisecond of each
deadline is a fact about this machine and what else runs on it (issue 43 asks for it on the
2-core VM), so it is printed with the load average, not asserted in CI. Three parts:

1. **arrivals**: 10,000 requests at ``--ks-qps`` (500) with a call that does nothing; the gaps
   between the times the issuing thread *actually* queued them, tested against the exponential
   of the target rate (Kolmogorov-Smirnov, scipy), and the schedule's own gaps beside them.
2. **rates**: the server scenario at 1 to 1,000 QPS with a call that does nothing and with a
   1 ms call (a queue behind the issuer); per rate the achieved issue rate against the target
   (``serve_stats``: requests over the time to the last issue), the issue lag's p50/p99/max, the
   issuing thread's CPU (% of a core) and the verdict.
3. **peak** (virtual time, ``ngb.core.serving.serve_sim``): the peak search against M/M/1 with
   mu = 100/s and p99 <= 100 ms (true QPS* 53.95) over ``--seeds`` seeds at several probe
   lengths: how often the interval holds the truth, its half-width, the probes and the serving
   seconds a search costs.

    .venv/bin/ngb bench serving
    .venv/bin/python benchmarks/serving.py --parts rates --rates 1,100,500 --seconds 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time

import numpy as np
from _args import positive, positive_int  # this folder: the script runs as a file
from ngb.core.records import arrivals
from ngb.core.serving import loadgen, peak, serve_sim, serve_stats

PARTS = ("arrivals", "rates", "peak")


def load() -> str:
    """``uptime``'s load averages (printed with every figure: others share this machine)."""
    try:
        said = subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout
        return said.strip().split("load average:")[-1].strip()
    except (OSError, subprocess.CalledProcessError):
        return ", ".join(f"{v:.2f}" for v in os.getloadavg())


def nothing() -> None:
    return None


def one_ms() -> None:
    time.sleep(0.001)


def part_arrivals(qps: float, count: int) -> None:
    from scipy import stats

    plan = arrivals.schedule(qps, count / qps, seed=0)
    trace = loadgen.run([nothing], "server", plan=plan)
    issued = np.sort(trace.issued_ns) / 1e9
    actual = np.diff(np.concatenate(([issued[0] - plan.times_s[0]], issued)))
    planned = np.diff(np.concatenate(([0.0], plan.times_s)))
    scale = 1 / qps
    ks_actual = stats.kstest(actual, "expon", args=(0, scale))
    ks_plan = stats.kstest(planned, "expon", args=(0, scale))
    lag = (trace.issued_ns - trace.scheduled_ns) / 1e6
    print(f"arrivals: {plan.count} at {qps:g} QPS (load average {load()})")
    print(f"  schedule's gaps: KS D {ks_plan.statistic:.4f}, p {ks_plan.pvalue:.3f}")
    print(
        f"  issued gaps:     KS D {ks_actual.statistic:.4f}, p {ks_actual.pvalue:.3f} "
        f"({'pass' if ks_actual.pvalue > 0.01 else 'FAIL'} at p > 0.01); issue lag p50 "
        f"{np.percentile(lag, 50):.3f} / p99 {np.percentile(lag, 99):.3f} ms; issuing thread "
        f"{trace.facts.get('issuer_policy')}, timer slack {trace.facts.get('timer_slack_ns')} ns"
    )


def part_rates(rates: list[float], seconds: float) -> None:
    print(f"rates: server scenario, {seconds:g} s each (1 QPS: 30 s) (load average {load()})")
    print(
        f"  {'call':8} {'QPS':>6} {'requests':>8} {'achieved':>9} {'off':>7} "
        f"{'lag p50':>8} {'p99':>7} {'max':>7} {'issuer CPU':>10}  verdict"
    )
    for name, call in (("nothing", nothing), ("1 ms", one_ms)):
        for qps in rates:
            if name == "1 ms" and qps >= 1000:
                continue  # one runner answers at most ~900/s: that is a queue, not the issuer
            duration = max(seconds, 30.0 if qps < 2 else seconds)
            plan = arrivals.schedule(qps, duration, seed=1)
            s = serve_stats.summarize(loadgen.run([call], "server", plan=plan))
            off = (s.issued_qps or 0) / qps - 1
            lag = s.issue_lag_ms
            lag_ok = not any("lag" in r for r in s.reasons)
            rate_ok = not any("off the target" in r for r in s.reasons)
            print(
                f"  {name:8} {qps:>6g} {s.requests:>8} {s.issued_qps:>9.5g} {off:>+7.2%} "
                f"{lag['p50']:>8.3f} {lag['p99']:>7.3f} {lag['max']:>7.2f} "
                f"{s.loadgen_cpu_percent:>9.2f}%  rate {'ok' if rate_ok else 'OFF'}, "
                f"lag {'ok' if lag_ok else 'HIGH'} (load {load().split(',')[0]})"
            )


def part_peak(seeds: int, probe_lengths: list[float]) -> None:
    mu, limit = 100.0, 100.0
    truth = serve_sim.mm1_peak(mu, limit / 1000)
    print(f"peak: M/M/1, mu {mu:g}/s, p99 <= {limit:g} ms, true QPS* {truth:.2f}, {seeds} seeds")
    for probe_s in probe_lengths:
        covered, halves, counts, spent = 0, [], [], []
        began = time.perf_counter()
        for seed in range(seeds):

            def probe(qps: float, seconds: float, index: int, seed: int = seed) -> object:
                trace = serve_sim.mm1(qps, mu, seconds, seed=seed * 1000 + index)
                return serve_stats.summarize(trace, limit, tails=("p99",))

            found = peak.find_peak(probe, limit, mu / 2, probe_s=probe_s)  # type: ignore[arg-type]
            covered += found.low is not None and found.low <= truth <= found.high
            halves.append(found.half_width)
            counts.append(len(found.probes))
            spent.append(sum(p.duration_s for p in found.probes))
        h = np.array(halves)
        print(
            f"  probe {probe_s:>4g} s: covers {covered}/{seeds}; half-width median "
            f"{np.median(h):.1%}, p90 {np.percentile(h, 90):.1%}, <= 5 % in "
            f"{np.mean(h <= 0.05):.0%}; probes max {max(counts)}; serving per search median "
            f"{statistics.median(spent) / 60:.0f} min ({time.perf_counter() - began:.1f} s here)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS), help="arrivals,rates,peak")
    parser.add_argument("--ks-qps", type=positive, default=500.0)
    parser.add_argument("--ks-count", type=positive_int, default=10_000)
    parser.add_argument("--rates", default="1,10,100,250,500,1000")
    parser.add_argument("--seconds", type=positive, default=20.0, help="per rate")
    parser.add_argument("--seeds", type=positive_int, default=100)
    parser.add_argument("--probe-s", default="60,200,300", help="peak: probe lengths")
    args = parser.parse_args()
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown part {unknown[0]!r}; parts: {', '.join(PARTS)}")
    print(f"cores {os.cpu_count()}; load average {load()}")
    if "arrivals" in parts:
        part_arrivals(args.ks_qps, args.ks_count)
    if "rates" in parts:
        part_rates([positive(r) for r in args.rates.split(",")], args.seconds)
    if "peak" in parts:
        part_peak(args.seeds, [positive(p) for p in args.probe_s.split(",")])


if __name__ == "__main__":
    main()
