"""One device's live view in the Run screen: connection state, progress with ETA, the trial in
flight, a serving trial's progress (offered and achieved QPS, the p99 so far, a peak search's
probe), a scheduler's queue line (a Slurm slot: its job's state, node and time left), a CPU meter
with sparkline fed by the device's own samples, and (while TVM tunes) the tuning progress with a
per-task table.

One widget that renders its lines itself, rather than a tree of labels and bars: the Run screen
may show hundreds of devices redrawn ten times a second, and a single fixed-height widget costs a
repaint, never a relayout (the height changes only when the tuning table or a serving trial's
line appears or goes).
The panel is a pure view of a ``DeviceState`` (``ngb.tui.live_run``); ``show`` is called by the
Run screen's throttled refresh, never per event.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import ClassVar

from ngb.core.serving.serve_trial import serving_line
from ngb.devices.slurm import SCHEDULER_ENDS, counted_down
from ngb.tui.live_run import DeviceState, TuningState
from ngb.tui.widgets.cpu_meter import cores_line, cpu_line, gpu_line, mem_line
from ngb.tui.widgets.tuning_panel import clock, tuning_lines, tuning_summary
from rich.text import Text
from textual.widget import Widget

STATE_STYLE = {
    "running": "green",
    "finished": "bold green",
    "pending": "yellow",
    "connecting": "yellow",
    "deploying": "yellow",
    "reconnecting": "yellow",
    "lost": "red",
    "failed": "bold red",
    "cancelled": "magenta",
    "detached": "magenta",
}


def headline(state: DeviceState) -> Text:
    text = Text.assemble(
        (state.device, "bold"),
        "  ",
        (state.connection, STATE_STYLE.get(state.connection, "")),
        f"  {state.done}/{state.total} trials",
    )
    if state.failed:
        text.append(f"  {state.failed} failed", "red")
    return text


def current_line(state: DeviceState) -> str:
    if state.finished:
        return state.message or "done"
    if not state.current:
        if state.queue and state.message == state.queue:  # the queue line below says it
            return "waiting for the allocation" if _pending(state) else "waiting for the next trial"
        return state.message or "waiting for the next trial"
    reps = f" rep {state.rep}/{state.reps}" if state.reps else ""
    phase = f" [{state.phase}]" if state.phase else ""
    ci = ""
    if state.ci_relative is not None:
        ci = f"  95% CI ±{state.ci_relative * 100:.1f}%{target_words(state)}"
    return f"{state.current}{phase}{reps}{ci}"


def target_words(state: DeviceState) -> str:
    """What the interval so far is held to. An adaptive trial times until it is within the
    target; a fixed count runs its repetitions whatever the interval (``±810.0% (target ±2%)``
    after 2 of 6 read as a trial far from its end) and is judged against the target after."""
    if not state.ci_target:
        return ""
    target = f"±{state.ci_target * 100:.0f}%"
    return f" (fixed count; VALID within {target})" if state.ci_fixed else f" (target {target})"


def queue_line(state: DeviceState, now: float) -> Text | None:
    """The job's queue state on a line of its own, also while a trial runs (its label holds
    the line above); the time left counts down from the scheduler's last word between polls.
    None for a device no scheduler hands out, and once the device is done."""
    if not state.queue or state.finished:
        return None
    text = counted_down(state.queue, max(0.0, now - state.queue_at))
    job_state = _job_state(state)
    style = "red" if job_state in SCHEDULER_ENDS else QUEUE_STYLE.get(job_state, "")
    return Text(text, style)


QUEUE_STYLE = {"PENDING": "yellow", "RUNNING": "cyan"}


def _job_state(state: DeviceState) -> str:
    """The job's state word in the queue line (``slurm: PENDING (Resources)`` -> PENDING)."""
    words = state.queue.split(": ", 1)[-1].split()
    return words[0] if words else ""


def _pending(state: DeviceState) -> bool:
    return _job_state(state) == "PENDING"


