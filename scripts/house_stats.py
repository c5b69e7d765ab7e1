#!/usr/bin/env python3
"""How the house looks to a checker (issue 22), read from the source's syntax trees alone:

- the share of functions with ``Any`` in their signature (parameters or return annotation),
  with the modules that hold the most of them;
- the imports that sit inside functions (deferred imports), and which of them hide an import
  loop: module B, imported inside a function of A, itself reaches A through module-level imports;
- the import loops between modules at module level (strongly connected components of the import
  graph; ``if TYPE_CHECKING:`` imports do not run and are left out);
- the loops that remain when ``if TYPE_CHECKING:`` imports count too: a type-only import still
  ties two modules together (issue 33), so the house keeps those at 0 as well.

    python scripts/house_stats.py [--top N] [--json] [--max-any PCT] [--max-loops N]

With ``--max-any`` / ``--max-loops`` it exits 1 when the figures are above them.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("core", "devices", "sweeps", "tui")


@dataclass
class ModuleFacts:
    name: str
    path: Path
    functions: int = 0
    with_any: list[str] = field(default_factory=list)
    top_imports: set[str] = field(default_factory=set)  # modules imported when this one runs
    deferred: list[tuple[str, int]] = field(default_factory=list)  # (module, line) in functions
    type_only: set[str] = field(default_factory=set)  # imported under ``if TYPE_CHECKING:``


def module_files() -> Iterator[tuple[str, Path]]:
    yield "ngb", ROOT / "ngb" / "__init__.py"
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            yield ".".join(["ngb", *parts]), path


#: names of module-level type aliases whose value mentions Any (``Row = dict[str, Any]``): a
#: signature using one has Any in it as much as one spelling it out
ANY_ALIASES: set[str] = set()


def _collect_aliases(paths: list[Path]) -> None:
    for path in paths:
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, value = node.targets[0], node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                target, value = node.target, node.value
            else:
                continue
            if isinstance(target, ast.Name) and _mentions_any(value):
                ANY_ALIASES.add(target.id)


def _mentions_any(node: ast.expr | None) -> bool:
    if node is None:
        return False
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and (sub.id == "Any" or sub.id in ANY_ALIASES):
            return True
        if isinstance(sub, ast.Attribute) and sub.attr == "Any":
            return True
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):  # "quoted" annotations
            try:
                if _mentions_any(ast.parse(sub.value, mode="eval").body):
                    return True
            except SyntaxError:
                continue
    return False


def _signature_has_any(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    a = fn.args
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
    return _mentions_any(fn.returns) or any(
        p is not None and _mentions_any(p.annotation) for p in params
    )


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """Dotted names an import statement loads (``from a import b`` may name module a.b)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module if is_package else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def read_module(name: str, path: Path) -> ModuleFacts:
    facts = ModuleFacts(name, path)
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"

    def visit(node: ast.AST, in_function: bool, cls: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                facts.functions += 1
                if _signature_has_any(child):
                    facts.with_any.append(f"{cls}{child.name}:{child.lineno}")
                visit(child, True, cls)
            elif isinstance(child, ast.ClassDef):
                visit(child, in_function, f"{cls}{child.name}.")
            elif isinstance(child, ast.Import | ast.ImportFrom):
                for target in _targets(child, name, is_package):
                    if in_function:
                        facts.deferred.append((target, child.lineno))
                    else:
                        facts.top_imports.add(target)
            elif isinstance(child, ast.If) and _is_type_checking(child):
                for sub in ast.walk(ast.Module(body=child.body, type_ignores=[])):
                    if isinstance(sub, ast.Import | ast.ImportFrom):
                        facts.type_only.update(_targets(sub, name, is_package))
                for sub in child.orelse:  # the else branch does run
                    visit(ast.Module(body=[sub], type_ignores=[]), in_function, cls)
            else:
                visit(child, in_function, cls)

    visit(tree, False, "")
    return facts


def _resolve(target: str, modules: set[str], importer: str) -> set[str]:
    """The ngb modules that run when ``target`` is imported from ``importer``: the module (or
    the nearest package above a name that is not a module) and the packages above it that are
    not already above the importer (those are initialised before the importer runs)."""
    if not target.startswith("ngb"):
        return set()
    name = target
    while name and name not in modules:
        name = name.rpartition(".")[0]
    if not name:
        return set()
    out = {name}
    above_importer = {importer.rsplit(".", i)[0] for i in range(importer.count(".") + 1)}
    parent = name.rpartition(".")[0]
    while parent:
        if parent in modules and parent not in above_importer:
            out.add(parent)
        parent = parent.rpartition(".")[0]
    out.discard(importer)
    return out


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative); components of more than one module, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = {start}, [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        for nxt in graph.get(node, ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False


def collect() -> dict[str, object]:
    files = list(module_files())
    _collect_aliases([path for _, path in files])
    facts = [read_module(name, path) for name, path in files]
    modules = {f.name for f in facts}
    graph = {
        f.name: set().union(*(_resolve(t, modules, f.name) for t in f.top_imports)) for f in facts
    }
    deferred = {
        f.name: {(d, ln) for t, ln in f.deferred for d in _resolve(t, modules, f.name)}
        for f in facts
    }
    # the whole graph: an import in a function still needs its target, just later
    both = {name: graph[name] | {d for d, _ in deferred[name]} for name in graph}
    # ... and with the type checker's imports, which tie the modules' definitions together
    typed = {
        f.name: both[f.name].union(*(_resolve(t, modules, f.name) for t in f.type_only))
        for f in facts
    }
    hidden = []
    ngb_deferred = 0
    for f in facts:
        ngb_deferred += len({ln for _, ln in deferred[f.name]})
        for dest, line in deferred[f.name]:
            if _reaches(both, dest, f.name):
                hidden.append(f"{f.path.relative_to(ROOT)}:{line} imports {dest}")
    functions = sum(f.functions for f in facts)
    with_any = sum(len(f.with_any) for f in facts)
    return {
        "modules": len(facts),
        "functions": functions,
        "functions_with_any": with_any,
        "any_share": with_any / functions if functions else 0.0,
        "any_by_module": sorted(
            ((str(f.path.relative_to(ROOT)), len(f.with_any)) for f in facts if f.with_any),
            key=lambda item: (-item[1], item[0]),
        ),
        "imports_in_functions": sum(len({ln for _, ln in f.deferred}) for f in facts),
        "ngb_imports_in_functions": ngb_deferred,
        "loops_hidden_in_functions": sorted(set(hidden)),
        "module_level_loops": strongly_connected(graph),
        "loops_with_function_imports": strongly_connected(both),
        "loops_with_type_imports": strongly_connected(typed),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=10, help="modules listed by Any count")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    parser.add_argument("--max-any", type=float, help="fail above this Any share (percent)")
    parser.add_argument("--max-loops", type=int, help="fail above this many import loops")
    args = parser.parse_args(argv)
    stats = collect()
    loops = stats["module_level_loops"]
    hidden = stats["loops_hidden_in_functions"]
    assert isinstance(loops, list) and isinstance(hidden, list)
    if args.json:
        print(json.dumps(stats, indent=1))
    else:
        share = float(stats["any_share"])  # type: ignore[arg-type]
        print(f"functions with Any in their signature: {stats['functions_with_any']} of "
              f"{stats['functions']} ({share:.1%}) in {stats['modules']} modules")  # fmt: skip
        for path, count in stats["any_by_module"][: args.top]:  # type: ignore[index]
            print(f"  {count:4d}  {path}")
        print(f"imports inside functions: {stats['imports_in_functions']} "
              f"({stats['ngb_imports_in_functions']} of ngb modules)")  # fmt: skip
        full = stats["loops_with_function_imports"]
        assert isinstance(full, list)
        print(f"import loops closed by an import inside a function: {len(full)}")
        for component in full:
            print("  " + " <-> ".join(component))
        for line in hidden:
            print(f"    {line}")
        print(f"module-level import loops: {len(loops)}")
        for component in loops:
            print("  " + " <-> ".join(component))
        typed = stats["loops_with_type_imports"]
        assert isinstance(typed, list)
        print(f"import loops with type-only (TYPE_CHECKING) imports: {len(typed)}")
        for component in typed:
            print("  " + " <-> ".join(component))
    failed = False
    if args.max_any is not None and float(stats["any_share"]) * 100 > args.max_any:  # type: ignore[arg-type]
        failed = True
    if args.max_loops is not None and len(stats["loops_with_type_imports"]) > args.max_loops:  # type: ignore[arg-type]
        failed = True  # the widest graph: its loops include every other kind
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
