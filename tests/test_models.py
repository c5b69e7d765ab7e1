"""Models and blocks: exact paper parameter counts, MACs, create_model, errors, `ngb models`."""

from __future__ import annotations

import io
import json
import os
import pickle
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402
from ngb.core.base.errors import ConfigError, UnknownNameError  # noqa: E402
from ngb.core.models import blocks, models  # noqa: E402
from ngb.core.records.types import TrialSpec  # noqa: E402

from tests.installed import needs  # noqa: E402

pytestmark = needs("timm")  # imported by the tests that build models, not while collecting

# The paper's Table IV, which these timm 1.0.31 names reproduce to the digit.
PAPER_PARAMS = {
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "efficientnet_b3": 12_233_232,
    "efficientnet_b4": 19_341_616,
    "efficientnet_b5": 30_389_784,
    "deit3_small_patch16_224": 22_059_496,
    "deit3_medium_patch16_224": 38_849_512,
    "deit3_base_patch16_224": 86_585_320,
    "swin_s3_tiny_224": 28_328_674,
    "swin_s3_small_224": 49_737_298,
    "swin_s3_base_224": 71_125_762,
    "convnext_tiny": 28_589_128,
    "convnext_small": 50_223_688,
    "convnext_base": 88_591_464,
}
# Table V, written out (not imported from the module under test).
BLOCK_PARAMS = [
    ("conv", 64, 37_056),
    ("conv", 96, 83_232),
    ("conv", 128, 147_840),
    ("conv", 256, 590_592),
    ("mha", 128, 66_048),
    ("mha", 256, 263_168),
    ("mha", 384, 591_360),
    ("mha", 512, 1_050_624),
]


