"""Import hygiene, checked in fresh interpreters: what the device agent and the CLI pull in.

The agent is shipped to devices with only the standard library, numpy and psutil next to it, and
``ngb --help`` / ``ngb compilers`` must stay fast on a workstation: neither may import a compiler
library, the TUI, SSH or the database at start-up.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.cli_helpers import scaled

HEAVY = ("torch", "torchvision", "timm", "tvm", "openvino", "onnx", "onnxruntime", "tensorrt")
WORKSTATION = ("textual", "asyncssh", "duckdb", "rich", "plotext", "pyarrow")

# Runs `code`, then prints the top-level names of every module that got imported.
_PROBE = """
import json, sys
{code}
print("\\nMODULES " + json.dumps(sorted(sys.modules)))
"""


def modules_after(code: str) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE.format(code=code)],
        capture_output=True,
        text=True,
        timeout=scaled(120),
    )
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("MODULES "))
    return set(json.loads(line.removeprefix("MODULES ")))


def top_level(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def test_agent_imports_only_stdlib_numpy_psutil_and_core() -> None:
    mods = modules_after("import ngb.devices.agent")
    # Interpreter and installer machinery (not imported by ngb) is left out of the check.
    machinery = {"__main__", "_distutils_hack", "sitecustomize", "usercustomize"}
    third_party = {
        m
        for m in top_level(mods) - set(sys.stdlib_module_names) - machinery - {"ngb"}
        if not m.startswith("__editable__")
    }
    assert third_party <= {"numpy", "psutil"}, third_party
    ngb = {m for m in mods if m.startswith("ngb.")}
    assert all(m.startswith("ngb.core") or m in ("ngb.devices", "ngb.devices.agent") for m in ngb)


def test_the_trial_module_leaves_the_optional_passes_and_the_compilers_for_later() -> None:
    """Every agent and every fresh worker imports ``ngb.core.trial.measure``. Its import leaves
    out the accuracy and profiling passes (labelled data, profilers: loaded by a trial that asks
    for them) and every compiler's module (read for the "unsupported" error names at the first
    failure), and a failure is still classified by what a compiler declares."""
    mods = modules_after("import ngb.core.trial.measure")
    later = {
        "ngb.core.trial.accuracy_pass",
        "ngb.core.trial.profile_pass",
        "ngb.core.models.labelled_data",
        "ngb.core.compilers.onnx_export",
        "ngb.core.compilers.tvm_tuning",
    }
    assert not mods & later, sorted(mods & later)
    code = (
        "from ngb.core.trial.measure import classify_error\n"
        "class OpConversionFailure(Exception): pass\n"  # what OpenVINO declares (openvino.py)
        "print('KIND', classify_error(OpConversionFailure('x')))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=scaled(120)
    )
    assert "KIND unsupported" in proc.stdout, proc.stderr


@pytest.mark.parametrize(
    "code",
    [
        "import ngb.core.trial.measure, ngb.core.compilers",
        "from ngb.devices.probe import probe; probe()",
        "from ngb.sweeps.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass",
    ],
    ids=["core", "probe", "ngb-help"],
)
def test_no_heavy_imports(code: str) -> None:
    found = top_level(modules_after(code)) & set(HEAVY + WORKSTATION)
    assert not found, f"imported at start-up: {sorted(found)}"


def test_compilers_command_imports_no_compiler_library() -> None:
    code = "from ngb.sweeps.cli import main\nmain(['compilers', '--json'])"
    found = top_level(modules_after(code)) & set(HEAVY)
    assert not found, f"`ngb compilers` imported {sorted(found)}"


def test_measuring_a_timm_model_leaves_timm_and_torch_to_the_workers() -> None:
    """``ngb measure resnet18`` checks the name against the cached list of timm's names
    (``check_timm_names``): its own process imported timm, and torch with it (3.4 s on the
    2-core VM), before the trial's worker interpreters could start (issue 44). A noop trial's
    workers need neither, so any import of them here is the name check's."""
    from ngb.devices.paths import get_paths
    from ngb.sweeps.spec.checks import timm_listing_name

    listing = get_paths().cache / timm_listing_name()
    listing.parent.mkdir(parents=True, exist_ok=True)
    listing.write_text("resnet18\n", encoding="utf-8")  # as the first check of a name leaves it
    args = ["measure", "resnet18", "-c", "noop", "--repetitions", "2", "--workers", "1"]
    code = (
        f"from ngb.sweeps.cli import main\ntry:\n    main({args!r})\n"
        "except SystemExit as e:\n    assert not e.code, e.code"
    )
    found = top_level(modules_after(code)) & {"torch", "timm", "torchvision"}
    assert not found, f"ngb measure imported {sorted(found)} before its workers"
