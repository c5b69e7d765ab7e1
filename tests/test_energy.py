"""Energy per inference (issue 23): the meters against faithful fakes, the real files where they
exist, the fold into a result, and a trial on a machine without a meter."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest
from ngb.core.records.types import MeasureSettings, TrialResult, TrialSpec
from ngb.core.trial import energy
from ngb.core.trial.energy_sources import (
    JetsonRails,
    NvmlSource,
    PowerIntegrator,
    RaplSource,
    board_watts,
    parse_tegrastats,
)
from ngb.core.trial.measure import run_trial
from ngb.core.trial.worker_start import START_ENV

# ---------------------------------------------------------------- RAPL: a sysfs tree with wrap


def _domain(root: Path, name: str, label: str, value: int, wrap: int) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "name").write_text(label + "\n")
    (folder / "energy_uj").write_text(f"{value}\n")
    (folder / "max_energy_range_uj").write_text(f"{wrap}\n")
    return folder


def _rapl_tree(root: Path) -> dict[str, Path]:
    """What a one-socket Intel box shows: package, its core/uncore/dram subdomains (flattened
    at the top of /sys/class/powercap as the kernel links them) and an mmio twin."""
    return {
        "pkg": _domain(root, "intel-rapl:0", "package-0", 262_143_000_000, 262_143_328_850),
        "core": _domain(root, "intel-rapl:0:0", "core", 5_000_000, 262_143_328_850),
        "dram": _domain(root, "intel-rapl:0:1", "dram", 1_000_000, 65_712_999_613),
        "mmio": _domain(root, "intel-rapl-mmio:0", "package-0", 7, 262_143_328_850),
    }


def test_rapl_sums_package_and_dram_across_a_counter_wrap(tmp_path: Path) -> None:
    tree = _rapl_tree(tmp_path)
    source = RaplSource(tmp_path)
    assert source.available(), source.why_not
    assert sorted(d[0] for d in source.domains) == ["dram", "package-0"]  # core counted once
    assert source.read() == 0.0
    # the package counter wraps: 262_143_000_000 -> max (328_850 more) -> 0 -> 1_671_150
    (tree["pkg"] / "energy_uj").write_text("1671149\n")
    (tree["dram"] / "energy_uj").write_text("3000000\n")  # +2 J
    assert source.read() == pytest.approx(2.0 + 2.0)
    (tree["pkg"] / "energy_uj").write_text("11671149\n")  # +10 J, no wrap
    assert source.read() == pytest.approx(14.0)


def test_rapl_dram_nested_in_its_package_and_linked_at_the_top(tmp_path: Path) -> None:
    pkg = _domain(tmp_path, "intel-rapl:0", "package-0", 10, 1_000_000)
    dram = _domain(pkg, "intel-rapl:0:1", "dram", 5, 1_000_000)
    (tmp_path / "intel-rapl:0:1").symlink_to(dram)  # the kernel's link at the top: counted once
    source = RaplSource(tmp_path)
    assert sorted(d[0] for d in source.domains) == ["dram", "package-0"]
    (dram / "energy_uj").write_text("500005\n")
    assert source.read() == pytest.approx(0.5)


def test_rapl_root_only_files_say_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _rapl_tree(tmp_path)
    real = Path.read_text

    def root_only(self: Path, *args: object, **kwargs: object) -> str:
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(self))  # 0400 root, as since 5.10
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", root_only)
    source = RaplSource(tmp_path)
    assert not source.available()
    assert source.why_not.startswith("RAPL not readable") and "root-only" in source.why_not
    reason = energy.Meter(None, "no power meter: " + source.why_not).reading["note"]
    assert reason.startswith("no power meter: RAPL not readable")


def test_rapl_absent(tmp_path: Path) -> None:
    source = RaplSource(tmp_path / "none")
    assert not source.available() and "RAPL not present" in source.why_not


def test_real_rapl_files_where_they_exist() -> None:
    source = RaplSource()
    if not source.available():  # this VM has none: the reason is one line naming the files
        assert "RAPL" in source.why_not and "\n" not in source.why_not
        return
    first = source.read()
    sum(i * i for i in range(200_000))
    assert source.read() >= first


# ---------------------------------------------------------------- NVML: a fake module


class FakeNvml:
    """pynvml's calls that NvmlSource makes; the energy counter is in mJ, power in mW."""

    class NVMLError(Exception):
        pass

    def __init__(self, energy_mj: int | None = 1_000_000, power_mw: int = 250_000) -> None:
        self.energy_mj, self.power_mw = energy_mj, power_mw
        self.shut = False

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        if index != 0:
            raise self.NVMLError("Invalid Argument")
        return "gpu0"

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: str) -> int:
        if self.energy_mj is None:
            raise self.NVMLError("Not Supported")
        return self.energy_mj

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        return self.power_mw


