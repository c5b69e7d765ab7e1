"""The Python API (issue 22): ngb.measure / open_results / compare, and the example that uses it."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import ngb
import pytest
from ngb.core.base.errors import NgbError
from ngb.core.records.types import TrialResult, TrialSpec
from ngb.sweeps.api import notebook as api
from ngb.sweeps.report import derived

ROOT = Path(__file__).resolve().parents[1]
QUICK = {"repetitions": 4, "workers": 2, "min_duration_s": 0.02, "warmup_s": 0.0,
         "quiet_check_s": 0.0, "verify": False}  # fmt: skip


def test_import_ngb_loads_no_heavy_library() -> None:
    code = (
        "import sys, ngb; heavy = {'torch', 'duckdb', 'pandas', 'timm'} & set(sys.modules); "
        "print(sorted(heavy)); assert callable(ngb.measure) and callable(ngb.compare)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_unknown_api_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'mesure'"):
        ngb.mesure  # noqa: B018


def test_measure_stores_and_open_results_reads_back(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    r = ngb.measure("conv", compiler="noop", width=8, db=db, run="api-test", **QUICK)
    assert r.ok and r.throughput > 0 and len(r.samples) == 4
    low, high = r.interval
    assert low < r.throughput < high
    assert r.verdict is not None and r.verdict.split(":")[0] in ("VALID", "INVALID")
    assert r.to_dict()["key"] == r.trial.key
    results, samples = ngb.open_results(db)  # the newest run
    assert list(results["key"]) == [r.trial.key]
    assert results["throughput_mean"][0] == pytest.approx(r.throughput)
    assert sorted(samples["throughput"]) == pytest.approx(sorted(r.samples))
    assert set(samples["worker"]) == {0, 1}


def test_measure_refuses_bad_arguments_in_one_line() -> None:
    with pytest.raises(NgbError, match="noopp"):
        ngb.measure("conv", compiler="noopp", width=8)
    with pytest.raises(NgbError, match="repetition"):
        ngb.measure("conv", compiler="noop", width=8, repetitionz=3)
    assert 'compiler="identity"' in ngb.__doc__  # help(ngb)'s example names a real compiler


def test_open_results_without_a_database_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(NgbError, match="no results database"):
        ngb.open_results(tmp_path / "none.duckdb")


def test_compare_is_the_reports_speedup() -> None:
    fast, slow = [210.0, 205.0, 208.0, 212.0], [100.0, 101.0, 99.0, 102.0]
    c = ngb.compare(fast, slow)
    # the reports' computation (derived.speedup over two rows), printed as the reports print it
    rows = [api._row(fast, "a"), api._row(slow, "b")]
    expected = derived.speedup(*rows)
    assert c.speedup == pytest.approx(sum(fast) / sum(slow)) == pytest.approx(expected.value)
    assert expected.printed is not None
    assert c.interval == (expected.printed.low, expected.printed.high)
    assert str(c) == f"speed-up {expected.text()}"
    assert c.significant and "n.s." not in str(c)
    same = ngb.compare([100.0, 103.0, 98.0], [101.0, 99.0, 102.0])
    assert not same.significant and "n.s." in str(same)
    assert same.interval[0] < 1 < same.interval[1]


def test_compare_from_results_and_from_their_samples_agree(tmp_path: Path) -> None:
    """Issue 31: one computation. A trial's samples (with their worker processes) give the
    interval the trial itself gave, whether passed as ``Result.samples``, the samples frame or
    the results frame's rows."""
    db = tmp_path / "r.duckdb"
    # noop twice (two keys): cheap, and what is checked is that every form gives one answer
    slow = ngb.measure("conv", compiler="noop", width=16, db=db, run="r", progress=False, **QUICK)
    fast = ngb.measure("conv", compiler="noop", width=8, db=db, run="r", progress=False, **QUICK)
    assert fast.ok and slow.ok and len(set(fast.samples.workers)) == 2
    by_result = ngb.compare(fast, slow)
    assert str(ngb.compare(fast.samples, slow.samples)) == str(by_result)
    results, samples = ngb.open_results(db, run="r")
    assert results.attrs["run_id"] == "r"
    row = {k: results[results["key"] == t.trial.key].iloc[0] for k, t in (("f", fast), ("s", slow))}
    assert str(ngb.compare(row["f"], row["s"])) == str(by_result)
    part = {k: samples[samples["key"] == t.trial.key] for k, t in (("f", fast), ("s", slow))}
    assert str(ngb.compare(part["f"], part["s"])) == str(by_result)
    assert by_result.interval[0] < by_result.speedup < by_result.interval[1]


