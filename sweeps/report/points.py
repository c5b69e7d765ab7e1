"""Which results of different runs are the same point, and what differs between two of them.

A *point* is what a sweep varies on purpose: the device, the model (depth, width, input size),
the compiler, the precision asked for, the batch, the optimisation, the algorithm (``default``
for rows stored before the axis, issue 48) and the target -- plus any
compiler option or measure setting that a run sweeps, i.e. that takes several values among one
run's trials of the same point (``intra_op_threads = [1, 2]`` in a ``[[matrix]]``). A setting
that is the same throughout each run but differs between runs (``intra_op_threads = 1`` in
run A, ``2`` in run B) is not part of the point: it is a *change*, and ``differences`` names it
beside the versions, the device state and the provenance (packages, kernel, container, model
code). So ``ngb compare`` and ``ngb history`` line up the same points whatever was upgraded or
re-configured between runs, and say what it was.

Rows are store rows (``Store.trials``: JSON columns decoded).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ngb.core.records.trial_extra import from_json
from ngb.sweeps.rows import StoreRow, mapping

# the columns that make a point (see module), in the order a label names them
AXES = (
    "device",
    "model",
    "depth",
    "width",
    "input_size",
    "compiler",
    "precision_asked",
    "batch",
    "optimisation",
    "algorithm",
    "target",
)
# columns that record what the trial ran under (not chosen by the sweep)
CONTEXT_COLUMNS = (
    "host",
    "precision",
    "env_hash",
    "kernel",
    "container_image",
    "model_git_commit",
    "model_git_dirty",
)
# settings that cannot move a timed number, so they are never offered as a cause: how long or
# how sure to measure (a change moves the interval, not the value), the profile pass (one more
# process *after* the timed workers: core/trial/profile_pass.py), the scheduler's re-runs of a
# killed trial (read by the workstation only), and where files are written (below)
_NOT_CAUSES = frozenset(
    {"measure.timeout_s", "measure.keep_samples", "measure.profile", "measure.retry_killed"}
)
# a setting named like an output location (``save_path``, ``dump_dir``, ``output``): where a
# file goes, not how the model runs
_OUTPUT_SUFFIXES = ("_path", "_dir", "_file", "_filepath", "output", "_prefix")


def not_a_cause(name: str) -> bool:
    """Whether a differing setting cannot explain a change in a timed number (see above)."""
    if name in _NOT_CAUSES:
        return True
    chosen = name.startswith(("compiler_options.", "measure."))
    return chosen and name.split(".")[-1].lower().endswith(_OUTPUT_SUFFIXES)


Point = tuple[tuple[str, object], ...]


@dataclass(frozen=True)
class Change:
    """One field with different values in two results (``None``: absent in one)."""

    field: str
    old: object
    new: object

    def text(self) -> str:
        return f"{self.field}: {_shown(self.old)} -> {_shown(self.new)}"


def _shown(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def _flatten(prefix: str, value: object, out: dict[str, object]) -> None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}", item, out)
    elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
        for i, item in enumerate(value):  # one entry per GPU
            _flatten(f"{prefix}.{i}", item, out)
    else:
        out[prefix] = value


def settings_of(row: Mapping[str, object]) -> dict[str, object]:
    """The trial's chosen settings, flattened: ``compiler_options.x``, ``measure.y``, and the
    sha256 of a user's model files (``model_files.NAME``)."""
    out: dict[str, object] = {}
    _flatten("compiler_options", mapping(row.get("compiler_options")), out)
    _flatten("measure", mapping(row.get("measure")), out)
    source = mapping(mapping(row.get("spec")).get("source"))
    artifacts = source.get("artifacts")
    for artifact in artifacts if isinstance(artifacts, list) else ():
        if isinstance(artifact, Mapping):
            out[f"model_files.{artifact.get('name')}"] = artifact.get("sha256")
    return out


