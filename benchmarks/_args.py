"""Argument types the benchmark scripts share: a bad value is one line before anything runs.

``--rounds 0`` ended ``bench parity`` in a StatisticsError traceback, and ``bench console
--trials 0`` printed "16703.1 % of a core" after a run that never started (issue 31, item 17).
Not a benchmark itself: ``ngb bench`` lists no module whose name starts with ``_``.
"""

from __future__ import annotations

import argparse
import math


def positive_int(text: str) -> int:
    """An integer >= 1 (a count of rounds, trials, windows)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def non_negative(text: str) -> float:
    """A finite float >= 0 (seconds); NaN and the infinities refused."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
    return value


def positive(text: str) -> float:
    """A finite float > 0 (a window, a rate)."""
    value = non_negative(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return value


def sweep_ref(text: str) -> str:
    """A preset name or a sweep file that loads (checked now, not after the console started)."""
    if not text:
        return text  # the default: the script's own no-op sweep (argparse converts it too)
    from ngb.core.base.errors import NgbError
    from ngb.sweeps.spec.sweep import load_sweep

    try:
        load_sweep(text)
    except NgbError as exc:
        raise argparse.ArgumentTypeError(str(exc).splitlines()[0]) from None
    return text
