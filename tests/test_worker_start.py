"""Worker processes started safely from a process with other Python threads (pytest-xdist's
workers, notebooks): a fork copies locks that those threads hold, and the forked worker waits
on them forever; ``ngb.core.worker_start`` switches to a fork server there."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from ngb.core.errors import ConfigError
from ngb.core.worker_start import START_ENV, start_method

# A process with a second thread that is stuck inside the import of the model's own module
# (holding that module's import lock), then a tiny trial of that model. A forked worker inherits
# the lock held by a thread that does not exist in it, and waits on it at its own import of the
# module; a worker from the fork server imports the module from scratch.
TRIAL = textwrap.dedent(
    """
    import importlib, json, sys, threading, time
    from pathlib import Path
    from ngb.core.measure import run_trial
    from ngb.core.model_sources import parse_input, parse_source
    from ngb.core.types import MeasureSettings, TrialSpec
    from ngb.core.worker_start import start_method

    base = Path(sys.argv[1])
    sys.path.insert(0, str(base))
    hog = threading.Thread(
        target=importlib.import_module, args=("blocker.net",), name="hog", daemon=True
    )
    hog.start()
    time.sleep(0.3)  # it is inside blocker.net's import now, and stays there
    spec = TrialSpec(
        model="blocker", compiler="identity", batch=1,
        source=parse_source(
            "blocker.net:make", inputs=(parse_input("x:batch,4"),), base_dir=base
        ).to_dict(),
        measure=MeasureSettings(
            repetitions=2, workers=1, min_iters=1, min_duration_s=0.01, warmup_iters=0,
            warmup_s=0.0, quiet_check_s=0.0, timeout_s=float(sys.argv[2]),
        ),
    )
    result = run_trial(spec)
    print(json.dumps({"method": start_method(), "ok": result.ok, "error": result.error}))
    """
)
NET = textwrap.dedent(
    """
    import threading

    import torch

    if threading.current_thread().name == "hog":
        threading.Event().wait()  # a slow import in another thread, caught mid-way


    def make():
        return torch.nn.Linear(4, 2)
    """
)


def _trial_beside_a_stuck_import(tmp_path: Path, env: dict[str, str], timeout_s: float) -> dict:
    (tmp_path / "blocker").mkdir()
    (tmp_path / "blocker" / "__init__.py").write_text("")
    (tmp_path / "blocker" / "net.py").write_text(NET)
    out = subprocess.run(
        [sys.executable, "-c", TRIAL, str(tmp_path), str(timeout_s)],
        capture_output=True, text=True, timeout=timeout_s + 120, env=env,
    )  # fmt: skip
    lines = out.stdout.strip().splitlines()
    assert lines, out.stderr[-2000:]
    import json

    return json.loads(lines[-1])


def test_a_trial_beside_another_thread_measures_from_a_fork_server(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != START_ENV}
    outcome = _trial_beside_a_stuck_import(tmp_path, env, timeout_s=180.0)
    assert outcome["method"] == "forkserver"
    assert outcome["ok"], outcome["error"]


def test_a_forked_worker_inherits_the_stuck_import(tmp_path: Path) -> None:
    """The hazard itself, so the test above keeps testing something: forced to fork, the same
    trial's worker waits on the import lock until the trial's timeout."""
    env = {**os.environ, START_ENV: "fork"}
    # a forked worker reaches the model's import well inside a second: 8 s is the wait for
    # a worker that will never come back, not a race with a slow one
    outcome = _trial_beside_a_stuck_import(tmp_path, env, timeout_s=8.0)
    assert outcome["method"] == "fork"
    assert not outcome["ok"] and "timed out" in (outcome["error"] or "")


def test_start_method_follows_the_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(START_ENV, raising=False)
    code = "from ngb.core.worker_start import start_method; print(start_method())"
    alone = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={
        k: v for k, v in os.environ.items() if k != START_ENV}, timeout=120)  # fmt: skip
    assert alone.stdout.strip() == "fork", alone.stderr[-2000:]
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        assert start_method() == "forkserver"
        monkeypatch.setenv(START_ENV, "fork")
        assert start_method() == "fork"
        monkeypatch.setenv(START_ENV, "spawn")
        with pytest.raises(ConfigError, match="NGB_WORKER_START='spawn'"):
            start_method()
    finally:
        stop.set()
        other.join()
