"""Ingest: how results, CPU samples, tuning progress and errors become rows of the store.

Row mapping (``TrialResult`` -> a ``trials`` row and its ``measurements`` / ``cpu_samples`` /
``latencies`` rows) and the appends themselves, on a connection the store opened inside a
transaction. Batches go in as Arrow tables, which DuckDB appends without per-row Python work.

Ingest is idempotent: a result already stored for (run_id, device, key) is skipped together with
its measurements and CPU samples (checked inside the writer's transaction, and DuckDB admits one
writer process), so ingesting the same checkpoint twice (e.g. after a reconnect) stores every
trial exactly once. A sweep's finished serving trial (``[serve]``) is no ``trials`` row: its
outcome goes to ``serving`` / ``serving_peaks``, also once (``ngb.sweeps.store.serving_ingest``).
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, SupportsFloat, SupportsInt, TypeVar

from ngb.core.records.types import BLOCK_MODELS, TrialResult
from ngb.core.serving.serve_trial import EXTRA as SERVED
from ngb.sweeps.rows import Event
from ngb.sweeps.store import profile_rows, schema
from ngb.sweeps.store import provenance as provenance_rows
from ngb.sweeps.store.result_store import ErrorRow, IngestBatch
from ngb.sweeps.store.timestamps import now as now  # re-exported
from ngb.sweeps.store.timestamps import to_datetime as to_datetime  # re-exported
from ngb.sweeps.store.values import columns_relation, storable, values_relation

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

T = TypeVar("T")

# ---------------------------------------------------------------- value helpers


def _float(value: object) -> float:
    """``float(value)`` for what float() takes; anything else is a TypeError, as float() says."""
    # the plain types first (a tuple is checked in order): typing's Protocol check costs ~4 us
    # a call, 0.25 us this way; a 128-device run stores ~20,000 numbers
    if isinstance(value, (float | int | str, SupportsFloat)):
        return float(value)
    raise TypeError(f"not a number: {value!r}")


def num(value: object) -> float | None:
    """NaN/inf (unknown statistics) become NULL rather than poisoning aggregates."""
    if value is None:
        return None
    out = _float(value)
    return out if math.isfinite(out) else None


def as_int(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, (int | float | str, SupportsInt)):  # the plain types first: _float
        return int(value)
    raise TypeError(f"not an integer: {value!r}")


def _ts(seconds: object) -> int | None:
    """Unix seconds -> microseconds for an Arrow timestamp; 0/None mean 'not known'."""
    if not seconds:
        return None
    return int(_float(seconds) * 1_000_000)


def to_json(value: object) -> str | None:
    if value is None:
        return None
    return json.dumps(value, sort_keys=True, default=str)


def model_family(model: str, source: object = None) -> str:
    """The family of a model: a user's model's own ``family`` key; the paper's family
    (``ngb.core.models.models.family_of``; ``block`` for conv and mha); a user's model's whole name
    (a name the user chose is not a timm name: ``mnv3s-onnx`` is not family "mnv"); else the timm
    name's leading letters (``regnety_040`` -> ``regnety``)."""
    from ngb.core.models.models import family_of  # stdlib-only at import; torch/timm stay unloaded

    if isinstance(source, str):
        with contextlib.suppress(ValueError):
            source = json.loads(source)
    named = source.get("family") if isinstance(source, Mapping) else None
    if isinstance(named, str) and named:
        return named
    family = family_of(model)
    if family:
        return family
    if isinstance(source, Mapping):
        return model
    match = re.match(r"[A-Za-z]+", model)
    return match.group(0).lower() if match else model


def _stats(result_stats: object) -> dict[str, object]:
    if result_stats is None:
        return {}
    if isinstance(result_stats, Mapping):
        return dict(result_stats)
    return dict(vars(result_stats))


# ---------------------------------------------------------------- rows and appends


