"""pytest's rewritten asserts of the test modules, cached once by the xdist controller before its
workers start.

Why: each worker collects every test file, and pytest caches a module's rewritten asserts as
``tests/__pycache__/<module>.cpython-311-pytest-<version>.pyc``. In a fresh clone the four workers
start together, so each one rewrote all ~145 modules before any had written that cache: ~6 CPU-s
a worker (pytest's ``visit_Assert`` over ~5,300 asserts; ``pytest --collect-only`` took 9.8
CPU-s without the cache and 3.9 with it on the 2-core VM, 2026-11-30), ~24 CPU-s of a fresh
clone's first ``make test``, and none later. Here it is done once, split over two processes, with
pytest's own functions, which are private: pytest is pinned in requirements.lock, and if they
change this writes nothing and the workers rewrite as before (``tests/test_rewrite_once.py`` then
fails, so the change is seen).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import pytest

#: what this takes from pytest's assertion rewriting (private names, hence the check)
_NEEDED = ("PYC_TAIL", "_read_pyc", "_rewrite_test", "_write_pyc", "assertstate_key",
           "get_cache_dir")  # fmt: skip


def _pytest_rewrite() -> ModuleType | None:
    try:
        from _pytest.assertion import rewrite
    except ImportError:
        return None
    return rewrite if all(hasattr(rewrite, name) for name in _NEEDED) else None


def cached_pyc(module: Path) -> Path | None:
    """Where pytest keeps ``module``'s rewritten bytecode (None: not this pytest's layout)."""
    rewrite = _pytest_rewrite()
    if rewrite is None:
        return None
    return rewrite.get_cache_dir(module) / (module.name[:-3] + rewrite.PYC_TAIL)


def stale(modules: Sequence[Path]) -> list[Path]:
    """The modules whose cached rewritten bytecode is missing or out of date."""
    rewrite = _pytest_rewrite()
    if rewrite is None:
        return []
    return [m for m in modules if rewrite._read_pyc(m, cached_pyc(m)) is None]


def _write(modules: Sequence[Path], config: pytest.Config) -> None:
    rewrite = _pytest_rewrite()
    assert rewrite is not None
    state = config.stash[rewrite.assertstate_key]
    for module in modules:
        pyc = cached_pyc(module)
        assert pyc is not None
        pyc.parent.mkdir(exist_ok=True)
        source_stat, code = rewrite._rewrite_test(module, config)
        rewrite._write_pyc(state, code, source_stat, pyc)


def write_rewritten(modules: Sequence[Path], config: pytest.Config) -> list[Path]:
    """Cache the rewritten bytecode of each stale module of ``modules``, as pytest's import hook
    would; the modules written. Nothing where bytecode is not written (PYTHONDONTWRITEBYTECODE)
    or asserts are not rewritten (``--assert=plain``). Half the modules go to a forked child
    when this process runs no other thread (a fork copies only the calling thread)."""
    if sys.dont_write_bytecode or config.getoption("assertmode") != "rewrite":
        return []
    before = stale(modules)
    if not before:
        return []
    mine, child = before, None
    if len(before) > 1 and threading.active_count() == 1:
        theirs, mine = before[::2], before[1::2]
        child = os.fork()
        if child == 0:  # pragma: no cover - the child leaves by os._exit: no atexit, no teardown
            try:
                _write(theirs, config)
            finally:
                os._exit(0)
    _write(mine, config)
    if child is not None:
        os.waitpid(child, 0)
    left = stale(before)
    return [m for m in before if m not in left]
