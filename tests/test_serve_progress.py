"""A serving trial seen live (issue 43): its progress -- offered and achieved QPS, the p99 so
far, a peak search's probe -- goes from the load generator's watching thread to a ``serving``
event, through the agent's snapshot, to the console's device panel (at 80x24 and 120x40) and
``ngb run``'s progress line, in one wording; live only, never stored. Also what the ETA weighs a
serving trial by, and ``ngb attach`` counting a run's served trials before any checkpoint."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest
from ngb.core.records import events as ev
from ngb.core.records.serve_settings import ServeSettings
from ngb.core.records.types import TrialSpec
from ngb.core.serving import loadgen, peak, serve
from ngb.core.serving.serve_trial import run_serving, serving_line
from ngb.core.trial.live_state import LastState, eta_book, eta_item
from ngb.devices.inventory import Device, Inventory
from ngb.sweeps.run.events import DROPPABLE_TYPES, RunEvent
from ngb.sweeps.run.orchestrator import Orchestrator
from ngb.sweeps.spec.sweep import loads_sweep
from ngb.sweeps.store.database import Store
from ngb.tui.live_run import RunModel
from ngb.tui.widgets.device_panel import DevicePanel

from tests.test_tui_support import make_app, wait_for

pytestmark = pytest.mark.timeout(120)

NOW = 1_800_000_000.0
PROBE = {
    "type": "serving", "key": "k1", "ts": NOW, "scenario": "server", "elapsed_s": 44.2,
    "duration_s": 60.0, "offered_qps": 75.52, "achieved_qps": 75.1, "issued": 3340,
    "answered": 3320, "p99_ms": 12.345, "limit_ms": 30.0, "probe": 2, "max_probes": 10,
}  # fmt: skip
PROBE_LINE = "probe 3/10 at 75.5 QPS, 44/60 s: achieved 75.1, p99 so far 12.3/30 ms"


def test_the_serving_line_says_the_probe_the_rates_and_the_p99_so_far() -> None:
    assert serving_line(PROBE) == PROBE_LINE
    single = {**PROBE, "probe": None, "max_probes": None, "offered_qps": 150,
              "limit_ms": None, "elapsed_s": 2.0, "duration_s": 3.0, "achieved_qps": 149.3,
              "p99_ms": 4.12}  # fmt: skip
    assert serving_line(single) == "serving at 150 QPS, 2.0/3.0 s: achieved 149, p99 so far 4.12 ms"
    closed = {**single, "scenario": "singlestream", "offered_qps": None, "duration_s": 30.0}
    assert serving_line(closed) == "singlestream, 2/30 s: achieved 149 QPS, p99 so far 4.12 ms"
    assert serving_line({**PROBE, "answered": 0, "p99_ms": None}).endswith(": no answer yet")
    # the longest a search prints fits an 80-column panel (76 characters inside its border)
    big = {**PROBE, "probe": 9, "offered_qps": 9999.0, "achieved_qps": 9899.0, "elapsed_s": 144,
           "duration_s": 480, "p99_ms": 123.4, "limit_ms": 300.5}  # fmt: skip
    assert len(serving_line(big)) <= 76


def test_a_peak_search_tells_each_probe_its_rate_at_its_start(monkeypatch) -> None:
    """Between probes (never from the issuing thread) each probe is announced with its index
    and offered rate; the watching thread's ticks carry the same context."""
    monkeypatch.setattr(loadgen, "PROGRESS_PERIOD_S", 0.1)

    def search(probe, limit, start, **kwargs):  # two probes of the real serving path
        probe(200.0, 0.4, 0)
        probe(320.0, 0.4, 1)
        return "found"

    monkeypatch.setattr(peak, "find_peak", search)
    settings = ServeSettings(find_peak=True, p99_ms=30.0, max_probes=6, warmup_s=0.0)
    seen: list[serve.ServingProgress] = []
    with loadgen.Workers([lambda: time.sleep(0.001)]) as workers:
        assert serve._find_peak(workers, settings, 400.0, lambda line: None, seen.append) == "found"
    starts = [p for p in seen if p.so_far.issued == 0 and p.so_far.seconds == 0.0]
    assert [(p.probe, p.offered_qps, p.max_probes) for p in starts] == [
        (0, 200.0, 6),
        (1, 320.0, 6),
    ]
    ticks = [p for p in seen if p.so_far.seconds > 0]
    assert ticks and {p.probe for p in ticks} <= {0, 1} and all(p.limit_ms == 30.0 for p in ticks)
    fields = ticks[-1].fields()
    assert fields["offered_qps"] in (200.0, 320.0) and fields["max_probes"] == 6
    assert fields["answered"] == ticks[-1].so_far.answered <= ticks[-1].so_far.issued
    assert fields["achieved_qps"] is not None


