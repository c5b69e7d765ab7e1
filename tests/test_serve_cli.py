"""``ngb serve`` and ``ngb.serve`` end to end (issue 43) on the ``noop`` compiler's sleeping calls:
one JSON object, compilers side by side, a peak search, ``--db`` storing runs, probes and peaks,
and ``ngb advise --p99-ms`` holding a configuration to its server-scenario p99 (and saying so)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from ngb.core.records.types import MeasureSettings, Stats, TrialResult, TrialSpec
from ngb.core.serving import peak, serve_sim, serve_stats
from ngb.core.serving.serve import ServeOutcome, ServeSettings
from ngb.sweeps.cli import cli
from ngb.sweeps.store.database import Store
from ngb.sweeps.store.serving import save_run

from tests.cli_helpers import ngb
from tests.serving_store import unverified_peak

NOOP = ["conv", "--width", "16", "-c", "noop", "-o", "sleep_s=0.002", "--warmup", "0.2"]


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["serve", *args])
    return result.exit_code, result.stdout, result.stderr


def test_serve_prints_one_json_object(tmp_path: Path) -> None:
    code, out, err = _invoke(*NOOP, "--qps", "100", "--duration", "3", "--p99-ms", "50", "--json")
    assert code == 0, err
    served = json.loads(out)["served"]
    assert len(served) == 1 and served[0]["compiler"] == "noop"
    s = served[0]["summary"]
    assert s["scenario"] == "server" and s["requests"] == 300 and s["target_qps"] == 100
    assert abs(s["issued_qps"] / 100 - 1) < 0.05
    assert set(s["latency_ms"]) == {"p50", "p90", "p99"}
    assert s["latency_ms"]["p50"]["value"] >= 2.0  # a call sleeps 2 ms
    assert s["limit_ms"] == 50 and s["needed"] >= 368
    assert served[0]["capacity_qps"] > 100
    assert served[0]["settings"]["seed"] == 0


def test_serve_side_by_side_and_stored(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    code, out, err = _invoke(
        *NOOP[:4], "noop,noop", *NOOP[5:], "--qps", "50", "--duration", "2",
        "--db", str(db), "--run", "s1",
    )  # fmt: skip
    assert code == 0, err
    assert out.count("== conv16x1/noop/b1") == 2
    assert "latency from the scheduled time: p50" in out and "issue lag p50" in out
    assert "side by side:" in out and "verdict:" in out
    assert "stored: 2 serving row(s) as run s1" in err
    _, rows = Store(db).select(
        "SELECT model, width, compiler, scenario, target_qps, requests, probe, verdict "
        "FROM serving WHERE run_id = 's1'"
    )
    assert rows == [("conv", 16, "noop", "server", 50.0, 100, None, rows[0][7])] * 2
    assert Store(db).run("s1")["status"] == "finished"


def test_find_peak_reports_qps_star_and_stores_every_probe(tmp_path: Path) -> None:
    """In a process of its own, as run from a shell: the serving process's lines reach stderr."""
    db = tmp_path / "r.duckdb"
    done = ngb("serve", *NOOP, "--find-peak", "--p99-ms", "30", "--probe-s", "2",
               "--max-probe-s", "2", "--max-probes", "5", "--db", str(db))  # fmt: skip
    out, err = done.stdout, done.stderr
    assert done.returncode == 0, err
    assert "QPS* " in out and "probes" in out
    assert "peak search for p99 <= 30 ms" in err and "probe 1 (bracket)" in err
    store = Store(db)
    _, peaks = store.select(
        "SELECT compiler, limit_ms, peak_qps, peak_low, peak_high, method, probes "
        "FROM serving_peaks"
    )
    (compiler, limit, qps, low, high, method, probes), = peaks  # fmt: skip
    assert compiler == "noop" and limit == 30 and probes == 5
    _, probe_rows = store.select(
        "SELECT probe, phase, target_qps, verdict, latency_p99_hi_ms FROM serving ORDER BY probe"
    )
    assert [r[0] for r in probe_rows] == [0, 1, 2, 3, 4]
    assert probe_rows[0][1] == "bracket" and probe_rows[-1][1] == "boundary"
    # a lower bound is a rate a VALID probe showed to meet the limit (its p99 upper bound
    # within), or none at all: NULL, said in words, never a bracket from 0
    verified = [r[2] for r in probe_rows if r[3] == "VALID" and r[4] is not None and r[4] <= 30]
    if method == "bracket":
        below = [v for v in verified if high is None or v < high]
        assert low == (max(below) if below else None)
    assert low is None or 0 < low <= qps
    if low is None:
        # in words, bracketed ("... no lower bound): ...") or not ("QPS* not bracketed ...: ..."),
        # which a loaded machine's probes decide
        assert "no VALID probe met p99 <= 30 ms" in out
    assert "[0," not in out and "[0 " not in out

    # `ngb report serving` shows the search and its probes as stored, never recomputed
    report = CliRunner().invoke(
        cli, ["report", "serving", "--db", str(db), "--format", "csv", "--device", "localhost"]
    )  # a store of serving runs only knows its device from the serving tables
    assert report.exit_code == 0, report.output
    lines = report.output.splitlines()
    peak_line = next(line for line in lines if line.startswith("localhost,conv16x1/b1,server,30"))
    assert ",noop,?," in peak_line and f",{probes}," in peak_line  # noop states no precision
    probe_lines = [
        line for line in lines if ",noop,0 bracket," in line or ",noop,4 boundary," in line
    ]
    assert len(probe_lines) == 2
    report = CliRunner().invoke(cli, ["report", "serving", "--db", str(db), "--format", "markdown"])
    assert "latency counted from each request's scheduled time" in report.output