def _append(
    conn: duckdb.DuckDBPyConnection, table: str, relation: tuple[str, list[object]]
) -> None:
    """Insert the rows of ``relation`` (``columns_relation`` of the table's columns)."""
    conn.execute(f"INSERT INTO {table} SELECT * FROM {relation[0]}", relation[1])  # noqa: S608 - fixed names


def _append_arrow(conn: duckdb.DuckDBPyConnection, table: str, arrow_table: pa.Table) -> None:
    view = f"_ngb_new_{table}"
    conn.register(view, arrow_table)
    try:
        conn.execute(f"INSERT INTO {table} SELECT * FROM {view}")  # noqa: S608 - fixed names
    finally:
        conn.unregister(view)


def ingest_results(
    conn: duckdb.DuckDBPyConnection,
    run_id: str,
    device: str,
    results: Iterable[TrialResult | Event],
) -> int:
    return ingest_result_groups(conn, {(run_id, device): results})


def ingest_result_groups(
    conn: duckdb.DuckDBPyConnection,
    groups: Mapping[tuple[str, str], Iterable[TrialResult | Event]],
) -> int:
    """``ingest_results`` for the results of any runs and devices at once: one statement per
    table, not eight per device (a live flush of 128 devices' results cost ~10 ms a device);
    a trial already stored for (run, device, key) is skipped. Returns the trials stored."""
    wanted: list[tuple[str, str, dict[str, TrialResult]]] = []
    served = 0
    for (run_id, device), results in groups.items():
        batch: dict[str, TrialResult] = {}
        for item in results:
            result = item if isinstance(item, TrialResult) else TrialResult.from_dict(item)
            batch.setdefault(result.key, result)  # the first copy of a key wins
        served += _take_served(conn, run_id, device, batch)
        if batch:
            wanted.append((run_id, device, batch))
    if not wanted:
        return served
    stored = _stored_keys(conn, [(r, d, key) for r, d, batch in wanted for key in batch])
    # copies whose ``extra`` the takers below may empty: the caller's results keep theirs (the
    # API returns the very result it stored, whose profile vanished from ``extra`` once stored)
    fresh_groups = [
        (run_id, device, fresh)
        for run_id, device, batch in wanted
        if (fresh := [replace(r, extra=r.extra.copy()) for key, r in batch.items()
                      if (run_id, device, key) not in stored])
    ]  # fmt: skip
    if not fresh_groups:
        return served
    now_us = _ts(time.time())
    # package lists leave the trials' extra for `environments`, once per hash (issue 35)
    every = [r for _, _, fresh in fresh_groups for r in fresh]
    provenance_rows.insert_environments(conn, provenance_rows.take_environments(every))
    trial_cols = _no_rows(schema.TRIAL_COLUMNS)
    measurement_cols = _no_rows(schema.MEASUREMENT_COLUMNS)
    sample_cols = _no_rows(schema.CPU_SAMPLE_COLUMNS)
    timed_calls: list[tuple[str, str, Sequence[TrialResult]]] = []
    for run_id, device, fresh in fresh_groups:
        # a sweep's profile passes leave the trials' extra for `profiles` (issue 34)
        profile_rows.take_profiles(conn, run_id, device, fresh)
        for r in fresh:
            for name, value in _trial_row(run_id, device, r, now_us).items():
                trial_cols[name].append(value)
        _per_trial_rows(
            measurement_cols, run_id, device, fresh, "repetitions",
            {"iters": "iters", "elapsed_s": "elapsed_s", "throughput": "throughput",
             "worker": "worker"},
            index_name="rep",
        )  # fmt: skip
        _per_trial_rows(sample_cols, run_id, device, fresh, "cpu_samples",
                        {"t_s": 0, "sys_percent": 1, "proc_percent": 2})  # fmt: skip
        timed_calls.append((run_id, device, fresh))
    _append(conn, "trials", columns_relation(schema.TRIAL_COLUMNS, trial_cols))
    for table, columns, cols in (
        ("measurements", schema.MEASUREMENT_COLUMNS, measurement_cols),
        ("cpu_samples", schema.CPU_SAMPLE_COLUMNS, sample_cols),
    ):
        if cols["run_id"]:
            _append(conn, table, columns_relation(columns, cols))
    _insert_latencies(conn, timed_calls)
    return len(every) + served


