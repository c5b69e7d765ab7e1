"""The tests' one way to run ``ngb``, and their subprocess timeouts.

``ngb(*args)`` runs the console script this venv installed (what a user types) in a subprocess,
output captured as text, stdin closed (as pytest's own capture leaves it: no test waits on a
terminal). ``invoke(*args)`` runs the same command in this process (click's runner), for tests
that monkeypatch or want no start-up cost.

``scaled(seconds)`` is a subprocess timeout that grows with the machine's load: a limit that
covers a quiet machine is too short on the 2-core VM under ``make test`` (five xdist processes,
both cores busy, a Python start-up several times slower), where a test then failed on the limit
and not on what it checks. The limit is stretched by the load per core when that is above 1 and
never shortened, up to ``MAX_STRETCH`` so that a hung command still ends the test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from click.testing import CliRunner
from ngb.sweeps.cli import cli

#: the ``ngb`` console script beside the tests' python
NGB = str(Path(sys.executable).with_name("ngb"))
#: the most a timeout is stretched by load (4 x 120 s: a hung command ends within 8 minutes)
MAX_STRETCH = 4.0


def _cores() -> int:
    """The cores this process may run on (a container or taskset may allow fewer than exist)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def scaled(seconds: float) -> float:
    """``seconds`` stretched by the last minute's load per core, between 1x and ``MAX_STRETCH``."""
    try:
        per_core = os.getloadavg()[0] / _cores()
    except OSError:  # no load average on this platform: today's limit
        return seconds
    return seconds * min(max(per_core, 1.0), MAX_STRETCH)


def ngb_argv(*args: str) -> list[str]:
    """The command line of ``ngb args...`` (for ``subprocess.Popen`` in tests that stream)."""
    return [NGB, *args]


def ngb(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``ngb args...`` in a subprocess; ``env``: its whole environment (default: this one's),
    ``timeout``: seconds on a quiet machine (``scaled``)."""
    return subprocess.run(  # noqa: S603 - our own CLI
        ngb_argv(*args), env=None if env is None else dict(env), capture_output=True, text=True,
        timeout=scaled(timeout), stdin=subprocess.DEVNULL,
    )  # fmt: skip


def invoke(*args: str, cwd: Path | None = None) -> tuple[int, str, str]:
    """``ngb args...`` in this process, from ``cwd`` (a model file's folder) when given:
    (exit code, stdout, stderr); an exception propagates with its traceback."""
    old = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    finally:
        os.chdir(old)
    return result.exit_code, result.stdout, result.stderr
