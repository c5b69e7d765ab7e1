r"""A ``Report`` as LaTeX tables in booktabs style, ready to ``\input`` into a paper.

One float per report table: caption on top (IEEE style), label ``tab:ngb-<report>-<n>``,
``\toprule`` / ``\midrule`` / ``\bottomrule`` and no vertical rules, numeric columns right-aligned,
the table's notes in small type under it. The report's own notes (the data source) become ``%``
comments, so they travel with the file without printing. The preamble needs
``\usepackage{booktabs,graphicx}``.

Fitting a two-column IEEE page: a table whose text is likely wider than one column goes into
``table*`` (both columns), and every tabular goes through ``\ngbfit``, which scales it down to the
line width only when it is wider (a narrow table keeps its type size). Captions carry LaTeX's own
number only: the paper's "Table III:" prefix of a report title becomes a comment.

Values are formatted exactly as in the other human formats (``fmt_cell``, so intervals read as
``numbers.py`` prints them), then typeset: TeX's special characters escaped, a minus as ``$-$``
and never ``-0``, `` `code` `` in ``\texttt``, "quotes" as TeX quotes, ``--`` kept as two hyphens.
"""

from __future__ import annotations

import re

from ngb.sweeps.report.data import Cell, Report, Table
from ngb.sweeps.report.formatting import fmt_cell

# Characters TeX treats specially, and the few non-ASCII symbols the reports use.
_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",  # in OT1 text mode "<" prints as an inverted exclamation mark
    ">": r"\textgreater{}",
    "±": r"$\pm$",
    "·": r"$\cdot$",
    "×": r"$\times$",
    "≥": r"$\geq$",
    "≤": r"$\leq$",
    "≠": r"$\neq$",
    "−": r"$-$",
    "–": "--",
    "—": "---",
    # two hyphens would print as an en-dash ("--precision" as "–precision")
    "--": "-{}-",
}
_PATTERN = re.compile("|".join(re.escape(k) for k in sorted(_ESCAPES, key=len, reverse=True)))
# A sign in front of a number (not a hyphen inside a word such as "b1-4" or "compile-times").
_NEGATIVE = re.compile(r"(?<![\w.\])])-(\d+(?:\.\d+)?|\.\d+)(?![\w.])")
_CODE = re.compile(r"`([^`]+)`")
_QUOTED = re.compile(r'"([^"]+)"')
# "Table III: compile time (s)", "Tables VII/VIII: ..." (the paper's numbering, see _caption)
_PAPER_NUMBER = re.compile(r"^(Tables? [IVXL]+(?:\s*(?:/|,|and)\s*[IVXL]+)*):\s*")

# The macro every table goes through (defined once, whatever the number of \input files).
FIT_MACRO = (
    r"\providecommand{\ngbfit}[1]{\sbox0{#1}%"
    "\n"
    r"  \ifdim\wd0>\linewidth\resizebox{\linewidth}{!}{\usebox0}\else\usebox0\fi}"
)
# One column of a two-column IEEE page (IEEEtran: 3.5 in = 252 pt of a 516 pt text width).
COLUMN_PT = 252.0
TEXT_PT = 516.0
_CHAR_PT = 5.0  # a character of 10 pt Computer Modern, on average
_COL_PAD_PT = 12.0  # \tabcolsep on both sides of a column


def _minus(text: str) -> str:
    def sign(match: re.Match[str]) -> str:
        digits = match.group(1)
        if float(digits) == 0:
            return digits  # "-0.000" is a rounded zero, not a negative number
        return "$-$" + digits

    return _NEGATIVE.sub(sign, text)


def escape(text: str) -> str:
    """Plain text typeset: special characters, minus signs, "quotes"."""
    text = _minus(text)
    parts = re.split(r"(\$-\$)", text)  # the minus signs just made must not be escaped
    out = "".join(
        p if p == "$-$" else _PATTERN.sub(lambda m: _ESCAPES[m.group(0)], p) for p in parts
    )
    return _QUOTED.sub(r"``\1''", out)


def _code(text: str) -> str:
    # every hyphen split from the next: tt fonts of some encodings still join "--"
    pieces = (_PATTERN.sub(lambda m: _ESCAPES[m.group(0)], p) for p in text.split("-"))
    body = "-{}".join(pieces)
    return rf"\texttt{{{body}}}"


def inline(text: str) -> str:
    """Text of a note or a cell: `` `code` `` spans in typewriter, the rest through ``escape``."""
    pieces = _CODE.split(text)
    return "".join(_code(p) if i % 2 else escape(p) for i, p in enumerate(pieces))


