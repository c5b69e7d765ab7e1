"""The card's four folders install under one ``ngb.`` namespace, and every package is listed."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
TOP = {"core": "ngb.core", "devices": "ngb.devices", "sweeps": "ngb.sweeps", "tui": "ngb.tui"}


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _package_folders() -> set[str]:
    found = set()
    for folder, dotted in TOP.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            parts = [p for p in rel.parts if p]
            if "__pycache__" in parts:
                continue
            found.add(".".join([dotted, *parts]))
    return found


def test_every_package_folder_is_listed() -> None:
    listed = set(_pyproject()["tool"]["setuptools"]["packages"])
    assert _package_folders() == listed


def test_package_dir_maps_the_four_folders() -> None:
    assert _pyproject()["tool"]["setuptools"]["package-dir"] == {v: k for k, v in TOP.items()}


@pytest.mark.parametrize("name", sorted(_package_folders()))
def test_every_listed_package_imports(name: str) -> None:
    assert importlib.import_module(name).__name__ == name


def test_no_bare_top_level_packages_are_importable() -> None:
    # A generic `core` or `devices` in site-packages would shadow other projects' modules.
    code = (
        "import importlib.util; "
        "print([n for n in ('core', 'devices', 'sweeps', 'tui') if importlib.util.find_spec(n)])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd="/", capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_console_scripts_point_at_real_functions() -> None:
    scripts = _pyproject()["project"]["scripts"]
    assert set(scripts) == {"ngb", "ngb-tui"}
    for target in scripts.values():
        module, _, attr = target.partition(":")
        assert callable(getattr(importlib.import_module(module), attr))


def test_lock_pins_every_dependency_exactly() -> None:
    lines = [
        ln
        for ln in (ROOT / "requirements.lock").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    assert lines and all("==" in ln for ln in lines), [ln for ln in lines if "==" not in ln]
