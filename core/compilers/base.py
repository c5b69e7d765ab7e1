"""The compiler contract every backend implements.

A ``Compiler`` turns a torch module plus one example batch into a ``Compiled`` object bound to that
batch (static shapes, as the paper compiles per batch size, and as vendor tools bind their input
buffers once). The harness times ``Compiler.compile`` and the phases it reports through
``CompileContext.phase``, then drives ``Compiled.timed_loop``.

Heavy libraries are imported inside methods only, so importing this package stays cheap.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Generic,
    Literal,
    TypeVar,
    cast,
    get_args,
    get_origin,
)

from ngb.core.base.errors import ConfigError, UnsupportedTrial
from ngb.core.base.installed import dist_version
from ngb.core.models.model_basics import to_numpy
from ngb.core.records.types import PRECISIONS

if TYPE_CHECKING:
    from ngb.core.models.model_types import Array, Example, Model
    from ngb.core.records.trial_extra import CompilerFacts


@dataclass(frozen=True)
class CompilerConfig:
    """Base for per-compiler flags. Subclasses add fields and validate in ``__post_init__``."""

    @classmethod
    def from_options(cls, given: Mapping[str, object] | None) -> CompilerConfig:
        # Any: option values from TOML or the command line; each config's __post_init__ checks them
        options: dict[str, Any] = dict(given or {})
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - names)
        if unknown:
            valid = ", ".join(sorted(names)) or "(none)"
            raise ConfigError(f"unknown option {unknown[0]!r} for {cls.__name__}; valid: {valid}")
        try:
            return cls(**options)
        except TypeError as exc:
            raise ConfigError(f"bad option for {cls.__name__}: {exc}") from None

    def to_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def choice(name: str, value: object, allowed: tuple[object, ...]) -> None:
    """Validation helper: ``value`` must be one of ``allowed`` (actionable error otherwise)."""
    if value not in allowed:
        raise ConfigError(f"{name} must be one of {', '.join(map(str, allowed))}; got {value!r}")


@dataclass
class LoopResult:
    """One timed repetition: calls completed, wall time, and per-call latencies in nanoseconds."""

    iters: int
    elapsed_s: float
    latencies_ns: list[int] = field(default_factory=list)


@dataclass
class CompileContext:
    """What a compiler gets besides the model: a scratch dir, settings, and reporting hooks."""

    workdir: Path
    device: str = "cpu"  # "cpu" or "cuda"
    threads: int | None = None
    emit: Callable[..., None] = lambda type_, **fields: None  # progress events (e.g. tuning)
    phases: dict[str, float] = field(default_factory=dict)  # seconds per named phase
    cache_dir: Path | None = None  # long-lived cache (TVM tuning databases), survives runs
    precision: str = (
        "default"  # ngb.core.records.types.PRECISIONS; checked by Compiler.check_precision
    )
    # which worker process compiles (``ngb.core.trial.workers``): a compiler that tunes does so in
    # worker 0 only, the later ones build from what it found (TVM), so all measure one program
    worker: int = 0
    trial_dir: Path | None = None  # scratch shared by the trial's workers (None: workdir)
    # a profile pass (``ngb.core.compilers.profiling``), never a timed trial: runtimes whose
    # profiler is a build option (ONNX Runtime's trace, OpenVINO's PERF_COUNT) build with it on
    profile: bool = False

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a named phase (``export``, ``tune`` ...); nested repeats accumulate."""
        self.emit("phase", phase=name)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - start


