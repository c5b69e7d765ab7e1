"""The Results table at the terminal's width: every column in view, what gave way said in a note.

The full table (``results_data.TABLE_COLUMNS``) with every interval needs about 160 columns:
at 80 and at 120 columns ASE, BSR and the flags ran past the right edge (issue 46). Where it
does not fit, the columns that matter for a verdict stay (compiler, batch and depth, throughput
and speed-up, RTR/ASE/BSR and the flags); the model (the one chosen above the table) and the
repetition count go, batch and depth share a column (``b×d``) and the long compiler names are
abbreviated (each compiler's own ``short_name``; ``OV bf16`` for a series at another
precision). Then, while the table is still too wide, intervals give way in ``SHED_ORDER``
(RTR's first; the speed-up's never, the comparison the table is read for; top-1's last, the
only interval its accuracy has, where the speed-up carries the throughput's comparison), each
such cell keeping its value and verdict ("n.s.") as printed. ``fit`` returns the note that
says what went, so nothing disappears silently. Only the view changes: what stays of a cell is
as ``results_data`` formatted it. The accuracy columns (issue 42) sit after the speed-up, so at
80 columns they stay in view even where a run at two precisions (its flags) makes the table
scroll.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ngb.core.compilers import compiler_classes

DROPPED = ("model", "n")
#: compiler -> its name in a narrow table, as each declares (``Compiler.short_name``)
SHORT_NAMES = {
    name: cls.short_name for name, cls in compiler_classes(include_internal=True).items()
}
HEADERS = {
    "compiler": "comp",
    "throughput [95%]": "tput",
    "speed-up [95%]": "speed-up",
    "top-1 [95%]": "top-1",
    "agree [95%]": "agree",
}
SHORT_FLAGS = {"unstable": "unst", "disturbed": "dist"}
#: the intervals that give way, first to last, while the table is too wide
SHED_ORDER = ("RTR", "BSR", "ASE", "agree [95%]", "throughput [95%]", "top-1 [95%]")
#: a column's padding in the table (Textual's DataTable: one cell each side)
PADDING = 2
KEYS = "b×d=batch×depth; eager=identity; unst=unstable"
AGREE_KEY = "agree=% same top-1 as eager fp32"
_INTERVAL = re.compile(r" \[[^\]]*\]")


def without_interval(cell: str) -> str:
    """``1.4 [0.5, 3.9] n.s.`` -> ``1.4 n.s.``: the value and its verdict as printed."""
    return _INTERVAL.sub("", cell, count=1)


@dataclass
class Fitted:
    """The table as shown: columns, rows, the numeric (right-aligned) columns and the note."""

    columns: list[str]
    rows: list[list[str]]
    numeric: set[int]
    note: str = ""
    shed: list[str] = field(default_factory=list)  # the columns shown without their interval


def table_width(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> int:
    """Columns wide as their widest cell or header, with their padding."""
    widths = [len(c) for c in columns]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=False)]
    return sum(w + PADDING for w in widths)


def fit(
    columns: Sequence[str], rows: Sequence[Sequence[str]], numeric: set[int], width: int
) -> Fitted:
    """The table within ``width`` columns: whole where it fits, else narrowed as the module
    says (at ``SHED_ORDER``'s end it is as narrow as it goes, and scrolls)."""
    if table_width(columns, rows) <= width:
        return Fitted(list(columns), [list(r) for r in rows], set(numeric))
    shed: list[str] = []
    fitted = narrow(columns, rows, numeric, shed)
    for name in (n for n in SHED_ORDER if n in columns):
        if table_width(fitted.columns, fitted.rows) <= width:
            break
        shed.append(name)
        fitted = narrow(columns, rows, numeric, shed)
    short = [HEADERS.get(n, n) for n in shed]
    gone = f"; no interval on {', '.join(short)}" if short else ""
    keys = f"{KEYS}; {AGREE_KEY}" if "agree [95%]" in columns else KEYS
    fitted.note = f"to fit: model, n hidden{gone} (a wider terminal shows them); {keys}"
    return fitted


def narrow(
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    numeric: set[int],
    shed: Sequence[str] = (),
) -> Fitted:
    """The narrow table, the columns in ``shed`` without their intervals."""
    index = {name: i for i, name in enumerate(columns)}
    out_cols: list[str] = []
    plan: list[tuple[str, int | tuple[int, int]]] = []
    for name in (c for c in columns if c not in DROPPED):
        if name == "depth" and "batch" in index:
            continue  # folded into b×d
        if name == "batch" and "depth" in index:
            out_cols.append("b×d")
            plan.append(("bd", (index["batch"], index["depth"])))
            continue
        header = HEADERS.get(name, name)
        kept = name.endswith("[95%]") and name not in shed
        out_cols.append(f"{header} [95%]" if kept and header != name else header)
        plan.append((name, index[name]))
    out_rows = [[_cell(row, name, at, shed) for name, at in plan] for row in rows]
    out_numeric = {i for i, (name, at) in enumerate(plan) if isinstance(at, tuple) or at in numeric}
    return Fitted(out_cols, out_rows, out_numeric, shed=list(shed))


def _cell(row: Sequence[str], name: str, at: int | tuple[int, int], shed: Sequence[str]) -> str:
    if isinstance(at, tuple):
        return f"{row[at[0]]}×{row[at[1]]}"
    if name == "compiler":  # a series at another precision keeps it: "OV bf16"
        compiler, _, precision = row[at].partition(" ")
        short = SHORT_NAMES.get(compiler, compiler)
        return f"{short} {precision}" if precision else short
    if name == "flags":
        return " ".join(SHORT_FLAGS.get(f, f) for f in row[at].split(" "))
    return without_interval(row[at]) if name in shed else row[at]
