"""Numeric precision: what a trial asks for, how torch is told, and what a result records.

A trial asks for one of ``ngb.core.records.types.PRECISIONS`` (``MeasureSettings.precision``). Each
compiler declares which it can honour per device (``Compiler.precisions``); anything else is an
``unsupported`` trial with a one-line reason, never a silent switch. Every result records the
precision that actually ran (``TrialResult.precision``), read back from the runtime, plus the raw
settings read back (``TrialResult.precision_flags``):

* torch (identity, torchscript, inductor): the fp32 mode of cuBLAS matmuls, cuDNN convolutions
  and oneDNN (torch >= 2.9's ``torch.backends.*.fp32_precision``; before that
  ``torch.set_float32_matmul_precision`` and the ``allow_tf32`` switches, which are also recorded
  where torch still answers them), ``torch.backends.cudnn.benchmark`` and the model's dtype.
  PyTorch's own default keeps CUDA matmuls in fp32 but lets cuDNN convolutions use TF32
  (``tf32-conv``); ``fp32`` turns TF32 off everywhere (matmul precision "highest"); ``tf32`` turns
  it on for both. ``bf16``/``fp16`` cast the model and its input to that dtype.
* OpenVINO: ``INFERENCE_PRECISION_HINT`` as compiled (bf16 on CPUs with AVX512-BF16/AMX unless
  asked for f32); ONNX Runtime: the CUDA EP's ``use_tf32`` provider option (on by default);
  TensorRT: the builder flags (TF32 on by default).

torch is imported inside functions only.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    import torch

#: torch dtype name -> ngb precision, for models cast by ``bf16``/``fp16``
_DTYPE_PRECISION = {"bfloat16": "bf16", "float16": "fp16"}


#: torch >= 2.9's per-backend fp32 modes (``torch.backends.<path>.fp32_precision``): "ieee" is
#: strict fp32, "tf32"/"bf16" allow that internal format, "none" inherits from the global one.
#: Read only (see ``set_torch_flags``).
_BACKENDS = ("cuda.matmul", "cudnn.conv", "cudnn.rnn", "mkldnn.matmul", "mkldnn.conv", "mkldnn.rnn")


class SavedFlags(TypedDict):
    """torch's legacy precision switches as ``set_torch_flags`` found them."""

    float32_matmul_precision: str
    cuda_matmul_allow_tf32: bool
    cudnn_allow_tf32: bool


#: torch's precision settings as read back (``torch_flags``): modes and names are strings,
#: switches booleans
TorchFlags = dict[str, str | bool]


def _fp32_mode(backends: object, path: str = "") -> str:
    """``torch.backends.<path>.fp32_precision`` (torch >= 2.9; no path: the global mode)."""
    obj = backends
    for part in [*filter(None, path.split(".")), "fp32_precision"]:
        obj = getattr(obj, part)
    return str(obj)


def _effective() -> dict[str, str]:
    """Each backend's fp32 mode as it applies ("none" resolved through the global default)."""
    import torch

    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):  # torch >= 2.9
        glob = _fp32_mode(torch.backends)
        glob = "ieee" if glob == "none" else glob
        modes = {p: _fp32_mode(torch.backends, p) for p in _BACKENDS}
        return {p: glob if m == "none" else m for p, m in modes.items()}
    matmul = torch.get_float32_matmul_precision()  # torch < 2.9: the legacy switches
    cuda_mm = "tf32" if torch.backends.cuda.matmul.allow_tf32 else "ieee"
    conv = "tf32" if torch.backends.cudnn.allow_tf32 else "ieee"
    cpu_mm = "bf16" if matmul == "medium" else "ieee"
    return {
        "cuda.matmul": cuda_mm,
        "cudnn.conv": conv,
        "cudnn.rnn": conv,
        "mkldnn.matmul": cpu_mm,
        "mkldnn.conv": "ieee",
        "mkldnn.rnn": "ieee",
    }


