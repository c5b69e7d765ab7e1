"""ngb.core.base.safe_files, capture and isolate: the pieces under issue 21's "nothing destroyed,
nothing hangs, nothing silent" (the CLI-level cases are in tests/bad_inputs/edges.toml)."""

from __future__ import annotations

import errno
import os
import stat
import sys
import threading
from pathlib import Path

import pytest
from ngb.core.base.capture import captured_stderr
from ngb.core.base.errors import ConfigError, NgbError
from ngb.core.base.isolate import call_in_child
from ngb.core.base.safe_files import (
    check_readable,
    read_text,
    refuse_protected,
    shorten,
    write_atomic,
)


def test_read_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "devices.toml"
    os.mkfifo(fifo)
    outcome: list[str] = []

    def read() -> None:
        try:
            read_text(fifo, "inventory")
        except NgbError as exc:
            outcome.append(str(exc))

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive(), "reading a FIFO blocked"
    assert outcome and "FIFO" in outcome[0] and "inventory" in outcome[0]


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (lambda p: p.mkdir(), "directory"),
        (lambda p: p.symlink_to("/dev/null"), "character device"),
    ],
)
def test_read_names_the_kind(tmp_path: Path, make, kind: str) -> None:  # type: ignore[no-untyped-def]
    target = tmp_path / "x"
    make(target)
    with pytest.raises(NgbError, match=kind):
        check_readable(target)


def test_read_regular_file_and_missing(tmp_path: Path) -> None:
    f = tmp_path / "a.toml"
    f.write_text("x = 1\n")
    assert read_text(f) == "x = 1\n"
    with pytest.raises(FileNotFoundError):
        read_text(tmp_path / "missing")


@pytest.mark.parametrize("force", [True, False])
def test_write_never_replaces_a_device_or_fifo(tmp_path: Path, force: bool) -> None:
    fifo = tmp_path / "out.csv"
    os.mkfifo(fifo)
    with pytest.raises(NgbError, match="FIFO"):
        write_atomic(fifo, "a,b\n", overwrite=force)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    if Path("/dev/full").exists():
        with pytest.raises(NgbError, match="character device"):
            write_atomic("/dev/full", "a,b\n", overwrite=force)
        assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_write_is_atomic_and_keeps_mode(tmp_path: Path) -> None:
    f = tmp_path / "r.md"
    f.write_text("old\n")
    os.chmod(f, 0o640)
    write_atomic(f, "new\n")
    assert f.read_text() == "new\n"
    assert stat.S_IMODE(f.stat().st_mode) == 0o640
    with pytest.raises(NgbError, match="exists already"):
        write_atomic(f, "newer\n", overwrite=False)
    assert f.read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["r.md"]  # no temporary left


def test_full_disk_is_an_error_and_the_old_file_stays(tmp_path: Path) -> None:
    f = tmp_path / "t.parquet"
    f.write_text("old\n")

    def writer(tmp: Path) -> None:
        tmp.write_bytes(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(NgbError, match="no space left on device"):
        write_atomic(f, writer)
    assert f.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]


def test_write_through_a_symlink_keeps_the_link(tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "devices.toml"
    real.parent.mkdir()
    real.write_text("# mine\n")
    link = tmp_path / "devices.toml"
    link.symlink_to(real)
    written = write_atomic(link, "# mine\n[devices.pi]\n")
    assert written == real
    assert link.is_symlink() and real.read_text() == "# mine\n[devices.pi]\n"


def test_refuse_protected(tmp_path: Path) -> None:
    inv = tmp_path / "devices.toml"
    inv.write_text("")
    with pytest.raises(NgbError, match="device inventory"):
        refuse_protected(tmp_path / "." / "devices.toml", {"device inventory": inv})
    refuse_protected(tmp_path / "other.csv", {"device inventory": inv})


def test_shorten() -> None:
    assert shorten("abc") == "abc"
    long = shorten("x" * 10_000)
    assert len(long) == 120 and long.endswith("…")


def test_captured_stderr_folds_fd2_output(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(RuntimeError), captured_stderr() as logged:
        os.write(2, b"W1125 16:50:22.205000 28837 torch/export/__init__.py:403] Traceback\n")
        os.write(2, b"W1125 16:50:22.205000 28837 x.py:1] RuntimeError: zip is broken\n")
        raise RuntimeError("short")
    assert logged.last_line() == "RuntimeError: zip is broken"
    assert "zip is broken" not in capfd.readouterr().err  # dropped: the caller's line says it
    with captured_stderr():
        print("a warning worth keeping", file=sys.stderr)
    assert "a warning worth keeping" in capfd.readouterr().err  # success: written back


def _exits() -> None:
    os._exit(0)


def _sys_exit() -> None:
    sys.exit(0)


def _raises() -> None:
    raise ConfigError("bad factory")


def test_call_in_child() -> None:
    assert call_in_child("adding", lambda a, b: a + b, 2, 3) == 5
    with pytest.raises(NgbError, match="checking: the process running it exited with status 0"):
        call_in_child("checking", _exits)
    with pytest.raises(NgbError, match=r"called sys.exit\(0\)"):
        call_in_child("checking", _sys_exit)
    with pytest.raises(ConfigError, match="bad factory"):
        call_in_child("checking", _raises)
