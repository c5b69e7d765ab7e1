"""The Results table at 80 columns: keep the key columns, drop the rest with a note.

The full table (``results_data.TABLE_COLUMNS``) needs about 120 columns. On a narrow terminal the
columns that matter for a verdict stay (compiler, batch and depth, throughput and speed-up with
their intervals, RTR/ASE/BSR and the flags); the model (the one chosen above the table) and the
repetition count go, batch and depth share a column (``b×d``) and the long compiler names are
abbreviated. The screen shows ``NOTE`` so nothing disappears silently. Only the view changes:
cells are passed through as ``results_data`` formatted them.
"""

from __future__ import annotations

from collections.abc import Sequence

#: below this width the narrow table is used
NARROW_BELOW = 120
DROPPED = ("model", "n")
SHORT_NAMES = {
    "identity": "eager",
    "onnxruntime": "ORT",
    "openvino": "OV",
    "torchscript": "TS",
    "inductor": "ind",
    "tensorrt": "TRT",
}
HEADERS = {"compiler": "comp", "throughput [95%]": "tput [95%]", "speed-up [95%]": "speed-up"}
SHORT_FLAGS = {"unstable": "unst", "disturbed": "dist"}
NOTE = "80 cols: model, n hidden; b×d=batch×depth; eager=identity; unst=unstable"


def narrow(
    columns: Sequence[str], rows: Sequence[Sequence[str]], numeric: set[int]
) -> tuple[list[str], list[list[str]], set[int]]:
    """(columns, rows, numeric column indices) of the narrow table."""
    index = {name: i for i, name in enumerate(columns)}
    keep = [c for c in columns if c not in DROPPED]
    out_cols: list[str] = []
    plan: list[tuple[str, int | tuple[int, int]]] = []
    for name in keep:
        if name == "depth" and "batch" in index:
            continue  # folded into b×d
        if name == "batch" and "depth" in index:
            out_cols.append("b×d")
            plan.append(("bd", (index["batch"], index["depth"])))
            continue
        out_cols.append(HEADERS.get(name, name))
        plan.append((name, index[name]))
    out_rows = []
    for row in rows:
        cells = []
        for name, at in plan:
            if isinstance(at, tuple):
                cells.append(f"{row[at[0]]}×{row[at[1]]}")
            elif name == "compiler":
                cells.append(SHORT_NAMES.get(row[at], row[at]))
            elif name == "flags":
                cells.append(" ".join(SHORT_FLAGS.get(f, f) for f in row[at].split(" ")))
            else:
                cells.append(row[at])
        out_rows.append(cells)
    out_numeric = {i for i, (name, at) in enumerate(plan) if isinstance(at, tuple) or at in numeric}
    return out_cols, out_rows, out_numeric