def _no_rows(columns: Sequence[tuple[str, str]]) -> dict[str, list[object]]:
    """An empty list per column: what ``columns_relation`` takes, filled row by row."""
    return {name: [] for name, _ in columns}


def _take_served(
    conn: duckdb.DuckDBPyConnection, run_id: str, device: str, batch: dict[str, TrialResult]
) -> int:
    """A sweep's finished serving trials leave ``batch`` for the serving tables, not
    ``trials`` (``ngb.sweeps.store.serving_ingest`` says why); the number stored there."""
    keys = [k for k, r in batch.items() if r.ok and SERVED in r.extra]
    if not keys:
        return 0
    from ngb.sweeps.store.serving_ingest import is_served, store_served

    taken = [batch.pop(k) for k in keys if is_served(batch[k])]
    return store_served(conn, run_id, device, taken)


def _stored_keys(
    conn: duckdb.DuckDBPyConnection, keys: Sequence[tuple[str, str, str]]
) -> set[tuple[str, str, str]]:
    """Which of these (run, device, key) trials the store holds already (one query)."""
    wanted, params = columns_relation(
        [("run_id", "VARCHAR"), ("device", "VARCHAR"), ("key", "VARCHAR")],
        {"run_id": [k[0] for k in keys], "device": [k[1] for k in keys],
         "key": [k[2] for k in keys]},
        alias="w",
    )  # fmt: skip
    rows = conn.execute(
        f"SELECT t.run_id, t.device, t.key FROM trials t JOIN {wanted} "  # noqa: S608 - placeholders only
        "USING (run_id, device, key)",
        params,
    ).fetchall()
    return {(str(r), str(d), str(k)) for r, d, k in rows}


#: per-call latencies a flush stores as Python lists (``columns_relation``, ~4 us a sample);
#: past this, through NumPy and Arrow, whose import (~0.35 s of CPU, once a process) then pays
#: for itself. A no-op fleet's flush holds a few thousand, a long serving trial 4,096 alone.
LATENCY_LISTS_MAX = 20_000


def _insert_latencies(
    conn: duckdb.DuckDBPyConnection, groups: Sequence[tuple[str, str, Sequence[TrialResult]]]
) -> None:
    """The kept per-call latencies (``TrialResult.latency_sample_ns``) as ``latencies`` rows:
    ``call`` is the call's index among all the trial's timed calls (every k-th kept)."""
    total = sum(len(r.latency_sample_ns or []) for _, _, results in groups for r in results)
    if not total:
        return
    if total > LATENCY_LISTS_MAX:
        import pyarrow as pa

        tables = [_latency_table(run_id, device, results) for run_id, device, results in groups]
        _append_arrow(conn, "latencies", pa.concat_tables([t for t in tables if t is not None]))
        return
    cols = _no_rows(schema.LATENCY_COLUMNS)
    for run_id, device, results in groups:
        for r in results:
            kept = r.latency_sample_ns or []
            n = len(kept)
            if not n:
                continue
            every = max(int(r.latency_sample_every or 1), 1)
            cols["run_id"] += [run_id] * n
            cols["device"] += [device] * n
            cols["key"] += [r.key] * n
            cols["call"] += range(0, n * every, every)
            cols["latency_ms"] += [ns / 1e6 for ns in kept]
    _append(conn, "latencies", columns_relation(schema.LATENCY_COLUMNS, cols))


