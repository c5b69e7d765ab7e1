"""The DLAS algorithm axis outside the core (issue 48): a sweep's ``algorithms`` axis, the store's
``algorithm`` column (migration 14, ingest, older rows read as ``default``), every earlier report
reading only the compiler's own convolution, and ``ngb report algorithms`` on a store of
hand-made results: the time tables, speed-up and % of expected, the refusals' footnotes and the
observations."""

from __future__ import annotations

import math
from pathlib import Path

import duckdb
import pytest
from ngb.core.base.errors import ConfigError
from ngb.core.records.types import MeasureSettings, Stats, TrialResult, TrialSpec
from ngb.core.trial.measure import run_trial
from ngb.sweeps.report import derived
from ngb.sweeps.report.catalog import build_report, list_reports, render
from ngb.sweeps.report.data import Cell, Report, ReportData, Table
from ngb.sweeps.report.points import index_by_point, label, point_of
from ngb.sweeps.spec.sweep import loads_sweep
from ngb.sweeps.store import schema
from ngb.sweeps.store.database import Store

MODEL = "digits-resnet"
BATCH = 8
MEASURE = MeasureSettings(repetitions=5)
TVM_REASON = "TVM 0.27's Relax importer takes no sparse weights"


def result(
    compiler: str,
    throughput: float,
    *,
    algorithm: str = "default",
    optimisation: str = "none",
    extra: dict | None = None,
    finished: float = 1_700_000_010.0,
) -> TrialResult:
    """One successful trial: its mean throughput, a 95 % half-width of 1 % on 4 df."""
    spec = TrialSpec(model=MODEL, compiler=compiler, batch=BATCH, optimisation=optimisation,
                     algorithm=algorithm, measure=MEASURE)  # fmt: skip
    reps = [throughput * (1 + d) for d in (-0.01, 0.01, -0.005, 0.005, 0.0)]
    return TrialResult(
        key=spec.key, spec=spec.to_dict(), host="h", started_at=finished - 10,
        finished_at=finished, throughput=Stats(n=5, mean=throughput, std=0.01 * throughput),
        repetitions=[{"iters": 10, "elapsed_s": 1.0, "throughput": v} for v in reps],
        ci_half_width=0.01 * throughput, precision="fp32",
        extra={"measure": {"df": 4.0}, **(extra or {})},
    )  # fmt: skip


def refused(compiler: str, algorithm: str, reason: str) -> TrialResult:
    spec = TrialSpec(model=MODEL, compiler=compiler, batch=BATCH, algorithm=algorithm,
                     measure=MEASURE)  # fmt: skip
    return TrialResult.failed(spec, reason, "unsupported", host="h")


PRUNED = "elbow-prune-l1"
#: the pruned model: 10x fewer non-zeros; the unpruned one holds 40,000 bytes dense
PRUNING = {"optimisation": {"expected_speedup": 10.0, "bytes_before": 40_000}}
SPARSE_FACTS = {"algorithm": {"name": "sparse-csr", "kind": "sparse-csr", "dense_bytes": 40_000,
                              "stored_bytes": 12_000, "runs": "CSR"}}  # fmt: skip


def dev1() -> list[TrialResult]:
    return [
        result("identity", 1000.0),  # 8 ms
        result("identity", 800.0, algorithm="gemm"),  # 10 ms
        result("identity", 1100.0, optimisation=PRUNED, extra=PRUNING),
        result(
            "identity",
            1500.0,
            optimisation=PRUNED,
            algorithm="sparse-csr",
            extra={**PRUNING, **SPARSE_FACTS},
        ),  # fmt: skip
        result("tvm", 500.0),
        result("tvm", 700.0, algorithm="gemm"),  # untuned: gemm is best
        result("tvm-ms", 2000.0),  # tuned: its own convolution is best
        result("tvm-ms", 1500.0, algorithm="gemm"),
        refused(
            "tvm-ms", "sparse-csr", f"algorithm sparse-csr is unsupported with tvm-ms: {TVM_REASON}"
        ),  # fmt: skip
        refused(
            "onnxruntime",
            "direct",
            "algorithm direct is unsupported with onnxruntime: "
            "it picks its own convolution kernel per shape",
        ),  # fmt: skip
        result("onnxruntime", 1250.0),
    ]


