"""TVM MetaSchedule tuning progress of one device as text, drawn inside the device's panel: trials
done of the budget, the best latency so far and its curve against trials (plotext), the search's
own rate and what is left of it by the budget and by the early-stop window, where a reused
database came from, and a small per-task table (task, trials, best ms)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from ngb.core.base.clock_text import clock

__all__ = ["best_steps", "clock", "curve_lines", "rate_line", "tuning_lines", "tuning_summary"]

MAX_TASKS = 4  # the panel stays small; the store keeps the full per-task history
CURVE_ROWS = 7  # the best-so-far plot, axes included
_curve_cache: dict[tuple[object, ...], list[str]] = {}


def tuning_summary(trials_done: int, budget: int, best_ms: float | None) -> str:
    best = f"{best_ms:.3f} ms" if isinstance(best_ms, int | float) else "--"
    share = f" ({100 * trials_done / budget:.0f}%)" if budget else ""
    return f"TVM tuning: {trials_done}/{budget} trials{share}   best {best}"


def rate_line(
    trials_done: int,
    budget: int,
    seconds_per_trial: float | None,
    early_stop: int | None,
    since_improvement: int,
    search_left_s: float | None = None,
) -> str:
    """The search's rate and what is left: by the budget (``search_left_s``: counted down since
    the last event, as the device's ETA above it is), and at most until the early stop."""
    if not seconds_per_trial:
        return "  rate --  (ETA once the first batch is measured)"
    left = max(0, budget - trials_done)
    search = left * seconds_per_trial if search_left_s is None else search_left_s
    text = f"  {60 / seconds_per_trial:.1f} trials/min   search ETA {clock(search)}"
    if early_stop:
        window = max(0, early_stop - since_improvement)
        if window < left:
            text += f" (early stop in {clock(window * seconds_per_trial)} without a new best)"
    return text


def best_steps(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The best-so-far as steps: it holds its value until the batch that lowered it ends, so
    each change is drawn straight down at that batch's trial count (a line from one batch to
    the next claimed bests in between that were never measured)."""
    out = list(points[:1])
    for (_, before), (x, y) in zip(points, points[1:], strict=False):
        out += [(x, before), (x, y)]
    return out


def curve_lines(history: Sequence[tuple[float, float]], width: int) -> list[str]:
    """Best latency so far (ms) against trials done, as plain text lines (cached: plotext
    takes ~25 ms a plot, and the panel redraws twice a second)."""
    points = [(x, y) for x, y in history if math.isfinite(y)]
    if len(points) < 2:
        return []
    key = (tuple(points[-1]), len(points), width)
    if key not in _curve_cache:
        import plotext as plt  # type: ignore[import-untyped]  # no stubs; textual-plotext uses it

        plt.clear_figure()
        plt.plotsize(max(30, width - 2), CURVE_ROWS)
        plt.theme("clear")
        drawn = best_steps(points)
        plt.plot([p[0] for p in drawn], [p[1] for p in drawn], marker="braille")
        # the first and the best latency as the y ticks: with three rows of plot plotext's own
        # ticks left the best, the number the curve is read for, unlabelled
        ys = sorted({min(p[1] for p in points), max(p[1] for p in points)})
        plt.yticks(ys, [f"{y:.4g}" for y in ys])
        first, last = points[0][0], points[-1][0]
        if last > first:
            plt.xlim(first, last + (last - first) * 0.02)  # the last step off the frame's edge
            ticks = sorted({round(first + (last - first) * k / 4) for k in range(5)})
            plt.xticks(ticks, [str(t) for t in ticks])  # trial counts are whole
        plt.xlabel("trials measured")  # the units: one row under the axis holds both
        plt.ylabel("best ms")
        text = plt.build()
        lines = [line.replace("\x1b[0m", "").rstrip() for line in text.splitlines()]
        _curve_cache.clear()  # one device tunes at a time: keep the last plot only
        _curve_cache[key] = [f"  {line}" for line in lines if line.strip()]
    return _curve_cache[key]


def tuning_lines(
    trials_done: int,
    budget: int,
    best_ms: float | None,
    tasks: Sequence[Mapping[str, object]],
    *,
    seconds_per_trial: float | None = None,
    search_left_s: float | None = None,
    early_stop: int | None = None,
    since_improvement: int = 0,
    history: Sequence[tuple[float, float]] = (),
    reused: str = "",
    width: int = 0,
) -> list[str]:
    """The summary, rate, curve and up to ``MAX_TASKS`` tasks (the agent's JSON objects, each
    field checked or printed as it is)."""
    if reused:  # nothing to search: the database answered
        return [f"TVM {reused}"]
    lines = [tuning_summary(trials_done, budget, best_ms)]
    lines.append(
        rate_line(
            trials_done, budget, seconds_per_trial, early_stop, since_improvement, search_left_s
        )
    )
    if width:
        lines.extend(curve_lines(history, width))
    if tasks:
        lines.append(f"  {'task':32s} {'trials':>7s} {'best ms':>9s}")
    for task in tasks[:MAX_TASKS]:
        best = task.get("best_ms")
        best_text = f"{best:9.3f}" if isinstance(best, int | float) else f"{'--':>9s}"
        lines.append(
            f"  {str(task.get('name', '?'))[:32]:32s} {task.get('trials', 0)!s:>7s} {best_text}"
        )
    if len(tasks) > MAX_TASKS:
        lines.append(f"  ... {len(tasks) - MAX_TASKS} more task(s)")
    return lines