def context_of(row: Mapping[str, object]) -> dict[str, object]:
    """What the trial ran under, flattened: ``versions.*``, ``device_state.*``, ``threads.*``,
    ``container`` and the provenance columns."""
    out: dict[str, object] = {name: row.get(name) for name in CONTEXT_COLUMNS}
    _flatten("versions", mapping(row.get("versions")), out)
    _flatten("threads", mapping(row.get("threads")), out)
    _flatten("device_state", mapping(from_json(row.get("extra")).get("device_state")), out)
    return out


def _axes(row: Mapping[str, object]) -> tuple[object, ...]:
    return tuple(axis_value(row, name) for name in AXES)


def swept_settings(rows: Iterable[Mapping[str, object]]) -> frozenset[str]:
    """Settings that take several values among one run's trials of the same axes (see module)."""
    seen: dict[tuple[object, ...], dict[str, set[str]]] = {}
    for row in rows:
        group = seen.setdefault((row.get("run_id"), *_axes(row)), {})
        for name, value in settings_of(row).items():
            group.setdefault(name, set()).add(_shown(value))
    return frozenset(
        name for group in seen.values() for name, values in group.items() if len(values) > 1
    )


def axis_value(row: Mapping[str, object], name: str) -> object:
    """A row's value of one axis; the algorithm of a row stored before it was is ``default``
    (the compiler's own convolution: what every trial before the axis ran)."""
    value = row.get(name)
    return (value or "default") if name == "algorithm" else value


def point_of(row: Mapping[str, object], swept: frozenset[str]) -> Point:
    """The point a result belongs to: its axes and its swept settings."""
    settings = settings_of(row)
    axes = [(name, axis_value(row, name)) for name in AXES]
    return tuple(axes + [(name, _shown(settings.get(name))) for name in sorted(swept)])


def label(point: Point) -> str:
    """``device model/compiler/b8 [precision] k=v``: short, the blocks' width and depth kept."""
    values = dict(point)
    model = str(values.get("model") or "?")
    if values.get("width") is not None and model in ("conv", "mha"):
        model += f"{values['width']}x{values.get('depth') or 1}"
    algorithm = values.get("algorithm")
    shown = "" if algorithm in (None, "default") else f"+{algorithm}"
    parts = [f"{values.get('device')} {model}/{values.get('compiler')}{shown}"]
    if values.get("optimisation") not in (None, "none"):
        parts.append(str(values["optimisation"]))
    parts.append(f"b{values.get('batch')}")
    text = "/".join(parts)
    if values.get("precision_asked") not in (None, "default"):
        text += f" {values['precision_asked']}"
    if values.get("target") not in (None, "cpu"):
        text += f" {values['target']}"
    for name, value in point[len(AXES) :]:
        text += f" {name.split('.')[-1]}={value}"
    return text


def differences(
    a: Mapping[str, object], b: Mapping[str, object], swept: frozenset[str] = frozenset()
) -> list[Change]:
    """Settings (not swept) and context fields whose values differ from ``a`` to ``b``."""
    out = []
    for getter in (settings_of, context_of):
        old, new = getter(a), getter(b)
        for name in sorted(set(old) | set(new)):
            if name in swept or not_a_cause(name):
                continue
            if _shown(old.get(name)) != _shown(new.get(name)):
                out.append(Change(name, old.get(name), new.get(name)))
    return out


def common_changes(per_point: Sequence[Sequence[Change]]) -> list[Change]:
    """The changes every point shares (said once for a run instead of once per point)."""
    if not per_point:
        return []
    first = {c.text(): c for c in per_point[0]}
    shared = set(first)
    for changes in per_point[1:]:
        shared &= {c.text() for c in changes}
    return [first[t] for t in first if t in shared]


def index_by_point(rows: Iterable[StoreRow], swept: frozenset[str]) -> dict[Point, StoreRow]:
    """One row per point (the last finished where a run holds a point twice)."""
    out: dict[Point, StoreRow] = {}
    for row in sorted(rows, key=lambda r: str(r.get("finished_at") or "")):
        out[point_of(row, swept)] = row
    return out
