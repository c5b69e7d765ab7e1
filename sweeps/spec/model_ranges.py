"""Say so when ngb guesses an integer input's range, before a measurement uses the guess.

A ``.pt2`` program's inputs are read from the program when the model is built (on the device),
so the guess ``model_inputs.index_range`` makes ("assumed 0..1: the program does not bound it")
was said by ``ngb models --file`` only: ``ngb measure`` and a sweep ran on it silently (issue 31,
item 8). ``guessed_ranges`` reads the program's inputs here, the way the build does, and returns
the same one-line notes; declared inputs (``--input``, a sweep's ``inputs = [...]``) are checked
as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ngb.core.base.errors import NgbError
from ngb.core.models.model_inputs import assumed_ranges
from ngb.core.models.model_sources import ModelSource, locate


def guessed_ranges(source: ModelSource, *, built_here: bool = False) -> list[str]:
    """One line per integer input whose range ngb assumed (empty when none was).

    A program this torch cannot load: with ``built_here`` (``ngb measure``, ``ngb profile``:
    the trial builds it with this same torch) the build's own one line, now rather than from a
    fresh worker seconds later (7 CPU-s for a corrupt file, 2026-11-29); else nothing, as a
    device's torch may read what this one cannot, and its build says why."""
    if source.inputs or source.kind != "pt2":
        return assumed_ranges(source.inputs)
    from ngb.core.models.model_build import (
        _program_inputs,  # the build's own reading of the program
        load_program,
    )

    path = locate(source.artifacts[0], None)
    try:
        program = load_program(path)
    except NgbError:
        if built_here:
            raise
        return []
    return assumed_ranges(_program_inputs(program, Path(path).name))


def sweep_warnings(sources: Mapping[str, Mapping[str, object]]) -> list[str]:
    """``model: note`` lines for a sweep's own models (``Sweep.model_sources``)."""
    lines = []
    for name, raw in sources.items():
        source = ModelSource.from_dict(raw)
        lines += [f"{name}: {line}" for line in guessed_ranges(source)]
    return lines
