"""Versions of everything that shapes a measurement, recorded with every result.

Read from installed distribution metadata (``ngb.core.base.installed``: one scan of
``importlib.metadata``, cached on disk) and, for CUDA, from ``torch/version.py`` parsed as
text, so collecting versions never imports torch, TVM or OpenVINO: the probe and ``ngb
compilers`` stay fast on a Jetson where importing torch takes seconds.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import platform
import sys
from pathlib import Path

from ngb.core.base.installed import dist_version
from ngb.core.compilers import version_packages

__all__ = ["cudnn_version", "dist_version", "library_versions", "torch_cuda_version"]

# label -> distribution names to try, first installed wins. These are the libraries every trial
# may touch; each compiler declares its own (``Compiler.version_packages``), added below.
_DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "torchvision": ("torchvision",),
    "timm": ("timm",),
    "onnx": ("onnx",),
    "numpy": ("numpy",),
    "psutil": ("psutil",),
}
_CUDNN_DISTRIBUTIONS = ("nvidia-cudnn-cu13", "nvidia-cudnn-cu12", "nvidia-cudnn-cu11")


def torch_cuda_version() -> str | None:
    """CUDA version torch was built for, read from ``torch/version.py`` without importing torch.

    If torch is already imported we ask it directly (same answer, no parsing).
    """
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "version"):
        return getattr(torch.version, "cuda", None)
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError):
        return None
    for node in tree.body:
        if isinstance(node, ast.AnnAssign):  # cuda: Optional[str] = '13.2'
            targets: list[ast.expr] = [node.target]
            value = node.value
        elif isinstance(node, ast.Assign):  # cuda = '13.2'
            targets, value = node.targets, node.value
        else:
            continue
        if value is not None and any(isinstance(t, ast.Name) and t.id == "cuda" for t in targets):
            try:
                found = ast.literal_eval(value)
            except ValueError:
                return None
            return str(found) if found else None
    return None


def cudnn_version() -> str | None:
    """cuDNN: torch's own answer when torch is loaded, else the pip wheel torch depends on."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.backends.cudnn.is_available():
                return str(torch.backends.cudnn.version())
        except Exception:  # noqa: S110 - a broken CUDA setup must not break a result
            pass
    return dist_version(*_CUDNN_DISTRIBUTIONS)


def library_versions() -> dict[str, str]:
    """Installed versions of the benchmark's libraries; missing ones are left out.

    Read once per process (a copy each call): 10-40 ms of metadata parsing that every worker
    of every trial paid again, though nothing installs a package under a running agent; a
    forked worker takes the answer its trial's process read before the fork (``preload``)."""
    return dict(_library_versions())


@functools.cache
def _library_versions() -> dict[str, str]:
    out: dict[str, str] = {"python": platform.python_version()}
    for label, dists in {**_DISTRIBUTIONS, **version_packages()}.items():
        version = dist_version(*dists)
        if version:
            out[label] = version
    installed = dist_version("ngb")  # None in the agent's bundle, which is no distribution
    if installed is None:
        from ngb.core import __version__

        installed = __version__
    out["ngb"] = installed
    cuda = torch_cuda_version()
    if cuda:
        out["cuda"] = cuda
    cudnn = cudnn_version()
    if cudnn:
        out["cudnn"] = cudnn
    return out
