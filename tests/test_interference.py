"""Interference detection and telemetry: a real CPU hog, fake NVML, a fake tegrastats binary."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from ngb.core.records.types import MeasureSettings, TrialSpec
from ngb.core.statistics.stopping import INVALID
from ngb.core.trial import interference
from ngb.core.trial.cpu import CpuSampler, CpuTick, others_percent
from ngb.core.trial.measure import run_trial


def test_others_percent() -> None:
    assert others_percent(75.0, 100.0, 2) == 25.0  # one core of two is ours
    assert others_percent(10.0, 100.0, 2) == 0.0  # never negative (sampling skew)


def test_disturbance_reasons() -> None:
    assert interference.disturbance(threshold=0.15, before=5.0, during=10.0) is None
    during = interference.disturbance(threshold=0.15, before=None, during=50.0)
    assert during and "50% of the CPU during the timed loop" in during and "threshold 15%" in during
    assert "just before" in (interference.disturbance(threshold=0.15, before=40, during=0) or "")
    gpu = interference.disturbance(threshold=0.15, before=0, during=0, gpu_others=[4242])
    assert gpu and "pid 4242" in gpu


def test_cpu_sampler_ticks_carry_memory_and_per_core() -> None:
    ticks: list[CpuTick] = []
    with CpuSampler(0.05, ticks.append) as sampler:
        time.sleep(0.2)
    assert ticks and len(ticks[0].per_cpu) == os.cpu_count()
    assert 0 < (ticks[0].mem_percent or 0) < 100 and (ticks[0].mem_total_mb or 0) > 100
    assert ticks[0].mem_used_mb is not None and ticks[0].mem_used_mb < ticks[0].mem_total_mb
    extras = sampler.extras()
    assert extras["others_percent_mean"] is not None and extras["mem_percent_max"]
    if sys.platform == "linux":  # Linux reports steal (0 on bare metal)
        assert extras["steal_percent_mean"] is not None


def test_cpu_facts_reads_governors(tmp_path: Path) -> None:
    for i, gov in enumerate(["performance", "powersave"]):
        (tmp_path / f"policy{i}").mkdir()
        (tmp_path / f"policy{i}" / "scaling_governor").write_text(gov + "\n")
    facts = interference.cpu_facts(tmp_path)
    assert facts["governor"] == "performance,powersave" and facts["cpu_count"] == os.cpu_count()
    assert interference.cpu_facts(tmp_path / "absent")["governor"] is None


class FakeNvml:
    """The slice of pynvml the monitor uses: a GPU whose SM clock ramps, with a stranger on it."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:  # noqa: N802 - NVML's names
        return f"gpu{index}"

    def nvmlDeviceGetClockInfo(self, handle: str, kind: int) -> float:  # noqa: N802
        return next(self.sm, 1980.0) if kind == self.NVML_CLOCK_SM else 2619.0

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(gpu=97, memory=40)

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(used=3 * 2**30, total=80 * 2**30)

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:  # noqa: N802
        return 350_000  # mW

    def nvmlDeviceGetTemperature(self, handle: str, kind: int) -> int:  # noqa: N802
        raise RuntimeError("NVMLError_NotSupported")  # a missing reading is left out

    def __init__(self, pids: list[int] | None = None) -> None:
        self.sm = iter([1200.0, 1600.0, 1980.0])
        self.pids = pids if pids is not None else [os.getpid(), 1]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list:  # noqa: N802
        return [SimpleNamespace(pid=pid) for pid in self.pids]


def test_gpu_monitor_with_fake_nvml() -> None:
    monitor = interference.GpuMonitor(0.01, nvml=FakeNvml(), index=0)
    assert monitor.available and monitor.sm_clock() == 1200.0
    with monitor:
        time.sleep(0.05)
    summary = monitor.summary()
    assert summary and summary["samples"] >= 2
    assert summary["power_w"]["mean"] == 350.0 and summary["util_percent"]["max"] == 97.0
    assert summary["mem_used_mb"]["max"] == 3072.0 and "temp_c" not in summary
    assert summary["other_pids"] == [1]  # this process is not "another process"


def _ended_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_ngbs_own_processes_are_never_others_on_the_gpu() -> None:
    """The H100 replay: every GPU trial was "disturbed: worker 1: other processes on the GPU (pid
    N)" where N was the trial's own parent (it held a CUDA context) or the previous worker. Here
    NVML lists the parent, this process, a live worker child, a worker that has ended -- and one
    process that is really someone else's (init, pid 1)."""
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        family = [os.getppid(), os.getpid(), worker.pid, _ended_pid()]
        monitor = interference.GpuMonitor(0.01, nvml=FakeNvml(family), index=0)
        with monitor:
            time.sleep(0.05)
        assert monitor.others == set()
        assert interference.disturbance(threshold=0.15, before=0.0, during=0.0,
                                        gpu_others=sorted(monitor.others)) is None  # fmt: skip
        stranger = interference.GpuMonitor(0.01, nvml=FakeNvml([*family, 1]), index=0)
        with stranger:
            time.sleep(0.05)
        assert stranger.others == {1}
    finally:
        worker.kill()
        worker.wait()


def test_gpu_monitor_is_off_without_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interference, "_load_nvml", lambda: None)
    monitor = interference.GpuMonitor()
    with monitor:
        pass
    assert not monitor.available and monitor.sm_clock() is None and monitor.summary() is None


TEGRA_LINE = (
    "RAM 2048/7772MB (lfb 1x4MB) SWAP 0/3886MB CPU [12%@1420,8%@1420] EMC_FREQ 0% "
    "GR3D_FREQ 61%@[1300] VDD_IN 5123mW/5000mW"
)


