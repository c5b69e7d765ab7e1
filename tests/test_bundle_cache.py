"""The agent archive is built once per user and machine, not once per ``NGB_HOME`` or process.

``ngb.devices.bundle`` keeps each archive it builds in ``<tempdir>/ngb-agent-<uid>``; another
process, with another home, copies it from there instead of compiling ~100 modules again. The
folder is trusted only as the user's own (mode 0700, not a link), and a link in place of an
archive is never read.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from ngb.devices import bundle


@pytest.fixture
def temp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temp dir of the test's own, for this process and the processes it starts, and no
    archive this process built before."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setenv("TMPDIR", str(root))
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    monkeypatch.setattr(bundle, "_BUILT", {})
    return root


def _shared(root: Path) -> Path:
    return root / f"ngb-agent-{os.getuid()}"


def _built_elsewhere(home: Path) -> Path:
    """The archive another process builds into ``home`` (and into the shared folder)."""
    code = (
        "import sys\nfrom ngb.devices import bundle\nprint(bundle.build_agent_zipapp(sys.argv[1]))"
    )
    built = subprocess.run(
        [sys.executable, "-c", code, str(home)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return Path(built.stdout.strip())


def _count_builds(monkeypatch: pytest.MonkeyPatch, raw: bytes = b"#!fake archive\n") -> list[int]:
    calls: list[int] = []

    def fake(files: dict[str, bytes]) -> bytes:
        calls.append(len(files))
        return raw

    monkeypatch.setattr(bundle, "_archive", fake)
    return calls


def test_a_new_home_copies_the_archive_another_process_built(
    temp_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    theirs = _built_elsewhere(tmp_path / "home-a")
    shared = _shared(temp_root) / theirs.name
    assert shared.read_bytes() == theirs.read_bytes()
    assert oct(_shared(temp_root).stat().st_mode & 0o777) == oct(0o700)
    # the same sources build the same bytes in this process: what makes sharing them sound
    assert bundle._archive(bundle.bundle_files(bytecode_too=False)) == theirs.read_bytes()

    calls = _count_builds(monkeypatch)
    ours = bundle.build_agent_zipapp(tmp_path / "home-b")
    assert calls == [], "a second home compiled the archive again"
    assert ours.name == theirs.name and ours.read_bytes() == theirs.read_bytes()
    assert os.access(ours, os.X_OK)


def test_a_folder_others_may_write_is_neither_read_nor_written(
    temp_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = _shared(temp_root)
    shared.mkdir(mode=0o700)
    os.chmod(shared, 0o777)  # another user could have put an archive here
    digest = bundle.content_hash(bundle.bundle_files(bytecode_too=False))
    (shared / f"agent-{digest}.pyz").write_bytes(b"#!planted\n")
    calls = _count_builds(monkeypatch)
    ours = bundle.build_agent_zipapp(tmp_path / "home")
    assert len(calls) == 1 and ours.read_bytes() == b"#!fake archive\n"
    assert sorted(p.name for p in shared.iterdir()) == [f"agent-{digest}.pyz"]
    assert (shared / f"agent-{digest}.pyz").read_bytes() == b"#!planted\n"


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_something_else_in_place_of_the_archive_is_passed_over(
    temp_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    shared = _shared(temp_root)
    shared.mkdir(mode=0o700)
    there = shared / f"agent-{bundle.content_hash(bundle.bundle_files(bytecode_too=False))}.pyz"
    if kind == "fifo":
        os.mkfifo(there)
    else:
        there.mkdir()
    calls = _count_builds(monkeypatch)
    ours = bundle.build_agent_zipapp(tmp_path / "home")  # neither hangs nor raises
    assert len(calls) == 1 and ours.read_bytes() == b"#!fake archive\n"


def test_a_link_in_place_of_the_archive_is_not_followed(
    temp_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = _shared(temp_root)
    shared.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere.pyz"
    elsewhere.write_bytes(b"#!someone else's\n")
    digest = bundle.content_hash(bundle.bundle_files(bytecode_too=False))
    (shared / f"agent-{digest}.pyz").symlink_to(elsewhere)
    calls = _count_builds(monkeypatch)
    ours = bundle.build_agent_zipapp(tmp_path / "home")
    assert len(calls) == 1 and ours.read_bytes() == b"#!fake archive\n"
    # the link was replaced by the archive itself; what it pointed to is untouched
    assert not (shared / f"agent-{digest}.pyz").is_symlink()
    assert elsewhere.read_bytes() == b"#!someone else's\n"


def test_a_damaged_archive_there_is_built_again(
    temp_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    theirs = _built_elsewhere(tmp_path / "home-a")
    good = theirs.read_bytes()
    shared = _shared(temp_root) / theirs.name
    middle = len(good) // 2
    flipped = good[:middle] + bytes([good[middle] ^ 0xFF]) + good[middle + 1 :]
    for damaged in (good[:middle], flipped):
        shared.write_bytes(damaged)
        monkeypatch.setattr(bundle, "_BUILT", {})
        calls = _count_builds(monkeypatch, raw=good)
        ours = bundle.build_agent_zipapp(tmp_path / f"home-{len(damaged)}")
        assert len(calls) == 1, "a damaged archive was copied instead of built"
        assert ours.read_bytes() == good and shared.read_bytes() == good


def test_the_shared_folder_keeps_the_newest_archives(temp_root: Path) -> None:
    shared = _shared(temp_root)
    shared.mkdir(mode=0o700)
    for i in range(bundle.SHARED_KEPT + 3):
        path = shared / f"agent-{i:016x}.pyz"
        path.write_bytes(b"x")
        os.utime(path, (1_000_000 + i, 1_000_000 + i))
    stale = shared / ".agent-killed.tmp"
    stale.write_bytes(b"half")
    os.utime(stale, (1_000_000, 1_000_000))
    other = shared / "notes.txt"
    other.write_text("not an archive")
    bundle._prune(shared)
    left = sorted(p.name for p in shared.iterdir())
    newest = [f"agent-{i:016x}.pyz" for i in range(3, bundle.SHARED_KEPT + 3)]
    assert left == sorted([*newest, "notes.txt"])
