"""How worker processes start (``ngb.core.trial.worker_start``): by default each is its own fresh
interpreter, an independent draw of a process's level (issue 30); ``auto`` forks them, and
beside other Python threads (pytest-xdist's workers, notebooks) uses a fork server, since a fork
copies locks that those threads hold and the forked worker waits on them forever."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from ngb.core.base.errors import ConfigError
from ngb.core.trial.worker_start import START_ENV, start_method

from tests.cli_helpers import scaled

# A process with a second thread that is stuck inside the import of the model's own module
# (holding that module's import lock), then a tiny trial of that model. A forked worker inherits
# the lock held by a thread that does not exist in it, and waits on it at its own import of the
# module; a worker from the fork server imports the module from scratch.
TRIAL = textwrap.dedent(
    """
    import importlib, json, sys, threading, time
    from pathlib import Path
    from ngb.core.trial.measure import run_trial
    from ngb.core.models.model_sources import parse_input, parse_source
    from ngb.core.records.types import MeasureSettings, TrialSpec
    from ngb.core.trial.worker_start import start_method

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
    env = {**os.environ, START_ENV: "auto"}
    outcome = _trial_beside_a_stuck_import(tmp_path, env, timeout_s=180.0)
    assert outcome["method"] == "forkserver"
    assert outcome["ok"], outcome["error"]


@pytest.mark.slow  # ~15 s quiet: the worker's interpreter imports torch
def test_by_default_each_worker_is_a_fresh_interpreter_even_beside_a_stuck_import(
    tmp_path: Path,
) -> None:
    """The users' default: a fresh interpreter inherits no lock, and imports the model itself."""
    env = {k: v for k, v in os.environ.items() if k != START_ENV}
    outcome = _trial_beside_a_stuck_import(tmp_path, env, timeout_s=180.0)
    assert outcome["method"] == "fresh"
    assert outcome["ok"], outcome["error"]


QUICK: dict[str, Any] = {
    "warmup_iters": 0, "warmup_s": 0.0, "min_iters": 1, "min_duration_s": 0.01,
    "quiet_check_s": 0.0,
}  # fmt: skip


def test_fresh_workers_are_each_their_own_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three workers, three interpreters started side by side before the first one measured,
    each a child of the trial's process (not forked from it), none left behind."""
    import psutil
    from ngb.core.records.types import MeasureSettings, TrialSpec
    from ngb.core.trial.measure import run_trial

    monkeypatch.setenv(START_ENV, "fresh")
    spec = TrialSpec(
        model="m", compiler="noop", compiler_options={"sleep_s": 0.001},
        measure=MeasureSettings(**QUICK, repetitions=6, workers=3),
    )  # fmt: skip
    before = set(psutil.Process().children())
    result = run_trial(spec)
    assert result.ok, result.error
    started = result.extra["worker_start"]
    assert started["method"] == "fresh" and started["interpreters_started"] == 3
    assert started["start_wait_s"] > 0
    assert [r["worker"] for r in result.repetitions] == [0, 0, 1, 1, 2, 2]
    assert "forked from one interpreter" not in (result.verdict_reason or "")
    # every interpreter ran its worker and exited
    assert set(psutil.Process().children()) <= before


def test_a_failed_first_worker_takes_the_idle_interpreters_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import psutil
    from ngb.core.records.types import MeasureSettings, TrialSpec
    from ngb.core.trial.measure import run_trial

    monkeypatch.setenv(START_ENV, "fresh")
    spec = TrialSpec(
        model="m", compiler="noop", compiler_options={"fail": True},
        measure=MeasureSettings(**QUICK, repetitions=2, workers=2),
    )  # fmt: skip
    before = set(psutil.Process().children())
    result = run_trial(spec)
    assert not result.ok and "asked to fail" in (result.error or "")
    assert set(psutil.Process().children()) <= before  # the idle second one too


