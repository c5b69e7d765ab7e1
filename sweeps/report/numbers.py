"""How every surface writes a number with its interval: only the digits the interval supports.

An interval is printed as its two bounds, ``6.3 [4.1, 9.6]`` (``format_interval``): a ratio's
or a throughput's interval is asymmetric (``ngb.core.statistics.intervals``), and a ``value ± half``
would have to print its larger side. The digits: half the interval's width keeps two significant
digits, and the value and both bounds are rounded to that decimal place (the value keeping at least
two significant digits of its own: ``6.7 [0.086, 520]``, never ``10 [...]``) (as
``torch.utils.benchmark``'s ``Measurement`` trims to significant figures) -- the bounds outwards
(the lower one down, the upper one up), so the printed interval contains the computed one. A bound
or value that would round to zero or flip sign keeps two significant digits of its own (``700 [26,
19000]``, never ``[0, ...]``), and a negative zero prints as 0. The console, ``ngb report`` in every
format, the HTML report, the figures' labels and ``ngb advise`` all go through this module, so they
print the same digits, and the verdicts of ``ngb.sweeps.report.derived`` are decided on these
printed bounds: "n.s." exactly where the printed interval includes 1.

``format_with_interval`` (``value ± half``) stays for spreads that are not intervals: a
standard deviation (Table VI's ``±``) is a dispersion, symmetric by definition.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_UP, Decimal

#: significant digits kept of a half-width
HALF_DIGITS = 2


def decimals_for(half: float) -> int:
    """Decimal places that keep ``HALF_DIGITS`` significant digits of ``half`` (may be < 0)."""
    if not math.isfinite(half) or half <= 0:
        return 3
    return HALF_DIGITS - 1 - math.floor(math.log10(half))


def _round(x: float, places: int, rounding: str = ROUND_HALF_UP) -> float:
    """Round half away from zero (12.5 -> 13, where ``round`` gives 12), from the decimal text;
    ``rounding`` ROUND_FLOOR / ROUND_CEILING round a bound outwards."""
    quantum = Decimal(1).scaleb(-places)
    return float(Decimal(repr(x)).quantize(quantum, rounding=rounding)) + 0.0  # -0.0 -> 0.0


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
    if value != 0 and _own_places(value) > places:  # an estimate keeps two digits of its own
        places_v = _own_places(value)
        return f"{_text(_round(value, places_v), places_v)}{sep}{_text(float(h or 0.0), places)}"
    return f"{_text(v, places)}{sep}{_text(float(h or 0.0), places)}"


def _own_places(x: float) -> int:
    """Decimal places that keep two significant digits of ``x`` itself."""
    return HALF_DIGITS - 1 - math.floor(math.log10(abs(x)))


def _keep_sign(x: float, places: int, rounding: str) -> tuple[float, int]:
    """``x`` rounded at ``places``; where that gives zero or flips its sign, at two significant
    digits of its own instead (a positive lower bound never prints as 0)."""
    rounded = _round(x, places, rounding)
    if x != 0 and (rounded == 0 or (rounded > 0) != (x > 0)):
        places = max(places, _own_places(x))
        rounded = _round(x, places, rounding)
    return rounded, places


@dataclass(frozen=True)
class Printed:
    """An interval as printed: the rounded value and bounds and the decimals of each."""

    value: float
    low: float
    high: float
    places: tuple[int, int, int]

    def text(self) -> str:
        v, lo, hi = self.places
        return f"{_text(self.value, v)} [{_text(self.low, lo)}, {_text(self.high, hi)}]"

    def includes(self, x: float) -> bool:
        return self.low <= x <= self.high


def printed_bounds(value: float, low: float, high: float) -> Printed | None:
    """The value and interval as printed (None when any of them is not finite)."""
    if not (math.isfinite(value) and math.isfinite(low) and math.isfinite(high)):
        return None
    places = decimals_for((high - low) / 2) if high > low else _own_places(value) if value else 3
    # the estimate keeps two significant digits of its own however wide its interval (issue 46:
    # a speed-up of 6.7 within [0.086, 520] printed as 10, a different-looking number)
    v, vp = _keep_sign(value, max(places, _own_places(value)) if value else places, ROUND_HALF_UP)
    lo, lp = _keep_sign(low, places, ROUND_FLOOR)
    hi, hp = _keep_sign(high, places, ROUND_CEILING)
    return Printed(v, lo, hi, (vp, lp, hp))


def format_interval(value: float | None, low: float | None, high: float | None) -> str:
    """``6.3 [4.1, 9.6]``; the value alone when the interval is unknown; ``-`` without a value."""
    if value is None or not math.isfinite(value):
        return "-"
    if low is None or high is None:
        return format_value(value)
    printed = printed_bounds(value, low, high)
    return printed.text() if printed is not None else format_value(value)
