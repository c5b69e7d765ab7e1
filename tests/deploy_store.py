"""A seeded results store for the deployment reports and ``ngb advise`` (issue 23).

Two CPU devices of group ``edge``: ``edge1`` with a power meter (RAPL) and a price, ``edge2``
without a meter (its rows carry the "no power meter" note). Models resnet18, deit3_small and
convnext_tiny under identity (the baseline), torchscript, onnxruntime and openvino (which runs
bf16: an error above 1e-3), at batches 1 and 8. The numbers are chosen so that:

- resnet18 b8: openvino bf16 (400/s) and onnxruntime fp32 (398/s) are within noise;
- deit3_small: every b8 configuration has p99 > 50 ms, and openvino misses max_err too;
- convnext_tiny: onnxruntime b8 is clearly first and keeps fp32.
"""

from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path

from ngb.core.records.types import MeasureSettings, Stats, TrialResult, TrialSpec
from ngb.sweeps.store.database import Store

NOISE = (-0.01, 0.01, -0.005, 0.005, 0.0)
INVENTORY = """
[devices.edge1]
host = "edge1.lan"
groups = ["edge"]
price_per_hour = 0.36

[devices.edge2]
host = "edge2.lan"
groups = ["edge"]

[groups.edge]
price_per_hour = 0.18
"""

#: (model, compiler, batch) -> throughput (samples/s) on edge1; edge2 runs at half
THROUGHPUT = {
    ("resnet18", "identity", 1): 100.0, ("resnet18", "identity", 8): 200.0,
    ("resnet18", "torchscript", 8): 220.0, ("resnet18", "onnxruntime", 1): 150.0,
    ("resnet18", "onnxruntime", 8): 398.0, ("resnet18", "openvino", 8): 400.0,
    ("deit3_small", "identity", 8): 60.0, ("deit3_small", "onnxruntime", 8): 90.0,
    ("deit3_small", "openvino", 8): 130.0, ("deit3_small", "onnxruntime", 1): 40.0,
    ("convnext_tiny", "identity", 8): 50.0, ("convnext_tiny", "onnxruntime", 8): 120.0,
    ("convnext_tiny", "openvino", 8): 80.0, ("convnext_tiny", "torchscript", 8): 52.0,
}  # fmt: skip
PRECISION = {"openvino": "bf16"}
ERROR = {"identity": None, "torchscript": 1e-6, "onnxruntime": 2e-5, "openvino": 5e-3}
COMPILE_S = {"identity": 0.1, "torchscript": 2.0, "onnxruntime": 4.0, "openvino": 6.0}
EXPORT_S = {"onnxruntime": 3.0, "openvino": 3.0}
WATTS = {"identity": 40.0, "torchscript": 40.0, "onnxruntime": 36.0, "openvino": 30.0}
NO_METER = (
    "no power meter: RAPL not readable (/sys/class/powercap/intel-rapl:0/energy_uj is root-only)"
)


def p99_ms(model: str, batch: int, tput: float) -> float:
    """Per-call p99: a call is a batch; deit3_small has a slow tail at batch 8."""
    tail = 5.0 if model == "deit3_small" and batch == 8 else 1.2
    return batch / tput * 1000 * tail


def result(device: str, model: str, compiler: str, batch: int, tput: float) -> TrialResult:
    spec = TrialSpec(model=model, compiler=compiler, batch=batch,
                     measure=MeasureSettings(repetitions=5))  # fmt: skip
    reps = [tput * (1 + n) for n in NOISE]
    metered = device == "edge1"
    watts = WATTS[compiler]
    j = watts / tput
    return TrialResult(
        key=spec.key,
        spec=spec.to_dict(),
        started_at=1_700_000_000.0,
        finished_at=1_700_000_010.0,
        throughput=Stats(n=5, mean=tput, std=statistics.stdev(reps)),
        latency_ms=Stats(n=100, p99=p99_ms(model, batch, tput), p50=batch / tput * 1000),
        repetitions=[{"iters": 10, "elapsed_s": 1.0, "throughput": v} for v in reps],
        compile_s=COMPILE_S[compiler],
        export_s=EXPORT_S.get(compiler),
        max_abs_err=ERROR[compiler],
        peak_rss_mb=300.0 + 20 * batch,
        precision=PRECISION.get(compiler, "fp32"),
        verdict="VALID",
        energy_j_per_sample=j if metered else None,
        energy_j_per_sample_ci=j * 0.01 if metered else None,
        energy_above_idle_j_per_sample=(watts - 10.0) / tput if metered else None,
        samples_per_j=1 / j if metered else None,
        power_w_mean=watts if metered else None,
        idle_power_w=10.0 if metered else None,
        energy_source="rapl" if metered else None,
        energy_note=None if metered else NO_METER,
    )


