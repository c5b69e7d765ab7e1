r"""A ``Report`` as LaTeX tables in booktabs style, ready to ``\input`` into a paper.

One ``table`` float per report table: caption on top (IEEE style), label ``tab:ngb-<report>-<n>``,
``\toprule`` / ``\midrule`` / ``\bottomrule`` and no vertical rules, numeric columns right-aligned,
the table's notes in small type under it. The report's own notes (the data source) become ``%``
comments, so they travel with the file without printing. The preamble needs
``\usepackage{booktabs}``. Values are formatted exactly as in the other human formats
(``fmt_cell``), with TeX's special characters escaped.
"""

from __future__ import annotations

import re

from ngb.sweeps.report_data import Cell, Report, Table
from ngb.sweeps.report_format import fmt_cell

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
    "–": "--",
    "—": "---",
}
_PATTERN = re.compile("|".join(re.escape(k) for k in _ESCAPES))


def escape(text: str) -> str:
    return _PATTERN.sub(lambda m: _ESCAPES[m.group(0)], text)


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


def _table(report: Report, index: int, table: Table) -> list[str]:
    lines = [
        r"\begin{table}[htbp]",
        r"  \centering",
        rf"  \caption{{{escape(table.title)}}}",
        rf"  \label{{tab:ngb-{report.name}-{index + 1}}}",
        rf"  \begin{{tabular}}{{{_alignment(table)}}}",
        r"    \toprule",
        "    " + " & ".join(escape(c) for c in table.columns) + r" \\",
        r"    \midrule",
    ]
    for row in table.rows:
        lines.append("    " + " & ".join(escape(fmt_cell(v)) for v in row) + r" \\")
    if not table.rows:
        lines.append(rf"    \multicolumn{{{len(table.columns)}}}{{c}}{{(no matching results)}} \\")
    lines += [r"    \bottomrule", r"  \end{tabular}"]
    for note in table.notes:
        lines.append(rf"  \par\smallskip{{\footnotesize {escape(note)}}}")
    lines.append(r"\end{table}")
    return lines


def latex(report: Report) -> str:
    lines = [f"% ngb report {report.name}: {report.title}", r"% needs \usepackage{booktabs}"]
    lines += [f"% {note}" for note in report.notes]
    for index, table in enumerate(report.tables):
        lines.append("")
        lines += _table(report, index, table)
    return "\n".join(lines) + "\n"