def test_nvml_total_energy_counter() -> None:
    fake = FakeNvml()
    source = NvmlSource(nvml=fake)
    assert source.available() and source.name == "nvml-energy" and source.note == ""
    fake.energy_mj += 12_345
    assert source.read() == pytest.approx(12.345)
    source.close()
    assert fake.shut


def test_nvml_without_counter_integrates_power_and_says_a_thread_runs() -> None:
    fake = FakeNvml(energy_mj=None, power_mw=100_000)  # 100 W
    source = NvmlSource(nvml=fake, period_s=0.005)
    assert source.available() and source.name == "nvml-power"
    assert "thread in the measured process" in source.note
    source.begin_sampling()
    start = source.read()
    import time

    time.sleep(0.2)
    joules = source.read() - start
    source.close()
    assert joules == pytest.approx(100 * 0.2, rel=0.3)


def test_nvml_missing_gpu_is_a_reason() -> None:
    source = NvmlSource(index=3, nvml=FakeNvml())
    assert not source.available() and source.why_not.startswith("NVML not usable")


# ---------------------------------------------------------------- Jetson: rails and tegrastats

ORIN_LINES = [
    "11-25-2026 10:00:00 RAM 2841/30536MB (lfb 6x4MB) CPU [12%@1190,5%@1190] EMC_FREQ 0% "
    "GR3D_FREQ 0% cpu@45.5C VDD_GPU_SOC 3186mW/3186mW VDD_CPU_CV 796mW/796mW "
    "VIN_SYS_5V0 3533mW/3533mW VDD_IN 5012mW/5012mW",
    "11-25-2026 10:00:01 RAM 2841/30536MB CPU [90%@2201] GR3D_FREQ 99% VDD_GPU_SOC 12000mW/7593mW "
    "VDD_CPU_CV 1600mW/1198mW VDD_IN 15012mW/10012mW",
    "11-25-2026 10:00:02 RAM 2841/30536MB CPU [90%@2201] GR3D_FREQ 99% VDD_IN 15012mW/11678mW",
]
NANO_LINE = (
    "RAM 1500/3964MB (lfb 100x4MB) SWAP 0/1982MB CPU [5%@102,off,off,off] EMC_FREQ 0% "
    "GR3D_FREQ 0% PLL@22C CPU@25C POM_5V_IN 1930/1930 POM_5V_GPU 0/0 POM_5V_CPU 160/160"
)


def test_tegrastats_lines_parse_to_rail_watts() -> None:
    rails = parse_tegrastats(ORIN_LINES[0])
    assert rails == {
        "VDD_GPU_SOC": 3.186,
        "VDD_CPU_CV": 0.796,
        "VIN_SYS_5V0": 3.533,
        "VDD_IN": 5.012,
    }
    assert board_watts(rails) == 5.012
    nano = parse_tegrastats(NANO_LINE)
    assert board_watts(nano) == 1.93 and nano["POM_5V_CPU"] == 0.16
    assert board_watts({"VDD_A": 1.0, "VDD_B": 2.0}) == 3.0  # no input rail: the sum


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_recorded_tegrastats_integrate_to_joules() -> None:
    clock = Clock()
    rails = JetsonRails(lines=ORIN_LINES, clock=clock)
    assert rails.available() and rails.name == "jetson-tegrastats"
    rails.sample()  # 5.012 W at t=0
    clock.t = 1.0
    rails.sample()  # 15.012 W at t=1: trapezoid (5.012 + 15.012) / 2
    clock.t = 2.0
    rails.sample()
    assert rails.read() == pytest.approx(10.012 + 15.012)
    assert "VDD_IN" in rails.rails


def _hwmon_tree(root: Path) -> Path:
    """JetPack 5's ina3221 under hwmon: inN_label, inN_input (mV), currN_input (mA)."""
    other = root / "hwmon0"
    other.mkdir(parents=True)
    (other / "name").write_text("soc_thermal\n")
    ina = root / "hwmon3"
    ina.mkdir()
    (ina / "name").write_text("ina3221\n")
    for ch, label, mv, ma in ((1, "VDD_IN", 19_000, 500), (2, "VDD_CPU_GPU_CV", 19_000, 100)):
        (ina / f"in{ch}_label").write_text(label + "\n")
        (ina / f"in{ch}_input").write_text(f"{mv}\n")
        (ina / f"curr{ch}_input").write_text(f"{ma}\n")
    return ina


