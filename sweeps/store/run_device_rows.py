"""Many devices' ``run_devices`` rows in a few statements: what a live flush writes.

``Store.upsert_run_device`` is three statements for one device (read its ``extra``, insert the
row if new, update it); a flush of 128 loopback devices' rows took 0.4-0.5 s of CPU that way,
every flush. Here the rows of a flush are one read of every ``extra`` involved, one insert of the
missing rows and one ``UPDATE ... FROM`` per set of fields given (a flush's rows share one or two
sets): ~60 ms for 128. The meaning is ``upsert_run_device``'s: only the given fields change,
fields without a column are merged into the row's ``extra`` JSON, ``updated_at`` is now.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ngb.sweeps.store.ingest import now, to_datetime, to_json

if TYPE_CHECKING:
    import duckdb

#: one row: (run id, device, the fields to set)
RowFields = tuple[str, str, Mapping[str, object]]


def upsert_rows(
    conn: duckdb.DuckDBPyConnection, rows: Sequence[RowFields], columns: Sequence[str]
) -> None:
    """Create or update each ``(run_id, device)`` row (inside the caller's transaction);
    ``columns``: the fields that are columns of ``run_devices`` (the rest go to ``extra``)."""
    import pyarrow as pa

    latest: dict[tuple[str, str], dict[str, object]] = {}
    for run_id, device, fields in rows:  # a device twice: its fields merged, the later wins
        latest.setdefault((run_id, device), {}).update(fields)
    keys = pa.table(
        {"run_id": [k[0] for k in latest], "device": [k[1] for k in latest]},
        schema=pa.schema([("run_id", pa.string()), ("device", pa.string())]),
    )
    conn.register("_ngb_run_device_keys", keys)
    try:
        extras = {
            (run_id, device): extra
            for run_id, device, extra in conn.execute(
                "SELECT r.run_id, r.device, r.extra FROM run_devices r "
                "JOIN _ngb_run_device_keys k USING (run_id, device)"
            ).fetchall()
        }
        stamp = now()
        conn.execute(
            "INSERT INTO run_devices (run_id, device, updated_at) "
            "SELECT k.run_id, k.device, ? FROM _ngb_run_device_keys k WHERE NOT EXISTS "
            "(SELECT 1 FROM run_devices r WHERE r.run_id = k.run_id AND r.device = k.device)",
            [stamp],
        )
    finally:  # an aborted transaction refuses this too: keep the error that aborted it
        with contextlib.suppress(Exception):
            conn.unregister("_ngb_run_device_keys")
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
    import pyarrow as pa

    data: dict[str, list[object]] = {"run_id": [], "device": [], **{n: [] for n in names}}
    for run_id, device, known in members:
        data["run_id"].append(run_id)
        data["device"].append(device)
        for name in names:
            data[name].append(known[name])
    conn.register("_ngb_run_device_rows", pa.table(data))
    try:
        sets = "".join(f"{name} = n.{name}, " for name in names)
        conn.execute(
            f"UPDATE run_devices SET {sets}updated_at = ? FROM _ngb_run_device_rows n "  # noqa: S608 - names are run_devices' columns
            "WHERE run_devices.run_id = n.run_id AND run_devices.device = n.device",
            [stamp],
        )
    finally:  # an aborted transaction refuses this too: keep the error that aborted it
        with contextlib.suppress(Exception):
            conn.unregister("_ngb_run_device_rows")
