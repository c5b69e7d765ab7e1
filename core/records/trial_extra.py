"""``TrialResult.extra``, declared: every key a trial's record may carry, who writes it, its type.

``extra`` is where a trial keeps what has no column of its own: the measurement's own record
(``measure``, ``workers``), the passes beside it (``accuracy``, ``profile``, ``fidelity``), what the
device ran under (``device_state``, ``provenance``), a compiler's facts (``CompilerFacts``) and
what the orchestrator adds on the way to the store (``slurm``, ``run_device``). Ingest, the
reports, the API and the console read it by key, so the keys are declared once, here, at the
bottom of ``ngb.core`` where every layer may import them: mypy rejects a write of an undeclared
key (and an undeclared ``extra["key"]`` read), and ``tests/test_trial_extra.py`` scans the sources
for every literal key written or read (``.get`` too, which mypy lets pass) against this list.

A value built as a literal by its producer is a TypedDict here; a value a producer's dataclass
writes through ``to_dict`` stays ``dict[str, object]``, and that class (named beside the key) is
its declaration and its ``from_dict`` its reader.

Records read back (the agent's stream, a checkpoint, the store's JSON) come through ``from_json``.
A key it does not know -- a newer agent's -- is kept, not dropped and not an error: an older ngb
ingests that record unchanged (stored rows keep everything the device sent), and nothing reads the
key because every read names a declared one; ``unknown_keys`` lists such keys where a caller wants
to say so. Values are not checked there: a record from another ngb version may hold another kind,
so readers of stored JSON keep checking a value's kind (``ngb.sweeps.rows.mapping``, ``number``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, TypedDict, cast

if TYPE_CHECKING:
    from ngb.core.base.device_state import DeviceState
    from ngb.core.statistics.accuracy_stats import AccuracyRecord, Fidelity


class TuningRecord(TypedDict):
    """``extra["tuning"]``: where a TVM trial's schedules came from (``ngb.core.compilers.
    tvm_tuning.provenance``), so a reused search is told apart from a fresh one."""

    reused: bool
    # the tuning store's meta.json as read (TuningMeta): None where it does not say
    run_id: str | None
    trials: int | None
    best_ms: float | None
    tune_s: float | None
    early_stopped: bool | None
    updated: float | None  # when it was tuned (time.time())


class CompilerFacts(TypedDict, total=False):
    """``Compiled.extra`` (``ngb.core.compilers``): what a compiled model says of itself, merged
    into the trial's ``extra`` by ``ngb.core.trial.measure`` after its timed loops (and into a
    serving outcome's by ``ngb.core.serving.serve``). One section per backend that writes them."""

    # every timed loop (compilers.base, identity, openvino): requests kept in flight, for the
    # per-request latency and the profile's timed figure
    # (ngb.core.compilers.profiling.requests_in_flight)
    requests_in_flight: int
    # identity's CUDA loop (ngb.core.compilers.identity.GPU_LOOP): how its latencies are timed
    gpu_loop: str
    gpu_group_calls: int
    # identity, inductor, torchscript: the torch threads in force
    torch_threads: int
    channels_last: bool
    # inductor
    mode: str
    fullgraph: bool
    cache: bool
    # torchscript (folded_ops: what freezing folded away, which a profile marks fused)
    frozen: bool
    optimize_for_inference: bool
    folded_ops: dict[str, int]
    # onnxruntime
    providers: list[str]
    graph_optimization_level: str
    execution_mode: str
    intra_op_threads: int
    # onnxruntime, openvino, tensorrt: the exported file the runtime compiled
    onnx_path: str
    # openvino: its async queue and the properties it chose (read back, as the device gave them)
    serving_requests: int
    mean_in_flight: float
    driver: str
    hint: str
    device: str  # OpenVINO's own target ("CPU"), not the trial's device
    nireq: int
    optimal_nireq: int
    num_streams: int | float | str
    inference_num_threads: int | float | str
    inference_precision: int | float | str
    # tensorrt
    precision: str | None
    precision_via: str
    workspace_mb: int
    builder_optimization_level: int
    engine_bytes: int
    # tvm and tvm_ms (threads: TVM's runtime threads)
    target: str
    opt_level: int
    threads: int | None
    # tvm_ms: the MetaSchedule search (trials_run is also what a live row shows while it tunes)
    database: str
    tuning_reused: bool
    trials_before: int
    trials_run: int
    trials_valid: int
    early_stopped: bool
    tasks: int | None
    est_latency_ms: float | None
    tuning_records: int
    tuned_digest: str
    tuning: TuningRecord


class WorkerStart(TypedDict, total=False):
    """``extra["worker_start"]``: how the trial's worker processes were started (``ngb.core.
    workers.interpreter_facts``; the fresh-interpreter pool's counts from ``ngb.core.
    worker_start``). Forked workers share one interpreter, which the verdict must know."""

    method: str
    interpreters_started: int
    start_wait_s: float
    gate_wait_s: float
    import_cpu_s: float


