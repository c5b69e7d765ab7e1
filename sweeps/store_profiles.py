"""Per-operator profiles in the results store (``profiles``, ``profile_kernels``; schema V8).

A profile pass (``ngb profile --db``) is stored under a run of its own beside the trials: one
``profiles`` row per compiler (profiler, calls, plain and profiled ms per call) and one
``profile_kernels`` row per kernel record, keyed by the point (device, model, width, depth,
batch, compiler, precision) so ``ngb report ops`` can set a profile beside the timed trial of the
same point. Reading gives ``ngb.core.profiling.Profile`` objects back, newest per point.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from ngb.core.profiling import KernelRecord, Profile
from ngb.core.types import TrialSpec
from ngb.sweeps.schema import PROFILE_COLUMNS, PROFILE_KERNEL_COLUMNS
from ngb.sweeps.store import Store
from ngb.sweeps.store_ingest import now


@dataclass(frozen=True)
class ProfilePoint:
    """Where a profile was taken: the point's columns as the trials table names them."""

    device: str
    model: str
    width: int | None
    depth: int
    batch: int
    compiler: str
    precision: str

    @classmethod
    def of(cls, spec: TrialSpec, device: str, precision: str) -> ProfilePoint:
        return cls(device, spec.model, spec.width, spec.depth, spec.batch, spec.compiler, precision)

    def key_tuple(self) -> tuple[object, ...]:
        return tuple(self.key())

    def key(self) -> list[object]:
        return [self.device, self.model, self.width, self.depth, self.batch, self.compiler,
                self.precision]  # fmt: skip


def save_profiles(store: Store, run_id: str, found: Sequence[tuple[ProfilePoint, Profile]]) -> int:
    """Store each profile and its records under ``run_id`` (one transaction); rows written."""
    stamp = now()
    head = ", ".join(n for n, _ in PROFILE_COLUMNS)
    kernel_head = ", ".join(n for n, _ in PROFILE_KERNEL_COLUMNS)
    marks = ", ".join("?" for _ in PROFILE_COLUMNS)
    kernel_marks = ", ".join("?" for _ in PROFILE_KERNEL_COLUMNS)
    rows = 0
    with store.transaction() as conn:
        for point, p in found:
            key = point.key()
            conn.execute(
                f"INSERT INTO profiles ({head}) VALUES ({marks})",  # noqa: S608 - fixed names
                [run_id, *key, p.profiler, p.calls, p.plain_ms, p.profiled_ms, stamp],
            )
            records = [
                [run_id, *key, r.name, r.op_type, r.op_class, r.fused, r.us_per_inference,
                 r.calls_per_inference, json.dumps(list(r.source_ops)), r.kernel]
                for r in p.records
            ]  # fmt: skip
            if records:
                conn.executemany(
                    f"INSERT INTO profile_kernels ({kernel_head}) VALUES ({kernel_marks})",  # noqa: S608
                    records,
                )
            rows += 1 + len(records)
    return rows


_KEY = "device, model, width, depth, batch, compiler, precision"


def load_profiles(
    store: Store, run_id: str | None = None, model: str | None = None
) -> list[tuple[ProfilePoint, Profile]]:
    """The newest profile of every point (of one run, of one model), with its records."""
    where, params = ["1 = 1"], []
    if run_id is not None:
        where.append("run_id = ?")
        params.append(run_id)
    if model is not None:
        where.append("model = ?")
        params.append(model)
    if store.schema_version() < 8:
        return []
    sql = (
        f"SELECT run_id, {_KEY}, profiler, calls, plain_ms, profiled_ms FROM profiles "  # noqa: S608
        f"WHERE {' AND '.join(where)} QUALIFY row_number() OVER (PARTITION BY {_KEY} "
        "ORDER BY created_at DESC, run_id DESC) = 1 ORDER BY model, width, depth, batch"
    )
    _, heads = store.query(sql, params)
    out = []
    for (
        run,
        device,
        mdl,
        width,
        depth,
        batch,
        compiler,
        precision,
        tool,
        calls,
        plain,
        prof,
    ) in heads:
        point = ProfilePoint(device, mdl, width, depth, batch, compiler, precision)
        _, kernels = store.query(
            "SELECT name, op_type, op_class, fused, us_per_inference, calls_per_inference, "
            "source_ops, kernel FROM profile_kernels WHERE run_id = ? AND device = ? AND "
            "model = ? AND width IS NOT DISTINCT FROM ? AND depth = ? AND batch = ? AND "
            "compiler = ? AND precision IS NOT DISTINCT FROM ?",
            [run, *point.key()],
        )
        records = [
            KernelRecord(n, t, c, bool(f), float(us), float(k), tuple(json.loads(src or "[]")),
                         kern or "")
            for n, t, c, f, us, k, src, kern in kernels
        ]  # fmt: skip
        found = Profile(compiler, tool, calls, plain, prof, records, f"run {run}", precision or "")
        out.append((point, found))
    return out
