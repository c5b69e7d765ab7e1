"""History, comparisons, regression gates and store imports (issue 35).

Change points are measured on synthetic series (many seeds, realistic noise: each run's own
stored interval plus run-to-run noise the interval does not cover); ``ngb compare`` runs on a
real sweep run twice with one real change; ``ngb history`` and ``ngb import`` on real stores
written through the store's own ingest.
"""

from __future__ import annotations

import math
import random
import sys

import pytest
from click.testing import CliRunner
from ngb.core.intervals import t_quantile
from ngb.sweeps.cli import cli
from ngb.sweeps.report import compare as compare_runs
from ngb.sweeps.report import history
from ngb.sweeps.report.changepoints import detect
from ngb.sweeps.report.points import differences, point_of, swept_settings
from ngb.sweeps.store.database import Store
from ngb.sweeps.store.merge import import_store

from tests.history_store import BASE_PACKAGES, seed_runs
from tests.test_tui_support import wait_for

# ---------------------------------------------------------------- change points, synthetic

RUNS, STEP_AT, STEP = 40, 20, 0.05


def synthetic(
    seed: int, step_at: int | None = None, between: float = 0.01, within: float = 0.03
) -> tuple[list[float], list[float]]:
    """40 runs of 10 repetitions: run-to-run noise ``between`` (log-normal, not covered by the
    runs' own intervals), repetition noise ``within``; each run's mean and its relative standard
    error as the store's t interval gives it. A ``STEP`` slowdown from run ``step_at`` on."""
    rng = random.Random(seed)
    reps, t = 10, t_quantile(9)
    values, rel_se = [], []
    for i in range(RUNS):
        level = 1000.0 * (1 - STEP if step_at is not None and i >= step_at else 1.0)
        run_level = level * math.exp(rng.gauss(0, between))
        xs = [run_level * (1 + rng.gauss(0, within)) for _ in range(reps)]
        mean = sum(xs) / reps
        half = t * math.sqrt(sum((x - mean) ** 2 for x in xs) / (reps - 1)) / math.sqrt(reps)
        values.append(mean)
        rel_se.append(half / t / mean)
    return values, rel_se


def rates(seeds: int, between: float) -> tuple[float, float]:
    """(false-alarm rate on stable series, miss rate of the step at run 20 +- 1)."""
    alarms = misses = 0
    for seed in range(seeds):
        if detect(*synthetic(seed, between=between)):
            alarms += 1
        found = detect(*synthetic(100_000 + seed, STEP_AT, between=between))
        if not any(abs(c.index - STEP_AT) <= 1 and c.ratio < 1 for c in found):
            misses += 1
    return alarms / seeds, misses / seeds


def test_planted_slowdown_is_found_at_run_20_and_stable_runs_give_no_change_point():
    false_alarm, miss = rates(300, between=0.01)
    print(f"\n300 seeds, 1 % run-to-run + 3 % repetition noise: false alarms {false_alarm:.3f}, "
          f"misses {miss:.3f}")  # fmt: skip
    assert false_alarm <= 0.03
    assert miss <= 0.02


@pytest.mark.parametrize("between", [0.005, 0.02, 0.04])
def test_false_alarms_stay_rare_as_run_to_run_noise_grows(between):
    """The excess variance is estimated from the series, so louder runs do not alarm more
    (they only hide smaller steps: the miss rate is reported, not asserted)."""
    false_alarm, miss = rates(150, between=between)
    print(f"\nrun-to-run {between:.1%}: false alarms {false_alarm:.3f}, misses {miss:.3f}")
    assert false_alarm <= 0.04


def test_exact_steps_and_short_series():
    assert detect([100.0] * 5 + [90.0] * 5) != []
    [one] = detect([100.0] * 5 + [90.0] * 5)
    assert one.index == 5 and one.ratio == pytest.approx(0.9)
    two = detect([100.0] * 6 + [80.0] * 6 + [120.0] * 6)
    assert [c.index for c in two] == [6, 12]
    assert detect([100.0, 50.0, 100.0, 50.0, 100.0]) == []  # too short to tell
    with pytest.raises(ValueError):
        detect([100.0, 0.0, 1.0, 1.0, 1.0, 1.0])


