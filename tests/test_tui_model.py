"""Pure logic behind the TUI: the RunEvent fold, chart data, form parsing, probe shapes."""

from __future__ import annotations

import math

import pytest
from ngb.core.base.errors import NgbError
from ngb.sweeps.report.numbers import format_interval, printed_bounds
from ngb.sweeps.run.orchestrator import RunEvent
from ngb.tui import results_data as rd
from ngb.tui.live_run import CPU_HISTORY, RunModel
from ngb.tui.screens.device_form import form_values
from ngb.tui.screens.devices import compilers_of
from ngb.tui.widgets.cpu_meter import cpu_bar


def agent(run: str, dev: str, type_: str, **fields) -> RunEvent:
    return RunEvent(
        run_id=run,
        device=dev,
        kind="agent",
        state="running",
        event={"type": type_, **fields},
        ts=1000.0,
    )


def test_fold_tracks_progress_cpu_tuning_and_failures() -> None:
    m = RunModel()
    assert m.apply(RunEvent("r1", "a", "connection", state="deploying", ts=1.0)) == ("r1", "a")
    m.apply(agent("r1", "a", "run_started", total=3, skipped=1))
    s = m.device("r1", "a")
    assert (s.total, s.done, s.skipped) == (3, 1, 1)
    m.apply(agent("r1", "a", "trial_started", key="k", label="conv8x1/noop/b1", total=3))
    m.apply(agent("r1", "a", "phase", key="k", phase="measure"))
    m.apply(agent("r1", "a", "progress", key="k", rep=2, reps=5))
    assert (s.current, s.phase, s.rep, s.reps) == ("conv8x1/noop/b1", "measure", 2, 5)
    for pct in range(CPU_HISTORY + 5):
        m.apply(agent("r1", "a", "cpu", key="k", percent=float(pct), proc_percent=50.0))
    assert s.cpu == CPU_HISTORY + 4 and len(s.cpu_history) == CPU_HISTORY  # bounded history
    m.apply(
        agent(
            "r1",
            "a",
            "tuning",
            key="k",
            trials_done=4,
            budget=16,
            best_ms=1.5,
            tasks=[{"name": "conv", "trials": 4, "best_ms": 1.5}],
        )
    )
    assert s.tuning is not None and (s.tuning.trials_done, s.tuning.budget) == (4, 16)
    m.apply(agent("r1", "a", "trial_done", key="k"))
    assert (s.done, s.current) == (2, "")
    m.apply(agent("r1", "a", "trial_failed", key="k2", error="boom", error_kind="crash"))
    assert (s.done, s.failed) == (3, 1)
    assert any("FAILED" in line.text and "crash" in line.text for line in m.log)
    m.apply(agent("r1", "a", "run_done", ok=1, failed=1, skipped=1))
    assert s.finished


def test_orchestrator_counts_override_local_tally_and_other_runs_stay_apart() -> None:
    m = RunModel()
    m.apply(RunEvent("r1", "a", "agent", event={"type": "trial_done"}, done=7, failed=2, total=9))
    m.apply(RunEvent("r2", "a", "agent", event={"type": "trial_done"}))
    assert (m.device("r1", "a").done, m.device("r1", "a").failed) == (7, 2)
    assert m.device("r2", "a").done == 1
    assert [s.run_id for s in m.devices_of("r1")] == ["r1"]
    assert m.apply(RunEvent("r1", "", "run", state="finished", message="all done")) is None
    assert m.run_states["r1"] == "finished"


def test_log_since_returns_only_unseen_lines() -> None:
    m = RunModel()
    for i in range(5):
        m.apply(agent("r", "d", "log", level="info", msg=f"line {i}"))
    assert [ln.text for ln in m.log_since(3)] == ["line 3", "line 4"]
    assert m.log_since(5) == []


