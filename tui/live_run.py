"""Per-device live state of runs, folded from the orchestrator's ``RunEvent`` stream.

Pure Python, no Textual: the Run screen feeds every event into ``RunModel.apply`` (cheap, O(1) per
event) and redraws only the devices it reports as changed, at most ~10 times a second. Keeping the
fold apart from the widgets is what lets 100 devices x 10 events/s stay smooth, and makes the
logic testable without a terminal.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ngb.core.records.trial_extra import from_json

if TYPE_CHECKING:
    from ngb.sweeps.run.events import RunEvent

#: CPU samples kept per device for the sparkline (about a minute at one sample per second)
CPU_HISTORY = 60
#: log lines kept in memory for the log tail (older ones are dropped; the store keeps errors)
LOG_HISTORY = 2000

#: connection messages not repeated in the log (the agent logs the same moment itself)
QUIET_MESSAGES = frozenset({"paused", "resumed"})
TERMINAL_STATES = frozenset({"finished", "failed", "cancelled", "lost", "detached"})
#: what the meters say in a trial phase the device does not sample (only ``measure`` is)
PHASE_WORDS = {
    "build": "building",
    "optimise": "optimising",
    "compile": "compiling",
    "first_call": "first call",
    "warmup": "warm-up",
    "measure": "measure: no sample yet",
}


@dataclass
class TuningState:
    """Latest TVM MetaSchedule progress of the trial being tuned on one device."""

    key: str = ""
    trials_done: int = 0
    budget: int = 0
    best_ms: float | None = None
    # the agent's per-task JSON objects ({name, trials, best_ms}), shown as they come
    tasks: list[Mapping[str, object]] = field(default_factory=list)
    elapsed_s: float = 0.0  # seconds of search when the event was sent
    seen_at: float = 0.0  # the event's time (the agent's clock)
    early_stop: int | None = None
    since_improvement: int = 0
    history: list[tuple[float, float]] = field(default_factory=list)  # (trials, best ms)
    reused: str = ""  # "tuning reused from run X, 64 trials, best 105.4 ms"
    recent_s_per_trial: float | None = None  # the agent's recent rate (newer agents send it)
    sent_left_s: float | None = None  # the agent's search seconds left when it sent the event

    @property
    def seconds_per_trial(self) -> float | None:
        """This search's own rate: the agent's recent one (``TuningProgress``), else averaged
        since the start (an older agent); None until a batch was measured."""
        if self.recent_s_per_trial:
            return self.recent_s_per_trial
        return self.elapsed_s / self.trials_done if self.trials_done and self.elapsed_s else None

    def search_left_s(self, now: float) -> float | None:
        """Seconds of search left by the budget, counting down between events (None: no rate
        yet)."""
        rate = self.seconds_per_trial
        if not rate:
            return None
        return max(
            0.0, max(0, self.budget - self.trials_done) * rate - max(0.0, now - self.seen_at)
        )


def tuning_state(e: Mapping[str, object], ts: float) -> TuningState:
    """A ``tuning`` event (or a snapshot's copy of one) as the view keeps it."""
    tasks = e.get("tasks")
    history = e.get("history")
    points = [
        (float(p[0]), float(p[1]))
        for p in (history if isinstance(history, list) else [])
        if isinstance(p, list | tuple) and len(p) == 2 and _num(p[0]) is not None
        and _num(p[1]) is not None
    ]  # fmt: skip
    early = _num(e.get("early_stop"))
    return TuningState(
        key=str(e.get("key") or ""),
        trials_done=_count(e.get("trials_done")),
        budget=_count(e.get("budget")),
        best_ms=_num(e.get("best_ms")),
        tasks=[t for t in tasks if isinstance(t, Mapping)] if isinstance(tasks, list) else [],
        elapsed_s=_num(e.get("elapsed_s")) or 0.0,
        seen_at=_num(e.get("ts")) or ts,
        early_stop=int(early) if early else None,
        since_improvement=_count(e.get("since_improvement")),
        history=points,
        reused=str(e.get("provenance") or "") if e.get("reused") else "",
        recent_s_per_trial=_num(e.get("s_per_trial")),
        sent_left_s=_num(e.get("search_left_s")),
    )


@dataclass
class DeviceState:
    """What the operator sees for one device of one run."""

    run_id: str
    device: str
    connection: str = "connecting"
    total: int = 0
    done: int = 0  # finished trials, ok or failed (skipped ones included: they are done)
    failed: int = 0
    skipped: int = 0
    current: str = ""  # label of the trial in flight
    phase: str = ""
    rep: int = 0
    reps: int = 0
    cpu: float | None = None  # latest system-wide percent (0..100) from the device itself
    proc_cpu: float | None = None  # the benchmark process (100 per busy core)
    cpu_history: deque[float] = field(default_factory=lambda: deque(maxlen=CPU_HISTORY))
    per_cpu: list[float] = field(default_factory=list)  # 0..100 per logical core
    mem_percent: float | None = None
    mem_used_mb: float | None = None
    mem_total_mb: float | None = None
    gpu_util: float | None = None  # only when the agent reports a GPU
    gpu_mem_mb: float | None = None
    gpu_power_w: float | None = None
    ci_relative: float | None = None  # the trial's interval so far (half-width / mean)
    ci_target: float | None = None
    ci_fixed: bool = False  # a fixed repetition count: the target does not end the trial
    tuning: TuningState | None = None
    # a serving trial's last progress (``ngb.core.records.events.SERVING``: offered and achieved
    # QPS, the p99 so far, a peak search's probe), as the agent sent it; live only, never stored
    serving: Mapping[str, object] | None = None
    # the agent's ETA inputs for the trial in flight (``ngb.core.trial.live_state.EtaBook.inputs``)
    eta: Mapping[str, object] | None = None
    message: str = ""  # last one-line connection message (errors, reconnects)
    # a scheduler's queue state ("slurm: RUNNING on n1@gpu, 1:59:10 left ...", from
    # ``ngb.sweeps.run.device_queue``) and when it came: kept while trials replace ``message``
    queue: str = ""
    queue_at: float = 0.0
    started_at: float = field(default_factory=time.time)
    # The ETA's evidence: how long this run's trials took on this device (the agent's own clock,
    # so replayed events after a re-attach count with their real durations, not the replay's).
    trial_started_at: float | None = None
    trial_seconds: list[float] = field(default_factory=list)
    trial_seen_at: float | None = None  # the workstation's clock at that start (for "now")
    trial_key: str = ""
    finished: bool = False
    cancelled: bool = False  # the agent said its run ended by a cancel

    @property
    def finished_ok(self) -> int:
        return self.done - self.failed

    @property
    def idle(self) -> bool:
        """No trial in flight: the meters show "idle" rather than the last sample."""
        return self.finished or not self.current

    @property
    def unsampled_phase(self) -> str:
        """The phase to name on the meters while the device sends no samples ("" if sampled)."""
        if self.idle or self.cpu is not None:
            return ""
        if self.serving is not None and not self.phase:  # a serving trial sends no phases
            return "serving"
        return PHASE_WORDS.get(self.phase, self.phase or "starting")

    @property
    def has_gpu(self) -> bool:
        return self.gpu_util is not None or self.gpu_mem_mb is not None

    def reset_meters(self) -> None:
        self.cpu = self.proc_cpu = None
        self.per_cpu = []
        self.gpu_util = self.gpu_power_w = None
        self.ci_relative = None


@dataclass
class LogLine:
    ts: float
    device: str
    text: str
    level: str = "info"

    def render(self) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(self.ts))
        return f"{stamp} {self.device:>12}  {self.text}"


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _newer(event: Mapping[str, object], than: Mapping[str, object] | None) -> bool:
    """``event`` was sent after ``than`` (the agent's clock; None: nothing yet)."""
    return than is None or (_num(event.get("ts")) or 0.0) > (_num(than.get("ts")) or 0.0)


