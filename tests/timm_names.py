"""timm's model names, listed once per timm version and put into test homes.

``ngb run`` and ``ngb measure`` check timm names against a list kept in the home's cache
(``ngb.sweeps.spec.checks.check_timm_names``). A test home starts empty, so each ``ngb run`` a test
started in a fresh home imported timm, and torch with it, to write that list: about 4.5 s of CPU
a process, some forty CPU-seconds a suite on the 2-core VM, for a list that only changes with
timm's version. ``seed_timm_names(home)`` puts the list where that check looks. Tests of the
check itself (a cold cache, the list being written) use homes this does not touch.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

LIST_CODE = "import timm; print('\\n'.join(sorted(timm.list_models())))"


def listing_name() -> str:
    """The file name ``check_timm_names`` reads in the cache folder (imported here, not at the
    top: ``tests.sshd`` imports this module and the fleet benchmark imports that)."""
    from ngb.sweeps.spec.checks import timm_listing_name

    return timm_listing_name()


@cache
def timm_names_text() -> str:
    """The sorted list, computed by one interpreter per timm version on this machine (kept in the
    temp folder, written atomically: xdist's workers may race to write it, never to read half)."""
    kept = Path(tempfile.gettempdir()) / f"ngb-tests-{listing_name()}"
    try:
        text = kept.read_text(encoding="utf-8")
        if "\nresnet18\n" in text:  # a whole list (a partial file never gets this name)
            return text
    except OSError:
        pass
    out = subprocess.run(
        [sys.executable, "-c", LIST_CODE], capture_output=True, text=True, timeout=300, check=True
    )
    text = out.stdout
    part = kept.with_name(f"{kept.name}.{os.getpid()}.part")
    part.write_text(text, encoding="utf-8")
    os.replace(part, kept)
    return text


def seed_timm_names(home: Path) -> None:
    """Put timm's name list into ``home``'s cache, as a first name check would have left it."""
    cache_dir = home / "cache"
    cache_dir.mkdir(parents=True, exist_ok=True)
    (cache_dir / listing_name()).write_text(timm_names_text(), encoding="utf-8")
