"""The measurement protocol: statistics, the timed loop's stop conditions, failure recording."""

from __future__ import annotations

import json
import math
import os
import time

import numpy as np
import pytest
from ngb.core.base.errors import CompilerUnavailable, ConfigError, one_line
from ngb.core.compilers.noop import NoopCompiler
from ngb.core.records import events
from ngb.core.records.types import MeasureSettings, TrialResult, TrialSpec
from ngb.core.trial.cpu import MIN_SAMPLE_S, CpuSampler
from ngb.core.trial.measure import classify_error, run_trial
from ngb.core.trial.stats import concat_ns_to_ms, is_unstable, summarize
from ngb.core.trial.versions import library_versions
from ngb.core.trial.worker_start import START_ENV

FAST = {
    "warmup_iters": 1,
    "warmup_s": 0.0,
    "min_iters": 3,
    "min_duration_s": 0.02,
    "repetitions": 3,
    "workers": 1,
    "quiet_check_s": 0.0,
}


def noop_spec(options: dict | None = None, batch: int = 1, **measure: object) -> TrialSpec:
    return TrialSpec(
        model="noop-model",
        compiler="noop",
        batch=batch,
        compiler_options=options or {},
        measure=MeasureSettings(**{**FAST, **measure}),
    )


# ----------------------------------------------------------------------------- stats


def test_summarize_matches_hand_computed_values() -> None:
    s = summarize([1.0, 2.0, 3.0, 4.0])
    assert s.n == 4
    assert s.mean == pytest.approx(2.5)
    assert s.std == pytest.approx(math.sqrt(5 / 3))  # sample std, ddof=1
    assert s.median == pytest.approx(2.5)
    assert s.p50 == pytest.approx(2.5)
    assert s.p90 == pytest.approx(3.7)  # linear interpolation between 3 and 4
    assert s.p99 == pytest.approx(3.97)
    assert (s.min, s.max) == (1.0, 4.0)
    assert s.cov == pytest.approx(math.sqrt(5 / 3) / 2.5)


def test_summarize_edge_cases() -> None:
    empty = summarize([])
    assert empty.n == 0 and math.isnan(empty.mean)
    one = summarize([7.0])
    assert one.n == 1 and one.mean == 7.0 and math.isnan(one.std) and math.isnan(one.cov)
    assert not is_unstable(one, 0.05)  # one repetition is never flagged
    assert summarize([1.0, float("nan"), 3.0]).n == 2  # NaN (e.g. a zero-length loop) ignored
    assert is_unstable(summarize([1.0, 2.0]), 0.05)
    assert not is_unstable(summarize([100.0, 100.1]), 0.05)


def test_concat_ns_to_ms() -> None:
    ms = concat_ns_to_ms([np.array([1_000_000, 2_000_000]), np.array([500_000])])
    assert ms.tolist() == [1.0, 2.0, 0.5]
    assert concat_ns_to_ms([]).size == 0


# ----------------------------------------------------------------------------- CPU sampler


def test_cpu_sampler_records_busy_process() -> None:
    import psutil

    me = psutil.Process()
    before, start = me.cpu_times(), time.perf_counter()
    sampler = CpuSampler(interval_s=0.05).start()
    # Busy-wait (this process keeps one core busy) for 0.3 s and until two samples are in: on a
    # loaded 2-core machine the sampler's thread may get its first turn late (one sample in 0.3 s
    # under make test, 2026-11-29). A sampler that never samples still fails, after 5 s.
    end, limit = time.perf_counter() + 0.3, time.perf_counter() + 5.0
    while time.perf_counter() < end or (len(sampler.samples) < 2 and time.perf_counter() < limit):
        pass
    samples = sampler.stop()
    after, wall = me.cpu_times(), time.perf_counter() - start
    assert len(samples) >= 2
    assert all(0.0 <= s[1] <= 100.0 for s in samples)
    # The busy loop shows in this process's share, as much of a core as the scheduler gave it
    # (on a loaded machine that is well under 100 %): compare with the CPU time it really got.
    got = (after.user + after.system - before.user - before.system) / wall * 100
    mean = sum(s[2] for s in samples) / len(samples)
    assert max(s[2] for s in samples) > 0 and abs(mean - got) < max(15.0, 0.5 * got)
    summary = sampler.summary()
    assert summary["cpu_percent_max"] == max(s[1] for s in samples)


