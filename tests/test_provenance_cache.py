"""The on-disk cache of installed packages (``ngb.core.trial.provenance.packages``) keeps its
newest files only, removes unfinished writes a killed process left, and touches nothing it did
not write: not another file in its folder, nor a folder the temp dir links to elsewhere."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ngb.core.trial import provenance


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The temp dir the cache lives in, here; the process's cached answer forgotten around."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    provenance.packages.cache_clear()
    yield tmp_path
    provenance.packages.cache_clear()


def _old_keys(folder: Path, count: int) -> list[Path]:
    """``count`` cache files, oldest first, an hour apart at most."""
    folder.mkdir(exist_ok=True)
    made = []
    for i in range(count):
        path = folder / f"{i:024x}.txt"
        path.write_text("numpy==1\n")
        stamp = time.time() - 3600 + i
        os.utime(path, (stamp, stamp))
        made.append(path)
    return made


def test_the_newest_files_stay_and_what_is_not_the_caches_is_left(temp_dir: Path) -> None:
    folder = temp_dir / f"ngb-packages-{os.getuid()}"
    old = _old_keys(folder, 40)
    stale = folder / f"{'a' * 24}.123.tmp"  # a write whose process was killed
    stale.write_text("numpy")
    then = time.time() - provenance.STALE_TMP_S - 60
    os.utime(stale, (then, then))
    fresh = folder / f"{'b' * 24}.456.tmp"  # a write going on now
    fresh.write_text("numpy")
    other = folder / "notes.txt"
    other.write_text("mine")
    os.utime(other, (then, then))

    lines = provenance.packages()  # a new key here: scanned, written, pruned

    assert any(line.startswith("numpy==") for line in lines)
    cached = sorted(p for p in folder.iterdir() if provenance._CACHE_NAME.fullmatch(p.name))
    assert len(cached) == provenance.CACHE_KEPT
    assert provenance._cache_file() in cached  # the one just written is among the newest
    assert [p for p in old if p.exists()] == old[-(provenance.CACHE_KEPT - 1) :]
    assert not stale.exists() and fresh.exists() and other.exists()


def test_a_linked_folder_is_written_to_as_before_but_never_pruned(
    temp_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    elsewhere = tmp_path_factory.mktemp("someone-elses")
    old = _old_keys(elsewhere, 40)
    (temp_dir / f"ngb-packages-{os.getuid()}").symlink_to(elsewhere)

    provenance.packages()

    assert all(p.exists() for p in old)
