"""Users' own models (issue 9): timm + kwargs, python factories, ONNX files, .pt2 programs.

Real parts only: the ONNX and .pt2 files are exported here, the factories live in a small package
written to a temporary folder, and every trial goes through the real compilers (identity,
torchscript, onnxruntime, openvino) via ``ngb measure`` and via ``ngb run`` on the built-in
localhost. Models are tiny and the measure settings minimal, so this stays fast.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import duckdb
import pytest
from ngb.core.base.errors import ConfigError, NgbError
from ngb.core.models.model_sources import (
    InputSpec,
    ModelSource,
    artifact_dir,
    folder_files,
    locate,
    parse_input,
    parse_source,
    sha256_of,
)
from ngb.core.records.types import MeasureSettings, TrialSpec
from ngb.sweeps.spec.sweep import loads_sweep

from tests.cli_helpers import invoke
from tests.timm_names import seed_timm_names

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

FAST = ["--repetitions", "1", "--min-duration", "0.01", "--min-iters", "2", "--warmup-iters", "1"]
FAST += ["--warmup-s", "0"]

PACKAGE = {
    "__init__.py": "",
    "text.py": """
        import torch
        from torch import nn

        class Text(nn.Module):
            def __init__(self, vocab, dim):
                super().__init__()
                self.embed = nn.Embedding(vocab, dim)
                layer = nn.TransformerEncoderLayer(dim, 2, dim * 2, dropout=0.0, batch_first=True)
                self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
                self.head = nn.Linear(dim, 3)

            def forward(self, tokens):
                return self.head(self.encoder(self.embed(tokens)).mean(dim=1))

        def text(vocab=50, dim=16):
            return Text(vocab, dim)
    """,
    "two.py": """
        import torch
        from torch import nn

        class Two(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(8, 4)
                self.b = nn.Linear(6, 4)

            def forward(self, x, y):
                return torch.relu(self.a(x) + self.b(y))

        def two():
            return Two()

        def broken(width=3):
            raise ValueError(f"width {width} is not supported by this net")

        def not_a_module():
            return 42
    """,
    "bad_import.py": """
        import a_module_that_does_not_exist  # noqa
        def build():
            pass
    """,
}


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the package ``nets``, a two-input ONNX file and a token .pt2 program."""
    root = tmp_path_factory.mktemp("own")
    (root / "nets").mkdir()
    for name, text in PACKAGE.items():
        (root / "nets" / name).write_text(textwrap.dedent(text))
    sys.path.insert(0, str(root))
    try:
        from nets.text import text
        from nets.two import two
    finally:
        sys.path.remove(str(root))
        for name in [n for n in sys.modules if n == "nets" or n.startswith("nets.")]:
            del sys.modules[name]
    torch.manual_seed(0)
    torch.onnx.export(
        two().eval(),
        (torch.randn(2, 8), torch.randn(2, 6)),
        str(root / "two.onnx"),
        dynamo=False,
        opset_version=17,
        input_names=["x", "y"],
        output_names=["out"],
        dynamic_axes={"x": {0: "n"}, "y": {0: "n"}, "out": {0: "n"}},
    )
    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch.export.export(
        text().eval(), (torch.randint(0, 50, (2, 12)),), dynamic_shapes=({0: batch},)
    )
    torch.export.save(program, str(root / "text.pt2"))
    (root / "corrupt.onnx").write_bytes(b"\x08\x07this is not a protobuf of a model")
    return root


# ---------------------------------------------------------------- sources and inputs


def test_sources_are_told_apart_and_files_are_content_addressed(parts: Path) -> None:
    onnx = parse_source("two.onnx", base_dir=parts)
    assert onnx.kind == "onnx" and onnx.takes == "onnx"
    assert [i.to_dict() for i in onnx.inputs] == [
        {"name": "x", "shape": ["batch", 8], "dtype": "float32"},
        {"name": "y", "shape": ["batch", 6], "dtype": "float32"},
    ]
    assert onnx.artifacts[0].sha256 == sha256_of(parts / "two.onnx")
    pkg = parse_source("nets.text:text", kwargs={"dim": 16}, base_dir=parts)
    assert (pkg.kind, pkg.artifacts[0].role, pkg.artifacts[0].name) == ("python", "package", "nets")
    assert parse_source("resnet18", kwargs={"num_classes": 3}).kind == "timm"
    assert parse_source("text.pt2", base_dir=parts).kind == "pt2"
    # a folder's hash follows its content and ignores caches
    before = sha256_of(parts / "nets")
    (parts / "nets" / "__pycache__").mkdir(exist_ok=True)
    (parts / "nets" / "__pycache__" / "x.pyc").write_bytes(b"cache")
    assert sha256_of(parts / "nets") == before


def test_artifacts_are_found_in_the_device_cache_first(parts: Path, tmp_path: Path) -> None:
    source = parse_source("two.onnx", base_dir=parts)
    artifact = source.artifacts[0]
    shipped = artifact_dir(tmp_path, artifact.sha256) / artifact.name
    shipped.parent.mkdir(parents=True)
    shipped.write_bytes((parts / "two.onnx").read_bytes())
    assert locate(artifact, tmp_path) == shipped
    assert locate(artifact, None) == parts / "two.onnx"
    gone = ModelSource.from_dict(
        {**source.to_dict(), "artifacts": [{**artifact.to_dict(), "local": "/nowhere/two.onnx"}]}
    )
    with pytest.raises(Exception, match="is not on this device"):
        locate(gone.artifacts[0], None)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("missing.onnx", "model file not found"),
        ("corrupt.onnx", "corrupt.onnx is not a valid ONNX model"),
        ("nowhere/file.py:build", "python file not found"),
        ("nets.text:1abc", "is not a function name"),
    ],
)
def test_bad_sources_are_one_line(parts: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        parse_source(text, base_dir=parts)
    assert "\n" not in str(info.value)


def test_declared_inputs_must_match_the_onnx_graph(parts: Path) -> None:
    wrong = (InputSpec("x", ("batch", 9)), InputSpec("y", ("batch", 6)))
    with pytest.raises(ConfigError, match="dimension 1 is 8 in the graph"):
        parse_source("two.onnx", inputs=wrong, base_dir=parts)
    with pytest.raises(ConfigError, match="do not match the graph's inputs"):
        parse_source("two.onnx", inputs=(InputSpec("x", ("batch", 8)),), base_dir=parts)


def test_input_specs() -> None:
    tokens = parse_input("tokens:batch,16:int64:0-1000")
    assert tokens == InputSpec("tokens", ("batch", 16), "int64", (0, 1000))
    assert tokens.concrete(4) == (4, 16)
    for bad, message in [
        ("x:batch,batch", "at most one"),
        ("x:batch,3:float32:0-9", "range applies to integer"),
        ("x:batch,3:complex", "dtype"),
        ("x:batch,-1", "positive integers"),
        ("x:batch:int64:5-5", "high > low"),
    ]:
        with pytest.raises(ConfigError, match=message):
            parse_input(bad)


def test_keys_of_trials_without_a_source_are_unchanged() -> None:
    plain = TrialSpec(model="resnet18", compiler="identity")
    data = plain.to_dict()
    assert data.pop("source") is None
    with_source = TrialSpec(
        model="resnet18", compiler="identity", source={"kind": "timm", "ref": "resnet18"}
    )
    assert with_source.key != plain.key
    assert TrialSpec.from_dict(with_source.to_dict()).key == with_source.key


# ---------------------------------------------------------------- sweep files


SWEEP = """
name = "own"
baseline = "onnxruntime"
[measure]
repetitions = 1
min_duration_s = 0.01
min_iters = 2
warmup_iters = 1
warmup_s = 0.0

[[models]]
name = "Token Text"
source = "nets.text:text"
kwargs = { vocab = 50, dim = 16 }
inputs = [{ name = "tokens", shape = ["batch", 12], dtype = "int64", range = [0, 50] }]

[[models]]
name = "two-in"
source = "nets.two:two"
inputs = [{ name = "x", shape = ["batch", 8] }, { name = "y", shape = ["batch", 6] }]

[[models]]
name = "two-onnx"
source = "two.onnx"

[[models]]
name = "text-pt2"
source = "text.pt2"

[[models]]
name = "raises"
source = "nets.two:broken"
inputs = [{ name = "x", shape = ["batch", 8] }]

[[matrix]]
models = ["Token Text", "two-in", "two-onnx", "text-pt2", "raises"]
compilers = ["identity", "onnxruntime"]
batches = [2]
"""


def test_sweep_models_tables(parts: Path) -> None:
    sweep = loads_sweep(SWEEP, base_dir=parts)
    assert sweep.baseline == "onnxruntime"
    trials = sweep.trials()
    assert len(trials) == 10
    by_model = {t.model: t for t in trials}
    assert by_model["two-onnx"].source["kind"] == "onnx"
    assert by_model["Token Text"].source["kwargs"] == {"vocab": 50, "dim": 16}
    assert sweep.models() == []  # no plain timm names to check
    again = loads_sweep(sweep.to_toml())  # absolute paths: reads back anywhere
    assert [t.key for t in again.trials()] == [t.key for t in trials]
    assert again.baseline == "onnxruntime"


def test_own_model_family_and_reference(parts: Path) -> None:
    """Issue 20: a ``family`` key is taken; without one the family is the whole name (not its
    leading letters); an ONNX file's outputs are checked against ONNX Runtime, and say so."""
    from ngb.sweeps.cli.measure import _reference_name
    from ngb.sweeps.store.ingest import model_family

    text = SWEEP.replace('name = "two-in"', 'name = "two-in"\nfamily = "pairs"')
    text = text.replace('name = "two-onnx"', 'name = "mnv3s-onnx"').replace(
        '"two-onnx"', '"mnv3s-onnx"'
    )
    sweep = loads_sweep(text, base_dir=parts)
    by_model = {t.model: t for t in sweep.trials()}
    assert model_family("two-in", by_model["two-in"].source) == "pairs"
    assert model_family("mnv3s-onnx", by_model["mnv3s-onnx"].source) == "mnv3s-onnx"
    assert model_family("resnet18") == "resnet" and model_family("regnety_040") == "regnety"
    # the family travels with the sweep's copy, and a model without one keeps its old key
    again = {t.model: t for t in loads_sweep(sweep.to_toml()).trials()}
    assert again["two-in"].source["family"] == "pairs"
    assert again["text-pt2"].key == {t.model: t for t in loads_sweep(SWEEP, base_dir=parts)
                                     .trials()}["text-pt2"].key  # fmt: skip
    assert _reference_name(by_model["mnv3s-onnx"]) == "ONNX Runtime (unoptimised)"
    assert _reference_name(by_model["two-in"]) == "eager"
    with pytest.raises(ConfigError, match="family must be a non-empty string"):
        loads_sweep(
            SWEEP.replace('name = "two-in"', 'name = "two-in"\nfamily = ""'), base_dir=parts
        )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            ('source = "two.onnx"', 'source = "gone.onnx"'),
            "models 'two-onnx': model file not found",
        ),
        (('source = "two.onnx"', 'source = "corrupt.onnx"'), "not a valid ONNX model"),
        (('baseline = "onnxruntime"', 'baseline = "onnxrt"'), "unknown compiler 'onnxrt'"),
        (("batches = [2]", "batches = [2]\nwidths = [64]"), "widths do not apply to model"),
        (('name = "two-in"', 'name = "conv"'), "is a built-in block"),
        (('source = "nets.two:two"\ninputs', 'source = "nets.two:two"\nxinputs'), "unknown key"),
    ],
)
def test_bad_sweep_models_are_one_line(parts: Path, change: tuple[str, str], message: str) -> None:
    text = SWEEP.replace(*change)
    assert text != SWEEP
    with pytest.raises(ConfigError, match=message) as info:
        loads_sweep(text, base_dir=parts)
    assert "\n" not in str(info.value)