class Compiled(ABC):
    """A compiled model bound to one example batch."""

    #: extra facts worth recording with the result (e.g. number of infer requests in flight);
    #: every key is declared in ``ngb.core.records.trial_extra.CompilerFacts``
    extra: CompilerFacts
    #: the precision that actually runs (ngb.core.models.precision), read back from the runtime;
    #: None when nothing is computed (noop)
    precision: str | None
    #: the runtime's precision settings as read back (recorded with the result)
    precision_flags: dict[str, object]

    def __init__(self) -> None:
        self.extra = {}
        self.precision = None
        self.precision_flags = {}

    @abstractmethod
    def run(self) -> object:
        """One synchronous inference on the bound batch; returns the output (tensor or array)."""

    def timed_loop(self, min_iters: int, min_duration_s: float) -> LoopResult:
        """Call ``run`` until both ``min_iters`` calls and ``min_duration_s`` seconds are reached.

        Throughput-oriented runtimes override this to keep several requests in flight, the way
        their vendors' benchmark tools do, in steady state: such a loop may return with requests
        still in flight (the next call picks them up, so consecutive calls are windows onto one
        continuous run) and counts only the calls that complete inside its own window.
        ``drain`` (or ``close``) waits for what is left in flight. Either way the loop records
        ``extra["requests_in_flight"]``: how many requests it keeps in flight (1 here).
        """
        self.extra["requests_in_flight"] = 1
        return timed_calls(self.run, min_iters, min_duration_s)

    def output_numpy(self) -> Array:
        """Run once and return the (first) output as a numpy array, for correctness checks."""
        return to_numpy(self.run())

    def feed(self, arrays: Sequence[Array]) -> None:
        """Write new values into the bound input buffers, one array per input, each of the
        example batch's shape and dtype; the next ``run`` computes on them. The accuracy pass
        (``ngb.core.trial.accuracy_pass``) runs a labelled set through the timed object this way,
        after its timed loops: no second compile, the same bound buffers. A runtime whose
        buffers cannot be written says so here (the pass records that one line)."""
        raise UnsupportedTrial(
            f"{type(self).__name__} cannot take new inputs, so it has no accuracy pass yet"
        )

    def serving_runners(self, concurrency: int | None = None) -> list[Callable[[], object]]:
        """Callables a serving run (``ngb.core.serving.loadgen``) gives one worker thread each; each
        answers one request at a time, and they may run at the same time. ``concurrency``
        None: the runtime's natural number of requests in flight.

        Here one: ``run`` is one synchronous call whose runtime fills the cores with its own
        threads (ONNX Runtime's intra-op pool, torch's), and a second caller of the same bound
        buffers is not safe. Runtimes built for several requests in flight override this
        (OpenVINO: one infer request per runner)."""
        if concurrency not in (None, 1):
            raise ConfigError(
                f"{type(self).__name__} answers one request at a time; concurrency "
                f"{concurrency} needs a runtime with several requests in flight (openvino)"
            )
        return [self.run]

    def drain(self) -> None:  # noqa: B027 - optional hook
        """Wait for requests ``timed_loop`` left in flight (none for a synchronous runtime)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release runtime resources."""


def timed_calls(run: Callable[[], object], min_iters: int, min_duration_s: float) -> LoopResult:
    """Call ``run`` until both ``min_iters`` calls and ``min_duration_s`` seconds are reached,
    timing each call: the one loop every synchronous runtime's ``timed_loop`` runs."""
    clock = time.perf_counter_ns
    lat: list[int] = []
    append = lat.append
    min_ns = int(min_duration_s * 1e9)
    start = clock()
    now = start
    while len(lat) < min_iters or now - start < min_ns:
        t0 = clock()
        run()
        now = clock()
        append(now - t0)
    return LoopResult(iters=len(lat), elapsed_s=(now - start) / 1e9, latencies_ns=lat)


@dataclass(frozen=True)
class Style:
    """How the console's charts draw a compiler's series (``ngb.tui.widgets.result_chart``): its
    colour (RGB) and point marker, each its own among the registered compilers so a chart tells
    them apart in colour and in monochrome, and the hollow form of the marker for its series at
    another precision ("openvino bf16" beside "openvino")."""

    colour: tuple[int, int, int]
    marker: str
    hollow: str


