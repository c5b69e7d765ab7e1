"""Labelled data travels with the trial as the user's model files do (issue 42): an ``.npz`` and a
``file.py:loader``'s folder become content-addressed artifacts, shipped once to a device's cache,
read there by the accuracy pass; keys name the data's content, not the workstation path; a
changed, missing, damaged or FIFO data file is one line in ``extra["accuracy_error"]`` while the
timed trial stands. End to end over the real loopback sshd (``tests/sshd.py``)."""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest
from ngb.core.base.errors import ConfigError, NgbError
from ngb.core.models.labelled_files import here
from ngb.core.models.model_sources import artifact_dir, sha256_of
from ngb.core.records.types import AccuracySettings, MeasureSettings, TrialSpec
from ngb.devices.artifacts import ShipItem, artifacts_in
from ngb.devices.inventory import load_inventory
from ngb.sweeps.run.orchestrator import Orchestrator
from ngb.sweeps.spec.checks import accuracy_table
from ngb.sweeps.spec.sweep import load_sweep
from ngb.sweeps.store.database import Store

from tests.sshd import SshdServer
from tests.test_artifacts import counting_puts

SAMPLES, RIGHT = 40, 30  # the model gets exactly RIGHT of SAMPLES right: top-1 0.75

# class scores = the first three features: argmax is where the one-hot input is
MODEL = """
import torch
from torch import nn


def build():
    linear = nn.Linear(4, 3, bias=False)
    with torch.no_grad():
        linear.weight.copy_(torch.eye(3, 4))
    return linear.eval()
"""