def dev2() -> list[TrialResult]:
    return [result("identity", 1000.0), result("identity", 1250.0, algorithm="gemm")]


def make_store(path: Path, *devices: tuple[str, list[TrialResult]]) -> Store:
    store = Store(path)
    store.create_run("r1", "algorithms", "", [d for d, _ in devices], 0)
    for device, results in devices:
        assert store.ingest_results("r1", device, results) == len(results)
    return store


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    path = tmp_path_factory.mktemp("algorithms") / "results.duckdb"
    return make_store(path, ("dev1", dev1()), ("dev2", dev2()))


@pytest.fixture(scope="module")
def report(store: Store) -> Report:
    return build_report("algorithms", store)


def table(report: Report, title: str) -> Table:
    return next(t for t in report.tables if t.title == title)


def rows_by(t: Table, column: str = "compiler") -> dict[object, dict[str, object]]:
    i = t.columns.index(column)
    return {r[i]: dict(zip(t.columns, r, strict=True)) for r in t.rows}


def bounds(value: object) -> tuple[float | None, float | None, float | None]:
    assert isinstance(value, Cell), value
    return value.value, value.low, value.high


# ---------------------------------------------------------------- the sweep axis


SWEEP = """
[[matrix]]
models = ["conv"]
widths = [8]
optimisations = ["none", "prune-l1-0.5"]
algorithms = ["default", " gemm", "gemm", "sparse-bsr-8"]
compilers = ["identity", "noop"]
batches = [1]
"""


def test_a_sweep_expands_the_algorithm_axis_beside_the_optimisation() -> None:
    sweep = loads_sweep(SWEEP)
    trials = sweep.trials()
    # " gemm" is gemm (as TrialSpec names it), counted once
    assert sweep.matrices[0].algorithms == ("default", "gemm", "sparse-bsr-8")
    assert len(trials) == 2 * 3 * 2
    order = [(t.optimisation, t.algorithm, t.compiler) for t in trials]
    assert order[:6] == [
        ("none", "default", "identity"), ("none", "default", "noop"),
        ("none", "gemm", "identity"), ("none", "gemm", "noop"),
        ("none", "sparse-bsr-8", "identity"), ("none", "sparse-bsr-8", "noop"),
    ]  # fmt: skip
    assert trials[2].label == "conv8x1/identity+gemm/b1"
    # the compiler's own convolution keeps the key it had before the axis
    plain = loads_sweep(SWEEP.replace('algorithms = ["default", " gemm", "gemm", "sparse-bsr-8"]\n',
                                      ""))  # fmt: skip
    assert [t.key for t in plain.trials()] == [t.key for t in trials if t.algorithm == "default"]
    # written back, read again: the same trials
    again = loads_sweep(sweep.to_toml())
    assert [t.key for t in again.trials()] == [t.key for t in trials]
    assert 'algorithms = ["default", "gemm", "sparse-bsr-8"]' in sweep.to_toml()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[3]", "matrix[0].algorithms: expected str values, got 3"),
        ('[""]', "matrix[0].algorithms: values must be non-empty strings"),
        ("[nan]", "matrix[0].algorithms: expected str values, got nan"),
        ("[inf]", "matrix[0].algorithms: expected str values, got inf"),
        ("true", "matrix[0].algorithms: expected str values, got True"),
        ("[]", "matrix[0].algorithms is empty"),
        ('["sparse-bsr-0"]', "algorithm 'sparse-bsr-0': block side must be 2-64, got 0"),
        ('["sparse-bsr-999"]', "algorithm 'sparse-bsr-999': block side must be 2-64, got 999"),
        ('["gemm", "winograd"]', "matrix[0].algorithms: unknown algorithm 'winograd'; valid:"),
    ],
)
def test_bad_algorithms_are_refused_in_one_line(value: str, message: str) -> None:
    text = SWEEP.replace('["default", " gemm", "gemm", "sparse-bsr-8"]', value)
    with pytest.raises(ConfigError) as info:
        loads_sweep(text, source="s.toml")
    said = str(info.value)
    assert message in said and said.startswith("s.toml: matrix[0].algorithms") and "\n" not in said


