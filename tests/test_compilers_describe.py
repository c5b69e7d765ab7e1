"""Every compiler describes itself, in its own module (issue 47).

What the console, the profiler, the paper's software table and the ETA need to know of a compiler
is declared on its class (``ngb.core.compilers.base.Compiler``): its chart ``style`` (colour,
marker and the marker's hollow form), its ``short_name`` for a narrow table, its ``profiler``,
its ``version_libraries`` and its ``tuning_budget_option``. No other module keeps a table of
compiler names; they read these through the registry. A compiler registered without one of them,
or two sharing a style or a short name, fails here, the internal ``noop`` included.
"""

from __future__ import annotations

import sys
from dataclasses import MISSING, fields
from typing import get_args

import pytest
from ngb.core.compilers import compiler_class, compiler_classes, list_compilers
from ngb.core.compilers.base import (
    CompileContext,
    Compiled,
    Compiler,
    CompilerConfig,
    Profiler,
    Style,
)

ALL = list_compilers(include_internal=True)
#: declared by every compiler, with no default on the base class
REQUIRED = ("name", "description", "style", "short_name", "profiler", "version_libraries")
#: the narrow Results table's compiler column holds this many characters at most
SHORT_MAX = 6


def problems(classes: dict[str, type[Compiler[CompilerConfig]]]) -> list[str]:
    """What is missing or shared among these compilers' descriptions, one line each."""
    found: list[str] = []
    for name, cls in classes.items():
        missing = [f for f in REQUIRED if not hasattr(cls, f)]
        if missing:
            found.append(f"{name}: no {', '.join(missing)} declared")
    described = {n: c for n, c in classes.items() if all(hasattr(c, f) for f in REQUIRED)}
    for what, value in (
        ("colour", lambda c: c.style.colour),
        ("marker", lambda c: c.style.marker),
        ("short name", lambda c: c.short_name),
    ):
        seen: dict[object, str] = {}
        for name, cls in described.items():
            if value(cls) in seen:
                found.append(f"{name} shares its {what} {value(cls)!r} with {seen[value(cls)]}")
            seen.setdefault(value(cls), name)
    markers = [m for c in described.values() for m in (c.style.marker, c.style.hollow)]
    if len(set(markers)) != len(markers):
        found.append(f"a marker or hollow marker is used twice: {markers}")
    return found


def test_every_registered_compiler_describes_itself_and_none_share_a_style_or_short_name() -> None:
    assert "noop" in ALL and "tvm-ms" in ALL
    classes = {name: compiler_class(name) for name in ALL}  # every module imports here
    assert problems(classes) == []


def test_a_compiler_without_a_description_or_with_a_shared_style_is_caught() -> None:
    """The check above fails where it should: a compiler that declares nothing, and one that
    takes another's style and short name."""

    class Bare(Compiler[CompilerConfig]):
        name = "bare"
        description = "declares nothing else"

        def compile(self, model: object, example: object, ctx: CompileContext) -> Compiled:
            raise NotImplementedError

    ident = compiler_class("identity")

    class Copycat(Bare):
        name = "copycat"
        style = ident.style
        short_name = ident.short_name
        profiler = None
        version_libraries = ()

    found = problems({"identity": ident, "bare": Bare, "copycat": Copycat})
    assert found[0] == "bare: no style, short_name, profiler, version_libraries declared"
    assert any(f.startswith("copycat shares its colour") for f in found), found
    assert any(f.startswith("copycat shares its short name 'eager'") for f in found), found


@pytest.mark.parametrize("name", ALL)
def test_description_values_are_well_formed(name: str) -> None:
    cls = compiler_class(name)
    assert cls.name == name and cls.description
    style = cls.style
    assert isinstance(style, Style)
    assert len(style.colour) == 3
    assert all(isinstance(v, int) and 0 <= v <= 255 for v in style.colour), style.colour
    assert len(style.marker) == 1 and len(style.hollow) == 1 and style.marker != style.hollow
    assert cls.short_name and len(cls.short_name) <= max(SHORT_MAX, len(name))
    assert cls.short_name == name or len(cls.short_name) < len(name)
    # another compiler's name as a short name would read as that compiler
    assert cls.short_name == name or cls.short_name not in ALL
    assert cls.profiler is None or cls.profiler in get_args(Profiler)
    assert set(cls.version_libraries) <= set(cls.version_packages), cls.version_libraries


@pytest.mark.parametrize("name", ALL)
def test_the_declared_profiler_is_there(name: str) -> None:
    """``torch``: the model runs torch operators; ``hook`` / ``rebuild``: its module has a
    ``Compiled`` that reads the runtime's own profiler (``profile_records``)."""
    cls = compiler_class(name)
    if cls.profiler == "torch":
        assert "torch" in cls.requires
    elif cls.profiler in ("hook", "rebuild"):
        module = vars(sys.modules[cls.__module__]).values()
        compiled = [c for c in module if isinstance(c, type) and issubclass(c, Compiled)]
        assert any(callable(getattr(c, "profile_records", None)) for c in compiled), compiled


@pytest.mark.parametrize("name", ALL)
def test_the_tuning_budget_is_an_option_with_a_default(name: str) -> None:
    cls = compiler_class(name)
    option = cls.tuning_budget_option
    if option is None:
        assert cls.tuning_budget({"max_trials_global": 64}) == 0  # it does not search
        return
    (field,) = [f for f in fields(cls.Config) if f.name == option]
    assert field.default is not MISSING and isinstance(field.default, int) and field.default > 0
    assert cls.tuning_budget({}) == field.default
    assert cls.tuning_budget({option: 64}) == 64
    assert cls.tuning_budget({option: True}) == 0  # not a number of trials


def test_the_former_tables_are_read_from_the_compilers() -> None:
    """The console's styles and short names, the profiler, the paper's Table II columns and the
    ETA's budget come from the declarations, for every registered compiler."""
    from ngb.core.compilers.tvm_ms import TvmMetaScheduleConfig
    from ngb.core.trial.live_state import tuning_budget
    from ngb.core.trial.profile_pass import profiler_of
    from ngb.sweeps.report.paper import version_libraries
    from ngb.tui.narrow_table import SHORT_NAMES
    from ngb.tui.widgets.result_chart import STYLES, style_of

    classes = compiler_classes(include_internal=True)
    assert list(classes) == ALL
    assert {n: c.style for n, c in classes.items()} == STYLES
    assert {n: c.short_name for n, c in classes.items()} == SHORT_NAMES
    for name, cls in classes.items():
        assert style_of(name) == (cls.style.colour, cls.style.marker)
        assert style_of(f"{name} bf16") == (cls.style.colour, cls.style.hollow)
        assert profiler_of(name) == cls.profiler
        assert set(cls.version_libraries) <= set(version_libraries())
    assert profiler_of("no-such-compiler") is None
    assert version_libraries() == (
        "torch", "timm", "onnxruntime", "openvino", "tvm", "tensorrt", "cuda",
    )  # fmt: skip
    assert tuning_budget("tvm-ms", {}) == TvmMetaScheduleConfig().max_trials_global == 1500
    assert tuning_budget("tvm-ms", {"max_trials_global": 64}) == 64
    assert tuning_budget("tvm", {}) == tuning_budget("no-such-compiler", {}) == 0
