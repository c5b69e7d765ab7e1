"""A trial's profile pass (issue 34, ``MeasureSettings.profile``): one more process after the
timed workers, stored keyed to the trial with its timed latency beside the profiled one, and
never touching the timed numbers."""

from __future__ import annotations

from pathlib import Path

import pytest
from ngb.core.compilers.profiling import Profile
from ngb.core.records.types import MeasureSettings, Stats, TrialResult, TrialSpec
from ngb.core.trial.measure import run_trial
from ngb.core.trial.profile_pass import calls_for
from ngb.sweeps.api.notebook import open_results
from ngb.sweeps.report.catalog import build_report, render
from ngb.sweeps.spec.sweep import load_sweep
from ngb.sweeps.store.database import Store
from ngb.sweeps.store.profiles import load_profiles

FAST = {"warmup_iters": 0, "warmup_s": 0.0, "min_iters": 2, "min_duration_s": 0.02,
        "repetitions": 2, "workers": 1, "quiet_check_s": 0.0, "energy_idle_s": 0.0}  # fmt: skip


def conv(compiler: str, width: int = 8, **measure: object) -> TrialSpec:
    settings = MeasureSettings.from_dict({**FAST, **measure})
    return TrialSpec(model="conv", compiler=compiler, width=width, measure=settings)


def test_the_setting_changes_no_key_and_is_on_in_the_paper_presets() -> None:
    assert conv("identity", profile=True).key == conv("identity").key  # resume finds the trial
    for preset in ("paper-families", "paper-batch-width", "paper-blocks-depth", "dlas"):
        assert load_sweep(preset).measure_settings.profile, preset
    assert not load_sweep("demo").measure_settings.profile  # off by default
    assert calls_for(1.0) == (20, 5) and calls_for(999.0) == (5, 2) and calls_for(None)[0] == 20
    # a call of seconds: 2 profiled after 1 warm-up (each run twice: 6 calls, not 14)
    assert calls_for(1000.0) == (2, 1) and calls_for(100_000.0) == (2, 1)


def test_a_runtime_without_a_profiler_keeps_its_timed_result(tmp_path: Path) -> None:
    result = run_trial(conv("noop", profile=True), workdir=tmp_path / "t")
    assert result.status == "ok" and result.throughput.mean > 0  # the timing stands
    assert "no profiler is wired" in str(result.extra["profile"]["error"])
    store = Store(tmp_path / "r.duckdb")
    store.create_run("r", "s", "", ["here"], 1)
    store.ingest_results("r", "here", [result])
    _, rows = store.select("SELECT extra FROM trials")
    assert "profile_error" in rows[0][0] and '"records"' not in rows[0][0]
    assert load_profiles(store) == []


def test_off_by_default_no_pass_runs(tmp_path: Path) -> None:
    result = run_trial(conv("noop"), workdir=tmp_path)
    assert result.status == "ok" and "profile" not in result.extra


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> TrialResult:
    return run_trial(conv("identity", profile=True), workdir=tmp_path_factory.mktemp("trial"))


def test_the_pass_follows_the_timing_and_is_stored_keyed_to_the_trial(
    profiled: TrialResult, tmp_path: Path
) -> None:
    assert profiled.status == "ok", profiled.error
    data = profiled.extra["profile"]
    assert data["profiler"] == "torch.profiler" and data["records"]
    timed = 1000.0 * profiled.spec["batch"] / profiled.throughput.mean
    assert data["timed_ms"] == pytest.approx(timed)  # the timed latency beside the profiled one
    store = Store(tmp_path / "r.duckdb")
    store.create_run("r", "s", "", ["here"], 1)
    assert store.ingest_results("r", "here", [profiled]) == 1
    _, rows = store.select("SELECT key, timed_ms, profiled_ms, calls FROM profiles")
    assert len(rows) == 1 and rows[0][0] == profiled.key and rows[0][1] == pytest.approx(timed)
    _, rows = store.select("SELECT count(*), min(key) FROM profile_kernels")
    assert rows[0] == (len(data["records"]), profiled.key)
    _, rows = store.select("SELECT extra FROM trials")
    assert '"records"' not in rows[0][0]  # the profile left extra for its own tables
    assert profiled.extra["profile"] is data  # ... of the stored copy: the caller keeps it
    (point, profile), *_ = load_profiles(store, run_id="r")
    assert point.trial_key == profiled.key and point.optimisation == "none"
    assert profile.timed_ms == pytest.approx(timed) and profile.by_class()["convolution"] > 0
    text = render(build_report("ops", store, run_id="r"), "markdown")
    assert "profiled / timed" in text and "conv w8 b1 on here" in text
    opened = open_results(tmp_path / "r.duckdb", run="r")
    results, samples = opened  # unpacks as it always did
    frame = opened.profiles  # and the profile frame beside them, a row per kernel record
    assert len(results) == 1 and len(frame) == len(data["records"])
    assert set(frame["key"]) == {profiled.key} and frame["op_class"].notna().all()
    by_class = frame.groupby("op_class")["us_per_inference"].sum()
    assert by_class["convolution"] / 1000 == pytest.approx(profile.by_class()["convolution"])