def test_a_refused_pair_is_a_failed_unsupported_trial_with_its_reason(tmp_path: Path) -> None:
    """noop runs no model, so it refuses gemm: the sweep keeps the trial, the trial fails as
    "unsupported" with noop's reason, and the store and the report keep that reason."""
    text = SWEEP.replace('optimisations = ["none", "prune-l1-0.5"]\n', "").replace(
        'compilers = ["identity", "noop"]', 'compilers = ["noop"]'
    )
    trials = {t.algorithm: t for t in loads_sweep(text).trials()}
    assert set(trials) == {"default", "gemm", "sparse-bsr-8"}
    outcome = run_trial(trials["gemm"])
    assert outcome.status == "failed" and outcome.error_kind == "unsupported"
    assert outcome.error == "algorithm gemm is unsupported with noop: it runs no model"
    store = Store(tmp_path / "r.duckdb")
    store.create_run("r1", "s", "", ["dev1"], 1)
    assert store.ingest_results("r1", "dev1", [outcome]) == 1
    _, rows = store.select("SELECT algorithm, status, error_kind, error FROM results")
    assert rows == [("gemm", "failed", "unsupported", outcome.error)]
    cells = build_report("algorithms", store).tables[0]
    assert cells.rows == [["noop", "— [1]", None]]
    assert f"[1] noop gemm: {outcome.error} (unsupported)" in cells.notes


# ---------------------------------------------------------------- the store


def test_ingest_writes_the_algorithm_and_labels_it(store: Store) -> None:
    _, rows = store.select(
        "SELECT device, compiler, optimisation, algorithm, label, status FROM trials "
        "WHERE compiler IN ('identity', 'tvm-ms') ORDER BY ALL"
    )
    assert ("dev1", "identity", PRUNED, "sparse-csr",
            f"{MODEL}/identity+sparse-csr/{PRUNED}/b8", "ok") in rows  # fmt: skip
    assert ("dev1", "identity", "none", "default", f"{MODEL}/identity/b8", "ok") in rows
    assert ("dev1", "tvm-ms", "none", "sparse-csr", f"{MODEL}/tvm-ms+sparse-csr/b8",
            "failed") in rows  # fmt: skip
    columns, _ = store.select("SELECT * FROM results LIMIT 0")
    assert columns[columns.index("optimisation") + 1] == "algorithm"


#: the schema version before the axis (13)
BEFORE = [d for d, _ in schema.MIGRATIONS].index(schema.ALGORITHM_MIGRATION)


def older_file(path: Path) -> None:
    """A store of the schema before the axis holding one trial of the compiler's own choice."""
    with duckdb.connect(str(path)) as conn:
        conn.execute(schema.VERSION_TABLE)
        for version, (description, statements) in enumerate(schema.MIGRATIONS[:BEFORE], start=1):
            for statement in statements:
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version VALUES (?, ?, now())", [version, description])
        old = result("identity", 900.0, finished=1_600_000_000.0)
        conn.execute(
            "INSERT INTO trials (run_id, device, key, label, model, compiler, batch, depth, "
            "optimisation, target, status, throughput_mean, throughput_ci_half, repetitions, "
            "precision, finished_at, extra) VALUES ('old', 'dev1', ?, ?, ?, 'identity', 8, 1, "
            "'none', 'cpu', 'ok', 900.0, 9.0, 5, 'fp32', to_timestamp(1600000000)::TIMESTAMP, "
            '\'{"measure": {"df": 4.0}}\')',
            [old.key, f"{MODEL}/identity/b8", MODEL],
        )
        conn.execute("INSERT INTO runs (run_id, sweep_name) VALUES ('old', 'before')")


