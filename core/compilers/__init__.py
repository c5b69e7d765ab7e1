"""The compilers registry, with timm-style verbs: ``list_compilers(pattern)``, ``get_compiler``.

Backends are registered by module path and imported on first use, so listing compilers imports no
compiler library (compiler modules import their libraries inside methods). Adding a compiler = one
module + one line here; the contract test in ``tests/test_compilers_contract.py`` then covers it
automatically. The harness asks the classes themselves what they support (``Compiler``'s class
attributes); ``unsupported_error_names`` and ``version_packages`` gather those facts across the
registry for the error classifier and the version record. A compiler also says how it is shown and
handled elsewhere (``Compiler.style``, ``short_name``, ``profiler``, ``version_libraries``,
``tuning_budget_option``): the console's charts and narrow table, the profiler, the paper's
software table and the ETA read those through ``compiler_classes``, so no other module keeps a
table of compiler names.
"""

from __future__ import annotations

import fnmatch
import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ngb.core.base.errors import UnknownNameError, UnsupportedTrial
from ngb.core.compilers.base import (
    CompileContext,
    Compiled,
    Compiler,
    CompilerConfig,
    LoopResult,
)

if TYPE_CHECKING:
    from ngb.core.models.model_sources import ModelSource
    from ngb.core.records.types import TrialSpec

__all__ = [
    "CompileContext",
    "Compiled",
    "Compiler",
    "CompilerConfig",
    "LoopResult",
    "check_compiler_takes",
    "compiler_class",
    "compiler_classes",
    "get_compiler",
    "list_compilers",
    "unsupported_error_names",
    "version_packages",
]

# name -> "module:Class"; the order is the paper's (identity baseline first).
#: The one definition of the default baseline: the compiler every speed-up, BSR and depth trend
#: is relative to when a sweep names none (torch eager). Sweeps, reports, figures and the console
#: read it from here.
DEFAULT_BASELINE = "identity"

_REGISTRY: dict[str, str] = {
    "identity": "ngb.core.compilers.identity:IdentityCompiler",
    "torchscript": "ngb.core.compilers.torchscript:TorchScriptCompiler",
    "inductor": "ngb.core.compilers.inductor:InductorCompiler",
    "onnxruntime": "ngb.core.compilers.onnxruntime:OnnxRuntimeCompiler",
    "openvino": "ngb.core.compilers.openvino:OpenVinoCompiler",
    "tvm": "ngb.core.compilers.tvm:TvmCompiler",
    "tvm-ms": "ngb.core.compilers.tvm_ms:TvmMetaScheduleCompiler",
    "tensorrt": "ngb.core.compilers.tensorrt:TensorRtCompiler",
    "noop": "ngb.core.compilers.noop:NoopCompiler",
}
_INTERNAL = {"noop"}


def list_compilers(pattern: str = "*", *, include_internal: bool = False) -> list[str]:
    """Registered compiler names matching a shell-style ``pattern`` (e.g. ``"tvm*"``)."""
    return [
        name
        for name in _REGISTRY
        if fnmatch.fnmatch(name, pattern) and (include_internal or name not in _INTERNAL)
    ]


def compiler_class(name: str) -> type[Compiler[CompilerConfig]]:
    try:
        target = _REGISTRY[name]
    except KeyError:
        raise UnknownNameError("compiler", name, list(_REGISTRY)) from None
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)


def get_compiler(
    name: str, options: Mapping[str, object] | None = None
) -> Compiler[CompilerConfig]:
    """A configured compiler instance; bad options raise ``ConfigError`` with the valid ones."""
    return compiler_class(name)(options)


def compiler_classes(
    pattern: str = "*", *, include_internal: bool = False
) -> dict[str, type[Compiler[CompilerConfig]]]:
    """name -> class of the registered compilers matching ``pattern`` whose module is importable
    (cheap: no compiler library loads), in the registry's order."""
    found = {}
    for name in list_compilers(pattern, include_internal=include_internal):
        try:
            found[name] = compiler_class(name)
        except ImportError:  # a backend module missing from a trimmed build
            continue
    return found


def _classes() -> list[type[Compiler[CompilerConfig]]]:
    """Every registered class whose module is importable, the internal ones too."""
    return list(compiler_classes(include_internal=True).values())


def onnx_compilers() -> list[str]:
    """The compilers that take an ONNX file, read from each one's ``sources`` declaration."""
    return [n for n in list_compilers() if "onnx" in compiler_class(n).sources]


def unsupported_error_names() -> frozenset[str]:
    """Exception class names any registered compiler declares as "unsupported"."""
    return frozenset(n for cls in _classes() for n in cls.unsupported_errors)


def version_packages() -> dict[str, tuple[str, ...]]:
    """label -> distributions, over every registered compiler (the first declaration wins)."""
    out: dict[str, tuple[str, ...]] = {}
    for cls in _classes():
        for label, dists in cls.version_packages.items():
            out.setdefault(label, tuple(dists))
    return out


def check_compiler_takes(
    source: ModelSource | None, compiler: Compiler[CompilerConfig], spec: TrialSpec
) -> None:
    """Refuse a pair that cannot work (``UnsupportedTrial``, recorded as ``unsupported``)."""
    if source is None or not getattr(compiler, "needs_model", True):
        return
    takes = getattr(compiler, "sources", ("torch",))
    if source.takes not in takes:
        able = onnx_compilers()
        raise UnsupportedTrial(
            f"{compiler.name} cannot take an ONNX file (it needs PyTorch code or a .pt2 program); "
            f"ONNX models run on {', '.join(able)}"
        )
    if source.kind == "onnx" and spec.optimisation != "none":
        raise UnsupportedTrial(
            f"optimisation {spec.optimisation!r} works on PyTorch models; {spec.model!r} is ONNX"
        )
