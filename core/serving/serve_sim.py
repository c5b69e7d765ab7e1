"""Simulated servers in virtual time: a serving run's ``Trace`` without a model or a clock.

Why: the peak search (``ngb.core.serving.peak``) is judged by how often its interval holds the true
peak, which takes a hundred searches of ten probes of minutes each; against a
first-come-first-served queue whose answer is known (M/M/1: p99 of the time in the system = ln(100)
/ (mu - lambda)), they run in seconds. The arrivals are the load generator's own
(``ngb.core.records.arrivals``), and the trace is summed up by the same code as a real run
(``ngb.core.serving.serve_stats``), so only the clock and the model are stand-ins. ``ngb bench
serving`` and ``tests/test_peak.py`` use it.

``fifo`` serves the requests in arrival order on ``servers`` identical servers; with one server it
is Lindley's recursion (each request starts at the later of its arrival and the previous answer),
computed without a Python loop: done_i = C_i + max_{k <= i}(a_k - C_{k-1}), C the running sum of
service times.
"""

from __future__ import annotations

import heapq
import math

import numpy as np
from ngb.core.records.arrivals import POISSON, Schedule, schedule
from ngb.core.serving.loadgen import Trace


def fifo(plan: Schedule, service_s: np.ndarray, servers: int = 1) -> Trace:
    """The trace of ``plan`` served first come, first served by ``servers`` servers taking
    ``service_s[i]`` seconds for request ``i`` (issued exactly on time: virtual time)."""
    arrive = np.asarray(plan.times_s, dtype=float)
    service = np.asarray(service_s, dtype=float)
    if servers == 1:
        total = np.cumsum(service)
        before = np.concatenate(([0.0], total[:-1]))
        done = total + np.maximum.accumulate(arrive - before)
    else:
        free = [0.0] * servers
        done = np.empty_like(arrive)
        for i, (a, s) in enumerate(zip(arrive, service, strict=True)):
            start = max(a, heapq.heappop(free))
            done[i] = start + s
            heapq.heappush(free, done[i])
    start = done - service
    n = len(arrive)
    ns = lambda x: np.round(x * 1e9).astype(np.int64)  # noqa: E731
    trace = Trace(
        scenario="server",
        scheduled_ns=ns(arrive),
        issued_ns=ns(arrive),
        started_ns=ns(start),
        done_ns=ns(done),
        query=np.arange(n),
        batch=np.ones(n, dtype=np.int64),
        wall_s=float(done.max()) if n else 0.0,
        issue_s=float(arrive[-1]) if n else 0.0,
        concurrency=servers,
        schedule=plan,
    )
    trace.facts["simulated"] = True
    return trace


def mm1(
    qps: float, mu: float, duration_s: float, seed: int = 0, burstiness: float = POISSON
) -> Trace:
    """An M/M/1 queue (exponential service at rate ``mu``) fed the seeded schedule."""
    plan = schedule(qps, duration_s, seed, burstiness)
    rng = np.random.default_rng([seed, 1])  # a stream apart from the arrivals'
    return fifo(plan, rng.exponential(1.0 / mu, plan.count))


def mm1_peak(mu: float, limit_s: float, q: float = 0.99) -> float:
    """The highest rate at which an M/M/1 queue's q-quantile time in system is ``limit_s``:
    the time in system is exponential with rate mu - lambda, so -ln(1 - q) / (mu - lambda)."""
    return mu + math.log(1 - q) / limit_s