def test_an_older_store_gains_the_column_and_reads_its_rows_as_default(tmp_path: Path) -> None:
    path = tmp_path / "v13.duckdb"
    older_file(path)
    assert BEFORE == 13
    store = Store(path)
    assert store.ingest_results("new", "dev1", [result("identity", 800.0, algorithm="gemm"),
                                                result("identity", 1000.0)]) == 2  # fmt: skip
    assert store.schema_version() == schema.latest_version()
    _, rows = store.select("SELECT run_id, algorithm FROM results ORDER BY run_id, algorithm")
    assert rows == [("new", "default"), ("new", "gemm"), ("old", "default")]
    _, raw = store.select("SELECT run_id, algorithm FROM trials ORDER BY run_id, algorithm")
    assert raw == [("new", "default"), ("new", "gemm"), ("old", None)]  # read, not rewritten
    # the old row and the new default one are one point: the newest wins, gemm is another
    data = ReportData(store)
    assert [(t["run_id"], t["algorithm"]) for t in data.trials()] == [("new", "default")]
    every = data.with_every_algorithm()
    assert sorted((t["run_id"], t["algorithm"]) for t in every.trials()) == [
        ("new", "default"), ("new", "gemm")]  # fmt: skip
    assert data.point_count() == 1 and every.point_count() == 2


def test_compare_and_history_keep_algorithms_apart_and_old_rows_default(store: Store) -> None:
    rows = store.trials(status="ok", device="dev2")
    points = index_by_point(rows, frozenset())
    assert len(points) == 2
    names = sorted(label(p) for p in points)
    assert names == [f"dev2 {MODEL}/identity+gemm/b8", f"dev2 {MODEL}/identity/b8"]
    old = dict(next(r for r in rows if r["algorithm"] == "default"), algorithm=None)
    assert point_of(old, frozenset()) == point_of(
        next(r for r in rows if r["algorithm"] == "default"), frozenset()
    )


# ---------------------------------------------------------------- every other report


@pytest.mark.parametrize("name", [n for n, _ in list_reports() if n != "algorithms"])
def test_no_other_report_reads_another_algorithm(name: str, tmp_path: Path) -> None:
    """The same store with and without the algorithm trials: every other report reads the
    same (the compiler's own convolution only)."""
    own = [r for r in dev1() if TrialSpec.from_dict(r.spec).algorithm == "default"]
    with_axis = make_store(tmp_path / "a.duckdb", ("dev1", dev1()))
    without = make_store(tmp_path / "b.duckdb", ("dev1", own))
    for fmt in ("markdown", "csv"):
        assert render(build_report(name, with_axis), fmt) == render(
            build_report(name, without), fmt
        )


def test_the_html_report_keeps_the_other_reports_to_the_own_convolution(store: Store) -> None:
    """Reports built one after another on one ReportData (``ngb report all``, the HTML report):
    the algorithms report reads every algorithm in a copy, the next still the own one only."""
    data = ReportData(store, device="dev1")
    from ngb.sweeps.report.algorithms import algorithms

    before = sorted(str(t["algorithm"]) for t in data.trials())
    built = algorithms(data)
    assert any("gemm" in t.columns for t in built.tables)
    assert sorted(str(t["algorithm"]) for t in data.trials()) == before == ["default"] * 5
    assert not data.all_algorithms


# ---------------------------------------------------------------- ngb report algorithms


TIME = f"DLAS algorithms: {MODEL} on dev1, none, batch 8: time per batch (ms)"


