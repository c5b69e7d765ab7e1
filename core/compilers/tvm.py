"""Apache TVM (Relax), untuned: the ``tvm`` compiler and what ``tvm-ms`` builds on.

The model goes through ``torch.export`` and TVM's Relax frontend, is built with ``tvm.compile``
and runs on the Relax ``VirtualMachine`` bound to one input tensor. ``tvm`` builds the legalised
operators as they come (plain loop nests, no schedule): the paper's "untuned TVM", expected to be
slower than eager. The MetaSchedule-tuned ``tvm-ms`` lives in ``tvm_ms.py`` (compiler) and
``tvm_tuning.py`` (search machinery); it shares the target, thread, import and VM helpers here.

TVM's errors carry the useful line last (a C++ backtrace comes first), hence ``last_line``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, TypeVar

from ngb.core.base.errors import CompilerUnavailable, ConfigError, NgbError
from ngb.core.compilers.base import (
    CompileContext,
    Compiled,
    Compiler,
    CompilerConfig,
    Style,
    choice,
)
from ngb.core.models.model_basics import to_numpy
from ngb.core.models.model_build import OnnxModel

if TYPE_CHECKING:
    from ngb.core.compilers.profiling import KernelRecord
    from ngb.core.models.model_types import Array, Example, Model
    from tvm.ir import IRModule
    from tvm.relax import VMExecutable
    from tvm.target import Target

TARGET_KINDS = ("llvm", "cuda")
OPT_LEVELS = (0, 1, 2, 3, 4)
#: torch.export / Relax frontend refusals that mean "this model cannot go through TVM"
TVM_UNSUPPORTED_ERRORS = ("TVMUnsupportedError",)
TVM_VERSIONS = {"tvm": ("apache-tvm", "tvm"), "tvm_ffi": ("apache-tvm-ffi",)}
TVM_INT8_REASON = "TVM imports through torch.export, which has no rule for torch's quantized:: ops"
# TVM 0.27's Relax legalises conv2d through topi.nn.conv2d only (NCHW/NHWC loop nests; no
# channel-chunked layout is legalised: relax/transform/legalize_ops/nn.py), and its PyTorch
# frontend turns sparse tensors dense ("Relax does not support sparse tensors yet",
# exported_program_translator.py): Relay's spatial-pack strategies and sparse_dense went with it.
TVM_SPARSE_REASON = (
    "TVM 0.27's Relax has no sparse operator; its PyTorch frontend turns sparse weights dense, so "
    "the trial would time the dense matrix"
)


def check_int(name: str, value: object, *, minimum: int, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}; got {value!r}")


@dataclass(frozen=True)
class TvmConfig(CompilerConfig):
    """Flags of the untuned build (also the base of ``tvm-ms``)."""

    target: str | None = None  # llvm | cuda; None = llvm on a CPU device, cuda on a GPU device
    num_cores: int | None = None  # target "num-cores"; None = ctx.threads or os.cpu_count()
    mcpu: str | None = None  # LLVM -mcpu (e.g. "skylake-avx512", "cortex-a78"); cuda: the arch
    mattr: tuple[str, ...] = ()  # LLVM -mattr, e.g. ("+avx2", "+fma"); a comma string works too
    opt_level: int = 3  # Relax/TIR PassContext opt_level

    def __post_init__(self) -> None:
        if self.target is not None:
            choice("target", self.target, TARGET_KINDS)
        check_int("num_cores", self.num_cores, minimum=1, optional=True)
        if self.mcpu is not None and (not isinstance(self.mcpu, str) or not self.mcpu.strip()):
            raise ConfigError(f"mcpu must be a non-empty string; got {self.mcpu!r}")
        mattr = self.mattr
        if isinstance(mattr, str):
            mattr = tuple(a.strip() for a in mattr.split(",") if a.strip())
        if not isinstance(mattr, list | tuple) or not all(isinstance(a, str) for a in mattr):
            raise ConfigError(f"mattr must be a list of strings like '+avx2'; got {self.mattr!r}")
        object.__setattr__(self, "mattr", tuple(mattr))
        choice("opt_level", self.opt_level, OPT_LEVELS)


def last_line(exc: BaseException) -> str:
    """The last non-empty line of a TVM error (its message; the backtrace comes first)."""
    text = str(exc).strip() or type(exc).__name__
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1].strip() if lines else text


def tvm_version() -> str:
    import tvm

    return str(tvm.__version__)


#: the target dict ``tvm.target.Target`` takes: ``kind`` (always set) plus the attributes ngb
#: sets (``typing.Required`` would say so, but the agent's Python 3.10 has no such name)
TargetSpec = TypedDict(
    "TargetSpec",
    {"kind": str, "arch": str, "num-cores": int, "mcpu": str, "mattr": list[str]},
    total=False,
)


def target_spec(config: TvmConfig, ctx: CompileContext) -> TargetSpec:
    """The target dict for ``tvm.target.Target`` (TVM 0.27 refuses the old string form)."""
    kind = config.target or ("cuda" if ctx.device == "cuda" else "llvm")
    if ctx.device not in ("cpu", "cuda"):
        raise ConfigError(f"device must be cpu or cuda; got {ctx.device!r}")
    if (kind == "cuda") != (ctx.device == "cuda"):
        raise ConfigError(f"tvm target {kind!r} does not match device {ctx.device!r}")
    if kind == "cuda":
        spec: TargetSpec = {"kind": "cuda"}
        if config.mcpu:
            spec["arch"] = config.mcpu
        return spec
    spec = {"kind": "llvm", "num-cores": config.num_cores or ctx.threads or os.cpu_count() or 1}
    if config.mcpu:
        spec["mcpu"] = config.mcpu
    if config.mattr:
        spec["mattr"] = list(config.mattr)
    return spec


def make_target(spec: TargetSpec) -> Target:
    import tvm

    try:
        return tvm.target.Target(spec)
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(f"tvm: bad target {spec}: {last_line(exc)}") from exc


def apply_threads(spec: TargetSpec, ctx: CompileContext) -> int:
    """Size TVM's runtime thread pool; return the count in effect.

    TVM reads ``TVM_NUM_THREADS`` when its pool first starts, and MetaSchedule's runner workers
    inherit it, so tuning measures with the thread count the benchmark will use. Without it TVM
    picked a single thread on the 2-core test machine, so we default to the target's core count
    (an explicit ``ctx.threads`` wins; otherwise an operator's own ``TVM_NUM_THREADS`` is left
    alone). The pool is sized once per process; the agent runs each trial in its own. Calling
    ``runtime.config_threadpool`` instead pins threads to cores, which hurt on a shared machine.
    """
    import tvm_ffi

    if ctx.threads:
        os.environ["TVM_NUM_THREADS"] = str(int(ctx.threads))
    elif spec.get("num-cores") and "TVM_NUM_THREADS" not in os.environ:
        os.environ["TVM_NUM_THREADS"] = str(int(spec["num-cores"]))
    return int(tvm_ffi.get_global_func("runtime.NumThreads")())


def import_model(model: Model, example: Example, ctx: CompileContext) -> tuple[IRModule, int]:
    """torch.export -> Relax IRModule in inference form, and its weight-free structural hash."""
    import torch
    import tvm
    import tvm_ffi
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    if ctx.device == "cuda" and not torch.cuda.is_available():
        raise CompilerUnavailable("device 'cuda' asked for, but torch sees no CUDA GPU")
    if isinstance(model, OnnxModel):
        with ctx.phase("export"):
            mod = _import_onnx(model.onnx_path, example)
            mod = tvm.transform.Sequential(
                [relax.transform.DecomposeOpsForInference(), relax.transform.CanonicalizeBindings()]
            )(mod)
            digest = tvm_ffi.structural_hash(mod, map_free_vars=True, skip_tensor_content=True)
        return mod, int(digest)
    model = model.eval().cpu()
    args = tuple(example) if isinstance(example, list | tuple) else (example,)
    args = tuple(a.cpu() for a in args)
    with ctx.phase("export"):
        try:
            with torch.no_grad():
                exported = torch.export.export(model, args)
            mod = from_exported_program(exported, unwrap_unit_return_tuple=True)
        except Exception as exc:  # noqa: BLE001 - unsupported op etc.: one clear line
            raise NgbError(f"tvm: cannot import the model: {last_line(exc)}") from exc
        mod = tvm.transform.Sequential(
            [relax.transform.DecomposeOpsForInference(), relax.transform.CanonicalizeBindings()]
        )(mod)
        digest = tvm_ffi.structural_hash(mod, map_free_vars=True, skip_tensor_content=True)
    return mod, int(digest)


def _import_onnx(path: Path, example: Example) -> IRModule:
    """A user's ONNX file -> Relax, shapes and dtypes bound to the example batch."""
    import onnx
    from ngb.core.compilers.onnx_export import input_names
    from tvm.relax.frontend.onnx import from_onnx

    arrays = _example_numpy(example)
    names = input_names(example)
    try:
        return from_onnx(
            onnx.load(str(path)),
            shape_dict={n: list(a.shape) for n, a in zip(names, arrays, strict=True)},
            dtype_dict={n: str(a.dtype) for n, a in zip(names, arrays, strict=True)},
        )
    except Exception as exc:  # noqa: BLE001 - unsupported op etc.: one clear line
        raise NgbError(f"tvm: cannot import the ONNX model: {last_line(exc)}") from exc


