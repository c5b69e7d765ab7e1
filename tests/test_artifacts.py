"""Shipping the user's model files: deterministic packing, upload once per device over the real
loopback sshd, the device's hash check before use, and a damaged cache entry failing only the
trials that need it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from ngb.core.models.model_sources import artifact_dir, sha256_of
from ngb.core.records.types import TrialSpec
from ngb.devices import protocol
from ngb.devices.agent import read_checkpoint
from ngb.devices.artifacts import (
    ShipItem,
    artifacts_in,
    pack_folder,
    ship_artifacts,
)
from ngb.devices.inventory import load_inventory
from ngb.devices.ssh import SshTransport
from ngb.sweeps.run.orchestrator import Orchestrator
from ngb.sweeps.store.database import Store

from tests.sshd import SshdServer

FAST = {"warmup_iters": 0, "warmup_s": 0.0, "min_iters": 1, "min_duration_s": 0.0,
        "repetitions": 1, "verify": False}  # fmt: skip


def make_code(root: Path) -> Path:
    """A small package of model code, with a cache folder that must not travel."""
    pkg = root / "tinynet"
    (pkg / "__pycache__").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .model import build\n")
    (pkg / "model.py").write_text("def build(width=4):\n    return width\n")
    (pkg / "weights.txt").write_bytes(os.urandom(2048))
    (pkg / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\0stale")
    return pkg


def make_model_file(root: Path, name: str = "enc.onnx", size: int = 4096) -> Path:
    path = root / name
    path.write_bytes(os.urandom(size))
    return path


def item(path: Path) -> ShipItem:
    return ShipItem(sha256_of(path), path.name, str(path))


def source_of(*items: ShipItem, role: str = "model") -> dict:
    arts = [{"name": i.name, "sha256": i.sha256, "local": i.local, "role": role} for i in items]
    return {"kind": "onnx", "ref": items[0].name, "artifacts": arts}


def sh(argv: list[str]) -> subprocess.CompletedProcess:
    """The quoted line as sshd's login shell gets it."""
    return subprocess.run(["sh", "-c", shlex.join(argv)], capture_output=True, text=True)


# ---------------------------------------------------------------- packing and the device scripts


def test_pack_folder_is_deterministic_and_leaves_caches_out(tmp_path: Path) -> None:
    pkg = make_code(tmp_path)
    first = pack_folder(pkg, tmp_path / "a.zip").read_bytes()
    os.utime(pkg / "model.py", (1, 1))  # a touched file packs to the same bytes
    second = pack_folder(pkg, tmp_path / "b.zip").read_bytes()
    assert first == second
    with zipfile.ZipFile(tmp_path / "a.zip") as zf:
        assert sorted(zf.namelist()) == ["__init__.py", "model.py", "weights.txt"]


def test_install_script_verifies_unpacks_and_keeps_device_values_as_data(tmp_path: Path) -> None:
    pkg, model = make_code(tmp_path), make_model_file(tmp_path)
    canary = tmp_path / "pwned"
    workdir = tmp_path / f"w;touch {canary}" / "$(touch x)"
    items = [item(pkg), item(model)]
    out = sh(protocol.artifacts_have_argv(str(workdir), [(i.sha256, i.name) for i in items]))
    assert out.returncode == 0, out.stderr
    assert protocol.parse_artifacts_have(out.stdout) == (str(workdir), set())

    store = workdir / protocol.ARTIFACTS_DIR
    zipped = pack_folder(pkg, tmp_path / "pkg.zip")
    (store / "p1.part").write_bytes(zipped.read_bytes())
    (store / "p2.part").write_bytes(model.read_bytes())
    ups = [
        protocol.ArtifactUpload(items[0].sha256, pkg.name, True,
                                hashlib.sha256(zipped.read_bytes()).hexdigest(),
                                str(store / "p1.part")),
        protocol.ArtifactUpload(items[1].sha256, model.name, False, items[1].sha256,
                                str(store / "p2.part")),
    ]  # fmt: skip
    res = sh(protocol.artifacts_install_argv(sys.executable, str(workdir), ups))
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("installed ") == 2
    # The unpacked folder hashes to the address the workstation computed: nothing lost or added.
    assert sha256_of(artifact_dir(workdir / "cache", items[0].sha256) / pkg.name) == items[0].sha256
    assert (artifact_dir(workdir / "cache", items[1].sha256) / model.name).read_bytes() == (
        model.read_bytes()
    )
    assert not list(store.glob("*.part")) and not list(store.glob(".*.tmp"))
    out = sh(protocol.artifacts_have_argv(str(workdir), [(i.sha256, i.name) for i in items]))
    assert protocol.parse_artifacts_have(out.stdout)[1] == {(i.sha256, i.name) for i in items}
    assert not canary.exists() and not (tmp_path / "x").exists()

    # A damaged upload is refused with one line and deleted.
    (store / "p3.part").write_bytes(b"not the model")
    bad = dataclasses.replace(ups[1], sha256="0" * 64, part=str(store / "p3.part"))
    res = sh(protocol.artifacts_install_argv(sys.executable, str(workdir), [bad]))
    assert res.returncode == 4 and res.stderr.strip() == (
        f"uploaded artifact {model.name} is corrupt (sha256 mismatch)"
    )
    assert not (store / "p3.part").exists() and not (store / ("0" * 64)).exists()


