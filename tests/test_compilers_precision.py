"""Precision as a trial setting: asked for, honoured or refused, and recorded as it ran.

CPU paths run for real (torch eager, OpenVINO, ONNX Runtime, through ``run_trial``). The CUDA
paths are checked at the flag level without a GPU (torch's TF32 flags can be set and read on a
CPU-only machine; ORT's and TensorRT's options are computed by plain functions); the real-GPU
checks are marked ``gpu``.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from ngb.core.base.errors import ConfigError, UnsupportedTrial
from ngb.core.compilers import CompileContext, compiler_class, get_compiler
from ngb.core.compilers import onnxruntime as ort_backend
from ngb.core.compilers import tensorrt as trt_backend
from ngb.core.compilers.identity import TorchCompiled, torch_precision
from ngb.core.models.precision import resolve_torch, strict_fp32, torch_flags
from ngb.core.records.types import MeasureSettings, TrialSpec
from ngb.core.trial.measure import run_trial

torch = pytest.importorskip("torch")

FAST = {
    "warmup_iters": 1,
    "warmup_s": 0.0,
    "min_iters": 2,
    "min_duration_s": 0.0,
    "repetitions": 2,
    "workers": 1,
    "quiet_check_s": 0.0,
}  # one process: worker processes have their own tests
CPU, CUDA, TRT = "CPUExecutionProvider", "CUDAExecutionProvider", "TensorrtExecutionProvider"


def needs(name: str) -> None:
    ok, reason = compiler_class(name).available()
    if not ok:
        pytest.skip(reason)


def conv_spec(compiler: str, precision: str, **options: Any) -> TrialSpec:
    return TrialSpec(
        model="conv",
        width=16,
        depth=2,
        compiler=compiler,
        batch=2,
        compiler_options=options,
        measure=MeasureSettings(**FAST, precision=precision),
    )


def cpu_has_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


@pytest.fixture(autouse=True)
def _torch_flags_restored() -> Any:
    """Every test leaves torch's process-wide precision flags as it found them."""
    before = torch_flags()
    yield
    assert torch_flags() == before, "a test or compiler left torch's precision flags changed"


# ----------------------------------------------------------------------------- the setting


def test_precision_setting_is_validated_and_keyed() -> None:
    with pytest.raises(ConfigError, match="precision must be one of default, fp32, tf32"):
        MeasureSettings(precision="fp64")
    default = TrialSpec("resnet18", "identity")
    strict = TrialSpec("resnet18", "identity", measure=MeasureSettings(precision="fp32"))
    assert default.key != strict.key
    # A spec written before the setting existed (no "precision") keeps its key.
    old = default.to_dict()
    del old["measure"]["precision"]
    assert TrialSpec.from_dict(old).key == default.key
    again = TrialSpec.from_dict(json.loads(json.dumps(strict.to_dict())))
    assert again.measure.precision == "fp32" and again.key == strict.key


def test_unsupported_precision_is_a_one_line_unsupported_trial() -> None:
    with pytest.raises(UnsupportedTrial, match=r"^tvm cannot run precision bf16 on cpu"):
        compiler_class("tvm").check_precision("bf16", "cpu")
    result = run_trial(conv_spec("identity", "tf32"))  # TF32 is an NVIDIA GPU format
    assert result.status == "failed" and result.error_kind == "unsupported"
    assert result.error == (
        "identity cannot run precision tf32 on cpu (supported: default, fp32, bf16)"
    )


# ----------------------------------------------------------------------------- torch


def test_identity_fp32_and_bf16_on_cpu_are_recorded_as_they_ran() -> None:
    needs("identity")
    strict = run_trial(conv_spec("identity", "fp32"))
    assert strict.ok, strict.error
    assert strict.precision == "fp32" and strict.max_abs_err == 0.0
    assert strict.precision_flags["float32_matmul_precision"] == "highest"
    assert strict.precision_flags["dtype"] == "float32"
    half = run_trial(conv_spec("identity", "bf16"))
    assert half.ok, half.error
    assert half.precision == "bf16" and half.precision_flags["dtype"] == "bfloat16"
    assert 0 < half.max_abs_err < 0.5  # bf16 has 8 mantissa bits: close, not equal


