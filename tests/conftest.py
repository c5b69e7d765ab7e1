"""Shared pytest fixtures, kept minimal: other parts add theirs in their own helper modules."""

from __future__ import annotations

import atexit
import gc
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

# One OpenMP thread in the test process: tests run torch ops here and then call run_trial, which
# forks its workers from this process, and libgomp's thread pool does not survive a fork (the
# forked worker's first parallel op waits forever at a barrier for threads that are not there;
# seen 2026-11-25 in gdb: gomp_team_barrier_wait_end). Set before anything imports torch.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Workers forked from the test process (or a fork server), not each its own fresh interpreter
# (ngb.core.trial.worker_start: the users' default, ~2-7 s of imports a worker): cheap for the
# suite; tests/test_worker_start.py runs the fresh ones.
os.environ.setdefault("NGB_WORKER_START", "auto")

pytest_plugins = ["tests.sshd", "tests.slurm"]  # real sshd; a one-machine Slurm cluster

ROOT = Path(__file__).resolve().parents[1]


#: a full collection ran during the test that is ending (``_note_full_collection``)
_full_collection_ran = False


def _note_full_collection(phase: str, info: dict[str, int]) -> None:
    global _full_collection_ran
    if phase == "stop" and info.get("generation") == 2:
        _full_collection_ran = True


@pytest.hookimpl(trylast=True)
def pytest_runtest_logfinish() -> None:
    """Between two tests, once a full collection has run, collect and then move what survived
    out of the collector's sight (``gc.freeze``): later full collections walk only what was made
    since.

    Why: a test process imports torch, timm, Textual, TVM, OpenVINO and matplotlib, ~2 million
    objects the collector walked again at every full collection (0.3-0.6 s each, ~40 of them in
    the busiest xdist worker) and five times more at exit (pytest's ``gc_collect_harder``): 19 of
    the busiest worker's 107 CPU-s and ~42 CPU-s over the four (2026-11-29, a ``gc.callbacks``
    timer in ``make test``). Four of the heaviest files in one process, freezing after every full
    collection: 93.4 CPU-s with the default, 74.2 with it (collector 16.3 -> 3.8 CPU-s, peak
    memory 1.08 -> 1.27 GB), 77.2 with this between-tests version (collector 6.0, 1.07 GB).
    make test: 365.6 s and 694.7 busy CPU-s before, 340.1-341.6 s and 637-648 after.
    Only between tests, after a collection: frozen mid-test, a running test's objects that later
    became garbage in a reference cycle (an open DuckDB cursor, say) would never be collected in
    this process. What is frozen here is what outlives a test: imported modules, caches, module
    and session fixtures. Of those, what later becomes garbage only through a reference cycle
    stays in memory (nothing here relies on the collector: no test calls ``gc``, and ngb closes
    its files and connections explicitly, which the store's lock tests check)."""
    global _full_collection_ran
    if _full_collection_ran:
        gc.collect()
        gc.freeze()
        _full_collection_ran = False


#: this process: a child forked from it (a trial's worker) runs the same exit handler
_THIS_PROCESS = os.getpid()


def _leave_at_exit() -> None:
    """At exit:

    - an xdist worker (this very process, not a child forked from it, whose exit status is its
      own) leaves at once (``os._exit``): its last report went to the controller with its
      ``sessionfinish``, and the controller waits only for it to end, 10 s at most, then kills
      it (xdist's ``EXIT_TIMEOUT``). Tearing down ~2 million objects took each worker 3 s, four
      at once ran into that limit (the run ended 10 s after the last worker's last test,
      2026-11-29). Logging is shut down and both streams flushed first;
    - any other process lets the frozen objects rejoin the collector, so the interpreter's last
      collection frees them (DuckDB's and Triton's bindings print what was never freed)."""
    gc.callbacks.remove(_note_full_collection)
    if os.environ.get("PYTEST_XDIST_WORKER") and os.getpid() == _THIS_PROCESS:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    gc.unfreeze()


gc.callbacks.append(_note_full_collection)
atexit.register(_leave_at_exit)


