"""The Results screen's reads (issue 41): the runs and the trials of the run it will show come
from one read on a thread started at once (a first visit used to wait for the screen to be
composed before the read began, then start a second read for the trials); an answer that arrives
after the operator chose another run is not shown over that run's; and ``ngb-tui`` moves what
start-up made out of the collector's sight, and hands it back at the end."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

from ngb.core.records.types import Stats, TrialResult, TrialSpec
from ngb.sweeps.store.database import Store
from ngb.tui.app import NgbApp
from ngb.tui.backend import Backend
from textual.widgets import Label, Select

from tests.test_tui_support import SIZE, wait_for

#: run id -> its trials' batch sizes (the older run first: the store lists the newest first)
RUNS = {"r-old": [1, 2], "r-new": [1, 2, 4]}


def _store(path: Path) -> Path:
    store = Store(path)
    for run_id, batches in RUNS.items():
        results = []
        for batch in batches:
            spec = TrialSpec(model="conv", compiler="noop", batch=batch, width=8)
            results.append(TrialResult(
                key=spec.key, spec=spec.to_dict(), status="ok", host="dev1",
                throughput=Stats(n=3, mean=100.0 * batch, std=1.0),
                repetitions=[{"iters": 5, "elapsed_s": 1.0, "throughput": 100.0 * batch}] * 3,
            ))  # fmt: skip
        store.create_run(run_id, "reads", "", ["dev1"], len(results))
        assert store.ingest_results(run_id, "dev1", results) == len(results)
    return path


class GatedBackend(Backend):
    """A backend whose runs read waits for ``gate``, and which logs each read with its thread."""

    def __init__(self, db: Path, inventory: Path) -> None:
        super().__init__(db_path=db, inventory_path=inventory)
        self.gate = threading.Event()
        self.gate.set()
        self.reads: list[tuple[str, str, int]] = []

    def runs_sync(self):  # noqa: ANN201 - the parent's type
        assert self.gate.wait(30)
        self.reads.append(("runs", "", threading.get_ident()))
        return super().runs_sync()

    def run_results_sync(self, run_id: str, device: str | None = None):  # noqa: ANN201
        self.reads.append(("trials", run_id, threading.get_ident()))
        return super().run_results_sync(run_id, device)


def _app(tmp_path: Path, **kw: bool) -> tuple[NgbApp, GatedBackend]:
    backend = GatedBackend(_store(tmp_path / "r.duckdb"), tmp_path / "none.toml")
    return NgbApp(backend, start_screen="results", attach_on_start=False, **kw), backend


async def test_the_first_visit_reads_the_newest_runs_trials_with_the_runs(tmp_path: Path) -> None:
    app, backend = _app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        results = app.screen
        second_reads: list[tuple[str, str | None]] = []
        results.load_trials = lambda run_id, device: second_reads.append((run_id, device))  # type: ignore[method-assign]
        await wait_for(pilot, lambda: len(results.rows) == 3)
        assert results.query_one("#results-run", Select).value == "r-new"
        assert "3 trials in run r-new" in str(results.query_one("#results-note", Label).render())
        # one read: the runs, then the newest run's trials, on the same thread; no second read
        (runs, trials) = backend.reads[:2]
        assert (runs[0], trials[:2]) == ("runs", ("trials", "r-new")) and runs[2] == trials[2]
        assert second_reads == []


async def test_an_answer_for_a_run_no_longer_chosen_is_not_shown(tmp_path: Path) -> None:
    app, backend = _app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        results = app.screen
        await wait_for(pilot, lambda: len(results.rows) == 3)
        backend.gate.clear()
        await pilot.press("r")  # a reload; its read waits in runs_sync, asked for r-new
        await wait_for(pilot, lambda: results._reads == 2)
        results.query_one("#results-run", Select).value = "r-old"  # the operator's choice
        await wait_for(pilot, lambda: len(results.rows) == 2)
        seen = len(backend.reads)
        backend.gate.set()  # the reload's answer, with r-new's trials, lands now
        await wait_for(pilot, lambda: ("runs", "") in [r[:2] for r in backend.reads[seen:]])
        await wait_for(pilot, lambda: ("trials", "r-old") in [r[:2] for r in backend.reads[seen:]])
        await pilot.pause(0.5)  # the reload's answer (its thread read r-new's trials) is dropped
        assert results.run_id == "r-old" and len(results.rows) == 2
        assert results.query_one("#results-run", Select).value == "r-old"
        assert "2 trials in run r-old" in str(results.query_one("#results-note", Label).render())


def _warming(app: NgbApp) -> bool:
    return any(w.group == "warm-up" for w in app.workers)  # a worker leaves the list once done


async def test_ngb_tui_freezes_what_start_up_made_and_hands_it_back(tmp_path: Path) -> None:
    app, _ = _app(tmp_path, settle_heap=True)
    gc.unfreeze()  # this test process's own (tests/conftest.py), out of the count
    async with app.run_test(size=SIZE) as pilot:
        # the warm-up's worker starts after the first frame; under load, late
        await wait_for(pilot, lambda: gc.get_freeze_count() > 10_000)  # Textual's, ngb's, DuckDB's
    app.quit_finished()
    assert gc.get_freeze_count() == 0


async def test_a_tests_app_leaves_the_collector_alone(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    import ngb.tui.app as app_module

    warmed = threading.Event()
    t_two_sided = app_module.t_two_sided
    monkeypatch.setattr(app_module, "t_two_sided", lambda *a: (warmed.set(), t_two_sided(*a))[1])
    freezes: list[bool] = []
    monkeypatch.setattr(gc, "freeze", lambda: freezes.append(True))
    app, _ = _app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, warmed.is_set)  # the warm-up ran
        await wait_for(pilot, lambda: not _warming(app))  # and ended
    app.quit_finished()
    assert freezes == []