def labelled_arrays(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """One-hot inputs (the model's answer is the hot index); RIGHT labels agree with it. A random
    fourth feature makes each call's bytes (and so its artifact) its own."""
    rng = np.random.default_rng(seed)
    hot = rng.integers(0, 3, SAMPLES)
    inputs = np.zeros((SAMPLES, 4), np.float32)
    inputs[np.arange(SAMPLES), hot] = 1.0
    inputs[:, 3] = rng.random(SAMPLES).astype(np.float32)
    labels = hot.copy()
    labels[RIGHT:] = (hot[RIGHT:] + 1) % 3
    return inputs, labels.astype(np.int64)


def write_npz(path: Path, seed: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    inputs, labels = labelled_arrays(seed)
    with open(path, "wb") as fh:
        np.savez(fh, inputs=inputs, labels=labels)
    return path


def write_loader(folder: Path, seed: int) -> Path:
    """A loader that makes ``labelled_arrays(seed)`` itself (only its .py travels)."""
    folder.mkdir(parents=True, exist_ok=True)
    inputs, _ = labelled_arrays(seed)
    (folder / "load.py").write_text(
        textwrap.dedent(
            f"""
            import numpy as np

            SEED = {seed}


            def labelled():
                rng = np.random.default_rng(SEED)
                hot = rng.integers(0, 3, {SAMPLES})
                inputs = np.zeros(({SAMPLES}, 4), np.float32)
                inputs[np.arange({SAMPLES}), hot] = 1.0
                inputs[:, 3] = rng.random({SAMPLES}).astype(np.float32)
                labels = hot.copy()
                labels[{RIGHT}:] = (hot[{RIGHT}:] + 1) % 3
                return inputs, labels
            """
        )
    )
    got = np.asarray(_call(folder / "load.py")[0])
    assert np.array_equal(got, inputs)
    return folder / "load.py"


def _call(path: Path) -> tuple[object, object]:
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"loader_{path.parent.name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.labelled()


def settings_of(data: str, base: Path) -> AccuracySettings:
    return AccuracySettings.of(accuracy_table(data, "test", base))


def fresh_seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


# ---------------------------------------------------------------- keys and the trial's artifacts


def test_keys_name_the_datas_content_not_its_path(tmp_path: Path) -> None:
    seed = fresh_seed()
    one = settings_of("my.npz", write_npz(tmp_path / "a" / "my.npz", seed).parent)
    two = settings_of("my.npz", write_npz(tmp_path / "b" / "my.npz", seed).parent)
    other = settings_of("my.npz", write_npz(tmp_path / "c" / "my.npz", seed + 1).parent)
    assert one.data != two.data and one.artifact is not None and two.artifact is not None
    assert one.artifact.sha256 == two.artifact.sha256 and one.artifact.role == "data"

    def key(settings: AccuracySettings) -> str:
        return TrialSpec("m", "identity", measure=MeasureSettings(accuracy=settings)).key

    assert key(one) == key(two) != key(other)
    assert one.key_form() == {"data": "my.npz", "sha256": one.artifact.sha256}
    # a loader's folder: the same code in two places is one key; its ref within the folder
    first = settings_of("load.py:labelled", write_loader(tmp_path / "l1", seed).parent)
    second = settings_of("load.py:labelled", write_loader(tmp_path / "l2", seed).parent)
    assert first.artifact is not None and first.artifact.role == "folder"
    assert key(first) == key(second)
    assert first.key_form() == {"data": "load.py:labelled", "sha256": first.artifact.sha256}
    # the spec round-trips through JSON (the device's trials.jsonl) with its key
    spec = TrialSpec("m", "identity", measure=MeasureSettings(accuracy=one))
    again = TrialSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again == spec and again.key == spec.key


def test_keys_without_shipped_data_are_as_before() -> None:
    """Literals from the key before labelled data travelled (a trial without accuracy, a
    built-in set, an installed module's loader). The specs of that time carried the measurement
    defaults before issue 44 (10 s, a 2 s warm-up cap), as their stored dicts still do."""

    def key(**kw: object) -> str:
        measure = MeasureSettings(max_measure_s=10.0, warmup_max_s=2.0, **kw)
        return TrialSpec("resnet18", "identity", batch=4, measure=measure).key

    assert key() == "09cae8fe1456ae16"
    assert key(accuracy="digits") == "4a80fbf11227ff9d"
    assert key(accuracy="digits-test") == "b4ad5cc85065e370"
    assert key(accuracy="mypkg.data:load") == "9e93496b42ec8951"
    assert accuracy_table("digits", "t") == {"data": "digits"}
    assert accuracy_table("json.decoder:load", "t") == {"data": "json.decoder:load"}


def test_the_shipment_lists_the_datas_artifact(tmp_path: Path) -> None:
    npz = write_npz(tmp_path / "my.npz", fresh_seed())
    settings = settings_of("my.npz", tmp_path)
    spec = TrialSpec("m", "identity", measure=MeasureSettings(accuracy=settings))
    assert artifacts_in([spec.to_dict(), {"model": "resnet18"}]) == [
        ShipItem(sha256_of(npz), "my.npz", str(npz))
    ]


# ---------------------------------------------------------------- reading the located copy


def test_here_reads_the_cache_else_the_unchanged_local_copy(tmp_path: Path) -> None:
    seed = fresh_seed()
    npz = write_npz(tmp_path / "ws" / "my.npz", seed)
    settings = settings_of("my.npz", npz.parent)
    assert settings.artifact is not None
    cache = tmp_path / "cache"
    assert here(settings, cache) == str(npz)  # nothing shipped: the workstation's own file
    entry = artifact_dir(cache, settings.artifact.sha256)
    entry.mkdir(parents=True)
    shutil.copy(npz, entry / "my.npz")
    assert here(settings, cache) == str(entry / "my.npz")
    # a loader's folder: the file within the located folder
    loader = write_loader(tmp_path / "ws" / "loaders", seed)
    code = settings_of("loaders/load.py:labelled", npz.parent)
    assert code.artifact is not None
    shipped = artifact_dir(cache, code.artifact.sha256) / "loaders"
    shutil.copytree(loader.parent, shipped)
    assert here(code, cache) == f"{shipped / 'load.py'}:labelled"

    # damaged in the cache: one line, the entry removed (the next run uploads it again)
    (entry / "my.npz").write_bytes(b"flipped")
    with pytest.raises(NgbError) as err:
        here(settings, cache)
    assert str(err.value).startswith("labelled data: hash mismatch on the device: my.npz")
    assert "\n" not in str(err.value) and not entry.exists()
    # changed on the workstation after the sweep was read
    write_npz(npz, seed + 1)
    with pytest.raises(NgbError, match="my.npz changed since the sweep was loaded"):
        here(settings, None)
    # gone, and a FIFO in its place: one line each, never a blocked read
    npz.unlink()
    with pytest.raises(NgbError, match=r"not shipped to this device \(.*\) and .* does not exist"):
        here(settings, None)
    os.mkfifo(npz)
    with pytest.raises(NgbError, match="FIFO"):
        here(settings, None)


def test_a_fifo_as_data_is_refused_when_the_sweep_is_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.npz")
    with pytest.raises(ConfigError, match=r"pipe\.npz: it is a FIFO \(named pipe\)"):
        accuracy_table("pipe.npz", "[accuracy]", tmp_path)
    write_loader(tmp_path / "code", fresh_seed())
    os.mkfifo(tmp_path / "code" / "extra.py")  # a FIFO among the loader's travelling files
    with pytest.raises(ConfigError, match="cannot hash it"):
        accuracy_table("code/load.py:labelled", "[accuracy]", tmp_path)


# ---------------------------------------------------------------- a sweep over sshd

FAST = (
    "repetitions = 1\nworkers = 1\nmin_duration_s = 0.01\nmin_iters = 2\nwarmup_iters = 1\n"
    "warmup_s = 0\nquiet_check_s = 0\nverify = false\n"
)


def write_sweep(src: Path, datas: list[str]) -> Path:
    """One model (``net.py:build``, shipped as its folder) with one matrix per labelled data."""
    (src / "model").mkdir(parents=True, exist_ok=True)
    (src / "model" / "net.py").write_text(MODEL)
    matrices = "".join(
        f"""
[[matrix]]
models = ["net"]
compilers = ["identity"]
batches = [{4 + i}]
measure = {{ accuracy = {{ data = "{data}" }} }}
"""
        for i, data in enumerate(datas)
    )
    path = src / "sweep.toml"
    path.write_text(
        f"""
name = "shipped-data"
[measure]
{FAST}
[[models]]
name = "net"
source = "model/net.py:build"
inputs = [{{ name = "x", shape = ["batch", 4] }}]
{matrices}"""
    )
    return path


async def run_on(store: Store, sweep: object, device: str) -> str:
    orch = Orchestrator(store, load_inventory(), connect_timeout=5)
    run_id = await orch.start(sweep, device, isolate="inprocess")
    summary = await orch.wait(run_id)
    await orch.close()
    assert summary["status"] == "finished", summary
    return run_id


def accuracy_rows(store: Store, run_id: str) -> list[tuple]:
    _, rows = store.select(
        "SELECT batch, status, top1, accuracy_samples, accuracy_error FROM trials "
        "WHERE run_id = ? ORDER BY batch",
        [run_id],
    )
    return rows


@pytest.mark.sshd
@pytest.mark.timeout(600)
async def test_an_npz_and_a_loader_travel_to_the_ssh_device(
    sshd_home: Path, sshd_server: SshdServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run once, remove the workstation's data, run again: the device read its own copies (the
    right top-1 both times); then a damaged cache entry is one line, the timed trial stands."""
    seed = fresh_seed()
    src = tmp_path / "mine"
    write_npz(src / "data" / "my.npz", seed)
    write_loader(src / "loaders", seed + 1)
    sweep = load_sweep(write_sweep(src, ["data/my.npz", "loaders/load.py:labelled"]))
    store = Store(tmp_path / "r.duckdb")
    puts = counting_puts(monkeypatch)

    first = await run_on(store, sweep, "dev-a")
    want = [(4, "ok", RIGHT / SAMPLES, SAMPLES, None), (5, "ok", RIGHT / SAMPLES, SAMPLES, None)]
    assert accuracy_rows(store, first) == want
    shutil.rmtree(src / "data")
    shutil.rmtree(src / "loaders")  # only the device's cache has them now
    second = await run_on(store, sweep, "dev-a")
    assert accuracy_rows(store, second) == want
    # the model's folder, the .npz and the loader's folder, each sent once
    assert len([p for p in puts if "/cache/artifacts/" in p]) == 3

    npz_trial = next(t for t in sweep.trials() if t.batch == 4)
    artifact = npz_trial.measure.accuracy.artifact
    cache = Path(sshd_server.device("dev-a").workdir) / "cache"
    cached = artifact_dir(cache, artifact.sha256) / "my.npz"
    cached.write_bytes(b"\0" * 64)
    third = await run_on(store, sweep, "dev-a")
    rows = accuracy_rows(store, third)
    assert rows[1] == want[1]
    batch, status, top1, _, error = rows[0]
    assert status == "ok" and top1 is None
    assert (
        error.startswith("labelled data: hash mismatch on the device: my.npz") and "\n" not in error
    )
    assert not cached.parent.exists()  # removed: the next run uploads it again


@pytest.mark.sshd
@pytest.mark.timeout(600)
async def test_data_changed_or_made_a_fifo_after_the_sweep_was_read(
    sshd_home: Path, tmp_path: Path
) -> None:
    """Neither is uploaded; on the device each is one line, and the trials' timings stand."""
    seed = fresh_seed()
    src = tmp_path / "mine"
    changed, piped = write_npz(src / "a.npz", seed), write_npz(src / "b.npz", seed + 1)
    sweep = load_sweep(write_sweep(src, ["a.npz", "b.npz"]))
    write_npz(changed, seed + 2)
    piped.unlink()
    os.mkfifo(piped)
    store = Store(tmp_path / "r.duckdb")
    run_id = await run_on(store, sweep, "dev-a")
    rows = accuracy_rows(store, run_id)
    assert [(r[1], r[2]) for r in rows] == [("ok", None), ("ok", None)]
    assert "a.npz changed since the sweep was loaded" in rows[0][4]
    assert "b.npz: it is a FIFO (named pipe), not a regular file" in rows[1][4]
    assert all("\n" not in r[4] for r in rows)


def test_ngb_measure_reads_the_workstations_own_npz(tmp_path: Path) -> None:
    """Here (no device cache) the recorded path is read while its hash matches."""
    from click.testing import CliRunner
    from ngb.sweeps.cli import cli

    seed = fresh_seed()
    write_npz(tmp_path / "my.npz", seed)
    (tmp_path / "net.py").write_text(MODEL)
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(
            cli,
            ["measure", "net.py:build", "-i", "x:batch,4", "-c", "identity", "-b", "8",
             "--accuracy", "my.npz", "--db", str(tmp_path / "r.duckdb"), "--json",
             "--repetitions", "1", "--min-duration", "0.01", "--min-iters", "2",
             "--warmup-iters", "1", "--warmup-s", "0"],
            catch_exceptions=False,
        )  # fmt: skip
    finally:
        os.chdir(old)
    assert result.exit_code == 0, result.stderr
    extra = json.loads(result.stdout)["extra"]
    assert "accuracy_error" not in extra, extra["accuracy_error"]
    assert extra["accuracy"]["top1"] == RIGHT / SAMPLES
    assert extra["accuracy"]["data"] == str(tmp_path / "my.npz")