def _latency_table(run_id: str, device: str, results: Sequence[TrialResult]) -> pa.Table | None:
    """``_insert_latencies``' rows of one device's ``results`` as an Arrow table."""
    import numpy as np
    import pyarrow as pa

    kept = [np.asarray(r.latency_sample_ns or [], dtype=np.int64) for r in results]
    counts = np.array([k.size for k in kept], dtype=np.int64)
    total = int(counts.sum())
    if not total:
        return None
    trial_index = np.repeat(np.arange(len(results), dtype=np.int32), counts)
    zeros = np.zeros(total, dtype=np.int32)
    every = np.repeat(
        np.array([max(int(r.latency_sample_every or 1), 1) for r in results], np.int64), counts
    )
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    return pa.table(
        {
            "run_id": pa.DictionaryArray.from_arrays(zeros, pa.array([run_id])),
            "device": pa.DictionaryArray.from_arrays(zeros, pa.array([device])),
            "key": pa.DictionaryArray.from_arrays(trial_index, pa.array([r.key for r in results])),
            "call": pa.array((np.arange(total, dtype=np.int64) - starts) * every),
            "latency_ms": pa.array(np.concatenate(kept).astype(np.float64) / 1e6),
        }
    )


def _per_trial_rows(
    cols: dict[str, list[object]],
    run_id: str,
    device: str,
    results: Sequence[TrialResult],
    attr: str,
    fields: Mapping[str, str | int],
    index_name: str | None = None,
) -> None:
    """Append to ``cols`` (one list per column of ``measurements`` or ``cpu_samples``) the
    per-trial rows in ``attr`` (repetitions or CPU samples): the bulk of an ingest (100
    repetitions per trial in the paper's presets). NaN becomes NULL on the way."""
    for r in results:
        rows = getattr(r, attr)
        n = len(rows)
        if not n:
            continue
        cols["run_id"] += [run_id] * n
        cols["device"] += [device] * n
        cols["key"] += [r.key] * n
        if attr == "repetitions":  # the trial's axes, repeated per row (see schema.py)
            spec = r.spec or {}
            for name in ("model", "compiler", "optimisation", "batch", "depth", "width"):
                cols[name] += [spec.get(name)] * n
        if index_name:
            cols[index_name] += range(n)
        if attr == "cpu_samples":
            cols["source"] += ["trial"] * n
            cols["ts"] += [None] * n
        for name, field_key in fields.items():
            if isinstance(field_key, int):
                values = [row[field_key] if len(row) > field_key else None for row in rows]
            else:
                values = [row.get(field_key) for row in rows]
            cols[name] += [None if v != v else v for v in values]  # NaN != NaN


