"""Value checks of the sweep format: names, settings, compilers, options and axis values.

``spec`` parses the sweep's structure (tables, matrices, presets); every rule about one value lives
here, so ``ngb sweeps check``, ``ngb run`` and ``ngb measure`` refuse the same things with the same
one-line messages.
"""

from __future__ import annotations

import difflib
import math
import re
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import TypeVar

from ngb.core.base.errors import ConfigError
from ngb.core.records.types import BLOCK_MODELS, MeasureSettings, TrialSpec
from ngb.sweeps.rows import JsonValue

TARGETS = ("cpu", "cuda")
# Sizes travel as int32 on devices and in the results store (Arrow, DuckDB INTEGER columns): a
# bigger one would pass here and then fail on every device, or never be stored.
INT_MAX = 2**31 - 1
# The run id (a folder name on every device) is made from the sweep name, so the name follows the
# run id's alphabet: checking it here means `sweeps check` and `run` accept the same names.
NAME_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")  # \Z: "$" lets a final "\n" by


def unknown_key(where: str, key: str, valid: Iterable[str]) -> ConfigError:
    close = difflib.get_close_matches(key, list(valid), n=3, cutoff=0.5)
    hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
    return ConfigError(f"{where}: unknown key {key!r}{hint} (valid: {', '.join(valid)})")


def timm_listing_name() -> str:
    """The cache file that holds timm's names for the installed timm (``check_timm_names``);
    ``PackageNotFoundError`` without timm."""
    from importlib.metadata import version

    return f"timm-models-{version('timm')}.txt"


def check_timm_names(names: Iterable[str]) -> None:
    """Refuse unknown timm names, cheaply: against a cached list of timm's names.

    Importing timm (and torch with it) takes seconds, which ``ngb run`` should not spend before
    every start. The list is kept per timm version in the cache dir; only a name missing from it
    is looked up in timm itself (which also gives close matches for the message).
    """
    from importlib.metadata import PackageNotFoundError

    from ngb.core.models.models import resolve_model
    from ngb.devices.paths import get_paths

    # block kinds are ngb's own, not timm's: never a reason to import timm on a cold cache
    names = [n for n in names if n not in BLOCK_MODELS]
    listing: Path | None = None
    known: set[str] = set()
    try:
        listing = get_paths().cache / timm_listing_name()
        known = set(listing.read_text(encoding="utf-8").split())
    except (PackageNotFoundError, OSError):
        pass  # no timm here (resolve_model says so) or no list yet
    if not known and names:
        import timm

        known = set(timm.list_models())
        if listing is not None:
            try:
                from ngb.devices.inventory import atomic_write_text

                atomic_write_text(listing, "\n".join(sorted(known)) + "\n")
            except OSError:
                pass  # a read-only cache only costs the next run the same import
    for name in names:
        if name not in known:
            resolve_model(name)  # e.g. a pretrained tag; unknown names raise with close matches


V = TypeVar("V", int, str)  # the TOML value types a matrix axis takes


def check_sweep_name(name: object, source: str, *, named: bool = True) -> str:
    """The sweep's name, if it can name a run: ASCII letters, digits, '.', '_', '-' (64 at most),
    starting with a letter or digit."""
    if isinstance(name, str) and NAME_RE.match(name):
        return name
    origin = "name" if named else 'name (from the file name; set name = "..." in the file)'
    raise ConfigError(
        f"{source}: bad sweep {origin} {name!r}: use ASCII letters, digits, '.', '_' and '-', "
        "starting with a letter or digit (64 characters at most)"
    )


def check_trial(spec: TrialSpec, where: str = "trial") -> TrialSpec:
    """The sweep file's rules for one trial built elsewhere (``ngb measure``'s arguments)."""
    for name in ("batch", "width", "depth", "input_size"):
        value = getattr(spec, name)
        if value is not None and value > INT_MAX:
            raise ConfigError(f"{where}: {name} must be at most {INT_MAX}, got {value}")
    if not spec.is_block and spec.source is None and (spec.width is not None or spec.depth != 1):
        given = " and ".join(
            n for n, v in (("width", spec.width), ("depth", spec.depth != 1)) if v not in (None, 0)
        )
        raise ConfigError(
            f"{where}: {given} apply to blocks only ({', '.join(BLOCK_MODELS)}), "
            f"not to timm model {spec.model!r}"
        )
    parse_device(spec.device, f"{where}: device")
    check_optimisation(spec.optimisation, f"{where}: optimisation")
    check_zoo_only(spec, where)
    _check_options(spec.compiler, spec.compiler_options, f"{where}: {spec.compiler} options")
    return spec


