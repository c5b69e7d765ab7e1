"""Per-operator profiles in the results store (``profiles``, ``profile_kernels``; schema V8, V9).

One ``profiles`` row per profile pass (profiler, calls, plain and profiled ms per call) and one
``profile_kernels`` row per kernel record, keyed by the point (device, model, width, depth,
batch, compiler, precision, optimisation). A sweep's pass (``profile = true``) is stored in the
trial's run with its trial ``key`` and the trial's timed ms per call (``timed_ms``), taken out
of the trial's ``extra`` at ingest (``profile_rows.take_profiles``); ``ngb profile --db``
stores under a run of its own, without a trial. Reading gives
``ngb.core.compilers.profiling.Profile`` objects back, newest per point.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ngb.core.compilers.profiling import KernelRecord, Profile
from ngb.sweeps.store.profile_rows import ProfilePoint, insert_profiles

if TYPE_CHECKING:
    import pandas as pd
    from ngb.sweeps.store.database import Store


def save_profiles(store: Store, run_id: str, found: Sequence[tuple[ProfilePoint, Profile]]) -> int:
    """Store each profile and its records under ``run_id`` (one transaction); rows written."""
    with store.transaction() as conn:
        return insert_profiles(conn, run_id, found)


def _readable(store: Store) -> bool:
    """Whether the file has the profile tables as this module writes them (V9); a reader
    upgrades an older ngb file first, so ask through one."""
    if not store.path.exists():
        return False
    # the version readers see: an older file is read through a copy upgraded to this ngb's
    # schema (``older``), while ``schema_version`` is the file's own
    _, rows = store.select("SELECT max(version) FROM schema_version")
    version = rows[0][0] if rows else None
    return isinstance(version, int) and version >= 9


_KEY = "device, model, width, depth, batch, compiler, precision, coalesce(optimisation, 'none')"


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
    if not _readable(store):
        return []
    sql = (
        f"SELECT run_id, {_KEY}, key, profiler, calls, plain_ms, profiled_ms, timed_ms "  # noqa: S608
        f"FROM profiles WHERE {' AND '.join(where)} QUALIFY row_number() OVER (PARTITION BY "
        f"{_KEY} ORDER BY created_at DESC, run_id DESC) = 1 "
        "ORDER BY model, width, depth, batch, compiler, precision, "
        "coalesce(optimisation, 'none') != 'none', coalesce(optimisation, 'none')"
    )
    _, heads = store.select(sql, params)
    out = []
    for run, *key, trial, tool, calls, plain, prof, timed in heads:
        device, mdl, width, depth, batch, compiler, precision, opt = key
        point = ProfilePoint(device, mdl, width, depth, batch, compiler, precision, opt, trial)
        _, kernels = store.select(
            "SELECT name, op_type, op_class, fused, us_per_inference, calls_per_inference, "
            "source_ops, kernel FROM profile_kernels WHERE run_id = ? AND device = ? AND "
            "model = ? AND width IS NOT DISTINCT FROM ? AND depth = ? AND batch = ? AND "
            "compiler = ? AND precision IS NOT DISTINCT FROM ? AND "
            "coalesce(optimisation, 'none') = ? AND key IS NOT DISTINCT FROM ?",
            [run, *point.key(), trial],
        )
        records = [
            KernelRecord(n, t, c, bool(f), float(us), float(k), tuple(json.loads(src or "[]")),
                         kern or "")
            for n, t, c, f, us, k, src, kern in kernels
        ]  # fmt: skip
        found = Profile(
            compiler, tool, calls, plain, prof, records, f"run {run}", precision or "", timed
        )
        out.append((point, found))
    return out


def finished_passes(store: Store, run_id: str) -> list[tuple[str, str, bool, str]]:
    """Every ok trial of ``run_id``: (device, trial key, whether a profile is stored keyed to
    it, the one line its failed pass left in ``extra.profile_error`` or "")."""
    if not _readable(store):
        return []
    _, rows = store.select(
        "SELECT t.device, t.key, EXISTS (SELECT 1 FROM profiles p WHERE p.run_id = t.run_id "
        "AND p.device = t.device AND p.key = t.key), "
        "coalesce(json_extract_string(t.extra, '$.profile_error'), '') "
        "FROM trials t WHERE t.run_id = ? AND t.status = 'ok' ORDER BY t.device, t.key",
        [run_id],
    )
    return [(str(d), str(k), bool(has), str(why)) for d, k, has, why in rows]


#: the columns a profile and its kernel rows share (a kernel row belongs to its pass)
_JOIN = " AND ".join(
    f"k.{c} IS NOT DISTINCT FROM p.{c}"
    for c in ("run_id", "device", "model", "width", "depth", "batch", "compiler", "precision",
              "optimisation", "key")
)  # fmt: skip


def profile_frame(store: Store, run_id: str) -> pd.DataFrame:
    """One row per kernel record of every profile pass of ``run_id`` (``ngb.open_results``'
    ``profiles``): the pass's columns (trial key, compiler, precision, optimisation, profiler,
    calls, plain / profiled / timed ms per call) beside the kernel's (name, op type, class,
    fused, µs and calls per inference, source operators as JSON, the kernel that ran). A pass
    with no records keeps one row with the kernel's columns NULL."""
    if not _readable(store):
        return store.frame("SELECT NULL AS run_id WHERE false")
    return store.frame(
        "SELECT p.run_id, p.device, p.key, p.model, p.width, p.depth, p.batch, "  # noqa: S608
        "p.compiler, p.precision, coalesce(p.optimisation, 'none') AS optimisation, p.profiler, "
        "p.calls, p.plain_ms, p.profiled_ms, p.timed_ms, k.name, k.op_type, k.op_class, k.fused, "
        "k.us_per_inference, k.calls_per_inference, k.source_ops, k.kernel "
        f"FROM profiles p LEFT JOIN profile_kernels k ON {_JOIN} WHERE p.run_id = ? "
        "ORDER BY p.device, p.model, p.batch, p.compiler, k.us_per_inference DESC",
        [run_id],
    )


__all__ = ["ProfilePoint", "finished_passes", "load_profiles", "profile_frame", "save_profiles"]