def seed(path: Path) -> Store:
    store = Store(path)
    store.create_run("deploy", "deploy-fixture", 'baseline = "identity"\n', ["edge1", "edge2"], 14)
    for device, scale in (("edge1", 1.0), ("edge2", 0.5)):
        rows = [result(device, m, c, b, t * scale) for (m, c, b), t in THROUGHPUT.items()]
        store.ingest_results("deploy", device, rows)
    return store


def write_inventory(home: Path) -> None:
    from ngb.devices.paths import get_paths

    target = get_paths().inventory
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(INVENTORY, encoding="utf-8")


# ---------------------------------------------------------------- the cpu-repro run's numbers

CPU_REPRO = Path(__file__).parent / "data" / "cpu_repro_timm.csv"
#: zero-mean, no lag-1 correlation (ngb.core.statistics.autocorrelation would widen a trend):
#: reps = mean + d * this
_PATTERN = (-1.0, 1.0, -0.5, 0.5, 0.0)
#: max abs error against eager, which docs/RESULTS.md's tables do not list: fp32 compilers agree
#: to ~1e-5 on these models, OpenVINO's bf16 to ~1e-2 (its verify step's order of magnitude)
CPU_REPRO_ERR = {"fp32": 1e-5, "bf16": 1e-2}


def _reps(mean: float, half: float) -> list[float]:
    """Five repetitions with ``mean`` and a 95 % t-interval of about ``half``."""
    sd_unit = statistics.stdev(_PATTERN)
    d = half * math.sqrt(len(_PATTERN)) / (2.776 * sd_unit)  # t(0.975, 4) = 2.776
    return [mean + d * p for p in _PATTERN]


def seed_cpu_repro(path: Path, device: str = "localhost") -> Store:
    """The cpu-repro run's resnet18, deit3_small and convnext_tiny rows as a store."""
    results = []
    with CPU_REPRO.open() as fh:
        for row in csv.DictReader(line for line in fh if not line.startswith("#")):
            batch, mean, half = int(row["batch"]), float(row["throughput"]), float(row["ci_half"])
            spec = TrialSpec(model=row["model"], compiler=row["compiler"], batch=batch,
                             measure=MeasureSettings(repetitions=5))  # fmt: skip
            reps = _reps(mean, half)
            results.append(
                TrialResult(
                    key=spec.key,
                    spec=spec.to_dict(),
                    started_at=1_795_500_000.0,
                    finished_at=1_795_500_010.0,
                    throughput=Stats(n=5, mean=mean, std=statistics.stdev(reps)),
                    repetitions=[{"iters": 10, "elapsed_s": 1.0, "throughput": v} for v in reps],
                    compile_s=float(row["compile_s"]),
                    precision=row["precision"],
                    max_abs_err=None
                    if row["compiler"] == "identity"
                    else CPU_REPRO_ERR[row["precision"]],
                    verdict=row["verdict"],
                    ci_half_width=half,
                    energy_note=NO_METER,
                )  # fmt: skip
            )
    store = Store(path)
    store.create_run("cpu-repro-20261125-040248-0d1f", "cpu-repro", "", [device], len(results))
    store.ingest_results("cpu-repro-20261125-040248-0d1f", device, results)
    return store