# ---------------------------------------------------------------- points and what differs


def _row(run: str, threads: int, value: float = 100.0, ort: str = "1.20") -> dict[str, object]:
    return {
        "run_id": run, "device": "d", "key": f"{run}{threads}", "model": "resnet18",
        "compiler": "onnxruntime", "batch": 1, "precision_asked": "default", "status": "ok",
        "compiler_options": {"intra_op_threads": threads}, "measure": {"repetitions": 5},
        "versions": {"onnxruntime": ort}, "extra": {"device_state": {"governor": "performance"}},
        "throughput_mean": value, "throughput_ci_half": value * 0.01, "repetitions": 5,
    }  # fmt: skip


def test_a_swept_option_is_part_of_the_point_and_a_run_wide_one_is_a_change():
    swept_runs = [_row("a", 1), _row("a", 2), _row("b", 1), _row("b", 2)]
    swept = swept_settings(swept_runs)
    assert swept == {"compiler_options.intra_op_threads"}
    assert point_of(swept_runs[0], swept) == point_of(swept_runs[2], swept)
    assert point_of(swept_runs[0], swept) != point_of(swept_runs[1], swept)

    a, b = _row("a", 1), _row("b", 2, ort="1.21")
    assert swept_settings([a, b]) == frozenset()
    changed = {c.field: (c.old, c.new) for c in differences(a, b)}
    assert changed == {
        "compiler_options.intra_op_threads": (1, 2),
        "versions.onnxruntime": ("1.20", "1.21"),
    }


def test_gate_fails_on_the_whole_interval_and_lists_possible_slowdowns():
    base = [_row("a", 1, 1000.0)]
    clear = compare_runs.compare("a", base, "b", [_row("b", 1, 900.0)])
    failing, possible = compare_runs.regressions(clear, 0.05)
    assert [c.verdict for c in failing] == ["slower"] and possible == []
    assert clear.run_changes == []  # same settings, versions, state

    wide = _row("b", 1, 940.0)
    wide["throughput_ci_half"] = 940.0 * 0.06  # 6 % slower, but 95 % sure of less than that
    unsure = compare_runs.compare("a", base, "b", [wide])
    failing, possible = compare_runs.regressions(unsure, 0.05)
    assert failing == [] and len(possible) == 1
    broke = _row("b", 1)
    broke.update(status="failed", error="onnxruntime: unsupported op")
    gone = compare_runs.compare("a", base, "b", [broke])
    assert gone.points == [] and gone.broken == [("d resnet18/onnxruntime/b1", broke["error"])]
    assert compare_runs.parse_threshold("5%") == compare_runs.parse_threshold("0.05") == 0.05
    with pytest.raises(ValueError):
        compare_runs.parse_threshold("fast")


# ---------------------------------------------------------------- ngb history on a real store


