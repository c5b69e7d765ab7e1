"""How a report's values read as text: numbers with enough digits to compare, ``Cell`` as
``mean [low, high] note`` (an interval) or ``mean ± std note`` (a standard deviation). Shared by
the plain renderers (``report_render``) and LaTeX (``report_latex``), which is why it is a module
of its own: each of them imports it at module level, and ``report_render`` imports
``report_latex`` without an import loop (issue 22).
"""

from __future__ import annotations

import math

from ngb.sweeps.report.data import Cell
from ngb.sweeps.report.numbers import format_interval, format_with_interval


def fmt_number(value: float) -> str:
    """Enough digits to compare: 1234.5 -> "1234.5", 12.3456 -> "12.346", 0.01234 -> "0.0123"."""
    if not math.isfinite(value):
        return "-"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.1f}"
    if magnitude >= 0.1 or magnitude == 0:
        return f"{value:.3f}"
    return f"{value:.3g}"


def fmt_cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, Cell):
        if value.value is None:
            return "-"
        if value.interval is not None:
            text = format_interval(value.value, *value.interval)
        elif value.std is not None and math.isfinite(value.std) and value.std > 0:
            # only the digits the interval supports (ngb.sweeps.report.numbers), as on every surface
            text = format_with_interval(value.value, value.std)
        else:
            text = fmt_number(value.value)
        return f"{text} {value.note}" if value.note else text
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return fmt_number(value)
    return str(value)
