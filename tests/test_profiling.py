"""Per-operator profiles (issue 34): real runtimes on a tiny conv block, one vocabulary.

Each compiler's own profiler runs in a profile pass apart from any timed trial; the records get
an operator class and a fused flag, and add up to the profiled time per call."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from ngb.core.base.errors import UnsupportedTrial
from ngb.core.base.isolate import call_in_child
from ngb.core.compilers import get_compiler
from ngb.core.compilers.profiling import (
    OP_CLASSES,
    Profile,
    classify,
    is_fused,
    openvino_records,
)
from ngb.core.records.types import TrialSpec
from ngb.core.trial.profile_pass import profile_trial
from ngb.sweeps.cli import cli
from ngb.sweeps.report.catalog import render
from ngb.sweeps.report.ops import ops_report


def test_one_vocabulary_for_every_runtime() -> None:
    assert classify("aten::mkldnn_convolution") == "convolution"
    assert classify("Conv") == classify("Convolution") == "convolution"
    assert classify("Convert") == "layout/copy"  # a precision conversion, not a conv
    assert classify("aten::addmm") == classify("MatMul") == classify("FullyConnected")
    assert classify("aten::scaled_dot_product_attention") == "attention"
    assert classify("aten::native_batch_norm") == classify("MVN") == "normalisation"
    assert classify("Reorder") == classify("ReorderInput") == "layout/copy"
    assert classify("aten::max_pool2d_with_indices") == "pooling"
    assert classify("aten::clamp_min") == classify("Eltwise") == "activation/elementwise"
    assert classify("something_else") == "other"
    assert is_fused("cpp_fused_add_relu_0") and is_fused("FusedConv")
    assert is_fused("prim::TensorExprGroup") and not is_fused("aten::relu")


def test_openvino_counters_are_read_as_running_means() -> None:
    def item(name: str, us: float, status: str = "Status.EXECUTED") -> SimpleNamespace:
        return SimpleNamespace(
            node_name=name, node_type="Convolution" if "conv" in name else "Reorder",
            exec_type="brgconv_avx2_f32", status=status, real_time=dt.timedelta(microseconds=us),
        )  # fmt: skip

    # the request's first call took 1,000 us in the conv, the next four 100 us each: the reading
    # after the first is 1,000 (its mean), after all five (1,000 + 400) / 5 = 280
    before = [item("conv", 1000.0), item("r", 30.0), item("gone", 5.0, "Status.OPTIMIZED_OUT")]
    after = [item("conv", 280.0), item("r", 16.0), item("gone", 5.0, "Status.OPTIMIZED_OUT")]
    records = openvino_records(before, after, 1, 4, {"conv": ("conv", "relu")})
    by_name = {r.name: r for r in records}
    assert set(by_name) == {"conv", "r"}  # an optimised-out node ran inside another
    assert by_name["conv"].us_per_inference == pytest.approx(100.0) and by_name["conv"].fused
    assert by_name["r"].us_per_inference == pytest.approx((16.0 * 5 - 30.0) / 4)
    assert by_name["conv"].source_ops == ("conv", "relu") and not by_name["r"].fused
    assert all(r.calls_per_inference == 1.0 for r in records)


needs_openvino = pytest.mark.skipif(
    not get_compiler("openvino").available()[0], reason="openvino not installed"
)


@needs_openvino
def test_openvino_counters_are_a_running_mean_over_the_streams_calls() -> None:
    """What ``openvino_records`` and the profile build's one stream rely on, on the installed
    runtime: one slow call (a 768x768 input through a model of dynamic spatial size) among fast
    ones raises every later reading, which falls back as 1/n -- a counter of the last call alone
    would drop at once -- and another request on the same stream reads the same mean. (Running
    means read as per-call times made CI's profile of a conv block claim 0.84 ms for calls of
    0.086 ms: a slow warm-up call stayed in every reading.)"""
    import numpy as np
    import openvino as ov
    import torch

    model = torch.nn.Sequential(torch.nn.Conv2d(4, 4, 3, padding=1), torch.nn.ReLU()).eval()
    converted = ov.convert_model(model, example_input=torch.randn(1, 4, 16, 16),
                                 input=[(1, 4, -1, -1)])  # fmt: skip
    compiled = ov.Core().compile_model(
        converted, "CPU", {"PERF_COUNT": "YES", "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1}
    )
    request, other = compiled.create_infer_request(), compiled.create_infer_request()

    def seconds(r: ov.InferRequest) -> float:
        info = r.get_profiling_info()
        return sum(i.real_time.total_seconds() for i in info if "EXECUTED" in str(i.status))

    def reading(side: int) -> float:
        request.infer([np.ones((1, 4, side, side), np.float32)])
        return seconds(request)

    for _ in range(5):
        reading(16)
    slow = reading(768)
    after = [reading(16) for _ in range(3)]
    # a fast call is far below the slow one's mean over six calls; the readings stay within
    # reach of (that mean * 6) / 7, 8, 9 and fall call after call
    assert after[0] > 0.5 * slow * 6 / 7 and after[0] > after[1] > after[2] > 0.5 * slow * 6 / 9
    assert seconds(other) == pytest.approx(after[2])  # it never ran, yet reads the stream's mean


AVAILABLE = [c for c in ("identity", "torchscript", "onnxruntime", "openvino")
             if get_compiler(c).available()[0]]  # fmt: skip


def profile_conv(compiler: str, where: Path) -> Profile:
    spec = TrialSpec(model="conv", compiler=compiler, batch=1, width=8)
    return call_in_child(compiler, profile_trial, spec, where, 8, 2)


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Profile]:
    return {c: profile_conv(c, tmp_path_factory.mktemp(c)) for c in AVAILABLE}


@pytest.mark.parametrize("compiler", AVAILABLE)
def test_each_runtime_profiles_a_conv_block(profiles: dict[str, Profile], compiler: str) -> None:
    p = profiles[compiler]
    classes = p.by_class()
    assert set(classes) == set(OP_CLASSES)
    assert classes["convolution"] > 0  # the block's one 3x3 conv is found, whatever its name
    assert p.kernels_per_inference >= 1 and p.plain_ms > 0 and p.profiled_ms > 0
    # the records never claim much more time than the profiled calls took (OpenVINO's counters
    # are per node, not wall time); on a block this small (about 1 ms a call) the profiler's
    # own cost between ops is most of what is not attributed -- the report shows it. A sum not
    # divided by the calls (8x) fails, and so did OpenVINO's running means read as per-call
    # times (CI, 2026-11-29: 1.58 ms and 0.84 ms for calls of 0.104 and 0.086 ms).
    assert 0 < p.kernel_ms < 2.0 * p.profiled_ms, (p.kernel_ms, p.profiled_ms)


def test_fusion_shows_in_the_records(profiles: dict[str, Profile]) -> None:
    if "identity" in profiles:  # eager runs conv, batch norm and relu as three kernels
        assert profiles["identity"].by_class()["normalisation"] > 0
    if "torchscript" in profiles:  # frozen TorchScript folds the batch norm into the conv
        assert profiles["torchscript"].by_class()["normalisation"] == 0
    if "openvino" in profiles:  # conv + bias + relu: one node made of several
        convs = [r for r in profiles["openvino"].records if r.op_class == "convolution"]
        assert any(r.fused and len(r.source_ops) > 1 for r in convs)


@pytest.mark.slow  # TVM's import and build: ~10 s quiet, ~30 s under load
@pytest.mark.skipif(not get_compiler("tvm").available()[0], reason="tvm is not installed")
def test_tvm_relax_vm_profiles_a_conv_block(tmp_path: Path) -> None:
    spec = TrialSpec(model="conv", compiler="tvm", batch=1, width=8)
    tvm = call_in_child("tvm", profile_trial, spec, tmp_path, 6, 2)
    assert tvm.profiler == "tvm relax VM instrument"
    assert tvm.by_class()["convolution"] > 0 and tvm.plain_ms > 0
    names = {r.name for r in tvm.records}
    assert any(n.startswith("vm.builtin.") for n in names)  # the VM's own calls are seen too
    # Relax legalises batch norm into elementwise TIR kernels: no normalisation class is left
    assert tvm.by_class()["activation/elementwise"] > 0 and tvm.by_class()["normalisation"] == 0
    assert 0 < tvm.kernel_ms < 2.0 * tvm.profiled_ms


def test_tvm_kernel_names_get_classes() -> None:
    assert classify("conv2d") == classify("fused_conv2d_add_relu") == "convolution"
    assert is_fused("fused_conv2d_add_relu") and not is_fused("conv2d")
    assert classify("matmul") == "matmul/linear" and classify("softmax") == "attention"
    assert classify("layer_norm") == "normalisation" and classify("mean") == "pooling"
    assert classify("vm.builtin.reshape") == "layout/copy"
    assert classify("vm.builtin.alloc_storage") == "other"


def test_report_renders_side_by_side(profiles: dict[str, Profile]) -> None:
    text = render(ops_report("conv w8 b1", list(profiles.values()), ["tvm: not wired"]), "csv")
    assert "class," in text and "kernels / inference" in text and "profiled / plain" in text
    markdown = render(ops_report("conv w8 b1", list(profiles.values()), ["tvm: x"]), "markdown")
    assert "not profiled: tvm: x" in markdown  # a compiler that failed is named, not dropped
    for compiler in profiles:
        assert compiler in markdown


def test_a_runtime_without_a_profiler_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedTrial, match="no profiler is wired"):
        profile_trial(TrialSpec(model="conv", compiler="noop", batch=1, width=8), tmp_path)


def test_cli_refuses_bad_input_in_one_line() -> None:
    runner = CliRunner()
    bad = runner.invoke(cli, ["profile", "resnet18", "--width", "8"])
    assert bad.exit_code == 1 and "apply to blocks only" in bad.output
    bad = runner.invoke(cli, ["profile", "conv", "--width", "8", "-c", "nope"])
    assert bad.exit_code == 1 and "nope" in bad.output and "Traceback" not in bad.output


def test_profiles_are_stored_and_reported(profiles: dict[str, Profile], tmp_path: Path) -> None:
    from ngb.sweeps.report.catalog import build_report
    from ngb.sweeps.store.database import Store
    from ngb.sweeps.store.profiles import ProfilePoint, load_profiles, save_profiles

    store = Store(tmp_path / "r.duckdb")
    store.create_run("prof", "profile", "", ["localhost"], 0)
    found = [
        (ProfilePoint("localhost", "conv", 8, 1, 1, c, p.precision), p) for c, p in profiles.items()
    ]
    rows = save_profiles(store, "prof", found)
    assert rows == sum(1 + len(p.records) for p in profiles.values())
    back = dict((pt.compiler, p) for pt, p in load_profiles(store, model="conv"))
    assert set(back) == set(profiles)
    for compiler, p in profiles.items():
        assert back[compiler].kernel_ms == pytest.approx(p.kernel_ms)
        assert back[compiler].by_class() == pytest.approx(p.by_class())
    report = render(build_report("ops", store), "markdown")
    assert "conv w8 b1 on localhost" in report and "timed ms / call" in report


def test_cli_store_is_checked_before_profiling(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "fifo.duckdb"
    os.mkfifo(fifo)
    out = CliRunner().invoke(cli, ["profile", "conv", "--width", "8", "--db", str(fifo)])
    assert out.exit_code == 1 and "profiling" not in out.output  # refused before any work
