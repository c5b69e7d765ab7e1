"""The xdist controller caches the test modules' rewritten asserts once (``tests/rewrite_once.py``):
its workers then read that cache instead of each rewriting every module themselves."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cli_helpers import scaled
from tests.rewrite_once import cached_pyc, stale, write_rewritten

ROOT = Path(__file__).resolve().parents[1]


def modules(folder: Path, n: int = 3) -> list[Path]:
    folder.mkdir(exist_ok=True)
    paths = []
    for i in range(n):
        path = folder / f"test_m{i}.py"
        path.write_text(f"def test_{i}():\n    x = {i}\n    assert x + 1 == {i + 1}, 'sum'\n")
        paths.append(path)
    return paths


@pytest.fixture
def writes_bytecode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # the sandbox's shell may set it


@pytest.mark.usefixtures("writes_bytecode")
def test_stale_modules_get_pytests_rewritten_code_once(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    mods = modules(tmp_path / "t")
    assert stale(mods) == mods
    assert write_rewritten(mods, request.config) == mods
    assert stale(mods) == []
    from _pytest.assertion.rewrite import _read_pyc

    for module in mods:
        pyc = cached_pyc(module)
        assert pyc is not None and pyc.parent == module.parent / "__pycache__"
        code = _read_pyc(module, pyc)
        assert code is not None and "@pytest_ar" in code.co_names  # asserts rewritten
    assert write_rewritten(mods, request.config) == []  # fresh: nothing to do
    mods[1].write_text(mods[1].read_text() + "\n\ndef test_more():\n    assert 2 > 1\n")
    os.utime(mods[1], (1, 1))  # an edit the cache's mtime check must see
    assert stale(mods) == [mods[1]]
    assert write_rewritten(mods, request.config) == [mods[1]]


def test_nothing_is_written_where_bytecode_is_not(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    mods = modules(tmp_path / "t")
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert write_rewritten(mods, request.config) == []
    assert not (tmp_path / "t" / "__pycache__").exists()


# The controller's conftest here does what tests/conftest.py does; every process of the run logs
# each module pytest itself rewrites, so the workers' own rewriting shows.
_CONFTEST = """
import os
from pathlib import Path

from _pytest.assertion import rewrite

_rewrite_test = rewrite._rewrite_test


def logged(fn, config):
    who = getattr(config, "workerinput", {}).get("workerid", "controller")
    with open(os.environ["REWRITE_LOG"], "a") as log:
        print(who, Path(fn).name, file=log)
    return _rewrite_test(fn, config)


rewrite._rewrite_test = logged


def pytest_configure(config):
    if getattr(config, "workerinput", None) is None and config.getoption("numprocesses", None):
        from tests.rewrite_once import write_rewritten

        write_rewritten(sorted(Path(__file__).parent.glob("test_*.py")), config)
"""


@pytest.mark.parametrize("cache", ["cold", "none"])
def test_xdist_workers_read_what_the_controller_wrote(tmp_path: Path, cache: str) -> None:
    """``cold``: the controller rewrites (split with a forked child), the two workers rewrite
    nothing. ``none`` (the controller's step left out): each worker rewrites every module, which
    is what a fresh clone's first make test did."""
    project = tmp_path / "p"
    mods = modules(project, n=6)
    conftest = _CONFTEST if cache == "cold" else _CONFTEST.split("\n\ndef pytest_configure")[0]
    (project / "conftest.py").write_text(textwrap.dedent(conftest))
    log = tmp_path / "rewrites.log"
    # not this run's bytecode setting, nor its xdist worker's variables (make test's own workers)
    env = {k: v for k, v in os.environ.items()
           if k != "PYTHONDONTWRITEBYTECODE" and not k.startswith("PYTEST_")}  # fmt: skip
    env.update(REWRITE_LOG=str(log), PYTHONPATH=str(ROOT))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider",
         "-p", "no:randomly", str(project)],
        cwd=project, env=env, capture_output=True, text=True, timeout=scaled(120),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "6 passed" in run.stdout
    lines = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
    by_workers = sorted(name for who, name in lines if who != "controller")
    written = sorted(name for who, name in lines if who == "controller")
    names = sorted(m.name for m in mods)
    if cache == "cold":
        # the forked child's rewrites log as the controller's too
        assert written == names and by_workers == [], lines
    else:
        # each module by a worker (by both where they overlap, as four did on a fresh clone's
        # 145 modules; these tiny ones are done before the second worker looks)
        assert written == [] and set(by_workers) == set(names), lines
    assert stale(mods) == []
