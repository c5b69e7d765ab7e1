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
# This check's own cache, beside `make types`'s (ROOT/.mypy_cache): warm, the run below checks
# only the files written here (~0.2 CPU-s). Its options are make types's with torch and timm
# skipped (`follow_imports = skip`), since no type checked here comes from them: cold, the run
# then analyses ngb and the rest (~4.3 CPU-s on the VM) instead of also 1,485 torch modules
# (~20 CPU-s; ngb/__init__.py names the API for type checkers), which was the first `make test`
# of every fresh clone. Both configs read the same [tool.mypy] of pyproject.toml.
CACHE = ROOT / ".mypy_cache" / "types-check"
SKIPPED = ["torch", "torch.*", "timm", "timm.*"]

_WRONG = """
from ngb.core.records.types import TrialSpec


def key_length(spec: TrialSpec) -> int:
    return spec.key  # a str where an int is promised: only visible with TrialSpec's real type
"""
_RIGHT = _WRONG.replace("return spec.key ", "return len(spec.key) ")
# a write into TrialResult.extra with a typo, then the declared key (core/records/trial_extra.py)
_EXTRA = """from ngb.core.records.types import TrialResult


def note(result: TrialResult) -> None:
    result.extra["acuracy_error"] = "typo"
    result.extra["accuracy_error"] = "right"
"""
_FILES = {"uses_ngb_wrong.py": _WRONG, "uses_ngb_right.py": _RIGHT, "uses_extra.py": _EXTRA}


def _ini(value: object) -> str:
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def _config_skipping_torch(folder: Path) -> Path:
    """pyproject.toml's [tool.mypy] as a mypy.ini, with the modules in SKIPPED not followed."""
    settings = dict(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"])
    overrides = [*settings.pop("overrides", []), {"module": SKIPPED, "follow_imports": "skip"}]
    lines = ["[mypy]", *(f"{key} = {_ini(value)}" for key, value in settings.items())]
    for override in overrides:
        modules = override.pop("module")
        modules = [modules] if isinstance(modules, str) else modules
        lines += [f"[mypy-{','.join(modules)}]"]
        lines += [f"{key} = {_ini(value)}" for key, value in override.items()]
    config = folder / "mypy.ini"
    config.write_text("\n".join(lines) + "\n")
    return config


@pytest.fixture(scope="module")
def mypy_says(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """One mypy run over every file above, with `make types`'s options but torch and timm
    skipped (see CACHE)."""
    folder = tmp_path_factory.mktemp("types")
    for name, source in _FILES.items():
        (folder / name).write_text(source)
    config = _config_skipping_torch(folder)
    env = {**os.environ, "MYPYPATH": str(ROOT)}  # `ngb` as in the checkout (the links in ngb/)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(config), "--cache-dir", str(CACHE),
         *sorted(_FILES)],
        cwd=folder, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def _errors(out: subprocess.CompletedProcess[str], name: str) -> list[str]:
    return [line for line in out.stdout.splitlines() if line.startswith(f"{name}:")]


def test_every_error_is_in_the_files_checked(mypy_says: subprocess.CompletedProcess[str]) -> None:
    """Nothing in ngb itself: each error line names one of the files written here."""
    assert mypy_says.returncode == 1, mypy_says.stdout + mypy_says.stderr
    errors = [line for line in mypy_says.stdout.splitlines() if ": error:" in line]
    assert errors and all(line.split(":")[0] in _FILES for line in errors), mypy_says.stdout


def test_cross_module_type_error_fails_the_types_check(
    mypy_says: subprocess.CompletedProcess[str],
) -> None:
    assert any(
        re.match(r'uses_ngb_wrong\.py:6: error: Incompatible return value type \(got "str"', line)
        for line in _errors(mypy_says, "uses_ngb_wrong.py")
    ), mypy_says.stdout


def test_the_same_code_typed_right_passes(mypy_says: subprocess.CompletedProcess[str]) -> None:
    assert mypy_says.returncode in (0, 1), mypy_says.stderr  # 1: the other files' errors
    assert _errors(mypy_says, "uses_ngb_right.py") == [], mypy_says.stdout


def test_mypy_rejects_a_misspelt_trial_extra_key(
    mypy_says: subprocess.CompletedProcess[str],
) -> None:
    """The same check ``make types`` runs, on a write into ``TrialResult.extra`` with a typo."""
    errors = _errors(mypy_says, "uses_extra.py")
    assert any(
        line.startswith('uses_extra.py:5: error: TypedDict "TrialExtra" has no key "acuracy_error"')
        for line in errors
    ), mypy_says.stdout
    assert not any(line.startswith("uses_extra.py:6") for line in errors), mypy_says.stdout


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