def test_a_search_that_verified_no_rate_has_no_lower_bound_anywhere(tmp_path: Path) -> None:
    """No probe verified a rate: QPS* has no lower bound -- NULL in the store, and every surface
    (the search's line, the side-by-side line, the API, the report) says so in words, never as
    a bracket from 0; a row stored as 0 before that reads the same."""
    from ngb.sweeps.api.serving import Served
    from ngb.sweeps.cli.serve import _side_by_side

    outcome = unverified_peak()
    assert outcome.peak is not None
    high = outcome.peak.high
    said = f"QPS* below {high:.4g} (no lower bound): no VALID probe met p99 <= 100 ms"
    assert said in outcome.peak.describe()
    served = Served("identity", outcome)
    assert served.peak_interval == (None, high) and said in repr(served)
    assert said in _side_by_side([served, Served("openvino", error="boom")])
    assert served.to_dict()["peak"]["low"] is None  # type: ignore[index]
    db = tmp_path / "r.duckdb"
    store = Store(db)
    save_run(store, "u1", [outcome], "localhost")
    _, ((low, stored_high),) = store.select("SELECT peak_low, peak_high FROM serving_peaks")
    assert low is None and stored_high == high

    def report(fmt: str) -> str:
        out = CliRunner().invoke(cli, ["report", "serving", "--db", str(db), "--format", fmt])
        assert out.exit_code == 0, out.output
        return out.output

    # the report's cell goes on from QPS* in the words every surface uses (``star_text``)
    words = f"below {high:.4g} (no lower bound): no VALID probe met p99 <= 100 ms"
    assert said == f"QPS* {words}"  # the one wording: the report's cell after its value
    assert words == peak.star_text(outcome.peak.qps, None, high, 100.0, value_shown=True)
    text = report("markdown")
    assert words in text and "[0" not in text
    assert "'no lower bound' = no probe verified any rate" in text
    csv_lines = report("csv").splitlines()
    header = next(line for line in csv_lines if line.startswith("device,point"))
    assert "QPS* note" in header and "QPS* 95% lo" not in header
    assert any(words in line for line in csv_lines)
    with store.transaction() as conn:  # as a search stored before the fix wrote it
        conn.execute("UPDATE serving_peaks SET peak_low = 0")
    assert words in report("markdown")


def test_the_serving_report_says_when_nothing_was_served(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    Store(db).create_run("r1", "t", "", ["dev1"], 0)
    report = CliRunner().invoke(cli, ["report", "serving", "--db", str(db)])
    assert report.exit_code == 0, report.output
    assert (
        "no serving runs in scope (`ngb serve MODEL -c A,B --db PATH` adds them)" in report.output
    )


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--qps", "0"], "0"),
        (["--find-peak"], "--p99-ms"),
        ([], "--qps"),
        (["--scenario", "offline", "--find-peak", "--p99-ms", "5"], "server scenario"),
        (["--qps", "10", "--concurrency", "2"], "one request at a time"),
    ],
)
def test_bad_input_is_one_line(args: list[str], words: str) -> None:
    code, out, err = _invoke(*NOOP, *args)
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("error:") and words in err


def test_the_api_serves_and_returns_a_served() -> None:
    import ngb

    answer = ngb.serve("conv", "noop", "singlestream", width=16, duration=0.5, warmup=0.1,
                       options={"sleep_s": 0.001}, progress=False)  # fmt: skip
    assert isinstance(answer, ngb.Served) and answer.ok
    assert answer.outcome is not None and answer.outcome.summary is not None
    assert answer.outcome.summary.requests >= 1024  # the closed loop's least, so p90 is claimed
    assert answer.p99_ms >= 1.0 and answer.verdict is not None
    assert "p99" in repr(answer)
    failed = ngb.serve("conv", ["noop"], width=16, qps=10, duration=1, warmup=0,
                       options={"fail": True}, progress=False)  # fmt: skip
    assert isinstance(failed, list) and not failed[0].ok
    assert "noop compiler asked to fail" in str(failed[0].error)


