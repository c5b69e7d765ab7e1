"""Every float option refuses NaN and the infinities (issue 31, item 3: ``--wait nan`` waited
forever on a busy store): each one, in every command, is ``options.FiniteFloat``."""

from __future__ import annotations

import importlib
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner
from ngb.sweeps.cli import COMMANDS, cli
from ngb.sweeps.cli.options import FiniteFloat


def _commands() -> Iterator[tuple[str, click.Command]]:
    seen: set[int] = set()
    stack: list[tuple[str, click.Command]] = []
    for name, (module, attr, _) in COMMANDS.items():
        stack.append((name, getattr(importlib.import_module(module), attr)))
    while stack:
        name, command = stack.pop()
        if id(command) in seen:
            continue
        seen.add(id(command))
        yield name, command
        if isinstance(command, click.Group):
            stack.extend((f"{name} {sub}", c) for sub, c in command.commands.items())


def float_options() -> list[tuple[str, click.Parameter]]:
    return [
        (name, p)
        for name, command in _commands()
        for p in command.params
        if isinstance(p.type, click.types.FloatParamType)
    ]


def test_every_float_option_is_finite() -> None:
    found = float_options()
    assert len(found) >= 10, found  # --wait (5 commands), advise's limits, measure's, timeouts
    plain = [f"{name} {p.opts[0]}" for name, p in found if not isinstance(p.type, FiniteFloat)]
    assert not plain, f"float options that take nan/inf: {plain}"


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400", "NaN"])
def test_query_wait_refuses_non_finite(value: str) -> None:
    r = CliRunner().invoke(cli, ["query", "SELECT 1", "--wait", value])
    assert r.exit_code != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--wait" in lines[0], r.stderr