@pytest.mark.slow
def test_timed_numbers_equal_with_profiling_on_and_off(tmp_path: Path) -> None:
    """The same trial with the pass and without: the throughputs agree within their intervals
    (the pass runs after the timing, in its own process), and only one of them has a profile."""
    settings = {"repetitions": 6, "workers": 3, "min_duration_s": 0.15, "warmup_s": 0.1}
    off = run_trial(conv("identity", width=16, **settings), workdir=tmp_path / "off")
    on = run_trial(conv("identity", width=16, profile=True, **settings), workdir=tmp_path / "on")
    assert off.status == on.status == "ok", (off.error, on.error)
    assert "profile" not in off.extra and on.extra["profile"]["records"]
    assert len(off.repetitions) == len(on.repetitions) == 6 and on.workers == off.workers == 3
    lo_off = off.throughput.mean - (off.ci_half_width or 0.0)
    hi_off = off.throughput.mean + (off.ci_half_width or 0.0)
    lo_on = on.throughput.mean - (on.ci_half_width or 0.0)
    hi_on = on.throughput.mean + (on.ci_half_width or 0.0)
    assert lo_on <= hi_off and lo_off <= hi_on, (off.throughput.mean, on.throughput.mean)


def test_columns_name_precision_and_optimisation_where_they_differ() -> None:
    from ngb.sweeps.report.ops import column_names
    from ngb.sweeps.store.profiles import ProfilePoint

    def point(compiler: str, precision: str, opt: str = "none") -> ProfilePoint:
        return ProfilePoint("here", "resnet18", None, 1, 8, compiler, precision, opt)

    same = [point("identity", "fp32"), point("openvino", "fp32")]
    assert column_names(same) == ["identity", "openvino"]
    mixed = [
        point("openvino", "bf16"),
        point("openvino", "fp32"),
        point("identity", "fp32", "int8"),
    ]
    assert column_names(mixed) == ["openvino bf16", "openvino fp32", "identity fp32 int8"]


@pytest.mark.slow
def test_dlas_rows_show_where_int8_moved_the_time(tmp_path: Path) -> None:
    """The same model with and without int8 in one report: the quantised convolution is one
    fused kernel, the quantise / dequantise steps are layout/copy (a precision conversion)."""
    from ngb.core.base.isolate import call_in_child
    from ngb.core.trial.profile_pass import profile_trial

    rows = []
    for opt in ("none", "int8"):
        spec = TrialSpec(model="conv", compiler="identity", width=8, optimisation=opt)
        p = call_in_child(opt, profile_trial, spec, tmp_path / opt, 6, 2)
        p.timed_ms = 1.0
        rows.append(
            TrialResult(key=spec.key, spec=spec.to_dict(), precision="fp32",
                        throughput=Stats(n=2, mean=1000.0), extra={"profile": p.to_dict()})
        )  # fmt: skip
    int8 = Profile.from_dict(rows[1].extra["profile"])
    convs = [r for r in int8.records if r.op_class == "convolution"]
    assert any(r.fused and r.name.startswith("quantized::") for r in convs)
    assert any("quantize" in r.name for r in int8.records if r.op_class == "layout/copy")
    store = Store(tmp_path / "r.duckdb")
    store.create_run("d", "dlas", "", ["here"], 2)
    store.ingest_results("d", "here", rows)
    text = render(build_report("ops", store, run_id="d"), "csv")
    assert "row,identity ms,identity share %,identity int8 ms,identity int8 share %" in text