def meter_lines(state: DeviceState, width: int, cores: bool = False) -> list[str]:
    """CPU always; memory, GPU and per-core bars when there is something to show."""
    lines = [
        cpu_line(
            state.cpu, state.cpu_history, width, state.proc_cpu, state.idle, state.unsampled_phase
        )
    ]
    if state.mem_percent is not None:
        lines.append(mem_line(state.mem_percent, state.mem_used_mb, state.mem_total_mb))
    if state.has_gpu:
        lines.append(gpu_line(state.gpu_util, state.gpu_mem_mb, state.gpu_power_w))
    if cores:
        lines.append(cores_line([] if state.idle else state.per_cpu, width))
    return lines


def eta_text(state: DeviceState, now: float) -> str:
    """Remaining time, from this run's own trials on this device (see ``eta_seconds``).

    ``ETA ?`` until there is evidence: a trial timed from its start to its end, or the agent's
    inputs with a tuning rate where tuning lies ahead (a guess from elapsed time over a count that
    includes trials done before a re-attach said 0:00:01 at 8/20).
    """
    if state.finished or not state.total:
        return ""
    if state.total - state.done <= 0:
        return ""
    secs = eta_seconds(state, now)
    # work is ahead: a prediction used up (a trial past what its like took) is no evidence of
    # being done -- "?", never 0:00:00 (issue 46: 12 minutes of 0:00:00 while tuning)
    return "ETA ?" if secs is None or secs < 1.0 else f"ETA {clock(secs)}"


def eta_seconds(state: DeviceState, now: float) -> float | None:
    """Seconds left on this device, weighted by what each remaining trial is.

    With the agent's inputs (``ngb.core.trial.live_state``, sent with each trial's start and in
    every snapshot): the trial in flight's tuning still to run (budget minus trials done, at this
    search's own rate) and its predicted non-tuning seconds minus what it has spent outside the
    search, plus the remaining trials' predicted non-tuning seconds and tuning budgets at the best
    known rate. Without them (an older agent): the mean of the finished trials' durations.
    """
    remaining = state.total - state.done
    eta, tuning = state.eta, state.tuning
    if eta is None:
        return _mean_eta(state, now, remaining)
    rate = tuning.seconds_per_trial if tuning is not None else None
    rate = rate or _num(eta.get("s_per_tune_trial"))
    if not state.trial_seconds and not rate:
        return None  # nothing of this run timed yet: the agent's inputs are only a cap

    elapsed = max(0.0, now - state.trial_seen_at) if state.trial_seen_at is not None else 0.0
    budget = int(_num(eta.get("current_tune_budget")) or 0)
    tune_left, tune_spent = 0.0, 0.0
    if tuning is not None and not tuning.reused and state.phase in ("", "tune"):  # searching
        since = max(0.0, now - tuning.seen_at)
        tune_spent = tuning.elapsed_s + since
        left = tuning.search_left_s(now)  # the panel's figure, counting down with it
        if left is not None:
            tune_left = left
    elif tuning is not None:  # the search is over (or was reused): the rest is building and timing
        tune_spent = tuning.elapsed_s
    elif budget and state.phase in ("", "build", "optimise", "compile", "export", "tune"):
        if not rate:
            return None  # a search lies ahead and nothing says how fast it goes
        tune_left = budget * rate
    other = max(0.0, (_num(eta.get("current_other_s")) or 0.0) - (elapsed - tune_spent))
    post = _num(eta.get("current_post_s"))
    if tuning is not None and not tuning.reused and post is not None:
        # what a search of this compiler left to do after it, in this run: the workers' builds
        # and timed loops (what came before the search is behind us)
        after = max(0.0, now - tuning.seen_at) if state.phase not in ("", "tune") else 0.0
        other = max(0.0, post - after)
    rest_budget = _num(eta.get("rest_tune_budget")) or 0.0
    if rest_budget and not rate:
        return None
    rest = (_num(eta.get("rest_other_s")) or 0.0) + rest_budget * (rate or 0.0)
    if not state.current:  # between trials: the inputs were for the one that just ended
        return _mean_eta(state, now, remaining)
    return tune_left + other + rest


def _mean_eta(state: DeviceState, now: float, remaining: int) -> float | None:
    if not state.trial_seconds:
        return None
    mean = sum(state.trial_seconds) / len(state.trial_seconds)
    secs = mean * remaining
    if state.trial_seen_at is not None and state.current:
        secs -= min(mean, max(0.0, now - state.trial_seen_at))
    return max(0.0, secs)


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _serving(state: DeviceState) -> bool:
    """A serving trial in flight has sent its progress: one line of it below the trial's."""
    return state.serving is not None and not state.finished and bool(state.current)


