"""What a serving run (``ngb.core.serving.loadgen.Trace``) says, and whether it counts (issue 43).

A serving number is held to the same standard as every other ngb number: it comes with its
interval and a verdict, VALID or INVALID with the reason.

- **Percentiles** p50/p90/p99 of the latency from the scheduled time, each with the interval
  ``ngb.core.statistics.percentiles`` gives trials: ``over_processes`` with the run cut into
  ``BLOCKS`` consecutive stretches of time standing in for processes. Why: under load, latencies are
  not independent -- a request that waited behind a slow one makes the next one wait too -- so the
  binomial interval of independent calls is too narrow; stretches of time far longer than a queue's
  memory are nearly independent, and the cluster-robust widening the trials use for processes that
  differ widens it exactly where the stretches disagree.
- **Valid** (server): the achieved issue rate within ``RATE_TOLERANCE`` (1 %) of the target; the
  issue lag's p99 within ``lag_limit_ms`` (1 ms, or 5 % of the mean gap between arrivals where
  that is longer: the lag matters against the gaps it distorts); no failed call; and the claimed
  percentile (server and multistream p99, singlestream p90: LoadGen's) has an upper bound, i.e.
  MLPerf LoadGen's early-stopping count is met (``percentiles.min_calls``: 368 for p99).
- **Early stopping against a limit** (``limit_ms``, the server's target latency): LoadGen counts
  the requests over the limit, ``t``, and the run shows the percentile within the limit when it
  has at least ``needed(t)`` requests: the fewest ``n`` for which the binomial odds of seeing
  ``t`` or fewer over-limit requests, were the over-limit share really ``1 - q``, fall to the
  one-sided level (``loadgen/early_stopping.cc``; ngb uses its one-sided 97.5 %, LoadGen 99 %).
  For independent requests that is the same statement as "the percentile's binomial upper bound
  is within the limit"; under load the requests are not independent, so a run ``meets`` the
  limit only where the count is met *and* the widened upper bound above is within it (the
  widened bound is never below the binomial one). The count is printed because it says how many
  more requests an undecided run would need.
- **Exceedance** (the peak search's input, ``ngb.core.serving.peak``): the share of requests over
  the limit with a batch-means standard error over the same stretches of time.

Pure functions on numpy arrays: a serving run is summed up on the device, as a trial is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from ngb.core.serving.loadgen import Trace
from ngb.core.statistics import percentiles
from ngb.core.statistics.percentiles import LEVEL, PercentileInterval

#: consecutive stretches of a run treated as independent groups for the intervals
BLOCKS = 10
#: the achieved issue rate must be within this share of the target (server)
RATE_TOLERANCE = 0.01
#: the issue lag's p99 must be within this many ms (or ``LAG_SHARE`` of the mean gap, if longer)
LAG_FLOOR_MS = 1.0
LAG_SHARE = 0.05
#: the percentile each scenario claims (LoadGen's); offline claims a rate, not a latency
CLAIMED = {"server": "p99", "multistream": "p99", "singlestream": "p90", "offline": None}
VALID, INVALID = "VALID", "INVALID"


def lag_limit_ms(qps: float | None) -> float:
    """How late the issuing thread may be at its p99 (see the module docstring)."""
    if not qps or not math.isfinite(qps) or qps <= 0:
        return LAG_FLOOR_MS
    return max(LAG_FLOOR_MS, LAG_SHARE * 1000.0 / qps)


def _log_binom_cdf(t: int, n: int, p: float) -> float:
    """log P(Binomial(n, p) <= t), summed in log space (the pmf's ratio recurrence, in numpy)."""
    if t >= n:
        return 0.0
    k = np.arange(1, t + 1, dtype=float)
    steps = np.log(n - k + 1) - np.log(k) + math.log(p) - math.log1p(-p)
    terms = n * math.log1p(-p) + np.concatenate(([0.0], np.cumsum(steps)))
    top = float(terms.max())
    return top + math.log(float(np.exp(terms - top).sum()))


def needed(over: int, q: float, level: float = LEVEL) -> int:
    """LoadGen's early-stopping count: the fewest requests that show the q-quantile within the
    limit when ``over`` of them exceeded it (one-sided at ``1 - (1 - level) / 2``)."""
    alpha = math.log((1 - level) / 2)
    low, high = over + 1, max(over + 2, 2 * (over + 1))
    while _log_binom_cdf(over, high, 1 - q) > alpha:
        low, high = high, high * 2
    while low < high:  # the odds fall as n grows: bisect for the first n within alpha
        mid = (low + high) // 2
        if _log_binom_cdf(over, mid, 1 - q) <= alpha:
            high = mid
        else:
            low = mid + 1
    return low


@dataclass(frozen=True)
class Exceedance:
    """The share of requests over the limit, with its batch-means standard error."""

    limit_ms: float
    over: int
    n: int
    share: float
    se: float
    blocks: int

    def to_dict(self) -> dict[str, object]:
        return {
            "limit_ms": self.limit_ms, "over": self.over, "n": self.n, "share": self.share,
            "se": self.se, "blocks": self.blocks,
        }  # fmt: skip


def exceedance(latency_ms: np.ndarray, limit_ms: float, blocks: int = BLOCKS) -> Exceedance:
    """Share over ``limit_ms`` of latencies in time order; SE from ``blocks`` stretches."""
    over = latency_ms > limit_ms
    n = len(over)
    share = float(over.mean()) if n else math.nan
    parts = [p for p in np.array_split(over, blocks) if len(p)]
    k = len(parts)
    if k < 2:
        return Exceedance(limit_ms, int(over.sum()), n, share, math.nan, k)
    means = np.array([p.mean() for p in parts])
    sizes = np.array([len(p) for p in parts], dtype=float)
    # a ratio estimator over unequal blocks (they differ by at most one request)
    resid = sizes * (means - share)
    se = math.sqrt(k / (k - 1) * float(np.sum(resid**2))) / n
    return Exceedance(limit_ms, int(over.sum()), n, share, se, k)


@dataclass
class Summary:
    """One serving run summed up; ``to_dict`` is what is stored and printed as JSON."""

    scenario: str
    requests: int
    queries: int
    target_qps: float | None
    offered_qps: float | None
    issued_qps: float | None
    completed_qps: float
    wall_s: float
    latency: dict[str, PercentileInterval]
    issue_lag_ms: dict[str, float]
    loadgen_cpu_percent: float
    process_cpu_percent: float
    concurrency: int
    mean_batch: float
    verdict: str
    reasons: list[str] = field(default_factory=list)
    claimed: str | None = None
    limit_ms: float | None = None
    over_limit: int | None = None
    needed: int | None = None
    meets: bool | None = None
    exceed: Exceedance | None = None
    errors: int = 0
    issuer: str = ""  # how the issuing thread was scheduled (``loadgen``: real-time or not)

    @property
    def verdict_reason(self) -> str:
        return "; ".join(self.reasons)

    def tail(self, name: str = "p99") -> PercentileInterval:
        return self.latency[name]

    def to_dict(self) -> dict[str, object]:
        tails = {
            name: {"value": p.value, "low": p.low, "high": p.high, "n": p.n}
            for name, p in self.latency.items()
        }
        return {
            "scenario": self.scenario, "requests": self.requests, "queries": self.queries,
            "target_qps": self.target_qps, "offered_qps": self.offered_qps,
            "issued_qps": self.issued_qps, "completed_qps": self.completed_qps,
            "wall_s": self.wall_s, "latency_ms": tails, "issue_lag_ms": self.issue_lag_ms,
            "loadgen_cpu_percent": self.loadgen_cpu_percent,
            "process_cpu_percent": self.process_cpu_percent, "concurrency": self.concurrency,
            "mean_batch": self.mean_batch, "verdict": self.verdict,
            "verdict_reason": self.verdict_reason, "claimed": self.claimed,
            "limit_ms": self.limit_ms, "over_limit": self.over_limit, "needed": self.needed,
            "meets": self.meets, "errors": self.errors, "issuer": self.issuer,
            "exceedance": self.exceed.to_dict() if self.exceed is not None else None,
        }  # fmt: skip


def tails_over_time(
    latency_ms: np.ndarray, blocks: int = BLOCKS, names: tuple[str, ...] = ("p50", "p90", "p99")
) -> dict[str, PercentileInterval]:
    """p50/p90/p99 (or ``names``) of latencies in time order, each ``over_processes`` of
    ``blocks`` stretches."""
    groups = [np.sort(p).tolist() for p in np.array_split(latency_ms, blocks) if len(p)]
    return {
        name: percentiles.over_processes(groups, q, name)
        for name, q in percentiles.TAILS
        if name in names
    }


def summarize(
    trace: Trace,
    limit_ms: float | None = None,
    blocks: int = BLOCKS,
    tails: tuple[str, ...] = ("p50", "p90", "p99"),
) -> Summary:
    """``trace`` summed up and judged (see the module docstring); ``tails``: the percentiles
    to give (the claimed one is always among them)."""
    order = np.argsort(trace.query_times_s(), kind="stable")
    latency = trace.query_latency_ms()[order]
    lag = (trace.issued_ns - trace.scheduled_ns) / 1e6
    plan = trace.schedule
    target = plan.qps if plan is not None else None
    offered = plan.offered_qps if plan is not None else None
    n = trace.count
    # issued: the schedule's requests over the time the issuing thread took to queue them all
    # (the last one is due at the schedule's end); completed: over the time to the last answer
    issued = n / trace.issue_s if plan is not None and trace.issue_s > 0 else None
    completed = n / trace.wall_s if trace.wall_s > 0 else math.nan
    wall = max(trace.wall_s, 1e-9)
    claimed = CLAIMED.get(trace.scenario)
    names = tuple(tails) + ((claimed,) if claimed and claimed not in tails else ())
    summary = Summary(
        scenario=trace.scenario,
        requests=n,
        queries=len(latency),
        target_qps=target,
        offered_qps=offered,
        issued_qps=issued,
        completed_qps=completed,
        wall_s=trace.wall_s,
        latency=tails_over_time(latency, blocks, names),
        issue_lag_ms={
            "p50": float(np.percentile(lag, 50)) if n else math.nan,
            "p99": float(np.percentile(lag, 99)) if n else math.nan,
            "max": float(lag.max()) if n else math.nan,
        },
        loadgen_cpu_percent=100.0 * trace.loadgen_cpu_s / wall,
        process_cpu_percent=100.0 * trace.process_cpu_s / wall,
        concurrency=trace.concurrency,
        mean_batch=float(trace.batch.mean()) if n else math.nan,
        verdict=VALID,
        claimed=claimed,
        errors=trace.errors,
        issuer=str(trace.facts.get("issuer_policy", "")),
    )
    if limit_ms is not None:
        q = dict(percentiles.TAILS)[claimed or "p99"]
        summary.limit_ms = float(limit_ms)
        summary.over_limit = int(np.sum(latency > limit_ms))
        summary.needed = needed(summary.over_limit, q)
        bound = summary.latency[claimed or "p99"].high
        summary.meets = len(latency) >= summary.needed and bound is not None and bound <= limit_ms
        summary.exceed = exceedance(latency, limit_ms, blocks)
    summary.reasons = _reasons(trace, summary)
    summary.verdict = INVALID if summary.reasons else VALID
    return summary


def _reasons(trace: Trace, s: Summary) -> list[str]:
    """Why the run does not count (empty: VALID)."""
    reasons = []
    if trace.errors:
        reasons.append(f"{trace.errors} call(s) failed: {trace.first_error}")
    if s.target_qps is not None and s.issued_qps is not None:
        off = s.issued_qps / s.target_qps - 1
        if abs(off) > RATE_TOLERANCE:
            reasons.append(
                f"achieved {s.issued_qps:.4g} QPS, {off:+.1%} off the target {s.target_qps:g} "
                f"(allowed +-{RATE_TOLERANCE:.0%}): the load generator fell behind"
            )
        limit = lag_limit_ms(s.target_qps)
        lag = s.issue_lag_ms["p99"]
        if math.isfinite(lag) and lag > limit:
            reasons.append(f"issue lag p99 {lag:.3g} ms > {limit:.3g} ms")
    if s.claimed is not None:
        p = s.latency[s.claimed]
        if not p.claimed:
            reasons.append(f"{s.claimed} not claimed: {why_unclaimed(p)}")
    return reasons


def why_unclaimed(p: PercentileInterval) -> str:
    """Why a serving run's percentile has no upper bound: too few requests, or (enough of
    them) its stretches of time differ too much (a queue's slow swings: serve longer)."""
    needed_calls = percentiles.min_calls(p.q, p.level)
    if p.n < needed_calls:
        return f"{p.n} requests, {needed_calls} needed"
    return (
        f"the run's {BLOCKS} stretches of time differ too much for an upper bound "
        f"({p.n} requests; serve longer)"
    )


def describe_tail(p: PercentileInterval, unit: str = "ms") -> str:
    """``p99 4.1 [3.9, 4.6] ms``, or the sample value and why it is not claimed."""
    if p.n and math.isfinite(p.value) and p.high is None:
        return f"{p.name} not claimed: {why_unclaimed(p)} (sample: {p.value:.3g} {unit})"
    return percentiles.describe(p, unit)


def describe(s: Summary) -> list[str]:
    """The lines ``ngb serve`` prints for one run."""
    rate = (
        f"target {s.target_qps:g} QPS, issued {s.issued_qps:.4g}, answered {s.completed_qps:.4g}"
        if s.target_qps is not None and s.issued_qps is not None
        else f"answered {s.completed_qps:.4g} requests/s"
    )
    batched = s.mean_batch > 1
    lines = [
        f"{s.scenario}: {s.requests} requests in {s.wall_s:.3g} s ({rate}); "
        f"{s.concurrency} in flight" + (f", mean batch {s.mean_batch:.3g}" if batched else ""),
        "latency from the scheduled time: "
        + "; ".join(describe_tail(p) for p in s.latency.values())
        + " (95 %)",
        f"issue lag p50 {s.issue_lag_ms['p50']:.3g} / p99 {s.issue_lag_ms['p99']:.3g} / max "
        f"{s.issue_lag_ms['max']:.3g} ms"
        + (f" (issuing thread {s.issuer})" if s.issuer else "")
        + f"; load generator CPU {s.loadgen_cpu_percent:.2g} % of a core (process "
        f"{s.process_cpu_percent:.3g} %)",
    ]
    if s.limit_ms is not None and s.claimed is not None:
        verdict = "meets" if s.meets else "does not show"
        lines.append(
            f"early stopping: {s.over_limit} over {s.limit_ms:g} ms of {s.queries}, "
            f"{s.needed} needed; with the upper bound above -> {verdict} "
            f"{s.claimed} <= {s.limit_ms:g} ms"
        )
    lines.append(f"verdict: {s.verdict}" + (f": {s.verdict_reason}" if s.reasons else ""))
    return lines