def test_static_batch_files_refuse_other_batches(parts: Path, tmp_path: Path) -> None:
    torch.onnx.export(
        torch.nn.Linear(4, 2).eval(),
        (torch.randn(1, 4),),
        str(tmp_path / "static.onnx"),
        dynamo=False,
        opset_version=17,
    )
    text = f"""
[[models]]
name = "static"
source = "{tmp_path / "static.onnx"}"
[[matrix]]
models = ["static"]
compilers = ["onnxruntime"]
batches = [1, 4]
"""
    with pytest.raises(ConfigError, match="static input shapes for batch 1; batch 4"):
        loads_sweep(text)
    loads_sweep(text.replace("[1, 4]", "[1]"))


def test_check_models_imports_factories(parts: Path) -> None:
    bad = SWEEP.replace('source = "nets.two:broken"', 'source = "nets.bad_import:build"')
    sweep = loads_sweep(bad, base_dir=parts)
    with pytest.raises(ConfigError, match="cannot import nets.bad_import: ModuleNotFoundError"):
        sweep.check_models()


def test_importing_a_factory_leaves_the_users_folder_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ``__pycache__`` beside the user's files, even where Python would write one (the
    test run's shell may set PYTHONDONTWRITEBYTECODE, so the flag is turned off here)."""
    from ngb.core.models.model_build import import_factory

    (tmp_path / "helper_mod.py").write_text("WIDTH = 4\n")
    (tmp_path / "tiny_net.py").write_text(
        "import torch\nimport helper_mod\n\n"
        "def make():\n    return torch.nn.Linear(helper_mod.WIDTH, 2)\n"
    )
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.syspath_prepend(str(tmp_path))
    source = parse_source("tiny_net.py:make", base_dir=tmp_path)
    try:
        assert isinstance(import_factory(source, None)(), torch.nn.Module)
    finally:
        for name in ("tiny_net", "helper_mod"):
            sys.modules.pop(name, None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["helper_mod.py", "tiny_net.py"]
    assert sys.dont_write_bytecode is False  # the caller's setting is back


def test_a_files_folder_travels_as_its_python_code(tmp_path: Path) -> None:
    """Issue 31 item 4: a single-file model's folder is hashed and shipped as what Python imports
    from it, so a results store beside it (and its WAL), notebooks, data and logs neither travel
    nor change its address; editing its code does, and the message names the file."""
    from ngb.devices.artifacts import pack_folder

    (tmp_path / "mymodel.py").write_text("import helper\ndef build():\n    return None\n")
    (tmp_path / "helper.py").write_text("X = 1\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "vocab.json").write_text("{}")  # a package's data travels with it
    for other in ("data", ".venv", "notes"):
        (tmp_path / other).mkdir()
        (tmp_path / other / "x.py").write_text("")
    (tmp_path / "results.duckdb").write_bytes(b"store")
    (tmp_path / "analysis.ipynb").write_text("{}")
    source = parse_source("mymodel.py:build", base_dir=tmp_path)
    artifact = source.artifacts[0]
    assert sorted(f.relative_to(tmp_path).as_posix() for f in folder_files(tmp_path)) == [
        "helper.py", "mymodel.py", "pkg/__init__.py", "pkg/vocab.json"
    ]  # fmt: skip
    # ngb writing its store, its WAL and a run folder beside the model changes nothing
    (tmp_path / "results.duckdb").write_bytes(b"store, later")
    (tmp_path / "results.duckdb.wal").write_bytes(b"wal")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "events.jsonl").write_text("{}")
    assert locate(artifact, None) == tmp_path
    # the shipped copy (what pack_folder zips) hashes to the same address on the device
    packed = pack_folder(tmp_path, tmp_path.parent / "packed.zip")
    with zipfile.ZipFile(packed) as zf:
        zf.extractall(tmp_path.parent / "device")
    assert sha256_of(tmp_path.parent / "device") == artifact.sha256
    # the user's own edit does change it, and the line says which file
    (tmp_path / "helper.py").write_text("X = 2\n")
    with pytest.raises(NgbError, match=r"changed since the sweep was loaded \(edited helper.py\)"):
        locate(artifact, None)
    # a file in a plain sub-folder would not travel: said at once
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "m.py").write_text("def build():\n    pass\n")
    with pytest.raises(ConfigError, match="folder without __init__.py"):
        parse_source("sub/m.py:build", code=str(tmp_path), base_dir=tmp_path)


