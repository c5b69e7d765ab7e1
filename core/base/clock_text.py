"""Seconds as ``h:mm:ss``, the one way every surface writes a remaining or elapsed time (the
console's ETAs and the CLI's progress lines agree to the second)."""

from __future__ import annotations

import math


def clock(seconds: float) -> str:
    """``0:05:30`` for 330.4; negatives and NaN as ``0:00:00`` (callers show ``?`` instead
    where nothing is known)."""
    secs = int(seconds) if math.isfinite(seconds) and seconds > 0 else 0
    return f"{secs // 3600:d}:{secs // 60 % 60:02d}:{secs % 60:02d}"
