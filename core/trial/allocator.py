"""How the C allocator treats memory freed between calls: a measured setting of every trial.

Why it matters: eager PyTorch, TorchScript and Inductor allocate each call's activations with
``malloc`` and free them at the end of the call. glibc serves large blocks with ``mmap`` and gives
them (and the heap's top) back to the kernel on ``free``, so every call faults its activation
pages in again, zeroed by the kernel. On the 2-core KVM development machine that cost ~10x more
page faults (1.57 M vs 0.16 M minor faults for 16 x 0.5 s of eager resnet18 b8) and made eager
~18 % slower (33 vs 39 samples/s) and far noisier (coefficient of variation per 0.5 s repetition
4-51 % vs 2-5 %) -- the cost of the page faults varies with what the hypervisor and the kernel's
reclaim are doing. ONNX Runtime's arena, OpenVINO's preallocated buffers and TVM's workspace pools
keep their memory anyway, so with glibc's defaults a "compiler speed-up" over eager is partly an
allocator effect. PyTorch's own CPU launcher (``torch.backends.xeon.run_cpu``) swaps in
jemalloc/tcmalloc for the same reason.

Modes (``MeasureSettings.allocator``):

- ``system`` (default): glibc's defaults, as a plain ``python`` deployment of the model runs
  (timm's ``benchmark.py``, ``torch.utils.benchmark`` too). The baseline is what users compare
  against -- their own deployment -- so it is the default, and reports name it in the baseline's
  label. (Issue 19: under ``retain`` eager resnet18 b8 ran 1.20-1.24x a plain loop of the same
  model: a real effect, but not the program users ship.)
- ``retain``: ``mallopt`` tells glibc to keep freed memory for reuse: no ``mmap``
  blocks (``M_MMAP_MAX = 0``), no trimming of the heap (``M_TRIM_THRESHOLD`` at its maximum) and
  a 256 MiB pad on growth (``M_TOP_PAD``). Calls after the warm-up reuse their pages: what a
  deployment that swaps the allocator (jemalloc/tcmalloc, PyTorch's ``run_cpu``) would see.

Set in the trial's process (and in each worker process) before the model is built; every result
records what was in force (``extra["allocator"]``). Off glibc (macOS, musl) there is no
``mallopt``: the result says "system (mallopt unavailable)" and nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

ALLOCATORS = ("retain", "system")

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_MAX = -4
_RETAIN = ((_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, 2**31 - 1), (_M_TOP_PAD, 256 << 20))
_RETAIN_TEXT = "glibc retain (M_MMAP_MAX=0, M_TRIM_THRESHOLD=2^31-1, M_TOP_PAD=256 MiB)"


def _mallopt() -> Callable[[int, int], int] | None:
    """glibc's ``mallopt``, or None where the C library has none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.mallopt
    except (OSError, AttributeError):
        return None


#: what ``apply`` put in force in this process (glibc's defaults cannot be restored once changed:
#: setting a threshold also turns off its dynamic adjustment)
_in_force: str | None = None


def apply(mode: str) -> str:
    """Put ``mode`` in force in this process; returns what is in force, for the result."""
    global _in_force
    if mode not in ALLOCATORS:
        raise ValueError(f"allocator must be one of {', '.join(ALLOCATORS)}; got {mode!r}")
    if _in_force is not None and _in_force.startswith("glibc retain"):
        # e.g. trials run in-process (--isolate inprocess): say what really ran
        return _in_force if mode == "retain" else f"{_in_force} (set earlier in this process)"
    if mode == "system":
        return "system"
    mallopt = _mallopt()
    if mallopt is None:
        return "system (mallopt unavailable)"
    refused = [param for param, value in _RETAIN if mallopt(param, value) != 1]
    if refused:
        return f"system (mallopt refused {refused})"
    _in_force = _RETAIN_TEXT
    return _RETAIN_TEXT