def _example_numpy(example: Example) -> list[Array]:
    import numpy as np

    args = example if isinstance(example, list | tuple) else (example,)
    return [np.ascontiguousarray(a.detach().cpu().numpy()) for a in args]


class TvmCompiled(Compiled):
    """A Relax VM bound to its input tensors, created once on the target device."""

    def __init__(self, executable: VMExecutable, example: Example, device_kind: str) -> None:
        super().__init__()
        import tvm
        from tvm import relax

        self._dev = tvm.cuda(0) if device_kind == "cuda" else tvm.cpu(0)
        self._vm = relax.VirtualMachine(executable, self._dev)
        self._main = self._vm["main"]
        arrays = _example_numpy(example)
        self._inputs = [tvm.runtime.tensor(a, device=self._dev) for a in arrays]
        self._sync = device_kind == "cuda"
        # Relax legalises the graph in the model's own dtype (no TF32 or implicit downcasts).
        dtype = next((str(a.dtype) for a in arrays if a.dtype.kind == "f"), "float32")
        self.precision = {"float16": "fp16", "bfloat16": "bf16"}.get(dtype, "fp32")
        self.precision_flags = {"dtype": dtype}

    def run(self) -> object:
        out = self._main(*self._inputs)
        if self._sync:  # GPU kernels are asynchronous; a timed call must include them
            self._dev.sync()
        return out

    def output_numpy(self) -> Array:
        out = self.run()
        # a multi-output model returns a TVM Array, which to_numpy does not know
        first = getattr(out, "__getitem__", None)
        if not hasattr(out, "numpy") and first is not None:
            out = first(0)
        return to_numpy(out)

    def feed(self, arrays: Sequence[Array]) -> None:
        for tensor, array in zip(self._inputs, arrays, strict=True):
            tensor.copyfrom(array)

    def profile_records(self, calls: int) -> tuple[list[KernelRecord], float, str]:
        """``calls`` runs under the VM's instrument hook
        (``ngb.core.compilers.profiling.tvm_records``): the time of each called kernel, the wall ms
        per call, the tool."""
        from ngb.core.compilers.profiling import tvm_records

        sync = self._dev.sync if self._sync else None
        records, wall = tvm_records(self._vm, self.run, calls, sync)
        return records, wall, "tvm relax VM instrument"

    def close(self) -> None:
        self._inputs = []
        self._main = None
        self._vm = None