# ------------------------------------------------------------------ advise --p99-ms


def _trial(store: Store) -> None:
    """An idle-device result of conv16x1 under noop whose p99 per call is 10 ms."""
    spec = TrialSpec(model="conv", width=16, compiler="noop",
                     measure=MeasureSettings(repetitions=3))  # fmt: skip
    result = TrialResult(
        key=spec.key, spec=spec.to_dict(), started_at=time.time(), finished_at=time.time(),
        throughput=Stats(n=3, mean=100.0, std=1.0), latency_ms=Stats(n=100, p99=10.0, p50=9.0),
        repetitions=[{"iters": 10, "elapsed_s": 0.1, "throughput": v} for v in (99, 100, 101)],
        verdict="VALID",
    )  # fmt: skip
    store.create_run("measured", "m", "", ["localhost"], 1)
    store.ingest_results("measured", "localhost", [result])


def _served(qps: float) -> ServeOutcome:
    """A server-scenario run of the same configuration, simulated: M/M/1 at mu = 100/s."""
    spec = TrialSpec(model="conv", width=16, compiler="noop")
    settings = ServeSettings(qps=qps, duration_s=300.0, p99_ms=100.0)
    summary = serve_stats.summarize(serve_sim.mm1(qps, 100.0, 300.0, seed=1), 100.0)
    assert summary.verdict == "VALID", summary.reasons
    return ServeOutcome(spec, settings, "here", 0.0, 1.0, summary=summary)


def _advise(db: Path) -> str:
    result = CliRunner().invoke(
        cli, ["advise", "conv16x1", "--device", "localhost", "--p99-ms", "100", "--db", str(db)]
    )
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_advise_uses_the_server_p99_and_says_so(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    store = Store(db)
    _trial(store)
    idle = _advise(db)
    assert "deploy noop" in idle and "p99 per call on an idle device" in idle
    # under load at 70 QPS the p99 is ~150 ms (ln 100 / 30 s): the idle 10 ms no longer passes
    save_run(store, "served-70", [_served(70.0)], "localhost")
    loaded = _advise(db)
    assert "no measured configuration meets" in loaded
    assert "p99 under load may be" in loaded and "at 70 QPS" in loaded
    assert "server scenario at 70 QPS, run served-70" in loaded
    # at 40 QPS it is ~77 ms: the configuration passes, at the highest rate that met the limit
    save_run(store, "served-40", [_served(40.0)], "localhost")
    both = _advise(db)
    assert "deploy noop" in both and "server scenario at 40 QPS, run served-40" in both


def test_openvino_serves_with_one_infer_request_a_runner() -> None:
    """OpenVINO's natural concurrency: its THROUGHPUT hint's nireq infer requests, one serving
    thread each (``Compiled.serving_runners``); ``concurrency`` asks for another count."""
    from ngb.core.compilers import compiler_class

    ok, why = compiler_class("openvino").available()
    if not ok:
        pytest.skip(why)
    import ngb

    natural = ngb.serve("conv", "openvino", width=16, qps=50, duration=1, warmup=0.2,
                        progress=False)  # fmt: skip
    assert isinstance(natural, ngb.Served) and natural.outcome is not None, natural.error
    assert natural.outcome.summary is not None
    nireq = natural.outcome.extra["nireq"]
    assert natural.outcome.summary.concurrency == nireq == natural.outcome.extra["serving_requests"]
    asked = ngb.serve("conv", "openvino", width=16, qps=50, duration=1, warmup=0.2,
                      concurrency=3, progress=False)  # fmt: skip
    assert isinstance(asked, ngb.Served) and asked.outcome is not None, asked.error
    assert asked.outcome.summary is not None and asked.outcome.summary.concurrency == 3


def test_a_notebook_with_torch_serves_from_a_fresh_interpreter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where torch is loaded (a notebook: its OpenMP pool may be running, and does not survive
    a fork) the serving runs in a spawned interpreter; its answer comes back the same way."""
    import types

    import ngb

    if "torch" not in sys.modules:
        monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    answer = ngb.serve("conv", "noop", width=16, qps=100, duration=1, warmup=0.1,
                       options={"sleep_s": 0.001}, progress=False)  # fmt: skip
    assert isinstance(answer, ngb.Served) and answer.outcome is not None, answer.error
    assert answer.outcome.summary is not None and answer.outcome.summary.requests == 100
