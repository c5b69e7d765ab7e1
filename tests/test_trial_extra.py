"""``TrialResult.extra`` is declared once (``ngb.core.records.trial_extra``, issue 47).

mypy rejects an undeclared key written into a ``TrialExtra`` (and ``extra["key"]`` read), but
lets ``.get("key")`` pass and cannot see JSON read back as a plain dict, so the sources are also
scanned here: every literal key written into or read from a trial's ``extra`` -- ``extra["k"]``,
``.get/.pop/.setdefault("k")``, ``"k" in extra``, ``.update`` with literal keys, dict literals
given as ``extra=`` or as a record's ``"extra"``, SQL's ``json_extract(t.extra, '$.k')`` -- must
be one ``TrialExtra`` declares. A key written through a name (``serve_trial.EXTRA``, a ``Final``)
or into a ``CompilerFacts`` local (OpenVINO's properties) is mypy's to check, not this scan's.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path

from ngb.core.records import trial_extra
from ngb.core.records.trial_extra import KEYS, TrialExtra, from_json, unknown_keys
from ngb.core.records.types import TrialResult

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("core", "devices", "sweeps", "tui")
#: files where a local named ``extra`` is another record: a ``run_devices`` row's JSON (what
#: ``attach`` needs: started, offset, pid, ...), not a trial's; reads through ``.extra`` or a
#: trial row's ``"extra"`` are still scanned there
OTHER_EXTRA = {"sweeps/run/state.py"}
#: SQL reading a key out of the stored JSON: ``json_extract_string(t.extra, '$.run_device')``
_SQL = re.compile(r"json_extract(?:_string)?\((?:\w+\.)?extra, '\$\.(\w+)")
#: the ``serving`` table's own ``extra`` (``ngb.sweeps.store.serving_rows``), which SQL reads
#: beside the trials': the trial a served row belongs to
SERVING_EXTRA = {"trial_key"}
#: what ``extra`` calls read or write a key by their first argument
_KEYED = {"get", "pop", "setdefault"}


def _is_extra(node: ast.expr, names_count: bool) -> bool:
    """Whether ``node`` is a trial's ``extra``: ``x.extra``, a local ``extra``, ``row["extra"]``
    or ``row.get("extra")`` (bare, or through ``mapping``/``from_json``-like calls)."""
    if isinstance(node, ast.Attribute):
        return node.attr == "extra"
    if isinstance(node, ast.Name):
        return names_count and node.id == "extra"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "extra"
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "get" and node.args:
            first = node.args[0]
            return isinstance(first, ast.Constant) and first.value == "extra"
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name == "from_json":
            return True
        return len(node.args) == 1 and _is_extra(node.args[0], names_count=False)
    return False


def _literal_keys(node: ast.expr | None) -> Iterator[ast.Constant]:
    if isinstance(node, ast.Dict):
        yield from (k for k in node.keys if isinstance(k, ast.Constant))


def keys_used(source: str, names_count: bool = True) -> Iterator[tuple[int, object]]:
    """``(line, key)`` of every literal key ``source`` puts in or reads from a trial's extra."""
    for node in ast.walk(ast.parse(source)):
        yield from _read_or_written(node, names_count)
        yield from _given(node)


def _read_or_written(node: ast.AST, names_count: bool) -> Iterator[tuple[int, object]]:
    """``extra["k"]``, ``extra.get/pop/setdefault("k")``, ``.update(...)``, ``"k" in extra``."""
    if isinstance(node, ast.Subscript) and _is_extra(node.value, names_count):
        if isinstance(node.slice, ast.Constant):
            yield node.lineno, node.slice.value
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if not _is_extra(node.func.value, names_count):
            return
        if node.func.attr in _KEYED and node.args and isinstance(node.args[0], ast.Constant):
            yield node.lineno, node.args[0].value
        elif node.func.attr == "update":
            yield from ((node.lineno, k.arg) for k in node.keywords if k.arg)
            for arg in node.args:
                yield from ((k.lineno, k.value) for k in _literal_keys(arg))
    elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant):
        inside = any(isinstance(op, ast.In | ast.NotIn) for op in node.ops)
        if inside and any(_is_extra(c, names_count) for c in node.comparators):
            yield node.lineno, node.left.value


def _given(node: ast.AST) -> Iterator[tuple[int, object]]:
    """A whole extra given as a literal: ``extra={...}``, ``{"extra": {...}}``,
    ``record["extra"] = {...}``."""
    found: list[ast.Constant] = []
    if isinstance(node, ast.Call):  # TrialResult(extra={...}), replace(r, extra={...})
        for kw in node.keywords:
            if kw.arg == "extra":
                found.extend(_literal_keys(kw.value))
    elif isinstance(node, ast.Dict):
        for k, v in zip(node.keys, node.values, strict=True):
            if isinstance(k, ast.Constant) and k.value == "extra":
                found.extend(_literal_keys(v))
    elif isinstance(node, ast.Assign) and any(
        isinstance(t, ast.Subscript) and _is_extra(t, False) for t in node.targets
    ):
        found.extend(_literal_keys(node.value))
    yield from ((c.lineno, c.value) for c in found)