def rows() -> list[dict]:
    """identity: 100/s at b1, 400/s at b4; noop: 200/s at b1, 1200/s at b4 (depth 1);
    at depth 2 identity 50/s and noop 150/s at b4."""
    out = []
    for comp, b, d, tp in [
        ("identity", 1, 1, 100.0),
        ("identity", 4, 1, 400.0),
        ("noop", 1, 1, 200.0),
        ("noop", 4, 1, 1200.0),
        ("identity", 4, 2, 50.0),
        ("noop", 4, 2, 150.0),
        ("noop", 8, 1, float("nan")),
    ]:
        out.append(
            {
                "model": "conv",
                "width": 8,
                "depth": d,
                "batch": b,
                "compiler": comp,
                "status": "ok",
                "throughput_mean": tp,
                "optimisation": "none",
                "family": "block",
            }
        )
    out.append(
        {
            "model": "conv",
            "width": 8,
            "depth": 1,
            "batch": 2,
            "compiler": "noop",
            "status": "failed",
            "throughput_mean": None,
        }
    )
    return out


def test_chart_data_uses_the_paper_metrics() -> None:
    ok = rd.ok_rows(rows())
    assert len(ok) == 6  # the NaN and the failed trial are left out
    assert rd.families(ok) == ["conv"] and rd.variants(ok, "conv") == ["conv w8"]
    sel = rd.Selection("conv", "conv w8", ["identity", "noop"])
    tp = rd.throughput_chart(ok, sel)
    assert tp.xticks == [1, 4] and tp.series["noop"] == [200.0, 1200.0]
    sp = rd.speedup_chart(ok, sel)
    assert sp.series["noop"] == [2.0, 3.0]  # 200/100, 1200/400
    bsr = rd.bsr_chart(ok, sel)
    # ASE noop b4 = 1200/(4*200) = 1.5; ASE identity b4 = 400/(4*100) = 1.0 -> BSR 1.5
    assert bsr.series["noop"] == [1.0, 1.5]
    heat = rd.ase_heatmap(ok, sel)
    assert heat.matrix == [[1.0, 1.5]] and heat.row_labels == ["conv w8"]
    assert heat.title.startswith("ASE of noop")
    depth = rd.depth_chart(ok, sel)
    # batch 4: speed-up 3.0 at depth 1, 150/50 = 3.0 at depth 2 -> slope 0, retention 1
    assert depth.series["noop"] == [3.0, 3.0]
    # no spread stored for these rows: the numbers say so (n<2) rather than looking exact
    assert "slope 0.000/block n<2" in depth.subtitle and "retention 1.000 n<2" in depth.subtitle
    table = rd.metrics_table(ok, sel)
    # No spread stored for these rows: the table says so (n<2) rather than looking exact; a
    # value exact by definition (identity's BSR, the baseline over itself) has no flag.
    row = ("conv w8", "noop", "4", "1", "?", "1200 n<2", "3.000 n<2", "6.000 n<2", "1.500 n<2",
           "1.500 n<2")  # fmt: skip
    assert (*row, "") in table
    own = ("conv w8", "identity", "4", "1", "?", "400.0 n<2", "1.000 (baseline)", "4.000 n<2",
           "1.000 n<2", "1.000")  # fmt: skip
    assert (*own, "") in table


def sampled(compiler: str, batch: int, samples: list[float], **extra: object) -> dict:
    mean = sum(samples) / len(samples)
    return {
        "model": "conv", "width": 8, "depth": 1, "batch": batch, "compiler": compiler,
        "status": "ok", "throughput_mean": mean, "optimisation": "none", "samples": samples,
        "repetitions": len(samples), **extra,
    }  # fmt: skip


def test_table_shows_spread_significance_and_flags() -> None:
    from ngb.core.statistics.significance import compare, confidence_interval

    base = [100.0, 104.0, 96.0, 101.0, 99.0]
    close = [101.0, 97.0, 105.0, 100.0, 102.0]  # not significantly faster than identity
    fast = [300.0, 302.0, 298.0, 301.0, 299.0]
    rows = [
        sampled("identity", 8, base),
        sampled("noop", 8, close, unstable=True),
        sampled("openvino", 8, fast, verdict="INVALID"),
    ]
    table = {r[1]: r for r in rd.metrics_table(rd.ok_rows(rows), rd.Selection("conv"))}
    half = confidence_interval(base).half_width
    # the t interval carried to the log scale, printed as its bounds with the digits it supports
    low, high = 100.0 * math.exp(-half / 100.0), 100.0 * math.exp(half / 100.0)
    shown = format_interval(100.0, low, high)
    assert table["identity"][4:7] == ("5", shown, "1.000 (baseline)")
    assert compare(close, base).flag == "n.s." and table["noop"][6].endswith("n.s.")
    assert table["noop"][10] == "unstable"
    assert compare(fast, base).flag == "" and "n.s." not in table["openvino"][6]
    assert table["openvino"][6].startswith("3.00 [") and table["openvino"][10] == "INVALID"
    # Batch 1 was never measured: speed-up is still shown, RTR/ASE/BSR cannot be told.
    assert table["openvino"][7:10] == ("--", "--", "--")
    # The charts carry the same intervals as error bars and a reference line at 1.
    sel = rd.Selection("conv", "conv w8", [])
    tp = rd.throughput_chart(rd.ok_rows(rows), sel)
    printed = printed_bounds(100.0, low, high)
    assert printed is not None
    assert tp.errors["identity"] == [(printed.low, printed.high)]
    sp = rd.speedup_chart(rd.ok_rows(rows), sel)
    assert sp.reference == 1.0 and sp.series["openvino"] == [pytest.approx(3.0)]
    assert "depth 1" in sp.title and "conv w8" in sp.title


