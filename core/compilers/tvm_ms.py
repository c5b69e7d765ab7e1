"""``tvm-ms``: Apache TVM Relax tuned with MetaSchedule, then built with the best schedules.

Shares the import, target and VM of ``tvm`` (``tvm.py``); the search itself (early stop, progress
events, the reusable tuning database, the fast candidate builder) is in ``tvm_tuning.py``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ngb.core.base.errors import CompilerUnavailable, ConfigError, NgbError
from ngb.core.compilers.base import CompileContext, Compiled, Style, choice, module_available
from ngb.core.compilers.identity import check_bool
from ngb.core.compilers.tvm import (
    TvmBase,
    TvmCompiled,
    TvmConfig,
    apply_threads,
    check_int,
    import_model,
    last_line,
    make_target,
    target_spec,
    tvm_version,
)
from ngb.core.compilers.tvm_tuning import (
    RUN_ID_ENV,
    TuningMeta,
    TuningProgress,
    TuningStore,
    build_candidate,
    early_stop_scheduler,
    import_tensor_intrinsics,
    plan_tuning,
    progress_callback,
    provenance,
    provenance_line,
    quiet_meta_schedule_console,
)
from ngb.core.statistics.eta_evidence import first_batch_factor

if TYPE_CHECKING:
    from ngb.core.compilers.tvm import TargetSpec
    from ngb.core.models.model_types import Example, Model
    from tvm.ir import IRModule
    from tvm.s_tir.meta_schedule.database import JSONDatabase
    from tvm.target import Target

#: apache-tvm-ffi releases known to crash MetaSchedule (segfault in ToJSONGraph)
BAD_TVM_FFI_FOR_TUNING = ("0.1.15.post2",)
COST_MODELS = ("xgb", "random")


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
        check_int("max_trials_global", self.max_trials_global, minimum=1)
        check_int("early_stop", self.early_stop, minimum=1, optional=True)
        check_int("max_trials_per_task", self.max_trials_per_task, minimum=1, optional=True)
        check_int("num_trials_per_iter", self.num_trials_per_iter, minimum=1)
        check_bool("reuse_database", self.reuse_database)
        check_int("seed", self.seed, minimum=0, optional=True)
        choice("cost_model", self.cost_model, COST_MODELS)
        check_int("population_size", self.population_size, minimum=2)
        for name in ("build_timeout_s", "run_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigError(f"{name} must be a number > 0; got {value!r}")


def early_stop_words(early_stop: int | None, budget: int) -> str:
    """The start line's words on the early stop: one that needs more trials without a better
    one than the budget holds cannot fire (the log said "early stop after 150 trials" for a
    64-trial job), so it says so instead."""
    if not early_stop:
        return "no early stop"
    if early_stop >= budget:
        return f"no early stop within {budget} trials (it needs {early_stop} without a better one)"
    return f"early stop after {early_stop} trials without a better one"


class TvmMetaScheduleCompiler(TvmBase[TvmMetaScheduleConfig]):
    name = "tvm-ms"
    description = "Apache TVM Relax tuned with MetaSchedule (reusable tuning database)"
    style = Style((238, 102, 119), "▼", "▽")  # Paul Tol's red
    short_name = "tvm-ms"
    tuning_budget_option = "max_trials_global"

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

    def compile(self, model: Model, example: Example, ctx: CompileContext) -> Compiled:
        import tvm
        import tvm_ffi
        from tvm import relax

        cfg = self.config
        ok, reason = self.available()
        if not ok:
            raise CompilerUnavailable(f"tvm-ms: {reason}")
        if cfg.cost_model == "xgb" and not module_available("xgboost")[0]:
            raise CompilerUnavailable(
                "tvm-ms: cost_model 'xgb' needs the python package 'xgboost' "
                "(pip install xgboost-cpu), or set cost_model='random'"
            )
        spec = target_spec(cfg, ctx)
        target = make_target(spec)
        threads = apply_threads(spec, ctx)
        mod, digest = import_model(model, example, ctx)
        store = TuningStore(self._store_dir(model, example, spec, target, digest, ctx))
        with target:
            fused = relax.pipeline.zero_pipeline()(mod)
        if ctx.worker == 0:
            with ctx.phase("tune"):
                database, meta, progress = self._tune_once(fused, target, store, ctx)
        else:
            # One tuning per trial: worker 0 searched, the later workers build from its
            # database, so every worker measures the same tuned program.
            database, meta, progress = store.open(), store.meta(), None
            if not meta.get("complete"):
                raise NgbError(
                    f"tvm-ms: worker {ctx.worker} found no finished tuning in {store.dir}"
                )

        with ctx.phase("compile"):
            try:
                with target, database, tvm.transform.PassContext(opt_level=cfg.opt_level):
                    tuned = relax.transform.MetaScheduleApplyDatabase()(fused)
                    tuned_digest = tvm_ffi.structural_hash(
                        tuned, map_free_vars=True, skip_tensor_content=True
                    )
                    executable = tvm.compile(tuned, target=target)
            except Exception as exc:  # noqa: BLE001
                raise NgbError(f"tvm-ms: build failed: {last_line(exc)}") from exc

        records = store.record_count()
        ctx.emit(
            "log",
            level="debug",
            msg=f"tvm-ms worker {ctx.worker}: built tuned program {int(tuned_digest):x} "
            f"from {records} tuning records",
            tuned_digest=f"{int(tuned_digest):x}",
            records=records,
        )
        compiled = TvmCompiled(executable, example, spec["kind"])
        before = int(meta.get("trials_before", 0) or 0) if progress else int(meta.get("trials", 0))
        compiled.extra.update(
            {
                "target": str(target),
                "opt_level": cfg.opt_level,
                "threads": threads,
                "database": str(store.dir),
                "tuning_reused": progress is None or before > 0,
                "trials_before": before,
                "trials_run": progress.trials_done if progress else 0,
                "trials_valid": progress.valid_trials if progress else 0,
                "early_stopped": bool(
                    progress.stopped_early if progress else meta.get("early_stopped")
                ),
                "tasks": len(meta.get("tasks") or []) or None,
                "est_latency_ms": progress.estimated_ms if progress else meta.get("best_ms"),
                "tuning_records": records,
                "tuned_digest": f"{int(tuned_digest):x}",
                "tuning": provenance(meta, reused=progress is None),
            }
        )
        return compiled

    def _tune_once(
        self, fused: IRModule, target: Target, store: TuningStore, ctx: CompileContext
    ) -> tuple[JSONDatabase, TuningMeta, TuningProgress | None]:
        """Worker 0: reuse, resume or start the search; the database and what it holds."""
        cfg = self.config
        meta = store.meta()
        if not cfg.reuse_database and meta.get("trial_pid") != os.getppid():
            # a fresh search for this trial: what a killed earlier attempt left is not ours
            store.clear()
            meta = {}
        database = store.open()
        before, remaining = plan_tuning(meta, cfg.max_trials_global)
        progress = self._tune(fused, target, database, store, ctx, before, remaining, meta)
        meta = store.meta()
        if progress is None:
            line = provenance_line(meta)
            ctx.emit("log", level="info", msg=f"tvm-ms: {line}", tuning=provenance(meta, True))
        else:
            meta = {**meta, "trials_before": before}
        return database, meta, progress

    def _store_dir(
        self,
        model: Model,
        example: Example,
        spec: TargetSpec,
        target: Target,
        digest: int,
        ctx: CompileContext,
    ) -> Path:
        """Database folder named for people (model, batch, target), unique by the digest."""
        cfg = self.config
        first = example[0] if isinstance(example, list | tuple) else example
        shapes = [
            list(a.shape) for a in (example if isinstance(example, list | tuple) else [example])
        ]
        key = {"ir": digest, "target": str(target), "tvm": tvm_version(), "shapes": shapes}
        blob = json.dumps(key, sort_keys=True).encode()
        name = (
            f"{type(model).__name__}-b{first.shape[0]}-{spec['kind']}-"
            f"{hashlib.sha256(blob).hexdigest()[:16]}"
        )
        # not reused: a fresh database in the trial's folder, which its workers share
        shared = ctx.trial_dir or ctx.workdir
        root = ctx.cache_dir if (cfg.reuse_database and ctx.cache_dir) else shared
        return Path(root) / "tvm-ms" / name

    def _tune(
        self,
        fused: IRModule,
        target: Target,
        database: JSONDatabase,
        store: TuningStore,
        ctx: CompileContext,
        before: int,
        remaining: int,
        meta: TuningMeta,
    ) -> TuningProgress | None:
        """Run MetaSchedule for ``remaining`` trials; ``None`` when nothing is left to do."""
        from tvm.s_tir import meta_schedule as ms

        cfg = self.config
        extracted = ms.relax_integration.extract_tasks(fused, target)
        if not extracted:
            raise NgbError("tvm-ms: the model has no operator MetaSchedule can tune")
        names = [t.task_name for t in extracted]
        facts: TuningMeta = {"target": str(target), "tvm": tvm_version(), "tasks": names}
        if remaining == 0:
            ctx.emit(
                "tuning",
                trials_done=0,
                budget=0,
                best_ms=meta.get("best_ms"),
                reused=True,
                trials_before=before,
                tasks=[{"name": n, "trials": 0, "best_ms": None} for n in names],
                provenance=provenance_line(meta),
            )
            return None
        stop = early_stop_words(cfg.early_stop, remaining)
        ctx.emit(
            "log",
            level="info",
            msg=f"tvm-ms: tuning {len(names)} task(s), budget {remaining} trials"
            + (f" ({before} already in the database)" if before else "")
            + f", {stop}, {cfg.num_trials_per_iter} a batch",
        )

        log_dir = Path(ctx.workdir) / "tvm-ms-logs"
        import_tensor_intrinsics()  # MetaSchedule's TuneContext imports it the slow way
        strategy = ms.search_strategy.EvolutionarySearch(
            population_size=cfg.population_size,
            init_min_unmeasured=min(50, cfg.population_size),
        )
        with quiet_meta_schedule_console():
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
            first_batch_factor=first_batch_factor(ctx.cache_dir, self.name),
        )

        earlier_s = float(meta.get("tune_s", 0.0) or 0.0)
        best_before = meta.get("best_ms")

        def checkpoint(complete: bool) -> None:
            best = progress.estimated_ms
            facts_now: TuningMeta = {
                **facts,
                "trials": before + progress.trials_done,
                "budget": cfg.max_trials_global,
                "complete": complete,
                "early_stopped": progress.stopped_early,
                # MetaSchedule ended short of the budget without our early stop: the search
                # space is spent, more trials would find nothing new
                "exhausted": complete
                and not progress.stopped_early
                and progress.trials_done < remaining,
                "best_ms": best if math.isfinite(best) else best_before,
                "tune_s": round(earlier_s + progress.elapsed_s, 3),
                "run_id": os.environ.get(RUN_ID_ENV) or None,
                "trial_pid": os.getppid(),
                "created": meta.get("created") or time.time(),
            }
            store.write_meta(**facts_now)

        callbacks = [
            *ms.MeasureCallback.create("default"),
            progress_callback(progress, checkpoint),
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
                task_scheduler=early_stop_scheduler(progress),
            )
        except Exception as exc:  # noqa: BLE001
            raise NgbError(f"tvm-ms: tuning failed: {last_line(exc)}") from exc
        if progress.trials_done and progress.valid_trials == 0:
            # every candidate failed to build or run: the "tuned" model would be untuned
            raise NgbError(
                f"tvm-ms: all {progress.trials_done} tuning trials failed; first error: "
                f"{last_line(RuntimeError(progress.first_error or 'unknown'))}"
            )
        checkpoint(complete=True)
        progress.emit()
        progress.log_milestones(done=True)
        return progress