def test_cpu_sampler_short_window_still_samples_but_not_a_few_ms() -> None:
    with CpuSampler(interval_s=10.0) as sampler:
        end = time.perf_counter() + 2 * MIN_SAMPLE_S
        while time.perf_counter() < end:  # busy: the process's share is far from 0
            pass
    assert len(sampler.samples) == 1
    _, system, proc = sampler.samples[0]
    assert 0.0 <= system <= 100.0
    assert 0.0 <= proc <= 100.0 * (os.cpu_count() or 1) * 1.5  # clock ticks: not exact
    # A window of a few ms cannot be read from counters that move in 10 ms ticks: it read 0 %
    # for the machine and thousands of % for the process. No sample, rather than that.
    # (Judged on a try whose whole window, seen from here, was shorter than that: a loaded
    # machine may wake the sampler's thread late, and then its window is long enough.)
    for _ in range(20):
        began = time.perf_counter()
        with CpuSampler(interval_s=10.0) as sampler:
            pass
        if time.perf_counter() - began < MIN_SAMPLE_S:
            break
    else:
        raise AssertionError("no window shorter than MIN_SAMPLE_S in 20 tries")
    assert sampler.samples == []
    assert sampler.summary()["proc_cpu_percent_mean"] is None


# ----------------------------------------------------------------------------- versions


def test_library_versions_without_heavy_imports() -> None:
    versions = library_versions()
    assert versions["python"].count(".") == 2
    assert versions["numpy"] == np.__version__


# ----------------------------------------------------------------------------- noop trials


def test_noop_trial_records_protocol_fields() -> None:
    seen: list[dict] = []
    result = run_trial(noop_spec(repetitions=4), emit=seen.append)
    assert result.ok, result.error
    assert result.key == noop_spec(repetitions=4).key
    assert len(result.repetitions) == 4 and result.throughput.n == 4
    assert result.latency_ms.n == sum(r["iters"] for r in result.repetitions)
    for rep in result.repetitions:
        assert rep["iters"] >= 3 and rep["elapsed_s"] >= 0.02
        assert rep["throughput"] == pytest.approx(rep["iters"] / rep["elapsed_s"])
    t = result.throughput
    assert t.min <= t.median <= t.max and t.min <= t.mean <= t.max and t.std >= 0
    assert result.latency_ms.p50 <= result.latency_ms.p90 <= result.latency_ms.p99
    assert result.compile_s is not None and result.compile_s >= 0
    assert result.first_call_s is not None and result.export_s is None
    assert result.cpu_samples and result.cpu_percent_mean is not None
    assert result.peak_rss_mb and result.peak_rss_mb > 1
    assert result.threads["cpu_count"] >= 1 and "physical_cores" in result.threads
    assert result.versions["numpy"] == np.__version__
    assert result.max_abs_err is None  # noop has no output to verify

    types = [e["type"] for e in seen]
    phases = [e["phase"] for e in seen if e["type"] == events.PHASE]
    assert phases.index("first_call") < phases.index("warmup") < phases.index("measure")
    assert phases[0] == "compile" and all(
        phases[i] != phases[i + 1] for i in range(len(phases) - 1)
    )
    progress = [e for e in seen if e["type"] == events.PROGRESS]
    # passed on at most once a second while a worker measures, each worker's last always
    reps = [e["rep"] for e in progress]
    assert reps == sorted(set(reps)) and reps[-1] == 4 and progress[-1]["reps"] == 4
    assert events.CPU in types
    assert all(e["key"] == result.key and e["v"] == events.PROTOCOL_VERSION for e in seen)
    # The result round-trips through the JSON the agent writes.
    again = TrialResult.from_dict(json.loads(events.encode(result.to_dict())))
    assert again.throughput.mean == pytest.approx(t.mean) and again.key == result.key


def test_timed_loop_stops_on_min_iters() -> None:
    # Each call sleeps 2 ms; no minimum duration: exactly min_iters calls per repetition.
    result = run_trial(noop_spec({"sleep_s": 0.002}, min_iters=7, min_duration_s=0.0))
    assert result.ok, result.error
    assert [r["iters"] for r in result.repetitions] == [7, 7, 7]


def test_timed_loop_stops_on_min_duration() -> None:
    # One call would satisfy min_iters; the loop must keep going until 60 ms have passed.
    result = run_trial(noop_spec({"sleep_s": 0.002}, batch=4, min_iters=1, min_duration_s=0.06))
    assert result.ok, result.error
    for rep in result.repetitions:
        assert rep["elapsed_s"] >= 0.06 and rep["iters"] > 1
        assert rep["throughput"] == pytest.approx(rep["iters"] * 4 / rep["elapsed_s"])


