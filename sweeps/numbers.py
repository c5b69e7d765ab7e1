"""How every surface writes a number with its interval: only the digits the interval supports.

``round_with_interval(79.841, 12.5) == (80.0, 13.0, 0)``: the half-width keeps two significant
digits, the value is rounded to the same decimal place (as ``torch.utils.benchmark``'s
``Measurement`` trims to significant figures). The console, ``ngb report`` in every format, the
HTML report and the figures' labels all go through this module, so they print the same digits,
and the verdicts of ``ngb.sweeps.derived`` are decided on these rounded numbers: "n.s." exactly
where the printed interval includes 1.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal

#: significant digits kept of a half-width
HALF_DIGITS = 2


def decimals_for(half: float) -> int:
    """Decimal places that keep ``HALF_DIGITS`` significant digits of ``half`` (may be < 0)."""
    if not math.isfinite(half) or half <= 0:
        return 3
    return HALF_DIGITS - 1 - math.floor(math.log10(half))


def _round(x: float, places: int) -> float:
    """Round half away from zero (12.5 -> 13, where ``round`` gives 12), from the decimal text."""
    quantum = Decimal(1).scaleb(-places)
    return float(Decimal(repr(x)).quantize(quantum, rounding=ROUND_HALF_UP))


def round_with_interval(value: float, half: float | None) -> tuple[float, float | None, int]:
    """``(value, half, decimals)`` rounded to what ``half`` supports; without a (positive)
    half-width the value keeps 4 significant digits."""
    if not math.isfinite(value):
        return value, half, 0
    if half is None or not math.isfinite(half) or half <= 0:
        if value == 0:
            return 0.0, half, 3
        places = max(0, 3 - math.floor(math.log10(abs(value))))
        return _round(value, places), half, places
    places = decimals_for(half)
    rounded_half = _round(half, places)
    if rounded_half >= 10 ** (HALF_DIGITS - places):  # 99.6 -> 100: one digit more than kept
        places -= 1
        rounded_half = _round(half, places)
    return _round(value, places), rounded_half, places


def _text(x: float, places: int) -> str:
    return f"{x:.{max(places, 0)}f}"


def format_value(value: float | None) -> str:
    """A number without an interval (4 significant digits); ``-`` when missing."""
    if value is None or not math.isfinite(value):
        return "-"
    v, _, places = round_with_interval(value, None)
    return _text(v, places)


def format_with_interval(value: float | None, half: float | None, sep: str = " ± ") -> str:
    """``80 ± 13`` for (79.841, 12.5); ``200 ± 230`` for (203.0, 232.3); the value alone when
    the half-width is unknown."""
    if value is None or not math.isfinite(value):
        return "-"
    if half is None or not math.isfinite(half) or half <= 0:  # unknown, or exact by definition
        return format_value(value)
    v, h, places = round_with_interval(value, half)
    return f"{_text(v, places)}{sep}{_text(float(h or 0.0), places)}"


def printed_interval(value: float, half: float) -> tuple[float, float]:
    """The (low, high) a reader computes from the printed ``value ± half``."""
    v, h, _ = round_with_interval(value, half)
    return v - float(h or 0.0), v + float(h or 0.0)