def test_importing_models_and_metrics_stays_light():
    code = (
        "import sys, ngb.core.models.models, ngb.core.models.blocks, ngb.core.trial.metrics, "
        "ngb.sweeps.cli.models; "
        "print(sorted(m for m in ('torch', 'timm') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_paper_families_are_table_iv():
    assert set(models.PAPER_MODELS) == set(PAPER_PARAMS)
    assert list(models.PAPER_FAMILIES) == ["resnet", "efficientnet", "deit", "swin", "convnext"]
    assert all(len(v) == 3 for v in models.PAPER_FAMILIES.values())
    assert models.family_of("deit3_medium_patch16_224") == "deit"
    assert models.family_of("resnet50.a1_in1k") == "resnet"  # timm pretrained tag
    assert models.family_of("conv") == models.family_of("mha") == "block"
    assert models.family_of("mobilenetv3_small_100") is None


@pytest.mark.parametrize(("kind", "width", "expected"), BLOCK_PARAMS)
def test_block_params_match_table_v(kind, width, expected):
    stack = blocks.build_block_stack(kind, width, depth=1)
    assert models.count_params(stack) == expected
    assert blocks.block_params(kind, width) == expected
    # Depth stacks blocks: parameters scale linearly.
    assert models.count_params(blocks.build_block_stack(kind, width, depth=3)) == 3 * expected


def test_mha_heads_keep_head_size_64():
    assert [blocks.mha_heads(d) for d in (128, 256, 384, 512)] == [2, 4, 6, 8]
    assert blocks.mha_heads(96) == 1
    assert blocks.mha_heads(320) == 5
    stack = blocks.build_block_stack("mha", 384)
    assert stack[0].attn.num_heads == 6
    assert stack[0].norm.elementwise_affine is False


def test_block_macs_are_the_matrix_work():
    conv = models.model_info("conv", width=64)
    # 3x3 conv, 64 -> 64 channels, every one of 56*56 output pixels: 9*64*64*3136 MACs.
    assert conv.macs == 9 * 64 * 64 * 56 * 56 == 115_605_504
    assert conv.input_shape == (1, 64, 56, 56) and conv.params == 37_056
    mha = models.model_info("mha", width=128, depth=2)
    # Per block, L=10 tokens: Q,K,V,out projections 4*L*d*d + scores L*L*d + weighted sum L*L*d.
    per_block = 4 * 10 * 128 * 128 + 2 * 10 * 10 * 128
    assert per_block == 680_960
    assert mha.macs == 2 * per_block
    assert mha.params == 2 * 66_048 and mha.depth == 2 and mha.width == 128
    assert mha.label == "mha128x2"
    assert models.model_info("conv", width=64, input_size=28).macs == 9 * 64 * 64 * 28 * 28


def test_resnet18_info():
    info = models.model_info("resnet18")
    assert info.params == PAPER_PARAMS["resnet18"]
    assert info.family == "resnet"
    assert info.input_shape == (1, 3, 224, 224)
    assert 1.80e9 < info.macs < 1.83e9  # the commonly quoted 1.81-1.82 GMACs


def test_model_info_follows_timm_input_size():
    # efficientnet_b3's pretrained config is 288x288, not 224.
    assert models.model_info("efficientnet_b3").input_shape == (1, 3, 288, 288)
    spec = TrialSpec(model="conv", compiler="identity", batch=8, width=96, depth=4)
    assert models.model_info_for(spec).params == 4 * 83_232


@pytest.mark.parametrize("name", sorted(PAPER_PARAMS))
def test_table_iv_params_on_meta(name):
    """All 15 Table IV counts; built on the meta device (no weights allocated), so it is cheap."""
    import timm

    with torch.device("meta"):
        model = timm.create_model(name, pretrained=False)
    assert models.count_params(model) == PAPER_PARAMS[name]
    assert models.family_of(name) is not None


@pytest.mark.slow
def test_table_iv_full_info():
    """Every paper model counted through model_info, and built for real once on CPU."""
    for name, expected in PAPER_PARAMS.items():
        info = models.model_info(name)
        assert info.params == expected, name
        assert info.macs > 1e9, name
        model, example = models.create_model(TrialSpec(model=name, compiler="identity"))
        assert models.count_params(model) == expected, name
        assert example.shape == info.input_shape


def test_create_model_timm_shapes_and_determinism():
    spec = TrialSpec(model="resnet18", compiler="identity", batch=2)
    rng_before = torch.random.get_rng_state()
    model, example = models.create_model(spec)
    assert torch.equal(torch.random.get_rng_state(), rng_before)  # global RNG left alone
    assert not model.training
    assert example.shape == (2, 3, 224, 224) and example.dtype == torch.float32
    assert example.device.type == "cpu"
    model2, example2 = models.create_model(spec)
    assert torch.equal(example, example2)
    with torch.no_grad():
        out, out2 = model(example), model2(example2)
    assert out.shape == (2, 1000)
    assert torch.isfinite(out).all()
    assert torch.equal(out, out2)  # same seeded weights, same input


def test_create_model_blocks():
    model, x = models.create_model(
        TrialSpec(model="conv", compiler="identity", batch=3, width=64, depth=2)
    )
    assert x.shape == (3, 64, 56, 56) and len(model) == 2 and not model.training
    with torch.no_grad():
        assert model(x).shape == x.shape
    model, x = models.create_model(
        TrialSpec(model="mha", compiler="identity", batch=4, width=128, depth=3)
    )
    assert x.shape == (4, 10, 128)
    with torch.no_grad():
        y = model(x)
    assert y.shape == x.shape and (y >= 0).all()  # ReLU last
    # input_size: conv spatial side, MHA sequence length.
    _, x = models.create_model(
        TrialSpec(model="conv", compiler="identity", width=64, input_size=28)
    )
    assert x.shape == (1, 64, 28, 28)
    _, x = models.create_model(
        TrialSpec(model="mha", compiler="identity", width=128, input_size=16)
    )
    assert x.shape == (1, 16, 128)


def test_deep_conv_stack_keeps_activation_scale():
    model, x = models.create_model(TrialSpec(model="conv", compiler="identity", width=64, depth=16))
    with torch.no_grad():
        y = model(x)
    # Kaiming init: the output is neither vanishing nor exploding after 16 blocks.
    assert 0.1 < y.abs().mean().item() < 10


def test_fixed_size_timm_model_rebuilt_for_input_size():
    spec = TrialSpec(model="deit3_small_patch16_224", compiler="identity", input_size=160)
    model, x = models.create_model(spec)
    assert x.shape == (1, 3, 160, 160)
    with torch.no_grad():
        assert model(x).shape == (1, 1000)
    _, x = models.create_model(TrialSpec(model="resnet18", compiler="identity", input_size=112))
    assert x.shape == (1, 3, 112, 112)


def test_unknown_model_lists_close_matches():
    with pytest.raises(UnknownNameError) as err:
        models.resolve_model("resnet181")
    assert "resnet18" in err.value.close
    assert "did you mean" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(UnknownNameError):
        models.create_model(TrialSpec(model="convnext_tinyy", compiler="identity"))
    assert models.resolve_model("conv") == "conv"
    assert models.resolve_model("resnet18") == "resnet18"


def test_bad_block_arguments():
    with pytest.raises(ConfigError, match="width"):
        models.model_info("conv")
    with pytest.raises(ConfigError, match="depth"):
        blocks.build_block_stack("mha", 128, depth=0)
    with pytest.raises(UnknownNameError):
        blocks.block_params("lstm", 128)


def test_cuda_device_without_gpu_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(models.NgbError, match="no CUDA"):
        models.create_model(TrialSpec(model="conv", compiler="identity", width=64, device="cuda"))


def test_block_stack_pickles():
    model, x = models.create_model(TrialSpec(model="mha", compiler="identity", width=128, depth=2))
    clone = pickle.loads(pickle.dumps(model))
    assert type(clone[0]) is blocks.MhaBlock
    with torch.no_grad():
        assert torch.equal(clone(x), model(x))


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_mha_block_exports_to_onnx_and_agrees():
    """Eager torch's fused attention has no ONNX translation; the block exports through the
    composite path with the same weights."""
    ort = pytest.importorskip("onnxruntime")
    model, x = models.create_model(
        TrialSpec(model="mha", compiler="identity", batch=2, width=128, depth=2)
    )
    buf = io.BytesIO()
    with torch.no_grad():
        ref = model(x).numpy()
        torch.onnx.export(model, (x,), buf, dynamo=False, opset_version=17)
    session = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    assert abs(out - ref).max() < 1e-4


@pytest.fixture
def small_paper(monkeypatch):
    """Shrink the paper table to one model and two blocks so cache/CLI tests stay fast."""
    monkeypatch.setattr(models, "PAPER_MODELS", ("resnet18",))
    monkeypatch.setattr(models, "PAPER_BLOCK_WIDTHS", {"conv": (64,), "mha": (128,)})


def test_paper_table_cache(tmp_path, small_paper):
    seen = []
    first = models.paper_table(
        cache_dir=tmp_path, progress=lambda i, n, name: seen.append((i, n, name))
    )
    assert seen == [(0, 3, "resnet18"), (1, 3, "conv64"), (2, 3, "mha128")]
    assert not first.from_cache
    assert [m.params for m in first.models] == [11_689_512]
    assert [(b.name, b.width, b.params) for b in first.blocks] == [
        ("conv", 64, 37_056),
        ("mha", 128, 66_048),
    ]
    cache_file = tmp_path / "paper_models.json"
    assert cache_file.exists()

    seen.clear()
    second = models.paper_table(cache_dir=tmp_path, progress=lambda *a: seen.append(a))
    assert second.from_cache and not seen
    assert second.models == first.models and second.blocks == first.blocks

    # A cache from other library versions is ignored, a corrupt one too.
    data = json.loads(cache_file.read_text())
    data["versions"]["timm"] = "0.0.1"
    cache_file.write_text(json.dumps(data))
    assert not models.paper_table(cache_dir=tmp_path).from_cache
    cache_file.write_text("{not json")
    third = models.paper_table(cache_dir=tmp_path)
    assert not third.from_cache and third.models == first.models


def test_cli_models(tmp_path, monkeypatch, small_paper):
    from ngb.sweeps.cli import cli

    monkeypatch.setenv("NGB_HOME", str(tmp_path))
    runner = CliRunner()
    result = runner.invoke(cli, ["models"])
    assert result.exit_code == 0, result.output
    assert "resnet18" in result.stdout and "11,689,512" in result.stdout
    assert "37,056" in result.stdout and "66,048" in result.stdout
    assert "FlopCounterMode" in result.stdout
    assert "first run" in result.stderr
    assert (tmp_path / "cache" / "paper_models.json").exists()

    result = runner.invoke(cli, ["models", "--json", "--no-blocks"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["blocks"] == []
    assert data["models"][0]["model"] == "resnet18"
    assert data["models"][0]["params"] == 11_689_512
    assert data["models"][0]["input_shape"] == [1, 3, 224, 224]
    assert "first run" not in result.stderr  # served from the cache

    result = runner.invoke(cli, ["models", "--family", "resnet", "--json"])
    data = json.loads(result.stdout)
    assert [m["family"] for m in data["models"]] == ["resnet"] and data["blocks"] == []

    result = runner.invoke(cli, ["models", "--family", "resnt"])
    assert result.exit_code != 0
    assert "unknown family 'resnt'" in result.output and "resnet" in result.output
    assert "Traceback" not in result.output


def test_a_trials_model_info_is_counted_once_and_then_read_back(tmp_path, monkeypatch):
    """Worker 0 counted its model's MACs in every trial (torch's counter imports torch._dynamo:
    ~2 CPU-s, issue 44); now once per model and torch / timm version, kept in the cache dir."""
    counted: list[tuple[object, ...]] = []
    real = models.model_info

    def counting(*args: object) -> models.ModelInfo:
        counted.append(args)
        return real(*args)

    monkeypatch.setattr(models, "model_info", counting)
    spec = TrialSpec(model="mha", compiler="identity", batch=8, width=64, depth=2)
    first = models.model_info_for(spec, tmp_path)
    # another compiler and batch of the same model: the figure is read, not counted
    again = models.model_info_for(
        TrialSpec(model="mha", compiler="noop", width=64, depth=2), tmp_path
    )
    assert again == first and len(counted) == 1
    assert first == real("mha", 64, 2, None)  # the kept figure is the counted one
    # another depth is another model; a torch upgrade or a damaged file counts again
    models.model_info_for(TrialSpec(model="mha", compiler="noop", width=64, depth=3), tmp_path)
    assert len(counted) == 2
    for kept in (tmp_path / "model-info").glob("*.json"):
        kept.write_text("{not json")
    models.model_info_for(spec, tmp_path)
    assert len(counted) == 3
    for kept in (tmp_path / "model-info").glob("*.json"):  # a FIFO there: counted, no hang
        kept.unlink()
        os.mkfifo(kept)
    models.model_info_for(spec, tmp_path)
    assert len(counted) == 4
    for kept in (tmp_path / "model-info").glob("*.json"):
        kept.unlink()
    monkeypatch.setattr(models, "_versions", lambda: {"torch": "9.9", "timm": "9.9"})
    models.model_info_for(spec, tmp_path)
    assert len(counted) == 5
    # no cache dir (ngb.core used alone): counted every time, nothing written
    models.model_info_for(spec, None)
    assert len(counted) == 6
