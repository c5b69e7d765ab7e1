"""``tensorrt``: ONNX parser -> serialized engine -> execution context, on an NVIDIA GPU.

Written against the TensorRT 10/11 name-based tensor API (``num_io_tensors``,
``set_tensor_address``, ``execute_async_v3``). Buffers are torch CUDA tensors, so no extra CUDA
binding package is needed: torch already owns the CUDA context and stream.

Precision: fp32 by default. TensorRT 10 enables fp16/int8 kernels through builder flags; TensorRT
11 removed those flags (networks are always strongly typed), so there fp16 is obtained by
exporting the model in half precision, and int8 needs an ONNX with explicit Q/DQ nodes, which ngb
does not produce: asking for it is a clear error rather than a silent fp32 engine.

TensorRT lets fp32 layers use TF32 unless the TF32 builder flag is cleared (on by default, as with
trtexec; Polygraphy clears it). A trial's ``precision`` decides: ``fp32`` clears it, ``tf32`` sets
it, ``fp16`` is the config's fp16, ``default`` keeps the config's choice with TensorRT's defaults.
The flags are read back from the builder config and recorded (``precision_flags``).

One request in flight: ``run`` enqueues on one stream and synchronises, like ``trtexec`` with its
default single stream, so the base timed loop is this runtime's steady state.
"""

from __future__ import annotations

import copy
import ctypes.util
import os
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ngb.core.base.errors import CompilerUnavailable, ConfigError, NgbError, UnsupportedTrial
from ngb.core.compilers.base import (
    CompileContext,
    Compiled,
    Compiler,
    CompilerConfig,
    Style,
    choice,
)
from ngb.core.compilers.onnx_export import EXPORT_UNSUPPORTED_ERRORS
from ngb.core.models.model_build import OnnxModel, map_inputs

if TYPE_CHECKING:
    import torch
    from ngb.core.models.model_types import Array, Example, Model
    from tensorrt import ICudaEngine, IExecutionContext

PRECISIONS = ("fp32", "fp16", "int8")
NO_GPU_REASON = "no NVIDIA GPU/CUDA driver found (no /dev/nvidia0, nvidia-smi or libcuda)"


def plan_precision(
    precision: str, config_precision: str, has_flags: bool
) -> tuple[str, dict[str, bool]]:
    """(the engine's precision, builder flags to set or clear) for a trial.

    ``precision`` is the trial's setting, ``config_precision`` the compiler option (fp32 by
    default, so it only conflicts when set to something else). Without builder flags (TensorRT
    >= 11) fp16 comes from a half-precision export, not a flag.
    """
    if precision != "default" and config_precision not in ("fp32", precision):
        raise ConfigError(
            f"precision {precision} contradicts the tensorrt option precision={config_precision}"
        )
    wanted = config_precision if precision == "default" else precision
    flags: dict[str, bool] = {}
    if precision == "fp32":
        flags["TF32"] = False
    elif precision == "tf32":
        flags["TF32"] = True
    if has_flags and wanted in ("fp16", "int8"):
        flags["FP16"] = True  # int8 layers without ranges fall back to fp16
    if wanted == "int8":
        flags["INT8"] = True
    return wanted, flags


def resolve_precision(flags: dict[str, bool], half_export: bool, tf32_hardware: bool) -> str:
    """The engine's precision from the builder flags read back (TF32 needs CC 8.0 or newer)."""
    if flags.get("INT8"):
        return "int8"
    if flags.get("FP16") or half_export:
        return "fp16"
    return "tf32" if flags.get("TF32") and tf32_hardware else "fp32"


def nvidia_gpu_present() -> bool:
    """Cheap hardware probe without importing torch or tensorrt (Linux device node, tool, lib)."""
    if os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvgpu"):  # nvgpu: Jetson boards
        return True
    return shutil.which("nvidia-smi") is not None or ctypes.util.find_library("cuda") is not None