def test_torch_fp32_and_tf32_set_and_record_different_cuda_flags() -> None:
    """The CUDA plumbing without a GPU: flags are process-wide and readable on any build."""
    inputs = (torch.randn(2, 3),)
    recorded = {}
    for precision in ("fp32", "tf32", "default"):
        ctx = CompileContext(workdir=Path("."), device="cuda", precision=precision)
        with torch_precision(ctx) as before:
            compiled = TorchCompiled(lambda x: x, inputs, "cuda", restore=before)
        recorded[precision] = (compiled.precision, dict(compiled.precision_flags))
        compiled.close()  # puts the flags back (the autouse fixture checks)
    fp32, tf32 = recorded["fp32"][1], recorded["tf32"][1]
    assert recorded["fp32"][0] == "fp32" and recorded["tf32"][0] == "tf32"
    assert fp32["float32_matmul_precision"] == "highest"
    assert fp32["cuda_matmul_allow_tf32"] is False and fp32["cudnn_allow_tf32"] is False
    assert fp32["cuda.matmul"] == fp32["cudnn.conv"] == "ieee"
    assert tf32["cuda.matmul"] == tf32["cudnn.conv"] == "tf32"
    assert tf32["float32_matmul_precision"] == "high"
    assert tf32["cuda_matmul_allow_tf32"] is True and tf32["cudnn_allow_tf32"] is True
    # PyTorch's own default: fp32 matmuls, TF32 cuDNN convolutions.
    assert recorded["default"][0] == "tf32-conv"


def test_resolve_torch_names_every_mix() -> None:
    strict = {"cuda.matmul": "ieee", "cudnn.conv": "ieee", "mkldnn.matmul": "ieee"}
    strict["mkldnn.conv"] = "ieee"
    assert resolve_torch(strict, "cuda") == "fp32"
    assert resolve_torch({**strict, "cudnn.conv": "tf32"}, "cuda") == "tf32-conv"
    assert resolve_torch({**strict, "cuda.matmul": "tf32"}, "cuda") == "tf32-matmul"
    assert resolve_torch({**strict, "cuda.matmul": "tf32", "cudnn.conv": "tf32"}, "cuda") == "tf32"
    assert resolve_torch({**strict, "cudnn.conv": "tf32", "dtype": "float16"}, "cuda") == "fp16"
    assert resolve_torch({**strict, "cudnn.conv": "tf32"}, "cpu") == "fp32"  # cuDNN is GPU-only
    assert resolve_torch({**strict, "mkldnn.matmul": "bf16"}, "cpu") == "bf16-cpu"


def test_strict_fp32_context_restores_the_flags() -> None:
    torch.set_float32_matmul_precision("high")
    try:
        with strict_fp32():
            assert torch.get_float32_matmul_precision() == "highest"
            assert torch.backends.cudnn.allow_tf32 is False
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision("highest")
        torch.backends.cudnn.allow_tf32 = True


@pytest.mark.gpu
@pytest.mark.parametrize("compiler", ["identity", "inductor"])
def test_cuda_fp32_and_tf32_differ_on_a_gpu(compiler: str) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    results = {}
    for precision in ("fp32", "tf32"):
        spec = conv_spec(compiler, precision)
        spec = TrialSpec.from_dict({**spec.to_dict(), "device": "cuda"})
        results[precision] = run_trial(spec)
        assert results[precision].ok, results[precision].error
    assert results["fp32"].precision == "fp32" and results["tf32"].precision == "tf32"
    assert results["fp32"].precision_flags != results["tf32"].precision_flags


