"""Scratch folders a killed ngb process leaves in the temp dir go with the next ngb command, and
the console removes its own when its terminal closes (``ngb.core.base.scratch``).

Found 2026-11-29: 265 ``ngb-trial-*`` and 47 ``ngb-query-*`` folders in this machine's /tmp,
and a console quit with ``q``, or whose terminal closed, left a whole copy of the store there."""

from __future__ import annotations

import os
import pty
import select
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from fcntl import ioctl
from pathlib import Path

import pytest
from ngb.core.base import scratch
from ngb.sweeps.store.database import Store

from tests.cli_helpers import ngb, scaled
from tests.test_store import LONG_SQL, make_result

NGB_TUI = str(Path(sys.executable).with_name("ngb-tui"))


def killed_with_scratch(tmpdir: Path, kind: str = "query") -> Path:
    """The folder a process made with ``scratch_dir`` before a SIGKILL ended it."""
    code = (
        "import os, signal, sys\n"
        "from ngb.core.base.scratch import scratch_dir\n"
        f"folder = scratch_dir({kind!r})\n"
        "open(os.path.join(folder.name, 'results.duckdb'), 'wb').write(b'x' * 4096)\n"
        "print(folder.name, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "TMPDIR": str(tmpdir)},
        capture_output=True, text=True, timeout=scaled(60),
    )  # fmt: skip
    assert done.returncode == -signal.SIGKILL, done.stderr
    folder = Path(done.stdout.strip())
    assert folder.parent == tmpdir and (folder / "results.duckdb").is_file()
    return folder


@pytest.fixture
def tmpdir_(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temp dir of the test's own, for this process too (``tempfile`` caches its choice)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setenv("TMPDIR", str(folder))
    return folder


def test_the_next_ngb_command_removes_what_a_killed_one_left(tmpdir_: Path) -> None:
    left = killed_with_scratch(tmpdir_)
    assert left.name.startswith(f"ngb-query-{left.name.split('-')[2]}-")
    # named for this process, which runs: it stays (made by hand, as the first scratch_dir of
    # this process would sweep the killed one's itself)
    mine = tmpdir_ / f"ngb-trial-{scratch.owner_tag()}-x"
    mine.mkdir()
    assert left.exists()
    done = ngb("paths")
    assert done.returncode == 0, done.stderr
    assert not left.exists()
    assert mine.is_dir()


def test_only_folders_of_gone_owners_in_this_namespace_go(tmpdir_: Path) -> None:
    tag = scratch.owner_tag()
    assert tag is not None  # Linux: /proc tells
    namespace, rest = tag[1:].split("p")
    pid, start = (int(x) for x in rest.split("s"))
    dead = killed_with_scratch(tmpdir_, "trial")
    reused = tmpdir_ / f"ngb-trial-n{namespace}p{pid}s{start + 1}-x"  # this pid, another start
    alive = tmpdir_ / f"ngb-trial-n{namespace}p{pid}s{start}-x"
    other_namespace = tmpdir_ / f"ngb-trial-n{int(namespace) + 1}p999999s1-x"
    old_style = tmpdir_ / "ngb-trial-abcdefgh"  # an older ngb's: no owner to ask
    not_ours = tmpdir_ / "foo-trial-n1p2s3-x"
    a_file = tmpdir_ / f"ngb-query-n{namespace}p999999s1-file"
    target = tmpdir_ / "kept-target"
    a_link = tmpdir_ / f"ngb-query-n{namespace}p999999s1-link"
    for folder in (reused, alive, other_namespace, old_style, not_ours, target):
        folder.mkdir()
        (folder / "f").write_text("x")
    a_file.write_text("x")
    a_link.symlink_to(target)

    removed = scratch.sweep_stale(tmpdir_)

    assert sorted(removed) == sorted([dead, reused])
    assert not dead.exists() and not reused.exists()
    for kept in (alive, other_namespace, old_style, not_ours, a_file, a_link, target / "f"):
        assert kept.exists(), kept
    assert scratch.sweep_stale(tmpdir_) == []


def test_remove_own_leaves_what_a_forked_child_inherited(
    tmpdir_: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = scratch.scratch_dir("spill")
    monkeypatch.setattr(os, "getpid", lambda: 1)  # as a forked child would call it
    scratch.remove_own()
    assert Path(folder.name).is_dir()
    monkeypatch.undo()
    scratch.remove_own()
    assert not Path(folder.name).exists()


def test_a_bad_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="lower-case letters"):
        scratch.scratch_dir("../x")


def _drain(fd: int, seen: bytearray, stop: threading.Event) -> None:
    """Read the console's screen so its writes never block on a full pty."""
    while not stop.is_set():
        try:
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    return
                seen.extend(chunk)
        except OSError:  # the console closed its side
            return


def _wait(pid: int, timeout: float) -> int | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.1)
    return None


