"""Serving runs in the results store (``serving``, ``serving_peaks``; ``ngb serve --db``).

One ``serving`` row per run at one offered rate -- a single run, or each probe of a peak search
(``probe`` its index) -- and one ``serving_peaks`` row per search, under a run of their own on
device ``localhost`` (``ngb serve`` runs here, as ``ngb measure``). A point's columns are the
trials' (model, width, depth, batch, compiler, the precision that ran, optimisation, target), so
``ngb advise`` reads the server-scenario p99 of the configuration it ranks (``server_rows``).
The whole summary rides in ``extra`` as ``ngb serve --json`` prints it.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ngb.sweeps.rows import StoreRow
from ngb.sweeps.store.ingest import now
from ngb.sweeps.store.schema import SERVING_COLUMNS, SERVING_PEAK_COLUMNS

if TYPE_CHECKING:
    from ngb.core.serve import ServeOutcome
    from ngb.core.serve_stats import Summary
    from ngb.sweeps.store.database import Store

_SERVING = [n for n, _ in SERVING_COLUMNS]
_PEAKS = [n for n, _ in SERVING_PEAK_COLUMNS]


def serve_key(outcome: ServeOutcome) -> str:
    """16 hex digits naming the trial point and every serving setting (the same command twice
    gives the same key; its rows are told apart by ``run_id`` and ``created_at``)."""
    text = json.dumps(
        {"spec": outcome.spec.key, "settings": outcome.settings.to_dict()}, sort_keys=True
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _finite(value: float | None) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def _point(outcome: ServeOutcome, run_id: str, device: str) -> dict[str, object]:
    spec = outcome.spec
    return {
        "run_id": run_id, "device": device, "serve_key": serve_key(outcome), "label": spec.label,
        "model": spec.model, "width": spec.width, "depth": spec.depth, "batch": spec.batch,
        "compiler": spec.compiler, "precision": outcome.precision,
        "optimisation": spec.optimisation, "target": spec.device,
        "scenario": outcome.settings.scenario,
    }  # fmt: skip


def _run_row(
    outcome: ServeOutcome,
    point: Mapping[str, object],
    s: Summary,
    probe: int | None,
    phase: str | None,
    duration_s: float,
) -> dict[str, object]:
    settings = outcome.settings
    row: dict[str, object] = {
        **point,
        "probe": probe, "phase": phase, "target_qps": s.target_qps,
        "offered_qps": s.offered_qps, "issued_qps": s.issued_qps,
        "completed_qps": _finite(s.completed_qps), "duration_s": duration_s,
        "requests": s.requests, "concurrency": s.concurrency, "max_batch": settings.max_batch,
        "max_queue_delay_ms": settings.max_queue_delay_ms, "mean_batch": _finite(s.mean_batch),
        "burstiness": settings.burstiness,
        "seed": settings.seed + (probe or 0), "issue_lag_p50_ms": _finite(s.issue_lag_ms["p50"]),
        "issue_lag_p99_ms": _finite(s.issue_lag_ms["p99"]),
        "loadgen_cpu_percent": s.loadgen_cpu_percent,
        "process_cpu_percent": s.process_cpu_percent, "limit_ms": s.limit_ms,
        "over_limit": s.over_limit, "needed": s.needed, "meets": s.meets, "verdict": s.verdict,
        "verdict_reason": s.verdict_reason, "host": outcome.host,
        "extra": json.dumps({"summary": s.to_dict(), "settings": settings.to_dict()}),
        "created_at": now(),
    }  # fmt: skip
    for name, p in s.latency.items():
        row[f"latency_{name}_ms"] = _finite(p.value)
        row[f"latency_{name}_lo_ms"] = p.low
        row[f"latency_{name}_hi_ms"] = p.high
    return row


def save_serving(store: Store, run_id: str, outcome: ServeOutcome, device: str) -> int:
    """Store one compiler's serving (its run, or its peak search and every probe) under
    ``run_id`` in one transaction; rows written."""
    point = _point(outcome, run_id, device)
    runs: list[dict[str, object]] = []
    if outcome.summary is not None:
        runs.append(
            _run_row(outcome, point, outcome.summary, None, None, outcome.settings.duration_s)
        )
    found = outcome.peak
    if found is not None:
        runs += [_run_row(outcome, point, p.summary, p.index, p.phase, p.duration_s)
                 for p in found.probes]  # fmt: skip
    with store.transaction() as conn:
        if runs:
            conn.executemany(
                f"INSERT INTO serving ({', '.join(_SERVING)}) "  # noqa: S608
                f"VALUES ({', '.join('?' for _ in _SERVING)})",
                [[r.get(n) for n in _SERVING] for r in runs],
            )
        if found is not None:
            row = {
                **point, "limit_ms": found.limit_ms, "q": found.q, "peak_qps": found.qps,
                "peak_low": found.low, "peak_high": _finite(found.high), "method": found.method,
                "verified_qps": found.verified_qps, "probes": len(found.probes),
                "search_s": outcome.finished_at - outcome.started_at,
                "capacity_qps": outcome.capacity_qps, "host": outcome.host,
                "extra": json.dumps({"peak": found.to_dict(), "versions": outcome.versions}),
                "created_at": now(),
            }  # fmt: skip
            conn.execute(
                f"INSERT INTO serving_peaks ({', '.join(_PEAKS)}) "  # noqa: S608
                f"VALUES ({', '.join('?' for _ in _PEAKS)})",
                [row.get(n) for n in _PEAKS],
            )
    return len(runs) + (found is not None)


def save_run(store: Store, run_id: str, outcomes: Sequence[ServeOutcome], device: str) -> str:
    """``ngb serve --db``: a run of its own holding every compiler's serving; the line to say."""
    store.create_run(run_id, "ngb serve", "", [device], len(outcomes), meta={"source": "ngb serve"})
    rows = sum(save_serving(store, run_id, o, device) for o in outcomes)
    store.set_run_status(run_id, "finished")
    return f"stored: {rows} serving row(s) as run {run_id} in {store.path}"


#: the columns ``ngb advise`` reads to use a server-scenario p99
SERVER_P99 = (
    "run_id, model, width, depth, batch, compiler, precision, optimisation, target, target_qps, "
    "latency_p99_ms, latency_p99_lo_ms, latency_p99_hi_ms, requests, verdict, created_at"
)


def server_rows(store: Store, device: str) -> list[StoreRow]:
    """Every VALID server-scenario run on ``device`` whose p99 has an upper bound, newest first
    (what ``ngb advise --p99-ms`` holds a configuration to, where there is one)."""
    columns, rows = store.query(
        f"SELECT {SERVER_P99} FROM serving WHERE device = ? AND scenario = 'server' "  # noqa: S608
        "AND verdict = 'VALID' AND latency_p99_hi_ms IS NOT NULL "
        "ORDER BY created_at DESC, run_id DESC",
        [device],
    )
    return [dict(zip(columns, row, strict=True)) for row in rows]


def peak_rows(store: Store, device: str) -> list[StoreRow]:
    """Every peak search on ``device``, newest first."""
    columns, rows = store.query(
        "SELECT run_id, model, width, depth, batch, compiler, precision, optimisation, target, "
        "limit_ms, q, peak_qps, peak_low, peak_high, method, probes FROM serving_peaks "
        "WHERE device = ? ORDER BY created_at DESC, run_id DESC",
        [device],
    )
    return [dict(zip(columns, row, strict=True)) for row in rows]