def _count(value: object, default: int = 0) -> int:
    """A count from an agent event (a JSON number; text from older agents): ``default`` when
    missing, null or 0; anything else that is not a number is an error, as ``int()`` says."""
    if not value:
        return default
    if isinstance(value, int | float | str):
        return int(value)
    raise TypeError(f"not a count: {value!r}")


class RunModel:
    """Folds RunEvents into ``DeviceState`` per (run, device) and a bounded log."""

    def __init__(self) -> None:
        self.devices: dict[tuple[str, str], DeviceState] = {}
        self.log: deque[LogLine] = deque(maxlen=LOG_HISTORY)
        self.run_states: dict[str, str] = {}
        self.events_seen = 0
        self.log_total = 0  # lines ever logged: a view appends the ones it has not shown yet

    def add_log(self, line: LogLine) -> None:
        self.log.append(line)
        self.log_total += 1

    def log_since(self, seen: int) -> list[LogLine]:
        """Lines logged after the first ``seen`` (at most what is still held)."""
        missing = min(self.log_total - seen, len(self.log))
        return list(self.log)[-missing:] if missing > 0 else []

    def device(self, run_id: str, device: str, ts: float | None = None) -> DeviceState:
        key = (run_id, device)
        state = self.devices.get(key)
        if state is None:
            state = self.devices[key] = DeviceState(run_id=run_id, device=device)
            if ts is not None:
                state.started_at = ts  # the ETA counts from the first word of the device
        return state

    def forget(self, run_id: str) -> None:
        """Drop a run no device took (refused: it is not stored, so not shown either)."""
        for key in [k for k in self.devices if k[0] == run_id]:
            del self.devices[key]
        self.run_states.pop(run_id, None)

    def devices_of(self, run_id: str) -> list[DeviceState]:
        return [s for (rid, _), s in self.devices.items() if rid == run_id]

    def derived_state(self, run_id: str) -> str:
        """The end state of a run from its devices' (cancelled wins, then failed/lost)."""
        devices = self.devices_of(run_id)
        states = {s.connection for s in devices}
        if "cancelled" in states or any(s.cancelled for s in devices):
            return "cancelled"
        if states & {"failed", "lost"}:
            return "failed"
        return "finished"

    def run_seconds(self, run_id: str, now: float | None = None) -> float:
        """How long the run has been going, from its first device's first word."""
        starts = [s.started_at for s in self.devices_of(run_id)]
        return ((now or time.time()) - min(starts)) if starts else 0.0

    def apply(self, ev: RunEvent) -> tuple[str, str] | None:
        """Fold one RunEvent; returns the (run_id, device) whose display changed, if any."""
        self.events_seen += 1
        run_id, device = ev.run_id, ev.device or ""
        ts = ev.ts or time.time()
        if ev.kind == "store":  # waiting for the results database: news, but no device's
            self.add_log(LogLine(ts, "store", ev.message))
            return None
        if ev.kind == "run":
            self.run_states[run_id] = ev.state or ""
            if ev.message:
                self.add_log(LogLine(ts, device or "run", ev.message))
            return None
        state = self.device(run_id, device, ts)
        if ev.kind == "connection":
            state.connection = ev.state or state.connection
            # "paused"/"resumed" confirm a request; the agent logs the pause itself when it holds.
            if ev.message and ev.message not in QUIET_MESSAGES:
                state.message = ev.message
                if ev.message.startswith("slurm: "):  # device_queue.QUEUE_PREFIX
                    state.queue, state.queue_at = ev.message, ts
                level = "error" if ev.state in ("failed", "lost") else "info"
                self.add_log(LogLine(ts, device, f"[{ev.state}] {ev.message}", level))
            if ev.state in TERMINAL_STATES:
                state.finished = True
                state.current, state.phase = "", ""
                state.serving = None
                state.reset_meters()
            else:
                state.finished = False
            self._apply_counts(state, ev)
            return run_id, device
        if ev.kind == "ingest":  # "N results stored" after every trial: bookkeeping, not news
            return None
        if ev.kind == "agent" and ev.event:
            self._apply_agent(state, ev.event, ts)
            self._apply_counts(state, ev)
            return run_id, device
        return None

    @staticmethod
    def _apply_counts(state: DeviceState, ev: RunEvent) -> None:
        """The orchestrator's own counts (when it sends them) win over our tally."""
        if ev.total:
            state.total = ev.total
        if ev.done is not None:
            state.done = ev.done
        if ev.failed is not None:
            state.failed = ev.failed

    def _apply_agent(self, s: DeviceState, e: Mapping[str, object], ts: float) -> None:
        """One agent event (``ngb.core.records.events``; JSON, so each field is checked as it is
        read)."""
        kind = e.get("type")
        if kind == "cpu":
            self._apply_sample(s, e)
        elif kind == "progress":
            s.rep, s.reps = _count(e.get("rep")), _count(e.get("reps"))
            s.ci_relative = _num(e.get("ci_relative"))
            s.ci_target = _num(e.get("ci_target")) or s.ci_target
            s.ci_fixed = e.get("fixed") is True
        elif kind == "phase":
            s.phase = str(e.get("phase") or "")
            if s.phase != "measure":
                # The device samples only while a worker measures: a build or warm-up has no
                # samples, and the last measure's (often 100 %) must not stand for it.
                ci = s.ci_relative  # the trial's interval so far spans its workers: keep it
                s.reset_meters()
                s.ci_relative = ci
        elif kind == "tuning":
            s.tuning = tuning_state(e, ts)
        elif kind == "serving":
            if not s.trial_key or str(e.get("key") or "") == s.trial_key:
                s.serving = e
        elif kind == "state":
            self._apply_state(s, e, ts)
        elif kind == "trial_started":
            self._start_trial(s, e, ts)
            s.phase, s.rep, s.reps = "", 0, 0
            s.tuning = s.serving = None
        elif kind == "trial_done":
            self._timed(s, e)
            s.done += 1
            result = e.get("result")
            if isinstance(result, Mapping):
                self.add_log(LogLine(ts, s.device, trial_line(s.current, result)))
            s.current, s.phase = "", ""
            s.tuning = s.serving = None
            s.reset_meters()
        elif kind == "trial_failed":
            self._timed(s, e)
            s.done += 1
            s.failed += 1
            label = s.current or str(e.get("key") or "")
            s.current, s.phase = "", ""
            s.serving = None
            s.reset_meters()
            kind_ = e.get("error_kind") or "error"
            self.add_log(
                LogLine(ts, s.device, f"FAILED {label} ({kind_}): {e.get('error')}", "error")
            )
        elif kind == "run_started":
            s.total = _count(e.get("total"), s.total)
            s.skipped = _count(e.get("skipped"))
            s.done = max(s.done, s.skipped)
            s.started_at = ts
        elif kind == "run_done":
            s.finished = True
            s.current, s.phase = "", ""
            s.serving = None
            s.reset_meters()
            s.cancelled = bool(e.get("cancelled"))
            note = " (cancelled)" if s.cancelled else ""
            self.add_log(
                LogLine(
                    ts,
                    s.device,
                    f"run done: ok={e.get('ok')} "
                    f"failed={e.get('failed')} skipped={e.get('skipped')}{note}",
                )
            )
        elif kind == "log" and e.get("level") != "debug":  # debug: the agent's log file only
            self.add_log(
                LogLine(ts, s.device, str(e.get("msg") or ""), str(e.get("level") or "info"))
            )

    @staticmethod
    def _start_trial(s: DeviceState, e: Mapping[str, object], ts: float) -> None:
        s.trial_started_at, s.trial_seen_at = _num(e.get("ts")), ts
        s.trial_key = str(e.get("key") or "")
        s.current = str(e.get("label") or e.get("key") or "")
        eta = e.get("eta")
        s.eta = eta if isinstance(eta, Mapping) else None
        if e.get("total"):
            s.total = max(s.total, _count(e["total"]))

    def _apply_state(self, s: DeviceState, e: Mapping[str, object], ts: float) -> None:
        """The agent's periodic snapshot (``ngb.core.trial.live_state``): after a re-attach it
        brings the trial in flight, its phase, the tuning view, the meters, a serving trial's
        progress and the ETA at once."""
        trial = e.get("trial")
        if not isinstance(trial, Mapping):
            return
        if str(trial.get("key") or "") != s.trial_key or not s.current:
            self._start_trial(s, {**trial, "eta": e.get("eta")}, _num(trial.get("ts")) or ts)
            s.serving = None  # another trial's, if any
        elif s.eta is None and isinstance(e.get("eta"), Mapping):
            s.eta = e.get("eta")  # type: ignore[assignment]
        s.finished = False
        phase = e.get("phase")
        if phase and not s.phase:
            s.phase = str(phase)
        tuning = e.get("tuning")
        if isinstance(tuning, Mapping):
            fresh = tuning_state(tuning, ts)
            if s.tuning is None or fresh.trials_done >= s.tuning.trials_done:
                s.tuning = fresh
        cpu = e.get("cpu")
        if isinstance(cpu, Mapping) and s.cpu is None:
            self._apply_sample(s, cpu)
        serving = e.get("serving")
        if isinstance(serving, Mapping) and _newer(serving, s.serving):
            s.serving = serving

    @staticmethod
    def _timed(s: DeviceState, e: Mapping[str, object]) -> None:
        """Record the ended trial's duration (only when its start was seen)."""
        end = _num(e.get("ts"))
        start = s.trial_started_at if s.trial_key == str(e.get("key") or "") else None
        if start is not None and end is not None and end >= start:
            s.trial_seconds.append(end - start)
        s.trial_started_at = None

    @staticmethod
    def _apply_sample(s: DeviceState, e: Mapping[str, object]) -> None:
        """A ``cpu`` event: system and own CPU, per core, memory, and GPU where reported."""
        pct = _num(e.get("percent"))
        if pct is not None:
            s.cpu = pct
            s.cpu_history.append(pct)
        s.proc_cpu = _num(e.get("proc_percent")) if "proc_percent" in e else s.proc_cpu
        cores = e.get("per_cpu")
        if isinstance(cores, list):
            s.per_cpu = [v for v in (_num(c) for c in cores) if v is not None]
        for attr, keys in (
            ("mem_percent", ("mem_percent",)),
            ("mem_used_mb", ("mem_used_mb",)),
            ("mem_total_mb", ("mem_total_mb",)),
            ("gpu_util", ("gpu_util_percent", "gpu_percent", "gpu_util")),
            ("gpu_mem_mb", ("gpu_mem_used_mb", "gpu_mem_mb")),
            ("gpu_power_w", ("gpu_power_w",)),
        ):
            for key in keys:
                value = _num(e.get(key))
                if value is not None:
                    setattr(s, attr, value)
                    break


