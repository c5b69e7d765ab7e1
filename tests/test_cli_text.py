"""What the CLI prints for people: `ngb status` piped (80 columns) with every word whole, and
`ngb measure --help` stating the defaults a run records."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from ngb.sweeps.cli import cli
from ngb.sweeps.store.database import Store

MESSAGE = "trial 4/40 resnet18 onnxruntime b8: compiling the model, a long message"


def test_status_at_80_columns_cuts_no_word(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    store = Store(db)
    for i, state in enumerate(["finished", "running", "cancelled"]):
        run_id = f"own-models-20261126-20150{i}-a1b2"
        store.create_run(run_id, "own-models", "", ["localhost", "jetson-orin-nano"], 40, {})
        store.set_run_status(run_id, state)
        store.upsert_run_device(run_id, "localhost", state="finished", n_trials=40)
        store.upsert_run_device(
            run_id, "jetson-orin-nano", state="running", n_trials=40, message=MESSAGE
        )
    runner = CliRunner()
    listing = runner.invoke(cli, ["status", "--db", str(db)], env={"COLUMNS": "80"})
    one = runner.invoke(
        cli, ["status", "own-models-20261126-201501-a1b2", "--db", str(db)], env={"COLUMNS": "80"}
    )
    for out in (listing, one):
        assert out.exit_code == 0, out.output
        assert "…" not in out.output
        assert max(len(line) for line in out.output.splitlines()) <= 80
    words = listing.output.split()
    for whole in ("run_id", "sweep", "status", "devices", "failed", "own-models", "cancelled"):
        assert whole in words, listing.output
    assert "own-models-20261126-201502-a1b2" in words and "finished" in one.output.split()
    assert " ".join(one.output.split()).count(MESSAGE) == 0  # wrapped over lines ...
    assert all(w in one.output.split() for w in MESSAGE.split())  # ... with every word whole


def test_measure_help_states_the_settings_defaults() -> None:
    import re

    from ngb.core.records.types import MeasureSettings

    out = CliRunner().invoke(cli, ["measure", "--help"], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    d = MeasureSettings()
    for option, value in [
        ("--max-measure-s", d.max_measure_s), ("--values-per-worker", d.values_per_worker),
        ("--workers", d.workers), ("--max-workers", d.max_workers),
        ("--min-repetitions", d.min_repetitions), ("--max-repetitions", d.max_repetitions),
        ("--ci-target", d.ci_target),
    ]:  # fmt: skip
        said = re.search(rf"{option} \S+ [^(]*\((?:adaptive; )?([\d.]+)\)", text)
        assert said is not None and float(said.group(1)) == value, (option, text)


def test_measure_prints_plain_numbers_and_what_a_cpu_share_means(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The summary ``ngb measure`` prints, for a stored-shape result of 38,360 samples/s."""
    from ngb.core.records.types import MeasureSettings, TrialResult, TrialSpec
    from ngb.core.trial.stats import summarize
    from ngb.sweeps.cli.measure import _print_summary

    spec = TrialSpec(model="resnet18", compiler="noop", batch=2, measure=MeasureSettings())
    reps = [38000.0, 38400.0, 38700.0, 38340.0]
    result = TrialResult(
        key=spec.key, spec=spec.to_dict(), throughput=summarize(reps),
        latency_ms=summarize([2 / r * 1000 for r in reps]), workers=2,
        repetitions=[{"iters": 100, "elapsed_s": 1.0, "throughput": r, "worker": i % 2}
                     for i, r in enumerate(reps)],
        proc_cpu_percent_mean=145.0, verdict="VALID", verdict_reason="ok",
    )  # fmt: skip
    _print_summary(spec, result)
    printed = capsys.readouterr().out
    assert "e+0" not in printed  # 38360, never 3.836e+04 beside "38400 [..]"
    line = next(ln for ln in printed.splitlines() if ln.startswith("cpu (this process):"))
    assert line.strip() == "cpu (this process): 145 % (100 % = one core)", line
