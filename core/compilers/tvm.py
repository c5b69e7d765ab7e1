"""Apache TVM (Relax): ``tvm`` (untuned) and ``tvm-ms`` (MetaSchedule-tuned).

Both import the model through ``torch.export`` and TVM's Relax frontend, build with
``tvm.compile`` and run on the Relax ``VirtualMachine`` bound to one input tensor.

``tvm`` builds the legalised operators as they come (plain loop nests, no schedule): the paper's
"untuned TVM", expected to be slower than eager.

``tvm-ms`` first tunes every fused operator with MetaSchedule and builds with the best schedules
found. Three things are ours rather than MetaSchedule's defaults:

* **Early stop.** MetaSchedule has no "stop after N trials without improvement" knob, only trial
  caps. We plug in our own task scheduler (a MetaSchedule ``PyTaskScheduler``): before it picks
  the next task it joins every pending measurement, then stops the whole search once
  ``early_stop`` consecutive measured trials have not lowered any task's best latency (i.e. the
  weighted sum of per-task bests, MetaSchedule's estimate of end-to-end latency, stayed put).
  Because candidates are measured in batches of ``num_trials_per_iter``, the search may run up to
  one batch past the window. Task choice otherwise follows MetaSchedule's gradient heuristic:
  each task once, then the one whose weighted latency is expected to drop most per trial.
* **Progress.** A measure callback (called by MetaSchedule after every measured batch, in the
  tuning thread) updates per-task trial counts and best latencies and emits a ``tuning`` event,
  so a multi-hour tuning run shows live progress without parsing logs.
* **A reusable database.** Records go to a MetaSchedule ``JSONDatabase`` under
  ``<cache_dir or workdir>/tvm-ms/<model>-b<batch>-<target>-<digest>/``, where the digest covers
  the imported Relax module's structure (architecture + shapes, weights excluded), the target
  (incl. cores and CPU flags) and the TVM version. ``meta.json`` beside it counts the trials run so
  far; a finished search is reused without tuning, an interrupted or smaller one is resumed with
  the remaining budget. With ``reuse_database=false`` a fresh database in the trial's workdir is
  used and the cache is left untouched (to measure tuning from scratch).
* **Overheads that are not tuning.** MetaSchedule imports its tensor-intrinsic registry in the
  tuning process and in every builder batch; on the 2-core test machine that import alone took
  ~70 CPU-seconds (see ``import_tensor_intrinsics``/``build_candidate``), which made a 4-trial
  run time out. Its console log is moved off stdout, which is the agent's event stream.

``best_ms`` in tuning events is MetaSchedule's own estimate (weighted sum of per-task bests), not
a measurement of the built model.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ngb.core.compilers.base import (
    CompileContext,
    Compiled,
    Compiler,
    CompilerConfig,
    choice,
    module_available,
    to_numpy,
)
from ngb.core.errors import CompilerUnavailable, ConfigError, NgbError

#: apache-tvm-ffi releases known to crash MetaSchedule (segfault in ToJSONGraph, ENVIRONMENT.md)
BAD_TVM_FFI_FOR_TUNING = ("0.1.15.post2",)
TARGET_KINDS = ("llvm", "cuda")
OPT_LEVELS = (0, 1, 2, 3, 4)
COST_MODELS = ("xgb", "random")


def _check_int(name: str, value: Any, *, minimum: int, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}; got {value!r}")


def _check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be true or false; got {value!r}")


@dataclass(frozen=True)
class TvmConfig(CompilerConfig):
    """Flags of the untuned build (also the base of ``tvm-ms``)."""

    target: str | None = None  # llvm | cuda; None = llvm on a CPU device, cuda on a GPU device
    num_cores: int | None = None  # target "num-cores"; None = ctx.threads or os.cpu_count()
    mcpu: str | None = None  # LLVM -mcpu (e.g. "skylake-avx512", "cortex-a78"); cuda: the arch
    mattr: tuple[str, ...] = ()  # LLVM -mattr, e.g. ("+avx2", "+fma"); a comma string works too
    opt_level: int = 3  # Relax/TIR PassContext opt_level

    def __post_init__(self) -> None:
        if self.target is not None:
            choice("target", self.target, TARGET_KINDS)
        _check_int("num_cores", self.num_cores, minimum=1, optional=True)
        if self.mcpu is not None and (not isinstance(self.mcpu, str) or not self.mcpu.strip()):
            raise ConfigError(f"mcpu must be a non-empty string; got {self.mcpu!r}")
        mattr = self.mattr
        if isinstance(mattr, str):
            mattr = tuple(a.strip() for a in mattr.split(",") if a.strip())
        if not isinstance(mattr, list | tuple) or not all(isinstance(a, str) for a in mattr):
            raise ConfigError(f"mattr must be a list of strings like '+avx2'; got {self.mattr!r}")
        object.__setattr__(self, "mattr", tuple(mattr))
        choice("opt_level", self.opt_level, OPT_LEVELS)


@dataclass(frozen=True)
class TvmMetaScheduleConfig(TvmConfig):
    """Tuning flags; defaults are the paper's (1500 trials, stop after 150 without improvement)."""

    max_trials_global: int = 1500  # total measured trials over all tasks
    early_stop: int | None = 150  # stop after this many trials without improvement; None = off
    max_trials_per_task: int | None = None  # None = no per-task cap beyond the global one
    num_trials_per_iter: int = 64  # candidates generated and measured per batch
    reuse_database: bool = True  # reuse/resume the cached database for this model+batch+target
    seed: int | None = None  # search seed (None = random)
    cost_model: str = "xgb"  # xgb (MetaSchedule's default; needs xgboost) | random (no model)
    population_size: int = 512  # evolutionary search population (MetaSchedule default 512)
    build_timeout_s: float = 60.0  # per candidate; MetaSchedule's 30 s is tight on a busy board
    run_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_int("max_trials_global", self.max_trials_global, minimum=1)
        _check_int("early_stop", self.early_stop, minimum=1, optional=True)
        _check_int("max_trials_per_task", self.max_trials_per_task, minimum=1, optional=True)
        _check_int("num_trials_per_iter", self.num_trials_per_iter, minimum=1)
        _check_bool("reuse_database", self.reuse_database)
        _check_int("seed", self.seed, minimum=0, optional=True)
        choice("cost_model", self.cost_model, COST_MODELS)
        _check_int("population_size", self.population_size, minimum=2)
        for name in ("build_timeout_s", "run_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigError(f"{name} must be a number > 0; got {value!r}")


# --------------------------------------------------------------------------------------------
# Tuning progress and early stop (plain Python: testable without TVM)


@dataclass
class TaskProgress:
    name: str
    weight: float
    trials: int = 0
    errors: int = 0
    best_s: float = math.inf
    best_history: list[float] = field(default_factory=list)  # best after each measured batch


class TuningProgress:
    """Counts measured trials per task, tracks best latencies and decides the early stop."""

    def __init__(
        self,
        names: list[str],
        weights: list[float],
        *,
        budget: int,
        early_stop: int | None,
        emit: Callable[..., None] = lambda type_, **fields: None,
        trials_before: int = 0,
    ) -> None:
        self.tasks = [TaskProgress(n, float(w)) for n, w in zip(names, weights, strict=True)]
        self.budget = budget
        self.early_stop = early_stop
        self.trials_before = trials_before  # trials in the database from earlier runs
        self.trials_done = 0
        self.since_improvement = 0
        self.stopped_early = False
        self.first_error: str | None = None
        self._emit = emit
        self._started = time.monotonic()

    def record(
        self, task_id: int, latencies_s: list[float | None], error: str | None = None
    ) -> None:
        """One measured batch of ``task_id``; ``None`` marks a candidate that failed."""
        task = self.tasks[task_id]
        for lat in latencies_s:
            self.trials_done += 1
            task.trials += 1
            if lat is None:
                task.errors += 1
                self.since_improvement += 1
            elif lat < task.best_s:
                task.best_s = lat
                self.since_improvement = 0
            else:
                self.since_improvement += 1
        if error and self.first_error is None:
            self.first_error = error
        task.best_history.append(task.best_s)

    def should_stop(self) -> bool:
        if self.early_stop is not None and self.since_improvement >= self.early_stop:
            self.stopped_early = True
        return self.stopped_early

    @property
    def valid_trials(self) -> int:
        return sum(t.trials - t.errors for t in self.tasks)

    @property
    def estimated_ms(self) -> float:
        """Weighted sum of per-task best latencies (ms) over the tasks measured so far."""
        measured = [t.weight * t.best_s for t in self.tasks if math.isfinite(t.best_s)]
        return sum(measured) * 1e3 if measured else math.nan

    def score(self, task_id: int, *, alpha: float = 0.2, window: int = 3) -> float:
        """Expected weighted latency gain per trial (MetaSchedule's gradient heuristic).

        Blends the recent slope of the task's best latency with its best over the number of
        batches so far (an optimistic "more trials still help" term). Tasks that never produced
        a valid measurement rank last.
        """
        task = self.tasks[task_id]
        hist = task.best_history
        if not hist or not math.isfinite(hist[-1]):
            return -math.inf
        best = hist[-1]
        slope = (hist[-1 - window] - best) / window if len(hist) > window else 0.0
        if not math.isfinite(slope):
            slope = 0.0
        return task.weight * (alpha * slope + (1 - alpha) * best / len(hist))

    def event(self) -> dict[str, Any]:
        return {
            "trials_done": self.trials_done,
            "budget": self.budget,
            "best_ms": self.estimated_ms,
            "trials_before": self.trials_before,
            "elapsed_s": round(time.monotonic() - self._started, 3),
            "tasks": [
                {
                    "name": t.name,
                    "trials": t.trials,
                    "best_ms": t.best_s * 1e3 if math.isfinite(t.best_s) else None,
                }
                for t in self.tasks
            ],
        }

    def emit(self) -> None:
        self._emit("tuning", **self.event())


# --------------------------------------------------------------------------------------------
# The tuning database on disk


class TuningStore:
    """A MetaSchedule JSON database plus ``meta.json`` (trials so far, finished or not)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.workload_path = directory / "database_workload.json"
        self.record_path = directory / "database_tuning_record.json"
        self.meta_path = directory / "meta.json"

    def meta(self) -> dict[str, Any]:
        """The stored facts, or ``{}`` when absent, unreadable or the records are gone."""
        if not self.record_path.is_file() or self.record_path.stat().st_size == 0:
            return {}
        try:
            data = json.loads(self.meta_path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def write_meta(self, **facts: Any) -> None:
        """Atomic replace, so a kill mid-write leaves the previous meta intact."""
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.meta_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({**facts, "updated": time.time()}, indent=1, sort_keys=True))
        os.replace(tmp, self.meta_path)

    def open(self) -> Any:
        from tvm.s_tir import meta_schedule as ms

        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            return ms.database.JSONDatabase(
                path_workload=str(self.workload_path),
                path_tuning_record=str(self.record_path),
                allow_missing=True,
            )
        except Exception as exc:  # noqa: BLE001 - TVM raises its own error types
            raise NgbError(
                f"tvm-ms: tuning database {self.dir} is unreadable ({_first_line(exc)}); delete it"
            ) from exc


def plan_tuning(meta: Mapping[str, Any], budget: int) -> tuple[int, int]:
    """(trials already in the database, trials still to run) for a requested ``budget``.

    A finished search is reused as is when it ran at least ``budget`` trials or stopped early
    (more trials would not have helped); otherwise the search resumes for the remainder.
    """
    before = int(meta.get("trials", 0) or 0)
    if meta.get("complete") and (meta.get("early_stopped") or before >= budget):
        return before, 0
    return before, max(budget - before, 0)


# --------------------------------------------------------------------------------------------
# Helpers shared by both compilers


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1].strip() if lines else text


def _tvm_version() -> str:
    import tvm

    return str(tvm.__version__)


def _target_spec(config: TvmConfig, ctx: CompileContext) -> dict[str, Any]:
    """The target dict for ``tvm.target.Target`` (TVM 0.27 refuses the old string form)."""
    kind = config.target or ("cuda" if ctx.device == "cuda" else "llvm")
    if ctx.device not in ("cpu", "cuda"):
        raise ConfigError(f"device must be cpu or cuda; got {ctx.device!r}")
    if (kind == "cuda") != (ctx.device == "cuda"):
        raise ConfigError(f"tvm target {kind!r} does not match device {ctx.device!r}")
    if kind == "cuda":
        spec: dict[str, Any] = {"kind": "cuda"}
        if config.mcpu:
            spec["arch"] = config.mcpu
        return spec
    spec = {"kind": "llvm", "num-cores": config.num_cores or ctx.threads or os.cpu_count() or 1}
    if config.mcpu:
        spec["mcpu"] = config.mcpu
    if config.mattr:
        spec["mattr"] = list(config.mattr)
    return spec


def _make_target(spec: dict[str, Any]) -> Any:
    import tvm

    try:
        return tvm.target.Target(spec)
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(f"tvm: bad target {spec}: {_first_line(exc)}") from exc


def _apply_threads(spec: dict[str, Any], ctx: CompileContext) -> int:
    """Size TVM's runtime thread pool; return the count in effect.

    TVM reads ``TVM_NUM_THREADS`` when its pool first starts, and MetaSchedule's runner workers
    inherit it, so tuning measures with the thread count the benchmark will use. Without it TVM
    picked a single thread on the 2-core test machine, so we default to the target's core count
    (an explicit ``ctx.threads`` wins; otherwise an operator's own ``TVM_NUM_THREADS`` is left
    alone). The pool is sized once per process; the agent runs each trial in its own. Calling
    ``runtime.config_threadpool`` instead pins threads to cores, which hurt on a shared machine.
    """
    import tvm_ffi

    if ctx.threads:
        os.environ["TVM_NUM_THREADS"] = str(int(ctx.threads))
    elif spec.get("num-cores") and "TVM_NUM_THREADS" not in os.environ:
        os.environ["TVM_NUM_THREADS"] = str(int(spec["num-cores"]))
    return int(tvm_ffi.get_global_func("runtime.NumThreads")())


def _import_model(model: Any, example: Any, ctx: CompileContext) -> tuple[Any, int]:
    """torch.export -> Relax IRModule in inference form, and its weight-free structural hash."""
    import torch
    import tvm
    import tvm_ffi
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    if ctx.device == "cuda" and not torch.cuda.is_available():
        raise CompilerUnavailable("device 'cuda' asked for, but torch sees no CUDA GPU")
    if getattr(model, "onnx_path", None) is not None:
        with ctx.phase("export"):
            mod = _import_onnx(model.onnx_path, example)
            mod = tvm.transform.Sequential(
                [relax.transform.DecomposeOpsForInference(), relax.transform.CanonicalizeBindings()]
            )(mod)
            digest = tvm_ffi.structural_hash(mod, map_free_vars=True, skip_tensor_content=True)
        return mod, int(digest)
    model = model.eval().cpu()
    args = tuple(example) if isinstance(example, list | tuple) else (example,)
    args = tuple(a.cpu() for a in args)
    with ctx.phase("export"):
        try:
            with torch.no_grad():
                exported = torch.export.export(model, args)
            mod = from_exported_program(exported, unwrap_unit_return_tuple=True)
        except Exception as exc:  # noqa: BLE001 - unsupported op etc.: one clear line
            raise NgbError(f"tvm: cannot import the model: {_first_line(exc)}") from exc
        mod = tvm.transform.Sequential(
            [relax.transform.DecomposeOpsForInference(), relax.transform.CanonicalizeBindings()]
        )(mod)
        digest = tvm_ffi.structural_hash(mod, map_free_vars=True, skip_tensor_content=True)
    return mod, int(digest)


def _import_onnx(path: Any, example: Any) -> Any:
    """A user's ONNX file -> Relax, shapes and dtypes bound to the example batch."""
    import onnx
    from ngb.core.compilers.onnx_export import input_names
    from tvm.relax.frontend.onnx import from_onnx

    arrays = _example_numpy(example)
    names = input_names(example)
    try:
        return from_onnx(
            onnx.load(str(path)),
            shape_dict={n: list(a.shape) for n, a in zip(names, arrays, strict=True)},
            dtype_dict={n: str(a.dtype) for n, a in zip(names, arrays, strict=True)},
        )
    except Exception as exc:  # noqa: BLE001 - unsupported op etc.: one clear line
        raise NgbError(f"tvm: cannot import the ONNX model: {_first_line(exc)}") from exc


def _example_numpy(example: Any) -> list[Any]:
    import numpy as np

    args = example if isinstance(example, list | tuple) else (example,)
    return [np.ascontiguousarray(a.detach().cpu().numpy()) for a in args]


class TvmCompiled(Compiled):
    """A Relax VM bound to its input tensors, created once on the target device."""

    def __init__(self, executable: Any, example: Any, device_kind: str) -> None:
        super().__init__()
        import tvm
        from tvm import relax

        self._dev = tvm.cuda(0) if device_kind == "cuda" else tvm.cpu(0)
        self._vm = relax.VirtualMachine(executable, self._dev)
        self._main = self._vm["main"]
        self._inputs = [tvm.runtime.tensor(a, device=self._dev) for a in _example_numpy(example)]
        self._sync = device_kind == "cuda"

    def run(self) -> Any:
        out = self._main(*self._inputs)
        if self._sync:  # GPU kernels are asynchronous; a timed call must include them
            self._dev.sync()
        return out

    def output_numpy(self) -> Any:
        out = self.run()
        # a multi-output model returns a TVM Array, which to_numpy does not know
        if not hasattr(out, "numpy") and hasattr(out, "__getitem__"):
            out = out[0]
        return to_numpy(out)

    def close(self) -> None:
        self._inputs = []
        self._main = None
        self._vm = None


# --------------------------------------------------------------------------------------------
# Compilers


class TvmCompiler(Compiler):
    name = "tvm"
    description = "Apache TVM Relax, untuned (legalised operators as they come)"
    Config = TvmConfig
    devices = ("cpu", "cuda")
    requires = ("tvm", "tvm_ffi", "torch")
    sources = ("torch", "onnx")  # a user's ONNX file goes through the Relax ONNX frontend

    def versions(self) -> dict[str, str]:
        from importlib.metadata import PackageNotFoundError, version

        out = {}
        for dist in ("apache-tvm", "apache-tvm-ffi"):
            with contextlib.suppress(PackageNotFoundError):
                out[dist] = version(dist)
        return out

    def compile(self, model: Any, example: Any, ctx: CompileContext) -> Compiled:
        import tvm

        assert isinstance(self.config, TvmConfig)
        spec = _target_spec(self.config, ctx)
        target = _make_target(spec)
        threads = _apply_threads(spec, ctx)
        mod, _ = _import_model(model, example, ctx)
        with ctx.phase("compile"):
            try:
                with tvm.transform.PassContext(opt_level=self.config.opt_level):
                    executable = tvm.compile(mod, target=target)
            except Exception as exc:  # noqa: BLE001
                raise NgbError(f"tvm: build failed: {_first_line(exc)}") from exc
        compiled = TvmCompiled(executable, example, spec["kind"])
        compiled.extra.update(target=str(target), opt_level=self.config.opt_level, threads=threads)
        return compiled


class TvmMetaScheduleCompiler(TvmCompiler):
    name = "tvm-ms"
    description = "Apache TVM Relax tuned with MetaSchedule (reusable tuning database)"
    Config = TvmMetaScheduleConfig

    @classmethod
    def available(cls) -> tuple[bool, str]:
        ok, reason = super().available()
        if not ok:
            return ok, reason
        # MetaSchedule pickles tuning jobs for its builder/runner worker processes
        ok, reason = module_available("cloudpickle")
        if not ok:
            return False, f"{reason} (MetaSchedule needs it for its worker processes)"
        from importlib.metadata import PackageNotFoundError, version

        try:
            ffi = version("apache-tvm-ffi")
        except PackageNotFoundError:
            return False, "python package 'apache-tvm-ffi' is not installed"
        if ffi in BAD_TVM_FFI_FOR_TUNING:
            return False, f"apache-tvm-ffi {ffi} crashes MetaSchedule; install 0.1.14.post1"
        return True, ""

    def compile(self, model: Any, example: Any, ctx: CompileContext) -> Compiled:
        import tvm
        from tvm import relax

        cfg = self.config
        assert isinstance(cfg, TvmMetaScheduleConfig)
        ok, reason = self.available()
        if not ok:
            raise CompilerUnavailable(f"tvm-ms: {reason}")
        if cfg.cost_model == "xgb" and not module_available("xgboost")[0]:
            raise CompilerUnavailable(
                "tvm-ms: cost_model 'xgb' needs the python package 'xgboost' "
                "(pip install xgboost-cpu), or set cost_model='random'"
            )
        spec = _target_spec(cfg, ctx)
        target = _make_target(spec)
        threads = _apply_threads(spec, ctx)
        mod, digest = _import_model(model, example, ctx)
        store = TuningStore(self._store_dir(model, example, spec, target, digest, ctx))

        with ctx.phase("tune"):
            with target:
                fused = relax.pipeline.zero_pipeline()(mod)
            database = store.open()
            meta = store.meta() if cfg.reuse_database else {}
            before, remaining = plan_tuning(meta, cfg.max_trials_global)
            progress = self._tune(fused, target, database, store, ctx, before, remaining)

        with ctx.phase("compile"):
            try:
                with target, database, tvm.transform.PassContext(opt_level=cfg.opt_level):
                    tuned = relax.transform.MetaScheduleApplyDatabase()(fused)
                    executable = tvm.compile(tuned, target=target)
            except Exception as exc:  # noqa: BLE001
                raise NgbError(f"tvm-ms: build failed: {_first_line(exc)}") from exc

        compiled = TvmCompiled(executable, example, spec["kind"])
        compiled.extra.update(
            target=str(target),
            opt_level=cfg.opt_level,
            threads=threads,
            database=str(store.dir),
            tuning_reused=before > 0,
            trials_before=before,
            trials_run=progress.trials_done if progress else 0,
            trials_valid=progress.valid_trials if progress else 0,
            early_stopped=bool(progress and progress.stopped_early),
            tasks=len(progress.tasks) if progress else None,
            est_latency_ms=progress.estimated_ms if progress else None,
        )
        return compiled

    def _store_dir(
        self, model: Any, example: Any, spec: dict, target: Any, digest: int, ctx: CompileContext
    ) -> Path:
        """Database folder named for people (model, batch, target), unique by the digest."""
        cfg = self.config
        assert isinstance(cfg, TvmMetaScheduleConfig)
        first = example[0] if isinstance(example, list | tuple) else example
        shapes = [
            list(a.shape) for a in (example if isinstance(example, list | tuple) else [example])
        ]
        key = {"ir": digest, "target": str(target), "tvm": _tvm_version(), "shapes": shapes}
        blob = json.dumps(key, sort_keys=True).encode()
        name = (
            f"{type(model).__name__}-b{first.shape[0]}-{spec['kind']}-"
            f"{hashlib.sha256(blob).hexdigest()[:16]}"
        )
        root = ctx.cache_dir if (cfg.reuse_database and ctx.cache_dir) else ctx.workdir
        return Path(root) / "tvm-ms" / name

    def _tune(
        self,
        fused: Any,
        target: Any,
        database: Any,
        store: TuningStore,
        ctx: CompileContext,
        before: int,
        remaining: int,
    ) -> TuningProgress | None:
        """Run MetaSchedule for ``remaining`` trials; ``None`` when nothing is left to do."""
        from tvm.s_tir import meta_schedule as ms

        cfg = self.config
        assert isinstance(cfg, TvmMetaScheduleConfig)
        extracted = ms.relax_integration.extract_tasks(fused, target)
        if not extracted:
            raise NgbError("tvm-ms: the model has no operator MetaSchedule can tune")
        names = [t.task_name for t in extracted]
        facts = {"target": str(target), "tvm": _tvm_version(), "tasks": names}
        if remaining == 0:
            ctx.emit(
                "tuning",
                trials_done=0,
                budget=0,
                best_ms=None,
                reused=True,
                trials_before=before,
                tasks=[{"name": n, "trials": 0, "best_ms": None} for n in names],
            )
            return None

        log_dir = Path(ctx.workdir) / "tvm-ms-logs"
        import_tensor_intrinsics()  # MetaSchedule's TuneContext imports it the slow way
        strategy = ms.search_strategy.EvolutionarySearch(
            population_size=cfg.population_size,
            init_min_unmeasured=min(50, cfg.population_size),
        )
        with _quiet_meta_schedule_console():
            contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
                extracted, work_dir=str(log_dir), strategy=strategy, seed=cfg.seed
            )
        progress = TuningProgress(
            [c.task_name for c in contexts],
            list(weights),
            budget=remaining,
            early_stop=cfg.early_stop,
            emit=ctx.emit,
            trials_before=before,
        )

        def checkpoint(complete: bool) -> None:
            store.write_meta(
                **facts,
                trials=before + progress.trials_done,
                budget=cfg.max_trials_global,
                complete=complete,
                early_stopped=progress.stopped_early,
            )

        callbacks = [
            *ms.MeasureCallback.create("default"),
            _progress_callback(progress, checkpoint),
        ]
        progress.emit()
        try:
            ms.tune.tune_tasks(
                tasks=contexts,
                task_weights=weights,
                work_dir=str(log_dir),
                max_trials_global=remaining,
                max_trials_per_task=cfg.max_trials_per_task or remaining,
                num_trials_per_iter=cfg.num_trials_per_iter,
                builder=ms.builder.LocalBuilder(
                    timeout_sec=cfg.build_timeout_s, f_build=build_candidate
                ),
                runner=ms.runner.LocalRunner(timeout_sec=cfg.run_timeout_s),
                database=database,
                cost_model=cfg.cost_model,
                measure_callbacks=callbacks,
                task_scheduler=_early_stop_scheduler(progress),
            )
        except Exception as exc:  # noqa: BLE001
            raise NgbError(f"tvm-ms: tuning failed: {_first_line(exc)}") from exc
        if progress.trials_done and progress.valid_trials == 0:
            # every candidate failed to build or run: the "tuned" model would be untuned
            raise NgbError(
                f"tvm-ms: all {progress.trials_done} tuning trials failed; first error: "
                f"{_first_line(RuntimeError(progress.first_error or 'unknown'))}"
            )
        checkpoint(complete=True)
        progress.emit()
        return progress