def test_unstable_flag_follows_threshold() -> None:
    assert run_trial(noop_spec(cov_threshold=1e-12)).unstable
    assert not run_trial(noop_spec(cov_threshold=1e9)).unstable


# ----------------------------------------------------------------------------- failures


def test_compile_failure_is_recorded_not_raised() -> None:
    result = run_trial(noop_spec({"fail": True}))
    assert result.status == "failed" and not result.ok
    assert result.error == "RuntimeError: noop compiler asked to fail"
    assert result.error_kind == "error"
    assert result.versions and result.finished_at >= result.started_at
    assert result.compile_s is not None  # time spent before the failure is still recorded


def test_a_trial_past_its_own_deadline_is_a_timeout_as_the_agents_kill_would_say() -> None:
    """On a loaded machine the trial's own clock can beat the agent's kill (CI, 2026-12-01:
    ``test_timeout_kills_the_trial[fork]`` got this result first, then as kind "error")."""
    started = time.monotonic()
    result = run_trial(noop_spec({"compile_s": 30}, timeout_s=0.5))
    assert time.monotonic() - started < 20  # the worker was stopped, not waited for
    assert result.status == "failed" and result.error_kind == "timeout"
    assert "timeout_s=0.5s" in result.error and "timed out" in result.error


def test_unknown_compiler_and_bad_option_are_failed_trials() -> None:
    unknown = run_trial(TrialSpec(model="x", compiler="noopp", measure=MeasureSettings(**FAST)))
    assert unknown.status == "failed" and "did you mean: noop" in unknown.error
    bad = run_trial(noop_spec({"no_such_flag": 1}))
    assert bad.status == "failed" and "no_such_flag" in bad.error


def test_unavailable_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(NoopCompiler, "available", classmethod(lambda cls: (False, "no widget")))
    result = run_trial(noop_spec())
    assert result.error_kind == "unavailable" and "no widget" in result.error


def test_optimisation_without_optimise_module(monkeypatch: pytest.MonkeyPatch) -> None:
    from ngb.core.trial import measure

    monkeypatch.setattr(measure, "_optimise_module", lambda: None)
    # the fake lives in this process: its workers must be forked from here, not started by a
    # fork server (what worker_start picks beside pytest-xdist's I/O thread)
    monkeypatch.setenv(START_ENV, "fork")
    spec = TrialSpec(
        model="x", compiler="noop", optimisation="int8", measure=MeasureSettings(**FAST)
    )
    result = run_trial(spec)
    assert result.error_kind == "unsupported" and "int8" in result.error


def test_optimisation_hook_is_called_and_facts_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    from ngb.core.trial import measure

    calls: list[tuple[str, ...]] = []

    def check_supported(name: str, compiler: str, device: str) -> None:
        calls.append(("check", name, compiler, device))

    def apply_with_facts(model: object, example: object, name: str) -> tuple:
        calls.append(("apply", name))
        return model, example, {"name": name, "applied": model is not None}

    fake = types.SimpleNamespace(check_supported=check_supported, apply_with_facts=apply_with_facts)
    monkeypatch.setattr(measure, "_optimise_module", lambda: fake)
    # the fake lives in this process: its workers must be forked from here, not started by a
    # fork server (what worker_start picks beside pytest-xdist's I/O thread)
    monkeypatch.setenv(START_ENV, "fork")
    spec = TrialSpec(
        model="x", compiler="noop", optimisation="fp16", measure=MeasureSettings(**FAST)
    )
    result = run_trial(spec)
    assert result.ok, result.error
    # checked here before any work; applied in the worker process, whose facts come back
    assert calls == [("check", "fp16", "noop", "cpu")]
    assert result.extra["optimisation"] == {"name": "fp16", "applied": False}


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (MemoryError(), "oom"),
        (RuntimeError("CUDA out of memory. Tried to allocate 2 GiB"), "oom"),
        (NotImplementedError("aten::foo"), "unsupported"),
        (RuntimeError("Operator Bar is not supported by this frontend"), "unsupported"),
        (CompilerUnavailable("no GPU"), "unavailable"),
        (ValueError("bad"), "error"),
        (ConfigError("hint must be one of ..."), "error"),
    ],
)
def test_classify_error(exc: BaseException, kind: str) -> None:
    assert classify_error(exc) == kind


def test_one_line() -> None:
    assert one_line(ValueError("first\nsecond")) == "ValueError: first"
    assert one_line(ConfigError("threads must be > 0")) == "threads must be > 0"
    assert one_line(KeyError()) == "KeyError"