@pytest.mark.parametrize(
    ("a", "message"),
    [
        ("abc", "must be an ngb.Result"),
        (None, "must be an ngb.Result"),
        (3.5, "must be an ngb.Result"),
        ([1.0], "at least two repetitions"),
        ([100.0, 0.0], "not a positive finite number"),
        ([-1.0, -2.0], "not a positive finite number"),
        ([math.inf, 100.0], "not a positive finite number"),
        ([math.nan, 100.0], "not a positive finite number"),
        ({"throughput_mean": 5.0}, "has no interval"),
        ({"throughput_mean": 0.0, "throughput_ci_half": 1.0}, "not a positive finite"),
    ],
)
def test_compare_refuses_what_has_no_answer(a: object, message: str) -> None:
    with pytest.raises(NgbError, match=message) as info:
        ngb.compare(a, [100.0, 101.0, 99.0])
    assert "\n" not in str(info.value)


def test_compare_refuses_a_failed_trial() -> None:
    spec = TrialSpec(model="conv", compiler="tensorrt", width=8)
    failed = api.Result(TrialResult.failed(spec, "no GPU here", "unsupported"))
    with pytest.raises(NgbError, match="a is a failed trial \\(unsupported\\): no GPU here"):
        ngb.compare(failed, [100.0, 101.0, 99.0])


def _fifo(tmp: Path) -> Path:
    path = tmp / "fifo.duckdb"
    os.mkfifo(path)
    return path


