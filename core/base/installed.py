"""The distributions installed for this interpreter, and their versions, cached on disk.

Why: every trial records every installed distribution (``ngb.core.trial.provenance``) and the
versions of the libraries that shape a measurement (``ngb.core.trial.versions``, each compiler's
``versions()``). Reading them through ``importlib.metadata`` parses every distribution's metadata
file, 0.1-0.2 s for the whole list and 10-40 ms for a few versions, in every process that runs a
trial: an agent, and each fresh worker interpreter of each trial. One scan is kept on disk instead,
under a key that changes when anything is installed or removed (``_cache_file``), and both
questions are answered from it.

Stdlib only (it ships in the agent).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import sys
import tempfile
from pathlib import Path

from ngb.core.base.safe_files import is_own_folder, prune_newest, read_regular_bytes


def packages() -> tuple[str, ...]:
    """Every installed distribution as ``name==version``, sorted and de-duplicated.

    Scanning site-packages costs 0.1-0.2 s, and every trial runs in a fresh process, so the
    list is cached on disk under a key made of the interpreter and the modification times of
    the ``sys.path`` folders: installing, removing or upgrading a distribution adds or removes a
    ``.dist-info`` folder there, which changes the folder's mtime and so the key. The key is
    taken again at every call (a few ``stat``s), so a long-lived process (the console) sees a
    library installed while it runs."""
    return _packages_at(_cache_file())


@functools.lru_cache(maxsize=4)
def _packages_at(cache: Path) -> tuple[str, ...]:
    """``packages()`` under one key: the cache file's lines, or a scan written there."""
    with contextlib.suppress(OSError):
        cache.parent.mkdir(mode=0o700, exist_ok=True)
    if not is_own_folder(cache.parent):
        # neither read nor written: a list planted there would put false versions and
        # packages into every result this user records
        return _scan()
    text = _read(cache)
    if text is not None:
        return tuple(line for line in text.splitlines() if line)
    found = _scan()
    with contextlib.suppress(OSError):
        partial = cache.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text("\n".join(found) + "\n")
        os.replace(partial, cache)  # atomic: a concurrent trial reads all or nothing
    _prune(cache.parent)
    return found


#: cache files kept (the newest): a key changes with the mtime of any folder on ``sys.path``,
#: and a checkout or working folder there changes often, so old keys piled up (604 files in
#: /tmp/ngb-packages-0 after a day of test runs, 2026-11-29)
CACHE_KEPT = 32
#: a ``.tmp`` this old is a write that never finished (its process was killed)
STALE_TMP_S = 600.0


#: hex characters of a cache key (``_cache_file``), which is also what names its file
_KEY_CHARS = 24
_CACHE_NAME = re.compile(rf"[0-9a-f]{{{_KEY_CHARS}}}\.txt")
_PARTIAL_NAME = re.compile(rf"[0-9a-f]{{{_KEY_CHARS}}}\.[0-9]+\.tmp")


def _prune(folder: Path, keep: int = CACHE_KEPT) -> None:
    """Only the ``keep`` newest cache files stay, and no unfinished write older than
    ``STALE_TMP_S``. A trial reading a file removed here misses the cache and scans again.
    Only files named as this cache names them, in a folder ``is_own_folder`` trusts (its one
    caller checked that before reading or writing there)."""
    prune_newest(folder, keep, _CACHE_NAME.fullmatch, _PARTIAL_NAME.fullmatch, STALE_TMP_S)


def _cache_file() -> Path:
    stamps = [sys.executable]
    for entry in sys.path:
        with contextlib.suppress(OSError):
            if entry and os.path.isdir(entry):
                stamps.append(f"{entry}:{os.stat(entry).st_mtime_ns}")
    key = hashlib.sha256("\n".join(stamps).encode()).hexdigest()[:_KEY_CHARS]
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"ngb-packages-{uid}" / f"{key}.txt"


def _scan() -> tuple[str, ...]:
    import importlib.metadata as md  # ~10 ms with the email package it loads: on a miss only

    found = set()
    for dist in md.distributions():
        name = dist.metadata["Name"] if dist.metadata else None
        if name:
            found.add(f"{normalise(name)}=={dist.version}")
    return tuple(sorted(found))


def _read(path: Path) -> str | None:
    """A regular file's text, not through a link; None for anything else there."""
    raw = read_regular_bytes(path)
    with contextlib.suppress(UnicodeDecodeError):
        return raw.decode() if raw is not None else None
    return None


def normalise(name: str) -> str:
    """A distribution's name as pip compares names: "Foo_Bar" and "foo-bar" are one package."""
    return name.lower().replace("_", "-").replace(".", "-")


def _versions() -> dict[str, str | None]:
    """name -> version, from ``packages()``; None where one name is installed twice."""
    return _versions_at(_cache_file())


@functools.lru_cache(maxsize=4)
def _versions_at(cache: Path) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for line in _packages_at(cache):
        name, _, version = line.partition("==")
        found[name] = None if name in found else version
    return found


def dist_version(*names: str) -> str | None:
    """The version of the first of ``names`` that is installed, or None.

    Read from ``packages()``, cached on disk: ``importlib.metadata.version`` parsed every
    distribution's metadata file again (10-40 ms a process, and every fresh trial worker is
    one). A name installed twice (two folders of ``sys.path``) is asked of
    ``importlib.metadata``, which answers with the first on the path, as importing does."""
    known = _versions()
    for name in names:
        norm = normalise(name)
        if norm not in known:
            continue
        version = known[norm]
        if version is not None:
            return version
        import importlib.metadata as md

        with contextlib.suppress(md.PackageNotFoundError):
            return md.version(name)
    return None
