"""``[serve]`` in a sweep (issue 43): serving runs go to a device as trials do.

A sweep with ``[serve]`` runs on localhost through the orchestrator and the real agent (a trial
process each, as ``ngb run`` runs them; the ``noop`` compiler's 2 ms sleeping calls): the served
trial lands in ``serving`` under the sweep's run id and device, with no ``trials`` row,
``ngb report serving`` shows it, and its progress came live as ``serving`` events; a serving
trial that fails is an ordinary failed trial. A bad ``[serve]`` table is refused in one line
before anything runs.
"""

from __future__ import annotations

import asyncio
import json
import sys

import pytest
from click.testing import CliRunner
from ngb.core.records import events as ev
from ngb.core.records.types import MeasureSettings, TrialResult, TrialSpec
from ngb.core.serving.serve_trial import outcome_from_dict
from ngb.devices.agent import trial_timeout_s
from ngb.devices.inventory import Device, Inventory
from ngb.sweeps.cli import cli
from ngb.sweeps.run.events import RunEvent, Subscription
from ngb.sweeps.run.orchestrator import Orchestrator
from ngb.sweeps.spec.sweep import loads_sweep
from ngb.sweeps.store.database import Store

pytestmark = pytest.mark.timeout(180)

# 150 QPS for 3 s: 450 requests, more than LoadGen's count for a p99 within 50 ms (368)
SWEEP = """
name = "served"

[serve]
scenario = "server"
qps = 150
duration_s = 3
p99_ms = 50
warmup_s = 0.3

[[matrix]]
models = ["conv"]
widths = [16]
compilers = ["noop"]
batches = [1]
compiler_options.noop = { sleep_s = 0.002 }
"""
FAILING = """
[[matrix]]
models = ["conv"]
widths = [32]
compilers = ["noop"]
batches = [1]
compiler_options.noop = { fail = true }
"""
MATRIX = '[[matrix]]\nmodels = ["conv"]\nwidths = [16]\ncompilers = ["noop"]\nbatches = [1]\n'


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("NGB_HOME", str(tmp_path / "home"))
    inventory = Inventory(
        [Device(name="localhost", host="localhost", transport="local",
                python=sys.executable, workdir=str(tmp_path / "device"))]
    )  # fmt: skip
    return inventory, Store(tmp_path / "results.duckdb")


async def collect(sub: Subscription, out: list[RunEvent]) -> None:
    async for item in sub:
        out.append(item)


async def test_a_served_sweep_stores_serving_rows_under_its_run_and_device(env):
    inventory, store = env
    sweep = loads_sweep(SWEEP + FAILING)
    served, failing = sweep.trials()
    assert served.serve is not None and served.serve.qps == 150.0
    orch = Orchestrator(store, inventory)
    sub = orch.subscribe()
    seen: list[RunEvent] = []
    consumer = asyncio.create_task(collect(sub, seen))
    run_id = await orch.start(sweep, "localhost")  # a trial process each, as `ngb run`
    summary = await orch.wait(run_id)
    await orch.close()
    await consumer
    dev = summary["devices"]["localhost"]
    assert (dev["state"], dev["done"], dev["failed"]) == ("finished", 2, 1)

    # the served trial is no trials row (its throughput is empty); the failed one is one
    _, trials = store.select(
        "SELECT key, status, error, spec FROM trials WHERE run_id = ?", [run_id]
    )
    assert [(k, s) for k, s, _, _ in trials] == [(failing.key, "failed")]
    assert "asked to fail" in trials[0][2] and json.loads(trials[0][3])["serve"]["qps"] == 150

    cols, rows = store.select(
        "SELECT device, model, width, compiler, scenario, target_qps, completed_qps, requests, "
        "latency_p99_ms, latency_p99_lo_ms, latency_p99_hi_ms, latency_p50_lo_ms, "
        "latency_p50_hi_ms, limit_ms, verdict, verdict_reason, probe FROM serving "
        "WHERE run_id = ?",
        [run_id],
    )
    assert len(rows) == 1
    row = dict(zip(cols, rows[0], strict=True))
    assert (row["device"], row["model"], row["width"], row["compiler"], row["scenario"]) == (
        "localhost", "conv", 16, "noop", "server"
    )  # fmt: skip
    assert row["target_qps"] == 150 and row["requests"] == 450 and row["probe"] is None
    assert abs(row["completed_qps"] / 150 - 1) < 0.05  # achieved: all 450 answered in ~3 s
    # p99 from the scheduled time, with its 95 % interval: a call sleeps 2 ms. Its upper end
    # needs more than a 3 s run gives on a busy 2-core machine (ten stretches of 45 requests
    # often differ too much: measured at 100-200 QPS for 5-8 s too), and is then NULL with the
    # reason in the verdict, never a made-up bound
    assert 2.0 <= row["latency_p99_lo_ms"] <= row["latency_p99_ms"]
    high = row["latency_p99_hi_ms"]
    if high is None:
        assert row["verdict"] == "INVALID" and "p99 not claimed" in row["verdict_reason"]
    else:
        assert high >= row["latency_p99_ms"]
    assert 2.0 <= row["latency_p50_lo_ms"] <= row["latency_p50_hi_ms"]
    assert row["limit_ms"] == 50
    # VALID needs the achieved rate within 1 %, a small issue lag and a bounded p99
    assert row["verdict"] in ("VALID", "INVALID")
    assert (row["verdict"] == "VALID") == (not row["verdict_reason"])

    # the report shows it, under the sweep's run
    result = CliRunner().invoke(
        cli, ["report", "serving", "--run", run_id, "--db", str(store.path)]
    )
    assert result.exit_code == 0, result.output
    assert "conv16x1/b1" in result.output and "noop" in result.output
    assert "server" in result.output and row["verdict"] in result.output

    # the trial in flight told its progress live: offered and achieved QPS, the p99 so far
    live = [e.event for e in seen if e.kind == "agent" and e.event["type"] == ev.SERVING]
    assert live and {e["key"] for e in live} == {served.key}
    assert all(e["offered_qps"] == 150 and e["probe"] is None for e in live)
    assert live[-1]["answered"] > 0 and live[-1]["p99_ms"] is not None

    # stored once: the result as the agent sent it, ingested again (a re-attach), adds nothing
    done = [e.event["result"] for e in seen
            if e.kind == "agent" and e.event["type"] == ev.TRIAL_DONE]  # fmt: skip
    assert [d["key"] for d in done] == [served.key]
    again = TrialResult.from_dict(done[0])
    assert outcome_from_dict(again.extra["serving"]).settings == served.serve
    assert store.ingest_results(run_id, "localhost", [again]) == 0
    assert store.select("SELECT count(*) FROM serving WHERE run_id = ?", [run_id])[1] == [(1,)]


