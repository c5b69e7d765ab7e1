"""The shapes of values that cross the sweeps layer's edges, typed without ``Any`` (issue 22).

- ``StoreRow``: one row read from the store. A DuckDB value is whatever its column holds (str, int,
  float, bool, datetime, None, and the JSON columns decoded to dicts and lists), so a reader
  narrows the columns it uses (``number``, ``text``, ``mapping`` below, or ``isinstance``)
  instead of trusting them.
- ``Event``: one JSON object read from the wire (an agent's event, a checkpoint line, a probe
  answer) or from a user's file; read like a ``StoreRow``.
- ``JsonValue``: what ``json.dumps`` writes without help, for values built here and written out.

The helpers only narrow: they never convert text to numbers, so a wrong column stays visible.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TypeAlias, TypedDict

JsonValue: TypeAlias = "str | int | float | bool | None | list[JsonValue] | dict[str, JsonValue]"
StoreRow: TypeAlias = dict[str, object]
Event: TypeAlias = Mapping[str, object]

_EMPTY: Mapping[str, object] = {}


def number(value: object) -> float | None:
    """A finite int or float as float (bool and NaN/inf are not numbers here), else None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def integer(value: object) -> int | None:
    """An int (not a bool), or a float with no fractional part, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def text(value: object) -> str | None:
    """A non-empty str, else None."""
    return value if isinstance(value, str) and value else None


def mapping(value: object) -> Mapping[str, object]:
    """A JSON object (a mapping with str keys) as such, anything else as an empty mapping."""
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return value
    return _EMPTY


class TrialRow(TypedDict, total=False):
    """A ``trials`` row as the reports read it (``ReportData.trials``): the point's columns, the
    trial's statistics, ``extra`` decoded and the report's ``label``. Columns are NULL where a
    trial did not record them (older schemas, failed steps)."""

    run_id: str
    device: str
    key: str
    label: str
    model: str
    family: str | None
    compiler: str
    batch: int
    depth: int | None
    width: int | None
    optimisation: str | None
    algorithm: str  # ngb.core.models.algorithms; 'default' for rows stored before the axis
    target: str | None
    input_size: int | None
    status: str | None
    export_s: float | None
    compile_s: float | None
    tune_s: float | None
    first_call_s: float | None
    throughput_mean: float | None
    throughput_std: float | None
    repetitions: int | None
    cpu_percent_mean: float | None
    extra: dict[str, object]
    throughput_ci_half: float | None
    verdict: str | None
    verdict_reason: str | None
    disturbed: bool | None
    precision: str | None
    latency_p99_ms: float | None
    latency_p99_hi_ms: float | None
    latency_calls: int | None
    max_abs_err: float | None
    peak_rss_mb: float | None
    gpu_mem_mb: float | None
    energy_j_per_sample: float | None
    energy_j_per_sample_ci_half: float | None
    energy_above_idle_j_per_sample: float | None
    samples_per_j: float | None
    power_w_mean: float | None
    idle_power_w: float | None
    energy_source: str | None
    energy_note: str | None


def json_value(value: object) -> JsonValue:
    """``value`` checked to be plain JSON all the way down (a tuple becomes a list); a value
    json.dumps could not write raises TypeError, naming its type."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    if isinstance(value, Mapping):
        return json_object(value)
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def json_object(value: Mapping[str, object]) -> dict[str, JsonValue]:
    """A mapping checked to be a plain JSON object (see ``json_value``)."""
    return {str(k): json_value(v) for k, v in value.items()}