def test_artifact_names_and_hashes_are_checked() -> None:
    with pytest.raises(Exception, match="bad artifact hash"):
        protocol.artifacts_have_argv("/w", [("abc; rm -rf ~", "x.onnx")])
    with pytest.raises(Exception, match="bad artifact name"):
        protocol.artifacts_have_argv("/w", [("a" * 64, "../x.onnx")])
    trials = [{"source": {"artifacts": [{"name": "m.onnx", "sha256": "b" * 64, "local": "/m"}]}},
              {"source": {"artifacts": [{"name": "m.onnx", "sha256": "b" * 64, "local": "/m"}]}},
              {"model": "resnet18"}]  # fmt: skip
    assert artifacts_in(trials) == [ShipItem("b" * 64, "m.onnx", "/m")]


# ---------------------------------------------------------------- over the real sshd


@pytest.fixture
def known(sshd_server: SshdServer, tmp_path: Path) -> list[Path]:
    return [sshd_server.write_known_hosts(tmp_path / "known_hosts")]


def counting_puts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    puts: list[str] = []
    real_put = SshTransport.put

    async def counting_put(self, local, remote):  # noqa: ANN001
        puts.append(remote)
        await real_put(self, local, remote)

    monkeypatch.setattr(SshTransport, "put", counting_put)
    return puts