def _read_only_folder(tmp: Path) -> Path:
    folder = tmp / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    return folder / "r.duckdb"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"batch": "1"}, "batch must be a whole number, got '1'"),
        ({"batch": 1.5}, "batch must be a whole number, got 1.5"),
        ({"batch": True}, "batch must be a whole number, got True"),
        ({"batch": 0}, "batch must be at least 1"),
        ({"depth": None}, "depth must be a whole number"),
        ({"width": "8"}, "width must be a whole number"),
        ({"options": [1, 2]}, "options must be a dict"),
        ({"options": {1: 2}}, "options: keys must be non-empty strings"),
        ({"kwargs": "width=3"}, "kwargs must be a dict"),
        ({"inputs": "x:batch,3"}, "inputs must be a list"),
        ({"inputs": [3]}, "an input is"),
        ({"compiler": 3}, "compiler must be a non-empty string"),
        ({"compiler": "noopp"}, "noopp"),
        ({"device": None}, "device must be a non-empty string"),
        ({"precision": 16}, "precision must be a non-empty string"),
        ({"algorithm": 3}, "algorithm must be a non-empty string, got 3"),
        ({"algorithm": ""}, "algorithm must be a non-empty string"),
        ({"algorithm": math.nan}, "algorithm must be a non-empty string, got nan"),
        ({"algorithm": "sparse-bsr-0"}, "algorithm: algorithm 'sparse-bsr-0': block side must be"),
        ({"algorithm": "sparse-bsr-999"}, "block side must be 2-64, got 999"),
        ({"algorithm": "winograd"}, "unknown algorithm 'winograd'; valid: default, direct"),
        ({"run": ""}, "run must be a non-empty string"),
        ({"db": 5}, "db must be a path"),
        ({"progress": "yes"}, "progress must be True or False"),
        ({"repetitionz": 3}, "repetitionz"),
        ({"workers": 2.5}, "workers must be a whole number"),
        ({"ci_target": math.nan}, "ci_target must be a finite number"),
        ({"model": None}, "model must be a non-empty string"),
        ({"model": "resnet9999"}, "resnet9999"),
        ({"model": "conv", "kwargs": {"x": 1}}, "built-in block"),
        ({"db": "DIR"}, "is not a regular file"),
        ({"db": "FIFO"}, "is not a regular file"),
        ({"db": "/dev/null"}, "is not a regular file"),
        ({"db": "RO"}, "is read-only"),
        ({"db": "JUNK"}, "results database"),
    ],
)
def test_measure_checks_every_argument_before_measuring(
    change: dict[str, object], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issues 9-10: one NgbError line for each bad value, raised before anything is measured
    (a bad results file included, so no measurement is lost)."""
    if os.geteuid() == 0 and change.get("db") == "RO":
        pytest.skip("root writes into read-only folders")
    monkeypatch.setattr(api, "_run", lambda *a: pytest.fail("measured before refusing"))
    (tmp_path / "junk.duckdb").write_text("not a database")
    places = {"DIR": tmp_path, "FIFO": _fifo(tmp_path) if change.get("db") == "FIFO" else None,
              "JUNK": tmp_path / "junk.duckdb",
              "RO": _read_only_folder(tmp_path) if change.get("db") == "RO" else None}  # fmt: skip
    args: dict[str, object] = {"model": "conv", "compiler": "noop", "width": 8, **change}
    if isinstance(args.get("db"), str) and args["db"] in places:
        args["db"] = places[str(args["db"])]
    model = args.pop("model")
    try:
        with pytest.raises(NgbError, match=re.escape(message)) as info:
            ngb.measure(model, **args)  # type: ignore[arg-type]
    finally:
        if (tmp_path / "ro").exists():
            (tmp_path / "ro").chmod(0o755)
    assert "\n" not in str(info.value)


def test_measure_takes_your_own_model(tmp_path: Path) -> None:
    """Issue 31 item 6: a file.py factory with arguments, inputs and a family, and an ONNX file."""
    (tmp_path / "mymodel.py").write_text(
        "import torch\n\ndef build(width=4):\n"
        "    return torch.nn.Sequential(torch.nn.Linear(6, width), torch.nn.ReLU())\n"
    )
    db = tmp_path / "r.duckdb"
    r = ngb.measure(f"{tmp_path / 'mymodel.py'}:build", compiler="identity", batch=2,
                    kwargs={"width": 16}, inputs=[{"name": "x", "shape": ["batch", 6]}],
                    family="mine", db=db, run="own", progress=False,
                    **{**QUICK, "workers": 1, "repetitions": 2})  # fmt: skip
    assert r.ok, r.error
    source = r.trial.spec["source"]
    assert source["kwargs"] == {"width": 16} and source["family"] == "mine"
    assert r.trial.params == 6 * 16 + 16
    results, _ = ngb.open_results(db, run="own")
    assert list(results["family"]) == ["mine"]
    with pytest.raises(NgbError, match="python models need inputs="):
        ngb.measure(f"{tmp_path / 'mymodel.py'}:build", compiler="identity", progress=False)


def test_open_results_names_its_run_and_passes_over_empty_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ngb.sweeps.store.database import Store

    db = tmp_path / "r.duckdb"
    r = ngb.measure("conv", compiler="noop", width=8, db=db, run="full", progress=False, **QUICK)
    store = Store(db)
    store.create_run("zz-cancelled", "x", "", ["localhost"], 3)  # newer, no trial ended
    store.set_run_status("zz-cancelled", "cancelled")
    capsys.readouterr()
    results, samples = ngb.open_results(db)
    err = capsys.readouterr().err
    assert results.attrs["run_id"] == samples.attrs["run_id"] == "full"
    assert list(results["key"]) == [r.trial.key]
    assert "ngb: run full (finished, 1 trials)" in err and "zz-cancelled (cancelled)" in err
    empty, _ = ngb.open_results(db, run="zz-cancelled")
    assert empty.empty and "has no finished trials" in capsys.readouterr().err
    Store(tmp_path / "e.duckdb").create_run("only", "x", "", ["localhost"], 1)
    with pytest.raises(NgbError, match="no run in .* has a finished trial"):
        ngb.open_results(tmp_path / "e.duckdb")


def test_notebook_gets_progress_and_no_tqdm_warning() -> None:
    """A Jupyter kernel without ipywidgets: timm's tqdm.auto would warn "IProgress not found"
    (faked here: the kernel's modules as tqdm detects them); measure shows its phases instead."""
    code = (
        "import sys, types\n"
        "sys.modules['ipykernel'] = types.ModuleType('ipykernel')\n"
        "sys.modules['ipykernel.zmqshell'] = types.ModuleType('ipykernel.zmqshell')\n"
        "ipy = types.ModuleType('IPython')\n"
        "ipy.get_ipython = lambda: type('ZMQInteractiveShell', (), {})()\n"
        "sys.modules['IPython'] = ipy\n"
        "import ngb\n"
        f"r = ngb.measure('conv', compiler='noop', width=8, **{QUICK!r})\n"
        "print('ok' if r.ok else r.error)\n"
    )
    out = subprocess.run(
        [sys.executable, "-W", "default", "-c", code], capture_output=True, timeout=240
    )  # bytes: text mode would turn the carriage returns into newlines
    err = out.stderr.decode()
    assert out.stdout.decode().strip() == "ok", err[-2000:]
    assert "IProgress" not in err and "Warning" not in err, err
    assert "\rngb: conv8x1/noop/b1: warmup" in err
    assert "samples/s" in err.rsplit("\rngb: conv8x1/noop/b1: ", 1)[-1]  # redrawn in place


def test_measure_takes_an_algorithm_and_a_refused_one_is_a_failed_result(tmp_path: Path) -> None:
    """Issue 48: ``algorithm=`` as ``ngb measure --algorithm``; noop runs no model, so it
    refuses gemm: a failed Result saying why, stored with its algorithm."""
    db = tmp_path / "r.duckdb"
    r = ngb.measure("conv", compiler="noop", width=8, algorithm=" gemm", db=db, **QUICK)
    assert not r.ok and r.trial.error_kind == "unsupported"
    assert r.error == "algorithm gemm is unsupported with noop: it runs no model"
    assert r.trial.spec["algorithm"] == "gemm"
    results, _ = ngb.open_results(db)
    assert list(results["algorithm"]) == ["gemm"] and list(results["status"]) == ["failed"]


def test_failed_trial_is_a_result_not_an_exception() -> None:
    r = ngb.measure("conv", compiler="tensorrt", width=8, **QUICK)  # not installed here
    assert not r.ok and r.error and math.isnan(r.interval[0]) and r.verdict is None


def test_example_notebook_script_runs(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "notebook_api.py"), str(tmp_path / "x.duckdb")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "noop over eager:" in out.stdout and "conv identity b1" in out.stdout
    assert "throughput_mean" in out.stdout


def test_measure_after_the_notebook_ran_torch_on_two_threads() -> None:
    """A notebook that ran torch ops has OpenMP's pool started; a worker forked from it would hang
    at its first parallel op (libgomp does not survive a fork). ngb.measure must still answer."""
    code = (
        "import torch, ngb\n"
        "torch.set_num_threads(2)\n"
        "torch.nn.Conv2d(3, 16, 3)(torch.ones(4, 3, 64, 64))  # starts the OpenMP pool\n"
        f"r = ngb.measure('conv', compiler='identity', width=8, batch=1, **{QUICK!r})\n"
        "print('ok' if r.ok else r.error)\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "OMP_NUM_THREADS"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=env
    )
    assert out.stdout.strip().splitlines()[-1:] == ["ok"], out.stderr[-2000:]