# ----------------------------------------------------------------------------- OpenVINO


def test_openvino_fp32_matches_eager_and_default_says_what_ran() -> None:
    needs("openvino")
    strict = run_trial(conv_spec("openvino", "fp32", hint="LATENCY"))
    assert strict.ok, strict.error
    assert strict.precision == "fp32"
    assert strict.precision_flags["INFERENCE_PRECISION_HINT"] == "f32"
    assert strict.max_abs_err is not None and strict.max_abs_err <= 1e-4
    default = run_trial(conv_spec("openvino", "default", hint="LATENCY"))
    assert default.ok, default.error
    ran = default.precision_flags["INFERENCE_PRECISION_HINT"]
    assert default.precision == {"f32": "fp32", "bf16": "bf16", "f16": "fp16"}[ran]
    assert default.precision == ("bf16" if cpu_has_bf16() else "fp32")


def test_openvino_precision_and_option_must_agree(tmp_path: Path) -> None:
    needs("openvino")
    ctx = CompileContext(workdir=tmp_path, precision="fp32")
    model = torch.nn.Conv2d(3, 4, 3).eval()
    with pytest.raises(ConfigError, match="contradicts the openvino option"):
        get_compiler("openvino", {"inference_precision": "bf16"}).compile(
            model, torch.randn(1, 3, 8, 8), ctx
        )


def test_openvino_bf16_is_refused_where_the_cpu_lacks_it() -> None:
    needs("openvino")
    result = run_trial(conv_spec("openvino", "bf16", hint="LATENCY"))
    if cpu_has_bf16():
        assert result.ok and result.precision == "bf16", result.error
    else:
        assert result.error_kind == "unsupported" and "bf16 was asked" in (result.error or "")


# ----------------------------------------------------------------------------- ONNX Runtime


def test_onnxruntime_cpu_records_fp32_and_refuses_tf32() -> None:
    needs("onnxruntime")
    strict = run_trial(conv_spec("onnxruntime", "fp32"))
    assert strict.ok and strict.precision == "fp32", strict.error
    assert strict.max_abs_err is not None and strict.max_abs_err <= 1e-4
    assert run_trial(conv_spec("onnxruntime", "tf32")).error_kind == "unsupported"


def test_onnxruntime_cuda_tf32_option_plumbing() -> None:
    providers = [CUDA, CPU]
    assert ort_backend.provider_options(providers, "fp32") == [{"use_tf32": "0"}, {}]
    assert ort_backend.provider_options(providers, "tf32") == [{"use_tf32": "1"}, {}]
    assert ort_backend.provider_options(providers, "default") == [{}, {}]
    assert ort_backend.resolve_precision(providers, {CUDA: {"use_tf32": "0"}}) == "fp32"
    assert ort_backend.resolve_precision(providers, {CUDA: {"use_tf32": "1"}}) == "tf32"
    assert ort_backend.resolve_precision(providers, {}) == "tf32"  # the CUDA EP's default
    assert ort_backend.resolve_precision([CPU], {CPU: {}}) == "fp32"


def test_onnxruntime_tensorrt_ep_cannot_promise_fp32(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ort_backend, "module_available", lambda m: (True, ""))
    available = [TRT, CUDA, CPU]
    assert ort_backend.select_providers("auto", "cuda", available) == [TRT, CUDA, CPU]
    assert ort_backend.select_providers("auto", "cuda", available, "fp32") == [CUDA, CPU]
    with pytest.raises(UnsupportedTrial, match="TensorRT EP has no TF32 switch"):
        ort_backend.select_providers("tensorrt", "cuda", available, "fp32")


# ----------------------------------------------------------------------------- TensorRT