def build_candidate(mod: Any, target: Any, params: Any) -> Any:
    """MetaSchedule builder function, run in its worker processes (module level: picklable).

    MetaSchedule's default builder imports ``tvm.s_tir.tensor_intrin`` first, which registers
    every tensor intrinsic for every target by parsing TVMScript: ~70 CPU-seconds on the 2-core
    test machine, paid again for each measured batch because the builder restarts its worker
    pool per batch. A candidate arrives already scheduled (tensorized blocks carry their
    implementation), so the registry is normally not needed to build it; we import it only when
    a build fails without it, and otherwise build exactly as the default does.
    """
    from tvm.driver import build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    if params:
        raise ValueError("tvm-ms builder takes no params")
    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    try:
        return build(mod, target=target)
    except Exception:  # noqa: BLE001 - retry with the full intrinsic registry, as the default
        import_tensor_intrinsics()
        return build(mod, target=target)


def import_tensor_intrinsics() -> None:
    """Import ``tvm.s_tir.tensor_intrin`` (MetaSchedule needs it) in seconds, not minutes.

    Each of its ~250 TVMScript intrinsics calls ``inspect.stack()``, which looks up the module of
    every frame; for the import machinery's ``<frozen ...>`` frames ``inspect.getmodule`` finds no
    cached answer and rescans all of ``sys.modules`` every time. That made the import cost
    ~70 CPU-seconds here (4 s without the rescans). For the duration of the import we memoise
    ``getmodule`` per code file (a frame's module is determined by its code's file), then put
    the original back.
    """
    import inspect
    import sys

    if "tvm.s_tir.tensor_intrin" in sys.modules:
        return
    original = inspect.getmodule
    memo: dict[tuple[str, str | None], Any] = {}

    def getmodule(obj: Any, _filename: str | None = None) -> Any:
        code = getattr(obj, "f_code", None) if inspect.isframe(obj) else None
        if code is None:
            return original(obj, _filename)
        key = (code.co_filename, _filename)
        if key not in memo:
            memo[key] = original(obj, _filename)
        return memo[key]

    inspect.getmodule = getmodule  # type: ignore[assignment]
    try:
        import tvm.s_tir.tensor_intrin  # noqa: F401
    finally:
        inspect.getmodule = original


