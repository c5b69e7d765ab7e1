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


def installed(tmp_path: Path) -> tuple[Path, Path, str]:
    """A work dir with the agent in place: (work dir, agent, its sha256)."""
    archive = build_agent_zipapp(tmp_path / "bundle")
    workdir = tmp_path / "w"
    workdir.mkdir()
    (workdir / archive.name).write_bytes(archive.read_bytes())
    return workdir, workdir / archive.name, hashlib.sha256(archive.read_bytes()).hexdigest()


def first_start(workdir: Path, agent: Path, digest: str, python: str) -> list[str]:
    return remote.launch_argv(python, str(workdir), agent.name, digest, "r1",
                              isolate="inprocess", ready_by_start=True)  # fmt: skip


def shim(tmp_path: Path, body: str) -> str:
    """A "python" that does what ``body`` says instead of running the agent."""
    path = tmp_path / "python-shim"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_the_started_agent_is_the_interpreter_check(tmp_path: Path) -> None:
    workdir, archive, digest = installed(tmp_path)
    res = sh(first_start(workdir, archive, digest, sys.executable), trial_line())
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
    workdir, archive, digest = installed(tmp_path)
    old = shim(tmp_path, "echo 'SyntaxError: invalid syntax' >&2\nexit 1\n")  # cannot read it
    for python, why in [(str(tmp_path / "no" / "python3"), "No such file"), (old, "Syntax")]:
        res = sh(first_start(workdir, archive, digest, python), trial_line())
        assert res.returncode == remote.EXIT_BAD_PYTHON, res
        assert res.stderr.count("\n") == 1 and why in res.stderr, res.stderr
        assert res.stderr.startswith(f"python '{python}' cannot run on the device (")
        assert not (workdir / "runs" / "r1").exists()  # nothing of the run is left
        assert not list(workdir.glob(f"{archive.name}.ready-*"))


def finished_run(workdir: Path, archive: Path, digest: str) -> Path:
    """Run r1 started and finished by a first start whose answer (and pass marker) were lost."""
    res = sh(first_start(workdir, archive, digest, sys.executable), trial_line())
    assert res.returncode == 0, res.stderr
    run_dir = workdir / "runs" / "r1"
    deadline = time.monotonic() + scaled(60)
    while (run_dir / "agent.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.1)  # the agent ends: its pid file goes
    assert not (run_dir / "agent.pid").exists(), (run_dir / "agent.err").read_text()
    for marker in workdir.glob(f"{archive.name}.ready-*"):
        marker.unlink()  # the first start's shell was cut off with its link before it wrote it
    return run_dir


def test_a_second_start_of_a_finished_run_keeps_its_results(tmp_path: Path) -> None:
    """The second agent finds every trial done and ends between two looks at its pid file: that
    is not a python that cannot run the agent, and the run dir stays (it was removed, with the
    checkpoint, and the follower failed the device: "the run directory ... vanished")."""
    workdir, archive, digest = installed(tmp_path)
    run_dir = finished_run(workdir, archive, digest)
    checkpoint = (run_dir / "checkpoint.jsonl").read_text()
    assert checkpoint
    quick = shim(tmp_path, 'echo \'{"type": "run_done", "note": "nothing left"}\'\n')
    res = sh(first_start(workdir, archive, digest, quick), trial_line())
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    assert (run_dir / "checkpoint.jsonl").read_text() == checkpoint
    assert "nothing left" in (run_dir / "events.jsonl").read_text()


def test_a_second_start_beside_a_live_agent_of_the_run_answers_that_agent(tmp_path: Path) -> None:
    """An earlier start's agent (its answer lost) took the checkpoint's lock while the second
    one imported: the second exits "another agent is running", the first's pid is the answer."""
    workdir, archive, digest = installed(tmp_path)
    run_dir = finished_run(workdir, archive, digest)
    first = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "r1"])
    try:
        lost = shim(tmp_path, f'echo {first.pid} > "{run_dir}/agent.pid"\n'
                              'echo "error: another agent is running" >&2\nexit 2\n')  # fmt: skip
        res = sh(first_start(workdir, archive, digest, lost), trial_line())
        assert res.returncode == 0, res.stderr
        assert remote.parse_launch(res.stdout)[1] == first.pid
        assert (run_dir / "checkpoint.jsonl").exists()
    finally:
        first.kill()
        first.wait()


def test_a_python_that_cannot_run_the_agent_leaves_an_earlier_agents_results(
    tmp_path: Path,
) -> None:
    workdir, archive, digest = installed(tmp_path)
    run_dir = finished_run(workdir, archive, digest)
    broken = shim(tmp_path, "echo 'SyntaxError: invalid syntax' >&2\nexit 1\n")
    res = sh(first_start(workdir, archive, digest, broken), trial_line())
    assert res.returncode == remote.EXIT_BAD_PYTHON, res
    assert (
        res.stderr == f"python '{broken}' cannot run on the device (SyntaxError: invalid syntax)\n"
    )
    assert (run_dir / "checkpoint.jsonl").read_text()
