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
from ngb.core.statistics.student_t import t_two_sided
from ngb.sweeps.cli import cli
from ngb.sweeps.report import compare as compare_runs
from ngb.sweeps.report import derived, history
from ngb.sweeps.report import gate as gate_rules
from ngb.sweeps.report.changepoints import detect, split_evidence
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
    reps, t = 10, t_two_sided(0.95, 9)
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


def short_history(
    seed: int, before: int, after: int, between: float, stated: float, processes: int = 4
) -> tuple[list[float], list[float]]:
    """``before`` runs at one level, then ``after`` runs 5 % slower. Each run's mean moves by
    ``between`` (log-normal: what its own interval does not cover) and by the noise of its
    ``processes`` process means, whose spread is what its stored interval states (relative se
    ``stated`` on average, estimated from ``processes - 1`` df as ngb's interval is)."""
    rng = random.Random(seed)
    values, rel_se = [], []
    for i in range(before + after):
        level = 1000.0 * (0.95 if i >= before else 1.0) * math.exp(rng.gauss(0, between))
        xs = [level * (1 + rng.gauss(0, stated * math.sqrt(processes))) for _ in range(processes)]
        mean = sum(xs) / processes
        sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (processes - 1))
        values.append(mean)
        rel_se.append(sd / math.sqrt(processes) / mean)
    return values, rel_se


def short_rates(seeds: int, between: float, stated: float) -> tuple[float, float, float]:
    """(found at the right run in 4+4 runs, in 6+6 runs, any change point in 12 stable runs)."""
    found = {4: 0, 6: 0}
    alarms = 0
    for seed in range(seeds):
        for side in found:
            points = detect(*short_history(seed + 1000 * side, side, side, between, stated))
            found[side] += any(c.index == side and c.ratio < 1 for c in points)
        alarms += bool(detect(*short_history(seed + 50_000, 12, 0, between, stated)))
    return found[4] / seeds, found[6] / seeds, alarms / seeds


# run-to-run noise of 1 % in all, split between the runs' stated intervals and what they miss
ONE_PERCENT = {"unstated": (0.01, 0.001), "half each": (0.007, 0.007), "stated": (0.0, 0.01)}


@pytest.mark.parametrize("mix", list(ONE_PERCENT))
def test_a_5_percent_step_is_found_in_4_plus_4_runs(mix):
    """Issue 45: a lab re-runs after each upgrade, so a step must show within a few runs. Under
    1 % run-to-run noise a 5 % step is 5 sigma per run: found at the right run in >= 80 % of
    4+4-run histories and >= 95 % of 6+6, with <= 2 % false alarms on 12 stable runs (the
    threshold is simulated for 1 %), whichever share of the noise the intervals state."""
    between, stated = ONE_PERCENT[mix]
    four, six, alarms = short_rates(300, between, stated)
    print(f"\n{mix}: 4+4 found {four:.3f}, 6+6 found {six:.3f}, 12 stable alarms {alarms:.3f}")
    assert four >= 0.80 and six >= 0.95
    assert alarms <= 0.02


def test_split_evidence_is_the_statistic_detect_judges():
    # What the real 4+4 history below falls back on: a step the runs' spread hides there
    # (|t| under the threshold) is no change point; one it shows is found at that run.
    rng = random.Random(7)
    for spread, found in ((0.005, True), (0.04, False)):
        values = [100 * (1 + rng.gauss(0, spread)) for _ in range(4)]
        values += [95.2 * (1 + rng.gauss(0, spread)) for _ in range(4)]
        t, limit = split_evidence(values, [0.01] * 8, 4)
        changes = detect(values, [0.01] * 8)
        assert (t > limit) is found
        if found:
            [change] = changes
            assert change.index == 4 and math.isclose(abs(change.z), t)
        else:
            assert changes == []


def test_the_threshold_table_is_what_its_simulation_gives():
    """The stored quantiles come from ``changepoint_thresholds.simulate`` (regenerated with
    ``python -m ngb.sweeps.report.changepoint_thresholds``); a smaller simulation agrees."""
    from ngb.sweeps.report import changepoint_thresholds as thresholds

    for n in (6, 8, 12):
        assert thresholds.simulate(n, 40_000, seed=7) == pytest.approx(
            thresholds.THRESHOLDS[n], abs=0.12
        )
    assert thresholds.THRESHOLDS[6] == pytest.approx(t_two_sided(0.99, 4), abs=0.05)  # one split
    assert thresholds.threshold(45) < thresholds.threshold(40)  # interpolated in log n
    assert thresholds.threshold(45) > thresholds.threshold(50)
    assert thresholds.threshold(300) == thresholds.bonferroni(300) > thresholds.threshold(200)
    with pytest.raises(ValueError, match="needs 6 runs"):
        thresholds.threshold(5)