def test_tensorrt_builder_flags_for_each_precision() -> None:
    plan = trt_backend.plan_precision
    assert plan("default", "fp32", True) == ("fp32", {})
    assert plan("fp32", "fp32", True) == ("fp32", {"TF32": False})
    assert plan("tf32", "fp32", True) == ("tf32", {"TF32": True})
    assert plan("fp16", "fp32", True) == ("fp16", {"FP16": True})
    assert plan("fp16", "fp32", False) == ("fp16", {})  # TensorRT 11: a half export instead
    assert plan("default", "int8", True) == ("int8", {"FP16": True, "INT8": True})
    with pytest.raises(ConfigError, match="contradicts the tensorrt option precision=fp16"):
        plan("tf32", "fp16", True)
    resolve = trt_backend.resolve_precision
    assert resolve({"TF32": True, "FP16": False}, False, tf32_hardware=True) == "tf32"
    assert resolve({"TF32": True, "FP16": False}, False, tf32_hardware=False) == "fp32"
    assert resolve({"TF32": False}, False, tf32_hardware=True) == "fp32"
    assert resolve({"TF32": False}, True, tf32_hardware=True) == "fp16"


@pytest.mark.gpu
def test_tensorrt_fp32_and_tf32_engines_record_their_flags(tmp_path: Path) -> None:
    needs("tensorrt")
    model = torch.nn.Conv2d(3, 8, 3).eval()
    flags = {}
    for precision in ("fp32", "tf32"):
        ctx = CompileContext(workdir=tmp_path / precision, device="cuda", precision=precision)
        compiled = get_compiler("tensorrt").compile(model, torch.randn(2, 3, 16, 16), ctx)
        flags[precision] = compiled.precision_flags
        compiled.close()
    assert flags["fp32"]["TF32"] is False and flags["tf32"]["TF32"] is True


# ----------------------------------------------------------------------------- the store


def test_precision_travels_to_the_store_and_older_files_migrate(tmp_path: Path) -> None:
    """A real trial into a real DuckDB file, one made at schema version 2 and upgraded."""
    needs("identity")
    duckdb = pytest.importorskip("duckdb")
    from ngb.sweeps.store import schema
    from ngb.sweeps.store.database import Store

    path = tmp_path / "v2.duckdb"
    conn = duckdb.connect(str(path))
    conn.execute(schema.VERSION_TABLE)
    for version, (description, statements) in enumerate(schema.MIGRATIONS[:2], start=1):
        for statement in statements:
            conn.execute(statement)
        conn.execute("INSERT INTO schema_version VALUES (?, ?, now())", [version, description])
    conn.execute(
        "INSERT INTO trials (run_id, device, key, status) VALUES ('old', 'dev', 'k', 'ok')"
    )
    conn.close()

    result = run_trial(conv_spec("identity", "fp32"))
    assert result.ok, result.error
    store = Store(path)
    assert store.ingest_results("new", "dev", [result]) == 1
    assert store.schema_version() == schema.latest_version()
    _, rows = store.select("SELECT run_id, precision, precision_asked FROM results ORDER BY 1")
    assert rows == [("new", "fp32", "fp32"), ("old", None, "default")]
    _, flags = store.select("SELECT precision_flags FROM trials WHERE run_id = 'new'")
    assert json.loads(flags[0][0])["float32_matmul_precision"] == "highest"


def test_sweeps_set_precision_in_measure_and_per_matrix() -> None:
    from ngb.sweeps.spec.sweep import loads_sweep

    text = """
        [measure]
        precision = "fp32"

        [[matrix]]
        models = ["resnet18"]
        compilers = ["openvino"]
        batches = [1]

        [[matrix]]
        models = ["resnet18"]
        compilers = ["openvino"]
        batches = [1]
        measure = { precision = "default" }
    """
    trials = loads_sweep(textwrap.dedent(text)).trials()
    assert [t.measure.precision for t in trials] == ["fp32", "default"]
    assert trials[0].key != trials[1].key
    with pytest.raises(ConfigError, match="precision must be one of"):
        loads_sweep(textwrap.dedent(text).replace('"fp32"', '"fp64"'))
