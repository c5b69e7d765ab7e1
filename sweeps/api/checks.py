"""The Python API's argument checks: every value is checked before anything is measured.

A notebook passes Python values, not command-line text, so types are checked here one by one:
``batch='1'``, ``batch=1.5`` or ``batch=True``, ``options=[1, 2]``, ``kwargs='x'`` are each one
``NgbError`` line naming the argument, never a ``TypeError`` from deep inside, nor a trial
labelled ``b1.5``. The model itself is read as ``ngb measure`` reads it: a timm name, a block, a
``package.module:factory`` or ``path/to/file.py:factory`` with ``kwargs`` and ``inputs``, or an
``.onnx``/``.pt2`` file (``ngb.core.models.model_sources.parse_source``).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from ngb.core.base.errors import ConfigError
from ngb.core.models.model_inputs import InputSpec, parse_input
from ngb.sweeps.rows import JsonValue, json_object

#: what an ``inputs=`` entry may be
InputLike = str | Mapping[str, object] | InputSpec


def whole(name: str, value: object, minimum: int = 1) -> int:
    """An int (not a bool, not a float) of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be a whole number, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {value}")
    return value


def text(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{name} must be a non-empty string, got {value!r}")
    return value.strip()


def optional_text(name: str, value: object) -> str | None:
    return None if value is None else text(name, value)


def table(name: str, value: object) -> dict[str, object]:
    """A mapping with string keys (``options=``, ``kwargs=``); None is empty."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{name} must be a dict of name -> value, got {value!r}")
    for key in value:
        if not isinstance(key, str) or not key:
            raise ConfigError(f"{name}: keys must be non-empty strings, got {key!r}")
    return dict(value)


def path_text(name: str, value: object) -> str | None:
    """A path given as text or a ``Path`` (None stays None)."""
    if value is None:
        return None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{name} must be a path (str or pathlib.Path), got {value!r}")
    if "\0" in value:
        raise ConfigError(f"{name} must not contain a NUL character")
    return value


def input_specs(value: object) -> tuple[InputSpec, ...]:
    """``inputs=``: a list of ``"NAME:SHAPE[:DTYPE[:LOW-HIGH]]"`` strings (``ngb measure -i``),
    ``{name, shape, dtype, range}`` dicts (a sweep's ``inputs``) or ``InputSpec``s."""
    if value is None:
        return ()
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        raise ConfigError(
            f"inputs must be a list, e.g. ['tokens:batch,16:int64:0-1000'], got {value!r}"
        )
    specs = []
    for item in value:
        if isinstance(item, InputSpec):
            specs.append(item)
        elif isinstance(item, str):
            specs.append(parse_input(item))
        elif isinstance(item, Mapping):
            specs.append(InputSpec.from_dict(item))
        else:
            raise ConfigError(
                f"an input is 'NAME:SHAPE[:DTYPE[:LOW-HIGH]]' or a dict, got {item!r}"
            )
    return tuple(specs)


def model_source(
    model: str,
    kwargs: Mapping[str, object],
    inputs: tuple[InputSpec, ...],
    code: str | None,
    family: str | None,
) -> dict[str, JsonValue] | None:
    """``TrialSpec.source`` for the API's model; None keeps a timm name or block as it was."""
    from ngb.core.models.model_sources import parse_source
    from ngb.core.records.types import BLOCK_MODELS

    if family is not None and ("/" in family or not family.strip()):
        raise ConfigError(f"family must be a non-empty string without '/', got {family!r}")
    is_file = model.lower().endswith((".onnx", ".pt2"))
    own = kwargs or inputs or code or is_file or ":" in model
    if model in BLOCK_MODELS:
        if own or family:
            raise ConfigError(
                f"{model!r} is a built-in block: kwargs, inputs and family do not apply"
            )
        return None
    if not own and family is None:
        return None
    parsed = parse_source(model, kwargs=kwargs, inputs=inputs, code=code)
    if parsed.kind == "python" and not parsed.inputs:
        raise ConfigError(
            f"{model}: python models need inputs=, e.g. inputs=['x:batch,3,32,32'] "
            "('batch' marks the batch dimension)"
        )
    if family is not None:
        parsed = replace(parsed, family=family.strip())
    from ngb.core.models.model_inputs import assumed_ranges

    for line in assumed_ranges(parsed.inputs):  # a guess is stated, never silent
        warnings.warn(f"{model}: {line}", UserWarning, stacklevel=3)
    return json_object(parsed.to_dict())


def model_text(value: object) -> str:
    """``model``: a name or a path (``pathlib.Path`` to an .onnx/.pt2 file taken too)."""
    if isinstance(value, Path):
        return str(value)
    return text("model", value)