def test_a_serving_trial_emits_its_progress_and_the_snapshot_keeps_it(monkeypatch) -> None:
    monkeypatch.setattr(loadgen, "PROGRESS_PERIOD_S", 0.2)
    spec = TrialSpec("conv", "noop", width=16, compiler_options={"sleep_s": 0.001},
                     serve=ServeSettings(qps=100.0, duration_s=1.0, warmup_s=0.1))  # fmt: skip
    sent: list[dict[str, object]] = []
    result = run_serving(spec, emit=sent.append)
    assert result.ok, result.error
    serving = [e for e in sent if e["type"] == ev.SERVING]
    assert len(serving) >= 3  # the run's start, then ticks
    assert all(e["key"] == spec.key and e["offered_qps"] == 100.0 for e in serving)
    assert serving[0]["answered"] == 0 and serving[-1]["answered"] not in (0, None)
    assert serving[-1]["p99_ms"] is not None and serving[-1]["probe"] is None
    # the agent's snapshot brings the last of them to a console that attaches mid-trial
    state = LastState()
    state.observe(ev.make_event(ev.TRIAL_STARTED, key=spec.key, label=spec.label))
    for event in serving:
        state.observe(event)
    snap = state.snapshot()
    assert snap is not None and snap["serving"] == {
        k: v for k, v in serving[-1].items() if k not in ("v", "type")
    }
    state.observe(ev.make_event(ev.TRIAL_DONE, key=spec.key))
    state.observe(ev.make_event(ev.TRIAL_STARTED, key="k2", label="next"))
    assert state.snapshot()["serving"] is None  # type: ignore[index]
    assert ev.SERVING in DROPPABLE_TYPES  # live only: a lagging console may lose one


def _agent(event: dict[str, object]) -> RunEvent:
    return RunEvent("r", "d", "agent", state="running", event=event, ts=NOW)


def test_the_console_fold_keeps_the_trial_in_flights_serving_only() -> None:
    model = RunModel()
    model.apply(_agent({"type": "trial_started", "key": "k1", "label": "conv16x1/noop/b1",
                        "ts": NOW - 5}))  # fmt: skip
    model.apply(_agent({**PROBE, "key": "other"}))  # not this trial's
    state = model.devices[("r", "d")]
    assert state.serving is None and state.unsampled_phase == "starting"
    model.apply(_agent(PROBE))
    assert state.serving == PROBE and state.unsampled_phase == "serving"
    older = {**PROBE, "ts": NOW - 1, "probe": 1}
    model.apply(_agent({"type": "state", "trial": {"key": "k1", "label": "x"}, "serving": older}))
    assert state.serving == PROBE  # a snapshot older than the last event changes nothing
    model.apply(_agent({"type": "trial_done", "key": "k1", "ts": NOW + 1}))
    assert state.serving is None
    # a console re-attached mid-trial gets it from the agent's snapshot
    again = RunModel()
    again.apply(_agent({"type": "state", "trial": {"key": "k1", "label": "conv16x1/noop/b1"},
                        "serving": PROBE}))  # fmt: skip
    assert again.devices[("r", "d")].serving == PROBE


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_the_run_screen_shows_the_serving_trial_live(tmp_path, monkeypatch, size) -> None:
    monkeypatch.setattr(DevicePanel, "clock", staticmethod(lambda: NOW + 1.0))
    app = make_app(tmp_path)
    async with app.run_test(size=size) as pilot:
        screen = app.run_screen
        await wait_for(pilot, lambda: screen.is_mounted and screen.is_current)
        screen.handle_run_event(
            RunEvent("r", "d", "connection", state="running", ts=NOW - 5, done=0, total=2)
        )
        for event in ({"type": "trial_started", "key": "k1", "label": "conv16x1/noop/b1",
                       "ts": NOW - 4}, PROBE):  # fmt: skip
            screen.handle_run_event(_agent(event))

        def text() -> str:
            panel = screen._panels.get(("r", "d"))
            shown = str(panel.render()) if panel is not None else ""
            return shown if PROBE_LINE in shown else ""

        shown = await wait_for(pilot, text)
        assert "conv16x1/noop/b1" in shown and "-- serving" in shown  # the meter names it
        await pilot.pause()
        panel = screen._panels[("r", "d")]
        assert panel.region.width >= len(PROBE_LINE) + 4  # the whole line, inside the border
        assert panel.region.height == len(shown.splitlines()) + 2
        log = screen.query_one("#run-log")
        assert log.region.height >= 3 and log.region.bottom <= size[1]  # the log still shows
        screen.handle_run_event(_agent({"type": "trial_done", "key": "k1", "ts": NOW}))
        await wait_for(pilot, lambda: PROBE_LINE not in str(panel.render()) or None)


