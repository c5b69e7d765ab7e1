"""The ETA of a run's first trial of a compiler, from this device's earlier runs (issue 46).

A fresh run's 64-trial search ended 25 s before its trial did (the tuned build and three workers'
timed loops, 2026-11-28) and the device line counted none of it, 29-39 % short from half-way
on. The agent now keeps each compiler's recent non-tuning and after-search seconds in its cache
folder, uses them until the run has its own, and otherwise counts at least the measurement cap.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ngb.core.statistics.eta_evidence import (
    EVIDENCE_FILE,
    EVIDENCE_KEPT,
    first_batch_factor,
    load_evidence,
    save_evidence,
)
from ngb.core.trial.live_state import EtaBook, book_result, eta_book


def record(compiler: str, seconds: float, tune_s: float = 0.0, trials: int = 0) -> dict:
    return {"started_at": 1000.0, "finished_at": 1000.0 + seconds, "tune_s": tune_s,
            "spec": {"compiler": compiler}, "extra": {"trials_run": trials}}  # fmt: skip


def test_without_evidence_the_part_after_a_search_is_at_least_the_measurement_cap() -> None:
    book = EtaBook()
    assert book.post("tvm-ms", 6.0) == 6.0 and book.post("tvm-ms") is None
    inputs = book.inputs(("tvm-ms", 64, 6.0), [])
    assert inputs["current_post_s"] == 6.0 and inputs["current_other_s"] == 6.0


def test_a_later_run_starts_from_the_earlier_runs_and_then_from_its_own(tmp_path: Path) -> None:
    first = eta_book([], tmp_path)
    # a 220 s tvm-ms trial: 186 s of search, its search ended 25 s before the trial did
    book_result(first, record("tvm-ms", 220.0, tune_s=186.0, trials=64), search_ended=1195.0)
    book_result(first, record("onnxruntime", 12.0))
    save_evidence(first.evidence(), tmp_path)
    saved = json.loads((tmp_path / EVIDENCE_FILE).read_text())
    assert saved == {"other_s": {"onnxruntime": [12.0], "tvm-ms": [34.0]},
                     "post_s": {"tvm-ms": [25.0]}, "first_ratio": {}}  # fmt: skip

    later = eta_book([], tmp_path)
    assert later.post("tvm-ms", 6.0) == 25.0  # the earlier run's, not the cap
    assert later.other("tvm-ms", 6.0) == 34.0 and later.other("openvino", 6.0) == 6.0
    book_result(later, record("tvm-ms", 110.0, tune_s=90.0, trials=32), search_ended=1100.0)
    assert later.post("tvm-ms", 6.0) == 10.0 and later.other("tvm-ms", 6.0) == 20.0  # its own
    # an unseen compiler: this run's other compilers first (this machine, now), then the cap
    assert later.other("openvino", 6.0) == 20.0
    save_evidence(later.evidence(), tmp_path)
    assert load_evidence(tmp_path / EVIDENCE_FILE)[1] == {"tvm-ms": [25.0, 10.0]}


def test_evidence_keeps_the_recent_durations_only(tmp_path: Path) -> None:
    book = eta_book([], tmp_path)
    for seconds in range(1, 3 * EVIDENCE_KEPT):
        book_result(book, record("identity", float(seconds)))
    save_evidence(book.evidence(), tmp_path)
    kept = load_evidence(tmp_path / EVIDENCE_FILE)[0]["identity"]
    assert kept == [float(s) for s in range(2 * EVIDENCE_KEPT, 3 * EVIDENCE_KEPT)]


def test_a_damaged_or_hostile_evidence_file_is_no_evidence_never_a_hang(tmp_path: Path) -> None:
    path = tmp_path / EVIDENCE_FILE
    for text in ("{not json", "[1, 2]", '{"post_s": {"tvm-ms": "fast"}}',
                 '{"post_s": {"tvm-ms": [NaN, -1, Infinity, true, 7]}}'):  # fmt: skip
        path.write_text(text)
        assert load_evidence(path)[1] in ({}, {"tvm-ms": [7.0]}), text
    path.unlink()
    os.mkfifo(path)  # read_text() on a FIFO blocks until someone writes it
    assert load_evidence(path) == ({}, {})
    path.unlink()
    path.mkdir()  # a folder where the file goes: not saved, not a failed run
    book = EtaBook()
    book_result(book, record("identity", 3.0))
    save_evidence(book.evidence(), tmp_path)
    assert path.is_dir() and not list(tmp_path.glob(f".{EVIDENCE_FILE}.*"))


def test_a_searchs_first_batch_ratio_is_kept_and_the_next_search_divides_by_it(
    tmp_path: Path, monkeypatch
) -> None:
    """A search's first batch ran 1.3-1.4x slower per trial than its later ones on this VM
    (initial population, the runner's first processes): the ETA from it alone was 29-37 % long
    at a quarter of the budget. The device's earlier searches now say by how much."""
    from ngb.core.compilers import tvm_tuning
    from ngb.core.compilers.tvm_tuning import TuningProgress

    now = [0.0]
    monkeypatch.setattr(tvm_tuning.time, "monotonic", lambda: now[0])
    first = TuningProgress(["conv"], [1.0], budget=64, early_stop=None)
    assert first.first_batch_ratio is None
    for seconds in (52.0, 40.0, 40.0, 40.0):  # the first batch 1.3x the later ones
        now[0] += seconds
        first.record(0, [0.001] * 16)
    assert first.first_batch_ratio == pytest.approx(1.3)
    assert first.event()["first_batch_ratio"] == 1.3

    book = eta_book([], tmp_path)
    book_result(book, record("tvm-ms", 200.0, tune_s=172.0, trials=64), first_ratio=1.3)
    book_result(book, record("tvm-ms", 200.0, tune_s=172.0, trials=64), first_ratio=1.5)
    book_result(book, record("tvm-ms", 9.0), first_ratio=float("nan"))  # none kept
    save_evidence(book.evidence(), tmp_path)
    assert first_batch_factor(tmp_path, "tvm-ms") == pytest.approx(1.4)
    assert (
        first_batch_factor(tmp_path, "openvino") is None and first_batch_factor(None, "x") is None
    )
    assert eta_book([], tmp_path).first_ratio == {"tvm-ms": [1.3, 1.5]}  # the next run's start

    now[0] = 0.0
    later = TuningProgress(["conv"], [1.0], budget=64, early_stop=None,
                           first_batch_factor=first_batch_factor(tmp_path, "tvm-ms"))  # fmt: skip
    now[0] = 56.0
    later.record(0, [0.001] * 16)
    assert later.recent_s_per_trial == pytest.approx(56.0 / 16 / 1.4)  # one batch, corrected
    now[0] = 96.0
    later.record(0, [0.001] * 16)
    assert later.recent_s_per_trial == pytest.approx(40.0 / 16)  # two: the later batch itself


def test_a_first_batch_factor_stays_within_what_a_first_batch_costs(tmp_path: Path) -> None:
    for ratios, factor in (([0.5, 0.7], 1.0), ([9.0], 3.0), ([1.2, -1.0, 1.4], 1.3)):
        (tmp_path / EVIDENCE_FILE).write_text(json.dumps({"first_ratio": {"tvm-ms": ratios}}))
        assert first_batch_factor(tmp_path, "tvm-ms") == pytest.approx(factor)
