"""A process's family read from its own /proc files (``ngb.core.trial.descendants``): the same
members as psutil's scan of every process, children of any thread included, and a walk that
neither stops at a process that ended nor loops on a reused pid."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from ngb.core.trial import descendants as family


@pytest.fixture
def tree() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Two shells, each with two sleeping children; one shell started from a second thread that
    stays alive (the kernel lists a child under the thread that made it, and moves it to another
    thread of the process only when that thread ends)."""
    started: list[subprocess.Popen[bytes]] = []
    done = threading.Event()

    def spawn() -> None:
        started.append(subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"]))

    def spawn_and_stay() -> None:
        spawn()
        done.wait(60)

    helper = threading.Thread(target=spawn_and_stay, daemon=True)
    helper.start()
    spawn()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (
        len(started) < 2 or any(len(psutil.Process(p.pid).children()) < 2 for p in started)
    ):
        time.sleep(0.02)  # until both shells have started their sleeps
    yield started
    done.set()
    helper.join()
    for proc in started:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
        proc.wait()


@pytest.mark.skipif(not family.listed_by_kernel(), reason="this kernel does not list children")
def test_the_family_is_the_one_psutils_scan_finds(tree: list[subprocess.Popen[bytes]]) -> None:
    me = psutil.Process()
    # the test process may have other children (a fork server, another test's): the tree is
    # what must be found, and nothing that psutil's scan does not see just before or after
    shells = {p.pid for p in tree}
    planted = shells | {c.pid for s in shells for c in psutil.Process(s).children()}
    assert len(planted) == 6
    before = {p.pid for p in me.children(recursive=True)}
    found = {p.pid for p in family.descendants(me)}
    walked = set(family.descendant_pids(me.pid))
    after = {p.pid for p in me.children(recursive=True)}
    assert planted <= found and planted <= walked  # the thread's child and the main thread's
    assert found <= before | after and walked <= before | after


def _task(proc: Path, pid: int, tid: int, children: str) -> None:
    folder = proc / str(pid) / "task" / str(tid)
    folder.mkdir(parents=True)
    (folder / "children").write_text(children)


def test_the_walk_skips_what_ended_and_never_loops(tmp_path: Path) -> None:
    _task(tmp_path, 10, 10, "11 ")
    _task(tmp_path, 10, 15, "12 ")  # a second thread's child
    _task(tmp_path, 11, 11, "13 ")
    _task(tmp_path, 13, 13, "10 11 ")  # pids reused during the walk: listed again, walked once
    # 12 has no folder: it ended after 10 listed it
    assert sorted(family.descendant_pids(10, proc=str(tmp_path))) == [11, 12, 13]
    assert family.descendant_pids(99, proc=str(tmp_path)) == []  # the root itself ended


def test_without_the_kernels_list_psutils_scan_answers(
    tree: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(family, "listed_by_kernel", lambda: False)
    monkeypatch.setattr(family, "descendant_pids", lambda *a, **k: pytest.fail("walked /proc"))
    me = psutil.Process()
    assert {p.pid for p in family.descendants(me)} == {p.pid for p in me.children(recursive=True)}