#: how ``ngb profile`` (``ngb.core.compilers.profiling``) reads a compiler's kernels: ``"torch"``,
#: the compiled model runs torch operators and ``torch.profiler`` sees them; ``"hook"``, its
#: ``Compiled.profile_records`` reads the runtime's own profiler on the model already built;
#: ``"rebuild"``, the same, but that profiler is a build option (``CompileContext.profile``), so
#: the profiled model is a second build
Profiler = Literal["torch", "hook", "rebuild"]


#: covariant: a ``Compiler[XConfig]`` is a ``Compiler[CompilerConfig]`` (the registry's type)
ConfigT = TypeVar("ConfigT", bound=CompilerConfig, covariant=True)


class Compiler(ABC, Generic[ConfigT]):
    """One graph compiler / runtime, describing itself through class attributes.

    A backend is ``class XCompiler(Compiler[XConfig])``: the generic parameter is its config type
    (``self.config`` is typed, and ``Config`` is set from it). Everything the harness needs to know
    about a backend is declared here, on the class, so adding a compiler touches one module plus
    one registry line:

    * ``devices`` / ``requires``: where it runs and the python modules it needs;
    * ``precisions``: per device, the precisions it can honour (see ``check_precision``);
    * ``unsupported_optimisations``: optimisation kinds it refuses, with the one-line reason;
    * ``unsupported_errors``: exception class names that mean "this model cannot go through this
      compiler" (classified ``unsupported``, not ``error``);
    * ``version_packages``: label -> distributions whose versions are recorded with its results;
    * ``style``, ``short_name``, ``profiler``, ``version_libraries``, ``tuning_budget_option``:
      how the console draws and abbreviates it, how ``ngb profile`` reads its kernels, what the
      paper's software table shows of it, what bounds its search (no default for the first four:
      ``tests/test_compilers_describe.py`` fails on a registered compiler without them).
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    #: the config type; set from the generic parameter (``Compiler[XConfig]``)
    Config: ClassVar[type[CompilerConfig]] = CompilerConfig
    #: False for compilers that need no torch model (the harness's ``noop``)
    needs_model: ClassVar[bool] = True
    #: devices this compiler can target
    devices: ClassVar[tuple[str, ...]] = ("cpu",)
    #: python modules this compiler needs; the default ``available()`` looks for them
    requires: ClassVar[tuple[str, ...]] = ()
    #: device -> precisions it can run; a device left out supports ``default`` and ``fp32``
    precisions: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    #: optimisation kind (``ngb.core.trial.optimise.KINDS``) -> why this compiler cannot take it
    unsupported_optimisations: ClassVar[Mapping[str, str]] = {}
    #: exception class names (anywhere in the MRO) that mean "unsupported by this compiler"
    unsupported_errors: ClassVar[tuple[str, ...]] = ()
    #: result.versions label -> distribution names to try, first installed wins
    version_packages: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    #: its colour and markers on the console's charts, each its own (``Style``)
    style: ClassVar[Style]
    #: its name where a table is narrow (``ngb.tui.narrow_table``); the name itself if short
    short_name: ClassVar[str]
    #: how ``ngb profile`` reads its kernels (``Profiler``); None: no profiler is wired to it
    profiler: ClassVar[Profiler | None]
    #: the ``version_packages`` labels the paper's software table (Table II) has a column for
    version_libraries: ClassVar[tuple[str, ...]]
    #: the config option that bounds its tuning search, in trials (its default: the config
    #: field's); None: it does not search (``tuning_budget``, the ETA's weight of a trial)
    tuning_budget_option: ClassVar[str | None] = None
    #: algorithm kind (``ngb.core.records.algorithm_names.KINDS``) -> what it runs for it, recorded
    #: with the result; a kind left out is refused with its ``algorithm_refusals`` reason
    algorithms: ClassVar[Mapping[str, str]] = {
        "default": "its own choice of convolution",
        "gemm": "im2col + matrix multiply written into the graph, compiled as given",
    }
    #: algorithm kind -> why it cannot run it (``tests/test_compilers_describe.py``: every kind
    #: is either run or refused with a reason, by every compiler)
    algorithm_refusals: ClassVar[Mapping[str, str]] = {
        "direct": "it picks its own convolution kernel per shape; ngb cannot make it run a "
        "direct one",
        "sparse-csr": "its importer takes no sparse weights (a sparse trial would time the "
        "dense matrix)",
        "sparse-bsr": "its importer takes no sparse weights (a sparse trial would time the "
        "dense matrix)",
    }

    config: ConfigT

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        for base in cls.__dict__.get("__orig_bases__", ()):
            origin = get_origin(base)
            if isinstance(origin, type) and issubclass(origin, Compiler):
                (param,) = get_args(base)
                if isinstance(param, type) and issubclass(param, CompilerConfig):
                    cls.Config = param

    #: model forms it takes: "torch" (an nn.Module) and/or "onnx" (a user's ONNX file)
    sources: ClassVar[tuple[str, ...]] = ("torch",)

    def __init__(self, config: CompilerConfig | Mapping[str, object] | None = None) -> None:
        if isinstance(config, CompilerConfig):
            if not isinstance(config, self.Config):
                raise ConfigError(
                    f"{self.name} takes {self.Config.__name__}, not {type(config).__name__}"
                )
            self.config = cast(ConfigT, config)
        else:
            self.config = cast(ConfigT, self.Config.from_options(config))

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """Whether this compiler can run here, and if not, why (one line, actionable).

        Cheap on purpose (no heavy import): the probe asks it for every compiler. Override to add
        hardware checks, calling ``super().available()`` for the modules.
        """
        return modules_available(*cls.requires)

    @classmethod
    def supported_precisions(cls, device: str) -> tuple[str, ...]:
        return tuple(cls.precisions.get(device, ("default", "fp32")))

    @classmethod
    def check_precision(cls, precision: str, device: str) -> None:
        """Raise ``UnsupportedTrial`` (one line) when ``precision`` cannot run on ``device``."""
        if precision not in PRECISIONS:
            raise ConfigError(
                f"precision must be one of {', '.join(PRECISIONS)}; got {precision!r}"
            )
        supported = cls.supported_precisions(device)
        if precision not in supported:
            raise UnsupportedTrial(
                f"{cls.name} cannot run precision {precision} on {device} "
                f"(supported: {', '.join(supported)})"
            )

    @abstractmethod
    def compile(self, model: Model, example: Example, ctx: CompileContext) -> Compiled:
        """Compile ``model`` for the ``example`` batch; time sub-phases with ``ctx.phase``.

        Honour ``ctx.precision`` and report what ran in ``Compiled.precision``.
        """

    @classmethod
    def tuning_budget(cls, options: Mapping[str, object]) -> int:
        """Tuning trials a trial with these ``options`` may run: its ``tuning_budget_option``,
        else that option's default, 0 for a compiler that does not search."""
        option = cls.tuning_budget_option
        if option is None:
            return 0
        defaults = {f.name: f.default for f in fields(cls.Config)}
        budget = options.get(option, defaults.get(option))
        if isinstance(budget, bool) or not isinstance(budget, int | float):
            return 0
        return int(budget)

    def versions(self) -> dict[str, str]:
        """Versions of the libraries this compiler uses (recorded with every result)."""
        found = {label: dist_version(*dists) for label, dists in self.version_packages.items()}
        return {label: v for label, v in found.items() if v}


def module_available(module: str) -> tuple[bool, str]:
    """``available()`` helper: is a module importable (without importing it)?"""
    import importlib.util

    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    return (True, "") if found else (False, f"python package {module!r} is not installed")


def modules_available(*modules: str) -> tuple[bool, str]:
    """``available()`` helper: the first missing module's reason, or ``(True, "")``."""
    for module in modules:
        ok, reason = module_available(module)
        if not ok:
            return ok, reason
    return True, ""