@contextlib.contextmanager
def _quiet_meta_schedule_console() -> Any:
    """Keep MetaSchedule's console log off stdout (the agent's event stream) and terse.

    MetaSchedule (re)configures its loggers when tuning contexts are created, adding a console
    handler bound to ``sys.stdout`` at DEBUG level that prints a statistics table after every
    batch. We bind that handler to stderr and raise it to WARNING; the full log still goes to
    the files under ``<workdir>/tvm-ms-logs/logs``.
    """
    import logging
    import sys

    with contextlib.redirect_stdout(sys.stderr):
        yield
    for handler in logging.getLogger("tvm.s_tir.meta_schedule").handlers:
        if handler.get_name() == "tvm.s_tir.meta_schedule.console":
            handler.setLevel(logging.WARNING)


def _run_seconds(result: Any) -> float | None:
    """Median of a MetaSchedule runner result's repeats, ``None`` for a failed candidate."""
    if result.error_msg is not None or not result.run_secs:
        return None
    secs = [float(getattr(s, "value", s)) for s in result.run_secs]
    return statistics.median(secs)


def _progress_callback(progress: TuningProgress, checkpoint: Callable[[bool], None]) -> Any:
    """A MetaSchedule measure callback that feeds ``progress`` after every measured batch."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    @derived_object
    class ProgressCallback(PyMeasureCallback):
        def apply(
            self,
            task_scheduler: Any,
            task_id: int,
            measure_candidates: Any,
            builder_results: Any,
            runner_results: Any,
        ) -> None:
            latencies: list[float | None] = []
            error = None
            for built, ran in zip(builder_results, runner_results, strict=True):
                msg = built.error_msg if built.error_msg is not None else ran.error_msg
                latencies.append(None if msg is not None else _run_seconds(ran))
                if msg is not None and error is None:
                    error = str(msg)
            progress.record(int(task_id), latencies, error)
            checkpoint(False)  # a killed run resumes from here
            progress.emit()

    return ProgressCallback()


def _early_stop_scheduler(progress: TuningProgress) -> Any:
    """A MetaSchedule task scheduler that can stop the whole search early (see module doc)."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.task_scheduler import PyTaskScheduler

    @derived_object
    class EarlyStopScheduler(PyTaskScheduler):
        def __init__(self) -> None:
            super().__init__()
            self.picked: set[int] = set()

        def next_task_id(self) -> int:
            sched = self._outer()
            records = list(sched.tasks_)
            # Join every pending batch first: the stop decision then sees all results, and the
            # task handed back never has a measurement in flight (MetaSchedule requires that).
            for i, rec in enumerate(records):
                if not rec.is_terminated and rec.runner_futures is not None:
                    sched.join_running_task(i)
            alive = [i for i, rec in enumerate(records) if not rec.is_terminated]
            if progress.should_stop():
                for i in alive:
                    sched.terminate_task(i)
                return -1
            if not alive:
                return -1
            fresh = [i for i in alive if i not in self.picked]
            if fresh:
                task_id = fresh[0]
            else:
                task_id = max(alive, key=lambda i: (progress.score(i), -progress.tasks[i].trials))
            self.picked.add(task_id)
            return task_id

    return EarlyStopScheduler()
