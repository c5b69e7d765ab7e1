"""The card's four folders install under one ``ngb.`` namespace, and every package is listed."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
TOP = {"core": "ngb.core", "devices": "ngb.devices", "sweeps": "ngb.sweeps", "tui": "ngb.tui"}


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _package_folders() -> set[str]:
    found = {"ngb"}  # ngb/: the package's own __init__ (the Python API) and links to the folders
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
    mapping = {"ngb": "ngb", **{v: k for k, v in TOP.items()}}
    assert _pyproject()["tool"]["setuptools"]["package-dir"] == mapping


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


_FROM_CHECKOUT = pytest.mark.skipif(
    os.environ.get("NGB_TEST_INSTALLED") == "1", reason="needs the checkout (not the wheel test)"
)


@_FROM_CHECKOUT
def test_wheel_holds_real_files_under_ngb(tmp_path: Path) -> None:
    # ngb/core etc. are links in the checkout; the wheel must carry the files themselves
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("ngb-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        assert {"ngb/__init__.py", "ngb/core/__init__.py", "ngb/sweeps/api/notebook.py"} <= names
        assert "ngb/sweeps/presets/demo.toml" in names
        assert (
            zf.read("ngb/core/records/types.py")
            == (ROOT / "core" / "records" / "types.py").read_bytes()
        )
        assert not any(n.startswith(("core/", "devices/", "sweeps/", "tui/")) for n in names)


@_FROM_CHECKOUT
def test_editable_install_points_at_this_checkout() -> None:
    import ngb
    import ngb.core

    assert Path(ngb.__file__).resolve() == ROOT / "ngb" / "__init__.py"
    assert Path(ngb.core.__file__).resolve() == ROOT / "core" / "__init__.py"