def test_time_table_has_a_column_per_algorithm_and_a_row_per_compiler(report: Report) -> None:
    t = table(report, TIME)
    assert t.columns == ["compiler", "default", "direct", "gemm", "sparse-csr", "fastest"]
    rows = rows_by(t)
    assert list(rows) == ["identity", "onnxruntime", "tvm (untuned)", "tvm-ms (tuned)"]
    eager = rows["identity"]
    value, low, high = bounds(eager["default"])
    assert value == pytest.approx(8.0)  # 1000 * 8 / 1000
    assert (low, high) == pytest.approx((8.0 * math.exp(-0.01), 8.0 * math.exp(0.01)))
    assert bounds(eager["gemm"])[0] == pytest.approx(10.0)
    assert eager["default"].bold and not eager["gemm"].bold
    assert eager["fastest"] == "default" and eager["direct"] is None and eager["sparse-csr"] is None
    assert rows["tvm (untuned)"]["fastest"] == "gemm" and rows["tvm (untuned)"]["gemm"].bold
    # the table's fastest: tvm-ms default at 4 ms, marked; onnxruntime's one cell is not bold
    assert rows["tvm-ms (tuned)"]["default"].note == "fastest of all"
    assert bounds(rows["tvm-ms (tuned)"]["default"])[0] == pytest.approx(4.0)
    assert not rows["onnxruntime"]["default"].bold and rows["onnxruntime"]["fastest"] is None
    # refusals: a dash and the stored reason as the footnote
    assert (
        rows["onnxruntime"]["direct"] == "— [1]" and rows["tvm-ms (tuned)"]["sparse-csr"] == "— [2]"
    )
    assert ("[1] onnxruntime direct: algorithm direct is unsupported with onnxruntime: it picks "
            "its own convolution kernel per shape (unsupported)") in t.notes  # fmt: skip
    assert any(n.startswith("[2] tvm-ms sparse-csr:") and TVM_REASON in n for n in t.notes)


def test_time_cells_are_the_derived_module_s_one_computation(store: Store, report: Report) -> None:
    trial = next(r for r in ReportData(store, device="dev1").trials() if r["compiler"] == "tvm")
    mine = derived.batch_time_ms(trial, 8)
    shown = rows_by(table(report, TIME))["tvm (untuned)"]["default"]
    assert (shown.value, shown.low, shown.high) == (mine.value, mine.low, mine.high)
    tput = derived.throughput(trial)
    assert mine.low == pytest.approx(8000 / tput.high) and mine.high == pytest.approx(
        8000 / tput.low
    )


def test_overlapping_best_two_are_said_not_significant(tmp_path: Path) -> None:
    pair = [result("identity", 1000.0), result("identity", 1002.0, algorithm="gemm")]
    close = make_store(tmp_path / "c.duckdb", ("dev1", pair))
    t = build_report("algorithms", close).tables[0]
    assert rows_by(t)["identity"]["fastest"] == "gemm (n.s. vs default)"


def test_speedup_and_percent_of_expected(report: Report) -> None:
    t = table(report, f"DLAS algorithms: {MODEL} on dev1: speed-up and % of expected")
    i = [t.columns.index(c) for c in ("optimisation", "compiler", "algorithm")]
    rows = {tuple(r[j] for j in i): dict(zip(t.columns, r, strict=True)) for r in t.rows}
    base = rows[("none", "identity", "default")]
    assert base["speed-up"].value == 1.0 and "baseline" in base["speed-up"].note
    assert base["expected"] == 1.0 and base["% of expected"].value == pytest.approx(100.0)
    gemm = rows[("none", "identity", "gemm")]
    assert gemm["speed-up"].value == pytest.approx(0.8) and gemm["expected (bytes)"] is None
    dense = rows[(PRUNED, "identity", "default")]
    assert dense["speed-up"].value == pytest.approx(1.1) and dense["expected"] == 10.0
    assert bounds(dense["% of expected"])[0] == pytest.approx(11.0)
    sparse = rows[(PRUNED, "identity", "sparse-csr")]
    ratio = sparse["speed-up"]
    assert ratio.value == pytest.approx(1.5)
    assert sparse["expected (bytes)"] == pytest.approx(40_000 / 12_000)
    value, low, high = bounds(sparse["% of expected (bytes)"])
    assert value == pytest.approx(45.0)
    assert (low, high) == pytest.approx((ratio.low * 30, ratio.high * 30))  # 100 / (10 / 3)
    assert bounds(sparse["% of expected"])[0] == pytest.approx(15.0)