def test_forked_workers_say_they_share_one_interpreter() -> None:
    """``auto`` forks from one interpreter: the verdict says the interval has not sampled the
    spread a re-run meets (tests/test_calibration.py: such intervals under-cover)."""
    from ngb.core.records.types import MeasureSettings
    from ngb.core.statistics.stopping import judge

    groups = [[100.0, 100.2], [100.1, 99.9], [99.8, 100.0], [100.2, 100.1]]
    forked = judge(groups, MeasureSettings(), one_interpreter=True)
    fresh = judge(groups, MeasureSettings())
    assert forked.verdict == fresh.verdict == "VALID"
    assert "forked from one interpreter" in forked.reason
    assert "forked from one interpreter" not in fresh.reason


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
    monkeypatch.setenv(START_ENV, "auto")
    code = "from ngb.core.trial.worker_start import start_method; print(start_method())"
    alone = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={
        **os.environ, START_ENV: "auto"}, timeout=scaled(120))  # fmt: skip
    assert alone.stdout.strip() == "fork", alone.stderr[-2000:]
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        assert start_method() == "forkserver"
        monkeypatch.delenv(START_ENV)
        assert start_method() == "fresh"  # the users' default
        monkeypatch.setenv(START_ENV, "fork")
        assert start_method() == "fork"
        monkeypatch.setenv(START_ENV, "spawn")
        with pytest.raises(ConfigError, match="NGB_WORKER_START='spawn'"):
            start_method()
    finally:
        stop.set()
        other.join()