def torch_flags(dtype: torch.dtype | None = None) -> TorchFlags:
    """torch's precision settings as they are now (plus the model dtype, if given)."""
    import torch

    flags: TorchFlags = dict(_effective())
    # The legacy views, where this torch can still answer (torch >= 2.9 refuses once the new
    # API has been used): what timm's benchmark and most user code set.
    reads: tuple[tuple[str, Callable[[], str | bool]], ...] = (
        ("float32_matmul_precision", torch.get_float32_matmul_precision),
        ("cuda_matmul_allow_tf32", lambda: bool(torch.backends.cuda.matmul.allow_tf32)),
        ("cudnn_allow_tf32", lambda: bool(torch.backends.cudnn.allow_tf32)),
    )
    for name, read in reads:
        with contextlib.suppress(RuntimeError):
            flags[name] = read()
    flags["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
    if dtype is not None:
        flags["dtype"] = str(dtype).removeprefix("torch.")
    return flags


def resolve_torch(flags: Mapping[str, object], device: str) -> str:
    """The precision torch runs at, given ``torch_flags`` and the device."""
    dtype = str(flags.get("dtype", "float32"))
    if dtype in _DTYPE_PRECISION:
        return _DTYPE_PRECISION[dtype]
    if device == "cuda":
        matmul = flags["cuda.matmul"] == "tf32"
        conv = flags["cudnn.conv"] == "tf32"
        if matmul and conv:
            return "tf32"
        return "tf32-conv" if conv else ("tf32-matmul" if matmul else "fp32")
    lowered = {str(flags["mkldnn.matmul"]), str(flags["mkldnn.conv"])} - {"ieee"}
    return "fp32" if not lowered else "-".join(sorted(lowered)) + "-cpu"


def set_torch_flags(precision: str) -> SavedFlags:
    """Apply ``fp32`` (strict) or ``tf32`` to torch's process-wide switches; return what to restore.

    strict fp32 = ``set_float32_matmul_precision("highest")`` with TF32 off for cuBLAS and cuDNN;
    tf32 = "high" with both on. ``default`` (and the dtype casts ``bf16``/``fp16``) leave them
    alone. Written through the legacy switches on purpose: torch >= 2.9 maps them onto its
    per-backend modes, while writing those modes directly makes every later read of the legacy
    switches raise -- and inductor, timm and user code still read them.
    """
    import torch

    saved: SavedFlags = {
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda_matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
    }
    if precision == "fp32":
        _set_legacy("highest", False)
    elif precision == "tf32":
        _set_legacy("high", True)
    return saved


def _set_legacy(matmul_precision: str, tf32: bool) -> None:
    import torch

    with warnings.catch_warnings():  # some torch releases announce the switches' deprecation
        warnings.simplefilter("ignore")
        torch.set_float32_matmul_precision(matmul_precision)
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32


def restore_torch_flags(saved: SavedFlags) -> None:
    """Put back what ``set_torch_flags`` returned."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.set_float32_matmul_precision(saved["float32_matmul_precision"])
        torch.backends.cuda.matmul.allow_tf32 = saved["cuda_matmul_allow_tf32"]
        torch.backends.cudnn.allow_tf32 = saved["cudnn_allow_tf32"]


@contextlib.contextmanager
def strict_fp32() -> Iterator[None]:
    """Strict fp32 for the duration (the eager reference every output is compared with)."""
    before = set_torch_flags("fp32")
    try:
        yield
    finally:
        restore_torch_flags(before)


def torch_dtype(precision: str) -> torch.dtype | None:
    """The dtype a ``bf16``/``fp16`` trial casts to, else None (fp32 weights)."""
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)


def openvino_hint(precision: str) -> str | None:
    """ngb precision -> OpenVINO ``INFERENCE_PRECISION_HINT`` (None: the device default)."""
    return {"fp32": "f32", "bf16": "bf16", "fp16": "f16"}.get(precision)


def from_openvino(hint: str) -> str:
    """OpenVINO element type name (``f32``, ``bf16``, ``f16``) -> ngb precision."""
    return {"f32": "fp32", "bf16": "bf16", "f16": "fp16"}.get(hint, hint)
