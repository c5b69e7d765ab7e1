"""``ngb models``: the paper's Table IV (timm models) and Table V (blocks) with params and MACs;
``ngb models --file SWEEP`` lists a sweep's own models instead (``models_sweep``).

Counting builds each model on torch's meta device (seconds for all 15, plus the torch/timm import);
the table is cached in ngb's cache folder keyed by the torch and timm versions, so later calls
import neither.
"""

from __future__ import annotations

import json
import sys

import click
from ngb.core.base.errors import UnknownNameError


def _fmt_shape(shape: tuple[int, ...]) -> str:
    return "x".join(str(n) for n in shape)


def _render(headers: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        parts = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    return [line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)]


@click.command("models")
@click.option(
    "--family", "-f", help="Only this family (resnet, efficientnet, deit, swin, convnext)."
)
@click.option(
    "--blocks/--no-blocks",
    default=None,
    help="Include the conv/MHA blocks (Table V); on by default unless --family is given.",
)
@click.option(
    "--file",
    "sweep_file",
    metavar="SWEEP",
    help="List the models of this sweep file (or preset) instead: yours and timm's.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def models(family: str | None, blocks: bool | None, sweep_file: str | None, as_json: bool) -> None:
    """List the paper's models (Table IV) and blocks (Table V) with parameters and MACs."""
    from ngb.core.models.models import MACS_COUNTER, PAPER_FAMILIES, paper_table
    from ngb.devices.paths import get_paths

    if sweep_file is not None:
        from ngb.sweeps.cli.models_sweep import list_sweep_models

        if not list_sweep_models(sweep_file, as_json, _render):
            sys.exit(1)
        return

    if family is not None and family not in PAPER_FAMILIES:
        raise UnknownNameError("family", family, list(PAPER_FAMILIES))
    show_blocks = blocks if blocks is not None else family is None

    cache = get_paths().cache

    def note(done: int, total: int, label: str) -> None:
        if done == 0:
            click.echo(
                f"counting parameters and MACs for {total} models/blocks "
                f"(first run; cached in {cache}) ...",
                err=True,
            )

    table = paper_table(cache_dir=cache, progress=note)
    chosen = [m for m in table.models if family is None or m.family == family]
    block_rows = list(table.blocks) if show_blocks else []

    if as_json:
        payload = {
            "macs_counter": MACS_COUNTER,
            "models": [
                {
                    "family": m.family,
                    "model": m.name,
                    "params": m.params,
                    "macs": m.macs,
                    "gmacs": round(m.gmacs, 4),
                    "input_shape": list(m.input_shape),
                }
                for m in chosen
            ],
            "blocks": [
                {
                    "type": b.name,
                    "width": b.width,
                    "params": b.params,
                    "macs": b.macs,
                    "input_shape": list(b.input_shape),
                }
                for b in block_rows
            ],
        }
        click.echo(json.dumps(payload, indent=2))
        return

    lines = ["Models (paper Table IV)"]
    lines += _render(
        ["family", "model", "params", "GMACs", "input"],
        [
            [m.family or "", m.name, f"{m.params:,}", f"{m.gmacs:.3f}", _fmt_shape(m.input_shape)]
            for m in chosen
        ],
        right={2, 3},
    )
    if block_rows:
        lines += ["", "Blocks, per block (paper Table V)"]
        lines += _render(
            ["type", "width", "params", "MMACs", "input"],
            [
                [
                    b.name,
                    str(b.width),
                    f"{b.params:,}",
                    f"{b.macs / 1e6:.2f}",
                    _fmt_shape(b.input_shape),
                ]
                for b in block_rows
            ],
            right={1, 2, 3},
        )
    lines += ["", f"MACs: {MACS_COUNTER}."]
    click.echo("\n".join(lines))
    sys.stdout.flush()