# ----------------------------------------------------------------------------- a real model


def test_identity_on_a_real_conv_block() -> None:
    from ngb.core.models.blocks import block_params

    spec = TrialSpec(
        model="conv",
        width=8,
        depth=2,
        compiler="identity",
        batch=2,
        measure=MeasureSettings(**{**FAST, "threads": 1}),
    )
    seen: list[dict] = []
    result = run_trial(spec, emit=seen.append)
    assert result.ok, result.error
    assert result.params == 2 * block_params("conv", 8)
    assert result.macs and result.macs > 0
    assert result.max_abs_err is not None and result.max_abs_err < 1e-5
    assert result.threads["torch_intra_op"] == 1 and result.threads["requested"] == 1
    assert result.throughput.n == 3 and result.throughput.mean > 0
    assert result.versions["torch"]
    assert "build" in [e.get("phase") for e in seen]


# ----------------------------------------------------------------------------- CLI


def test_cli_measure_json_prints_one_object() -> None:
    from click.testing import CliRunner
    from ngb.sweeps.cli import cli

    args = [
        "measure",
        "resnet18",
        "--compiler",
        "noop",
        "--batch",
        "2",
        "--repetitions",
        "2",
        "--min-duration",
        "0.01",
        "--warmup-s",
        "0",
        "-o",
        "compile_s=0",
        "--json",
    ]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)  # exactly one JSON document, nothing else on stdout
    assert data["status"] == "ok" and data["throughput"]["n"] == 2
    assert data["spec"]["batch"] == 2 and data["spec"]["compiler_options"] == {"compile_s": 0}
    assert data["versions"]["python"] and "compile_s" in data


def test_cli_measure_failure_and_unknown_names() -> None:
    from click.testing import CliRunner
    from ngb.sweeps.cli import cli

    runner = CliRunner()
    failed = runner.invoke(
        cli,
        [
            "measure",
            "resnet18",
            "-c",
            "noop",
            "-o",
            "fail=true",
            "--repetitions",
            "1",
            "--min-duration",
            "0",
        ],
    )
    assert failed.exit_code == 1
    assert "noop compiler asked to fail" in failed.stderr
    unknown = runner.invoke(cli, ["measure", "resnet18", "-c", "noopp"])
    assert unknown.exit_code != 0 and "did you mean: noop" in unknown.output
    assert "Traceback" not in unknown.output
    bad_option = runner.invoke(cli, ["measure", "resnet18", "-c", "noop", "-o", "novalue"])
    assert bad_option.exit_code != 0 and "key=value" in bad_option.output


def test_cli_compilers_lists_registry() -> None:
    from click.testing import CliRunner
    from ngb.core.compilers import list_compilers
    from ngb.sweeps.cli import cli

    out = CliRunner().invoke(cli, ["compilers", "--all", "--json"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)
    assert set(rows) == set(list_compilers(include_internal=True))
    assert rows["noop"]["available"] is True
    assert all(isinstance(r["reason"], str) for r in rows.values())


@pytest.mark.slow
def test_identity_resnet18_matches_paper_params() -> None:
    spec = TrialSpec(
        model="resnet18", compiler="identity", batch=1, measure=MeasureSettings(**FAST)
    )
    result = run_trial(spec)
    assert result.ok, result.error
    assert result.params == 11_689_512  # the paper's Table IV
    assert result.max_abs_err is not None and result.max_abs_err < 1e-4
    assert result.macs and result.macs > 1e9


def test_device_the_compiler_cannot_target() -> None:
    spec = TrialSpec(
        model="conv", width=8, compiler="openvino", device="cuda", measure=MeasureSettings(**FAST)
    )
    result = run_trial(spec)
    assert result.error_kind == "unsupported" and "cannot target 'cuda'" in result.error


def test_cuda_trial_without_a_gpu_is_unavailable() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    result = run_trial(TrialSpec(model="x", compiler="noop", device="cuda"))
    assert result.error_kind == "unavailable" and "CUDA" in result.error


def test_stdout_to_stderr_catches_python_and_native_writes() -> None:
    import subprocess
    import sys

    code = (
        "import os\n"
        "from ngb.sweeps.cli.measure import stdout_to_stderr\n"
        "with stdout_to_stderr():\n"
        "    print('py-chatter', flush=True)\n"
        "    os.write(1, b'fd-chatter\\n')\n"
        "print('clean')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "clean\n"
    assert "py-chatter" in proc.stderr and "fd-chatter" in proc.stderr
