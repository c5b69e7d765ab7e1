"""Timestamps as the store keeps them: naive UTC datetimes (DuckDB TIMESTAMP).

Apart from ``ngb.sweeps.store.ingest`` (which re-exports them) so that the serving tables'
writer can stamp rows without importing ingest, which imports it.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone


def now() -> datetime:
    return to_datetime(time.time())


def to_datetime(seconds: float) -> datetime:
    """A naive UTC datetime (DuckDB TIMESTAMP), the way every timestamp here is stored."""
    return datetime.fromtimestamp(seconds, tz=timezone.utc).replace(tzinfo=None)
