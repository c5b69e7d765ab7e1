"""Serving rows as the store writes them: a run's (or each probe's) ``serving`` row and a peak
search's ``serving_peaks`` row, on a connection inside the caller's transaction.

Apart from ``ngb.sweeps.store.serving`` (the store-level reads and writes, which re-export
these) so that ingest can write a sweep's serving trials without importing the store, which
imports ingest.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ngb.sweeps.store.schema import SERVING_COLUMNS, SERVING_PEAK_COLUMNS
from ngb.sweeps.store.timestamps import now

if TYPE_CHECKING:
    import duckdb
    from ngb.core.serving.serve import ServeOutcome
    from ngb.core.serving.serve_stats import Summary

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
    trial: Mapping[str, str],
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
        "extra": json.dumps({"summary": s.to_dict(), "settings": settings.to_dict(), **trial}),
        "created_at": now(),
    }  # fmt: skip
    for name, p in s.latency.items():
        row[f"latency_{name}_ms"] = _finite(p.value)
        row[f"latency_{name}_lo_ms"] = p.low
        row[f"latency_{name}_hi_ms"] = p.high
    return row


def insert_serving(
    conn: duckdb.DuckDBPyConnection,
    run_id: str,
    outcome: ServeOutcome,
    device: str,
    trial: Mapping[str, str] | None = None,
) -> int:
    """``save_serving`` on a connection inside the caller's transaction (a sweep's serving
    trials are stored with its other results: ``ngb.sweeps.store.serving_ingest``, which names
    the trial in ``trial``: ``trial_key`` and, for a scheduler's node, ``run_device``, kept in
    each row's ``extra``, so ``ngb attach`` counts the trial done: ``served_trials``)."""
    point = _point(outcome, run_id, device)
    tags = dict(trial or {})
    runs: list[dict[str, object]] = []
    if outcome.summary is not None:
        runs.append(
            _run_row(outcome, point, outcome.summary, None, None, outcome.settings.duration_s, tags)
        )
    found = outcome.peak
    if found is not None:
        runs += [_run_row(outcome, point, p.summary, p.index, p.phase, p.duration_s, tags)
                 for p in found.probes]  # fmt: skip
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
            "extra": json.dumps(
                {"peak": found.to_dict(), "versions": outcome.versions, **tags}
            ),
            "created_at": now(),
        }  # fmt: skip
        conn.execute(
            f"INSERT INTO serving_peaks ({', '.join(_PEAKS)}) "  # noqa: S608
            f"VALUES ({', '.join('?' for _ in _PEAKS)})",
            [row.get(n) for n in _PEAKS],
        )
    return len(runs) + (found is not None)


#: a sweep's finished serving trials of a run, as ``trials`` rows are read for ``ngb attach``:
#: device, trial key, status and the slot a scheduler's node ran it for (``extra.run_device``)
SERVED_TRIALS = """
SELECT DISTINCT device, json_extract_string(extra, '$.trial_key') AS key, 'ok' AS status,
       json_object('run_device', json_extract_string(extra, '$.run_device')) AS extra
FROM serving WHERE run_id = ? AND json_extract_string(extra, '$.trial_key') IS NOT NULL
ORDER BY device, key"""