def test_while_fresh_interpreters_import_a_cpu_sample_goes_out_every_second(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Issue 46: attached while three fresh interpreters imported, a console showed nothing for
    4 minutes: no event, so no ``state`` snapshot, until a worker reported. Now the trial's
    process samples the CPU every second while it waits (each sample carries a snapshot)."""
    import time

    from ngb.core.records import events
    from ngb.core.records.types import MeasureSettings, TrialSpec
    from ngb.core.trial import workers
    from ngb.core.trial.measure import run_trial

    (tmp_path / "slow_import_ngb_test.py").write_text("import time\ntime.sleep(3.5)\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # the interpreters find it through PYTHONPATH
    plain = workers._fresh_preload
    monkeypatch.setattr(
        workers, "_fresh_preload", lambda spec: [*plain(spec), "slow_import_ngb_test"]
    )
    monkeypatch.setenv(START_ENV, "fresh")
    spec = TrialSpec(
        model="m", compiler="noop", compiler_options={"sleep_s": 0.001},
        measure=MeasureSettings(**QUICK, repetitions=2, workers=1),
    )  # fmt: skip
    seen: list[tuple[float, dict[str, object]]] = []
    result = run_trial(spec, emit=lambda e: seen.append((time.monotonic(), dict(e))))
    assert result.ok, result.error
    assert result.extra["worker_start"]["start_wait_s"] >= 3.0
    first_worker_event = next(
        t for t, e in seen if e.get("worker") == 0 and e["type"] != events.CPU
    )
    waiting = [t for t, e in seen if e["type"] == events.CPU and t < first_worker_event]
    assert len(waiting) >= 3, seen  # 3.5 s of imports: a sample every second
    assert max(b - a for a, b in zip(waiting, waiting[1:], strict=False)) <= 1.5


def test_a_worker_compiles_and_measures_only_once_every_interpreter_has_imported(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Issue 44: worker 0 gets the first interpreter as soon as it has imported, while the rest
    still import (one at a time here), and waits at the gate before its compile: no interpreter
    imports while any worker compiles or measures, and no more than ``parallel`` import at once."""
    import time

    from ngb.core.records import events
    from ngb.core.records.types import MeasureSettings, TrialSpec
    from ngb.core.trial import worker_start, workers
    from ngb.core.trial.measure import run_trial

    (tmp_path / "slow_import_ngb_gate.py").write_text("import time\ntime.sleep(1.0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # the interpreters find it through PYTHONPATH
    plain = workers._fresh_preload
    monkeypatch.setattr(
        workers, "_fresh_preload", lambda spec: [*plain(spec), "slow_import_ngb_gate"]
    )
    monkeypatch.setattr(workers, "import_parallel", lambda: 1)
    started: list[float] = []
    ready: list[float] = []
    init, poll = worker_start.Interpreter.__init__, worker_start.Interpreter.poll_ready

    def counted_init(self: worker_start.Interpreter, preload: list[str]) -> None:
        init(self, preload)
        started.append(time.monotonic())

    def counted_poll(self: worker_start.Interpreter) -> bool:
        was = self.ready
        now = poll(self)
        if now and not was:
            ready.append(time.monotonic())
        return now

    monkeypatch.setattr(worker_start.Interpreter, "__init__", counted_init)
    monkeypatch.setattr(worker_start.Interpreter, "poll_ready", counted_poll)
    monkeypatch.setenv(START_ENV, "fresh")
    spec = TrialSpec(
        model="m", compiler="noop", compiler_options={"sleep_s": 0.001},
        measure=MeasureSettings(**QUICK, repetitions=6, workers=3),
    )  # fmt: skip
    seen: list[tuple[float, dict[str, object]]] = []
    result = run_trial(spec, emit=lambda e: seen.append((time.monotonic(), dict(e))))
    assert result.ok, result.error
    assert len(started) == len(ready) == 3
    # one importing at a time: each started once the one before it was ready
    assert all(s >= r for s, r in zip(started[1:], ready, strict=False))
    compiles = [t for t, e in seen if e["type"] == events.PHASE and e.get("phase") == "compile"]
    assert len(compiles) >= 3 and min(compiles) >= max(ready)
    facts = result.extra["worker_start"]
    assert facts["interpreters_started"] == 3
    # worker 0 started before the other two had imported, and waited for them at the gate
    assert facts["gate_wait_s"] >= 1.0
    assert 0 < facts["import_cpu_s"] < 30


def test_a_block_on_a_plain_compiler_preloads_no_dynamo(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch._dynamo (~1.3 s of CPU an interpreter) only where a worker may import it: its
    compile, an optimisation, a user's model; a timm model imports it anyway (torchvision)."""
    from ngb.core.records.types import TrialSpec
    from ngb.core.trial import workers

    monkeypatch.setattr(workers, "_need_torch", True)
    block = workers._fresh_preload(TrialSpec(model="mha", width=8, compiler="identity"))
    assert "torch" in block and "torch._dynamo" not in block and "timm" not in block
    inductor = workers._fresh_preload(TrialSpec(model="mha", width=8, compiler="inductor"))
    assert "torch._dynamo" in inductor
    timm = workers._fresh_preload(TrialSpec(model="resnet18", compiler="identity"))
    assert "timm" in timm


def test_a_fork_server_preloads_torch_and_what_its_first_trial_needs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fork server imports torch and torch._dynamo (most workers build a model; worker 0's
    MAC count imports torch._dynamo) and timm only for a trial of a timm model."""
    from ngb.core.records.types import TrialSpec
    from ngb.core.trial import workers

    monkeypatch.setattr(workers, "_need_torch", False)  # the noop compiler builds no model
    machinery = workers._server_preload(TrialSpec(model="resnet18", compiler="noop"))
    base = ["ngb.core.trial.measure", "psutil", "torch", "torch._dynamo"]
    assert machinery == base
    monkeypatch.setattr(workers, "_need_torch", True)
    block = workers._server_preload(TrialSpec(model="conv", width=8, compiler="identity"))
    assert block == base
    timm = workers._server_preload(TrialSpec(model="resnet18", compiler="identity"))
    assert timm[:4] == base and "timm" in timm


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_a_forked_trial_preloads_only_what_its_workers_fork_with(
    monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    """Forked from here: psutil (every worker's CPU facts), torch and torch._dynamo (worker 0's
    MAC count imports it), and timm only for a timm model (~0.8 s more of CPU: torchvision).
    From a fork server: psutil only (the parent's meter), the server imported when it
    started."""
    from ngb.core.records.types import TrialSpec
    from ngb.core.trial import workers

    workers.library_versions()  # cached: read before import_module is replaced below
    imported: list[str] = []
    monkeypatch.setattr(workers, "start_method", lambda: method)
    monkeypatch.setattr(workers.importlib, "import_module", imported.append)
    workers.preload(TrialSpec(model="conv", width=8, compiler="identity"), needs_torch=True)
    block = list(imported)
    imported.clear()
    workers.preload(TrialSpec(model="resnet18", compiler="identity"), needs_torch=True)
    if method == "fork":
        assert block == ["psutil", "torch", "torch._dynamo"]
        assert imported == ["psutil", "torch", "timm", "torch._dynamo"]
    else:  # psutil either way: the parent's own meter reads it too
        assert block == ["psutil"] and imported == ["psutil"]


def test_only_worker_0_counts_macs() -> None:
    """Worker 0's record is the trial's; a later worker's count was thrown away, and torch's
    counter imports torch._dynamo in every interpreter (issue 44)."""
    from ngb.core.records.types import TrialResult, TrialSpec
    from ngb.core.trial.measure import _build_model

    spec = TrialSpec(model="conv", width=8, depth=1, compiler="identity")
    later = TrialResult(key=spec.key, spec=spec.to_dict())
    _build_model(spec, later, None, with_macs=False)
    assert later.params and later.macs is None
    first = TrialResult(key=spec.key, spec=spec.to_dict())
    _build_model(spec, first, None)
    assert first.params == later.params and first.macs and first.macs > 0
