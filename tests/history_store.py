"""Seeded stores for ``ngb history``, ``ngb compare`` and ``ngb import`` (issue 35).

``seed_runs`` writes one run per value (``h-00``, ``h-01`` ...), each holding resnet18 under
onnxruntime at batch 1 on ``edge1`` with the given mean throughput and a stored 95 % interval
of ``rel_half`` of it; ``versions`` / ``packages`` per run let a test plant what changed, and
``changed`` per run replaces any other field of the result (an INVALID verdict, a wider interval,
a failure: ``{"error": ..., "error_kind": ...}``). Real DuckDB, real ingest
(``Store.ingest_results``): the rows are what a run stores.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

from ngb.core.records.types import MeasureSettings, Stats, TrialResult, TrialSpec
from ngb.core.trial.provenance import packages_sha
from ngb.sweeps.store.database import Store

START = 1_790_000_000.0
BASE_PACKAGES = ["numpy==2.1.0", "onnxruntime==1.20.0", "psutil==6.0.0"]


def trial(
    value: float,
    rel_half: float,
    when: float,
    *,
    batch: int = 1,
    versions: dict[str, str] | None = None,
    packages: Sequence[str] = BASE_PACKAGES,
    options: dict[str, object] | None = None,
    governor: str = "performance",
) -> TrialResult:
    spec = TrialSpec(
        model="resnet18",
        compiler="onnxruntime",
        batch=batch,
        compiler_options=options or {},
        measure=MeasureSettings(repetitions=5),
    )
    reps = [value * (1 + d) for d in (-0.01, 0.01, -0.005, 0.005, 0.0)]
    lines = list(packages)
    return TrialResult(
        key=spec.key,
        spec=spec.to_dict(),
        started_at=when,
        finished_at=when + 10,
        throughput=Stats(n=5, mean=value, std=statistics.stdev(reps)),
        repetitions=[{"iters": 10, "elapsed_s": 1.0, "throughput": v} for v in reps],
        ci_half_width=value * rel_half,
        verdict="VALID",
        precision="fp32",
        versions=versions or {"onnxruntime": "1.20.0", "torch": "2.9.0"},
        extra={
            "measure": {"df": 4},
            "device_state": {"governor": governor, "boost": "1", "gpus": None, "nvpmodel": None},
            "provenance": {"packages": lines, "packages_sha": packages_sha(lines),
                           "kernel": "6.8.0", "container": None},
        },
    )  # fmt: skip


def seed_runs(
    path: Path,
    values: Sequence[float],
    *,
    rel_half: float = 0.01,
    versions: Sequence[dict[str, str]] | None = None,
    packages: Sequence[Sequence[str]] | None = None,
    prefix: str = "h",
    device: str = "edge1",
    changed: Sequence[dict[str, object]] | None = None,
) -> Store:
    store = Store(path)
    with store.batch():  # one open of the file for every run (not one per call)
        _seed(store, values, rel_half, versions, packages, prefix, device, changed)
    return store


def _seed(
    store: Store,
    values: Sequence[float],
    rel_half: float,
    versions: Sequence[dict[str, str]] | None,
    packages: Sequence[Sequence[str]] | None,
    prefix: str,
    device: str,
    changed: Sequence[dict[str, object]] | None,
) -> None:
    for i, value in enumerate(values):
        run_id = f"{prefix}-{i:02d}"
        when = START + 3600 * i
        store.create_run(run_id, "history", "", [device], 1)
        result = trial(
            value,
            rel_half,
            when,
            versions=versions[i] if versions else None,
            packages=packages[i] if packages else BASE_PACKAGES,
        )
        for name, field in (changed[i] if changed else {}).items():
            setattr(result, name, field)
        store.ingest_results(run_id, device, [result])