def progress_line(state: DeviceState, width: int, now: float) -> Text:
    eta = eta_text(state, now)
    frac = state.done / state.total if state.total else 0.0
    bar_w = max(4, width - len(eta) - 8)
    filled = int(round(frac * bar_w))
    text = Text()
    text.append("━" * filled, "green" if state.finished else "cyan")
    text.append("━" * (bar_w - filled), "grey30")
    text.append(f" {frac * 100:3.0f}%  {eta}")
    return text


#: terminals shorter than this show the tuning view folded to one line (``t`` unfolds it)
FOLD_TUNING_BELOW_ROWS = 40


def folded_tuning_line(t: TuningState, now: float) -> str:
    """The tuning view in one line: trials of the budget, best latency, the search's ETA."""
    if t.reused:
        return f"TVM {t.reused}"[:76]
    line = tuning_summary(t.trials_done, t.budget, t.best_ms)
    left = t.search_left_s(now)
    line += "   search ETA ?" if left is None else f"   search ETA {clock(left)}"
    return f"{line}   (t: curve)"


class DevicePanel(Widget):
    DEFAULT_CSS = """
    DevicePanel { height: 6; border: round $panel; padding: 0 1; }
    """

    #: wall clock for the ETA; snapshot tests freeze it
    clock: ClassVar[Callable[[], float]] = time.time

    def __init__(
        self,
        state: DeviceState,
        *,
        name: str | None = None,
        id: str | None = None,  # noqa: A002 - Textual's name for it
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.state = state
        self.show_cores = False  # per-core bars, toggled from the Run screen
        # the tuning view as one line (True), whole (False), or by the terminal's height (None)
        self.fold_tuning: bool | None = None

    def show(self, state: DeviceState) -> None:
        self.state = state
        tuning = state.tuning is not None and not state.finished
        self.set_class(tuning, "-tuning")
        lines = self._line_count()
        if self.styles.height is None or self.styles.height.value != lines + 2:
            self.styles.height = lines + 2  # + the border
        self.refresh()

    def _line_count(self) -> int:
        """Lines ``render`` will draw, counted without building them (this runs per redraw)."""
        s = self.state
        meters = 1 + (s.mem_percent is not None) + s.has_gpu + self.show_cores
        tuning = len(self._tuning_lines()) if s.tuning is not None and not s.finished else 0
        queue = bool(s.queue) and not s.finished
        return 3 + queue + _serving(s) + meters + tuning

    def tuning_folded(self) -> bool:
        """One line of tuning on a short terminal (issue 46: at 80x24 the whole view pushed the
        task table and the log off the Run screen); ``t`` there unfolds it."""
        if self.fold_tuning is not None:
            return self.fold_tuning
        return self.app.size.height < FOLD_TUNING_BELOW_ROWS

    def _tuning_lines(self) -> list[str]:
        t = self.state.tuning
        if t is None:
            return []
        if self.tuning_folded():
            return [folded_tuning_line(t, type(self).clock())]
        return tuning_lines(
            t.trials_done,
            t.budget,
            t.best_ms,
            t.tasks,
            seconds_per_trial=t.seconds_per_trial,
            search_left_s=t.search_left_s(type(self).clock()),
            early_stop=t.early_stop,
            since_improvement=t.since_improvement,
            history=t.history,
            reused=t.reused,
            width=max(40, self.content_size.width or self.app.size.width - 4),
        )

    def _lines(self, width: int) -> list[Text]:
        state, now = self.state, type(self).clock()
        queue = queue_line(state, now)
        lines = [
            headline(state),
            progress_line(state, width, now),
            Text(current_line(state), "italic"),
            *([Text(serving_line(state.serving or {}), "yellow")] if _serving(state) else []),
            *([queue] if queue is not None else []),
            *(Text(line) for line in meter_lines(state, width, self.show_cores)),
        ]
        if state.tuning is not None and not state.finished:
            lines.extend(Text(line, "yellow") for line in self._tuning_lines())
        return lines

    def render(self) -> Text:
        return Text("\n").join(self._lines(max(20, self.content_size.width)))
