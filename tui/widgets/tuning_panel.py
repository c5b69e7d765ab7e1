"""TVM MetaSchedule tuning progress of one device as text: trials done / budget, best latency,
and a small per-task table (task, trials, best ms), drawn inside the device's panel."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

MAX_TASKS = 4  # the panel stays small; the store keeps the full per-task history


def tuning_summary(trials_done: int, budget: int, best_ms: float | None) -> str:
    best = f"{best_ms:.3f} ms" if isinstance(best_ms, int | float) else "--"
    return f"TVM tuning: {trials_done}/{budget} trials   best {best}"


def tuning_lines(
    trials_done: int, budget: int, best_ms: float | None, tasks: Sequence[Mapping[str, object]]
) -> list[str]:
    """The summary line and up to ``MAX_TASKS`` tasks (the agent's JSON objects, each field
    checked or printed as it is)."""
    lines = [tuning_summary(trials_done, budget, best_ms)]
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