def test_history_names_the_change_point_with_what_changed(tmp_path):
    db = tmp_path / "h.duckdb"
    rng = random.Random(7)
    values = [1000 * (0.92 if i >= 8 else 1.0) * (1 + rng.gauss(0, 0.005)) for i in range(16)]
    new_env = [p.replace("1.20.0", "1.21.0") for p in BASE_PACKAGES]
    seed_runs(
        db,
        values,
        versions=[{"onnxruntime": "1.21.0" if i >= 8 else "1.20.0"} for i in range(16)],
        packages=[new_env if i >= 8 else BASE_PACKAGES for i in range(16)],
    )
    series = history.series_of(history.load(Store(db), {"compiler": "onnxruntime"}))
    assert len(series) == 1 and len(series[0].entries) == 16
    [change] = series[0].changes
    assert change.run_id == "h-08" and change.percent == pytest.approx(-8, abs=1)
    assert "versions.onnxruntime: 1.20.0 -> 1.21.0" in change.text()

    figure = tmp_path / "hist"
    r = CliRunner().invoke(
        cli, ["history", "--db", str(db), "-m", "resnet18", "--format", "markdown",
              "--figure", str(figure)],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "change point from run h-08: -7.9 %" in r.output
    assert "onnxruntime 1.20.0 -> 1.21.0" in r.output  # the package lists, diffed
    assert (tmp_path / "hist.png").stat().st_size > 10_000

    r = CliRunner().invoke(cli, ["history", "--db", str(db), "-m", "nosuchmodel"])
    assert r.exit_code == 1 and r.output.count("\n") == 1 and "no successful result" in r.output


async def test_console_history_screen_shows_the_series_and_its_change_point(tmp_path):
    from ngb.tui.screens.history import HistoryScreen
    from textual.widgets import DataTable, Label

    from tests.test_tui_support import SIZE, make_app

    app = make_app(tmp_path, screen="history")
    assert app.backend.db_path is not None
    values = [1000.0] * 6 + [900.0] * 6
    seed_runs(
        app.backend.db_path,
        values,
        versions=[{"onnxruntime": "1.21.0" if i >= 6 else "1.20.0"} for i in range(12)],
    )
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, HistoryScreen)
        runs = screen.query_one("#history-runs", DataTable)
        await wait_for(pilot, lambda: runs.row_count == 12)
        assert screen.view.points[0][:2] == ("edge1 resnet18/onnxruntime/b1", "12")
        assert screen.view.points[0][3] == "1"
        changes = str(screen.query_one("#history-changes", Label).render())
        assert "from run h-06: -10.0 %" in changes and "versions.onnxruntime" in changes


# ---------------------------------------------------------------- ngb import


def _counts(db) -> dict[str, int]:
    store = Store(db)
    out = {}
    for table in ("runs", "run_devices", "trials", "measurements", "environments"):
        _, rows = store.query(f"SELECT count(*) FROM {table}")  # noqa: S608
        out[table] = rows[0][0]
    return out


def _trial_ids(db) -> set[tuple[str, str, str]]:
    _, rows = Store(db).query("SELECT run_id, device, key FROM trials")
    return {tuple(r) for r in rows}


def test_import_keeps_every_trial_once_with_its_id(tmp_path):
    first, second = tmp_path / "first.duckdb", tmp_path / "second.duckdb"
    seed_runs(first, [1000.0] * 4, prefix="ws1")
    other_env = [*BASE_PACKAGES, "tbb==2022.0"]
    seed_runs(second, [990.0] * 5, prefix="ws2", device="edge2", packages=[other_env] * 5)
    # a per-run table as a later migration would add (in both files), and an operator's own
    Store(first).query("CREATE TABLE run_notes (run_id VARCHAR, note VARCHAR)", allow_write=True)
    for sql in ("CREATE TABLE run_notes (run_id VARCHAR, note VARCHAR)",
                "INSERT INTO run_notes VALUES ('ws2-01', 'fan replaced')",
                "CREATE TABLE my_scratch (x INTEGER)"):  # fmt: skip
        Store(second).query(sql, allow_write=True)
    before_first, before_second = _counts(first), _counts(second)
    ids = _trial_ids(first) | _trial_ids(second)
    second_bytes = second.read_bytes()

    r = CliRunner().invoke(cli, ["import", str(second), "--db", str(first)])
    assert r.exit_code == 0, r.output
    assert "imported 5 trials, 5 new runs" in r.output
    assert "tables not merged: my_scratch" in r.output
    assert Store(first).query("SELECT * FROM run_notes")[1] == [("ws2-01", "fan replaced")]
    after = _counts(first)
    for table in ("runs", "run_devices", "trials", "measurements", "environments"):
        assert after[table] == before_first[table] + before_second[table], table
    assert _trial_ids(first) == ids  # nothing lost, nothing duplicated, ids as they were
    assert second.read_bytes() == second_bytes  # the imported file is left alone

    again = import_store(Store(first), second)  # idempotent
    assert again.trials_imported == 0 and again.trials_already_here == 5
    assert _counts(first) == after