def test_a_closed_terminal_ends_the_console_and_its_store_copy_goes(tmp_path: Path) -> None:
    """The console in a real pty runs a long SQL query, which moves to a private copy of the
    store; the terminal then closes (the kernel's SIGHUP). The console quits as ``q`` does and
    removes the copy (before: the process died at once and left the copy in the temp dir)."""
    store = Store(tmp_path / "r.duckdb")
    store.ingest_results("r1", "a", [make_result(0)])
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = {
        **os.environ, "TMPDIR": str(tmpdir), "NGB_HOME": str(tmp_path / "home"),
        "TERM": "xterm-256color",
    }  # fmt: skip
    pid, fd = pty.fork()
    if pid == 0:  # the child: the console on the pty
        try:
            os.execve(NGB_TUI, [NGB_TUI, "--db", str(store.path), "--screen", "sql",
                                "--no-attach", "--no-blink"], env)  # fmt: skip
        finally:
            os._exit(127)
    ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    seen = bytearray()
    status: int | None = None
    stop = threading.Event()
    reader = threading.Thread(target=_drain, args=(fd, seen, stop), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + scaled(60)
        while b"allow writes" not in seen and time.monotonic() < deadline:
            time.sleep(0.1)
        assert b"allow writes" in seen, bytes(seen[-400:])
        os.write(fd, LONG_SQL.encode() + b"\n")  # ctrl+j runs it
        copies: list[Path] = []
        while not copies and time.monotonic() < deadline:
            copies = list(tmpdir.glob("ngb-query-*"))
            time.sleep(0.1)
        assert copies, "the long query never moved to a copy"
        stop.set()
        reader.join(5)
        os.close(fd)  # the terminal goes: SIGHUP
        status = _wait(pid, scaled(30))
    finally:
        stop.set()
        if status is None:  # a failed step above: never leave the console behind
            os.kill(pid, signal.SIGKILL)
            _wait(pid, 10)
    assert status == 128 + signal.SIGHUP, status
    assert list(tmpdir.iterdir()) == []


def test_a_proc_of_another_namespace_removes_nothing(
    tmpdir_: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host's /proc mounted in a container names other processes by these pids: no owner can
    be asked there, so nothing is named for one and nothing is removed."""
    dead = killed_with_scratch(tmpdir_)
    real_readlink = os.readlink
    monkeypatch.setattr(scratch, "_tags", {})  # this process as a fresh one would read itself
    monkeypatch.setattr(
        os, "readlink", lambda path: "1" if path == "/proc/self" else real_readlink(path)
    )
    assert scratch.owner_tag() is None
    assert scratch.sweep_stale(tmpdir_) == [] and dead.is_dir()
    plain = scratch.scratch_dir("trial")
    name = Path(plain.name).name
    assert name.startswith("ngb-trial-") and scratch._NAME.match(name) is None  # no owner named
    plain.cleanup()
    monkeypatch.undo()
    assert scratch.sweep_stale(tmpdir_) == [dead]