def _external_onnx(folder: Path) -> Path:
    import onnx

    net = torch.nn.Sequential(torch.nn.Embedding(20, 4), torch.nn.Flatten(), torch.nn.Linear(12, 2))
    torch.onnx.export(
        net.eval(), (torch.randint(0, 20, (2, 3)),), str(folder / "tmp.onnx"),
        input_names=["ids"], dynamic_axes={"ids": {0: "batch"}}, dynamo=False, opset_version=17,
    )  # fmt: skip
    onnx.save_model(
        onnx.load(str(folder / "tmp.onnx")), str(folder / "ext.onnx"), save_as_external_data=True,
        all_tensors_to_one_file=True, location="ext.onnx.data", size_threshold=0,
    )  # fmt: skip
    (folder / "tmp.onnx").unlink()
    return folder / "ext.onnx"


def test_onnx_external_data_travels_with_the_model(tmp_path: Path) -> None:
    """Issue 31 item 5: ``model.onnx`` + ``model.onnx.data`` are one bundle: one address over both
    files, both uploaded into the same device folder, checked together there."""
    from ngb.core.base.artifact_hashes import verify_shipped
    from ngb.devices.artifacts import artifacts_in, payload

    path = _external_onnx(tmp_path)
    source = parse_source(path.name, base_dir=tmp_path)
    artifact = source.artifacts[0]
    assert artifact.data_files == ("ext.onnx.data",)
    assert artifact.sha256 != sha256_of(path)  # the weights are part of the address
    # the integer input's range comes from the table it indexes, not a 0..1 guess
    assert [i.to_dict() for i in source.inputs] == [
        {"name": "ids", "shape": ["batch", 3], "dtype": "int64", "range": [0, 20]}
    ]
    items = artifacts_in([{"source": source.to_dict()}])
    assert [(i.sha256, i.name) for i in items] == [
        (artifact.sha256, "ext.onnx"), (artifact.sha256, "ext.onnx.data")
    ]  # fmt: skip
    cache = tmp_path / "device-cache"
    entry = artifact_dir(cache, artifact.sha256)
    entry.mkdir(parents=True)
    for item in items:
        local, digest = payload(item)
        assert digest == sha256_of(local)  # what the install script checks on arrival
        (entry / item.name).write_bytes(local.read_bytes())
    assert locate(artifact, cache) == entry / "ext.onnx"
    assert verify_shipped(source.to_dict(), cache) is None
    # a damaged data file fails the trial in one line and is removed for a fresh upload
    (entry / "ext.onnx.data").write_bytes(b"damaged")
    assert "hash mismatch on the device: ext.onnx" in (
        verify_shipped(source.to_dict(), cache) or ""
    )
    assert not entry.exists()
    # the data file is refused where it cannot travel
    (tmp_path / "ext.onnx.data").unlink()
    with pytest.raises(
        ConfigError, match="keeps its weights in ext.onnx.data, which is not a file"
    ):
        parse_source(path.name, base_dir=tmp_path)