def test_import_refuses_a_run_id_that_names_different_runs(tmp_path):
    first, second = tmp_path / "first.duckdb", tmp_path / "second.duckdb"
    seed_runs(first, [1000.0] * 2, prefix="nb")
    seed_runs(second, [1000.0] * 3, prefix="nb")  # nb-00 and nb-01 again, other runs
    before = _counts(first)
    r = CliRunner().invoke(cli, ["import", str(second), "--db", str(first)])
    assert r.exit_code == 1 and r.output.count("\n") == 1
    assert "run id 'nb-00' names different runs" in r.output
    assert _counts(first) == before  # all or nothing


# ---------------------------------------------------------------- a real sweep, run twice


def _sweep(sleep_s: float):
    from ngb.sweeps.spec.sweep import loads_sweep

    return loads_sweep(f"""
name = "gate"
[measure]
warmup_iters = 1
warmup_s = 0
min_iters = 3
min_duration_s = 0.03
repetitions = 5
workers = 1
quiet_check_s = 0
verify = false
[[matrix]]
models = ["resnet18"]
compilers = ["noop"]
batches = [1, 2]
compiler_options.noop = {{ sleep_s = {sleep_s} }}
""")


@pytest.mark.timeout(300)
async def test_compare_names_the_changed_points_and_the_field_and_gates(tmp_path, monkeypatch):
    """The same sweep twice on the real local agent, one real change: each call of the noop
    runtime takes 10 ms in the first run and 50 ms in the second (its ``sleep_s`` option): long
    enough calls that a loaded 2-core CI machine's scheduling jitter stays a small share."""
    from ngb.devices.inventory import Device, Inventory
    from ngb.sweeps.run.orchestrator import Orchestrator

    monkeypatch.setenv("NGB_HOME", str(tmp_path / "home"))
    inventory = Inventory(
        [Device(name="localhost", host="localhost", transport="local",
                python=sys.executable, workdir=str(tmp_path / "device"))]
    )  # fmt: skip
    db = tmp_path / "results.duckdb"
    orch = Orchestrator(Store(db), inventory)
    runs = []
    for sleep_s in (0.01, 0.05):
        run_id = await orch.start(_sweep(sleep_s), "localhost", isolate="inprocess")
        assert (await orch.wait(run_id))["status"] == "finished"
        runs.append(run_id)
    await orch.close()

    r = CliRunner().invoke(
        cli, ["compare", *runs, "--db", str(db), "--format", "markdown", "--fail-above", "5%"]
    )
    assert r.exit_code == 2, r.output
    assert "localhost resnet18/noop/b1" in r.output and "localhost resnet18/noop/b2" in r.output
    assert r.output.count("slower FAIL") == 2
    assert "differs at every point: compiler_options.sleep_s: 0.01 -> 0.05" in r.output
    assert "fail: 2 point(s) slower than 5% with 95 % confidence, 0 failed in" in r.output

    r = CliRunner().invoke(cli, ["compare", runs[0], runs[0], "--db", str(db), "--format", "csv",
                                 "--fail-above", "5%"])  # fmt: skip
    assert r.exit_code == 0, r.output  # a run against itself: exactly 1, nothing fails

    page = tmp_path / "compare.html"
    r = CliRunner().invoke(cli, ["compare", *runs, "--db", str(db), "--format", "html",
                                 "-o", str(page)])  # fmt: skip
    assert r.exit_code == 0 and "<table>" in page.read_text()
    stored = db.read_bytes()
    r = CliRunner().invoke(cli, ["compare", *runs, "--db", str(db), "-o", str(db)])
    assert r.exit_code == 1 and "refusing to write over" in r.output
    assert db.read_bytes() == stored

    # provenance reached the store: the hash per trial, the package list once
    _, rows = Store(db).query("SELECT count(DISTINCT env_hash), count(*) FROM trials")
    assert rows[0] == (1, 4)
    _, rows = Store(db).query("SELECT packages FROM environments")
    assert len(rows) == 1 and '"numpy==' in rows[0][0]


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_compare_names_a_thread_count_change_on_a_real_runtime(tmp_path, monkeypatch):
    """1 vs 2 ONNX Runtime intra-op threads on a small conv: the field is named whatever the
    machine makes of it (a loaded 2-core machine may show no gain, so no verdict is asserted)."""
    from ngb.devices.inventory import Device, Inventory
    from ngb.sweeps.run.orchestrator import Orchestrator
    from ngb.sweeps.spec.sweep import loads_sweep

    monkeypatch.setenv("NGB_HOME", str(tmp_path / "home"))
    inventory = Inventory(
        [Device(name="localhost", host="localhost", transport="local",
                python=sys.executable, workdir=str(tmp_path / "device"))]
    )  # fmt: skip
    db = tmp_path / "results.duckdb"
    orch = Orchestrator(Store(db), inventory)
    runs = []
    for threads in (1, 2):
        sweep = loads_sweep(f"""
name = "threads"
[measure]
repetitions = 5
workers = 1
quiet_check_s = 0
verify = false
[[matrix]]
models = ["conv"]
widths = [32]
depths = [2]
compilers = ["onnxruntime"]
batches = [8]
compiler_options.onnxruntime = {{ intra_op_threads = {threads} }}
""")
        run_id = await orch.start(sweep, "localhost", isolate="inprocess")
        assert (await orch.wait(run_id))["status"] == "finished"
        runs.append(run_id)
    await orch.close()
    r = CliRunner().invoke(cli, ["compare", *runs, "--db", str(db), "--format", "markdown"])
    print(r.output)
    assert r.exit_code == 0, r.output
    assert "localhost conv32x2/onnxruntime/b8" in r.output
    assert "compiler_options.intra_op_threads: 1 -> 2" in r.output