def test_observations_are_judged_with_their_intervals(report: Report) -> None:
    t = table(report, "DLAS algorithms: observations")
    said = {r[0]: (r[1], r[2]) for r in t.rows if r[0]}
    per_device = said["(a) the fastest algorithm differs per device"]
    assert per_device[0] == "holds in 1 of 1 (1 with every device's choice significant)"
    assert "dev1: default" in per_device[1] and "dev2: gemm" in per_device[1]
    tuning = said["(b) tuning changes which algorithm is best"]
    assert tuning[0] == "holds in 1 of 1 (1 with both choices significant)"
    assert "untuned gemm" in tuning[1] and "tuned default" in tuning[1]
    pruning = said["(c) weight pruning rarely reaches its expected speed-up"]
    assert pruning[0] == (
        "holds: 2 of 2 pruned trials fall short of the speed-up expected by non-zeros (interval "
        "below 100 %); by bytes stored, 1 of 1 sparse trials"
    )
    sparse = said["(d) tuned sparse models are faster than dense"]
    assert sparse[0].startswith("tuned: cannot be judged here, tvm-ms refused every sparse trial")
    assert "eager at the elbow: sparse faster in 1, slower in 0, n.s. in 0" in sparse[0]
    evidence = [r[2] for r in t.rows]
    assert any(str(e).startswith("tvm-ms refused: ") and TVM_REASON in str(e) for e in evidence)


def test_one_device_and_no_tvm_cannot_be_judged(tmp_path: Path) -> None:
    alone = make_store(tmp_path / "one.duckdb", ("dev1", [result("identity", 1000.0)]))
    built = build_report("algorithms", alone)
    said = {r[0]: (r[1], r[2]) for r in built.tables[-1].rows if r[0]}
    assert said["(a) the fastest algorithm differs per device"] == (
        "cannot be judged here",
        "needs two or more devices; the trials in scope ran on dev1",
    )
    assert said["(b) tuning changes which algorithm is best"][0] == "cannot be judged here"
    assert said["(c) weight pruning rarely reaches its expected speed-up"][0] == (
        "cannot be judged here"
    )
    sparse = said["(d) tuned sparse models are faster than dense"]
    assert sparse[0].startswith("tuned: cannot be judged here, no tvm-ms sparse trial")
    assert sparse[1].startswith("tvm-ms declares sparse unsupported: TVM 0.27")
    assert any("no trial ran another algorithm" in n for n in built.notes)


def test_markdown_bolds_and_latex_typesets_the_fastest(report: Report) -> None:
    markdown = render(report, "markdown")
    row = "| identity | **8.000 [7.920, 8.081]** | - | 10.00 [9.90, 10.11] | - | default |"
    assert row in markdown
    assert "| tvm-ms (tuned) | **4.000 [3.960, 4.041] fastest of all** | - |" in markdown
    latex = render(report, "latex")
    # a wide table stacks the interval under its value: the value is bold either way
    assert r"\textbf{8.000}\\{\footnotesize [7.920, 8.081]}" in latex and "--- [1]" in latex
    csv_text = render(report, "csv")
    assert "default 95% lo" in csv_text


def test_the_invalid_note_counts_every_algorithm_the_report_read(tmp_path: Path) -> None:
    """The note under ``ngb report algorithms`` counts the trials it printed, gemm and sparse
    included; the other reports still count the compiler's own convolution only."""
    judged = [result("identity", 1000.0), result("identity", 800.0, algorithm="gemm")]
    for trial in judged:
        trial.verdict, trial.verdict_reason = "INVALID", "CI wider than the target"
    store = make_store(tmp_path / "judged.duckdb", ("dev1", judged))
    notes = " ".join(build_report("algorithms", store).notes)
    assert "2 of 2 trials are INVALID" in notes
    assert "1 of 1 trials are INVALID" in " ".join(build_report("bsr", store).notes)
