"""Many devices' ``run_devices`` rows in a few statements: what a live flush writes.

``Store.upsert_run_device`` is three statements for one device (read its ``extra``, insert the
row if new, update it); a flush of 128 loopback devices' rows took 0.4-0.5 s of CPU that way,
every flush. Here the rows of a flush are one read of every ``extra`` involved, one insert of the
missing rows and one ``UPDATE ... FROM`` per set of fields given (a flush's rows share one or two
sets): ~60 ms for 128. The meaning is ``upsert_run_device``'s: only the given fields change,
fields without a column are merged into the row's ``extra`` JSON, ``updated_at`` is now.

The rows travel as one ``VALUES`` list of parameters (``values``), not an Arrow table: a
``ngb run --detach`` starter, writing only these rows, imported pandas for it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ngb.sweeps.store.ingest import now, to_datetime, to_json
from ngb.sweeps.store.values import values_relation

if TYPE_CHECKING:
    import duckdb

#: one row: (run id, device, the fields to set)
RowFields = tuple[str, str, Mapping[str, object]]
KEY_NAMES = ("run_id", "device")


def upsert_rows(
    conn: duckdb.DuckDBPyConnection, rows: Sequence[RowFields], columns: Sequence[str]
) -> None:
    """Create or update each ``(run_id, device)`` row (inside the caller's transaction);
    ``columns``: the fields that are columns of ``run_devices`` (the rest go to ``extra``)."""
    latest: dict[tuple[str, str], dict[str, object]] = {}
    for run_id, device, fields in rows:  # a device twice: its fields merged, the later wins
        latest.setdefault((run_id, device), {}).update(fields)
    if not latest:
        return
    keys, key_params = values_relation(list(latest), KEY_NAMES, alias="k")
    extras = {
        (run_id, device): extra
        for run_id, device, extra in conn.execute(
            f"SELECT r.run_id, r.device, r.extra FROM run_devices r JOIN {keys} "  # noqa: S608 - placeholders only
            "USING (run_id, device)",
            key_params,
        ).fetchall()
    }
    stamp = now()
    conn.execute(
        f"INSERT INTO run_devices (run_id, device, updated_at) SELECT k.run_id, k.device, ? "  # noqa: S608 - placeholders only
        f"FROM {keys} WHERE NOT EXISTS "
        "(SELECT 1 FROM run_devices r WHERE r.run_id = k.run_id AND r.device = k.device)",
        [stamp, *key_params],
    )
    groups: dict[tuple[str, ...], list[tuple[str, str, dict[str, object]]]] = {}
    for (run_id, device), fields in latest.items():
        known = {k: v for k, v in fields.items() if k in columns}
        other = {k: v for k, v in fields.items() if k not in columns}
        for name in ("started_at", "finished_at"):
            stamp_s = known.get(name)
            if isinstance(stamp_s, int | float):
                known[name] = to_datetime(stamp_s)
        if other:
            old = extras.get((run_id, device))
            extra = json.loads(old) if isinstance(old, str) and old else {}
            extra.update(other)
            known["extra"] = to_json(extra)
        groups.setdefault(tuple(sorted(known)), []).append((run_id, device, known))
    for names, members in groups.items():
        _update(conn, names, members, stamp)


def _update(
    conn: duckdb.DuckDBPyConnection,
    names: tuple[str, ...],
    members: list[tuple[str, str, dict[str, object]]],
    stamp: object,
) -> None:
    """One ``UPDATE ... FROM`` for rows that set the same fields ``names``."""
    table, params = values_relation(
        [[run_id, device, *(known[name] for name in names)] for run_id, device, known in members],
        (*KEY_NAMES, *names),
        alias="n",
    )
    sets = "".join(f"{name} = n.{name}, " for name in names)
    conn.execute(
        f"UPDATE run_devices SET {sets}updated_at = ? FROM {table} "  # noqa: S608 - names are run_devices' columns
        "WHERE run_devices.run_id = n.run_id AND run_devices.device = n.device",
        [stamp, *params],
    )
