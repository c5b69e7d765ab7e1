"""Trial and result records shared by the harness, the agent, the orchestrator and the store.

Everything here is plain data that round-trips through JSON (the agent's checkpoint and event
stream are JSON lines), so a record written on a Jetson reads back identically on the workstation.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, TypeVar

from ngb.core.base.errors import ConfigError
from ngb.core.records.algorithm_names import parse as parse_algorithm
from ngb.core.records.trial_extra import TrialExtra

if TYPE_CHECKING:
    from ngb.core.base.artifact_files import Artifact
    from ngb.core.records.serve_settings import ServeSettings

BLOCK_MODELS = ("conv", "mha")
#: numeric precision a trial asks for (``MeasureSettings.precision``): ``default`` leaves each
#: vendor's own choice (recorded as it resolved), ``fp32`` is strict fp32 everywhere (no TF32, no
#: bf16 downcasts); tf32/bf16/fp16 where a compiler supports them. See core/models/precision.py.
PRECISIONS = ("default", "fp32", "tf32", "bf16", "fp16")


@dataclass(frozen=True)
class AccuracySettings:
    """Labelled data the compiled model is run over after its timed loops (``[accuracy]`` in a
    sweep, ``ngb measure --accuracy``; ``ngb.core.trial.accuracy_pass``).

    ``data`` is a built-in data set by name (``digits``), an ``.npz`` file holding ``inputs`` and
    ``labels``, or a ``package.module:loader`` / ``file.py:loader`` callable returning them
    (``ngb.core.models.labelled_data``). The pass runs in the trial's first worker, apart from the
    timed loops, at the trial's batch (the timed compiled object itself; the last batch padded),
    with eager fp32 on the same inputs as its baseline.

    ``artifact``: the file that carries an ``.npz`` or a ``file.py:loader``'s folder to the device
    (``ngb.core.models.model_sources.Artifact``, content-addressed, shipped as a model's files are;
    set where the reference is read, ``ngb.core.models.labelled_files``). The trial key names the
    data by that content (``key_form``), not by the workstation path in ``data``.
    """

    data: str
    artifact: Artifact | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.data, str) or not self.data.strip():
            raise ConfigError(f"accuracy data must be a non-empty string, got {self.data!r}")
        if self.artifact is None:
            return
        from ngb.core.base.artifact_files import Artifact

        if isinstance(self.artifact, Mapping):  # read back as JSON (a trial's spec)
            if "name" not in self.artifact or "sha256" not in self.artifact:
                raise ConfigError(f"accuracy artifact needs a name and a sha256: {self.artifact}")
            object.__setattr__(self, "artifact", Artifact.from_dict(self.artifact))
        elif not isinstance(self.artifact, Artifact):
            raise ConfigError(f"accuracy artifact must be a table, got {self.artifact!r}")

    def key_form(self) -> dict[str, object]:
        """What the trial key holds: ``{"data": ref}`` (a built-in name, an installed module's
        loader: as before), or for shipped data its own name and content hash (``my.npz``,
        ``load.py:digits`` within its folder) -- the same from any folder or machine."""
        if self.artifact is None:
            return {"data": self.data}
        target, sep, attr = self.data.rpartition(":")
        name = self.artifact.name
        if sep and target.endswith(".py"):
            here, folder = PurePath(target), PurePath(self.artifact.local)
            rel = here.relative_to(folder) if here.is_relative_to(folder) else PurePath(here.name)
            name = f"{rel.as_posix()}:{attr}"
        return {"data": name, "sha256": self.artifact.sha256}

    @classmethod
    def of(cls, value: object) -> AccuracySettings:
        """From a data reference or a table (``{data = "digits"}``), as settings are written."""
        if isinstance(value, AccuracySettings):
            return value
        if isinstance(value, str):
            return cls(value)
        if isinstance(value, Mapping):
            return _from_mapping(cls, value, "accuracy setting")
        raise ConfigError(
            f"accuracy must be a data reference or a table with data = ..., got {value!r}"
        )


def _check_positive(name: str, value: float, *, allow_zero: bool = False) -> None:
    ok = value >= 0 if allow_zero else value > 0
    if not ok or (isinstance(value, float) and math.isnan(value)):
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{name} must be {bound}, got {value!r}")


@dataclass(frozen=True)
class MeasureSettings:
    """How one trial is timed.

    Each repetition is a timed loop that runs until *both* ``min_iters`` calls and
    ``min_duration_s`` seconds are reached; throughput is computed per repetition. Defaults suit a
    2-core CPU; the paper's presets raise ``repetitions`` to 100.

    How many repetitions (``ngb.core.statistics.stopping``): ``repetitions = None`` (default) stops
    on confidence. Worker processes are the unit, as in pyperf: each one (a fresh interpreter,
    rebuilding and recompiling the model) warms up and times ``values_per_worker`` repetitions;
    workers are added one after another -- at least ``workers``, at most ``max_workers``, within
    ``max_repetitions`` and ``max_measure_s`` seconds of warm-up and timed loops -- until the
    ``confidence`` interval over the process means is within ``ci_target`` of the mean. An integer
    ``repetitions`` is a fixed count spread over ``workers`` processes. Other processes' CPU use
    during the timed loop above ``disturbance_threshold`` (a fraction of the whole machine) flags
    the trial as disturbed (``ngb.core.trial.interference``); ngb's own processes never count;
    ``disturbance_threshold = 1`` never flags a CPU share (a share of the machine cannot exceed all
    of it) -- for work that uses no CPU of its own, such as a sleeping stand-in runtime; the share
    is still recorded beside the number, and another process on the GPU still disturbs;
    ``disturbed_retries`` waits ``disturbed_wait_s`` and measures again. Warm-up repeats windows
    until the last three agree within ``warmup_tolerance`` (and, on a GPU, the SM clock too), after
    at least ``warmup_s`` (CPU) or ``gpu_warmup_min_s`` (GPU), at most ``warmup_max_s``.
    ``allocator`` says whether glibc keeps memory freed between calls (``ngb.core.trial.allocator``:
    "system", the default, is what a plain ``python`` deployment runs; "retain" keeps it).

    Why these defaults (2-core VM, 2026-11-25): the imports are outside the budget (each worker
    is a fresh interpreter that imports torch before the trial times anything:
    ``ngb.core.trial.worker_start``; issue 30 added that cost), so 4-10 processes of 2 x 0.3 s fit
    in ``max_measure_s`` and ``ngb measure resnet18 -b 8`` took under 20 s with forked
    workers, before the fresh interpreters' imports (each process also builds and compiles outside
    that budget: at 12 s it took 20-23 s). ``max_measure_s`` = 7 s and ``warmup_max_s`` = 1 s
    (issue 44, 2026-11-28): on the VM a process's speed swings between two levels for seconds at a
    time, so 21 of 133 workers' warm-ups ran to the old 2 s cap without settling, and warm-ups and
    quiet checks took 64 % of the old 10 s. With the quiet check read over the warm-up
    (``ngb.core.trial.timing``) and the cap at 1 s, 7 s holds about the processes 10 s held.
    Two values a process, not three: the interval is over process means, and its width is set by
    how many processes there are (t(2) = 4.30 at 3 processes, t(3) = 3.18 at 4); on resnet18 b8,
    where one value is 5 calls of ~0.15 s, the third value cost the fourth process (3 processes in
    12 s). Simulated calibration is the same at 2 or 3
    (``tests/test_calibration.py``); 2 processes would need t(1) = 12.7.
    """

    warmup_iters: int = 3
    warmup_s: float = 0.3  # CPU: warm-up lasts at least this long, then until steady
    min_iters: int = 5
    min_duration_s: float = 0.3
    repetitions: int | None = None  # fixed count; None = stop on confidence (adaptive)
    threads: int | None = None  # intra-op threads for the runtime; None = library default
    cpu_interval_s: float = 0.2  # sampler period during the timed loops (outside the process)
    cov_threshold: float = 0.05  # coefficient of variation above which a result is "unstable"
    timeout_s: float = 3600.0  # per trial, compile included; the agent kills a trial past it
    verify: bool = True  # compare one output against torch eager and record the max abs error
    precision: str = "default"  # one of PRECISIONS; unsupported by a compiler -> "unsupported"
    # -- stopping on confidence, worker processes, interference (ngb.core.statistics.stopping /
    # workers)
    workers: int = 4  # worker processes at least (a fixed count: exactly)
    max_workers: int = 10  # adaptive mode: worker processes at most (never fewer than workers)
    values_per_worker: int = 2  # adaptive mode: repetitions each worker process times
    min_repetitions: int = 6  # adaptive mode: at least this many in all
    max_repetitions: int = 40  # adaptive mode: at most this many in all
    ci_target: float = 0.02  # adaptive mode: stop once the CI half-width <= this x the mean
    confidence: float = 0.95  # level of the throughput interval
    max_measure_s: float = 7.0  # adaptive mode: seconds of warm-up + timed loops, all workers
    warmup_max_s: float = 1.0  # warm-up until steady, at most this long (GPU: 3x its floor)
    gpu_warmup_min_s: float = 3.0  # GPU: warm-up lasts at least this long (clocks, caches)
    warmup_tolerance: float = 0.03  # the last three warm-up windows this close = steady
    disturbance_threshold: float = 0.15  # others' CPU share of the machine that disturbs
    quiet_check_s: float = 0.3  # others' CPU is read over the warm-up (a sleep if that is shorter)
    disturbed_retries: int = 0  # measure again (after disturbed_wait_s) when disturbed
    disturbed_wait_s: float = 10.0
    allocator: str = "system"  # glibc's defaults, as users deploy ("system"), or "retain"
    # seconds of idle power measured before each worker's warm-up, where a power meter is
    # readable (ngb.core.trial.energy); 0 = no idle reading
    energy_idle_s: float = 0.5
    # one more process after the timed workers runs the compiled model under the runtime's own
    # profiler (ngb.core.trial.profile_pass); it never touches the timed numbers, so it is not in
    # the key
    profile: bool = False
    # a trial the batch scheduler killed (time limit, preemption, someone's scancel) runs again
    # in a new allocation up to this many times (``ngb.sweeps.run.job_end``); the workstation
    # reads it, the measurement never does, so it is not in the key either
    retry_killed: int = 0
    # labelled data run through the compiled model after its timed loops (None: no accuracy pass)
    accuracy: AccuracySettings | None = None

    def __post_init__(self) -> None:
        if self.accuracy is not None:  # a table or a bare reference, as TOML and JSON give it
            object.__setattr__(self, "accuracy", AccuracySettings.of(self.accuracy))
        for name in ("warmup_iters", "min_iters", "disturbed_retries", "retry_killed"):
            _check_positive(name, getattr(self, name), allow_zero=True)
        for name in (
            "cpu_interval_s",
            "cov_threshold",
            "timeout_s",
            "workers",
            "values_per_worker",
        ):
            _check_positive(name, getattr(self, name))
        for name in ("max_measure_s", "warmup_max_s"):
            _check_positive(name, getattr(self, name))
        if self.repetitions is not None:
            _check_positive("repetitions", self.repetitions)
        if self.min_repetitions < 2:
            raise ConfigError(f"min_repetitions must be >= 2, got {self.min_repetitions!r}")
        if self.max_repetitions < self.min_repetitions:
            raise ConfigError(
                f"max_repetitions ({self.max_repetitions}) must be >= min_repetitions "
                f"({self.min_repetitions})"
            )
        for name in ("ci_target", "confidence", "warmup_tolerance"):
            value = getattr(self, name)
            if not 0 < value < 1:
                raise ConfigError(f"{name} must be between 0 and 1 (exclusive), got {value!r}")
        if not 0 < self.disturbance_threshold <= 1:  # also refuses NaN
            raise ConfigError(
                "disturbance_threshold must be above 0 and at most 1 (1 = never flag a CPU "
                f"share), got {self.disturbance_threshold!r}"
            )
        for name in ("quiet_check_s", "disturbed_wait_s", "energy_idle_s"):
            _check_positive(name, getattr(self, name), allow_zero=True)
        for name in ("warmup_s", "min_duration_s", "gpu_warmup_min_s"):
            _check_positive(name, getattr(self, name), allow_zero=True)
        if self.threads is not None:
            _check_positive("threads", self.threads)
        if self.retry_killed > 100:
            raise ConfigError(f"retry_killed must be at most 100, got {self.retry_killed!r}")
        if self.allocator not in ("retain", "system"):
            raise ConfigError(f"allocator must be retain or system; got {self.allocator!r}")
        if self.precision not in PRECISIONS:
            raise ConfigError(
                f"precision must be one of {', '.join(PRECISIONS)}; got {self.precision!r}"
            )

    @classmethod
    def from_dict(cls, data: Mapping[str, object] | None) -> MeasureSettings:
        return _from_mapping(cls, data or {}, "measure setting")


@dataclass(frozen=True, eq=True)
class TrialSpec:
    """One point of a sweep: a model, compiled by one compiler, at one batch size on one device.

    For the synthetic blocks (``model`` is ``conv`` or ``mha``) ``width`` is the channel count or
    embedding size and ``depth`` the number of stacked blocks. ``input_size`` overrides the image
    side (timm models default to their pretrained config, the conv block to 56).
    """

    model: str
    compiler: str
    batch: int = 1
    depth: int = 1
    width: int | None = None
    optimisation: str = "none"
    device: str = "cpu"
    input_size: int | None = None
    compiler_options: Mapping[str, object] = field(default_factory=dict)
    measure: MeasureSettings = field(default_factory=MeasureSettings)
    # A user's model (ngb.core.models.model_sources.ModelSource as JSON); None for timm names and
    # blocks.
    source: Mapping[str, object] | None = None
    # Served under load instead of timed (``[serve]`` in a sweep, ``ngb.core.serving.serve_trial``);
    # a table read back as JSON becomes the settings. None: a timed trial, its key as before.
    serve: ServeSettings | None = None
    # The convolution primitive (``ngb.core.models.algorithms``: default, direct, gemm, sparse-csr,
    # sparse-bsr-B); ``default`` is the compiler's own choice and leaves the key as it was.
    algorithm: str = "default"

    def __post_init__(self) -> None:
        object.__setattr__(self, "algorithm", parse_algorithm(self.algorithm).name)
        if self.serve is not None:
            from ngb.core.records.serve_settings import ServeSettings

            object.__setattr__(self, "serve", ServeSettings.of(self.serve))
        if not self.model or not isinstance(self.model, str):
            raise ConfigError("model must be a non-empty string")
        _check_positive("batch", self.batch)
        _check_positive("depth", self.depth)
        if self.model in BLOCK_MODELS and self.width is None:
            raise ConfigError(f"block model {self.model!r} needs a width")
        if self.width is not None:
            _check_positive("width", self.width)
        if self.input_size is not None:
            _check_positive("input_size", self.input_size)
        if self.source is not None and not isinstance(self.source, Mapping):
            raise ConfigError(f"source must be a table (a model source), got {self.source!r}")
        # Freeze options into a plain sorted dict so equal specs compare and hash equal.
        object.__setattr__(
            self, "compiler_options", dict(sorted(dict(self.compiler_options).items()))
        )

    @property
    def is_block(self) -> bool:
        return self.model in BLOCK_MODELS

    @property
    def model_label(self) -> str:
        if self.is_block:
            return f"{self.model}{self.width}x{self.depth}"
        return self.model

    @property
    def label(self) -> str:
        opt = "" if self.optimisation == "none" else f"/{self.optimisation}"
        alg = "" if self.algorithm == "default" else f"+{self.algorithm}"
        return f"{self.model_label}/{self.compiler}{alg}{opt}/b{self.batch}"

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        accuracy = self.measure.accuracy
        if accuracy is not None:  # as written before data travelled: no "artifact" without one
            shipped = {} if accuracy.artifact is None else {"artifact": accuracy.artifact.to_dict()}
            out["measure"]["accuracy"] = {"data": accuracy.data, **shipped}
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> TrialSpec:
        data = dict(data)
        measure = data.pop("measure", None)
        if measure is not None and not isinstance(measure, Mapping):
            raise ConfigError(f"bad trial field: measure must be a table, got {measure!r}")
        settings = MeasureSettings.from_dict(measure)
        return _from_mapping(cls, data, "trial field", extra={"measure": settings})

    @functools.cached_property
    def key(self) -> str:
        """Stable identity: the same spec gives the same key on every machine and every run.

        Computed once per spec (a frozen value): it is a sha256 over the whole spec as JSON,
        and an agent asked for it about ten times a trial (its checkpoint, events, the spec's
        hash), ~8 ms of each trial's CPU on the 2-core VM."""
        data = self.to_dict()
        if data.get("source") is None:
            data.pop("source", None)  # keys of trials without a source stay what they were
        if data.get("serve") is None:
            data.pop("serve", None)  # nor do those of timed trials
        if data.get("algorithm") == "default":
            data.pop("algorithm", None)  # nor those of the compiler's own convolution
        # Settings added later are left out at their default, so specs written before they existed
        # keep their keys (a resumed run must not redo what it already measured).
        measure = asdict(self.measure)
        for name, default in _KEY_OMITS_AT_DEFAULT.items():
            if measure.get(name) == default:
                del measure[name]
        measure.pop("profile", None)  # a profile pass after the timed workers changes no number
        measure.pop("retry_killed", None)  # nor does running a killed trial again
        if self.measure.accuracy is not None:  # the data's content, not where it was read
            measure["accuracy"] = self.measure.accuracy.key_form()
        data["measure"] = measure
        canon = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(canon.encode()).hexdigest()[:16]

    def __hash__(self) -> int:
        return hash(self.key)


