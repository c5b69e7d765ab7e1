"""``onnxruntime``: the shared ONNX export run by an ONNX Runtime ``InferenceSession``.

The input is bound once through IOBinding (on the GPU for CUDA), so a timed call is the session
run alone, as with ``onnxruntime_perf_test``; per-call numpy feed building would be measured
otherwise. Building the session (graph optimisation, kernel selection) is the compile phase.

Precision: the CPU EP computes in fp32. The CUDA EP runs convolutions and matmuls in TF32 unless
its provider option ``use_tf32`` is 0; ``fp32`` sets it to 0, ``tf32`` to 1, and the value the
session reports back is recorded. ORT's TensorRT EP has no TF32 switch (TensorRT allows TF32 by
default), so ``auto`` leaves it out when a trial asks for ``fp32`` or ``tf32``.

One request in flight: ``run`` is a synchronous ``run_with_iobinding`` (as ``onnxruntime_perf_test``
runs by default, one concurrent session run), so the base timed loop is already its steady state;
intra-op threads, not concurrent requests, fill the cores.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ngb.core.base.errors import CompilerUnavailable, ConfigError, UnsupportedTrial
from ngb.core.compilers.base import (
    CompileContext,
    Compiled,
    Compiler,
    CompilerConfig,
    Style,
    choice,
    module_available,
)
from ngb.core.compilers.onnx_export import EXPORT_UNSUPPORTED_ERRORS

if TYPE_CHECKING:
    import torch
    from ngb.core.compilers.profiling import KernelRecord
    from ngb.core.models.model_types import Array, Example, Model
    from onnxruntime import InferenceSession, IOBinding

OPT_LEVELS = ("all", "extended", "basic", "disable")
EXECUTION_MODES = ("sequential", "parallel")
PROVIDERS = ("auto", "cpu", "cuda", "tensorrt")
#: where a profiled session saves the graph it runs (``profile_graphs.ort_fusions`` reads it)
_OPTIMISED = "ort-optimised.onnx"
_EP_NAMES = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
}


def _check_threads(name: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive integer or omitted; got {value!r}")


@dataclass(frozen=True)
class OnnxRuntimeConfig(CompilerConfig):
    graph_optimization_level: str = "all"  # ORT_ENABLE_ALL | EXTENDED | BASIC | DISABLE_ALL
    intra_op_threads: int | None = None  # None: the trial's thread count, else ORT's default
    inter_op_threads: int | None = None  # only used with execution_mode="parallel"
    execution_mode: str = "sequential"
    provider: str = "auto"  # auto: CPU EP on cpu; TensorRT (if present) + CUDA EP on cuda

    def __post_init__(self) -> None:
        choice("graph_optimization_level", self.graph_optimization_level, OPT_LEVELS)
        choice("execution_mode", self.execution_mode, EXECUTION_MODES)
        choice("provider", self.provider, PROVIDERS)
        _check_threads("intra_op_threads", self.intra_op_threads)
        _check_threads("inter_op_threads", self.inter_op_threads)


def select_providers(
    provider: str, device: str, available: list[str], precision: str = "default"
) -> list[str]:
    """Execution providers in priority order, CPU always last as ORT's fallback.

    ``auto`` takes the TensorRT EP on cuda only if its Python package is installed too: the EP is
    compiled into onnxruntime-gpu but needs the TensorRT libraries at session creation. It also
    leaves it out for a trial that sets the TF32 mode, which only the CUDA EP can.
    """
    if provider == "auto":
        if device == "cuda":
            wanted = ["cuda"]
            if (
                precision == "default"
                and _EP_NAMES["tensorrt"] in available
                and module_available("tensorrt")[0]
            ):
                wanted.insert(0, "tensorrt")
        else:
            wanted = ["cpu"]
    else:
        wanted = [provider]
    if device == "cpu" and wanted != ["cpu"]:
        raise ConfigError(f"provider {provider!r} needs device cuda; this trial targets cpu")
    chosen = []
    for name in wanted:
        ep = _EP_NAMES[name]
        if ep not in available:
            raise CompilerUnavailable(
                f"onnxruntime has no {ep} here (available: {', '.join(available)}); "
                "install onnxruntime-gpu for CUDA/TensorRT"
            )
        chosen.append(ep)
    if _EP_NAMES["cpu"] not in chosen:
        chosen.append(_EP_NAMES["cpu"])
    if precision in ("fp32", "tf32") and chosen[0] == _EP_NAMES["tensorrt"]:
        raise UnsupportedTrial(
            f"onnxruntime's TensorRT EP has no TF32 switch, so precision {precision} cannot be "
            "guaranteed; use -o provider=cuda"
        )
    return chosen


def provider_options(providers: list[str], precision: str) -> list[dict[str, str]]:
    """Per-provider options for ``InferenceSession`` (the CUDA EP's TF32 mode)."""
    tf32 = {"fp32": "0", "tf32": "1"}.get(precision)
    return [
        {"use_tf32": tf32} if ep == _EP_NAMES["cuda"] and tf32 is not None else {}
        for ep in providers
    ]


def resolve_precision(providers: list[str], options: dict[str, dict[str, str]]) -> str:
    """The precision a session runs at, from its providers and the options it reports back."""
    first = providers[0] if providers else _EP_NAMES["cpu"]
    if first == _EP_NAMES["cuda"]:
        # ORT's CUDA EP default is use_tf32=1; an option it does not report is at that default.
        return "tf32" if options.get(first, {}).get("use_tf32", "1") == "1" else "fp32"
    if first == _EP_NAMES["tensorrt"]:
        trt = options.get(first, {})
        return "fp16" if trt.get("trt_fp16_enable") in ("1", "True", "true") else "tf32"
    return "fp32"


class _OrtCompiled(Compiled):
    def __init__(
        self, session: InferenceSession, binding: IOBinding, keep_alive: list[object]
    ) -> None:
        super().__init__()
        self._session = session
        self._binding = binding
        self._keep_alive = keep_alive  # the bound input buffers must outlive the binding
        self._names = [i.name for i in session.get_inputs()]
        self.optimised: Path | None = None  # the optimised model a profiled session saved

    def run(self) -> object:
        self._session.run_with_iobinding(self._binding)
        return self._binding.get_outputs()[0]

    def output_numpy(self) -> Array:
        self._session.run_with_iobinding(self._binding)
        return self._binding.copy_outputs_to_cpu()[0]

    def feed(self, arrays: Sequence[Array]) -> None:
        import numpy as np

        for i, (name, array) in enumerate(zip(self._names, arrays, strict=True)):
            kept = self._keep_alive[i]
            if isinstance(kept, np.ndarray):  # CPU: bind the new array in place of the old one
                new = np.ascontiguousarray(array, dtype=kept.dtype)
                self._binding.bind_cpu_input(name, new)
                self._keep_alive[i] = new
            else:  # an OrtValue on the GPU: written where it is bound
                kept.update_inplace(np.ascontiguousarray(array))  # type: ignore[attr-defined]

    def profile_records(self, calls: int) -> tuple[list[KernelRecord], float, str]:
        """``calls`` runs of a session built with ``enable_profiling`` (``ctx.profile``): its
        trace's kernel events, the wall ms per call, the tool."""
        from ngb.core.compilers.profile_graphs import ort_fusions
        from ngb.core.compilers.profiling import ort_records

        start = time.perf_counter()
        for _ in range(calls):
            self.run()
        wall = (time.perf_counter() - start) * 1000.0 / calls
        trace = Path(self._session.end_profiling())
        try:
            saved = self.optimised
            fusions = ort_fusions(saved) if saved is not None and saved.is_file() else None
            return ort_records(trace, calls, fusions), wall, "onnxruntime enable_profiling"
        finally:
            trace.unlink(missing_ok=True)

    def close(self) -> None:
        self._binding = None
        self._session = None
        self._keep_alive = []


class OnnxRuntimeCompiler(Compiler[OnnxRuntimeConfig]):
    name = "onnxruntime"
    description = "ONNX Runtime (CPU EP; CUDA/TensorRT EPs on NVIDIA GPUs)"
    devices = ("cpu", "cuda")
    requires = ("onnxruntime", "onnx", "torch")
    unsupported_errors = EXPORT_UNSUPPORTED_ERRORS
    precisions = {"cpu": ("default", "fp32"), "cuda": ("default", "fp32", "tf32")}
    version_packages = {"onnxruntime": ("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino")}
    sources = ("torch", "onnx")  # a user's ONNX file is read as is
    style = Style((86, 180, 233), "■", "□")  # Okabe-Ito sky blue
    short_name = "ORT"
    profiler = "rebuild"  # its trace is a session option (``enable_profiling``)
    version_libraries = ("onnxruntime",)

    def compile(self, model: Model, example: Example, ctx: CompileContext) -> Compiled:
        import onnxruntime as ort
        from ngb.core.compilers.onnx_export import example_tuple, export_onnx, input_names

        cfg = self.config
        providers = select_providers(
            cfg.provider, ctx.device, ort.get_available_providers(), ctx.precision
        )
        with ctx.phase("export"):
            path = export_onnx(model, example, ctx.workdir / "model.onnx")
        with ctx.phase("compile"):
            opts = ort.SessionOptions()
            opts.graph_optimization_level = {
                "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
                "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
                "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            }[cfg.graph_optimization_level]
            opts.execution_mode = (
                ort.ExecutionMode.ORT_PARALLEL
                if cfg.execution_mode == "parallel"
                else ort.ExecutionMode.ORT_SEQUENTIAL
            )
            intra = cfg.intra_op_threads or ctx.threads
            if intra:
                opts.intra_op_num_threads = intra
            if cfg.inter_op_threads:
                opts.inter_op_num_threads = cfg.inter_op_threads
            if (
                ctx.profile
            ):  # a profile pass (ngb.core.compilers.profiling): the trace, never when timed
                opts.enable_profiling = True
                opts.profile_file_prefix = str(ctx.workdir / "ort-profile")
                # the graph ORT runs, after its fusions: which kernels are fused is read there
                opts.optimized_model_filepath = str(ctx.workdir / _OPTIMISED)
            session = ort.InferenceSession(
                str(path),
                sess_options=opts,
                providers=providers,
                provider_options=provider_options(providers, ctx.precision),
            )
            binding, keep_alive = self._bind(
                session, example_tuple(example), input_names(example), ctx.device
            )
        compiled = _OrtCompiled(session, binding, keep_alive)
        if ctx.profile:
            compiled.optimised = ctx.workdir / _OPTIMISED
        ran = session.get_providers()
        reported = {ep: dict(o) for ep, o in session.get_provider_options().items()}
        compiled.precision = resolve_precision(ran, reported)
        compiled.precision_flags = {
            ep: {k: v for k, v in o.items() if "tf32" in k or "fp16" in k}
            for ep, o in reported.items()
        }
        if ctx.precision != "default" and compiled.precision != ctx.precision:
            compiled.close()
            raise UnsupportedTrial(
                f"onnxruntime ran {compiled.precision} on {ran[0]} when {ctx.precision} was asked"
            )
        compiled.extra.update(
            {
                "providers": session.get_providers(),
                "graph_optimization_level": cfg.graph_optimization_level,
                "execution_mode": cfg.execution_mode,
                "intra_op_threads": intra or 0,  # 0 = ORT's default (one per physical core)
                "onnx_path": str(path),
            }
        )
        return compiled

    @staticmethod
    def _bind(
        session: InferenceSession, tensors: tuple[torch.Tensor, ...], names: list[str], device: str
    ) -> tuple[IOBinding, list[object]]:
        import onnxruntime as ort

        binding = session.io_binding()
        keep_alive: list[object] = []
        for name, tensor in zip(names, tensors, strict=True):
            array = tensor.detach().cpu().contiguous().numpy()
            if device == "cuda":
                value = ort.OrtValue.ortvalue_from_numpy(array, "cuda", 0)
                binding.bind_ortvalue_input(name, value)
                keep_alive.append(value)
            else:
                binding.bind_cpu_input(name, array)
                keep_alive.append(array)
        out_device = "cuda" if device == "cuda" else "cpu"
        for out in session.get_outputs():
            binding.bind_output(out.name, out_device)
        return binding, keep_alive