def _trial_row(run_id: str, device: str, r: TrialResult, now_us: int | None) -> dict[str, object]:
    spec = dict(r.spec or {})
    model = str(spec.get("model", ""))
    thr = _stats(r.throughput)
    lat = _stats(r.latency_ms)
    # TrialSpec.label without re-validating the spec (that costs more than the rest of the row)
    width, depth = spec.get("width"), spec.get("depth", 1)
    label = f"{model}{width}x{depth}" if model in BLOCK_MODELS else model
    label += f"/{spec.get('compiler')}"
    algorithm = str(spec.get("algorithm") or "default")  # written before the axis: default
    if algorithm != "default":
        label += f"+{algorithm}"
    if spec.get("optimisation", "none") != "none":
        label += f"/{spec['optimisation']}"
    label += f"/b{spec.get('batch')}"
    return {
        "run_id": run_id,
        "device": device,
        "key": r.key,
        "label": label,
        "model": model or None,
        "family": model_family(model, spec.get("source")) if model else None,
        "compiler": spec.get("compiler"),
        "batch": as_int(spec.get("batch")),
        "depth": as_int(spec.get("depth")),
        "width": as_int(spec.get("width")),
        "optimisation": spec.get("optimisation"),
        "algorithm": algorithm,
        "target": spec.get("device"),
        "input_size": as_int(spec.get("input_size")),
        "status": r.status,
        "error": r.error,
        "error_kind": r.error_kind,
        "export_s": num(r.export_s),
        "compile_s": num(r.compile_s),
        "tune_s": num(r.tune_s),
        "first_call_s": num(r.first_call_s),
        "repetitions": len(r.repetitions),
        "throughput_mean": num(thr.get("mean")),
        "throughput_std": num(thr.get("std")),
        "throughput_median": num(thr.get("median")),
        "throughput_min": num(thr.get("min")),
        "throughput_max": num(thr.get("max")),
        "throughput_p50": num(thr.get("p50")),
        "throughput_p90": num(thr.get("p90")),
        "throughput_p99": num(thr.get("p99")),
        "throughput_cov": num(thr.get("cov")),
        "latency_mean_ms": num(lat.get("mean")),
        "latency_p50_ms": num(lat.get("p50")),
        "latency_p90_ms": num(lat.get("p90")),
        "latency_p99_ms": num(lat.get("p99")),
        "unstable": bool(r.unstable),
        "cpu_percent_mean": num(r.cpu_percent_mean),
        "cpu_percent_max": num(r.cpu_percent_max),
        "proc_cpu_percent_mean": num(r.proc_cpu_percent_mean),
        "peak_rss_mb": num(r.peak_rss_mb),
        "gpu_mem_mb": num(r.gpu_mem_mb),
        "params": as_int(r.params),
        "macs": as_int(r.macs),
        "max_abs_err": num(r.max_abs_err),
        "host": r.host or None,
        "versions": to_json(r.versions),
        "threads": to_json(r.threads),
        "compiler_options": to_json(spec.get("compiler_options") or {}),
        "measure": to_json(spec.get("measure") or {}),
        "spec": to_json(spec),
        "extra": to_json(r.extra),
        "started_at": _ts(r.started_at),
        "finished_at": _ts(r.finished_at),
        "ingested_at": now_us,
        "throughput_ci_half": num(r.ci_half_width),
        "verdict": r.verdict,
        "verdict_reason": r.verdict_reason,
        "disturbed": bool(r.disturbed),
        "workers": as_int(r.workers),
        "precision": r.precision,
        "precision_asked": (spec.get("measure") or {}).get("precision", "default"),
        "precision_flags": to_json(r.precision_flags),
        "energy_j_per_sample": num(r.energy_j_per_sample),
        "energy_j_per_sample_ci_half": num(r.energy_j_per_sample_ci),
        "energy_above_idle_j_per_sample": num(r.energy_above_idle_j_per_sample),
        "samples_per_j": num(r.samples_per_j),
        "power_w_mean": num(r.power_w_mean),
        "idle_power_w": num(r.idle_power_w),
        "energy_source": r.energy_source,
        "energy_note": r.energy_note,
        **provenance_rows.trial_columns(r),
        **_tail_and_memory_columns(r),
        **_accuracy_columns(r),
    }


def _accuracy_columns(r: TrialResult) -> dict[str, object]:
    """Migration 13's columns from ``extra["accuracy"]`` (``ngb.core.trial.accuracy_pass``)."""
    extra = r.extra if isinstance(r.extra, dict) else {}
    record = extra.get("accuracy")
    record = record if isinstance(record, dict) else {}
    data = record.get("data")
    if data is None:
        wanted = (r.spec or {}).get("measure") or {}
        asked = wanted.get("accuracy") if isinstance(wanted, dict) else None
        data = asked.get("data") if isinstance(asked, dict) else None
    error = extra.get("accuracy_error")
    out: dict[str, object] = {
        "accuracy_data": data if isinstance(data, str) else None,
        "accuracy_samples": as_int(record.get("samples")),
        "accuracy_classes": as_int(record.get("classes")),
        "accuracy_p": num(record.get("p_value")),
        "accuracy_verdict": record.get("verdict")
        if isinstance(record.get("verdict"), str)
        else None,
        "accuracy_pass_s": num(record.get("pass_s")),
        "accuracy_error": error if isinstance(error, str) else None,
    }
    for name, column in (
        ("top1", "top1"),
        ("top5", "top5"),
        ("eager_top1", "eager_top1"),
        ("agreement", "agreement"),
        ("drop", "accuracy_drop"),
    ):
        bounds = record.get(f"{name}_ci")
        low, high = ((list(bounds) if isinstance(bounds, list) else []) + [None, None])[:2]
        out[column] = num(record.get(name))
        out[f"{column}_lo"] = num(low)
        out[f"{column}_hi"] = num(high)
    return out