def test_parse_tegrastats() -> None:
    row = interference.parse_tegrastats(TEGRA_LINE)
    assert row == {
        "gpu_util_percent": 61.0,
        "gpu_freq_mhz": 1300.0,
        "ram_used_mb": 2048.0,
        "ram_total_mb": 7772.0,
        "power_w": 5.123,
    }
    assert interference.parse_tegrastats("nothing here") == {}


def test_tegrastats_runs_a_real_binary_and_is_off_without_one(tmp_path: Path) -> None:
    fake = tmp_path / "tegrastats"
    fake.write_text(f"#!/bin/sh\nwhile true; do echo '{TEGRA_LINE}'; sleep 0.02; done\n")
    fake.chmod(0o755)
    with interference.TegraStats(command=str(fake)) as tegra:
        time.sleep(0.3)
    summary = tegra.summary()
    assert summary and summary["samples"] >= 2 and summary["gpu_util_percent"]["max"] == 61.0
    absent = interference.TegraStats(command=None)
    absent.command = None
    with absent:
        pass
    assert not absent.available and absent.summary() is None


def test_a_cpu_hog_beside_a_trial_flags_it_disturbed() -> None:
    # One busy-looping process per logical core: others own the machine whatever its size.
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 1)
    ]
    try:
        time.sleep(0.5)  # let them get going
        measure = MeasureSettings(
            warmup_iters=1, warmup_s=0.0, min_iters=1, min_duration_s=0.1, repetitions=3,
            workers=1, quiet_check_s=0.2,
        )  # fmt: skip
        options = {"sleep_s": 0.005}  # the trial itself mostly sleeps
        result = run_trial(
            TrialSpec(model="m", compiler="noop", compiler_options=options, measure=measure)
        )
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert result.ok, result.error
    assert result.disturbed and result.verdict == INVALID
    assert "other processes used" in (result.verdict_reason or "")
    cpu = result.extra["workers"][0]["cpu"]
    assert cpu["others_percent_mean"] > 15.0


def test_disturbed_share_is_waited_and_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = iter(["a hog", None])
    monkeypatch.setattr(interference, "disturbance", lambda **kw: next(calls))
    measure = MeasureSettings(
        warmup_iters=0, warmup_s=0.0, min_iters=1, min_duration_s=0.0, repetitions=2,
        workers=1, quiet_check_s=0.0, disturbed_retries=2, disturbed_wait_s=0.0,
    )  # fmt: skip
    seen: list[dict] = []
    result = run_trial(TrialSpec(model="m", compiler="noop", measure=measure), emit=seen.append)
    assert not result.disturbed and result.extra["measure"]["retries"] == 1
    assert result.throughput.n == 2  # the disturbed attempt's repetitions were dropped
    assert any("measuring it again" in e.get("msg", "") for e in seen)


class _ReplayPsutil:
    """psutil as the sampler saw it in a localhost sweep's worker 0 (2-core VM, 2026-11-25):
    per-tick process readings of 408.9 % then 73.0 % (the sampler thread preempted between the
    clock and the process read) while the worker in truth kept both cores busy."""

    Error = Exception

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.system_ticks = iter([0.0, 95.1, 100.0])  # first call primes
        self.proc_ticks = iter([0.0, 408.9, 73.0])

    def _busy(self) -> float:  # both cores busy since the start, all of it the worker's
        return 2 * (time.monotonic() - self.t0)

    def cpu_percent(self, interval: object = None, percpu: bool = False) -> object:
        return [100.0, 100.0] if percpu else next(self.system_ticks, 100.0)

    def cpu_times_percent(self, interval: object = None) -> SimpleNamespace:
        return SimpleNamespace(steal=0.0)

    def cpu_times(self) -> SimpleNamespace:
        busy = self._busy()
        return _Times(user=busy, system=0.0, idle=0.0)

    def virtual_memory(self) -> SimpleNamespace:
        return SimpleNamespace(percent=10.0, total=2**33, available=2**32)

    def Process(self, pid: int | None = None) -> SimpleNamespace:  # noqa: N802 - psutil's name
        if pid is None:  # the sampler's own process: idle
            return SimpleNamespace(
                cpu_percent=lambda interval=None: 0.0,
                cpu_times=lambda: SimpleNamespace(user=0.0, system=0.0),
            )
        return SimpleNamespace(
            cpu_percent=lambda interval=None: next(self.proc_ticks, 200.0),
            cpu_times=lambda: SimpleNamespace(user=self._busy(), system=0.0),
        )


class _Times(tuple):  # a psutil scputimes stand-in: iterable fields with names
    def __new__(cls, user: float, system: float, idle: float) -> _Times:
        obj = super().__new__(cls, (user, system, idle))
        obj.user, obj.system, obj.idle = user, system, idle  # type: ignore[attr-defined]
        return obj


def test_others_are_judged_over_the_window_not_from_skewed_ticks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "psutil", _ReplayPsutil())
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    sampler = CpuSampler(0.05, pid=4242).start()
    deadline = time.monotonic() + 10
    while len(sampler.others) < 2 and time.monotonic() < deadline:  # two ticks: the skewed pair
        time.sleep(0.01)
    sampler.stop()
    ticks = sampler.others[:2]
    # per tick: max(0, 95.1 - 204.5) = 0, then 100 - 36.5 = 63.5: a phantom 32 % on average
    assert ticks == [0.0, pytest.approx(63.5)]
    extras = sampler.extras()
    assert extras["others_percent_mean"] is not None and extras["others_percent_mean"] < 1.0
    assert (
        interference.disturbance(threshold=0.15, before=0.0, during=extras["others_percent_mean"])
        is None
    )
    assert extras["harness_percent"] == 0.0  # the sampling (trial) process idled