@dataclass(frozen=True)
class TensorRtConfig(CompilerConfig):
    precision: str = "fp32"  # fp32 | fp16 | int8 (int8: TensorRT 10 flag, no calibration)
    workspace_mb: int = 1024  # builder scratch memory pool limit
    builder_optimization_level: int = 3  # 0 (fast build) .. 5 (exhaustive tactic search)

    def __post_init__(self) -> None:
        choice("precision", self.precision, PRECISIONS)
        ws = self.workspace_mb
        if isinstance(ws, bool) or not isinstance(ws, int) or ws < 1:
            raise ConfigError(f"workspace_mb must be a positive integer (MiB); got {ws!r}")
        level = self.builder_optimization_level
        if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 5:
            raise ConfigError(f"builder_optimization_level must be an integer 0..5; got {level!r}")


class _TrtCompiled(Compiled):
    def __init__(
        self,
        engine: ICudaEngine,
        context: IExecutionContext,
        tensors: dict[str, torch.Tensor],
        outputs: list[str],
        stream: torch.cuda.Stream,
    ) -> None:
        super().__init__()
        self._engine = engine
        self._context = context
        self._tensors = tensors  # name -> torch CUDA tensor; addresses are bound once
        self._outputs = outputs
        self._stream = stream

    def run(self) -> torch.Tensor:
        if not self._context.execute_async_v3(self._stream.cuda_stream):
            raise NgbError("TensorRT execute_async_v3 failed")
        self._stream.synchronize()
        return self._tensors[self._outputs[0]]

    def output_numpy(self) -> Array:
        return self.run().detach().float().cpu().numpy()

    def close(self) -> None:
        self._context = None
        self._engine = None
        self._tensors = {}


