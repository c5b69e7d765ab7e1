"""A user's own model on the command line: the options ``ngb measure`` and ``ngb profile`` share.

``-k/--kwarg``, ``-i/--input``, ``--code``, ``--sweep`` say what MODEL is and what it is fed;
``--name`` what it is called in the results. One door, so both commands take the same models the
same way, and a model is stored under one name whatever path reached it: ``--name``, else
``core.model_sources.default_name`` (``tiny_cnn.onnx``, ``resmlp.py:build``; issue 45: the path
typed from another working directory made another series in ``ngb history``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click
from ngb.core.base.errors import ConfigError
from ngb.sweeps.rows import JsonValue, json_object

F = TypeVar("F", bound=Callable[..., object])


def own_model_options(fn: F) -> F:
    """``-k``, ``-i``, ``--code``, ``--sweep`` and ``--name`` (see module)."""
    options = [
        click.option(
            "--kwarg", "-k", "kwargs", multiple=True, metavar="KEY=VALUE",
            help="Model init argument (repeatable) for timm or your factory, e.g. -k "
            "num_classes=10.",
        ),
        click.option(
            "--input", "-i", "inputs", multiple=True, metavar="NAME:SHAPE[:DTYPE[:LOW-HIGH]]",
            help="Model input (repeatable), e.g. -i tokens:batch,16:int64:0-1000 ('batch' marks "
            "the batch dimension). Default: from the timm config, ONNX graph or .pt2 program.",
        ),
        click.option(
            "--code", metavar="FOLDER", help="Folder holding MODEL's python package or file."
        ),
        click.option(
            "--sweep", "sweep_file", help="Take MODEL from this sweep file's [[models]] tables."
        ),
        click.option(
            "--name", "model_name", metavar="NAME",
            help="What the results call your model (default: the file's own name, with the "
            "factory for python, e.g. resmlp.py:build; the same from any folder).",
        ),
    ]  # fmt: skip
    for option in reversed(options):
        fn = option(fn)
    return fn


def model_source(
    model: str,
    kwargs: tuple[str, ...],
    inputs: tuple[str, ...],
    code: str | None,
    sweep_file: str | None,
    warn: Callable[[str], None],
) -> dict[str, JsonValue] | None:
    """``TrialSpec.source`` for MODEL; None keeps a plain timm name or block as it always was.
    ``warn`` gets each guessed input range (a guess is stated, never silent)."""
    from ngb.core.models.model_sources import parse_input, parse_source
    from ngb.core.records.types import BLOCK_MODELS
    from ngb.sweeps.cli.options import parse_option

    if sweep_file is not None:
        from ngb.sweeps.spec.sweep import load_sweep

        if kwargs or inputs or code:
            raise ConfigError(
                "with --sweep, the model's kwargs and inputs come from the sweep file"
            )
        sweep = load_sweep(sweep_file)
        if model not in sweep.model_sources:
            known = ", ".join(sweep.model_sources) or "none"
            raise ConfigError(
                f"{sweep.source} has no [[models]] entry {model!r} (entries: {known})"
            )
        return dict(sweep.model_sources[model])
    is_file = model.lower().endswith((".onnx", ".pt2"))
    if model in BLOCK_MODELS or not (kwargs or inputs or code or is_file or ":" in model):
        return None
    parsed = parse_source(
        model,
        kwargs=dict(parse_option(k) for k in kwargs),
        inputs=tuple(parse_input(i) for i in inputs),
        code=code,
    )
    if parsed.kind == "python" and not parsed.inputs:
        raise ConfigError(f"{model}: python models need --input NAME:SHAPE[:DTYPE[:LOW-HIGH]]")
    from ngb.sweeps.spec.model_ranges import guessed_ranges

    for line in guessed_ranges(parsed, built_here=True):  # measure, profile: built here
        warn(f"warning: {model}: {line}")
    return json_object(parsed.to_dict())


def stored_name(
    model: str, source: dict[str, JsonValue] | None, name: str | None, sweep: bool
) -> str:
    """The name the trial is stored under: ``--name``, else the source's default name
    (``core.model_sources.trial_name``); with ``--sweep``, the ``[[models]]`` entry's own."""
    from ngb.core.models.model_sources import trial_name

    if sweep:
        if name is not None:
            raise ConfigError("with --sweep, the [[models]] entry's name is the model's name")
        return model
    return trial_name(model, source, name, "--name")