def pytest_configure(config: pytest.Config) -> None:
    """Refuse to test another checkout's sources. An editable install pins absolute paths, so a
    venv copied from (or shared with) another clone would silently run that clone's code here.
    ``make wheel-test`` sets NGB_TEST_INSTALLED=1: there the installed wheel is the point."""
    import ngb.core

    where = Path(ngb.core.__file__).resolve()
    if os.environ.get("NGB_TEST_INSTALLED") == "1":
        if ROOT in where.parents:
            raise pytest.UsageError(f"NGB_TEST_INSTALLED=1 but ngb.core comes from {where}")
    elif ROOT not in where.parents:
        raise pytest.UsageError(
            f"ngb.core is imported from {where}, not from this checkout ({ROOT}); "
            "reinstall it here: make setup (or pip install --no-deps -e .)"
        )
    else:
        # Here the checkout's own ngb/ (on sys.path as the working folder) wins, but the `ngb`
        # subprocesses many tests start elsewhere import what the install points at.
        installed = _installed_ngb()
        if ROOT not in installed.parents:
            raise pytest.UsageError(
                f"this venv's installed ngb is {installed}, another checkout's: the tests' ngb "
                f"subprocesses would run it; reinstall it here: make setup "
                "(or pip install --no-deps -e .)"
            )
    if getattr(config, "workerinput", None) is None and config.getoption("numprocesses", None):
        # the xdist controller, before its workers start: each would rewrite every test
        # module's asserts itself where the cache is cold (a fresh clone), tests/rewrite_once.py
        from tests.rewrite_once import write_rewritten

        write_rewritten(sorted((ROOT / "tests").glob("test_*.py")), config)


# The test files that take longest, longest first (seconds of test time each in a `make test`
# on the 2-core VM, 2026-11-29, four xdist workers). pytest-xdist's --dist loadfile hands whole
# files to its processes in queue order, which it sorts by test count unless told
# --no-loadscope-reorder (the Makefile does): then test_orchestrator.py started a minute in and
# other files ran alone at the end. Started first, the long files leave the short ones to fill
# in around them (with the list of 2026-11-26, test_workers.py, 14 s, ran alone at the end: the
# last worker finished 10-13 s after the others). A file missing here keeps its place after
# them: this only orders, it never selects.
LONGEST_FILES_FIRST = (
    # 21 s here, but 123 s in `make test-all` for one test (a storm of followers killed and
    # restarted), which alphabetical order handed out among the last files
    "test_store_followers.py",
    "test_orchestrator.py",  # 83 s: CLI processes, local agents, detach/attach
    "test_bad_inputs.py",  # 69 s
    "test_tui_snapshots.py",  # 65 s
    "test_own_models.py",  # 57 s
    "test_artifacts.py",  # 50 s: own models over a real sshd
    "test_history.py",  # 47 s: a real 4 + 4 history
    "test_store.py",  # 44 s
    "test_worker_start.py",  # 41 s
    "test_faults.py",  # 41 s: agents killed mid-sweep
    "test_serve_cli.py",  # 38 s
    "test_tui_console.py",  # 38 s
    "test_figures.py",  # 36 s
    "test_api.py",  # 31 s
    "test_tui_app.py",  # 29 s
    "test_loadgen.py",  # 28 s
    "test_agent.py",  # 27 s
    "test_accuracy_shipping.py",  # 27 s
    "test_tvm.py",  # 26 s: MetaSchedule tuning
    "test_accuracy_pass.py",  # 24 s
    "test_tui_sql.py",  # 23 s
    "test_followers.py",  # 20 s
    "test_dlas_zoo.py",  # 17 s
    "test_paper_pages.py",  # 16 s
    "test_cli_refused.py",  # 16 s
    "test_algorithms_axis.py",  # 16 s
    "test_workers.py",  # 14 s
    "test_tui_live.py",  # 14 s
    "test_tui_fit.py",  # 13 s
    "test_fleet_cleanup.py",  # 12 s
    "test_tui_query_run.py",  # 11 s
    "test_algorithms.py",  # 11 s
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest files first (``LONGEST_FILES_FIRST``); the rest keep their order after them."""
    rank = {name: i for i, name in enumerate(LONGEST_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: order kept within


def _installed_ngb() -> Path:
    """Where ``import ngb`` leads in a fresh interpreter outside the checkout (``-P``: the
    working folder is not on sys.path), as in the tests' ``ngb`` subprocesses."""
    code = "import importlib.util as u; print(u.find_spec('ngb').origin)"
    out = subprocess.run(
        [sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=60, cwd="/"
    )
    return Path(out.stdout.strip() or "/nowhere").resolve()


@pytest.fixture(autouse=True)
def ngb_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point NGB_HOME at a fresh folder so no test reads or writes the real config/data/cache."""
    home = tmp_path_factory.mktemp("ngb-home")
    monkeypatch.setenv("NGB_HOME", str(home))
    monkeypatch.delenv("NGB_DB", raising=False)
    return home