@pytest.mark.sshd
async def test_ship_uploads_each_artifact_once_per_device(
    sshd_server: SshdServer, known: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NGB_HOME", str(tmp_path / "home"))
    dev = dataclasses.replace(sshd_server.device("dev-a"), workdir=str(tmp_path / "device"))
    pkg, model = make_code(tmp_path / "src"), make_model_file(tmp_path)
    twin = tmp_path / "twin.onnx"  # the same bytes under another name: one folder, two entries
    twin.write_bytes(model.read_bytes())
    items = [item(pkg), item(model), item(twin)]
    gone = ShipItem("c" * 64, "gone.onnx", str(tmp_path / "gone.onnx"))
    puts = counting_puts(monkeypatch)
    async with SshTransport(dev, known_hosts=known, ssh_config=[]) as t:
        first = await ship_artifacts(t, dev, [*items, gone])
        assert sorted(first.uploaded) == sorted(i.sha256 for i in items) and len(puts) == 3
        assert list(first.unavailable) == [gone.sha256]
        assert "gone" in first.unavailable[gone.sha256]
        again = await ship_artifacts(t, dev, items)
        assert again.uploaded == [] and sorted(again.reused) == sorted(i.sha256 for i in items)
        assert len(puts) == 3  # the second run reuses the device's cache
    cache = Path(first.workdir) / "cache"
    assert sha256_of(artifact_dir(cache, items[0].sha256) / pkg.name) == items[0].sha256
    for f in (model, twin):
        assert sha256_of(artifact_dir(cache, items[1].sha256) / f.name) == items[1].sha256


# ---------------------------------------------------------------- the agent checks before use


def test_agent_fails_only_trials_whose_cached_artifact_is_damaged(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    good, bad = make_model_file(tmp_path, "good.onnx"), make_model_file(tmp_path, "bad.onnx")
    for f in (good, bad):
        entry = artifact_dir(cache, sha256_of(f))
        entry.mkdir(parents=True)
        (entry / f.name).write_bytes(f.read_bytes())
    damaged = artifact_dir(cache, sha256_of(bad)) / bad.name
    damaged.write_bytes(b"flipped bits" + bad.read_bytes()[12:])
    rows = [
        {"model": "good", "compiler": "noop", "batch": 1, "source": source_of(item(good)),
         "measure": FAST},
        {"model": "bad", "compiler": "noop", "batch": 1, "source": source_of(item(bad)),
         "measure": FAST},
        {"model": "bad", "compiler": "noop", "batch": 2, "source": source_of(item(bad)),
         "measure": FAST},
        {"model": "plain", "compiler": "noop", "batch": 1, "measure": FAST},
    ]  # fmt: skip
    (tmp_path / "trials.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    keys = [TrialSpec.from_dict(r).key for r in rows]
    proc = subprocess.run(
        [sys.executable, "-m", "ngb.devices.agent", "run",
         "--trials", str(tmp_path / "trials.jsonl"), "--checkpoint", str(tmp_path / "ck.jsonl"),
         "--cache-dir", str(cache)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    done = read_checkpoint(tmp_path / "ck.jsonl")
    assert [done[k]["status"] for k in keys] == ["ok", "failed", "failed", "ok"]
    for key in keys[1:3]:
        error = done[key]["error"]
        assert error.startswith("hash mismatch on the device: bad.onnx") and "\n" not in error
    # The damaged entry is gone (the next run uploads it again); the good one stays.
    assert not artifact_dir(cache, sha256_of(bad)).exists()
    assert (artifact_dir(cache, sha256_of(good)) / good.name).exists()


# ---------------------------------------------------------------- a whole run, twice, over sshd


@dataclasses.dataclass
class ListedSweep:
    """A sweep given as its trials (what ``Orchestrator.start`` reads of a sweep)."""

    name: str
    specs: list[TrialSpec]

    def trials(self) -> list[TrialSpec]:
        return list(self.specs)

    def to_toml(self) -> str:
        return f'name = "{self.name}"\n'


@pytest.mark.sshd
@pytest.mark.timeout(300)
async def test_runs_over_sshd_upload_once_reuse_and_survive_a_damaged_cache(
    sshd_home: Path, sshd_server: SshdServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg, model = make_code(tmp_path / "src"), make_model_file(tmp_path, size=64 * 1024)
    code_item, model_item = item(pkg), item(model)
    specs = [
        TrialSpec.from_dict({"model": "enc", "compiler": "noop", "batch": b, "measure": FAST,
                             "source": source_of(model_item)})
        for b in (1, 2)
    ] + [
        TrialSpec.from_dict({"model": "tinynet", "compiler": "noop", "batch": 1, "measure": FAST,
                             "source": {**source_of(code_item, role="package"), "kind": "python",
                                        "ref": "tinynet:build"}})
    ]  # fmt: skip
    sweep = ListedSweep("ship", specs)
    store = Store(tmp_path / "r.duckdb")
    puts = counting_puts(monkeypatch)
    devices = ["dev-a", "dev-b"]

    messages: list[str] = []

    async def run_once() -> dict:
        orch = Orchestrator(store, load_inventory(), connect_timeout=5)
        sub = orch.subscribe()
        run_id = await orch.start(sweep, devices, isolate="inprocess")
        summary = await orch.wait(run_id)
        await orch.close()
        messages.clear()
        while (event := sub.get_nowait()) is not None:
            messages.append(event.message)
        return {"run_id": run_id, **summary}

    first = await run_once()
    assert first["status"] == "finished", first
    assert messages.count("artifacts: 2 uploaded (0.1 MB), 0 reused") == 2  # one per device
    shipped = [p for p in puts if "/cache/artifacts/" in p]
    assert len(shipped) == 4  # two artifacts, once to each device
    second = await run_once()
    assert second["status"] == "finished", second
    assert messages.count("artifacts: 0 uploaded (0.0 MB), 2 reused") == 2
    assert len([p for p in puts if "/cache/artifacts/" in p]) == 4  # reused: nothing sent

    # Damage the model file in dev-a's cache: its two trials fail with one line, the rest runs.
    dev_a = sshd_server.device("dev-a")
    cached = artifact_dir(Path(dev_a.workdir) / "cache", model_item.sha256) / model.name
    cached.write_bytes(b"\0" * 100)
    third = await run_once()
    failed = store.trials(run_id=third["run_id"], status="failed")
    assert {(r["device"], r["model"]) for r in failed} == {("dev-a", "enc")} and len(failed) == 2
    assert all(r["error"].startswith("hash mismatch on the device: enc.onnx") for r in failed)
    ok = store.trials(run_id=third["run_id"], status="ok")
    assert len(ok) == 4  # dev-a's code trial and all three of dev-b's
    # The next run uploads the damaged file again (to dev-a only) and everything passes.
    fourth = await run_once()
    assert fourth["status"] == "finished", fourth
    assert len([p for p in puts if "/cache/artifacts/" in p]) == 5


# ---------------------------------------------------------------- the user's models, end to end

OWN_MODELS = Path(__file__).resolve().parents[1] / "examples" / "own-models"


@pytest.mark.sshd
@pytest.mark.timeout(600)
async def test_own_models_run_from_the_device_cache_over_sshd(
    sshd_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A python package and an ONNX file, shipped to a device once; the second run still works
    after the workstation's copies are gone, so the device used what was shipped."""
    import shutil

    from ngb.sweeps.spec.sweep import load_sweep

    src = tmp_path / "mine"
    shutil.copytree(OWN_MODELS / "tiny_nets", src / "tiny_nets")
    # the example's ONNX files (its .pt2, a slow torch.export, is not needed here)
    write_onnx = "import sys, make_files; make_files.write_onnx(make_files.Path(sys.argv[1]))"
    made = subprocess.run([sys.executable, "-c", write_onnx, str(src / "out")], cwd=OWN_MODELS,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert made.returncode == 0, made.stderr
    shutil.move(src / "out" / "tiny_cnn.onnx", src / "cnn.onnx")
    for name in ("tiny_cnn_ext.onnx", "tiny_cnn_ext.onnx.data"):  # weights in a data file
        shutil.move(src / "out" / name, src / name)
    shutil.rmtree(src / "out")
    measure = "\n".join(f"{k} = {json.dumps(v)}" for k, v in FAST.items())
    (src / "sweep.toml").write_text(f"""
name = "own"
[measure]
{measure}
[[models]]
name = "text-classifier"
source = "tiny_nets.text:text_classifier"
kwargs = {{ vocab = 100, dim = 16 }}
inputs = [{{ name = "tokens", shape = ["batch", 8], dtype = "int64", range = [0, 100] }}]
[[models]]
name = "cnn-onnx"
source = "cnn.onnx"
[[models]]
name = "cnn-ext"
source = "tiny_cnn_ext.onnx"
[[matrix]]
models = ["text-classifier"]
compilers = ["identity"]
batches = [1]
[[matrix]]
models = ["cnn-onnx", "cnn-ext"]
compilers = ["onnxruntime"]
batches = [1]
""")
    sweep = load_sweep(src / "sweep.toml")
    store = Store(tmp_path / "r.duckdb")
    puts = counting_puts(monkeypatch)

    async def run_once(isolate: str) -> str:
        orch = Orchestrator(store, load_inventory(), connect_timeout=5)
        run_id = await orch.start(sweep, "dev-a", isolate=isolate)
        summary = await orch.wait(run_id)
        await orch.close()
        rows = store.trials(run_id=run_id)
        assert [r["status"] for r in rows] == ["ok"] * 3, [r["error"] for r in rows]
        assert summary["status"] == "finished", summary
        return run_id

    await run_once("inprocess")  # the trials in the agent: one torch import, not one per trial
    # the code folder, cnn.onnx, and the external-data model as its two files
    assert len([p for p in puts if "/cache/artifacts/" in p]) == 4
    shutil.rmtree(src)  # the workstation's copies are gone: only the device cache has them
    run_id = await run_once("subprocess")  # each trial's own process builds from the cache
    assert len([p for p in puts if "/cache/artifacts/" in p]) == 4  # nothing sent again
    models = {r["model"] for r in store.trials(run_id=run_id)}
    assert models == {"text-classifier", "cnn-onnx", "cnn-ext"}