class _Counts(torch.nn.Module):
    def forward(self, n: torch.Tensor) -> torch.Tensor:
        return n.float() * 2.0


def test_a_range_the_file_does_not_give_is_stated(tmp_path: Path) -> None:
    """Issue 31 item 8: an integer input nothing in the file bounds gets 0..1, and says so."""
    torch.onnx.export(
        _Counts(), (torch.ones(2, 3, dtype=torch.int64),), str(tmp_path / "counts.onnx"),
        input_names=["n"], dynamic_axes={"n": {0: "batch"}}, dynamo=False, opset_version=17,
    )  # fmt: skip
    (spec,) = parse_source("counts.onnx", base_dir=tmp_path).inputs
    assert spec.range == (0, 2) and (spec.range_note or "").startswith("assumed 0..1")
    code, _, err = invoke("measure", "counts.onnx", "-c", "onnxruntime", *FAST, cwd=tmp_path)
    assert code == 0, err
    assert (
        "warning: counts.onnx: input 'n' (int64): assumed 0..1: the graph does not bound it" in err
    )


def test_an_onnx_model_with_external_data_runs_from_the_device_cache(tmp_path: Path) -> None:
    from ngb.core.trial.measure import run_trial

    path = _external_onnx(tmp_path)
    source = parse_source(str(path))
    artifact = source.artifacts[0]
    cache = tmp_path / "cache"
    entry = artifact_dir(cache, artifact.sha256)
    entry.mkdir(parents=True)
    for name in ("ext.onnx", "ext.onnx.data"):
        (entry / name).write_bytes((tmp_path / name).read_bytes())
        (tmp_path / name).unlink()  # only the device's copy is left
    spec = TrialSpec(
        model="ext", compiler="onnxruntime", batch=2, source=source.to_dict(),
        measure=MeasureSettings(repetitions=1, min_duration_s=0.01, min_iters=2, warmup_s=0.0),
    )  # fmt: skip
    result = run_trial(spec, cache_dir=cache)
    assert result.ok, result.error
    assert result.params == 20 * 4 + 12 * 2 + 2