ConfigT = TypeVar("ConfigT", bound=TvmConfig)


class TvmBase(Compiler[ConfigT]):
    """What ``tvm`` and ``tvm-ms`` share: devices, modules, refusals and versions."""

    devices = ("cpu", "cuda")
    requires = ("tvm", "tvm_ffi", "torch")
    precisions = {"cpu": ("default", "fp32"), "cuda": ("default", "fp32")}
    unsupported_optimisations = {"int8": TVM_INT8_REASON}
    unsupported_errors = TVM_UNSUPPORTED_ERRORS
    version_packages = TVM_VERSIONS
    sources = ("torch", "onnx")  # a user's ONNX file goes through the Relax ONNX frontend
    profiler = "hook"  # the VM's instrument hook, set on the model built
    version_libraries = ("tvm",)
    algorithms = {
        "default": "topi.nn.conv2d_nchw, the direct loop nest Relax legalises conv2d to",
        "direct": "topi.nn.conv2d_nchw, the direct loop nest Relax legalises conv2d to",
        "gemm": "im2col (strided slices, stack) + Relax matmul, legalised and built as given",
    }
    algorithm_refusals = {"sparse-csr": TVM_SPARSE_REASON, "sparse-bsr": TVM_SPARSE_REASON}


class TvmCompiler(TvmBase[TvmConfig]):
    name = "tvm"
    description = "Apache TVM Relax, untuned (legalised operators as they come)"
    style = Style((204, 121, 167), "✖", "✕")  # Okabe-Ito reddish purple
    short_name = "tvm"

    def compile(self, model: Model, example: Example, ctx: CompileContext) -> Compiled:
        import tvm

        spec = target_spec(self.config, ctx)
        target = make_target(spec)
        threads = apply_threads(spec, ctx)
        mod, _ = import_model(model, example, ctx)
        with ctx.phase("compile"):
            try:
                with tvm.transform.PassContext(opt_level=self.config.opt_level):
                    executable = tvm.compile(mod, target=target)
            except Exception as exc:  # noqa: BLE001
                raise NgbError(f"tvm: build failed: {last_line(exc)}") from exc
        compiled = TvmCompiled(executable, example, spec["kind"])
        compiled.extra.update(
            {"target": str(target), "opt_level": self.config.opt_level, "threads": threads}
        )
        return compiled