def _tail_and_memory_columns(r: TrialResult) -> dict[str, object]:
    """Migration 7's columns: percentile bounds, kept-call step, memory per phase, sources."""
    out: dict[str, object] = {
        "latency_calls": as_int(r.latency_calls) if r.latency_calls else None,
        "latency_kept_every": as_int(r.latency_sample_every) if r.latency_sample_ns else None,
        "gpu_mem_source": r.gpu_mem_source,
        "rss_source": r.rss_source,
    }
    bounds = r.latency_ci_ms or {}
    for name in ("p50", "p90", "p99"):
        low, high = (list(bounds.get(name) or []) + [None, None])[:2]
        out[f"latency_{name}_lo_ms"] = num(low)
        out[f"latency_{name}_hi_ms"] = num(high)
    phases = r.peak_rss_phase_mb or {}
    for phase in ("compile", "warmup", "timed"):
        out[f"peak_rss_{phase}_mb"] = num(phases.get(phase))
    return out


def ingest_cpu_events(
    conn: duckdb.DuckDBPyConnection, run_id: str, device: str, events: Iterable[Event]
) -> int:
    """Live CPU samples, each stored once however many followers (CLI, console, ``attach``)
    pass it on: a sample is the device's, named by its trial and its agent-clock ``ts``."""
    return ingest_cpu_samples(conn, [(run_id, device, e) for e in events])


def ingest_cpu_samples(
    conn: duckdb.DuckDBPyConnection, samples: Sequence[tuple[str, str, Event]]
) -> int:
    """``ingest_cpu_events`` for the samples of any runs and devices in one statement: a flush
    of 128 devices' samples took 128 of them (~0.65 s of CPU) one device at a time."""
    cols = _no_rows(schema.CPU_SAMPLE_COLUMNS)
    for run_id, device, e in samples:
        cols["run_id"].append(run_id)
        cols["device"].append(device)
        cols["key"].append(e.get("key"))
        cols["source"].append("live")
        cols["ts"].append(_ts(e.get("ts")))
        cols["t_s"].append(num(e.get("t_s")))
        cols["sys_percent"].append(num(e.get("percent", e.get("sys_percent"))))
        cols["proc_percent"].append(num(e.get("proc_percent")))
    if not cols["run_id"]:
        return 0
    rows = columns_relation(schema.CPU_SAMPLE_COLUMNS, cols)
    same = ("run_id", "device", "key", "source", "ts")
    return _append_new(conn, "cpu_samples", rows, None, None, same)


#: ``tuning_progress``'s columns, in table order
TUNING_COLUMNS = (
    ("run_id", "VARCHAR"),
    ("device", "VARCHAR"),
    ("key", "VARCHAR"),
    ("ts", "TIMESTAMP"),
    ("trials_done", "INTEGER"),
    ("budget", "INTEGER"),
    ("best_ms", "DOUBLE"),
    ("tasks", "VARCHAR"),
)


