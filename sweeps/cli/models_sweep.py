"""``ngb models --file SWEEP``: every model a sweep runs, with its source, inputs, params and MACs.

A model that cannot be built here (a factory that raises, a file that changed) gets its one-line
error in its row; the others are still listed, and the command exits 1.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, TypedDict

import click
from ngb.core.base.errors import NgbError, one_line

if TYPE_CHECKING:
    from ngb.sweeps.spec.sweep import Sweep


class ModelRow(TypedDict, total=False):
    """One model of a sweep as listed (``error`` instead of the counts when it cannot be built)."""

    model: str
    source: str | None
    takes: str
    inputs: str
    params: int
    macs: int
    error: str


def _rows(sweep: Sweep) -> list[ModelRow]:
    from ngb.core.models import models as core_models
    from ngb.core.models.model_sources import ModelSource
    from ngb.core.records.types import BLOCK_MODELS

    seen: dict[tuple[str, int | None], None] = {}
    for matrix in sweep.matrices:
        for name in matrix.models:
            for width in matrix.widths if name in BLOCK_MODELS else (None,):
                seen.setdefault((name, width), None)
    rows = []
    for name, width in seen:
        row: ModelRow = {"model": name if width is None else f"{name}{width}"}
        raw = sweep.model_sources.get(name)
        try:
            if raw is not None:
                source = ModelSource.from_dict(raw)
                info = core_models.source_info(name, source)
                row.update({"source": info.source, "takes": source.takes, "inputs": info.inputs})
            else:
                info = core_models.model_info(name, width=width)
                row.update({"source": "block" if width else f"timm {name}", "takes": "torch"})
                row["inputs"] = f"input float32[batch,{','.join(map(str, info.input_shape[1:]))}]"
            row.update({"params": info.params, "macs": info.macs})
        except NgbError as exc:
            row["error"] = str(exc)
        except Exception as exc:  # noqa: BLE001 - user code fails in any way; one line per model
            row["error"] = one_line(exc)
        rows.append(row)
    return rows


def list_sweep_models(
    sweep_file: str,
    as_json: bool,
    render: Callable[[list[str], list[list[str]], set[int]], list[str]],
) -> bool:
    """Print the table (or JSON); False when some model could not be counted."""
    from ngb.core.base.isolate import call_in_child
    from ngb.core.compilers import onnx_compilers
    from ngb.core.models.models import MACS_COUNTER
    from ngb.sweeps.spec.sweep import load_sweep

    sweep = load_sweep(sweep_file)
    # Built in a child process: user code that ends its process (os._exit, sys.exit) is an
    # error line here, not a silent exit 0 of ngb itself.
    rows = call_in_child(f"{sweep_file}: building its models", _rows, sweep)
    ok = not any("error" in r for r in rows)
    for r in rows:
        if "error" in r:
            click.echo(f"error: model {r['model']!r}: {r['error']}", err=True)
    if as_json:
        payload = {"sweep": sweep.name, "baseline": sweep.baseline, "macs_counter": MACS_COUNTER}
        click.echo(json.dumps({**payload, "models": rows}, indent=2))
        return ok
    table = []
    for r in rows:
        if "error" in r:
            table.append([r["model"], str(r.get("source") or ""), "-", "-", f"error: {r['error']}"])
            continue
        table.append(
            [
                r["model"],
                str(r["source"]),
                f"{r['params']:,}",
                f"{r['macs'] / 1e6:,.2f}",
                r["inputs"],
            ]  # fmt: skip
        )
    lines = [f"Models of sweep {sweep.name!r} (baseline: {sweep.baseline})"]
    lines += render(
        ["model", "source", "params", "MMACs", "inputs (batch 1 for MACs)"], table, {2, 3}
    )
    onnx = [r["model"] for r in rows if r.get("takes") == "onnx"]
    if onnx:
        lines += [
            "",
            f"ONNX files ({', '.join(onnx)}) run on the compilers that take ONNX "
            f"({', '.join(onnx_compilers())}); other pairs are recorded as unsupported.",
        ]
    lines += ["", f"MACs: {MACS_COUNTER}; ONNX files: the same ops counted from the graph."]
    click.echo("\n".join(lines))
    return ok
