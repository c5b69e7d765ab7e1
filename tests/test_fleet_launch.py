"""A run's first start checks the interpreter with the agent it starts (``ready_by_start``): no
separate ``agent ready`` Python per device, the same one-line refusal of a python that cannot
run it, and nothing left of the run when it could not."""

from __future__ import annotations

import hashlib
import shlex
import subprocess
import sys
import time
from pathlib import Path

from ngb.core.records import events
from ngb.devices import protocol as remote
from ngb.devices.bundle import build_agent_zipapp

from tests.cli_helpers import scaled


def sh(argv: list[str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    """The quoted line as sshd's login shell gets it."""
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}
    return subprocess.run(  # noqa: S603 - our own script
        ["sh", "-c", shlex.join(argv)], input=stdin, capture_output=True, text=True, env=env,
        timeout=scaled(120),
    )  # fmt: skip


def trial_line() -> str:
    spec = {"model": "resnet18", "compiler": "noop", "batch": 1,
            "measure": {"repetitions": 1, "workers": 1, "verify": False}}  # fmt: skip
    import json

    return json.dumps(spec) + "\n"


def test_the_started_agent_is_the_interpreter_check(tmp_path: Path) -> None:
    archive = build_agent_zipapp(tmp_path / "bundle")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    workdir = tmp_path / "w"
    workdir.mkdir()
    (workdir / archive.name).write_bytes(archive.read_bytes())
    argv = remote.launch_argv(sys.executable, str(workdir), archive.name, digest, "r1",
                              isolate="inprocess", ready_by_start=True)  # fmt: skip
    res = sh(argv, trial_line())
    assert res.returncode == 0, res.stderr
    _, pid = remote.parse_launch(res.stdout)
    run_dir = workdir / "runs" / "r1"
    assert pid is not None and (run_dir / "agent.pid").read_text().strip() == str(pid)
    assert list(workdir.glob(f"{archive.name}.ready-*")), "the pass is remembered"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the agent runs its trial and says goodbye
        lines = remote.parse_jsonl((run_dir / "events.jsonl").read_text())
        if any(e.get("type") == events.RUN_DONE for e in lines):
            break
        time.sleep(0.2)
    else:
        raise AssertionError((run_dir / "agent.err").read_text())


def test_a_python_that_cannot_run_the_agent_is_named_and_nothing_is_left(tmp_path: Path) -> None:
    archive = build_agent_zipapp(tmp_path / "bundle")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    workdir = tmp_path / "w"
    workdir.mkdir()
    (workdir / archive.name).write_bytes(archive.read_bytes())
    old = tmp_path / "python2"  # starts, but cannot read the agent
    old.write_text("#!/bin/sh\necho 'SyntaxError: invalid syntax' >&2\nexit 1\n")
    old.chmod(0o755)
    for python, why in [(str(tmp_path / "no" / "python3"), "No such file"), (str(old), "Syntax")]:
        argv = remote.launch_argv(python, str(workdir), archive.name, digest, "r1",
                                  ready_by_start=True)  # fmt: skip
        res = sh(argv, trial_line())
        assert res.returncode == remote.EXIT_BAD_PYTHON, res
        assert res.stderr.count("\n") == 1 and why in res.stderr, res.stderr
        assert res.stderr.startswith(f"python '{python}' cannot run on the device (")
        assert not (workdir / "runs" / "r1").exists()  # nothing of the run is left
        assert not list(workdir.glob(f"{archive.name}.ready-*"))