def test_exact_steps_and_short_series():
    assert detect([100.0] * 5 + [90.0] * 5) != []
    [one] = detect([100.0] * 5 + [90.0] * 5)
    assert one.index == 5 and one.ratio == pytest.approx(0.9)
    two = detect([100.0] * 6 + [80.0] * 6 + [120.0] * 6)
    assert [c.index for c in two] == [6, 12]
    assert detect([100.0, 50.0, 100.0, 50.0, 100.0]) == []  # too short to tell
    assert detect([100.0] * 12) == []  # noise-free and flat: nothing to find
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


def test_invalid_runs_are_shown_and_left_out_with_valid_only(tmp_path):
    """A collapsed run in the middle of a stable series: flagged in the table either way; with
    --valid-only it is not searched, and each table says how many runs were and what a change
    needs."""
    db = tmp_path / "v.duckdb"
    values = [1000.0, 1004.0, 996.0, 1002.0, 300.0, 998.0, 1003.0, 997.0, 1001.0]
    collapsed = {"verdict": "INVALID", "verdict_reason": "disturbed", "disturbed": True,
                 "ci_half_width": 290.0}  # fmt: skip
    seed_runs(db, values, changed=[collapsed if i == 4 else {} for i in range(9)])
    rows = history.load(Store(db), {})
    [kept] = history.series_of(rows)
    [valid] = history.series_of(rows, valid_only=True)
    assert kept.searched == 9 and valid.searched == 8
    assert [e.left_out for e in valid.entries][4] == "INVALID disturbed"
    assert "left out: 1 run(s) (INVALID disturbed)" in valid.search_note()
    assert valid.changes == []

    r = CliRunner().invoke(
        cli, ["history", "--db", str(db), "--valid-only", "--format", "markdown"]
    )
    assert r.exit_code == 0, r.output
    assert "INVALID disturbed left out" in r.output  # shown, flagged, not searched
    assert "8 runs searched: a change needs a t above 4.65" in r.output

    short = tmp_path / "s.duckdb"
    seed_runs(short, [1000.0, 1000.0, 900.0, 900.0])
    r = CliRunner().invoke(cli, ["history", "--db", str(short)])
    assert r.exit_code == 0, r.output
    assert "too few runs to find a change point: 4 searched, 6 needed (3 on each side" in r.output


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


# ---------------------------------------------------------------- a real 4+4 history

# each run's sleep moves by about 1 % (planted, so that the runs before the step and after it
# differ as a lab's re-runs do), then the sleep goes 5 % up from run 4 on
PLANTED = (0.008, -0.010, 0.003, -0.004, 0.009, -0.007, 0.011, -0.002)
SLEEP_S = 0.1  # long calls: a loaded 2-core machine's wake-up delays stay a small share


def _measure_noop(db, run: str, sleep_s: float):
    """One real run of the sleeping no-op through the API, stored under ``run``. Others' CPU
    use on this shared machine is not a disturbance here (0.9 of it is): the test is about the
    step, and an INVALID run's gate is tested on its own (``tests/test_gate.py``)."""
    import ngb

    result = ngb.measure(
        "resnet18", "noop", options={"sleep_s": round(sleep_s, 6)}, db=db, run=run,
        progress=False, repetitions=6, workers=3, min_iters=2, min_duration_s=2 * SLEEP_S,
        warmup_iters=1, warmup_s=0, quiet_check_s=0, disturbance_threshold=0.9, verify=False,
    )  # fmt: skip
    assert result.ok, result.error
    return result


def _gate(db, a: str, b: str) -> tuple[int, str]:
    r = CliRunner().invoke(cli, ["compare", a, b, "--db", str(db), "--fail-above", "2%"])
    assert r.stderr.count("\n") == 1, r.output  # one summary line, whatever the outcome
    print(f"\n{a} -> {b}: {r.stderr.strip()}")
    return r.exit_code, r.stderr


def _decidable(db, a: str, b: str) -> bool:
    """Both runs VALID and B / A's interval narrower than the 2 % threshold."""
    rows = {r["run_id"]: r for r in Store(db).trials() if r["run_id"] in (a, b)}
    if any(gate_rules.invalid_reason(row) for row in rows.values()):
        return False
    ratio = derived.speedup(rows[b], rows[a])
    return ratio.low is not None and ratio.high is not None and ratio.high / ratio.low < 1.02**2