class TensorRtCompiler(Compiler[TensorRtConfig]):
    name = "tensorrt"
    description = "NVIDIA TensorRT (ONNX parser -> engine)"
    devices = ("cuda",)
    requires = ("tensorrt", "onnx", "torch")
    unsupported_optimisations = {
        "int8": "TensorRT needs explicit Q/DQ int8 graphs, not torch quantized:: kernels"
    }
    unsupported_errors = EXPORT_UNSUPPORTED_ERRORS
    precisions = {"cuda": ("default", "fp32", "tf32", "fp16")}
    version_packages = {"tensorrt": ("tensorrt", "tensorrt-cu13", "tensorrt-cu12")}
    sources = ("torch", "onnx")  # a user's ONNX file is read as is
    style = Style((240, 228, 66), "★", "☆")  # Okabe-Ito yellow
    short_name = "TRT"
    profiler = None  # no profiler is wired to it yet
    version_libraries = ("tensorrt",)

    @classmethod
    def available(cls) -> tuple[bool, str]:
        if not nvidia_gpu_present():
            return False, NO_GPU_REASON
        return super().available()

    def compile(self, model: Model, example: Example, ctx: CompileContext) -> Compiled:
        cfg = self.config
        if ctx.device != "cuda":  # checked first: no point importing TensorRT for a cpu trial
            raise ConfigError(f"tensorrt runs on device cuda only; got device {ctx.device!r}")
        import tensorrt as trt
        import torch
        from ngb.core.compilers.onnx_export import export_onnx

        if not torch.cuda.is_available():
            raise CompilerUnavailable("torch sees no CUDA GPU; TensorRT needs one")
        has_flags = hasattr(trt.BuilderFlag, "FP16")  # False on TensorRT >= 11 (strong typing)
        wanted, flags = plan_precision(ctx.precision, cfg.precision, has_flags)
        if wanted == "int8" and not hasattr(trt.BuilderFlag, "INT8"):
            raise ConfigError(
                f"precision int8 needs an ONNX with Q/DQ nodes on TensorRT {trt.__version__}; "
                "use fp32 or fp16"
            )
        if "TF32" in flags and not hasattr(trt.BuilderFlag, "TF32"):
            raise UnsupportedTrial(
                f"TensorRT {trt.__version__} has no TF32 builder flag; precision "
                f"{ctx.precision} cannot be set"
            )
        half_export = wanted == "fp16" and not has_flags
        with ctx.phase("export"):
            export_model, export_example = model, example
            if half_export:  # a copy: the caller's model stays fp32 for the reference output
                if isinstance(model, OnnxModel):
                    raise UnsupportedTrial(
                        f"TensorRT {trt.__version__} makes fp16 engines from a half-precision "
                        "export; a user's ONNX file is used as given (export it in fp16 yourself)"
                    )
                export_model = copy.deepcopy(model).to("cuda").half()
                export_example = map_inputs(  # names kept; integer inputs (token ids) stay ints
                    example,
                    lambda t: t.to("cuda").half() if t.is_floating_point() else t.to("cuda"),
                )
            path = export_onnx(export_model, export_example, ctx.workdir / "model.onnx")
        logger = trt.Logger(trt.Logger.WARNING)
        with ctx.phase("compile"):
            builder = trt.Builder(logger)
            network = builder.create_network(0)
            parser = trt.OnnxParser(network, logger)
            if not parser.parse_from_file(str(path)):
                errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
                raise NgbError(f"TensorRT could not parse the ONNX model: {errors}")
            config = builder.create_builder_config()
            config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, cfg.workspace_mb << 20)
            config.builder_optimization_level = cfg.builder_optimization_level
            for flag, on in flags.items():
                (config.set_flag if on else config.clear_flag)(getattr(trt.BuilderFlag, flag))
            read_back = {
                name: bool(config.get_flag(getattr(trt.BuilderFlag, name)))
                for name in ("TF32", "FP16", "BF16", "INT8")
                if hasattr(trt.BuilderFlag, name)
            }
            serialized = builder.build_serialized_network(network, config)
            if serialized is None:
                raise NgbError("TensorRT engine build failed (see the TensorRT log above)")
            runtime = trt.Runtime(logger)
            engine = runtime.deserialize_cuda_engine(serialized)
            context = engine.create_execution_context()
            tensors, outputs = self._bind(engine, context, export_example)
        compiled = _TrtCompiled(engine, context, tensors, outputs, torch.cuda.Stream())
        compiled._runtime = runtime  # type: ignore[attr-defined]  # keep alive with the engine
        tf32_hardware = torch.cuda.get_device_capability()[0] >= 8
        compiled.precision = resolve_precision(read_back, half_export, tf32_hardware)
        compiled.precision_flags = {**read_back, "half_export": half_export}
        compiled.extra.update(
            {
                "precision": wanted,
                "precision_via": "builder flag"
                if has_flags
                else ("half export" if half_export else ""),
                "workspace_mb": cfg.workspace_mb,
                "builder_optimization_level": cfg.builder_optimization_level,
                "engine_bytes": int(serialized.nbytes),
                "onnx_path": str(path),
            }
        )
        return compiled

    @staticmethod
    def _bind(
        engine: ICudaEngine, context: IExecutionContext, example: Example
    ) -> tuple[dict[str, torch.Tensor], list[str]]:
        """Allocate one CUDA tensor per I/O tensor and bind its address once."""
        import numpy as np
        import tensorrt as trt
        import torch
        from ngb.core.compilers.onnx_export import example_tuple, input_names

        given = dict(zip(input_names(example), example_tuple(example), strict=True))
        tensors: dict[str, torch.Tensor] = {}
        outputs: list[str] = []
        for i in range(engine.num_io_tensors):
            name = engine.get_tensor_name(i)
            np_dtype = np.dtype(trt.nptype(engine.get_tensor_dtype(name)))
            dtype = torch.from_numpy(np.empty(0, dtype=np_dtype)).dtype
            shape = tuple(engine.get_tensor_shape(name))
            if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT:
                if name not in given:
                    raise NgbError(f"engine input {name!r} is not one of {sorted(given)}")
                tensor = given[name].to(device="cuda", dtype=dtype).contiguous()
                if tuple(tensor.shape) != shape:
                    raise NgbError(f"input {name}: engine wants {shape}, got {tuple(tensor.shape)}")
            else:
                tensor = torch.empty(shape, dtype=dtype, device="cuda")
                outputs.append(name)
            context.set_tensor_address(name, tensor.data_ptr())
            tensors[name] = tensor
        return tensors, outputs