def test_ngb_run_s_line_shows_the_serving_progress() -> None:
    from ngb.sweeps.cli.runs import _Progress
    from rich.console import Console

    display = _Progress(Console(file=sys.stderr))
    display.handle(_agent({"type": "trial_started", "key": "k1", "label": "conv16x1/noop/b1"}))
    display.handle(_agent(PROBE))
    task = display.progress.tasks[0]
    assert task.fields["current"] == f"conv16x1/noop/b1: {PROBE_LINE}"
    fresh = _Progress(Console(file=sys.stderr))  # `ngb attach` mid-trial: the snapshot
    fresh.handle(_agent({"type": "state", "trial": {"key": "k1", "label": "conv16x1/noop/b1"},
                         "serving": PROBE}))  # fmt: skip
    assert fresh.progress.tasks[0].fields["current"] == f"conv16x1/noop/b1: {PROBE_LINE}"


def test_the_eta_weighs_a_serving_trial_by_its_serving_not_max_measure_s() -> None:
    timed = TrialSpec("conv", "noop", width=16)
    run = TrialSpec("conv", "noop", width=16, serve=ServeSettings(qps=50.0, duration_s=120.0))
    peak_search = ServeSettings(find_peak=True, p99_ms=20.0, probe_s=30.0, max_probes=6)
    search = TrialSpec("conv", "noop", width=16, serve=peak_search)
    assert eta_item(timed)[2] == timed.measure.max_measure_s
    assert eta_item(run)[2] == 2.0 + 120.0  # the warm-up and the run
    assert eta_item(search)[2] == 2.0 + 6 * 30.0  # every probe at probe_s
    assert eta_item(run)[0] != eta_item(timed)[0]
    # a timed trial's duration is no evidence for a serving trial of its compiler (nor back)
    record = {"started_at": 0.0, "finished_at": 20.0, "spec": timed.to_dict(), "extra": {}}
    book = eta_book([record])
    inputs = book.inputs(eta_item(run), [eta_item(search), eta_item(timed)])
    assert inputs["current_other_s"] == 122.0
    assert inputs["rest_other_s"] == 182.0 + 20.0
    served = {"started_at": 0.0, "finished_at": 130.0, "spec": run.to_dict(), "extra": {}}
    book = eta_book([record, served])
    assert book.inputs(eta_item(search), [eta_item(timed)])["current_other_s"] == 130.0
    assert book.inputs(eta_item(timed), [])["current_other_s"] == 20.0


SERVED_SWEEP = """
name = "served-attach"

[serve]
scenario = "server"
qps = 60
duration_s = 1.5
warmup_s = 0.1

[[matrix]]
models = ["conv"]
widths = [16, 24, 32]
compilers = ["noop"]
batches = [1]
compiler_options.noop = { sleep_s = 0.001 }
"""


