"""A trial process forked from the agent (``ngb.core.trial.forked_trial``): what it gets of the
agent and what it must not, its exit status as ``Popen`` would say it, and when forking is
refused. The agent's own tests (tests/test_agent.py) run crash, timeout, kill and cancel through
both ways of starting a trial."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from ngb.core.trial.forked_trial import EXIT_CHILD_ERROR, ForkedTrial


def _read_all(trial: ForkedTrial) -> tuple[str, str]:
    out = trial.stdout.read().decode()
    err = trial.stderr.read().decode()
    return out, err


def test_exit_status_and_output_are_the_childs() -> None:
    def body() -> int:
        print("to stdout", flush=True)
        print("to stderr", file=sys.stderr, flush=True)
        return 3

    trial = ForkedTrial(body)
    out, err = _read_all(trial)
    assert trial.wait() == 3 and trial.poll() == 3
    assert out == "to stdout\n" and err == "to stderr\n"


def test_an_exception_is_a_traceback_and_status_70_never_a_return_into_the_caller() -> None:
    parent = os.getpid()

    def body() -> int:
        raise RuntimeError("boom in the child")

    trial = ForkedTrial(body)
    _, err = _read_all(trial)
    assert os.getpid() == parent  # only the parent comes back from the constructor
    assert trial.wait() == EXIT_CHILD_ERROR
    assert "RuntimeError: boom in the child" in err


def test_a_signal_reads_as_popen_says_it_and_poll_is_none_while_it_runs() -> None:
    trial = ForkedTrial(lambda: time.sleep(60) or 0)
    assert trial.poll() is None
    os.kill(trial.pid, signal.SIGKILL)
    assert trial.wait() == -signal.SIGKILL


def test_the_child_leads_its_own_session_so_a_group_kill_takes_its_helpers() -> None:
    def body() -> int:
        pid = os.fork()  # a compiler's helper process
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        print(pid, os.getsid(0), os.getpgid(0), flush=True)
        time.sleep(60)
        return 0

    trial = ForkedTrial(body)
    helper, sid, pgid = (int(x) for x in trial.stdout.readline().split())
    assert sid == trial.pid == pgid != os.getsid(0)
    os.killpg(trial.pid, signal.SIGKILL)
    assert trial.wait() == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(helper, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{helper}/stat") as fh:  # a zombie waiting for init counts as gone
            if fh.read().split(") ", 1)[1].startswith("Z"):
                break
        time.sleep(0.05)
    else:
        pytest.fail("the helper outlived its group's kill")


def test_the_child_keeps_none_of_the_callers_files_and_none_of_its_handlers() -> None:
    with tempfile.TemporaryFile() as held:  # the agent's checkpoint lock, its event stream
        held_fd = held.fileno()
        previous = signal.signal(signal.SIGTERM, lambda *_: None)
        try:

            def body() -> int:
                fds = sorted(int(name) for name in os.listdir("/proc/self/fd"))
                handler = signal.getsignal(signal.SIGTERM)
                print(json.dumps({"fds": fds, "default": handler == signal.SIG_DFL}), flush=True)
                return 0

            trial = ForkedTrial(body)
            out, _ = _read_all(trial)
        finally:
            signal.signal(signal.SIGTERM, previous)
    assert trial.wait() == 0
    seen = json.loads(out)
    # 0-2, and the one listdir opens to read the folder
    assert held_fd not in seen["fds"] and len(seen["fds"]) <= 4, seen
    assert seen["default"] is True


def test_no_fork_while_another_thread_runs() -> None:
    # In a process of its own: a test process may have threads that earlier tests left.
    code = """
import threading
from ngb.core.trial.forked_trial import can_fork
alone = can_fork()
stop = threading.Event()
other = threading.Thread(target=stop.wait)
other.start()
beside = can_fork()
stop.set()
other.join()
print(alone, beside, can_fork())
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert out.split() == ["True", "False", "True"]
