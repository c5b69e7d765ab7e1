"""Sweep files: a TOML description of many trials, validated, expanded deterministically.

A sweep is the cartesian product of a few axes, written as one or more ``[[matrix]]`` tables so a
single file can mix timm models (no width/depth) and synthetic blocks (width and depth required)::

    name = "demo"                      # defaults to the file's stem
    description = "What this sweep is for"
    device = "cpu"                     # target on each testbed device: "cpu" or "cuda"

    [measure]                          # ngb.core.records.types.MeasureSettings fields
    min_duration_s = 0.2
    ci_target = 0.02                   # add worker processes until the 95 % CI is within ±2 % ...
    workers = 4                        # ... with at least 4 processes ...
    max_workers = 10                   # ... and at most 10, of values_per_worker = 3 each
    # `repetitions = 100` is a fixed count, spread over `workers` processes

    [compiler_options.openvino]        # per-compiler options, checked against its Config
    hint = "THROUGHPUT"

    [[matrix]]                         # one cartesian product
    models = ["resnet18", "convnext_tiny"]
    compilers = ["identity", "onnxruntime"]
    batches = [1, 8]

    [[matrix]]
    models = ["conv", "mha"]           # synthetic blocks
    widths = [64]                      # required for blocks, refused for timm models
    depths = [1, 2, 4]                 # default [1]; refused (other than 1) for timm models
    optimisations = ["none"]           # default ["none"]; DLAS: fp16, int8, prune-l1-0.9, ...
    algorithms = ["default", "gemm"]   # default ["default"]; DLAS's convolution primitive
    compilers = ["identity", "openvino"]
    batches = [8]
    input_sizes = [56]                 # optional image side override
    measure = { repetitions = 5 }      # optional: overrides [measure] for this matrix only
    compiler_options.openvino = { hint = "LATENCY" }   # optional per-matrix override

Users' own models are named in ``[[models]]`` tables (``sweeps/spec/models.py``: source, kwargs,
inputs, code) and used by that name in ``models = [...]``; ``baseline = "onnxruntime"`` (top level)
names the compiler that reports measure speed-up, BSR and depth against (default ``identity``).
``[accuracy]`` (``data = "digits"``, an ``.npz`` file or a ``module:loader`` / ``file.py:loader``,
relative to the sweep's folder) runs every trial's compiled model over that labelled set after its
timed loops (``ngb.core.trial.accuracy_pass``); it becomes each trial's ``measure.accuracy``.
``[serve]`` (``scenario = "server"``, ``qps = 50``, ``duration_s = 30``, ``p99_ms``,
``find_peak``, ``probe_s``, ...: ``ngb.core.serving.serve.ServeSettings``) serves every trial under
load instead of timing it (``ngb.core.serving.serve_trial``; stored as ``serving`` rows, issue 43).

Why matrices: the paper's grids are rectangular per family, and one product per table keeps the
file short while still allowing blocks and timm models side by side. Axis values may be written as
a single value (``batches = 8``) or a list.

``algorithms`` (``ngb.core.models.algorithms``: default, direct, gemm, sparse-csr, sparse-bsr-B) is
the convolution primitive each trial runs (issue 48). A compiler that cannot run one
(``Compiler.algorithm_refusals``: TVM takes no sparse weights, ONNX Runtime picks its own kernels,
noop runs no model) is not refused here: its trial fails as ``unsupported`` with that reason,
stored, so ``ngb report algorithms`` shows the empty cell and why.

Expansion order is fixed (matrix order, then model, width, depth, optimisation, algorithm, input
size, compiler, batch) and trials are deduplicated by ``TrialSpec.key``, so the same file always
gives the same list and a re-run or resume never repeats work. Model names are checked against
timm in a separate step (``Sweep.check_models()``) so parsing stays fast and needs no torch.

Presets ship in ``ngb/sweeps/presets/*.toml``; ``load_sweep("demo")`` finds them by name.
"""

from __future__ import annotations

