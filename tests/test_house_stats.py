"""scripts/house_stats.py: the figures it prints are computed, and the import loops stay gone."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from tests.script_modules import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "house_stats.py"


def _module() -> ModuleType:
    return load_script("scripts/house_stats.py")


def test_any_in_a_signature_is_found_also_through_an_alias_or_a_string() -> None:
    hs = _module()
    hs.ANY_ALIASES.add("Row")
    tree = ast.parse(
        "def a(x: int) -> str: ...\n"
        "def b(x: 'dict[str, Any]') -> None: ...\n"
        "def c(*args: typing.Any) -> None: ...\n"
        "def d() -> list[Row]: ...\n"
    )
    found = [hs._signature_has_any(fn) for fn in tree.body]
    assert found == [False, True, True, True]


def test_loops_are_strongly_connected_components() -> None:
    hs = _module()
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert hs.strongly_connected(graph) == [["a", "b", "c"]]


def test_a_type_checking_import_is_kept_apart_and_counted(tmp_path: Path) -> None:
    hs = _module()
    source = tmp_path / "a.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "import ngb.x\n"
        "if TYPE_CHECKING:\n"
        "    from ngb.y import Y\n"
        "else:\n"
        "    import ngb.z\n"
    )
    facts = hs.read_module("ngb.a", source)
    assert {"ngb.x", "ngb.z"} <= facts.top_imports and "ngb.y" not in facts.top_imports
    assert {"ngb.y", "ngb.y.Y"} <= facts.type_only


def test_the_house_has_no_import_loops_and_the_share_is_printed() -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--json"], capture_output=True, text=True, check=True
    )
    stats = json.loads(out.stdout)
    assert stats["functions"] > 1000
    assert 0 < stats["any_share"] < 1
    assert stats["functions_with_any"] == sum(n for _, n in stats["any_by_module"])
    assert stats["module_level_loops"] == []
    assert stats["loops_with_function_imports"] == [], stats["loops_hidden_in_functions"]
    assert stats["loops_with_type_imports"] == []  # issue 33: type-only imports count too
    text = subprocess.run(
        [sys.executable, str(SCRIPT), "--max-loops", "0"], capture_output=True, text=True
    )
    assert text.returncode == 0 and "functions with Any in their signature" in text.stdout