def test_hwmon_rails_give_the_board_input(tmp_path: Path) -> None:
    ina = _hwmon_tree(tmp_path)
    clock = Clock()
    rails = JetsonRails(hwmon_root=tmp_path, i2c_root=tmp_path / "none", clock=clock)
    assert rails.available() and rails.rails == ["VDD_CPU_GPU_CV", "VDD_IN"]
    rails.sample()  # 19 V x 0.5 A = 9.5 W
    clock.t = 2.0
    (ina / "curr1_input").write_text("700\n")  # 13.3 W
    rails.sample()
    assert rails.read() == pytest.approx(2.0 * (9.5 + 13.3) / 2)


def test_old_l4t_i2c_power_files(tmp_path: Path) -> None:
    iio = tmp_path / "1-0040" / "iio:device0"
    iio.mkdir(parents=True)
    (iio / "rail_name_0").write_text("POM_5V_IN\n")
    (iio / "in_power0_input").write_text("4000\n")
    (iio / "rail_name_1").write_text("POM_5V_GPU\n")
    (iio / "in_power1_input").write_text("1000\n")
    clock = Clock()
    rails = JetsonRails(hwmon_root=tmp_path / "none", i2c_root=tmp_path, clock=clock)
    rails.sample()
    clock.t = 0.5
    rails.sample()
    assert rails.read() == pytest.approx(4.0 * 0.5)  # the input rail, not input + GPU


def test_no_rails_is_a_reason(tmp_path: Path) -> None:
    rails = JetsonRails(hwmon_root=tmp_path, i2c_root=tmp_path)
    assert not rails.available() and "no Jetson INA3221 rails" in rails.why_not


def test_integrator_trapezoids() -> None:
    clock, watts = Clock(), iter([10.0, 20.0, 20.0])
    power = PowerIntegrator(lambda: next(watts), clock=clock)
    power.sample()
    clock.t = 1.0
    power.sample()
    clock.t = 3.0
    power.sample()
    assert power.read() == pytest.approx(15.0 + 40.0)


# ---------------------------------------------------------------- the meter and the fold


class Counter:
    """A counter source: ``watts`` constant power on a fake clock."""

    name, why_not, note = "fake", "", ""

    def __init__(self, clock: Clock, watts: float) -> None:
        self.clock, self.watts = clock, watts

    def available(self) -> bool:
        return True

    def read(self) -> float:
        return self.clock.t * self.watts

    def close(self) -> None:
        pass


def _worker_reading(watts: float, idle: float, samples_per_s: float) -> dict:
    clock = Clock()
    source = Counter(clock, idle)

    def sleep(s: float) -> None:
        clock.t += s

    meter = energy.Meter(source, idle_s=0.5, clock=clock, sleep=sleep)
    meter.idle()
    source.watts = watts
    for _ in range(3):
        meter.begin()
        clock.t += 0.3
        meter.mark(int(samples_per_s * 0.3))
    return meter.reading


def test_meter_and_apply_fold_workers_with_an_interval() -> None:
    readings = [_worker_reading(w, 10.0, 1000.0) for w in (50.0, 52.0, 48.0, 50.0)]
    assert readings[0]["idle_w"] == pytest.approx(10.0)
    assert [r["samples"] for r in readings[0]["reps"]] == [300.0] * 3
    result = TrialResult(key="k", spec={})
    energy.apply(result, readings, 0.95)
    assert result.energy_j_per_sample == pytest.approx(0.05)
    assert result.samples_per_j == pytest.approx(20.0)
    assert result.power_w_mean == pytest.approx(50.0)
    assert result.idle_power_w == pytest.approx(10.0)
    assert result.energy_above_idle_j_per_sample == pytest.approx(0.04)
    # Student-t over 4 process values (0.050, 0.052, 0.048, 0.050): t(3) = 3.182
    sd = math.sqrt(sum((v - 0.05) ** 2 for v in (0.05, 0.052, 0.048, 0.05)) / 3)
    assert result.energy_j_per_sample_ci == pytest.approx(3.182 * sd / 2, rel=1e-3)
    assert result.energy_source == "fake"
    assert "mJ/sample" in energy.summary(result)


def test_apply_without_a_meter_keeps_the_reason() -> None:
    result = TrialResult(key="k", spec={})
    energy.apply(result, [{"note": "no power meter: RAPL not present"}, None], 0.95)
    assert result.energy_j_per_sample is None and result.samples_per_j is None
    assert result.energy_note == "no power meter: RAPL not present"
    assert energy.summary(result) == "no power meter: RAPL not present"


def test_find_source_on_this_machine_names_every_meter_tried() -> None:
    source, reason = energy.find_source("cpu")
    if source is None:
        assert reason.startswith("no power meter: ") and "Jetson" in reason
    else:
        source.close()