def trial_line(label: str, result: Mapping[str, object]) -> str:
    """The log's line for a finished trial: what it was, its throughput with the interval, the
    verdict, and where the time went (tuning apart from measuring). A verdict other than VALID
    and "disturbed" lead the line (``INVALID, disturbed: done ...``): the log tail cuts long
    lines at its right edge, where the flag used to stand and was lost at 80 columns."""
    from ngb.sweeps.report import derived

    spec = result.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    what = label or f"{spec.get('model')} {spec.get('compiler')} b{spec.get('batch')}"
    thr = result.get("throughput")
    mean = _num(thr.get("mean")) if isinstance(thr, Mapping) else None
    # the stored columns derived.throughput reads: the same number and interval as the reports
    row = {
        "throughput_mean": mean,
        "throughput_ci_half": _num(result.get("ci_half_width")),
        "extra": result.get("extra"),
        "key": result.get("key"),
    }
    rate = f"{derived.throughput(row).number()} samples/s" if mean is not None else "no rate"
    verdict = str(result.get("verdict") or "-")
    flags = [verdict] if verdict not in ("VALID", "-") else []  # core.stopping.VALID
    if result.get("disturbed"):
        flags.append("disturbed")
    parts = []
    tune = _num(result.get("tune_s"))
    if tune:
        parts.append(f"tune {tune:.0f} s")
    extra = from_json(result.get("extra"))
    measure, workers = extra.get("measure"), extra.get("workers")
    if isinstance(measure, Mapping) and isinstance(workers, list):
        timed = sum(_num(w.get("measure_s")) or 0.0 for w in workers if isinstance(w, Mapping))
        parts.append(f"measure {timed + (_num(measure.get('warmup_s')) or 0.0):.1f} s")
    tail = f" ({', '.join(parts)})" if parts else ""
    if flags:
        return f"{', '.join(flags)}: done {what}: {rate}{tail}"
    return f"done {what}: {rate} [{verdict}]{tail}"
