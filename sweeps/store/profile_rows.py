"""Profile rows for the store's ``profiles`` / ``profile_kernels`` tables, on a connection.

Below both ``store_ingest`` (a sweep's profile passes leave the trials' ``extra`` here, inside
the ingest's transaction) and ``store_profiles`` (saving and reading through a ``Store``), so
neither imports the other. ``ProfilePoint`` is where a profile was taken.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from ngb.core.base.errors import NgbError, one_line
from ngb.core.compilers.profiling import Profile
from ngb.core.records.types import TrialResult, TrialSpec
from ngb.sweeps.store.schema import (
    PROFILE_COLUMNS,
    PROFILE_COLUMNS_V9,
    PROFILE_KERNEL_COLUMNS,
    PROFILE_KERNEL_COLUMNS_V9,
)

if TYPE_CHECKING:
    import duckdb


@dataclass(frozen=True)
class ProfilePoint:
    """Where a profile was taken: the point's columns as the trials table names them, and the
    trial it followed (a sweep's profile pass; None for ``ngb profile``)."""

    device: str
    model: str
    width: int | None
    depth: int
    batch: int
    compiler: str
    precision: str
    optimisation: str = "none"
    trial_key: str | None = None

    @classmethod
    def of(
        cls, spec: TrialSpec, device: str, precision: str, trial_key: str | None = None
    ) -> ProfilePoint:
        return cls(device, spec.model, spec.width, spec.depth, spec.batch, spec.compiler,
                   precision, spec.optimisation, trial_key)  # fmt: skip

    def key_tuple(self) -> tuple[object, ...]:
        return tuple(self.key())

    def key(self) -> list[object]:
        return [self.device, self.model, self.width, self.depth, self.batch, self.compiler,
                self.precision, self.optimisation]  # fmt: skip


_HEAD = [n for n, _ in (*PROFILE_COLUMNS, *PROFILE_COLUMNS_V9)]
_KERNEL_HEAD = [n for n, _ in (*PROFILE_KERNEL_COLUMNS, *PROFILE_KERNEL_COLUMNS_V9)]


def insert_profiles(
    conn: duckdb.DuckDBPyConnection, run_id: str, found: Sequence[tuple[ProfilePoint, Profile]]
) -> int:
    """``save_profiles`` on the caller's connection, inside its transaction."""
    # naive UTC, as every timestamp in the store (``store_ingest.to_datetime``; not imported:
    # the ingest imports this module)
    stamp = datetime.now(timezone.utc).replace(tzinfo=None)
    rows = 0
    for point, p in found:
        key = point.key()
        head = [run_id, *key[:7]]
        tail = [point.optimisation, point.trial_key]
        conn.execute(
            f"INSERT INTO profiles ({', '.join(_HEAD)}) "  # noqa: S608 - fixed names
            f"VALUES ({', '.join('?' for _ in _HEAD)})",
            [*head, p.profiler, p.calls, p.plain_ms, p.profiled_ms, stamp, *tail, p.timed_ms],
        )
        records = [
            [*head, r.name, r.op_type, r.op_class, r.fused, r.us_per_inference,
             r.calls_per_inference, json.dumps(list(r.source_ops)), r.kernel, *tail]
            for r in p.records
        ]  # fmt: skip
        if records:
            conn.executemany(
                f"INSERT INTO profile_kernels ({', '.join(_KERNEL_HEAD)}) "  # noqa: S608
                f"VALUES ({', '.join('?' for _ in _KERNEL_HEAD)})",
                records,
            )
        rows += 1 + len(records)
    return rows


def take_profiles(
    conn: duckdb.DuckDBPyConnection, run_id: str, device: str, results: Sequence[TrialResult]
) -> int:
    """A sweep's profile passes (``result.extra["profile"]``, ``ngb.core.trial.profile_pass``) move
    out of the trials' ``extra`` into ``profiles`` / ``profile_kernels``, keyed by run and trial
    key; a pass that failed leaves its one line as ``extra["profile_error"]``. Rows written."""
    found = []
    for r in results:
        data = r.extra.pop("profile", None)
        if not isinstance(data, dict):
            continue
        if "records" not in data:
            r.extra["profile_error"] = str(data.get("error") or "no profile")
            continue
        try:
            spec = TrialSpec.from_dict(r.spec)
            profile = Profile.from_dict(data)
        except (NgbError, KeyError, TypeError, ValueError) as exc:  # an agent of another version
            r.extra["profile_error"] = f"profile not readable: {one_line(exc)}"
            continue
        ran = r.precision or profile.precision or ""
        found.append((ProfilePoint.of(spec, device, ran, r.key), profile))
    return insert_profiles(conn, run_id, found) if found else 0
