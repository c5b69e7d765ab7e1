"""A ``.pt2`` program's guessed integer range is said when it is measured (issue 31, item 8),
as ``ngb models --file`` says it: one ``warning:`` line from ``ngb measure`` and ``ngb run``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from ngb.core.base.errors import NgbError
from ngb.core.models.model_sources import parse_source
from ngb.sweeps.cli import cli
from ngb.sweeps.spec.model_ranges import guessed_ranges, sweep_warnings


class _Counts(torch.nn.Module):
    """An integer input nothing in the program bounds (no table it indexes)."""

    def forward(self, n: torch.Tensor) -> torch.Tensor:
        return n.float() * 2.0


class _Tokens(torch.nn.Module):
    """An integer input bounded by the 50-row table it indexes."""

    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Embedding(50, 4)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return self.table(t).sum(-1)


def _save(module: torch.nn.Module, path: Path) -> Path:
    batch = torch.export.Dim("batch", min=1, max=64)
    example = torch.ones(2, 3, dtype=torch.int64)
    program = torch.export.export(module.eval(), (example,), dynamic_shapes=({0: batch},))
    torch.export.save(program, str(path))
    return path


def test_a_guessed_range_of_a_program_is_stated(tmp_path: Path) -> None:
    _save(_Counts(), tmp_path / "counts.pt2")
    _save(_Tokens(), tmp_path / "tokens.pt2")
    (line,) = guessed_ranges(parse_source("counts.pt2", base_dir=tmp_path))
    assert line == (
        "input 'n' (int64): assumed 0..1: the program does not bound it; declare inputs with a "
        "range"
    )
    assert guessed_ranges(parse_source("tokens.pt2", base_dir=tmp_path)) == []  # 0..49
    declared = parse_source("counts.pt2", base_dir=tmp_path, inputs=())
    assert guessed_ranges(declared) == [line]
    source = parse_source("counts.pt2", base_dir=tmp_path)
    assert sweep_warnings({"counts": source.to_dict()}) == [f"counts: {line}"]


@pytest.mark.slow
def test_ngb_measure_says_the_guess_in_one_line(tmp_path: Path) -> None:
    _save(_Counts(), tmp_path / "counts.pt2")
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(
            cli,
            ["measure", "counts.pt2", "-c", "identity", "--repetitions", "1", "--min-duration",
             "0.01", "--min-iters", "2", "--warmup-iters", "1", "--warmup-s", "0"],
        )  # fmt: skip
    finally:
        os.chdir(old)
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: counts.pt2: input 'n' (int64): assumed 0..1: the program does not bound it; "
        "declare inputs with a range"
    ]


def test_a_program_this_torch_cannot_load_is_refused_only_where_it_is_built(
    tmp_path: Path,
) -> None:
    """``ngb measure`` and ``ngb profile`` build the model with this torch: the build's one line
    comes now (it came from a fresh worker, 7 CPU-s later). A sweep's device may have a torch
    that reads it: nothing is said here."""
    (tmp_path / "garbage.pt2").write_bytes(b"\xde\xad\xbe\xef" * 64)
    source = parse_source("garbage.pt2", base_dir=tmp_path)
    with pytest.raises(NgbError, match=r"^cannot load exported program garbage.pt2: BadZipFile"):
        guessed_ranges(source, built_here=True)
    assert guessed_ranges(source) == []
    assert sweep_warnings({"garbage": source.to_dict()}) == []
