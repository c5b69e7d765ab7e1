"""Seeded serving rows for the serving figure and report (issue 43).

``add_serving`` stores, under an existing run and device, what ``ngb serve --db`` would: for
each compiler of ``MU`` a server-scenario run of resnet18 b1 at each rate of ``RATES``,
simulated (``ngb.core.serving.serve_sim.mm1``: an M/M/1 queue of that service rate, in virtual
time), summed up against a p99 limit of ``LIMIT_MS`` by the real code (``serve_stats.summarize``)
and stored by the real writer (``save_serving``). ``unverified_peak`` is a peak search in which no
probe verified a rate (every request takes 150 ms against a 100 ms limit).
"""

from __future__ import annotations

import numpy as np
from ngb.core.records import arrivals
from ngb.core.records.types import TrialSpec
from ngb.core.serving import peak, serve_sim, serve_stats
from ngb.core.serving.serve import ServeOutcome, ServeSettings
from ngb.sweeps.store.database import Store
from ngb.sweeps.store.serving import save_serving

#: service rate (requests/s) of each compiler's simulated server
MU = {"identity": 100.0, "openvino": 200.0}
RATES = (20.0, 40.0, 70.0, 95.0)
LIMIT_MS = 100.0
SECONDS = 120.0


def served(compiler: str, qps: float, seed: int = 0) -> ServeOutcome:
    """One server-scenario run of resnet18 b1 at ``qps`` on ``compiler``'s simulated server."""
    spec = TrialSpec(model="resnet18", compiler=compiler)
    settings = ServeSettings(qps=qps, duration_s=SECONDS, p99_ms=LIMIT_MS, seed=seed)
    summary = serve_stats.summarize(serve_sim.mm1(qps, MU[compiler], SECONDS, seed), LIMIT_MS)
    return ServeOutcome(spec, settings, "box", 0.0, SECONDS, summary=summary, precision="fp32")


def add_serving(store: Store, run_id: str, device: str) -> list[ServeOutcome]:
    """The runs of ``MU`` x ``RATES`` stored under ``run_id`` on ``device``; what was stored."""
    outcomes = [served(compiler, qps, seed=i) for compiler in MU for i, qps in enumerate(RATES)]
    for outcome in outcomes:
        save_serving(store, run_id, outcome, device)
    return outcomes


def unverified_peak(compiler: str = "identity") -> ServeOutcome:
    """A peak search of resnet18 b1 in which no probe verified a rate."""

    def slow(qps: float, seconds: float, index: int) -> serve_stats.Summary:
        plan = arrivals.schedule(qps, seconds, seed=index)
        trace = serve_sim.fifo(plan, np.full(plan.count, 0.15))
        return serve_stats.summarize(trace, LIMIT_MS)

    found = peak.find_peak(slow, LIMIT_MS, 4.0, probe_s=60.0, max_probes=6)
    assert found.low is None
    spec = TrialSpec(model="resnet18", compiler=compiler)
    settings = ServeSettings(p99_ms=LIMIT_MS, find_peak=True, probe_s=60.0, max_probes=6)
    return ServeOutcome(spec, settings, "box", 0.0, 360.0, peak=found, precision="fp32")