def test_spread_from_std_when_no_samples_are_stored() -> None:
    from ngb.sweeps.report.derived import mean_of
    from scipy import stats

    m = mean_of({"throughput_mean": 100.0, "throughput_std": 10.0, "repetitions": 4})
    assert m.half == pytest.approx(stats.t.ppf(0.975, 3) * 10.0 / 2) and m.df == 3
    stored = {"throughput_mean": 100.0, "throughput_ci_half": 1.5, "throughput_std": 10.0,
              "repetitions": 12, "extra": {"measure": {"df": 3}}}  # fmt: skip
    assert mean_of(stored).half == 1.5 and mean_of(stored).df == 3  # 4 processes, not 12 reps


def test_charts_explain_missing_data() -> None:
    no_base = [r for r in rd.ok_rows(rows()) if r["compiler"] != "identity"]
    sel = rd.Selection("conv", "conv w8", [])
    assert "identity" in rd.speedup_chart(no_base, sel).note
    one_depth = [r for r in no_base if r["depth"] == 1]
    assert "two depths" in rd.depth_chart(one_depth, sel).note
    no_b1 = [r for r in rd.ok_rows(rows()) if r["batch"] != 1]
    assert "batch-1" in rd.bsr_chart(no_b1, sel).note


def test_form_values_and_validation_messages() -> None:
    values = form_values(
        {"name": "jet", "host": "10.0.0.5", "port": "2222", "groups": "edge, jetsons", "user": " "},
        "ssh",
    )
    assert values == {
        "name": "jet",
        "host": "10.0.0.5",
        "port": 2222,
        "groups": ["edge", "jetsons"],
        "transport": "ssh",
    }
    with pytest.raises(NgbError, match="port must be a number"):
        form_values({"port": "22x"}, "ssh")


def test_compilers_of_accepts_dict_and_list_probes() -> None:
    assert compilers_of(
        {"compilers": {"identity": {"available": True}, "tvm": {"available": False, "reason": "x"}}}
    ) == ["identity"]
    assert compilers_of(
        {
            "compilers": [
                {"name": "onnxruntime", "available": True},
                {"name": "tensorrt", "available": False},
            ]
        }
    ) == ["onnxruntime"]
    assert cpu_bar(None).endswith("--") and cpu_bar(50.0) == "CPU [#####     ]  50%"


def test_table_marks_speedups_between_precisions() -> None:
    """OpenVINO's bf16 against eager's fp32 is a number-format effect too: the console says so."""
    base = [100.0, 104.0, 96.0, 101.0, 99.0]
    fast = [300.0, 302.0, 298.0, 301.0, 299.0]
    rows = [
        sampled("identity", 8, base, precision="fp32"),
        sampled("openvino", 8, fast, precision="bf16"),
        sampled("noop", 8, fast, precision="fp32"),
    ]
    table = {r[1]: r for r in rd.metrics_table(rd.ok_rows(rows), rd.Selection("conv"))}
    assert table["openvino"][6].endswith("≠prec") and "bf16 vs fp32" in table["openvino"][10]
    assert "≠prec" not in table["noop"][6] and table["noop"][10] == ""
    # rows stored before precision was recorded are not accused of a mismatch
    rows[0].pop("precision")
    table = {r[1]: r for r in rd.metrics_table(rd.ok_rows(rows), rd.Selection("conv"))}
    assert "≠prec" not in table["openvino"][6]
