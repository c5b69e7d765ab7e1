"""Rows from Python as SQL relations with parameters, where an Arrow table would cost more.

Building any Arrow array from Python objects makes pyarrow import pandas (~0.35 s of CPU on the
2-core VM, pyarrow included, once per process): a ``ngb run --detach`` starter writing a few rows
paid it, and so did every run's first flush (at 32 loopback devices, a sixth of the
orchestrator's CPU). A few rows go as one ``VALUES`` list (``values_relation``); batches of many
(trials, measurements, CPU samples) as one list per column, unnested by DuckDB
(``columns_relation``: its C++ converts each list, ~11 ms for 20 trials of 110 columns against
~19 ms through Arrow, ~2 ms for 200 CPU samples either way, 2026-12-01). Only the per-call
latencies of a serving trial, which come as NumPy arrays, still go through Arrow (``ingest``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


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


def columns_relation(
    columns: Sequence[tuple[str, str]], data: Mapping[str, Sequence[object]], alias: str = "n"
) -> tuple[str, list[object]]:
    """``(SELECT UNNEST(?) AS name, ...) alias`` for rows given column by column (``data``: one
    list per column, all of one length, zero included), and the parameters: each list cast to its
    column's SQL type in ``columns`` (a schema table's, in its order; a TIMESTAMP from
    microseconds, a VARCHAR made storable). ``SELECT * FROM`` it inserts into that table."""
    parts: list[str] = []
    params: list[object] = []
    for name, sql_type in columns:
        base = sql_type.split()[0]
        values = data[name]
        if base == "TIMESTAMP":
            parts.append(f"make_timestamp(UNNEST(CAST(? AS BIGINT[]))) AS {name}")
        else:
            parts.append(f"UNNEST(CAST(? AS {base}[])) AS {name}")
        if base == "VARCHAR":  # a trial's error text may hold a lone surrogate (``storable``)
            values = [storable(v) if isinstance(v, str) else v for v in values]
        params.append(list(values))
    return f"(SELECT {', '.join(parts)}) {alias}", params


def storable(text: str) -> str:
    """``text`` as UTF-8 can hold it: a lone surrogate (a ``\\udcff`` escape in an agent's JSON,
    bytes decoded with ``surrogateescape``) becomes its backslash escape. DuckDB refuses such a
    string, and with it the whole batch it came in."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text
