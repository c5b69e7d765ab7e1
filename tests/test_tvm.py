"""TVM backends: ``tvm`` (Relax, untuned) and ``tvm-ms`` (MetaSchedule-tuned).

The untuned builds of the project's own conv and MHA blocks, the tuning plan, milestones and
provenance are in the fast set; every real MetaSchedule search (its builder and runner worker
processes, our task scheduler and measure callback; ~45 s each on the shared 2-core machine) is
slow: the 4-trial search with its reuse, the early stop, and a 3-worker trial that tunes once.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ngb.core.base.errors import ConfigError, NgbError
from ngb.core.compilers import CompileContext, get_compiler
from ngb.core.compilers.tvm_ms import TvmMetaScheduleConfig
from ngb.core.compilers.tvm_tuning import (
    TuningProgress,
    TuningStore,
    plan_tuning,
    provenance,
    provenance_line,
)

# Looked up, not imported: importing TVM costs ~1.2 s, and every pytest-xdist process collects
# this file while only one of them runs it.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("tvm") is None, reason="TVM not installed")
torch = pytest.importorskip("torch")

RTOL = ATOL = 1e-3


def block(kind: str, width: int, depth: int = 1, batch: int = 2, size: int = 8) -> tuple[Any, Any]:
    """One of the paper's blocks via the project's model factory, small enough for a unit test."""
    from ngb.core.models.models import create_model
    from ngb.core.records.types import TrialSpec

    torch.manual_seed(0)
    spec = TrialSpec(
        model=kind, compiler="tvm", width=width, depth=depth, batch=batch, input_size=size
    )
    model, example = create_model(spec)
    return model.eval(), example


def eager(model: Any, example: Any) -> np.ndarray:
    with torch.no_grad():
        return model(example).numpy()


def recorder() -> tuple[list[tuple[str, dict]], Any]:
    events: list[tuple[str, dict]] = []

    def emit(type_: str, **fields: Any) -> None:
        events.append((type_, fields))

    return events, emit


# ---------------------------------------------------------------- config (no TVM work)


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("tvm", {"target": "opencl"}, "target must be one of"),
        ("tvm", {"opt_level": 7}, "opt_level must be one of"),
        ("tvm", {"num_cores": 0}, "num_cores must be an integer >= 1"),
        ("tvm", {"mattr": 3}, "mattr must be a list"),
        ("tvm", {"bogus": 1}, "unknown option 'bogus'"),
        ("tvm-ms", {"max_trials_global": 0}, "max_trials_global must be an integer >= 1"),
        ("tvm-ms", {"early_stop": -5}, "early_stop must be an integer >= 1"),
        ("tvm-ms", {"reuse_database": "no"}, "reuse_database must be true or false"),
        ("tvm-ms", {"cost_model": "mlp"}, "cost_model must be one of"),
        ("tvm-ms", {"build_timeout_s": 0}, "build_timeout_s must be a number > 0"),
    ],
)
def test_bad_options_are_config_errors(name: str, options: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        get_compiler(name, options)


def test_config_defaults_follow_the_paper_and_mattr_accepts_a_comma_string() -> None:
    cfg = TvmMetaScheduleConfig.from_options({"mattr": "+avx2, +fma"})
    assert cfg.mattr == ("+avx2", "+fma")
    assert (cfg.max_trials_global, cfg.early_stop) == (1500, 150)
    assert cfg.reuse_database is True


def test_target_that_does_not_match_the_device_is_refused(tmp_path: Path) -> None:
    model, example = block("conv", 4)
    ctx = CompileContext(workdir=tmp_path, device="cuda")
    with pytest.raises(ConfigError, match="does not match device 'cuda'"):
        get_compiler("tvm", {"target": "llvm"}).compile(model, example, ctx)


# ---------------------------------------------------------------- progress and early stop


def test_progress_counts_trials_and_stops_after_the_window_without_improvement() -> None:
    events, emit = recorder()
    prog = TuningProgress(["a", "b"], [1.0, 2.0], budget=100, early_stop=3, emit=emit)
    prog.record(0, [0.004, 0.002])  # both improve task a (inf -> 4 ms -> 2 ms)
    prog.record(1, [None, 0.001])  # a failed candidate, then task b's first result
    assert prog.trials_done == 4 and prog.valid_trials == 3
    assert prog.since_improvement == 0 and not prog.should_stop()
    # weighted sum of bests: 1 * 2 ms + 2 * 1 ms
    assert prog.estimated_ms == pytest.approx(4.0)
    prog.record(0, [0.003, 0.005])  # no improvement: 2 trials
    assert not prog.should_stop()
    prog.record(1, [0.002])  # third trial without improvement
    assert prog.should_stop() and prog.stopped_early
    prog.emit()
    type_, fields = events[-1]
    assert type_ == "tuning" and fields["trials_done"] == 7 and fields["budget"] == 100
    assert [t["trials"] for t in fields["tasks"]] == [4, 3]
    assert fields["tasks"][0]["best_ms"] == pytest.approx(2.0)


def test_no_early_stop_when_disabled_and_failed_tasks_rank_last() -> None:
    prog = TuningProgress(["ok", "broken"], [1.0, 1.0], budget=10, early_stop=None)
    prog.record(0, [0.002, 0.003, 0.004, 0.005])
    prog.record(1, [None, None])
    assert not prog.should_stop()
    assert prog.score(1) == -math.inf < prog.score(0)
    assert math.isnan(TuningProgress(["x"], [1.0], budget=1, early_stop=1).estimated_ms)


@pytest.mark.parametrize(
    ("meta", "budget", "expected"),
    [
        ({}, 64, (0, 64)),  # nothing stored: full budget
        ({"trials": 64, "complete": True}, 64, (64, 0)),  # finished: reuse, no tuning
        ({"trials": 10, "complete": True, "early_stopped": True}, 64, (10, 0)),
        ({"trials": 20, "complete": False}, 64, (20, 44)),  # interrupted: resume the rest
        ({"trials": 64, "complete": True}, 100, (64, 36)),  # bigger budget: tune the difference
        # MetaSchedule ran out of candidates short of the budget: more trials find nothing new
        ({"trials": 30, "complete": True, "exhausted": True}, 64, (30, 0)),
    ],
)
def test_plan_tuning(meta: dict, budget: int, expected: tuple[int, int]) -> None:
    assert plan_tuning(meta, budget) == expected


def test_store_meta_needs_records_and_survives_rewrites(tmp_path: Path) -> None:
    store = TuningStore(tmp_path / "db")
    store.write_meta(trials=5, complete=False)
    assert store.meta() == {}  # meta without tuning records is not trusted
    store.record_path.write_text('[0, ["x"]]\n')
    store.write_meta(trials=8, complete=True)
    meta = store.meta()
    assert meta["trials"] == 8 and meta["complete"] is True
    assert not list(store.dir.glob("*.tmp"))
    store.meta_path.write_text("{broken")
    assert store.meta() == {}


def test_store_counts_records_and_clears(tmp_path: Path) -> None:
    store = TuningStore(tmp_path / "db")
    assert store.record_count() == 0
    store.record_path.parent.mkdir(parents=True)
    store.record_path.write_text('[0, ["a"]]\n[0, ["b"]]\n\n')
    store.write_meta(trials=2, complete=True)
    assert store.record_count() == 2 and store.meta()["trials"] == 2
    store.clear()
    assert store.record_count() == 0 and store.meta() == {}


def test_provenance_says_which_run_tuned_and_how_well() -> None:
    meta: Any = {"run_id": "paper-1", "trials": 64, "best_ms": 105.43, "updated": 0.0}
    assert provenance_line(meta) == "tuning reused from run paper-1, 64 trials, best 105.4 ms"
    meta = {"trials": 10, "early_stopped": True, "updated": 0.0}
    line = provenance_line(meta)
    assert line.startswith("tuning reused from a search of ") and line.endswith("early-stopped")
    assert provenance(meta, True)["reused"] is True


def test_milestones_log_quarters_new_bests_and_the_end() -> None:
    events, emit = recorder()
    prog = TuningProgress(["a"], [1.0], budget=8, early_stop=3, emit=emit)
    prog.record(0, [0.010, 0.009])  # 25 %: the first best is no news
    prog.log_milestones()
    prog.record(0, [0.005, 0.006])  # 50 %, and a best 44 % lower
    prog.log_milestones()
    prog.record(0, [0.007, 0.008, 0.009])  # four without improvement (0.006 too): early stop
    assert prog.should_stop()
    prog.log_milestones(done=True)
    lines = [f["msg"] for t, f in events if t == "log"]
    assert lines[0] == "tuning 25%: 2/8 trials, best 9.000 ms"
    assert "tuning 50%: 4/8 trials, best 5.000 ms" in lines
    assert "tuning: new best 5.000 ms at trial 4" in lines
    assert lines[-1].startswith("tuning early stop after 4 trials without a better one: 7/8")
    prog.emit()
    event = [f for t, f in events if t == "tuning"][-1]
    assert event["since_improvement"] == 4 and event["early_stop"] == 3
    assert event["history"] == [[2, 9.0], [4, 5.0], [7, 5.0]]


# ---------------------------------------------------------------- untuned builds


@pytest.mark.parametrize(("kind", "width"), [("conv", 8), ("mha", 16)])
def test_untuned_tvm_matches_eager(kind: str, width: int, tmp_path: Path) -> None:
    model, example = block(kind, width, depth=2)
    ctx = CompileContext(workdir=tmp_path, threads=1)
    compiled = get_compiler("tvm").compile(model, example, ctx)
    try:
        np.testing.assert_allclose(
            compiled.output_numpy(), eager(model, example), rtol=RTOL, atol=ATOL
        )
        assert {"export", "compile"} <= set(ctx.phases) and "tune" not in ctx.phases
        target = json.loads(compiled.extra["target"])
        assert target["kind"] == "llvm" and target["num-cores"] == 1
        # TVM sizes its pool once per process, so in this shared test process the recorded count
        # is whatever the pool really has; test_threads_are_honoured_in_a_fresh_process covers
        # the agent's case (one process per trial).
        import tvm_ffi

        assert compiled.extra["threads"] == tvm_ffi.get_global_func("runtime.NumThreads")()
        assert compiled.timed_loop(min_iters=3, min_duration_s=0.0).iters == 3
    finally:
        compiled.close()


def test_threads_are_honoured_in_a_fresh_process(tmp_path: Path) -> None:
    import subprocess
    import sys

    env = {**os.environ, "NGB_HOME": str(tmp_path)}
    env.pop("TVM_NUM_THREADS", None)
    cmd = [
        sys.executable,
        "-m",
        "ngb.sweeps.cli",
        "measure",
        "conv",
        "--width",
        "8",
        "-c",
        "tvm",
        "-b",
        "1",
        "--threads",
        "1",
        "--repetitions",
        "1",
        "--min-duration",
        "0",
        "--json",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["status"] == "ok" and result["extra"]["threads"] == 1


def test_unsupported_model_gives_a_clear_error(tmp_path: Path) -> None:
    class Eigen(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return torch.linalg.eigvals(x).real

    with pytest.raises(NgbError, match="^tvm: cannot import the model"):
        get_compiler("tvm").compile(Eigen(), torch.randn(2, 3, 3), CompileContext(tmp_path))


# ---------------------------------------------------------------- MetaSchedule tuning

TINY_TUNING = {
    "max_trials_global": 4,
    "num_trials_per_iter": 2,
    "early_stop": None,
    "population_size": 16,
    "seed": 0,
    "build_timeout_s": 300.0,
    "run_timeout_s": 120.0,
}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_tvm_ms_tunes_reports_progress_and_reuses_its_database(tmp_path: Path) -> None:
    model, example = block("conv", 8, depth=1, batch=1)
    cache = tmp_path / "cache"

    events, emit = recorder()
    ctx = CompileContext(workdir=tmp_path / "w1", cache_dir=cache, emit=emit, threads=2)
    first = get_compiler("tvm-ms", TINY_TUNING).compile(model, example, ctx)
    np.testing.assert_allclose(first.output_numpy(), eager(model, example), rtol=RTOL, atol=ATOL)
    assert {"export", "tune", "compile"} <= set(ctx.phases)

    tuning = [f for t, f in events if t == "tuning"]
    done = [f["trials_done"] for f in tuning]
    assert len(tuning) >= 2 and done == sorted(done) and done[0] == 0
    assert all(f["budget"] == 4 for f in tuning)
    assert 0 < done[-1] <= 4 and done[-1] == first.extra["trials_run"]
    assert tuning[-1]["tasks"] and tuning[-1]["tasks"][0]["trials"] > 0
    assert first.extra["trials_valid"] > 0 and first.extra["tuning_reused"] is False
    db = Path(first.extra["database"])
    assert db.parent.parent == cache and (db / "database_tuning_record.json").stat().st_size > 0
    meta = json.loads((db / "meta.json").read_text())
    assert meta["complete"] is True and meta["trials"] == first.extra["trials_run"]

    # Same model structure (fresh random weights), batch and target: served from the database.
    model2, example2 = block("conv", 8, depth=1, batch=1)
    events2, emit2 = recorder()
    ctx2 = CompileContext(workdir=tmp_path / "w2", cache_dir=cache, emit=emit2, threads=2)
    second = get_compiler("tvm-ms", TINY_TUNING).compile(model2, example2, ctx2)
    assert second.extra["database"] == str(db)
    assert second.extra["tuning_reused"] is True and second.extra["trials_run"] == 0
    assert second.extra["trials_before"] == first.extra["trials_run"]
    assert all(f["trials_done"] == 0 for t, f in events2 if t == "tuning")
    np.testing.assert_allclose(second.output_numpy(), eager(model2, example2), rtol=RTOL, atol=ATOL)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_tvm_ms_early_stop_ends_the_search_before_the_budget(tmp_path: Path) -> None:
    model, example = block("conv", 8, depth=1, batch=1)
    options = {**TINY_TUNING, "max_trials_global": 40, "early_stop": 1, "reuse_database": False}
    options["cost_model"] = "random"
    ctx = CompileContext(workdir=tmp_path, threads=2)
    compiled = get_compiler("tvm-ms", options).compile(model, example, ctx)
    assert compiled.extra["early_stopped"] is True
    assert 0 < compiled.extra["trials_run"] < 40
    assert Path(compiled.extra["database"]).is_relative_to(tmp_path)  # reuse off: no cache
    np.testing.assert_allclose(compiled.output_numpy(), eager(model, example), rtol=RTOL, atol=ATOL)


def _tiny_trial(options: dict, workers: int) -> Any:
    from ngb.core.records.types import MeasureSettings, TrialSpec

    measure = MeasureSettings(
        warmup_iters=1, warmup_s=0.0, min_iters=1, min_duration_s=0.05, repetitions=workers,
        workers=workers, quiet_check_s=0.0, threads=2,
    )  # fmt: skip
    return TrialSpec(
        model="conv", compiler="tvm-ms", width=8, depth=1, batch=1, input_size=8,
        compiler_options={**TINY_TUNING, **options}, measure=measure,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_trial_tunes_once_and_its_workers_measure_one_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32: with workers=3 and reuse_database=false each worker searched on its own (three
    searches, three programs); now worker 0 searches, the others build from its records."""
    from ngb.core.trial.measure import run_trial

    # TVM loads in the workers only: this process may fork them whatever threads pytest keeps
    monkeypatch.setenv("NGB_WORKER_START", "fork")

    seen: list[dict] = []
    spec = _tiny_trial({"reuse_database": False}, workers=3)
    result = run_trial(spec, emit=seen.append, workdir=tmp_path / "t", cache_dir=tmp_path / "c")
    assert result.ok, result.error
    assert result.workers == 3 and result.tune_s and result.tune_s > 0
    tuning = [e for e in seen if e["type"] == "tuning"]
    assert tuning and {e["worker"] for e in tuning} == {0}  # only worker 0 searched
    assert [e["phase"] for e in seen if e["type"] == "phase" and e["phase"] == "tune"] == ["tune"]
    built = [e for e in seen if e["type"] == "log" and "tuned_digest" in e]
    assert sorted(e["worker"] for e in built) == [0, 1, 2]
    assert len({e["tuned_digest"] for e in built}) == 1  # one tuned program, three measurements
    records = result.extra["tuning_records"]
    assert 0 < records <= 4 and {e["records"] for e in built} == {records}  # the budget, once
    assert Path(result.extra["database"]).is_relative_to(tmp_path / "t")  # reuse off: no cache
    assert not (tmp_path / "c" / "tvm-ms").exists()

    # reuse on: the first trial searches into the cache, the next one says it reused that search
    first = run_trial(_tiny_trial({}, workers=2), cache_dir=tmp_path / "c")
    assert first.ok, first.error
    assert first.extra["tuning"]["reused"] is False and first.extra["trials_run"] > 0
    again: list[dict] = []
    second = run_trial(_tiny_trial({}, workers=2), emit=again.append, cache_dir=tmp_path / "c")
    assert second.ok, second.error
    assert second.extra["tuning"]["reused"] is True and second.extra["trials_run"] == 0
    assert second.extra["tuning"]["trials"] == first.extra["trials_run"]
    said = [e["msg"] for e in again if e["type"] == "log" and e.get("level") == "info"]
    assert any(m.startswith("tvm-ms: tuning reused from ") for m in said)
    assert second.extra["tuned_digest"] == first.extra["tuned_digest"]
