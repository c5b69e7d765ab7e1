"""What a console that attaches mid-run needs at once: the run's last state, and the ETA's inputs.

The workstation follows the agent's event log from the byte offset it last stored, so a console
re-opened during a trial sees only the events after that offset: not the ``trial_started`` of the
trial in flight, not the last ``tuning`` event (MetaSchedule may send the next one a minute
later), and none of the earlier trials' durations. So the agent keeps the last of each
(``LastState.observe``, fed every event it writes) and, while a trial runs, writes it again as
one ``state`` event at most every ``SNAPSHOT_S`` seconds, right after an event it writes anyway
(``LastState.due``; a worker sends a CPU sample every second through every phase, and a serving
trial its progress, so no thread is needed -- a thread in the trial's process would make its
workers' fork unsafe): whatever offset a follower resumes from, the replayed tail or the next
live seconds carry a snapshot, and the console draws the trial, its phase, the tuning view, the
meters, a serving trial's progress and the ETA from it.
The snapshot is not stored (the writer ignores the type) and is kept small (no per-core list, a
thinned best-so-far curve): under 1 KB a second while a trial runs.

ETA inputs (``EtaBook``): a trial's remaining time is predicted from what it *is* -- its compiler,
and for ``tvm-ms`` its tuning budget -- and this run's own evidence: the mean non-tuning seconds
of finished trials of the same compiler (else of any compiler, else the trial's measurement cap;
a serving trial's evidence is kept apart from its compiler's timed trials, and its cap is the
serving's planned seconds: ``eta_item``)
and the seconds per tuning trial seen so far. The agent knows every trial of the run; the console
knows only counts, so the agent sends the sums (``eta`` in ``trial_started`` and ``state``).
A run's first trial of a compiler has no such evidence; the device's earlier runs do: the agent
keeps each compiler's recent non-tuning and after-search seconds in its cache folder
(``EVIDENCE_FILE``) and uses them until this run has its own (issue 46: a fresh run's first
64-trial search ended 25 s before its trial did -- the tuned build and three workers' timed
loops -- and the device line had counted none of it: 29-39 % short from half-way on). Without
either, the after-search part is at least the trial's measurement cap.
Standard library only: this module is shipped to devices. The tuning budget is the compiler's
own declaration (``Compiler.tuning_budget_option``), read through the registry: compiler modules
import their libraries inside methods, so that import stays standard library too.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ngb.core.base.errors import UnknownNameError
from ngb.core.compilers import compiler_class
from ngb.core.records import events
from ngb.core.records.types import TrialSpec
from ngb.core.statistics.eta_evidence import (
    EVIDENCE_FILE,
    EVIDENCE_KEPT,
    load_evidence,
    load_first_ratios,
)

#: the event type of a snapshot (not in ``events.ALL_TYPES``: readers that do not know it skip it)
STATE = "state"
#: least seconds between snapshots while a trial runs. Under the 1 s period of the CPU samples
#: that carry them, so every sample brings one: at 1.5 s a snapshot came at the first sample after
#: 1.5 s, up to 2.5 s apart with the sampler's jitter, and a console re-attached in that gap
#: waited past the 2 s it is promised.
SNAPSHOT_S = 0.9
#: best-so-far points a snapshot keeps of the tuning curve
SNAPSHOT_HISTORY = 40
#: tasks a snapshot keeps of a tuning event (the console's table shows four)
SNAPSHOT_TASKS = 8
#: the event fields a snapshot keeps of a ``cpu`` event (not the per-core list)
_CPU_FIELDS = ("percent", "proc_percent", "others_percent", "mem_percent", "mem_used_mb",
               "mem_total_mb", "worker")  # fmt: skip


#: what the evidence of a serving trial is kept under, beside its compiler's name: a serving
#: (a run or a peak search) is no timed trial, so the two never stand for each other
SERVED_SUFFIX = " (serving)"


def tuning_budget(compiler: str, options: Mapping[str, object]) -> int:
    """Tuning trials a trial may run, as its compiler declares (``Compiler.tuning_budget``: the
    option that bounds its search, else that option's default); 0 for a compiler that does not
    search, or one this side does not know (the trial itself then fails, not its ETA)."""
    try:
        cls = compiler_class(compiler)
    except (UnknownNameError, ImportError):
        return 0
    return cls.tuning_budget(options)


@dataclass
class EtaBook:
    """This run's evidence on how long trials take, and what the remaining ones are."""

    other_s: dict[str, list[float]] = field(default_factory=dict)  # compiler -> non-tuning s
    # compiler -> seconds from the end of a search to the trial's end (each worker's build and
    # timed loops): the part of a tuning trial still to come once its search is over
    post_s: dict[str, list[float]] = field(default_factory=dict)
    tune_s: float = 0.0  # seconds of tuning seen in finished trials
    tune_trials: int = 0  # tuning trials those ran
    # the same two per compiler from this device's earlier runs (``load_evidence``): used only
    # until this run has its own for that compiler
    earlier_other_s: dict[str, list[float]] = field(default_factory=dict)
    earlier_post_s: dict[str, list[float]] = field(default_factory=dict)
    # compiler -> a search's first-batch seconds per trial over its later batches'
    # (``TuningProgress.first_batch_ratio``), this run's after the earlier runs'
    first_ratio: dict[str, list[float]] = field(default_factory=dict)

    def finished(
        self,
        compiler: str,
        seconds: float,
        tune_s: float | None,
        trials: int,
        post_s: float | None = None,
        first_ratio: float | None = None,
    ) -> None:
        """A trial of ``compiler`` took ``seconds``, ``tune_s`` of them tuning ``trials``, and
        ``post_s`` after its search ended (None: not seen); its search's first batch ran
        ``first_ratio`` times slower per trial than the later ones (None: not seen)."""
        if first_ratio is not None and math.isfinite(first_ratio) and first_ratio > 0:
            kept = [*self.first_ratio.get(compiler, []), round(first_ratio, 3)]
            self.first_ratio[compiler] = kept[-EVIDENCE_KEPT:]
        tuning = max(0.0, tune_s or 0.0) if trials else 0.0
        self.other_s.setdefault(compiler, []).append(max(0.0, seconds - tuning))
        if post_s is not None:
            self.post_s.setdefault(compiler, []).append(max(0.0, post_s))
        if trials > 0 and tuning > 0:
            self.tune_s += tuning
            self.tune_trials += trials

    def post(self, compiler: str, cap_s: float | None = None) -> float | None:
        """Predicted seconds after a ``compiler`` trial's search: this run's, else this device's
        earlier runs', else at least the measurement cap ``cap_s`` (None: no cap given)."""
        same = self.post_s.get(compiler) or self.earlier_post_s.get(compiler)
        return _mean(same) if same else cap_s

    def other(self, compiler: str, cap_s: float) -> float:
        """Predicted non-tuning seconds of a trial of ``compiler``."""
        same = self.other_s.get(compiler)
        if same:
            return _mean(same)
        served = compiler.endswith(SERVED_SUFFIX)  # a serving never stands for a timed trial
        every = [
            s
            for name, values in self.other_s.items()
            if name.endswith(SERVED_SUFFIX) == served
            for s in values
        ]
        if every:
            return _mean(every)
        earlier = self.earlier_other_s.get(compiler)
        return _mean(earlier) if earlier else cap_s

    def evidence(self) -> dict[str, dict[str, list[float]]]:
        """What the next run on this device starts from: this run's durations after the
        earlier runs', the last ``EVIDENCE_KEPT`` per compiler."""
        kept: dict[str, dict[str, list[float]]] = {"first_ratio": dict(self.first_ratio)}
        for name, mine, earlier in (
            ("other_s", self.other_s, self.earlier_other_s),
            ("post_s", self.post_s, self.earlier_post_s),
        ):
            kept[name] = {
                c: [round(v, 2) for v in ([*earlier.get(c, []), *mine.get(c, [])])][-EVIDENCE_KEPT:]
                for c in {*mine, *earlier}
            }
        return kept

    def inputs(
        self, current: tuple[str, int, float], remaining: Iterable[tuple[str, int, float]]
    ) -> dict[str, object]:
        """The ``eta`` fields: for the trial in flight and the ones after it, each given as
        (compiler, tuning budget, measurement cap in seconds)."""
        rest = list(remaining)
        return {
            "current_other_s": round(self.other(current[0], current[2]), 2),
            "current_post_s": _rounded(self.post(current[0], current[2])),
            "current_tune_budget": current[1],
            "rest_other_s": round(sum(self.other(c, cap) for c, _, cap in rest), 2),
            "rest_tune_budget": sum(b for _, b, _ in rest),
            "s_per_tune_trial": (
                round(self.tune_s / self.tune_trials, 4) if self.tune_trials else None
            ),
            "rest_trials": len(rest),
        }


def eta_name(compiler: str, served: bool) -> str:
    """The name a trial's evidence is kept under: its compiler's, a serving trial's apart."""
    return compiler + SERVED_SUFFIX if served else compiler


def eta_item(spec: TrialSpec) -> tuple[str, int, float]:
    """What the ETA weighs a trial by: its compiler (a serving trial's apart: ``eta_name``),
    tuning budget and measurement cap -- for a serving trial the serving's planned seconds
    (``ServeSettings.planned_s``: the run, or the peak search's probes), not ``max_measure_s``,
    which it never uses."""
    budget = tuning_budget(spec.compiler, spec.compiler_options)
    if spec.serve is not None:
        return eta_name(spec.compiler, True), budget, float(spec.serve.planned_s())
    return spec.compiler, budget, float(spec.measure.max_measure_s)


def book_result(
    book: EtaBook,
    record: Mapping[str, object],
    search_ended: float | None = None,
    first_ratio: float | None = None,
) -> None:
    """Add a finished trial (a checkpoint record) to the ETA's evidence; ``search_ended``: the
    time of its last tuning event, where one was seen, and ``first_ratio`` that event's
    ``first_batch_ratio``."""
    start, end = record.get("started_at"), record.get("finished_at")
    spec, extra = record.get("spec"), record.get("extra")
    if not isinstance(start, int | float) or not isinstance(end, int | float):
        return
    compiler = str(spec.get("compiler")) if isinstance(spec, Mapping) else "?"
    compiler = eta_name(compiler, isinstance(spec, Mapping) and spec.get("serve") is not None)
    trials = extra.get("trials_run") if isinstance(extra, Mapping) else None
    tune_s = record.get("tune_s")
    book.finished(
        compiler,
        float(end) - float(start),
        float(tune_s) if isinstance(tune_s, int | float) else None,
        int(trials) if isinstance(trials, int) else 0,
        float(end) - search_ended if search_ended is not None else None,
        first_ratio,
    )


def eta_book(records: Iterable[Mapping[str, object]], cache_dir: Path | None = None) -> EtaBook:
    """The evidence so far: the trials a resumed run already has in its checkpoint, and the
    device's earlier runs (``cache_dir``'s ``EVIDENCE_FILE``)."""
    book = EtaBook()
    if cache_dir is not None:
        book.earlier_other_s, book.earlier_post_s = load_evidence(cache_dir / EVIDENCE_FILE)
        book.first_ratio = load_first_ratios(cache_dir / EVIDENCE_FILE)
    for record in records:
        book_result(book, record)
    return book


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _thin(points: object, keep: int) -> list[object]:
    if not isinstance(points, list) or len(points) <= keep:
        return points if isinstance(points, list) else []
    step = len(points) / keep
    thinned = [points[int(i * step)] for i in range(keep - 1)]
    return [*thinned, points[-1]]


class LastState:
    """The last trial start, phase, tuning event, CPU sample and serving progress the agent
    wrote (thread-safe: the event writer is called from the trial's reader thread, sampler
    threads and a serving's watching thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.trial: dict[str, object] | None = None
        self.phase: str | None = None
        self.tuning: dict[str, object] | None = None
        self.cpu: dict[str, object] | None = None
        self.serving: dict[str, object] | None = None  # a serving trial's last progress
        self.eta: dict[str, object] | None = None
        self._last_snapshot = 0.0
        self._snapshot_lock = threading.Lock()  # not ``_lock``: ``snapshot`` takes that one

    def due(self, now: float) -> dict[str, object] | None:
        """A ``state`` event when one is due (a trial in flight, ``SNAPSHOT_S`` since the last)."""
        # the check and the stamp under one lock: the reader and sampler threads both call this,
        # and two threads seeing it due at once wrote two snapshots a few ms apart
        with self._snapshot_lock:
            if now - self._last_snapshot < SNAPSHOT_S:
                return None
            snap = self.snapshot()
            if snap is None:
                return None
            self._last_snapshot = now
        return events.make_event(STATE, **snap)

    def observe(self, event: Mapping[str, object]) -> None:
        kind = event.get("type")
        with self._lock:
            if kind == events.TRIAL_STARTED:
                self.trial = {k: v for k, v in event.items() if k not in ("v", "type", "eta")}
                eta = event.get("eta")
                self.eta = dict(eta) if isinstance(eta, Mapping) else None
                self.phase, self.tuning, self.cpu, self.serving = None, None, None, None
            elif kind in (events.TRIAL_DONE, events.TRIAL_FAILED, events.RUN_DONE):
                self.trial = self.tuning = self.cpu = self.phase = self.serving = None
            elif kind == events.PHASE:
                self.phase = str(event.get("phase") or "")
            elif kind == events.TUNING:
                self.tuning = {k: v for k, v in event.items() if k not in ("v", "type")}
            elif kind == events.CPU:
                self.cpu = {k: event[k] for k in ("ts", *_CPU_FIELDS) if k in event}
            elif kind == events.SERVING:
                self.serving = {k: v for k, v in event.items() if k not in ("v", "type")}

    def first_batch_ratio(self, key: str) -> float | None:
        """Trial ``key``'s search's first-batch ratio, as its last tuning event said it."""
        with self._lock:
            tuning, trial = self.tuning, self.trial
            if tuning is None or trial is None or trial.get("key") != key:
                return None
            ratio = tuning.get("first_batch_ratio")
            return float(ratio) if isinstance(ratio, int | float) else None

    def search_ended(self, key: str) -> float | None:
        """When trial ``key``'s last tuning event was written (None: it did not tune)."""
        with self._lock:
            tuning, trial = self.tuning, self.trial
            if tuning is None or trial is None or trial.get("key") != key:
                return None
            ts = tuning.get("ts")
            return float(ts) if isinstance(ts, int | float) and tuning.get("budget") else None

    def snapshot(self) -> dict[str, object] | None:
        """The ``state`` event's fields, or None between trials (nothing to replay then)."""
        with self._lock:
            if self.trial is None:
                return None
            tuning = None
            if self.tuning is not None:
                tasks = self.tuning.get("tasks")
                tuning = {
                    **self.tuning,
                    "history": _thin(self.tuning.get("history"), SNAPSHOT_HISTORY),
                    "tasks": tasks[:SNAPSHOT_TASKS] if isinstance(tasks, list) else [],
                }
            return {
                "trial": dict(self.trial),
                "phase": self.phase,
                "tuning": tuning,
                "cpu": dict(self.cpu) if self.cpu else None,
                "serving": dict(self.serving) if self.serving else None,
                "eta": dict(self.eta) if self.eta else None,
            }
