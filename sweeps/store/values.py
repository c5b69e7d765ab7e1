"""A few rows as a SQL ``VALUES`` relation with parameters, where an Arrow table would cost more.

Building any Arrow array from Python objects makes pyarrow import pandas (~0.2 s of CPU on the
2-core VM, plus ~70 ms for pyarrow): a process that writes only a few small rows (a ``ngb run
--detach`` starter, a refused run's error) paid that for nothing. Batches of many rows (trials,
CPU samples, latencies) stay Arrow tables (``ingest``).
"""

from __future__ import annotations

from collections.abc import Sequence


def values_relation(
    rows: Sequence[Sequence[object]],
    names: Sequence[str],
    alias: str = "n",
    types: Sequence[str] | None = None,
) -> tuple[str, list[object]]:
    """``(VALUES (?, ...), ...) alias(names)`` for ``rows`` (at least one), and the parameters
    in order. ``types``: each column's SQL type (a schema table's), each value cast to it (a
    TIMESTAMP from microseconds); without them DuckDB types each column by its values."""
    slots = [_slot(sql_type) for sql_type in types] if types else ["?" for _ in names]
    one = f"({', '.join(slots)})"
    text = f"(VALUES {', '.join(one for _ in rows)}) {alias}({', '.join(names)})"
    return text, [value for row in rows for value in row]


def _slot(sql_type: str) -> str:
    base = sql_type.split()[0]
    return "make_timestamp(CAST(? AS BIGINT))" if base == "TIMESTAMP" else f"CAST(? AS {base})"
