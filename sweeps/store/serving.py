"""Serving runs in the results store (``serving``, ``serving_peaks``; ``ngb serve --db``).

One ``serving`` row per run at one offered rate -- a single run, or each probe of a peak search
(``probe`` its index) -- and one ``serving_peaks`` row per search, under a run of their own on
device ``localhost`` (``ngb serve`` runs here, as ``ngb measure``). A point's columns are the
trials' (model, width, depth, batch, compiler, the precision that ran, optimisation, target), so
``ngb advise`` reads the server-scenario p99 of the configuration it ranks (``server_rows``).
The whole summary rides in ``extra`` as ``ngb serve --json`` prints it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ngb.sweeps.rows import StoreRow
from ngb.sweeps.store.serving_rows import insert_serving as insert_serving  # re-exported
from ngb.sweeps.store.serving_rows import serve_key as serve_key  # re-exported

if TYPE_CHECKING:
    from ngb.core.serving.serve import ServeOutcome
    from ngb.sweeps.store.database import Store


def save_serving(store: Store, run_id: str, outcome: ServeOutcome, device: str) -> int:
    """Store one compiler's serving (its run, or its peak search and every probe) under
    ``run_id`` in one transaction; rows written."""
    with store.transaction() as conn:
        return insert_serving(conn, run_id, outcome, device)


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
    columns, rows = store.select(
        f"SELECT {SERVER_P99} FROM serving WHERE device = ? AND scenario = 'server' "  # noqa: S608
        "AND verdict = 'VALID' AND latency_p99_hi_ms IS NOT NULL "
        "ORDER BY created_at DESC, run_id DESC",
        [device],
    )
    return [dict(zip(columns, row, strict=True)) for row in rows]


def peak_rows(store: Store, device: str) -> list[StoreRow]:
    """Every peak search on ``device``, newest first."""
    columns, rows = store.select(
        "SELECT run_id, model, width, depth, batch, compiler, precision, optimisation, target, "
        "limit_ms, q, peak_qps, peak_low, peak_high, method, probes FROM serving_peaks "
        "WHERE device = ? ORDER BY created_at DESC, run_id DESC",
        [device],
    )
    return [dict(zip(columns, row, strict=True)) for row in rows]