def _numeric(value: object) -> bool:
    if isinstance(value, Cell):
        return True
    return isinstance(value, int | float) and not isinstance(value, bool)


def _alignment(table: Table) -> str:
    """``r`` for columns whose values are all numbers (missing values aside), else ``l``."""
    spec = []
    for i in range(len(table.columns)):
        values = [row[i] for row in table.rows if row[i] is not None]
        spec.append("r" if values and all(_numeric(v) for v in values) else "l")
    return "".join(spec)


def _caption(title: str) -> tuple[str, str]:
    """(caption, paper reference): LaTeX numbers the table, so "Table III:" would be a second
    number; it is kept as a comment for whoever matches the tables to the paper's."""
    found = _PAPER_NUMBER.match(title)
    if not found:
        return title, ""
    rest = title[found.end() :]
    return rest[:1].upper() + rest[1:], found.group(1)


def _lines_of(cell: str, stacked: bool) -> list[str]:
    """A cell's printed lines: stacked, a value keeps its first line and what follows it (its
    interval, a note) goes under it, whichever form ``fmt_cell`` gave them."""
    head, _, rest = cell.partition(" ")
    return [head, rest] if stacked and rest else [cell]


def _estimated_width(table: Table, cells: list[list[str]], stacked: bool = False) -> float:
    widths = [len(c) for c in table.columns]
    for row, values in zip(cells, table.rows, strict=True):
        lengths = [
            max(len(line) for line in _lines_of(c, stacked and isinstance(v, Cell)))
            for c, v in zip(row, values, strict=True)
        ]
        widths = [max(w, n) for w, n in zip(widths, lengths, strict=True)]
    return sum(w * _CHAR_PT + _COL_PAD_PT for w in widths)


def _cell(text: str, value: object, stacked: bool) -> str:
    lines = _lines_of(text, stacked and isinstance(value, Cell))
    bold = isinstance(value, Cell) and value.bold
    if len(lines) == 1:
        return rf"\textbf{{{inline(text)}}}" if bold else inline(text)
    first, rest = (inline(line) for line in lines)
    if bold:
        first = rf"\textbf{{{first}}}"
    return rf"\begin{{tabular}}[t]{{@{{}}r@{{}}}}{first}\\{{\footnotesize {rest}}}\end{{tabular}}"


def _table(report: Report, index: int, table: Table) -> list[str]:
    cells = [[fmt_cell(v) for v in row] for row in table.rows]
    # wider than the page: intervals under their values, which roughly halves such a column
    stacked = _estimated_width(table, cells) > TEXT_PT
    # wider than one column: span both (table* is a plain table in a one-column document)
    env = "table*" if _estimated_width(table, cells, stacked) > COLUMN_PT else "table"
    caption, paper = _caption(table.title)
    lines = [rf"\begin{{{env}}}[htbp]"]
    if paper:
        lines.append(f"  % the paper's {paper}")
    lines += [
        r"  \centering",
        rf"  \caption{{{inline(caption)}}}",
        rf"  \label{{tab:ngb-{report.name}-{index + 1}}}",
        rf"  \ngbfit{{\begin{{tabular}}{{{_alignment(table)}}}",
        r"    \toprule",
        "    " + " & ".join(inline(c) for c in table.columns) + r" \\",
        r"    \midrule",
    ]
    for row, values in zip(cells, table.rows, strict=True):
        typeset = [_cell(c, v, stacked) for c, v in zip(row, values, strict=True)]
        lines.append("    " + " & ".join(typeset) + r" \\")
    if not table.rows:
        lines.append(rf"    \multicolumn{{{len(table.columns)}}}{{c}}{{(no matching results)}} \\")
    lines += [r"    \bottomrule", r"  \end{tabular}}"]
    for note in table.notes:
        # ragged right: a note reads as text under the table (not centred), and a long command
        # name goes to the next line instead of sticking out of this one
        lines.append(rf"  \par\smallskip{{\footnotesize\raggedright {inline(note)}\par}}")
    lines.append(rf"\end{{{env}}}")
    return lines


def latex(report: Report) -> str:
    lines = [
        f"% ngb report {report.name}: {report.title}",
        r"% needs \usepackage{booktabs,graphicx}",
    ]
    lines += [f"% {note}" for note in report.notes]
    lines.append(FIT_MACRO)
    for index, table in enumerate(report.tables):
        lines.append("")
        lines += _table(report, index, table)
    return "\n".join(lines) + "\n"