# ---------------------------------------------------------------- ngb models / ngb measure


def test_ngb_models_file_lists_params_and_macs(parts: Path) -> None:
    (parts / "own.toml").write_text(SWEEP)
    code, out, err = invoke("models", "--file", str(parts / "own.toml"), "--json")
    assert code == 1  # the factory that raises is reported, the rest is listed
    rows = {r["model"]: r for r in json.loads(out)["models"]}
    # Linear(8,4) + Linear(6,4): 32 + 24 MACs, 36 + 28 params, from torch and from the graph
    assert (rows["two-in"]["params"], rows["two-in"]["macs"]) == (64, 56)
    assert (rows["two-onnx"]["params"], rows["two-onnx"]["macs"]) == (64, 56)
    assert rows["Token Text"]["params"] == rows["text-pt2"]["params"] > 0
    assert rows["Token Text"]["macs"] == rows["text-pt2"]["macs"] > 0
    assert "tokens int64[batch,12] 0..49" in rows["Token Text"]["inputs"]
    # issue 31: the program's input gets the same range, from the embedding it indexes
    assert rows["text-pt2"]["inputs"] == (
        "tokens int64[batch,12] 0..49 (from the 50-row table it indexes)"
    )
    assert "raised ValueError: width 3 is not supported" in rows["raises"]["error"]
    assert err.strip() == "error: model 'raises': factory nets.two:broken raised ValueError: " + (
        "width 3 is not supported by this net"
    )