#: MeasureSettings fields that joined after keys were first stored, and their defaults
_KEY_OMITS_AT_DEFAULT: dict[str, object] = {
    "precision": "default",
    "allocator": "retain",
    "energy_idle_s": 0.5,
    "accuracy": None,
}


_Record = TypeVar("_Record", MeasureSettings, TrialSpec, AccuracySettings)


def _from_mapping(
    cls: type[_Record],
    data: Mapping[str, object],
    what: str,
    extra: Mapping[str, object] | None = None,
) -> _Record:
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"unknown {what} {unknown[0]!r}; valid: {', '.join(sorted(names))}")
    # Any: values read from TOML/JSON; each field is checked by the class's __post_init__
    values: dict[str, Any] = {**data, **(extra or {})}
    try:
        return cls(**values)
    except TypeError as exc:  # e.g. a list where a number belongs
        raise ConfigError(f"bad {what}: {exc}") from None


@dataclass
class Stats:
    """Summary of a sample (throughputs per repetition, or per-call latencies)."""

    n: int = 0
    mean: float = math.nan
    std: float = math.nan
    median: float = math.nan
    min: float = math.nan
    max: float = math.nan
    p50: float = math.nan
    p90: float = math.nan
    p99: float = math.nan
    cov: float = math.nan


@dataclass
class TrialResult:
    """What one trial produced. ``status`` is ``ok`` or ``failed`` (then ``error`` says why).

    Times are seconds, throughput is samples per second, latency is milliseconds per call (per
    inference request for runtimes that keep several in flight).
    """

    key: str
    spec: dict[str, Any]
    status: str = "ok"
    error: str | None = None
    error_kind: str | None = None  # unavailable | unsupported | oom | crash | timeout | error
    host: str = ""
    started_at: float = 0.0
    finished_at: float = 0.0
    export_s: float | None = None
    compile_s: float | None = None  # compile incl. tuning, export excluded
    tune_s: float | None = None
    first_call_s: float | None = None
    throughput: Stats = field(default_factory=Stats)
    latency_ms: Stats = field(default_factory=Stats)
    unstable: bool = False
    repetitions: list[dict[str, float]] = field(
        default_factory=list
    )  # iters, elapsed_s, throughput, worker
    # ngb.core.statistics.stopping: the throughput interval and the verdict;
    # ngb.core.trial.interference
    ci_half_width: float | None = None  # samples/s, at MeasureSettings.confidence
    verdict: str | None = None  # VALID | INVALID (None for failed trials)
    verdict_reason: str | None = None
    disturbed: bool = False  # other processes took a meaningful CPU share (or held the GPU)
    workers: int = 1  # processes the repetitions came from
    cpu_percent_mean: float | None = None  # system-wide, 0..100 (100 = every core busy)
    cpu_percent_max: float | None = None
    proc_cpu_percent_mean: float | None = None  # this process, 100 per busy core
    cpu_samples: list[list[float]] = field(default_factory=list)  # [t_offset_s, sys %, proc %]
    peak_rss_mb: float | None = None
    gpu_mem_mb: float | None = None  # the worker's GPU memory: NVML where readable (every runtime)
    # ngb.core.statistics.percentiles: p50/p90/p99 of every timed call with their order-statistic
    # interval, {"p99": [low, high]} in ms; a bound is None where there are too few calls for it (no
    # upper bound: the percentile is not claimed). ``latency_ms`` holds the sample values.
    latency_calls: int = 0
    latency_ci_ms: dict[str, list[float | None]] = field(default_factory=dict)
    # per-call latencies kept (ns, call order): every call, or every ``latency_sample_every``-th
    latency_sample_ns: list[int] = field(default_factory=list)
    latency_sample_every: int = 1
    # ngb.core.trial.memory: peak host RSS and GPU memory per phase (compile, warmup, timed), MiB,
    # the largest over worker processes, and where each figure came from
    peak_rss_phase_mb: dict[str, float] = field(default_factory=dict)
    rss_source: str | None = None  # vmhwm-per-phase | ru_maxrss-cumulative
    gpu_mem_phase_mb: dict[str, float] = field(default_factory=dict)
    gpu_mem_source: str | None = None  # nvml-process | nvml-device-delta | torch-allocator
    max_abs_err: float | None = None
    #: the precision that actually ran, as read back from the runtime (fp32, tf32, bf16, fp16,
    #: or a mix such as "tf32-conv"); None when nothing was computed (noop) or it is unknown
    precision: str | None = None
    precision_flags: dict[str, object] = field(default_factory=dict)  # the settings read back
    # ngb.core.trial.energy: measured on the device around the timed loops; None without a meter
    energy_j_per_sample: float | None = None  # joules per sample (total, idle included)
    energy_j_per_sample_ci: float | None = None  # half-width at MeasureSettings.confidence
    energy_above_idle_j_per_sample: float | None = None
    samples_per_j: float | None = None
    power_w_mean: float | None = None  # during the timed loops
    idle_power_w: float | None = None  # before the warm-up
    energy_source: str | None = None  # rapl | nvml-energy | nvml-power | jetson-...
    energy_note: str | None = None  # "no power meter: ..." or how the source measures
    params: int | None = None
    macs: int | None = None
    threads: dict[str, object] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    # what has no column of its own, by the module that writes it (ngb.core.records.trial_extra)
    extra: TrialExtra = field(default_factory=TrialExtra)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> TrialResult:
        known = {f.name for f in fields(cls)}
        # Any: a record read back as JSON (the agent's stream, the checkpoint, the store)
        values: dict[str, Any] = {k: v for k, v in data.items() if k in known}
        for name in ("throughput", "latency_ms"):
            stats = values.get(name)
            if isinstance(stats, Mapping):
                # NaN travels as JSON null; bring it back so arithmetic on stats stays numeric.
                filled: dict[str, Any] = {k: math.nan if v is None else v for k, v in stats.items()}
                values[name] = Stats(**filled)
        return cls(**values)

    @classmethod
    def failed(
        cls,
        spec: TrialSpec,
        error: str,
        kind: str = "error",
        *,
        host: str = "",
        started_at: float = 0.0,
        finished_at: float = 0.0,
        versions: Mapping[str, str] | None = None,
    ) -> TrialResult:
        return cls(
            key=spec.key,
            spec=spec.to_dict(),
            status="failed",
            error=error,
            error_kind=kind,
            host=host,
            started_at=started_at,
            finished_at=finished_at,
            versions=dict(versions or {}),
        )
