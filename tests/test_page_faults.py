"""Minor page faults per call (``ngb.core.trial.page_faults``): counted by every worker over its
timed loops, kept per process, and named in the verdict when the processes' speed follows them."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from ngb.core.records.types import MeasureSettings, TrialResult, TrialSpec
from ngb.core.trial import page_faults
from ngb.core.trial.timing import Part, merge

from tests.cli_helpers import scaled

# One ngb measure of conv:64:16 b16 under identity on the 2-core VM (2026-11-27): four processes'
# means and their minor faults per call, as the result recorded them.
MEASURED_MEANS = [400.0, 516.0, 544.0, 392.0]
MEASURED_FAULTS = [6240.3, 1487.4, 148.0, 6240.3]


def test_rank_correlation_is_spearmans_with_ties() -> None:
    from scipy.stats import spearmanr

    cases = [
        (MEASURED_MEANS, MEASURED_FAULTS),
        ([1.0, 2.0, 3.0, 4.0, 5.0], [5.0, 6.0, 7.0, 8.0, 7.0]),
        ([3.0, 1.0, 2.0], [1.0, 1.0, 2.0]),
    ]
    for xs, ys in cases:
        ours = page_faults.rank_correlation(xs, ys)
        assert ours == pytest.approx(spearmanr(xs, ys).statistic, abs=1e-12)
    assert page_faults.rank_correlation([1.0, 2.0, 3.0], [4.0, 4.0, 4.0]) is None


def test_the_verdict_names_the_faults_when_speed_follows_them() -> None:
    note = page_faults.allocator_note(MEASURED_MEANS, MEASURED_FAULTS, "system", batch=16)
    assert note is not None
    assert "148-6,240 per call" in note and "rank correlation -0.95" in note
    assert note.endswith("--allocator retain holds it")
    # under retain there is nothing to switch to: the fact alone
    held = page_faults.allocator_note(MEASURED_MEANS, MEASURED_FAULTS, "glibc retain", batch=16)
    assert held is not None and "--allocator" not in held


@pytest.mark.parametrize(
    ("means", "faults", "why"),
    [
        ([400.0, 500.0, 600.0], [90.0, 60.0, 30.0], "under 100 faults a call: not what held it"),
        # a retain trial on the VM: 0-856 faults a call are ~4 ms at 5 us each, its processes
        # 35 ms a call apart (b16 at 262-606/s): a rank correlation by chance, not the cause
        (
            [262.0, 606.0, 500.0, 420.0, 350.0, 450.0],
            [856.0, 0.0, 10.0, 200.0, 600.0, 50.0],
            "too few faults for the spread in seconds",
        ),
        ([400.0, 500.0, 600.0], [3000.0, 2500.0, 2000.0], "faults within 2x of each other"),
        ([400.0, 600.0, 500.0, 450.0], [6000.0, 150.0, 6100.0, 900.0], "speed does not follow"),
        ([400.0, 600.0], [6000.0, 150.0], "two processes: no correlation worth saying"),
        ([400.0, 600.0, 500.0], [6000.0, None, 150.0], "a process without a count is left out"),
    ],
)
def test_no_note_without_the_evidence(
    means: list[float], faults: list[float | None], why: str
) -> None:
    assert page_faults.allocator_note(means, faults, "system", batch=16) is None, why


def _part(worker: int, throughput: float, faults: int | None) -> Part:
    calls = 10
    elapsed = calls * 16 / throughput
    return Part(
        worker=worker,
        repetitions=[
            {"iters": calls, "elapsed_s": elapsed, "throughput": throughput, "worker": worker}
            for _ in range(2)
        ],
        latencies_ns=np.full(2 * calls, int(elapsed / calls * 1e9), np.int64),
        minor_faults=faults,
    )


def test_merge_keeps_each_process_faults_and_says_it_in_the_verdict() -> None:
    spec = TrialSpec(model="m", compiler="identity", batch=16, measure=MeasureSettings())
    parts = [
        _part(i, mean, round(faults * 20)) for i, (mean, faults) in
        enumerate(zip(MEASURED_MEANS, MEASURED_FAULTS, strict=True))
    ]  # fmt: skip
    result = TrialResult(key="k", spec={}, extra={"allocator": "system"})
    merge(result, parts, spec, stopped=None)
    kept = result.extra["page_faults"]
    assert kept["per_call"] == [6240.3, 1487.4, 148.0, 6240.3]
    assert kept["speed_follows_faults"] is True and "ru_minflt" in kept["source"]
    assert [w["faults_per_call"] for w in result.extra["workers"]] == kept["per_call"]
    assert result.verdict_reason.endswith("--allocator retain holds it")
    # processes without a count (no getrusage): nothing kept, nothing said
    bare = TrialResult(key="k", spec={}, extra={"allocator": "system"})
    merge(bare, [_part(i, m, None) for i, m in enumerate(MEASURED_MEANS)], spec, stopped=None)
    assert "page_faults" not in bare.extra and "page faults" not in bare.verdict_reason


# A fresh interpreter per allocator mode: glibc's mallopt cannot be undone in this process, and
# another test may have put ``retain`` in force here (trials run in-process).
COUNT = r"""
import json, sys
from ngb.core.trial import allocator
from ngb.core.compilers.base import Compiled
from ngb.core.statistics.stopping import Plan
from ngb.core.statistics.student_t import t_quantile
from ngb.core.trial.timing import time_share
from ngb.core.records.types import MeasureSettings, TrialSpec

from tests.cli_helpers import scaled

allocator.apply(sys.argv[1])
t_quantile(0.975, 2)  # cached after its first use: a worker has it preloaded

class Allocating(Compiled):
    # each call zero-fills a fresh 64 MiB buffer: above glibc's largest mmap threshold (32 MiB),
    # so the system allocator maps it anew every call and hands it back when it is freed (a
    # bytearray: numpy asks for huge pages on large arrays, which fault 512 times less)
    def run(self):
        return len(bytearray(64 << 20))

settings = MeasureSettings(warmup_s=0.05, warmup_max_s=0.2, min_iters=5, min_duration_s=0.0,
                           quiet_check_s=0.0)
spec = TrialSpec(model="m", compiler="identity", batch=1, measure=settings)
plan = Plan(worker=0, target=0.02, confidence=0.95, reps=3, total_max=3)
part = time_share(spec, Allocating(), plan, lambda: None, lambda *a, **k: None)
print(json.dumps({"faults": part.minor_faults, "calls": part.calls}))
"""


@pytest.mark.parametrize(("mode", "low", "high"), [("system", 8000, 40000), ("retain", 0, 100)])
def test_a_worker_counts_the_pages_its_calls_fault_in(mode: str, low: int, high: int) -> None:
    """The count is real: a call that maps 64 MiB afresh faults in ~16,384 pages of 4 KiB under
    glibc's defaults, and none once ``retain`` keeps the memory after the warm-up."""
    proc = subprocess.run(
        [sys.executable, "-c", COUNT, mode], capture_output=True, text=True, timeout=scaled(120)
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    per_call = got["faults"] / got["calls"]
    assert low <= per_call <= high, got