def ingest_tuning(
    conn: duckdb.DuckDBPyConnection, run_id: str, device: str, key: str, events: Iterable[Event]
) -> int:
    """Tuning progress, each event stored once whatever follows the run (see
    ``ingest_cpu_events``): named by its trial, agent-clock ``ts`` and trials done."""
    cols = _no_rows(TUNING_COLUMNS)
    for e in events:
        cols["run_id"].append(run_id)
        cols["device"].append(device)
        cols["key"].append(key)
        cols["ts"].append(_ts(e.get("ts")) if e.get("ts") else _ts(time.time()))
        cols["trials_done"].append(as_int(e.get("trials_done")))
        cols["budget"].append(as_int(e.get("budget")))
        cols["best_ms"].append(num(e.get("best_ms")))
        cols["tasks"].append(to_json(e.get("tasks")))
    if not cols["run_id"]:
        return 0
    rows = columns_relation(TUNING_COLUMNS, cols)
    return _append_new(conn, "tuning_progress", rows, run_id, device, ("key", "ts", "trials_done"))


def _append_new(
    conn: duckdb.DuckDBPyConnection,
    table: str,
    rows: tuple[str, list[object]],
    run_id: str | None,
    device: str | None,
    same: Sequence[str],
) -> int:
    """Append the rows of ``rows`` that ``table`` does not hold yet (for this run and device,
    when given), a row being the same as another when the columns ``same`` are (NULLs equal):
    inside the writer's transaction, and DuckDB lets one process write the file at a time, so
    however many followers pass an event on, it is stored once. Returns the rows appended.
    ``rows``: a relation named ``n`` and its parameters (``columns_relation``,
    ``values_relation``)."""
    where = [f"o.{c} IS NOT DISTINCT FROM n.{c}" for c in same]
    params: list[object] = []
    if run_id is not None and device is not None:
        where[:0] = ["o.run_id = ?", "o.device = ?"]
        params = [run_id, device]
    source, params = rows[0], [*rows[1], *params]
    appended = conn.execute(
        f"INSERT INTO {table} SELECT DISTINCT * FROM {source} "  # noqa: S608 - fixed names
        f"WHERE NOT EXISTS (SELECT 1 FROM {table} o WHERE {' AND '.join(where)})",
        params,
    ).fetchone()
    return int(appended[0]) if appended else 0


#: ``errors``' columns, in table order
ERROR_COLUMNS = (
    ("run_id", "VARCHAR"),
    ("device", "VARCHAR"),
    ("key", "VARCHAR"),
    ("ts", "TIMESTAMP"),
    ("kind", "VARCHAR"),
    ("message", "VARCHAR"),
)


def insert_errors(conn: duckdb.DuckDBPyConnection, rows: Sequence[ErrorRow]) -> None:
    """Errors, each stored once (the same error passed on by several followers)."""
    if rows:
        values = values_relation(
            [(run, dev, key, _ts(ts), storable(kind), storable(msg))
             for run, dev, key, ts, kind, msg in rows],
            [name for name, _ in ERROR_COLUMNS],
            types=[sql_type for _, sql_type in ERROR_COLUMNS],
        )  # fmt: skip
        _append_new(conn, "errors", values, None, None, [name for name, _ in ERROR_COLUMNS])


def write_batch(conn: duckdb.DuckDBPyConnection, batch: IngestBatch) -> int:
    """Everything in ``batch`` on ``conn`` (inside the caller's transaction); new trials stored."""
    new = ingest_result_groups(conn, _group(batch.results)) if batch.results else 0
    if batch.cpu:
        ingest_cpu_samples(conn, batch.cpu)
    tuning: dict[tuple[str, str, str], list[Event]] = {}
    for run_id, device, key, event in batch.tuning:
        tuning.setdefault((run_id, device, key), []).append(event)
    for (run_id, device, key), events in tuning.items():
        ingest_tuning(conn, run_id, device, key, events)
    if batch.errors:
        insert_errors(conn, batch.errors)
    return new


def _group(items: Sequence[tuple[str, str, T]]) -> dict[tuple[str, str], list[T]]:
    out: dict[tuple[str, str], list[T]] = {}
    for run_id, device, item in items:
        out.setdefault((run_id, device), []).append(item)
    return out