# ---------------------------------------------------------------- provenance


def test_provenance_reads_packages_container_and_model_git(tmp_path, monkeypatch):
    import subprocess

    from ngb.core import provenance

    lines = provenance.packages()
    assert any(line.startswith("numpy==") for line in lines) and list(lines) == sorted(lines)
    assert provenance.packages_sha(list(reversed(lines))) == provenance.packages_sha(lines)
    assert provenance.diff_packages(["a==1", "b==2"], ["a==2", "c==1"]) == [
        "a 1 -> 2", "-b==2", "+c==1"
    ]  # fmt: skip

    monkeypatch.delenv("NGB_IMAGE_DIGEST", raising=False)
    monkeypatch.delenv("CONTAINER_IMAGE", raising=False)
    monkeypatch.delenv("container", raising=False)
    root = tmp_path / "root"
    (root / "run").mkdir(parents=True)
    assert provenance.container(root) is None
    (root / "run" / ".containerenv").write_text('engine="podman"\nimageid="sha256:abc"\n')
    assert provenance.container(root) == {"runtime": "podman", "image": "sha256:abc"}
    (root / "run" / ".containerenv").unlink()
    (root / ".dockerenv").write_text("")
    monkeypatch.setenv("NGB_IMAGE_DIGEST", "sha256:def")
    assert provenance.container(root) == {"runtime": "docker", "image": "sha256:def"}

    code = tmp_path / "code"
    code.mkdir()
    (code / "net.py").write_text("def build(): ...\n")
    git = ["git", "-C", str(code), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert provenance._git_state(code) == {"commit": head.strip(), "dirty": False}
    (code / "net.py").write_text("def build(): return 1\n")
    assert provenance._git_state(code) == {"commit": head.strip(), "dirty": True}
    assert provenance._git_state(tmp_path / "root") is None

    # at ingest, on the workstation: the commit of the checkout holding the model's files
    from ngb.core.types import TrialResult
    from ngb.sweeps.store.provenance import trial_columns

    artifact = {"name": "code", "sha256": "0" * 64, "local": str(code), "role": "folder"}
    result = TrialResult(key="k", spec={"model": "net", "source": {"artifacts": [artifact]}})
    columns = trial_columns(result)
    assert (columns["model_git_commit"], columns["model_git_dirty"]) == (head.strip(), True)