async def test_attach_mid_run_counts_the_served_trials_before_any_checkpoint(tmp_path, monkeypatch):
    """A served trial is a ``serving`` row, no ``trials`` row: ``attach`` counts it done from
    the row's trial key at once, not only once the device's checkpoint is read at its end."""
    monkeypatch.setenv("NGB_HOME", str(tmp_path / "home"))
    inventory = Inventory(
        [Device(name="localhost", host="localhost", transport="local",
                python=sys.executable, workdir=str(tmp_path / "device"))]
    )  # fmt: skip
    store = Store(tmp_path / "results.duckdb")
    first = Orchestrator(store, inventory)
    run_id = await first.start(loads_sweep(SERVED_SWEEP), "localhost", isolate="inprocess")
    while first.device_states(run_id)["localhost"]["done"] < 1:
        await asyncio.sleep(0.05)
    await first.close()  # the workstation goes; the agent serves on
    served = store.served_trials(run_id)
    assert served and {r["device"] for r in served} == {"localhost"}
    assert not store.trials(run_id=run_id)  # served trials have no trials row

    second = Orchestrator(store, inventory)
    await second.attach(run_id)
    assert second.device_states(run_id)["localhost"]["done"] >= len(served)
    summary = await second.wait(run_id)
    await second.close()
    assert summary["devices"]["localhost"]["done"] == 3
    assert len(store.served_trials(run_id)) == 3


def test_ngb_serve_s_terminal_line_is_the_same_line(capsys) -> None:
    from ngb.sweeps.api.serving import _live

    so_far = loadgen.SoFar(issued=3340, answered=3320, seconds=44.2, p99_ms=12.345)
    progress = serve.ServingProgress("server", so_far, 75.52, 60.0, 30.0, 2, 10)
    _live("noop")(progress)
    assert capsys.readouterr().err.strip() == f"ngb: noop: {PROBE_LINE}"


def _slot_store_with_a_served_trial(tmp_path) -> Store:
    """A run over Slurm slots gpu.1 and gpu.2 whose one trial, k1, was served by node n1@gpu
    for gpu.2: stored as serving rows only."""
    from ngb.core.records.types import TrialResult
    from ngb.core.serving.serve_trial import EXTRA, to_dict

    from tests.serving_store import served

    outcome = served("identity", 40.0)
    result = TrialResult(key="k1", spec=outcome.spec.to_dict(), status="ok",
                         extra={EXTRA: to_dict(outcome), "run_device": "gpu.2",
                                "stored_device": "n1@gpu"})  # fmt: skip
    store = Store(tmp_path / "r.duckdb")
    store.create_run("r1", "s", "", ["gpu.1", "gpu.2"], 1)
    assert store.ingest_results("r1", "n1@gpu", [result]) == 1
    return store


def test_a_slurm_node_s_served_trial_counts_for_its_slot(tmp_path) -> None:
    """Stored under the node that ran it (``node@partition``), a served trial names its trial
    and the slot it ran for, so it counts done for that slot's row, as a ``trials`` row does."""
    from ngb.sweeps.run.state import resumed_run

    store = _slot_store_with_a_served_trial(tmp_path)
    assert not store.trials(run_id="r1")
    (row,) = store.served_trials("r1")
    assert (row["device"], row["key"], row["status"]) == ("n1@gpu", "k1", "ok")
    rows = [{"device": d, "state": "running", "workdir": "/w",
             "extra": {"started": True, "run_dir": "/w/runs/r1"}}
            for d in ("gpu.1", "gpu.2")]  # fmt: skip
    device = Device(name="gpu", host="h", transport="local")
    run = resumed_run({"run_id": "r1"}, rows, store.served_trials("r1"), lambda names: [device])
    assert {n: d.results for n, d in run.devices.items()} == {"gpu.1": {}, "gpu.2": {"k1": True}}


def test_ngb_status_counts_a_served_trial_done_for_its_slot(tmp_path) -> None:
    """``run_progress`` (``ngb status``) counts a served trial from its serving rows: it has no
    ``trials`` row, and a finished served sweep read 0 done."""
    store = _slot_store_with_a_served_trial(tmp_path)
    for slot in ("gpu.1", "gpu.2"):
        store.upsert_run_device("r1", slot, state="finished", n_trials=1)
    _, rows = store.select(
        "SELECT device, ok, failed FROM run_progress WHERE run_id = 'r1' ORDER BY device"
    )
    assert [tuple(r) for r in rows] == [("gpu.1", 0, 0), ("gpu.2", 1, 0)]