def parse_device(value: object, where: str) -> str:
    if not isinstance(value, str) or value not in TARGETS:
        raise ConfigError(f"{where} must be one of {', '.join(TARGETS)}; got {value!r}")
    return value


def _check_settings(value: Mapping[str, object], settings: type, where: str) -> None:
    """Every key of a settings table is a field of ``settings``, of that field's type."""
    valid = [f.name for f in fields(settings)]
    types_ = typing.get_type_hints(settings)
    for key in value:
        if key not in valid:
            raise unknown_key(where, key, valid)
        _check_setting_type(key, value[key], types_[key], where)


def parse_measure_table(value: object, where: str) -> dict[str, JsonValue]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where} must be a table")
    _check_settings(value, MeasureSettings, where)
    try:
        MeasureSettings.from_dict(value)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return dict(value)


def accuracy_table(value: object, where: str, base: Path | None = None) -> dict[str, JsonValue]:
    """An ``[accuracy]`` table (or a bare data reference) as the trial's ``measure.accuracy``:
    its file made absolute from ``base`` (the sweep's folder, the cwd), which must exist, and
    hashed now as the artifact that carries it to a device (an ``.npz``, a ``file.py:loader``'s
    folder: ``ngb.core.models.labelled_files``; a sweep read again hashes it again, as its models).
    The data themselves are read by ``check_accuracy_data`` (a loader is the user's code)."""
    from ngb.core.models.labelled_data import resolve
    from ngb.core.models.labelled_files import artifact_for
    from ngb.core.records.types import AccuracySettings

    try:
        settings = AccuracySettings.of(value)
        data = resolve(settings.data, base)
        artifact = artifact_for(data)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if artifact is None:
        return {"data": data}
    shipped: dict[str, JsonValue] = {k: str(v) for k, v in artifact.to_dict().items()}
    return {"data": data, "artifact": shipped}


def check_accuracy_data(data: str, where: str) -> str:
    """Read the labelled set once, in a child process (a loader is the user's code, and may
    import torch: ngb's own process forks workers later), and say what it holds."""
    from ngb.core.base.isolate import call_in_child
    from ngb.core.models.labelled_data import describe

    try:
        return call_in_child(f"{where}: reading labelled data {data}", describe, data)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def parse_measure(value: Mapping[str, object], where: str) -> MeasureSettings:
    """Measure settings from a table (a sweep's or the command line's), strictly typed."""
    return MeasureSettings.from_dict(parse_measure_table(value, where))


def parse_serve_table(value: object, where: str) -> dict[str, JsonValue]:
    """A sweep's ``[serve]`` table: every trial served under load instead of timed (issue 43).
    Keys and kinds as ``ngb.core.serving.serve.ServeSettings`` has them (NaN, infinity, a string
    where a number belongs: refused here), then its own checks (scenario, positive rates, ...)."""
    from ngb.core.serving.serve import ServeSettings

    if not isinstance(value, Mapping):
        raise ConfigError(f'{where} must be a table, e.g. [serve] with scenario = "server"')
    _check_settings(value, ServeSettings, where)
    types_ = typing.get_type_hints(ServeSettings)
    # qps = 50 and qps = 50.0 are one setting, and one trial key
    table: dict[str, JsonValue] = {
        k: float(v) if _takes_float(types_[k]) and type(v) is int else v for k, v in value.items()
    }
    try:
        ServeSettings.of(table)
    except ConfigError as exc:  # said as ``ngb serve``'s options: named as the table's keys
        said = str(exc)
        for flag, key in _SERVE_FLAGS:
            said = said.replace(flag, key)
        raise ConfigError(f"{where}: {said}") from None
    return table


_SERVE_FLAGS = (
    ("--find-peak --p99-ms X", "find_peak = true and p99_ms = X"),
    ("--find-peak", "find_peak = true"),
    ("--p99-ms X", "p99_ms = X"),
    ("--qps", "qps = X"),
)


def _takes_float(annotation: object) -> bool:
    allowed = set(typing.get_args(annotation)) if _is_union(annotation) else {annotation}
    return float in allowed