def test_a_serving_trial_keeps_timed_trials_keys_and_gets_its_serving_time() -> None:
    # the key a timed trial had before serving settings existed (a resume redoes nothing), with
    # the measurement defaults of that time (before issue 44), as its stored dict carries them
    timed = TrialSpec(
        "conv", "noop", width=16, measure=MeasureSettings(max_measure_s=10.0, warmup_max_s=2.0)
    )
    assert timed.key == "66d01ffd85fcd536" and timed.to_dict()["serve"] is None
    # and a stored dict of that time gives the same spec back, so the same key
    assert TrialSpec.from_dict(json.loads(json.dumps(timed.to_dict()))).key == timed.key
    served = TrialSpec("conv", "noop", width=16, serve={"qps": 50.0, "duration_s": 3.0})
    assert served.key != timed.key
    assert TrialSpec.from_dict(json.loads(json.dumps(served.to_dict()))) == served
    assert trial_timeout_s(timed) == timed.measure.timeout_s
    # the trial's allowance for building and compiling, then warm-up and run
    assert trial_timeout_s(served) == timed.measure.timeout_s + 2.0 + 3.0
    peak = TrialSpec(
        "conv", "noop", width=16, serve={"find_peak": True, "p99_ms": 20.0, "probe_s": 5.0}
    )
    assert trial_timeout_s(peak) == timed.measure.timeout_s + 2.0 + 10 * 40.0


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("qps = nan", "qps must be a finite number, got nan"),
        ("qps = inf", "qps must be a finite number, got inf"),
        ("qps = -5", "qps must be a positive number"),
        ('scenario = "burst"', "scenario must be one of server, singlestream"),
        ("qpz = 5", "unknown key 'qpz'; did you mean 'qps'?"),
        ('qps = 50\nduration_s = "3"', "duration_s must be a finite number"),
        ("find_peak = true", "find_peak = true needs the latency budget: p99_ms = X"),
        ('scenario = "server"', "the server scenario needs qps"),
    ],
)
def test_a_bad_serve_table_is_refused_in_one_line(tmp_path, monkeypatch, line, words) -> None:
    monkeypatch.setenv("NGB_HOME", str(tmp_path / "home"))
    path = tmp_path / "bad.toml"
    path.write_text(f"[serve]\n{line}\n\n{MATRIX}")
    result = CliRunner().invoke(cli, ["run", str(path), "--devices", "localhost"])
    assert result.exit_code != 0
    said = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(said) == 1, result.output
    assert "[serve]" in said[0] and words in said[0], said[0]


@pytest.mark.parametrize("made", ["run", "peak"])
def test_an_outcome_crosses_the_wire_and_comes_back_the_same(made: str) -> None:
    """What the agent sends (JSON, NaN and infinity as null) reads back to the outcome that
    was served: the same summary and peak, the same ``serve_key``, the reasons each kept."""
    from ngb.core.serving.serve_trial import to_dict
    from ngb.sweeps.store.serving import serve_key

    from tests.serving_store import served, unverified_peak

    outcome = served("identity", 95.0) if made == "run" else unverified_peak()
    wire = ev.decode(ev.encode({"type": "x", "outcome": to_dict(outcome)}))
    assert wire is not None
    back = outcome_from_dict(wire["outcome"])
    assert serve_key(back) == serve_key(outcome) and back.spec == outcome.spec
    assert ev.encode({"o": to_dict(back)}) == ev.encode({"o": to_dict(outcome)})
    if made == "run":
        assert back.summary is not None and outcome.summary is not None
        assert back.summary.reasons == outcome.summary.reasons
        assert back.summary.latency == outcome.summary.latency
    else:
        assert back.peak is not None and outcome.peak is not None
        assert back.peak.text() == outcome.peak.text() and back.peak.low is None
        assert [p.outcome for p in back.peak.probes] == [p.outcome for p in outcome.peak.probes]
