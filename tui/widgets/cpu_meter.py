"""The live CPU meter of a device as text: the latest system-wide percent plus a sparkline.

The samples come from the device's own agent (``cpu`` events), not from the workstation, so the
meter shows the load where the benchmark runs. Plain text (not a widget tree) because the Run
screen draws one per device, up to hundreds at ten frames a second.
"""

from __future__ import annotations

from collections.abc import Sequence

BAR_WIDTH = 10
BLOCKS = " ▁▂▃▄▅▆▇█"


def cpu_bar(percent: float | None) -> str:
    """``CPU [#####     ]  50%`` (``--`` before the first sample)."""
    if percent is None:
        return f"CPU [{' ' * BAR_WIDTH}]   --"
    pct = max(0.0, min(100.0, percent))
    filled = round(pct / 100 * BAR_WIDTH)
    return f"CPU [{'#' * filled}{' ' * (BAR_WIDTH - filled)}] {pct:3.0f}%"


def sparkline(values: Sequence[float], width: int, top: float = 100.0) -> str:
    """The last ``width`` samples as block characters scaled to ``0..top``."""
    tail = list(values)[-width:] if width > 0 else []
    steps = len(BLOCKS) - 1
    return "".join(BLOCKS[max(0, min(steps, round(v / top * steps)))] for v in tail)


def cpu_line(percent: float | None, history: Sequence[float], width: int) -> str:
    bar = cpu_bar(percent)
    return f"{bar}  {sparkline(history, max(0, width - len(bar) - 2))}"
