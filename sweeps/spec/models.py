"""The ``[[models]]`` tables of a sweep file: a user's models, referenced by name in ``[[matrix]]``.

::

    baseline = "onnxruntime"            # optional: what speed-up/BSR/depth are relative to

    [[models]]
    name = "text-encoder"               # how results, reports and the console show it
                                        #   (default: the file's own name, resmlp.py:build,
                                        #   as ngb measure and ngb.measure name it)
    source = "tiny_nets.text:build"     # timm name | package.module:factory | file.py:factory
                                        #   | model.onnx | program.pt2; default: name (timm)
    kwargs = { vocab = 1000, dim = 32 } # timm.create_model / factory keyword arguments
    code = "src"                        # optional: folder holding the python package/file
    family = "encoders"                 # optional: the family reports group it under
                                        #   (default: the model's whole name)
    inputs = [                          # inferred for timm, ONNX, .pt2; required for python
      { name = "tokens", shape = ["batch", 16], dtype = "int64", range = [0, 1000] },
    ]

Relative paths are taken from the sweep file's folder. What can be known without torch is checked
here (files exist, ONNX graphs parse and match the declared inputs, static-batch files against
``batches``); ``Sweep.check_models`` also imports python factories and checks timm names.
Written back (``to_toml``) with absolute paths, so the copy stored with a run reads back the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from ngb.core.base.errors import ConfigError, NgbError
from ngb.core.models.model_sources import InputSpec, ModelSource, default_name, parse_source
from ngb.core.records.types import BLOCK_MODELS
from ngb.sweeps.rows import JsonValue, json_object

MODEL_KEYS = ("name", "source", "kwargs", "inputs", "code", "family")


def parse_models(
    raw: object, where: str, base_dir: Path | None
) -> tuple[dict[str, dict[str, JsonValue]], tuple[dict[str, JsonValue], ...]]:
    """``[[models]]`` -> (name -> ``ModelSource`` JSON, the tables as written back)."""
    if not isinstance(raw, list):
        raise ConfigError(f"{where} must be one or more [[models]] tables")
    sources: dict[str, dict[str, JsonValue]] = {}
    tables = []
    for i, entry in enumerate(raw):
        here = f"{where}[{i}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{here} must be a table")
        for key in entry:
            if key not in MODEL_KEYS:
                raise ConfigError(f"{here}: unknown key {key!r} (valid: {', '.join(MODEL_KEYS)})")
        name = entry.get("name")
        if name is None and isinstance(entry.get("source"), str):
            # unnamed: the name ngb measure and ngb.measure give the same file (one series)
            source = _parse_entry(entry, str(entry["source"]), here, base_dir)
            name = default_name(source)
        elif not isinstance(name, str) or not name.strip() or "/" in name:
            raise ConfigError(f"{here}: name must be a non-empty string without '/', got {name!r}")
        name = name.strip()
        here = f"{where} {name!r}"
        if name in BLOCK_MODELS:
            raise ConfigError(f"{here}: {name!r} is a built-in block; choose another name")
        if name in sources:
            raise ConfigError(f"{here}: defined twice")
        source = _parse_entry(entry, name, here, base_dir)
        sources[name] = json_object(source.to_dict())
        tables.append(_table(name, source, entry))
    return sources, tuple(tables)


def _parse_entry(
    entry: Mapping[str, object], name: str, here: str, base: Path | None
) -> ModelSource:
    kwargs = entry.get("kwargs", {})
    if not isinstance(kwargs, Mapping):
        raise ConfigError(f"{here}: kwargs must be a table, e.g. kwargs = {{ num_classes = 10 }}")
    raw_inputs = entry.get("inputs", [])
    if not isinstance(raw_inputs, list):
        raise ConfigError(f"{here}: inputs must be a list of tables")
    code = entry.get("code")
    if code is not None and not isinstance(code, str):
        raise ConfigError(f"{here}: code must be a folder path")
    ref = entry.get("source", name)
    if not isinstance(ref, str):  # parse_source's own words, for the same line either way
        raise ConfigError(f"{here}: model source must be a non-empty string, got {ref!r}")
    try:
        inputs = tuple(InputSpec.from_dict(i) for i in raw_inputs)
        source = parse_source(ref, kwargs=kwargs, inputs=inputs, code=code, base_dir=base)
    except NgbError as exc:
        raise ConfigError(f"{here}: {exc}") from None
    if source.kind == "python" and not source.inputs:
        raise ConfigError(f"{here}: python sources need inputs = [{{ name, shape, dtype }}]")
    family = entry.get("family")
    if family is not None:
        if not isinstance(family, str) or not family.strip() or "/" in family:
            raise ConfigError(
                f"{here}: family must be a non-empty string without '/', got {family!r}"
            )
        source = replace(source, family=family.strip())
    return source


def _table(name: str, source: ModelSource, entry: Mapping[str, object]) -> dict[str, JsonValue]:
    """The entry as ``to_toml`` writes it: absolute paths, the inputs in force."""
    table: dict[str, JsonValue] = {"name": name}
    artifact = source.artifacts[0] if source.artifacts else None
    if source.kind in ("onnx", "pt2") and artifact is not None:
        table["source"] = artifact.local
    elif source.kind == "python" and artifact is not None:
        target, _, factory = source.ref.rpartition(":")
        if artifact.role == "folder":
            table["source"] = f"{Path(artifact.local) / target}:{factory}"
            table["code"] = artifact.local
        else:
            table["source"] = source.ref
            table["code"] = str(Path(artifact.local).parent)
    else:
        table["source"] = source.ref
    if source.kwargs:
        table["kwargs"] = dict(source.kwargs)
    if "inputs" in entry or source.kind == "onnx":
        table["inputs"] = [json_object(i.to_dict()) for i in source.inputs]
    if source.family:
        table["family"] = source.family
    return table


def check_matrix_models(
    models: tuple[str, ...],
    sources: Mapping[str, Mapping[str, object]],
    axes: Mapping[str, tuple[object, ...]],
    batches: tuple[int, ...],
    where: str,
) -> None:
    """Axes that do not apply to a user's model, and batches a static-shape file cannot take."""
    for name in models:
        raw = sources.get(name)
        if raw is None:
            continue
        for axis in ("widths", "depths", "input_sizes"):
            if axis in axes and (axis != "depths" or axes[axis] != (1,)):
                hint = " (set img_size in its kwargs)" if axis == "input_sizes" else ""
                raise ConfigError(f"{where}: {axis} do not apply to model {name!r}{hint}")
        source = ModelSource.from_dict(raw)
        for batch in batches:
            try:
                source.check_batch(batch, name)
            except ConfigError as exc:
                raise ConfigError(f"{where}: {exc}") from None


def check_sources(sources: Mapping[str, Mapping[str, object]], where: str) -> None:
    """The slower checks: timm names exist, python factories import (runs the user's imports)."""
    from ngb.core.models.model_build import import_factory
    from ngb.core.models.models import resolve_model

    for name, raw in sources.items():
        source = ModelSource.from_dict(raw)
        try:
            if source.kind == "timm":
                resolve_model(source.ref)
            elif source.kind == "python":
                import_factory(source, None)
        except NgbError as exc:
            raise ConfigError(f"{where}: model {name!r}: {exc}") from None