def _measure(*args: str, cwd: Path) -> tuple[int, dict | None, str]:
    code, out, err = invoke("measure", *args, *FAST, "--json", cwd=cwd)
    return code, json.loads(out) if out.strip() else None, err


@pytest.mark.parametrize(
    ("model", "extra", "compiler"),
    [
        ("two.onnx", [], "onnxruntime"),
        ("two.onnx", [], "openvino"),
        ("text.pt2", [], "identity"),
        ("text.pt2", [], "onnxruntime"),
        ("nets.text:text", ["-i", "tokens:batch,12:int64:0-50", "-k", "dim=16"], "torchscript"),
        ("nets.text:text", ["-i", "tokens:batch,12:int64:0-50"], "openvino"),
        ("nets/two.py:two", ["-i", "x:batch,8", "-i", "y:batch,6"], "identity"),
        ("nets/two.py:two", ["-i", "x:batch,8", "-i", "y:batch,6"], "onnxruntime"),
    ],
)
def test_ngb_measure_each_source(parts: Path, model: str, extra: list[str], compiler: str) -> None:
    code, result, err = _measure(model, *extra, "-c", compiler, "-b", "3", cwd=parts)
    assert code == 0, err
    assert result is not None and result["status"] == "ok"
    assert result["spec"]["model"] == model.rsplit("/", 1)[-1]  # its own name (issue 45)
    assert result["throughput"]["mean"] > 0 and result["params"] > 0 and result["macs"] > 0
    assert result["max_abs_err"] is not None and result["max_abs_err"] < 0.05


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["two.onnx", "-c", "identity"], "error: unsupported: identity cannot take an ONNX file"),
        (["nets.two:broken", "-i", "x:batch,8", "-c", "identity"], "raised ValueError: width 3"),
        (["nets.two:not_a_module", "-i", "x:batch,8", "-c", "identity"], "returned int, not an"),
        (["nets.bad_import:build", "-i", "x:batch,8", "-c", "identity"], "cannot import nets."),
        (["nets.two:two", "-i", "x:batch,9", "-i", "y:batch,6", "-c", "identity"], "rejected its"),
        (["missing.onnx", "-c", "onnxruntime"], "model file not found"),
        (["corrupt.onnx", "-c", "onnxruntime"], "corrupt.onnx is not a valid ONNX model"),
        (["nets.text:text", "-c", "identity"], "python models need --input"),
    ],
)
def test_ngb_measure_bad_models_are_one_line(parts: Path, args: list[str], message: str) -> None:
    code, out, err = invoke("measure", *args, *FAST, cwd=parts)
    assert code == 1
    lines = [ln for ln in err.splitlines() if ln.lower().startswith("error")]
    assert len(lines) == 1 and message in lines[0], err
    assert "Traceback" not in err