@pytest.mark.timeout(300)
def test_a_real_4_plus_4_history_names_its_step_and_the_gate_judges_it(tmp_path):
    """Issue 45: 4 runs of a sleeping no-op whose sleep moves ~1 % from run to run, then 4 at a
    5 % longer sleep: one change point, at run r4; ``ngb compare --fail-above 2%`` across the
    step fails, and two runs of the same setting pass. The gate's answer is the data's: where
    this shared machine disturbed a run (INVALID) or widened its interval beyond the threshold,
    it must say undecidable, and never pass the step."""
    db = tmp_path / "noop.duckdb"
    for i, moved in enumerate(PLANTED):
        _measure_noop(db, f"r{i}", SLEEP_S * (1.05 if i >= 4 else 1.0) * (1 + moved))
    [series] = history.series_of(history.load(Store(db), {}))
    assert [e.run_id for e in series.entries] == [f"r{i}" for i in range(8)]
    values = [e.throughput.value for e in series.entries]
    t, limit = split_evidence(values, [history._rel_se(e.row) for e in series.entries], 4)
    print(
        f"\nthroughputs {[round(v, 2) for v in values]}: |t| at r4 {t:.2f}, threshold {limit:.2f}"
    )
    r = CliRunner().invoke(cli, ["history", "--db", str(db), "--format", "markdown"])
    if t > limit:  # the data shows the step: the detector names it, at r4, with its cause
        [change] = series.changes
        assert change.run_id == "r4" and -7 < change.percent < -3, change.text()
        assert "compiler_options.sleep_s" in change.text()
        assert r.exit_code == 0 and "change point from run r4: -" in r.output
    else:  # a loaded machine spread these runs too much to see 5 % in 4 + 4 (it did in CI,
        # 2026-11-30; quiet, the detector finds this step in ~94 % of such histories): the
        # answer is "no change", never a wrong one
        assert series.changes == [], [c.text() for c in series.changes]
        assert r.exit_code == 0 and "no change point" in r.output
        assert "change point from run" not in r.output

    code, line = _gate(db, "r3", "r4")
    if _decidable(db, "r3", "r4"):
        assert code == 2 and line.startswith("gate fail at 2 %: 1 fail"), line
    else:
        assert code == 3 and line.startswith("gate undecidable"), line

    _measure_noop(db, "again", SLEEP_S * (1 + PLANTED[3]))  # r3's setting, measured again
    code, line = _gate(db, "r3", "again")
    if _decidable(db, "r3", "again"):
        assert code == 0 and line.startswith("gate pass at 2 %"), line
    else:
        assert code == 3 and line.startswith("gate undecidable"), line


# ---------------------------------------------------------------- ngb import


def _counts(db) -> dict[str, int]:
    store = Store(db)
    out = {}
    for table in ("runs", "run_devices", "trials", "measurements", "environments"):
        _, rows = store.select(f"SELECT count(*) FROM {table}")  # noqa: S608
        out[table] = rows[0][0]
    return out


def _trial_ids(db) -> set[tuple[str, str, str]]:
    _, rows = Store(db).select("SELECT run_id, device, key FROM trials")
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
    assert Store(first).select("SELECT * FROM run_notes")[1] == [("ws2-01", "fan replaced")]
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
min_duration_s = 0.1
# 10, not 5: with 5 repetitions a CI run once came out INVALID (+-94 %): under the suite's load
# the 5 repetition means drifted, their serial correlation read 0.90, and the interval widened
# x4.1 (2026-11-29, 1 failure in 11 runs). 10 give the estimate and the t quantile room.
repetitions = 10
workers = 1
quiet_check_s = 0
verify = false
# the gate cannot judge an INVALID run (issue 45), and disturbance is not what this test is
# about: a sleeping no-op uses no CPU of its own, yet `make test` keeps both cores of CI busy.
# At 0.999 a CI run still came out "other processes used 100% of the CPU" (the gate rightly
# said undecidable); 1 never flags a CPU share. A 10-repetition interval of 10 ms sleeps on a
# loaded machine may be wider than +-20 % too; 0.9 still leaves B / A ~0.2 far from 5 %.
disturbance_threshold = 1
ci_target = 0.9
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
    assert r.output.count("slower FAIL") == 2, r.output
    assert "differs at every point: compiler_options.sleep_s: 0.01 -> 0.05" in r.output
    assert r.stderr.startswith("gate fail at 5 %: 2 fail, 0 undecidable, 0 pass -- localhost")

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
    _, rows = Store(db).select("SELECT count(DISTINCT env_hash), count(*) FROM trials")
    assert rows[0] == (1, 4)
    _, rows = Store(db).select("SELECT packages FROM environments")
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

    from ngb.core.trial import provenance

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
    from ngb.core.records.types import TrialResult
    from ngb.sweeps.store.provenance import trial_columns

    artifact = {"name": "code", "sha256": "0" * 64, "local": str(code), "role": "folder"}
    result = TrialResult(key="k", spec={"model": "net", "source": {"artifacts": [artifact]}})
    columns = trial_columns(result)
    assert (columns["model_git_commit"], columns["model_git_dirty"]) == (head.strip(), True)
