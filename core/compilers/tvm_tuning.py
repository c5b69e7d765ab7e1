"""MetaSchedule search machinery for ``tvm-ms``: progress, early stop, database, builder.

Four things are ours rather than MetaSchedule's defaults:

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
import json
import math
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, TypedDict, cast

from ngb.core.base.errors import NgbError
from ngb.core.compilers.tvm import last_line

if TYPE_CHECKING:
    from typing import Unpack  # Python 3.11; the agent's 3.10 never evaluates annotations

    from ngb.core.records.trial_extra import TuningRecord
    from tvm.ir import IRModule
    from tvm.runtime import Module
    from tvm.s_tir.meta_schedule.builder import BuilderResult
    from tvm.s_tir.meta_schedule.database import JSONDatabase
    from tvm.s_tir.meta_schedule.measure_callback import MeasureCallback
    from tvm.s_tir.meta_schedule.runner import RunnerResult
    from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate
    from tvm.s_tir.meta_schedule.task_scheduler import TaskScheduler
    from tvm.target import Target


class TaskEvent(TypedDict):
    """One task in a ``tuning`` event."""

    name: str
    trials: int
    best_ms: float | None


#: the environment variable the agent sets to the run's id: a tuning database records which run
#: searched it, so a later run can say where its tuning came from
RUN_ID_ENV = "NGB_RUN_ID"


class TuningEvent(TypedDict):
    """The fields of a ``tuning`` progress event (what the console's tuning view draws, and the
    ETA's inputs: the budget, the early-stop window and how far the search is into it)."""

    trials_done: int
    budget: int
    best_ms: float
    trials_before: int
    elapsed_s: float
    started_at: float  # time.time() when this search began (re-attached views count from it)
    early_stop: int | None
    since_improvement: int  # measured trials since the best last improved
    s_per_trial: float | None  # the search's recent seconds per trial (``recent_s_per_trial``)
    # the first batch's seconds per trial over the later batches' (None before a second batch):
    # what the device's next search divides its first-batch rate by (``first_batch_factor``)
    first_batch_ratio: float | None
    search_left_s: float | None  # seconds of search left by the budget at that rate, as sent
    history: list[list[float]]  # [trials done, best ms] after each batch that measured one
    tasks: list[TaskEvent]


class TuningMeta(TypedDict, total=False):
    """``meta.json`` beside a tuning database (written by ``TuningStore.write_meta``)."""

    target: str
    tvm: str
    tasks: list[str]
    trials: int  # in the database, all runs together
    budget: int
    complete: bool
    early_stopped: bool
    exhausted: bool  # MetaSchedule ended short of the budget: nothing left to search
    best_ms: float | None  # MetaSchedule's estimate of the tuned model's latency
    tune_s: float  # seconds of search, all runs together
    run_id: str | None  # the run that searched it (None: ``ngb measure``)
    trial_pid: int  # the trial process of the last search (its later workers reuse it)
    trials_before: int  # (not stored) trials in the database before this trial's search
    created: float  # time.time() of the first write
    updated: float  # time.time() of the last write


# --------------------------------------------------------------------------------------------
# Tuning progress and early stop (plain Python: testable without TVM)

#: best-so-far points a tuning event carries for the console's curve (the latest ones)
HISTORY_POINTS = 200
#: the recent rate spans at least this many trials (or a quarter of those done, if more)
RECENT_TRIALS = 16


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
        first_batch_factor: float | None = None,
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
        self.started_at = time.time()
        self.history: list[list[float]] = []  # [trials done, best ms] per batch
        self._marks: list[tuple[float, int]] = [(0.0, 0)]  # (elapsed s, trials done) per batch
        self._began = False  # ``search_began`` was called
        # how much slower than the later ones this device's first batches ran (its earlier
        # searches: ``ngb.core.trial.live_state.first_batch_factor``); None: take the batch as it is
        self.first_batch_factor = first_batch_factor
        self._quarters = 0  # 25 % milestones logged so far
        self._best_logged = math.nan

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self._started

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
        self._marks.append((self.elapsed_s, self.trials_done))
        best = self.estimated_ms
        if math.isfinite(best):
            self.history.append([self.trials_done, round(best, 4)])

    def search_began(self) -> None:
        """The search loop asked for its first batch: what came before (MetaSchedule's
        per-task set-up, ``PreTuning``) is one-off and no part of a trial's rate. Only the
        first call counts."""
        if len(self._marks) == 1 and self._marks[0][1] == 0 and not self._began:
            self._began = True
            self._marks[0] = (self.elapsed_s, 0)

    @property
    def recent_s_per_trial(self) -> float | None:
        """Seconds per trial over the recent batches, the first batch left out once there is
        a second (issue 46: a 64-trial search whose first batch took 12 minutes -- the search
        space and the first builds -- and later ones 2-3.5 had a rate averaged since the start,
        and an ETA 2.6-4.4x too long). None before a batch was measured."""
        last_s, last_n = self._marks[-1]
        if last_n <= 0:
            return None
        if len(self._marks) == 2 and self.first_batch_factor:
            # one batch: it carries the search's first-batch costs (the evolutionary search's
            # initial population, the runner's first processes), which this device's earlier
            # searches measured (issue 46: +29 % and +37 % at 25 % of the budget without)
            base_s = self._marks[0][0]
            return (last_s - base_s) / last_n / self.first_batch_factor if last_s > base_s else None
        window = max(RECENT_TRIALS, last_n // 4)
        first = 1 if len(self._marks) > 2 else 0
        base_s, base_n = self._marks[first]
        for mark_s, mark_n in self._marks[first:-1]:
            if last_n - mark_n >= window:
                base_s, base_n = mark_s, mark_n
        if last_n <= base_n or last_s <= base_s:
            return None
        return (last_s - base_s) / (last_n - base_n)

    @property
    def first_batch_ratio(self) -> float | None:
        """The first batch's seconds per trial over the later batches' (None before a second
        batch): how much the first batch's one-off costs weigh on this device."""
        if len(self._marks) < 3:
            return None
        (start_s, _), (first_s, first_n), (last_s, last_n) = (
            self._marks[0],
            self._marks[1],
            self._marks[-1],
        )
        if first_n <= 0 or last_n <= first_n or first_s <= start_s or last_s <= first_s:
            return None
        return ((first_s - start_s) / first_n) / ((last_s - first_s) / (last_n - first_n))

    @property
    def search_left_s(self) -> float | None:
        """Seconds of search left by the budget at the recent rate (None: no rate yet): the
        one figure every surface counts down from (the console's panel and device line, the
        CLI's progress line)."""
        rate = self.recent_s_per_trial
        return None if rate is None else max(0, self.budget - self.trials_done) * rate

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

    def milestones(self, done: bool = False) -> list[str]:
        """Lines for the operator's log since the last call: each 25 % of the budget, a best
        that improved by 2 % or more, the early stop and the end (start: the compiler's line)."""
        lines = []
        best = self.estimated_ms
        best_text = f"best {best:.3f} ms" if math.isfinite(best) else "no valid trial yet"
        quarter = min(3, self.trials_done * 4 // max(1, self.budget))  # 100 %: the end's line
        if not done and quarter > self._quarters:
            self._quarters = quarter
            lines.append(
                f"tuning {quarter * 25}%: {self.trials_done}/{self.budget} trials, {best_text}"
            )
        if math.isfinite(best) and not (best >= self._best_logged * 0.98):
            if math.isfinite(self._best_logged):  # the first best is no news
                lines.append(f"tuning: new best {best:.3f} ms at trial {self.trials_done}")
            self._best_logged = best
        if done:
            how = (
                f"early stop after {self.since_improvement} trials without a better one"
                if self.stopped_early
                else "done"
            )
            lines.append(
                f"tuning {how}: {self.trials_done}/{self.budget} trials in "
                f"{self.elapsed_s:.0f} s, {best_text}"
            )
        return lines

    def log_milestones(self, done: bool = False) -> None:
        for line in self.milestones(done):
            self._emit("log", level="info", msg=line)

    def event(self) -> TuningEvent:
        return {
            "trials_done": self.trials_done,
            "budget": self.budget,
            "best_ms": self.estimated_ms,
            "trials_before": self.trials_before,
            "elapsed_s": round(self.elapsed_s, 3),
            "started_at": round(self.started_at, 3),
            "early_stop": self.early_stop,
            "since_improvement": self.since_improvement,
            "s_per_trial": _rounded(self.recent_s_per_trial),
            "first_batch_ratio": _rounded(self.first_batch_ratio),
            "search_left_s": _rounded(self.search_left_s),
            "history": self.history[-HISTORY_POINTS:],
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


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


# --------------------------------------------------------------------------------------------
# The tuning database on disk


class TuningStore:
    """A MetaSchedule JSON database plus ``meta.json`` (trials so far, finished or not)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.workload_path = directory / "database_workload.json"
        self.record_path = directory / "database_tuning_record.json"
        self.meta_path = directory / "meta.json"

    def meta(self) -> TuningMeta:
        """The stored facts, or ``{}`` when absent, unreadable or the records are gone."""
        if not self.record_path.is_file() or self.record_path.stat().st_size == 0:
            return {}
        try:
            data = json.loads(self.meta_path.read_text())
        except (OSError, ValueError):
            return {}
        # written by write_meta alone, so a dict found there has its shape
        return cast(TuningMeta, data) if isinstance(data, dict) else {}

    def clear(self) -> None:
        """Forget the records and meta (a search that must start from nothing)."""
        for path in (self.workload_path, self.record_path, self.meta_path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def record_count(self) -> int:
        """Tuning records in the database (one JSON line each)."""
        try:
            with self.record_path.open("rb") as fh:
                return sum(1 for line in fh if line.strip())
        except OSError:
            return 0

    def write_meta(self, **facts: Unpack[TuningMeta]) -> None:
        """Atomic replace, so a kill mid-write leaves the previous meta intact."""
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.meta_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({**facts, "updated": time.time()}, indent=1, sort_keys=True))
        os.replace(tmp, self.meta_path)

    def open(self) -> JSONDatabase:
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
                f"tvm-ms: tuning database {self.dir} is unreadable ({last_line(exc)}); delete it"
            ) from exc


def plan_tuning(meta: TuningMeta, budget: int) -> tuple[int, int]:
    """(trials already in the database, trials still to run) for a requested ``budget``.

    A finished search is reused as is when it ran at least ``budget`` trials or stopped early
    (more trials would not have helped); otherwise the search resumes for the remainder.
    """
    before = int(meta.get("trials", 0) or 0)
    finished = meta.get("early_stopped") or meta.get("exhausted") or before >= budget
    if meta.get("complete") and finished:
        return before, 0
    return before, max(budget - before, 0)


def provenance(meta: TuningMeta, reused: bool) -> TuningRecord:
    """Where a trial's tuning came from, as stored in the result's ``extra["tuning"]``."""
    return {
        "reused": reused,
        "run_id": meta.get("run_id"),
        "trials": meta.get("trials"),
        "best_ms": meta.get("best_ms"),
        "tune_s": meta.get("tune_s"),
        "early_stopped": meta.get("early_stopped"),
        "updated": meta.get("updated"),  # when it was tuned
    }


def provenance_line(meta: TuningMeta) -> str:
    """What the CLI and console show: "tuning reused from run X, 64 trials, best 105.4 ms"."""
    run = meta.get("run_id")
    when = meta.get("updated")
    if run:
        origin = f"run {run}"
    elif isinstance(when, int | float):
        origin = f"a search of {time.strftime('%Y-%m-%d %H:%M', time.localtime(when))}"
    else:
        origin = "an earlier search"
    best = meta.get("best_ms")
    best_text = f", best {best:.1f} ms" if isinstance(best, int | float) else ""
    stop = ", early-stopped" if meta.get("early_stopped") else ""
    return f"tuning reused from {origin}, {meta.get('trials', 0)} trials{best_text}{stop}"


def build_candidate(mod: IRModule, target: Target, params: object) -> Module:
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
    memo: dict[tuple[str, str | None], ModuleType | None] = {}

    def getmodule(obj: object, _filename: str | None = None) -> ModuleType | None:
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
def quiet_meta_schedule_console() -> Iterator[None]:
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


def _run_seconds(result: RunnerResult) -> float | None:
    """Median of a MetaSchedule runner result's repeats, ``None`` for a failed candidate."""
    if result.error_msg is not None or not result.run_secs:
        return None
    secs = [float(getattr(s, "value", s)) for s in result.run_secs]
    return statistics.median(secs)


def progress_callback(
    progress: TuningProgress, checkpoint: Callable[[bool], None]
) -> MeasureCallback:
    """A MetaSchedule measure callback that feeds ``progress`` after every measured batch."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    @derived_object
    class ProgressCallback(PyMeasureCallback):
        def apply(
            self,
            task_scheduler: TaskScheduler,
            task_id: int,
            measure_candidates: list[MeasureCandidate],
            builder_results: list[BuilderResult],
            runner_results: list[RunnerResult],
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
            progress.log_milestones()

    return ProgressCallback()


def early_stop_scheduler(progress: TuningProgress) -> TaskScheduler:
    """A MetaSchedule task scheduler that can stop the whole search early (see module doc)."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.task_scheduler import PyTaskScheduler

    @derived_object
    class EarlyStopScheduler(PyTaskScheduler):
        def __init__(self) -> None:
            super().__init__()
            self.picked: set[int] = set()

        def next_task_id(self) -> int:
            progress.search_began()  # the first call: the set-up is over
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
