"""A sweep's serving trials (``[serve]``, ``ngb.core.serving.serve_trial``) as ``serving`` rows.

A served trial comes back from its device as a ``TrialResult`` whose ``extra["serving"]`` holds
the whole outcome and whose throughput is empty. It is stored as ``ngb serve --db`` stores one
(``ngb.sweeps.store.serving.insert_serving``: a ``serving`` row per run or probe, a
``serving_peaks`` row per search) under the sweep's run id and device, and **not** as a
``trials`` row: every reader of ``trials`` (reports, figures, ``ngb compare``, ``ngb history``,
``ngb advise``, the console) takes an ``ok`` trial for a throughput measurement, and one with an
empty throughput would be a blank point in each of them; the serving readers (``ngb report
serving``, fig14, ``ngb advise --p99-ms``) read the serving tables. A serving trial that
*failed* is an ordinary failed ``trials`` row (its spec names the ``serve`` settings), so
``ngb status`` and the failure lists show it as any failed trial.

Stored once: a (run, device, ``serve_key``) already in either table is skipped, so ingesting
the same checkpoint twice (a re-attach) adds nothing, as for trials. Each row's ``extra`` names
the trial (``trial_key``, and a Slurm node's slot as ``run_device``): ``ngb attach`` counts a
served trial done from it (``Store.served_trials``), as it counts a ``trials`` row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ngb.core.base.errors import ConfigError
from ngb.core.records.types import TrialResult
from ngb.core.serving.serve_trial import EXTRA, outcome_from_dict
from ngb.sweeps.store.errors import RowRejected
from ngb.sweeps.store.serving_rows import insert_serving, serve_key

if TYPE_CHECKING:
    import duckdb


def is_served(result: TrialResult) -> bool:
    """A serving trial that finished: stored in the serving tables, not in ``trials``."""
    return result.ok and isinstance(result.extra.get(EXTRA), Mapping)


def store_served(
    conn: duckdb.DuckDBPyConnection, run_id: str, device: str, results: Sequence[TrialResult]
) -> int:
    """Each served result's rows under (``run_id``, ``device``), inside the caller's
    transaction; returns the results newly stored."""
    stored = 0
    for result in results:
        try:
            outcome = outcome_from_dict(result.extra[EXTRA])
        except ConfigError as exc:  # the writer stores a failed trial in its place
            raise RowRejected(f"trial {result.key}: {exc}") from None
        key = serve_key(outcome)
        if _already(conn, run_id, device, key):
            continue
        insert_serving(conn, run_id, outcome, device, _trial(result))
        stored += 1
    return stored


def _trial(result: TrialResult) -> dict[str, str]:
    """What names the sweep's trial in its serving rows: its key, and the slot a scheduler's
    node ran it for (``ngb.devices.slurm_nodes``), so ``ngb attach`` counts it done for its
    device as it counts a ``trials`` row (``ngb.sweeps.store.serving_rows.SERVED_TRIALS``)."""
    tags = {"trial_key": result.key}
    slot = result.extra.get("run_device")
    if isinstance(slot, str) and slot:
        tags["run_device"] = slot
    return tags


def _already(conn: duckdb.DuckDBPyConnection, run_id: str, device: str, key: str) -> bool:
    found = conn.execute(
        "SELECT 1 FROM serving WHERE run_id = ? AND device = ? AND serve_key = ? "
        "UNION ALL SELECT 1 FROM serving_peaks WHERE run_id = ? AND device = ? "
        "AND serve_key = ? LIMIT 1",
        [run_id, device, key, run_id, device, key],
    ).fetchone()
    return found is not None
