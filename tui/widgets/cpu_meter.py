"""A device's live meters as text: CPU (whole machine and the benchmark's own process), memory,
GPU when the agent reports it, and per-core bars on demand.

Every sample comes from the device's own agent (``cpu`` events), not from the workstation, so the
meters show the load where the benchmark runs. Each line says what it measures: ``sys`` is the
whole machine (0..100 %), ``ngb`` the benchmark process (100 % = one busy core, so 180 % on a
multi-core device is normal). Between trials the agent sends nothing, and the meters say ``idle``
instead of freezing on the last sample; in a trial's build, compile and warm-up (the device
samples only while it measures) they name the phase over an empty bar. Plain text (not a widget
tree) because the Run screen draws one per device, up to hundreds, several times a second.
"""

from __future__ import annotations

from collections.abc import Sequence

BAR_WIDTH = 10
BLOCKS = " ▁▂▃▄▅▆▇█"


def bar(percent: float | None, width: int = BAR_WIDTH) -> str:
    """``[#####     ]  50%`` (``[          ]   --`` before the first sample)."""
    if percent is None:
        return f"[{' ' * width}]   --"
    pct = max(0.0, min(100.0, percent))
    filled = round(pct / 100 * width)
    return f"[{'#' * filled}{' ' * (width - filled)}] {pct:3.0f}%"


def cpu_bar(percent: float | None) -> str:
    """``CPU [#####     ]  50%`` -- the whole machine's load."""
    return f"CPU {bar(percent)}"


def sparkline(values: Sequence[float], width: int, top: float = 100.0) -> str:
    """The last ``width`` samples as block characters scaled to ``0..top``."""
    tail = list(values)[-width:] if width > 0 else []
    steps = len(BLOCKS) - 1
    return "".join(BLOCKS[max(0, min(steps, round(v / top * steps)))] for v in tail)


def cpu_line(
    percent: float | None,
    history: Sequence[float],
    width: int,
    proc: float | None = None,
    idle: bool = False,
    phase: str = "",
) -> str:
    """``CPU sys [####      ]  42%  ngb  85%  ▁▂▅▇`` (the sparkline is the system history).

    ``phase``: no sample for this part of the trial; the line says which part it is.
    """
    if idle:
        text = f"CPU sys {bar(None)[:-5]} idle"
    elif phase:
        text = f"CPU sys {bar(None)[:-5]} -- {phase}"
    else:
        own = f"  ngb {proc:4.0f}%" if proc is not None else ""
        text = f"CPU sys {bar(percent)}{own}"
    return f"{text}  {sparkline(history, max(0, width - len(text) - 2))}"


def mem_line(percent: float | None, used_mb: float | None, total_mb: float | None) -> str:
    """``MEM [###       ]  31%  7.4/24.0 GiB`` (system memory of the device)."""
    size = ""
    if used_mb is not None and total_mb:
        size = f"  {used_mb / 1024:.1f}/{total_mb / 1024:.1f} GiB"
    return f"MEM {bar(percent)}{size}"


def gpu_line(util: float | None, mem_mb: float | None, power_w: float | None) -> str:
    """``GPU [#####     ]  50%  3.1 GiB  120 W`` (only drawn when the agent reports a GPU)."""
    mem = f"  {mem_mb / 1024:.1f} GiB" if mem_mb is not None else ""
    power = f"  {power_w:.0f} W" if power_w is not None else ""
    return f"GPU {bar(util)}{mem}{power}"


def cores_line(per_cpu: Sequence[float], width: int) -> str:
    """One block per logical core (``cores 0-15 ▁▃█▂...``), wrapped to the panel width."""
    if not per_cpu:
        return "cores: no per-core samples yet"
    label = f"cores 0-{len(per_cpu) - 1} "
    return label + sparkline(per_cpu, max(1, width - len(label)))