def _check_setting_type(key: str, value: object, annotation: object, where: str) -> None:
    """Refuse a value of the wrong type rather than let Python coerce it later.

    ``verify = "no"`` is a true string, ``repetitions = 2.5`` a float that a loop count cannot
    use, ``timeout_s = nan`` compares false with every bound: all are typos to report, not values
    to run with. Types the check does not know (e.g. a Literal) are left to MeasureSettings.
    """
    allowed = set(typing.get_args(annotation)) if _is_union(annotation) else {annotation}
    if value is None and type(None) in allowed:
        return
    if bool in allowed:
        ok, kind = isinstance(value, bool), "true or false"
    elif int in allowed:
        whole = isinstance(value, int) and not isinstance(value, bool) and abs(value) <= INT_MAX
        ok, kind = whole, "a whole number"
    elif float in allowed:
        real = isinstance(value, int | float) and not isinstance(value, bool)
        ok, kind = (
            real and isinstance(value, int | float) and math.isfinite(value),
            "a finite number",
        )
    elif str in allowed:
        ok, kind = isinstance(value, str), "a string"
    else:
        return
    if not ok:
        raise ConfigError(f"{where}: {key} must be {kind}, got {value!r}")


def _is_union(annotation: object) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)


def _known_compilers() -> list[str]:
    from ngb.core.compilers import list_compilers

    return list_compilers(include_internal=True)


def check_compiler(name: object, where: str) -> str:
    known = _known_compilers()
    if not isinstance(name, str) or name not in known:
        close = difflib.get_close_matches(str(name), known, n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise ConfigError(f"{where}: unknown compiler {name!r}{hint} (known: {', '.join(known)})")
    return name


def check_optimisation(name: str, where: str) -> None:
    """Optimisation names are checked here (``ngb.core.trial.optimise.parse``), not on the
    device."""
    from ngb.core.trial.optimise import parse

    try:
        parse(name)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def check_algorithm(name: str, where: str) -> str:
    """An algorithm name (``ngb.core.records.algorithm_names.parse``) as a trial records it. Whether
    a compiler runs it is not asked here: a pair it refuses is a failed ``unsupported`` trial with
    the compiler's reason (``Compiler.algorithm_refusals``), the empty cell DLAS's tables
    explain."""
    from ngb.core.records.algorithm_names import parse

    try:
        return parse(name).name
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def check_zoo_only(spec: TrialSpec, where: str) -> None:
    """``int8-cal`` and ``elbow-*`` need a model that carries its training data (the DLAS zoo,
    ``ngb.core.models.dlas_zoo``): a timm model, a block or a model file never does, so say it here
    rather than after a device has built the model. A python factory may return a zoo model, so
    it is left to the trial."""
    from ngb.core.trial.optimise import ZOO_ONLY, parse

    kind = parse(spec.optimisation).kind
    source = spec.source or {}
    if kind in ZOO_ONLY and source.get("kind") != "python":
        raise ConfigError(
            f"{where}: optimisation {spec.optimisation!r} needs a DLAS zoo model (source = "
            f'"ngb.core.models.dlas_zoo:digits_net"); {spec.model!r} carries no training data'
        )


def parse_compiler_options(value: object, where: str) -> dict[str, dict[str, JsonValue]]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where} must be a table of tables, e.g. [compiler_options.openvino]")
    out: dict[str, dict[str, JsonValue]] = {}
    for compiler, options in value.items():
        check_compiler(compiler, where)
        if not isinstance(options, Mapping):
            raise ConfigError(f"{where}.{compiler} must be a table of options")
        _check_options(compiler, options, f"{where}.{compiler}")
        out[compiler] = dict(options)
    return out


def _check_options(compiler: str, options: Mapping[str, object], where: str) -> None:
    """Validate options against the compiler's Config when its module can be imported.

    Compiler modules import their heavy library lazily, so this stays cheap; a module that cannot
    be imported here (e.g. not installed on the workstation) is left to the device to judge.
    """
    from ngb.core.compilers import compiler_class

    try:
        cls = compiler_class(compiler)
    except (ImportError, AttributeError):
        return
    try:
        cls.Config.from_options(options)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def as_values(value: object, typ: type[V], where: str) -> tuple[V, ...]:
    """One TOML value or a list of them, each of type ``typ`` (positive, non-empty)."""
    values = value if isinstance(value, list) else [value]
    if not values:
        raise ConfigError(f"{where} is empty; give at least one value")
    checked: list[V] = []
    for v in values:
        # bool is an int in Python; `batches = [true]` is a mistake, not a batch of 1.
        if not isinstance(v, typ) or isinstance(v, bool):
            raise ConfigError(f"{where}: expected {typ.__name__} values, got {v!r}")
        if isinstance(v, int) and v <= 0:
            raise ConfigError(f"{where}: values must be positive, got {v}")
        if isinstance(v, int) and v > INT_MAX:
            raise ConfigError(f"{where}: values must be at most {INT_MAX}, got {v}")
        if isinstance(v, str) and not v.strip():
            raise ConfigError(f"{where}: values must be non-empty strings")
        checked.append(v)
    return tuple(dict.fromkeys(checked))  # drop repeats, keep order