import itertools
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ngb.core.base.errors import ConfigError, NgbError, UnknownNameError
from ngb.core.base.safe_files import check_readable, read_text, shorten
from ngb.core.compilers import DEFAULT_BASELINE
from ngb.core.records.types import BLOCK_MODELS, MeasureSettings, TrialSpec
from ngb.sweeps.rows import JsonValue
from ngb.sweeps.spec.checks import (
    accuracy_table,
    as_values,
    check_accuracy_data,
    check_algorithm,
    check_compiler,
    check_optimisation,
    check_sweep_name,
    check_zoo_only,
    parse_compiler_options,
    parse_device,
    parse_measure_table,
    parse_serve_table,
    unknown_key,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

# the presets stay in sweeps/presets/ (package data of ngb.sweeps), one folder up
PRESETS_DIR = Path(__file__).parents[1] / "presets"

_TOP_KEYS = (
    "name",
    "description",
    "device",
    "baseline",
    "measure",
    "accuracy",
    "serve",
    "compiler_options",
    "models",
    "matrix",
)
# matrix key -> (TrialSpec field, element type); the order here is the expansion order.
_AXES: dict[str, tuple[str, type]] = {
    "models": ("model", str),
    "widths": ("width", int),
    "depths": ("depth", int),
    "optimisations": ("optimisation", str),
    "algorithms": ("algorithm", str),
    "input_sizes": ("input_size", int),
    "compilers": ("compiler", str),
    "batches": ("batch", int),
}
_MATRIX_KEYS = (*_AXES, "measure", "compiler_options", "device")
_REQUIRED_AXES = ("models", "compilers", "batches")


@dataclass(frozen=True)
class Matrix:
    """One cartesian product of axis values (already validated)."""

    models: tuple[str, ...]
    compilers: tuple[str, ...]
    batches: tuple[int, ...]
    widths: tuple[int | None, ...] = (None,)
    depths: tuple[int, ...] = (1,)
    optimisations: tuple[str, ...] = ("none",)
    algorithms: tuple[str, ...] = ("default",)
    input_sizes: tuple[int | None, ...] = (None,)
    measure: Mapping[str, JsonValue] = field(
        default_factory=dict
    )  # overrides of the sweep's [measure]
    compiler_options: Mapping[str, Mapping[str, JsonValue]] = field(default_factory=dict)
    device: str | None = None

    def to_dict(self) -> dict[str, JsonValue]:
        """TOML-ready: defaults left out so a written file looks like a hand-written one."""
        out: dict[str, JsonValue] = {}
        for name in _AXES:
            value = getattr(self, name)
            if value != getattr(Matrix, name, None) and None not in value:
                out[name] = list(value)
        for name in ("measure", "compiler_options"):
            if getattr(self, name):
                out[name] = {
                    k: (dict(v) if isinstance(v, Mapping) else v)
                    for k, v in getattr(self, name).items()
                }
        if self.device:
            out["device"] = self.device
        return out


@dataclass(frozen=True)
class Sweep:
    """A validated sweep. ``trials()`` expands it; ``to_toml()`` writes it back."""

    name: str
    matrices: tuple[Matrix, ...]
    description: str = ""
    device: str = "cpu"
    measure: Mapping[str, JsonValue] = field(default_factory=dict)
    compiler_options: Mapping[str, Mapping[str, JsonValue]] = field(default_factory=dict)
    source: str = "<string>"  # file path or "preset:NAME", for messages
    baseline: str = DEFAULT_BASELINE  # compiler that speed-up, BSR and depth are relative to
    # [[models]]: name -> ModelSource JSON, and the tables as to_toml writes them back
    model_sources: Mapping[str, Mapping[str, JsonValue]] = field(default_factory=dict)
    model_tables: tuple[Mapping[str, JsonValue], ...] = ()
    # [serve]: every trial served under load (ngb.core.serving.serve.ServeSettings), None: timed
    serve: Mapping[str, JsonValue] | None = None

    @property
    def measure_settings(self) -> MeasureSettings:
        return MeasureSettings.from_dict(self.measure)

    def trials(self) -> list[TrialSpec]:
        """Every trial, in a fixed order, each key once (first occurrence wins)."""
        seen: dict[str, TrialSpec] = {}
        serve = None
        if self.serve is not None:
            from ngb.core.serving.serve import ServeSettings

            serve = ServeSettings.of(self.serve)
        for index, matrix in enumerate(self.matrices):
            measure = MeasureSettings.from_dict({**self.measure, **matrix.measure})
            device = matrix.device or self.device
            axes = [getattr(matrix, name) for name in _AXES]
            for values in itertools.product(*axes):
                point = {_AXES[name][0]: v for name, v in zip(_AXES, values, strict=True)}
                compiler = point["compiler"]
                options = {
                    **self.compiler_options.get(compiler, {}),
                    **matrix.compiler_options.get(compiler, {}),
                }
                spec = TrialSpec(
                    **point,
                    device=device,
                    compiler_options=options,
                    measure=measure,
                    source=self.model_sources.get(point["model"]),
                    serve=serve,
                )
                check_zoo_only(spec, f"matrix[{index}]")
                seen.setdefault(spec.key, spec)
        return list(seen.values())

    def models(self) -> list[str]:
        """Distinct timm model names (blocks and [[models]] excluded), in first-seen order."""
        names = (m for matrix in self.matrices for m in matrix.models)
        return list(
            dict.fromkeys(n for n in names if n not in BLOCK_MODELS and n not in self.model_sources)
        )

    def check_models(self) -> None:
        """Check that every timm model name exists and every python factory imports (imports
        timm and the user's code; slower than parsing)."""
        try:
            from ngb.core.base.isolate import call_in_child
            from ngb.core.models.models import resolve_model
            from ngb.sweeps.spec.models import check_sources
        except ImportError as exc:
            raise NgbError(f"{self.source}: cannot check models here: {exc}") from None
        # In a child process: a factory's module that calls os._exit(0) or sys.exit() while
        # being imported must fail this check, not end ngb with status 0.
        call_in_child(
            f"{self.source}: checking models", check_sources, self.model_sources, self.source
        )
        for name in self.models():
            try:
                resolve_model(name)
            except NgbError as exc:
                raise ConfigError(f"{self.source}: models: {exc}") from None
        # the labelled data each accuracy pass reads: a missing file or a failing loader now
        wanted = {t.measure.accuracy.data for t in self.trials() if t.measure.accuracy}
        for data in sorted(wanted):
            check_accuracy_data(data, f"{self.source}: accuracy")

    def to_dict(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = {"name": self.name}
        if self.description:
            out["description"] = self.description
        out["device"] = self.device
        if self.baseline != DEFAULT_BASELINE:
            out["baseline"] = self.baseline
        if self.measure:
            out["measure"] = dict(self.measure)
        if self.serve is not None:
            out["serve"] = dict(self.serve)
        if self.compiler_options:
            out["compiler_options"] = {k: dict(v) for k, v in self.compiler_options.items()}
        if self.model_tables:
            out["models"] = [dict(t) for t in self.model_tables]
        out["matrix"] = [m.to_dict() for m in self.matrices]
        return out

    def to_toml(self) -> str:
        """The sweep as TOML that ``loads_sweep`` reads back to the same trials.

        Written by hand rather than with a generic writer so the result looks like the files
        people write (short arrays on one line, per-matrix overrides as inline tables).
        """
        data = self.to_dict()
        lines = [
            f"{_toml_key(k)} = {_toml_value(v)}"
            for k, v in data.items()
            if not isinstance(v, Mapping | list)
        ]
        for section in ("measure", "serve"):
            if section in data:
                lines += ["", f"[{section}]", *_toml_pairs(data[section])]
        for compiler, options in _toml_items(data.get("compiler_options")):
            lines += ["", f"[compiler_options.{_toml_key(compiler)}]", *_toml_pairs(options)]
        for header, key in (("[[models]]", "models"), ("[[matrix]]", "matrix")):
            tables = data.get(key)
            for table in tables if isinstance(tables, list) else []:
                lines += ["", header, *_toml_pairs(table)]
        return "\n".join(lines) + "\n"


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _toml_items(table: JsonValue) -> list[tuple[str, JsonValue]]:
    """A table's entries (none for anything that is not a table)."""
    return list(table.items()) if isinstance(table, dict) else []


def _toml_pairs(table: JsonValue) -> list[str]:
    """A table's ``key = value`` lines."""
    return [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in _toml_items(table)]


def _toml_value(value: object) -> str:
    """One TOML value; JSON's string escapes and number forms are valid TOML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        items = ", ".join(
            f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items() if v is not None
        )
        return "{ " + items + " }" if items else "{}"
    raise ConfigError(f"cannot write {value!r} to TOML")


# ---------------------------------------------------------------- parsing and validation


def loads_sweep(
    text: str,
    *,
    source: str = "<string>",
    default_name: str = "sweep",
    base_dir: Path | None = None,
) -> Sweep:
    """Parse and validate sweep TOML text; errors name ``source`` and the offending key.
    Relative model paths in ``[[models]]`` are taken from ``base_dir`` (default: the cwd)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses per nesting level
        raise ConfigError(f"{source}: not valid TOML: nested too deeply") from None
    return parse_sweep(data, source=source, default_name=default_name, base_dir=base_dir)


def parse_sweep(
    data: Mapping[str, object],
    *,
    source: str = "<dict>",
    default_name: str = "sweep",
    base_dir: Path | None = None,
) -> Sweep:
    for key in data:
        if key not in _TOP_KEYS:
            raise unknown_key(source, key, _TOP_KEYS)
    name = check_sweep_name(data.get("name", default_name), source, named="name" in data)
    description = data.get("description", "")
    if not isinstance(description, str):
        raise ConfigError(f"{source}: description must be a string")
    device = parse_device(data.get("device", "cpu"), f"{source}: device")
    measure = parse_measure_table(data.get("measure", {}), f"{source}: [measure]")
    # [accuracy] (a table: data = "digits") is every trial's measure.accuracy, files made absolute
    if "accuracy" in data:
        if "accuracy" in measure:
            raise ConfigError(f"{source}: accuracy is given twice, in [measure] and [accuracy]")
        measure["accuracy"] = accuracy_table(data["accuracy"], f"{source}: [accuracy]", base_dir)
    elif "accuracy" in measure:
        measure["accuracy"] = accuracy_table(
            measure["accuracy"], f"{source}: [measure] accuracy", base_dir
        )
    options = parse_compiler_options(
        data.get("compiler_options", {}), f"{source}: [compiler_options]"
    )
    baseline = check_compiler(data.get("baseline", DEFAULT_BASELINE), f"{source}: baseline")
    serve = parse_serve_table(data["serve"], f"{source}: [serve]") if "serve" in data else None
    from ngb.sweeps.spec.models import parse_models

    model_sources, model_tables = parse_models(
        data.get("models", []), f"{source}: models", base_dir
    )
    raw_matrices = data.get("matrix")
    if raw_matrices is None:
        raise ConfigError(f"{source}: no [[matrix]] table; a sweep needs at least one")
    if not isinstance(raw_matrices, list) or not raw_matrices:
        raise ConfigError(f"{source}: matrix must be one or more [[matrix]] tables")
    matrices = tuple(
        _parse_matrix(raw, f"{source}: matrix[{i}]", measure, model_sources, base_dir)
        for i, raw in enumerate(raw_matrices)
    )
    sweep = Sweep(
        name=name,
        matrices=matrices,
        description=description,
        device=device,
        measure=measure,
        compiler_options=options,
        source=source,
        baseline=baseline,
        model_sources=model_sources,
        model_tables=model_tables,
        serve=serve,
    )
    try:
        sweep.trials()  # catches what only a combination can break (e.g. an option type)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return sweep


def _parse_matrix(
    raw: object,
    where: str,
    sweep_measure: Mapping[str, object],
    model_sources: Mapping[str, Mapping[str, object]] | None = None,
    base_dir: Path | None = None,
) -> Matrix:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where} must be a table")
    for key in raw:
        if key not in _MATRIX_KEYS:
            raise unknown_key(where, key, _MATRIX_KEYS)
    for key in _REQUIRED_AXES:
        if key not in raw:
            raise ConfigError(f"{where}: missing {key!r} (required: {', '.join(_REQUIRED_AXES)})")
    texts: dict[str, tuple[str, ...]] = {}
    numbers: dict[str, tuple[int, ...]] = {}
    for name, (_, typ) in _AXES.items():  # in order: the first bad axis is the one reported
        if name in raw:
            if typ is int:
                numbers[name] = as_values(raw[name], int, f"{where}.{name}")
            else:
                texts[name] = as_values(raw[name], str, f"{where}.{name}")
    axes: dict[str, tuple[object, ...]] = {**texts, **numbers}
    for compiler in texts["compilers"]:
        check_compiler(compiler, f"{where}.compilers")
    for name in texts.get("optimisations", ()):
        check_optimisation(name, f"{where}.optimisations")
    if "algorithms" in texts:  # as TrialSpec names them (" gemm" is gemm), each once
        named = (check_algorithm(name, f"{where}.algorithms") for name in texts["algorithms"])
        texts["algorithms"] = tuple(dict.fromkeys(named))
    own = model_sources or {}
    from ngb.sweeps.spec.models import check_matrix_models

    check_matrix_models(texts["models"], own, axes, numbers.get("batches", ()), where)
    blocks = [m for m in texts["models"] if m in BLOCK_MODELS]
    timm_models = [m for m in texts["models"] if m not in BLOCK_MODELS and m not in own]
    if blocks and "widths" not in axes:
        raise ConfigError(f"{where}: block model {blocks[0]!r} needs widths = [...]")
    if timm_models and "widths" in axes:
        raise ConfigError(
            f"{where}: widths apply to blocks only, not to timm model "
            f"{timm_models[0]!r}; put blocks in their own [[matrix]]"
        )
    if timm_models and numbers.get("depths", (1,)) != (1,):
        raise ConfigError(
            f"{where}: depths apply to blocks only, not to timm model "
            f"{timm_models[0]!r}; put blocks in their own [[matrix]]"
        )
    measure = parse_measure_table(raw.get("measure", {}), f"{where}.measure")
    if "accuracy" in measure:
        measure["accuracy"] = accuracy_table(measure["accuracy"], f"{where}.measure", base_dir)
    try:
        MeasureSettings.from_dict({**sweep_measure, **measure})
    except ConfigError as exc:
        raise ConfigError(f"{where}.measure: {exc}") from None
    options = parse_compiler_options(raw.get("compiler_options", {}), f"{where}.compiler_options")
    device = parse_device(raw["device"], f"{where}.device") if "device" in raw else None
    return Matrix(
        models=texts["models"],
        compilers=texts["compilers"],
        batches=numbers["batches"],
        widths=numbers.get("widths", Matrix.widths),
        depths=numbers.get("depths", Matrix.depths),
        optimisations=texts.get("optimisations", Matrix.optimisations),
        algorithms=texts.get("algorithms", Matrix.algorithms),
        input_sizes=numbers.get("input_sizes", Matrix.input_sizes),
        measure=measure,
        compiler_options=options,
        device=device,
    )


# ---------------------------------------------------------------- loading files and presets


def list_presets() -> list[str]:
    """Names of the sweep presets shipped with ngb."""
    return sorted(p.stem for p in PRESETS_DIR.glob("*.toml"))


def preset_path(name: str) -> Path:
    path = PRESETS_DIR / f"{name}.toml"
    if not path.is_file():
        raise UnknownNameError("sweep preset", name, list_presets())
    return path


def load_sweep(path_or_preset: str | Path) -> Sweep:
    """Load a sweep file, or a preset by name (``"demo"``)."""
    path = Path(path_or_preset).expanduser()
    looks_like_file = (
        isinstance(path_or_preset, Path) or path.suffix == ".toml" or (len(path.parts) > 1)
    )
    if path.exists() and not path.is_dir():
        check_readable(path, "sweep file")  # a FIFO or device: refused, never blocks
    if path.is_file():
        source = str(path)
    elif looks_like_file:
        raise NgbError(f"sweep file not found: {path}")
    else:
        path = preset_path(str(path_or_preset))
        source = f"preset {path.stem!r}"
    try:
        text = read_text(path, "sweep file")
    except (OSError, UnicodeDecodeError) as exc:
        raise NgbError(f"cannot read sweep file {shorten(path)}: {exc}") from None
    return loads_sweep(text, source=source, default_name=path.stem, base_dir=path.parent)