def test_ngb_measure_stores_and_refuses_a_bad_store_first(tmp_path: Path) -> None:
    """Issue 31 item 7: ``--db``/``--run`` store the measurement; a store that cannot take it is
    refused before anything is measured (one line, nothing created)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for bad, message in [
        (tmp_path, "is not a regular file"),
        (fifo, "is not a regular file"),
        (Path("/dev/null"), "is not a regular file"),
    ]:
        code, _, err = invoke("measure", "conv", "--width", "8", "-c", "noop", "--db", str(bad))
        assert code == 1 and err.count("\n") == 1 and message in err, err
        assert "stored" not in err
    code, _, err = invoke("measure", "conv", "--width", "8", "-c", "noop", "--run", " ")
    assert (code, err.strip()) == (1, "error: --run wants a non-empty run id")
    db = tmp_path / "r.duckdb"
    said = []
    for width in ("8", "8", "16"):  # one run id collects more trials, each once
        code, out, err = invoke("measure", "conv", "--width", width, "-c", "noop", *FAST,
                             "--db", str(db), "--run", "cli", "--json")  # fmt: skip
        assert code == 0, err
        said.append(err.strip())
    assert said[0] == said[2] == f"stored: run cli in {db}"
    assert said[1].startswith("not stored: run cli in") and "already holds trial" in said[1]
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT run_id, device, status, width FROM trials").fetchall()
        (status,) = con.execute("SELECT status FROM runs WHERE run_id = 'cli'").fetchone() or ("",)
    assert sorted(rows) == [("cli", "localhost", "ok", 8), ("cli", "localhost", "ok", 16)]
    assert status == "finished"


# ---------------------------------------------------------------- ngb run on localhost


def test_ngb_run_on_localhost(parts: Path, tmp_path: Path) -> None:
    sweep = parts / "run.toml"
    sweep.write_text(SWEEP)
    db = tmp_path / "results.duckdb"
    env = {**os.environ, "NGB_HOME": str(tmp_path / "home")}
    seed_timm_names(tmp_path / "home")
    ngb_exe = Path(sys.executable).parent / "ngb"
    proc = subprocess.run(
        [
            str(ngb_exe),
            "run",
            str(sweep),
            "-d",
            "localhost",
            "--db",
            str(db),
            "--isolate",
            "inprocess",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "Traceback" not in proc.stderr
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute(
            "SELECT model, compiler, status, error_kind, error FROM trials"
        ).fetchall()
    got = {(m, c): (s, k, e) for m, c, s, k, e in rows}
    assert len(got) == 10
    for model in ("Token Text", "two-in", "text-pt2"):
        for compiler in ("identity", "onnxruntime"):
            assert got[(model, compiler)][0] == "ok", got[(model, compiler)]
    assert got[("two-onnx", "onnxruntime")][0] == "ok"
    status, kind, error = got[("two-onnx", "identity")]
    assert (status, kind) == ("failed", "unsupported") and "cannot take an ONNX file" in error
    status, kind, error = got[("raises", "identity")]
    assert status == "failed" and error.startswith("factory nets.two:broken raised ValueError")


# ---------------------------------------------------------------- baseline in reports


def test_reports_use_the_sweeps_baseline(tmp_path: Path) -> None:
    from ngb.core.records.types import Stats, TrialResult
    from ngb.sweeps.report.catalog import build_report
    from ngb.sweeps.store.database import Store

    source = {"kind": "onnx", "ref": "m.onnx"}
    results = []
    for compiler, per_batch in {
        "onnxruntime": {1: 100.0, 4: 300.0},
        "openvino": {1: 150.0, 4: 600.0},
    }.items():
        for batch, tput in per_batch.items():
            spec = TrialSpec(model="my-net", compiler=compiler, batch=batch, source=source)
            results.append(
                TrialResult(
                    key=spec.key,
                    spec=spec.to_dict(),
                    started_at=1.7e9,
                    finished_at=1.7e9 + 1,
                    throughput=Stats(n=3, mean=tput, std=1.0),
                    repetitions=[{"iters": 5, "elapsed_s": 1.0, "throughput": tput}] * 3,
                )
            )
    store = Store(tmp_path / "r.duckdb")
    toml = 'name = "own"\nbaseline = "onnxruntime"\n'
    store.create_run("r1", "own", toml, ["dev"], len(results))
    store.ingest_results("r1", "dev", results)
    report = build_report("bsr", store)
    columns = report.tables[0].columns
    rows = {(r[1], r[2], r[4]): dict(zip(columns, r, strict=True)) for r in report.tables[0].rows}

    # speed-up = T_openvino / T_onnxruntime; BSR = ASE_ov / ASE_ort = (600/150/4) / (300/100/4)
    def value(cell: object) -> float:
        return float(getattr(cell, "value", cell))  # type: ignore[arg-type]

    assert value(rows[("my-net", "openvino", 4)]["speedup"]) == pytest.approx(2.0)
    assert value(rows[("my-net", "openvino", 4)]["bsr"]) == pytest.approx((600 / 150) / (300 / 100))
    assert value(rows[("my-net", "onnxruntime", 4)]["speedup"]) == pytest.approx(1.0)
    assert any("baseline: onnxruntime" in n for n in report.tables[0].notes)
    # another run naming another baseline: the reports say so and fall back to identity
    store.create_run("r2", "other", 'name = "x"\nbaseline = "openvino"\n', ["dev"], 1)
    spec = TrialSpec(model="my-net", compiler="openvino", batch=2, source=source)
    store.ingest_results(
        "r2", "dev", [TrialResult(key=spec.key, spec=spec.to_dict(), finished_at=1.8e9,
                                  throughput=Stats(n=1, mean=1.0, std=0.0))],
    )  # fmt: skip
    mixed = build_report("bsr", store)
    assert any("different baselines (onnxruntime, openvino)" in n for n in mixed.notes)
    assert any(
        "baseline: onnxruntime" in n
        for n in build_report("bsr", store, run_id="r1").tables[0].notes
    )


def test_the_example_folder_works_as_a_newcomer_copies_it(tmp_path: Path) -> None:
    import shutil

    example = Path(__file__).resolve().parent.parent / "examples" / "own-models"
    copy = tmp_path / "mine"
    shutil.copytree(example, copy, ignore=shutil.ignore_patterns("*.onnx", "*.pt2", "__pycache__"))
    subprocess.run([sys.executable, str(copy / "make_files.py")], check=True, capture_output=True)
    code, out, err = invoke("models", "--file", str(copy / "sweep.toml"), "--json")
    assert code == 0, err
    payload = json.loads(out)
    assert payload["baseline"] == "onnxruntime"
    rows = {r["model"]: r for r in payload["models"]}
    kinds = {r["source"].split()[0] for r in rows.values()}
    assert kinds == {"timm", "python", "onnx", "pt2"}
    assert rows["vit-tiny-96"]["inputs"] == "input float32[batch,3,96,96]"
    assert rows["fusion"]["inputs"].count("float32") == 2
    # the ONNX export of my-cnn folds BatchNorm into the conv: same MACs, BN's affine params gone
    assert rows["cnn-onnx"]["macs"] == rows["my-cnn"]["macs"]
    assert (rows["cnn-onnx-ext"]["params"], rows["cnn-onnx-ext"]["macs"]) == (
        rows["cnn-onnx"]["params"], rows["cnn-onnx"]["macs"]
    )  # fmt: skip
    assert rows["my-cnn"]["params"] - rows["cnn-onnx"]["params"] == 2 * 16


def test_sweeps_check_imports_the_factories(parts: Path) -> None:
    (parts / "check.toml").write_text(SWEEP.replace("nets.two:broken", "nets.two:absent"))
    code, _, err = invoke("sweeps", "check", str(parts / "check.toml"))
    assert code == 1
    assert err.strip().endswith("model 'raises': nets.two has no function 'absent'")
    (parts / "check.toml").write_text(SWEEP)
    code, out, _ = invoke("sweeps", "check", str(parts / "check.toml"))
    assert (code, out.strip()) == (0, "ok: own: 10 trials")


@pytest.mark.parametrize(
    ("factory", "inputs", "optimisation"),
    [
        ("nets.text:text", ["tokens:batch,12:int64:0-50"], "fp16"),
        ("nets.two:two", ["x:batch,8", "y:batch,6"], "fp16"),
        ("nets.two:two", ["x:batch,8", "y:batch,6"], "prune-ch-0.25"),
    ],
)
def test_optimisations_take_several_and_integer_inputs(
    parts: Path, factory: str, inputs: list[str], optimisation: str
) -> None:
    from ngb.core.trial.measure import run_trial

    source = parse_source(factory, inputs=tuple(map(parse_input, inputs)), base_dir=parts)
    spec = TrialSpec(
        model=factory,
        compiler="identity",
        batch=2,
        optimisation=optimisation,
        source=source.to_dict(),
        measure=MeasureSettings(repetitions=1, min_duration_s=0.01, min_iters=2, warmup_s=0.0),
    )
    result = run_trial(spec)
    assert result.ok, result.error
    assert result.extra["optimisation"]["name"] == optimisation
