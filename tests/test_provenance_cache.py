"""The on-disk cache of installed packages (``ngb.core.trial.installed.packages``) keeps its
newest files only, removes unfinished writes a killed process left, and touches nothing it did
not write: not another file in its folder, nor a folder the temp dir links to elsewhere."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ngb.core.base import installed


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The temp dir the cache lives in, here; the process's cached answer forgotten around."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    installed._packages_at.cache_clear()
    yield tmp_path
    installed._packages_at.cache_clear()


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
    then = time.time() - installed.STALE_TMP_S - 60
    os.utime(stale, (then, then))
    fresh = folder / f"{'b' * 24}.456.tmp"  # a write going on now
    fresh.write_text("numpy")
    other = folder / "notes.txt"
    other.write_text("mine")
    os.utime(other, (then, then))

    lines = installed.packages()  # a new key here: scanned, written, pruned

    assert any(line.startswith("numpy==") for line in lines)
    cached = sorted(p for p in folder.iterdir() if installed._CACHE_NAME.fullmatch(p.name))
    assert len(cached) == installed.CACHE_KEPT
    assert installed._cache_file() in cached  # the one just written is among the newest
    assert [p for p in old if p.exists()] == old[-(installed.CACHE_KEPT - 1) :]
    assert not stale.exists() and fresh.exists() and other.exists()


def test_a_linked_folder_is_neither_read_nor_written_nor_pruned(
    temp_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    elsewhere = tmp_path_factory.mktemp("someone-elses")
    old = _old_keys(elsewhere, 40)
    (temp_dir / f"ngb-packages-{os.getuid()}").symlink_to(elsewhere)
    planted = elsewhere / installed._cache_file().name
    planted.write_text("numpy==0.0.0-planted\n")

    lines = installed.packages()

    assert "numpy==0.0.0-planted" not in lines and any(x.startswith("numpy==") for x in lines)
    assert all(p.exists() for p in old) and planted.read_text() == "numpy==0.0.0-planted\n"


@pytest.mark.skipif(os.getuid() != 0, reason="making a folder another user's needs root")
def test_a_folder_another_user_made_first_is_not_trusted(temp_dir: Path) -> None:
    """Someone else created the cache folder before this user did, with a list of their own."""
    folder = temp_dir / f"ngb-packages-{os.getuid()}"
    folder.mkdir(mode=0o755)
    planted = folder / installed._cache_file().name
    planted.write_text("numpy==0.0.0-planted\n")
    os.chown(folder, 65534, 65534)
    os.chown(planted, 65534, 65534)

    assert "numpy==0.0.0-planted" not in installed.packages()


def test_a_world_writable_folder_or_a_fifo_in_place_of_the_list_is_not_read(
    temp_dir: Path,
) -> None:
    folder = temp_dir / f"ngb-packages-{os.getuid()}"
    folder.mkdir(mode=0o700)
    os.mkfifo(installed._cache_file())  # a reader that opened it for reading would block

    lines = installed.packages()  # returns: the FIFO is no regular file

    assert any(x.startswith("numpy==") for x in lines)
    installed._packages_at.cache_clear()
    os.unlink(installed._cache_file())
    (folder / installed._cache_file().name).write_text("numpy==0.0.0-planted\n")
    os.chmod(folder, 0o777)
    assert "numpy==0.0.0-planted" not in installed.packages()


def test_versions_from_the_cache_are_importlib_metadatas(temp_dir: Path) -> None:
    """Every installed distribution's version, read from the cached list, is the one
    ``importlib.metadata.version`` gives (under any spelling of its name); a missing name is None.
    """
    import importlib.metadata as md

    installed._versions_at.cache_clear()
    names = {dist.metadata["Name"] for dist in md.distributions() if dist.metadata}
    assert len(names) > 50  # the suite's own environment: torch, timm, duckdb, ...
    for name in sorted(names):
        assert installed.dist_version(name) == md.version(name), name
        assert installed.dist_version(name.upper().replace("-", "_")) == md.version(name), name
    assert installed.dist_version("no-such-distribution-ngb") is None
    assert installed.dist_version("no-such-distribution-ngb", "numpy") == md.version("numpy")
    installed._versions_at.cache_clear()


def test_a_name_installed_twice_is_asked_of_importlib_metadata(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two versions of one name in the list (two ``sys.path`` folders): the first on the path
    is the one imported, which only ``importlib.metadata`` knows."""
    import importlib.metadata as md

    listed = ("numpy==0.0.1", "numpy==0.0.2", "x==3")
    monkeypatch.setattr(installed, "_packages_at", lambda cache: listed)
    installed._versions_at.cache_clear()
    try:
        assert installed.dist_version("x") == "3"
        assert installed.dist_version("numpy") == md.version("numpy")
    finally:
        installed._versions_at.cache_clear()


def test_a_cached_environment_reads_versions_without_importlib_metadata(tmp_path: Path) -> None:
    """The agent and every fresh trial worker record versions and provenance; once the list is
    cached they do it without importing ``importlib.metadata`` (and the email package it loads:
    ~10 ms a process) or parsing a metadata file."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from ngb.core.trial import provenance, versions\n"
        "found = versions.library_versions()\n"
        "provenance.read()\n"
        "assert found['numpy'] and found['ngb'], found\n"
        "print(sorted(m for m in sys.modules if m.startswith(('importlib.metadata', 'email'))))\n"
    )
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # the cache folder: empty, then written
    runs = [
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        for _ in range(2)
    ]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr + runs[1].stderr
    assert "importlib.metadata" in runs[0].stdout  # the first scanned
    assert runs[1].stdout.strip() == "[]"


def test_a_library_installed_while_a_process_runs_is_seen_by_it(
    temp_dir: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The console runs for hours: a distribution installed meanwhile changes its folder's
    mtime, hence the key, and the next question reads a fresh list."""
    site = tmp_path_factory.mktemp("site")
    monkeypatch.syspath_prepend(str(site))
    assert installed.dist_version("ngb-fake-dist") is None
    time.sleep(0.01)  # a new mtime even where the clock is coarse
    info = site / "ngb_fake_dist-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ngb-fake-dist\nVersion: 1.2.3\n")
    assert installed.dist_version("ngb_fake_dist") == "1.2.3"
    assert "ngb-fake-dist==1.2.3" in installed.packages()
