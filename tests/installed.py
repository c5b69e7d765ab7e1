"""``pytestmark = needs("sklearn")``: skip a test module where a library is not installed,
without importing it. ``pytest.importorskip`` at module level imports it while collecting, in
every xdist worker (scikit-learn ~0.85 s, torch_pruning ~0.6 s of CPU each on the 2-core VM),
though only the worker that runs the module needs it."""

from __future__ import annotations

import importlib.util

import pytest


def needs(*modules: str) -> pytest.MarkDecorator:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    return pytest.mark.skipif(bool(missing), reason=f"not installed: {', '.join(missing)}")
