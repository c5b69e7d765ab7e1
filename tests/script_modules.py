"""Load a script that lives outside the package (benchmarks/, scripts/) as a module, to test its
functions without running it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str) -> ModuleType:
    """The module of ``ROOT / relative``, e.g. ``load_script("benchmarks/coverage.py")``."""
    path = ROOT / relative
    # a name of its own: benchmarks/coverage.py must not stand in for the coverage package
    spec = importlib.util.spec_from_file_location(f"ngb_script_{path.stem}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