class MeasureRecord(TypedDict, total=False):
    """``extra["measure"]`` (``ngb.core.trial.timing.merge``): how the throughput interval was made.
    ``df`` is its degrees of freedom, from which every surface rebuilds the same interval
    (``ngb.core.statistics.intervals``); ``reruns`` is ``ngb.core.statistics.reruns``' ``to_dict``.
    Not total: records stored by earlier versions lack the later keys, and a row rebuilt for
    ``derived`` holds ``df`` alone (``ngb.sweeps.api``)."""

    mode: str  # fixed | adaptive
    confidence: float
    ci_target: float
    ci_relative: float | None
    interval: str  # processes | one process
    df: int | float
    reruns: dict[str, object]
    stopped: str | None
    serial_rho: float
    serial_inflation: float
    levels: dict[str, object] | None  # ngb.core.statistics.stopping's levels ``to_dict``
    drift: float | None
    retries: int
    warmup_s: float


class WorkerRecord(TypedDict):
    """One worker process of ``extra["workers"]`` (``ngb.core.trial.timing.merge``)."""

    worker: int
    repetitions: int
    mean: float
    stopped: str | None
    disturbed: str | None
    retries: int
    measure_s: float
    warmup_s: float
    compile_s: float | None
    first_call_s: float | None
    faults_per_call: float | None
    cpu: dict[str, float | None]


class PageFaults(TypedDict):
    """``extra["page_faults"]`` (``ngb.core.trial.timing``): each timed process's minor faults per
    call, and whether its speed followed them (then the allocator, not the model, set the
    spread)."""

    per_call: list[float | None]
    source: str
    speed_follows_faults: bool


class LatencyRecord(TypedDict):
    """``extra["latency"]`` (``ngb.core.trial.timing``): how the percentile intervals were made."""

    interval: str
    level: float
    min_calls: dict[str, int | None]
    worker_p99_ms: list[float]


class SlurmFacts(TypedDict, total=False):
    """``extra["slurm"]``: the job that ran the trial (``ngb.devices.slurm_nodes.stamp``; only the
    job id when it ended the trial, ``ngb.sweeps.run.job_end``; ``killed_retries`` from
    ``ngb.sweeps.run.device_queue``). ``shared``: other jobs could run on the node."""

    job: int
    node: str
    partition: str
    shared: bool
    killed_retries: int


class TrialExtra(CompilerFacts, total=False):
    """``TrialResult.extra``: the compiler's facts and the keys below, by their writer."""

    # ngb.core.trial.measure: the trial's state and its passes beside the timed loops
    device_state: DeviceState  # governor, boost, GPU clocks (ngb.core.base.device_state.read)
    # ngb.core.trial.provenance.Provenance on the device; its package list leaves at ingest for the
    # environments table (ngb.sweeps.store.provenance), so a stored one lacks ``packages``
    provenance: dict[str, object]
    worker_errors: list[str]  # workers that failed while others stood
    budget: dict[str, object]  # ngb.core.trial.budget.SlowPlan (calls of seconds), and ``spent_s``
    allocator: str  # ngb.core.trial.allocator.apply: what was in force
    compiler_config: dict[str, object]  # the compiler's validated config (its ``to_dict``)
    torch_max_allocated_mb: float
    calibration_call_s: float  # ngb.core.trial.budget's calibration call
    macs_error: str
    verify_error: str
    fidelity: Fidelity  # ngb.core.statistics.accuracy_stats.fidelity: the output against eager's
    accuracy: AccuracyRecord  # ngb.core.trial.accuracy_pass
    accuracy_error: str  # the one line of an accuracy pass that could not run
    optimisation: dict[
        str, object
    ]  # ngb.core.trial.optimise's facts (``Facts``; ``dlas`` for the zoo)
    algorithm: dict[str, object]  # ngb.core.models.algorithms' facts, with ``runs``
    # ngb.core.trial.timing: the measurement's own record
    measure: MeasureRecord
    workers: list[WorkerRecord]
    telemetry: list[dict[str, object]]  # each worker's (ngb.core.trial.telemetry), energy included
    page_faults: PageFaults
    latency: LatencyRecord
    # ngb.core.trial.workers
    worker_start: WorkerStart
    # ngb.core.trial.profile_pass: ngb.core.compilers.profiling.Profile (or {"error": ...}); moved
    # to its own tables at ingest, which leaves ``profile_error`` (ngb.sweeps.store.profile_rows) if
    # it failed
    profile: dict[str, object]
    profile_error: str
    # ngb.core.serving.serve_trial: a served trial's whole outcome (its ``to_dict``, ``EXTRA``)
    serving: dict[str, object]
    # ngb.devices.slurm_nodes: a Slurm node's trial, named by its node and counted for its slot
    slurm: SlurmFacts
    stored_device: str
    run_device: str
    # ngb.sweeps.run.writer: a failed trial stored under another spec keeps the one it ran
    spec: dict[str, object]


#: every key ``TrialExtra`` declares (its compiler facts included)
KEYS = frozenset(TrialExtra.__required_keys__ | TrialExtra.__optional_keys__)


def from_json(value: object) -> TrialExtra:
    """A trial's ``extra`` as read back (a mapping, or its JSON text from the store), typed; not a
    JSON object (None, bad text): empty. Unknown keys are kept (the module's docstring), values
    unchecked; a mapping is returned as it is, not copied, since readers only read it."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value else None
        except ValueError:
            return {}
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return cast("TrialExtra", value)
    return {}


def unknown_keys(extra: Mapping[str, object]) -> list[str]:
    """The keys of ``extra`` that ``TrialExtra`` does not declare (a newer agent's), sorted."""
    return sorted(set(extra) - KEYS)
