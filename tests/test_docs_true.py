"""The docs name only what exists (issue 47: docs/DESIGN.md named 30 files that no longer did).

Every file (``sweeps/run/writer.py``, ``store/ingest.py``, ``schema.py``), dotted name
(``ngb.sweeps.report.data.group_by``, ``ngb.serve``) and ``ngb`` command that README.md and
docs/*.md quote in backticks must be in this checkout: a renamed module fails here, in the
change that renamed it, not in a newcomer's afternoon. Read from the source (``ast``), nothing
imported.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SKIP = {".venv", ".git", "build", "__pycache__", "node_modules", ".pytest_cache"}
# names the docs use for the *user's* files, not ngb's
USERS_FILES = {"file.py", "devices.toml", "tui.json"}
# ngb.X: the four layers are folders of their own; everything else is the API under ngb/
LAYERS = {"core", "devices", "sweeps", "tui"}

FILE = re.compile(r"[\w./-]+\.(?:py|toml|sh|md|lock)")
DOTTED = re.compile(r"ngb(?:\.[A-Za-z_]\w*)+")
COMMAND = re.compile(r"ngb ([a-z][a-z-]*)\b.*")


def quoted(doc: Path) -> list[str]:
    return re.findall(r"`([^`\n]+)`", doc.read_text())


@cache
def files() -> tuple[set[str], set[str]]:
    """(paths relative to the root, base names) of the checkout's files."""
    paths = {
        p.relative_to(ROOT).as_posix()
        for p in ROOT.rglob("*")
        if p.is_file() and not SKIP & set(p.relative_to(ROOT).parts)
    }
    return paths, {p.rsplit("/", 1)[-1] for p in paths}


def file_exists(name: str) -> bool:
    paths, bases = files()
    if "/" not in name:
        return name in bases or name in USERS_FILES
    return name in paths or any(p.endswith("/" + name) for p in paths)


@cache
def top_level_names(source: Path) -> frozenset[str]:
    """What a module defines, assigns or imports at any depth (methods and attributes too: the
    docs name ``Class.method`` and ``module.CONSTANT`` alike)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name | ast.arg):
            names.add(node.id if isinstance(node, ast.Name) else node.arg)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
    return frozenset(names)


def dotted_exists(name: str) -> bool:
    """``ngb.a.b.c``: the longest prefix that is a module, then the next part defined in it."""
    parts = name.split(".")[1:]
    base = ROOT if parts and parts[0] in LAYERS else ROOT / "ngb"
    for cut in range(len(parts), -1, -1):
        folder = base.joinpath(*parts[:cut])
        module = folder.with_suffix(".py") if cut else None
        source = module if module is not None and module.is_file() else folder / "__init__.py"
        if not source.is_file():
            continue
        rest = parts[cut:]
        return not rest or rest[0] in top_level_names(source)
    return False


@cache
def commands() -> frozenset[str]:
    """The CLI's command names, from its table (``sweeps/cli/__init__.py``)."""
    source = (ROOT / "sweeps" / "cli" / "__init__.py").read_text()
    return frozenset(re.findall(r'^\s+"([a-z][a-z-]*)": \(', source, re.M))


def test_every_file_module_and_command_the_docs_name_exists() -> None:
    missing = []
    for doc in DOCS:
        for text in quoted(doc):
            where = f"{doc.name}: `{text}`"
            if FILE.fullmatch(text) and not text.startswith((".", "~")):
                exists = file_exists(text)
            elif DOTTED.fullmatch(text):
                exists = dotted_exists(text)
            elif (found := COMMAND.fullmatch(text)) is not None:
                exists = found.group(1) in commands()
            else:
                continue  # prose, a value, a flag: nothing that names a thing of ours
            if not exists:
                missing.append(where)
    assert not missing, "named in the docs, not in the checkout:\n" + "\n".join(missing)


def test_the_check_catches_a_renamed_file_module_name_and_command() -> None:
    assert file_exists("sweeps/run/writer.py") and file_exists("store/ingest.py")
    assert not file_exists("run_writer.py") and not file_exists("store/no_such_module.py")
    assert dotted_exists("ngb.sweeps.report.data.group_by") and dotted_exists("ngb.serve")
    assert not dotted_exists("ngb.sweeps.report.data.no_such_function")
    assert not dotted_exists("ngb.sweeps.report_data")
    assert {"run", "attach", "compare", "recover", "serve"} <= commands()
    assert "frobnicate" not in commands()