def test_a_trial_without_a_meter_says_so_in_one_line_and_in_the_store(tmp_path: Path) -> None:
    spec = TrialSpec(
        model="noop-model",
        compiler="noop",
        measure=MeasureSettings(
            warmup_iters=1, warmup_s=0.0, min_iters=3, min_duration_s=0.02, repetitions=3,
            workers=1, quiet_check_s=0.0,
        ),
    )  # fmt: skip
    result = run_trial(spec)
    assert result.ok
    if result.energy_source is not None:  # a machine with a readable meter
        assert result.energy_j_per_sample is not None and result.energy_j_per_sample > 0
        return
    assert result.energy_note and result.energy_note.startswith("no power meter: ")
    assert "\n" not in result.energy_note
    from ngb.sweeps.store.database import Store

    store = Store(tmp_path / "r.duckdb")
    store.create_run("e1", "energy", "", ["localhost"], 1)
    store.ingest_results("e1", "localhost", [result])
    _, rows = store.select("SELECT energy_j_per_sample, energy_note FROM results")
    assert rows == [(None, result.energy_note)]


def test_key_unchanged_by_the_energy_setting_at_its_default() -> None:
    spec = TrialSpec(model="resnet18", compiler="identity")
    data = spec.to_dict()
    data["measure"].pop("energy_idle_s")
    assert TrialSpec.from_dict(data).key == spec.key
    with pytest.raises(Exception, match="energy_idle_s"):
        MeasureSettings(energy_idle_s=-1)


def test_ngb_measure_prints_the_energy_line() -> None:
    from click.testing import CliRunner
    from ngb.sweeps.cli import cli

    argv = ["measure", "resnet18", "-c", "noop", "--repetitions", "3", "--workers", "1",
            "--min-duration", "0.02"]  # fmt: skip
    out = CliRunner().invoke(cli, argv)
    assert out.exit_code == 0, out.output
    line = " ".join(out.stdout.split())
    assert "energy: no power meter: " in line or "mJ/sample" in line


class WallMeter:
    """A counter that reads 10 W of wall-clock time (a stand-in for RAPL in a real trial)."""

    name, why_not, note = "wall-10W", "", ""

    def available(self) -> bool:
        return True

    def read(self) -> float:
        import time

        return 10.0 * time.perf_counter()

    def close(self) -> None:
        pass


def test_the_timing_hook_measures_every_repetition_of_every_worker(monkeypatch) -> None:
    monkeypatch.setattr(energy, "find_source", lambda device: (WallMeter(), ""))
    # the fake lives in this process: its workers must be forked from here, not started by a
    # fork server (what worker_start picks beside pytest-xdist's I/O thread)
    monkeypatch.setenv(START_ENV, "fork")
    spec = TrialSpec(
        model="noop-model", compiler="noop", compiler_options={"sleep_s": 0.002},
        measure=MeasureSettings(
            warmup_iters=1, warmup_s=0.0, min_iters=3, min_duration_s=0.02, repetitions=4,
            workers=2, quiet_check_s=0.0, energy_idle_s=0.25,
        ),
    )  # fmt: skip
    # idle power is the meter's change over the clock's between two (clock, meter) reads: a
    # worker preempted between its clock and its meter read skews it by that pause over the
    # idle window. 50 ms failed the 5 % below once beside three xdist workers; 250 ms allows 12 ms
    result = run_trial(spec)
    assert result.ok and result.energy_source == "wall-10W"
    readings = [t["energy"] for t in result.extra["telemetry"]]
    assert [len(r["reps"]) for r in readings] == [2, 2]  # 4 repetitions over 2 processes
    assert all(r["idle_w"] == pytest.approx(10.0, rel=0.05) for r in readings)
    # 10 W over each timed loop: joules per sample = 10 x a worker's loop seconds per sample.
    # From the loops' own times, not 1 / mean throughput: under load the repetitions' rates
    # differ, and the mean of rates is not the rate of the sums.
    loops: dict[object, list[float]] = {}
    for rep in result.repetitions:
        seconds, samples = loops.setdefault(rep["worker"], [0.0, 0.0])
        loops[rep["worker"]] = [seconds + rep["elapsed_s"], samples + rep["iters"] * spec.batch]
    timed = statistics.fmean(10.0 * seconds / samples for seconds, samples in loops.values())
    assert len(loops) == 2
    assert result.energy_j_per_sample == pytest.approx(timed, rel=0.2)
    assert result.power_w_mean == pytest.approx(10.0, rel=0.05)
    assert result.energy_above_idle_j_per_sample == pytest.approx(0.0, abs=1e-3)
    assert result.energy_j_per_sample_ci is not None