def _sources() -> Iterator[tuple[str, str]]:
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path.read_text()


def _every_key() -> dict[object, list[str]]:
    found: dict[object, list[str]] = {}
    for name, source in _sources():
        for line, key in keys_used(source, names_count=name not in OTHER_EXTRA):
            found.setdefault(key, []).append(f"{name}:{line}")
    return found


def test_every_key_written_or_read_is_declared() -> None:
    undeclared = {k: where for k, where in _every_key().items() if k not in KEYS}
    assert not undeclared, f"keys of TrialResult.extra not in TrialExtra: {undeclared}"


def test_every_key_sql_reads_is_declared() -> None:
    read = {(m.group(1), name) for name, source in _sources() for m in _SQL.finditer(source)}
    assert {k for k, _ in read} >= {"run_device", "slurm", "measure", "profile_error"}
    undeclared = sorted((k, n) for k, n in read if k not in KEYS | SERVING_EXTRA)
    assert not undeclared, f"SQL reads keys of extra not in TrialExtra: {undeclared}"


def test_the_scan_sees_the_producers_and_readers() -> None:
    """The scan must not rot into finding nothing: keys from every layer's writers and readers."""
    found = _every_key()
    expected = {
        "measure", "workers", "accuracy", "accuracy_error", "profile_error", "slurm", "run_device",
        "stored_device", "requests_in_flight", "torch_threads", "spec", "worker_start",
        "device_state", "optimisation", "provenance", "fidelity",
    }  # fmt: skip
    assert expected <= set(found), expected - set(found)
    assert any(w.startswith("sweeps/report/") for w in found["accuracy"]), found["accuracy"]
    assert any(w.startswith("tui/") for w in found["workers"]), found["workers"]


def test_the_scan_flags_a_misspelt_key() -> None:
    source = (
        'result.extra["acuracy"] = 1\n'
        'x = from_json(row.get("extra")).get("mesure")\n'
        'y = mapping(r.get("extra")).get("slurmm")\n'
        'out = {"extra": {"run_devise": "gpu"}}\n'
        'z = replace(r, extra={"spek": {}})\n'
        "compiled.extra.update(torch_thread=2)\n"
        'w = "profil" in extra\n'
    )
    keys = {k for _, k in keys_used(source)}
    assert keys == {"acuracy", "mesure", "slurmm", "run_devise", "spek", "torch_thread", "profil"}
    assert not keys & KEYS


def test_an_unknown_key_rides_through_json_and_reads_as_declared() -> None:
    """A newer agent's key: kept through the record's JSON round trip and the loader (an older
    ngb stores it unchanged), named by ``unknown_keys``, never in the way of declared reads."""
    result = TrialResult(key="k", spec={"model": "m"})
    result.extra["measure"] = {"df": 3}
    result.extra["allocator"] = "system"
    sent = json.loads(json.dumps(result.to_dict()))
    sent["extra"]["from_a_newer_agent"] = {"x": 1}
    back = TrialResult.from_dict(sent)
    assert back.extra["from_a_newer_agent"] == {"x": 1}  # type: ignore[typeddict-item]
    for loaded in (from_json(back.extra), from_json(json.dumps(sent["extra"]))):
        assert loaded.get("measure") == {"df": 3}
        assert loaded.get("allocator") == "system"
        assert unknown_keys(loaded) == ["from_a_newer_agent"]
        assert json.loads(json.dumps(loaded)) == sent["extra"]  # stored as it came
    assert unknown_keys(result.extra) == []


def test_the_loader_reads_anything_else_as_empty() -> None:
    for junk in (None, "", "not json", "[1, 2]", 3, [("measure", 1)], {1: "a"}):
        assert from_json(junk) == {}, junk
    row = {"extra": {"accuracy_error": "no labels"}}
    assert from_json(row["extra"]) is row["extra"]  # read in place, not copied


def test_the_declaration_is_the_compiler_facts_and_the_trial_keys() -> None:
    assert trial_extra.CompilerFacts.__optional_keys__ <= KEYS
    assert {"measure", "serving", "slurm", "profile"} <= TrialExtra.__optional_keys__
    assert not TrialExtra.__required_keys__  # every key is optional: a failed trial has none


# mypy's own check of a misspelt key (one mypy run for every types test):
# tests/test_types_check.py::test_mypy_rejects_a_misspelt_trial_extra_key
