"""The installed version of a distribution, from its metadata (no import of the library itself).

A leaf module: ``ngb.core.compilers.base`` (each compiler's ``versions()``) and
``ngb.core.trial.versions`` (every library a result records, which reads the compilers' registry)
both need it, and keeping it here is what lets ``versions`` import the registry at module level
without an import loop (issue 22).
"""

from __future__ import annotations

import importlib.metadata as md


def dist_version(*names: str) -> str | None:
    """The version of the first of ``names`` that is installed, or None."""
    for name in names:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            continue
    return None