def test_a_version_8_file_keeps_its_profiles_and_reads_them(tmp_path: Path) -> None:
    """Migration 9: `ngb profile --db` rows of an older file read back as points without a
    trial (optimisation "none"), after the reader upgraded the file."""
    import duckdb
    from ngb.sweeps.store import schema

    path = tmp_path / "v8.duckdb"
    conn = duckdb.connect(str(path))
    conn.execute(schema.VERSION_TABLE)
    for version, (description, statements) in enumerate(schema.MIGRATIONS[:8], start=1):
        for statement in statements:
            conn.execute(statement)
        conn.execute("INSERT INTO schema_version VALUES (?, ?, now())", [version, description])
    conn.execute(
        "INSERT INTO profiles VALUES ('p', 'here', 'resnet18', NULL, 1, 1, 'openvino', 'fp32', "
        "'openvino PERF_COUNT', 10, 5.0, 5.5, now())"
    )
    conn.execute(
        "INSERT INTO profile_kernels VALUES ('p', 'here', 'resnet18', NULL, 1, 1, 'openvino', "
        "'fp32', 'conv1', 'Convolution', 'convolution', true, 4000.0, 1.0, '[\"a\", \"b\"]', "
        "'brgconv')"
    )
    conn.close()
    ((point, p),) = load_profiles(Store(path))
    assert point.optimisation == "none" and point.trial_key is None and p.timed_ms is None
    assert p.records[0].source_ops == ("a", "b") and p.by_class()["convolution"] == 4.0


def test_a_call_of_seconds_is_profiled_twice_after_one_warm_up(tmp_path: Path) -> None:
    """What the pass runs follows the trial's timed latency: a trial whose calls took 2 s (as
    its timing said) gets 2 profiled calls, where the floor of 5 + 2, run twice, would have
    spent 14 calls of seconds."""
    from ngb.core.trial.profile_pass import run_pass

    spec = conv("identity", profile=True)
    result = TrialResult(key=spec.key, spec=spec.to_dict(), status="ok")
    result.throughput = Stats(mean=0.5, n=2)  # batch 1 at 0.5/s: 2,000 ms a call
    result.extra["requests_in_flight"] = 3  # and recorded beside it
    seen: list[dict] = []
    run_pass(spec, result, tmp_path / "t", None, deadline=1e12, emit=seen.append)
    profile = result.extra["profile"]
    assert profile["calls"] == 2 and profile["timed_ms"] == pytest.approx(2000.0), profile
    assert profile["timed_in_flight"] == 3
    assert any("profile pass: 2 calls" in str(e.get("msg")) for e in seen)


def test_a_trial_with_requests_in_flight_marks_its_profiled_over_timed(
    profiled: TrialResult, tmp_path: Path
) -> None:
    """OpenVINO kept 2 requests in flight on the 2-core VM: its timed ms per call (batch /
    throughput) was half of one call's, and the pass, one call at a time, read 1.9-2.0x it. The
    ratio says so on every surface that prints it, from the trial's own extra."""
    import copy

    from ngb.core.compilers.profiling import requests_in_flight
    from ngb.sweeps.report.ops import profiled_over_timed

    trial = copy.deepcopy(profiled)
    trial.extra["requests_in_flight"] = 2
    store = Store(tmp_path / "r.duckdb")
    store.create_run("r", "s", "", ["here"], 1)
    assert store.ingest_results("r", "here", [trial]) == 1
    text = render(build_report("ops", store, run_id="r"), "markdown")
    assert "x (2 in flight)" in text and "'k in flight'" in text
    # the pass's own record carries it too, and survives its JSON
    p = Profile.from_dict({**profiled.extra["profile"], "timed_in_flight": 2})
    assert Profile.from_dict(p.to_dict()).timed_in_flight == 2
    assert profiled_over_timed(p).endswith("x (2 in flight)")
    assert "in flight" not in profiled_over_timed(Profile.from_dict(profiled.extra["profile"]))
    for unsaid in ({}, {"requests_in_flight": True}, {"requests_in_flight": "2"}, None):
        assert requests_in_flight(unsaid) == 1
