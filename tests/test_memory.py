"""Memory that counts every runtime (issue 30, item 10): NVML's figure for the worker process
(a fake NVML here: no GPU on this machine), host peak RSS per phase, and the stated source."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from ngb.core.records.types import TrialResult
from ngb.core.trial import memory
from ngb.core.trial.memory import PhaseMemory
from ngb.core.trial.timing import Part, _memory
from ngb.sweeps.store.database import Store

MIB = 2**20


class FakeNvml:
    """A GPU where this process holds ``held_mb`` (what a runtime allocated, torch or not) and the
    device shows ``idle_mb`` more in use by nobody. ``listed``: whether NVML lists this pid (in a
    container's pid namespace it does not)."""

    def __init__(self, listed: bool = True, disclosed: bool = True) -> None:
        self.held_mb = 0.0
        self.idle_mb = 500.0
        self.listed, self.disclosed = listed, disclosed

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:  # noqa: N802 - NVML's names
        return f"gpu{index}"

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list:  # noqa: N802
        used = int(self.held_mb * MIB) if self.disclosed else None
        me = [SimpleNamespace(pid=os.getpid(), usedGpuMemory=used)] if self.listed else []
        return [*me, SimpleNamespace(pid=1, usedGpuMemory=7 * 2**30)]

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(used=int((self.idle_mb + self.held_mb) * MIB), total=80 * 2**30)


def _compile_spike(nvml: FakeNvml) -> None:
    """A TensorRT-like build: a 3 GiB workspace while building, a 1 GiB engine kept after."""
    nvml.held_mb = 3072.0
    time.sleep(5 * memory.COMPILE_PERIOD_S)  # the side thread samples it
    nvml.held_mb = 1024.0


def test_nvml_counts_what_the_process_holds_with_the_compile_peak_sampled() -> None:
    nvml = FakeNvml()
    mem = PhaseMemory(nvml).start()  # type: ignore[arg-type]
    try:
        _compile_spike(nvml)
        mem.mark("compile")
        nvml.held_mb = 1200.0  # warm-up: an arena grows (ONNX Runtime's CUDA arena)
        mem.mark("warmup")
        mem.mark("timed")
    finally:
        mem.close()
    assert mem.gpu_source == "nvml-process"
    assert mem.gpu == {"compile": 3072.0, "warmup": 1200.0, "timed": 1200.0}
    assert mem.peak_gpu_mb == 3072.0  # the workspace counts: the device must hold it once
    assert mem.to_dict()["gpu_source"] == "nvml-process"


@pytest.mark.parametrize("listed, disclosed", [(False, True), (True, False)])
def test_without_a_process_figure_the_device_delta_is_used(listed: bool, disclosed: bool) -> None:
    """A container's own pids (not listed) or a withheld figure: device used now minus used when
    the worker started, and the source says so."""
    nvml = FakeNvml(listed=listed, disclosed=disclosed)
    mem = PhaseMemory(nvml).start()  # type: ignore[arg-type]
    try:
        nvml.held_mb = 800.0
        mem.mark("compile")
    finally:
        mem.close()
    assert mem.gpu_source == "nvml-device-delta" and mem.gpu["compile"] == pytest.approx(800.0)


def test_no_nvml_no_gpu_figures() -> None:
    mem = PhaseMemory(None).start()
    mem.mark("compile")
    assert mem.gpu == {} and mem.gpu_source is None and mem.peak_gpu_mb is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM and clear_refs: Linux")
def test_host_peak_rss_is_per_phase() -> None:
    """200 MiB touched in the warm-up and freed before the timed loops: the warm-up's peak shows
    it, the timed phase's does not (the kernel's high-water mark is reset between phases)."""
    mem = PhaseMemory().start()
    mem.mark("compile")
    block = bytearray(200 * MIB)
    for i in range(0, len(block), 4096):  # touch every page
        block[i] = 1
    del block
    mem.mark("warmup")
    mem.mark("timed")
    assert mem.rss_source == "vmhwm-per-phase"
    assert mem.rss["warmup"] >= mem.rss["compile"] + 150
    assert mem.rss["timed"] < mem.rss["warmup"] - 150


def test_where_the_mark_cannot_be_reset_the_source_says_cumulative(tmp_path: Path) -> None:
    mem = PhaseMemory(proc=tmp_path / "absent").start()
    mem.mark("compile")
    assert mem.rss_source == "ru_maxrss-cumulative" and mem.rss["compile"] > 1


def test_the_trial_takes_the_largest_figure_over_workers_and_nvml_over_torch() -> None:
    result = TrialResult(key="k", spec={}, gpu_mem_mb=300.0, gpu_mem_source="torch-allocator")
    parts = [
        Part(memory={"rss_mb": {"compile": 900.0, "timed": 950.0}, "rss_source": "vmhwm-per-phase",
                     "gpu_mb": {"compile": 3072.0, "timed": 1024.0}, "gpu_source": "nvml-process"}),
        Part(memory={"rss_mb": {"compile": 880.0, "timed": 990.0}, "rss_source": "vmhwm-per-phase",
                     "gpu_mb": {"compile": 2900.0, "timed": 1100.0}, "gpu_source": "nvml-process"}),
    ]  # fmt: skip
    _memory(result, parts)
    assert result.peak_rss_phase_mb == {"compile": 900.0, "timed": 990.0}
    assert result.gpu_mem_phase_mb == {"compile": 3072.0, "timed": 1100.0}
    assert result.gpu_mem_mb == 3072.0 and result.gpu_mem_source == "nvml-process"


def test_a_cpu_trial_stores_rss_per_phase_with_its_source(tmp_path: Path) -> None:
    from ngb.core.records.types import MeasureSettings, TrialSpec
    from ngb.core.trial.measure import run_trial

    spec = TrialSpec(model="noop-model", compiler="noop", measure=MeasureSettings(
        warmup_iters=1, warmup_s=0.0, min_iters=3, min_duration_s=0.02, repetitions=2,
        workers=1, quiet_check_s=0.0))  # fmt: skip
    result = run_trial(spec)
    assert result.ok, result.error
    assert set(result.peak_rss_phase_mb) == {"compile", "warmup", "timed"}
    assert result.rss_source == "vmhwm-per-phase" and result.gpu_mem_mb is None
    store = Store(tmp_path / "r.duckdb")
    store.create_run("m", "mem", "", ["here"], 1)
    store.ingest_results("m", "here", [result])
    _, rows = store.select(
        "SELECT peak_rss_compile_mb, peak_rss_warmup_mb, peak_rss_timed_mb, rss_source, "
        "gpu_mem_source FROM trials"
    )
    (row,) = rows
    assert all(v > 1 for v in row[:3]) and row[3:] == ("vmhwm-per-phase", None)
