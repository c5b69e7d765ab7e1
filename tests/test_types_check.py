"""The types check sees across ngb modules: a value imported from another ngb module keeps its type.

Before issue 22 mypy mapped the folders with ``ignore_missing_imports``, so anything imported from
another ngb module was ``Any`` and a deliberate error like the one below passed ``make check``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
# kept between runs (build/ is ignored): mypy then re-reads only what changed, a few seconds
CACHE = ROOT / "build" / "mypy-test-cache"

_WRONG = """
from ngb.core.records.types import TrialSpec


def key_length(spec: TrialSpec) -> int:
    return spec.key  # a str where an int is promised: only visible with TrialSpec's real type
"""
_RIGHT = _WRONG.replace("return spec.key ", "return len(spec.key) ")


def _mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "uses_ngb.py").write_text(source)
    env = {**os.environ, "MYPYPATH": str(ROOT)}  # `ngb` as in the checkout (the links in ngb/)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(CACHE), "--follow-imports", "silent", str(tmp_path / "uses_ngb.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_cross_module_type_error_fails_the_types_check(tmp_path: Path) -> None:
    out = _mypy(tmp_path, _WRONG)
    assert out.returncode == 1, out.stdout + out.stderr
    assert re.search(
        r"uses_ngb\.py:6: error: Incompatible return value type \(got \"str\"", out.stdout
    )


def test_the_same_code_typed_right_passes(tmp_path: Path) -> None:
    out = _mypy(tmp_path, _RIGHT)
    assert out.returncode == 0, out.stdout + out.stderr


def test_make_types_checks_the_installed_package_names() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert config["packages"] == ["ngb"]
    assert "ignore_missing_imports" not in config  # only per third-party module, never for ngb
    for override in config.get("overrides", []):
        if override.get("ignore_missing_imports"):
            assert not any(m.startswith("ngb") for m in override["module"]), override
    types = re.search(r"^types:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    assert types and types.group(1).strip() == "$(BIN)/mypy"


@pytest.mark.parametrize("folder", ["core", "devices", "sweeps", "tui"])
def test_ngb_links_to_the_checkout_folders(folder: str) -> None:
    link = ROOT / "ngb" / folder
    assert link.is_symlink() and os.readlink(link) == f"../{folder}"
