"""Reports of every point written a row at a time (issue 31), Slurm node names priced by their
inventory entry (issue 36's leftover), and ``ngb measure``'s up-front budget line.

On real DuckDB stores seeded through the store's own ingest (``tests/deploy_store.py``); the
Slurm rows are named by ``slurm_nodes.stamp`` and stored under ``writer.stored_as``, as a run
stores them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from ngb.core.records.types import MeasureSettings, TrialResult
from ngb.core.trial import budget
from ngb.devices import slurm_nodes
from ngb.devices.pricing import cost_per_million
from ngb.sweeps.cli import cli
from ngb.sweeps.report import render as render_module
from ngb.sweeps.report.catalog import build_report, render
from ngb.sweeps.report.data import Cell, ReportData
from ngb.sweeps.report.spool import RowSpool
from ngb.sweeps.run.writer import stored_as
from ngb.sweeps.store.database import Store
from ngb.sweeps.store.spill import spill

from tests import deploy_store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    deploy_store.write_inventory(tmp_path)
    return deploy_store.seed(tmp_path / "results.duckdb")


# ---------------------------------------------------------------- streamed reports


@pytest.mark.parametrize("name", ["energy", "breakeven"])
@pytest.mark.parametrize("fmt", ["table", "markdown", "csv"])
def test_a_streamed_report_prints_what_the_whole_one_prints(
    store: Store, name: str, fmt: str
) -> None:
    whole = build_report(name, store)
    streamed = build_report(name, store, streaming=True)
    table = streamed.tables[0]
    assert table.rows == [] and table.spool is not None and len(table.spool) > 10
    assert table.row_count() == whole.tables[0].row_count()
    assert render(streamed, fmt) == render(whole, fmt)


def test_streaming_is_chosen_by_the_number_of_points(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A few thousand points print faster and in less memory whole (0.89 GiB store of 4,000
    points: report energy 161 MiB whole, 215 MiB streamed); only many points stream."""
    from ngb.sweeps.report import catalog

    points = catalog.ReportData(store).point_count()
    assert points == len(build_report("energy", store).tables[0].rows) > 10
    assert not catalog.worth_streaming(["energy"], store)
    monkeypatch.setattr(catalog, "STREAM_ABOVE_POINTS", points - 1)
    assert catalog.worth_streaming(["energy"], store)
    assert catalog.worth_streaming(["bsr", "breakeven"], store)
    assert not catalog.worth_streaming(["bsr"], store)  # reads every trial whole anyway


def test_the_cli_streams_a_report_to_stdout_and_to_a_file(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ngb.sweeps.report import catalog

    monkeypatch.setattr(catalog, "STREAM_ABOVE_POINTS", 0)  # this small store streams too
    streamed = []
    real = catalog.ReportData.streamed
    monkeypatch.setattr(
        catalog.ReportData,
        "streamed",
        lambda self, *a, **k: streamed.append(1) or real(self, *a, **k),
    )
    runner = CliRunner()
    db = str(store.path)
    out = runner.invoke(cli, ["report", "energy", "--db", db, "--format", "csv"])
    assert out.exit_code == 0, out.output
    assert out.output == render(build_report("energy", store), "csv")
    assert streamed  # the CLI read it a batch at a time
    target = tmp_path / "e.md"
    out = runner.invoke(cli, ["report", "all", "--db", db, "--format", "markdown",
                              "-o", str(target)])  # fmt: skip
    assert out.exit_code == 0, out.output
    text = target.read_text()
    assert "# Energy and cost per inference" in text and "# Break-even against identity" in text
    out = runner.invoke(cli, ["report", "energy", "--db", db, "-o", db])
    assert out.exit_code != 0 and "results database being read" in out.output


def test_a_long_terminal_table_is_printed_plain_a_line_per_row(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(render_module, "LONG_TABLE", 5)
    report = build_report("energy", store, streaming=True)
    text = render(report, "table")
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("device "))
    assert set(lines[header + 1].replace(" ", "")) == {"-"}
    body = lines[header + 2 : header + 2 + report.tables[0].row_count()]
    assert all(line.startswith(("edge1 ", "edge2 ")) for line in body)
    # the cells are the ones every format prints: the first row's throughput [its interval]
    first = next(iter(report.tables[0].each_row()))
    assert render_module.fmt_cell(first[6]) in body[0]
    assert "note: source: all runs" in text and "│" not in text  # no rich box


def test_a_spool_reads_back_its_rows_as_often_as_asked() -> None:
    spool = RowSpool()
    rows: list[list[object]] = [[i, f"r{i}", Cell(float(i), note="n.s.")] for i in range(2500)]
    for row in rows:
        spool.append(row)
    assert len(spool) == 2500 and list(spool) == rows and list(spool) == rows
    spool.append(["late"])
    assert list(spool)[-1] == ["late"] and len(list(spool)) == 2501
    spool.close()
    assert not RowSpool() and list(RowSpool()) == []


def test_a_spill_holds_the_rows_and_reads_them_back_sorted(store: Store) -> None:
    with spill(store, "SELECT device, model, batch FROM trials") as rows:
        assert rows.count() == 28
        batches = list(rows.batches(["model", "batch", "device"], rows=5))
        flat = [(r["device"], r["model"], r["batch"]) for b in batches for r in b]
        assert len(flat) == 28 and flat == sorted(flat, key=lambda r: (r[1], r[2], r[0]))
        with pytest.raises(ValueError, match="no column"):
            list(rows.batches(["nope"]))
    with spill(store, "SELECT device, batch FROM trials WHERE false") as empty:
        assert empty.count() == 0 and empty.columns == ["device", "batch"]
        assert list(empty.batches(["batch"])) == []


def test_verdicts_are_counted_alike_in_sql_and_in_memory(tmp_path: Path) -> None:
    store = deploy_store.seed_cpu_repro(tmp_path / "r.duckdb")
    sql = sorted(ReportData(store).verdict_counts())
    data = ReportData(store)
    data.trials()
    assert sql == sorted(data.verdict_counts()) and sum(n for *_, n in sql) > 0


# ---------------------------------------------------------------- Slurm node names


SLURM_INVENTORY = """
[devices.gpu]
host = "localhost"
transport = "slurm"
workdir = "/s/ngb"
groups = ["gpus"]
price_per_hour = 2.0

[devices.gpu.slurm]
partition = "a100"
nodes = 2
"""


def _slurm_store(path: Path) -> tuple[Store, str]:
    """resnet18 at b1/b8 under identity and onnxruntime, run by slot gpu.2 on node gpu07 (which
    slot gpu.1 holds no claim on), stored as a run stores it: under ``gpu07@a100``."""
    from ngb.devices.paths import get_paths

    target = get_paths().inventory
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(SLURM_INVENTORY, encoding="utf-8")
    fact = slurm_nodes.parse_facts("41\tgpu07\ta100\tgpu07\t1600000000\tNO\t1\n")[0]
    store = Store(path)
    store.create_run("slurm", "slurm-fixture", 'baseline = "identity"\n', ["gpu.1", "gpu.2"], 4)
    names = set()
    for (model, compiler, batch), tput in deploy_store.THROUGHPUT.items():
        if model != "resnet18" or compiler not in ("identity", "onnxruntime"):
            continue
        plain = deploy_store.result("edge2", model, compiler, batch, tput)
        named = TrialResult.from_dict(slurm_nodes.stamp(plain.to_dict(), fact, "gpu.2", True))
        device = stored_as(named, "gpu.2")
        store.ingest_results("slurm", device, [named])
        names.add(device)
    assert names == {"gpu07@a100"}
    return store, "gpu07@a100"


def test_inventory_names_of_a_stored_result() -> None:
    stamp = {"slurm": {"job": 1}, "run_device": "gpu.2"}
    assert slurm_nodes.inventory_names("n1@a100", stamp) == ["n1@a100", "gpu.2", "gpu"]
    one = {"slurm": {"job": 1}, "run_device": "gpu"}
    assert slurm_nodes.inventory_names("n1@a100#gpu", one) == ["n1@a100#gpu", "gpu"]
    assert slurm_nodes.inventory_names("localhost", {"device": "CPU"}) == ["localhost"]
    assert slurm_nodes.inventory_names("x", {"run_device": "gpu.2"}) == ["x"]  # no stamp
    assert slurm_nodes.inventory_names("x", None) == ["x"]


@pytest.mark.parametrize("streaming", [False, True])
def test_a_result_stored_under_its_slurm_node_is_priced_by_its_entry(
    tmp_path: Path, streaming: bool
) -> None:
    store, node = _slurm_store(tmp_path / "s.duckdb")
    report = build_report("energy", store, streaming=streaming)
    table = report.tables[0]
    rows = [dict(zip(table.columns, r, strict=True)) for r in table.each_row()]
    assert len(rows) == 4 and {r["device"] for r in rows} == {node}
    for r in rows:
        tput = r["samples/s"]
        assert isinstance(tput, Cell) and tput.value is not None
        cost = r["cost / 1M"]
        assert isinstance(cost, Cell) and cost.value == pytest.approx(
            cost_per_million(2.0, tput.value).value, rel=1e-9
        )
    assert not any("no price_per_hour" in note for note in report.notes)


def test_advise_ranks_cost_on_a_slurm_node_and_answers_its_group(tmp_path: Path) -> None:
    store, node = _slurm_store(tmp_path / "s.duckdb")
    runner = CliRunner()
    db = str(store.path)
    out = runner.invoke(cli, ["advise", "resnet18", "--device", node, "--objective", "cost",
                              "--db", db])  # fmt: skip
    assert out.exit_code == 0, out.output
    assert f"resnet18 on {node}: deploy onnxruntime fp32 b8" in out.output
    assert "per 1M" in out.output and "cannot be ranked" not in out.output
    out = runner.invoke(cli, ["advise", "resnet18", "--group", "gpus", "--objective", "cost",
                              "--db", db])  # fmt: skip
    assert out.exit_code == 0, out.output
    assert f"resnet18 on {node}: deploy onnxruntime fp32 b8" in out.output
    assert "resnet18 on gpu:" not in out.output


def test_advise_over_many_models_reads_the_store_once_with_the_same_answers(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ngb.sweeps.report import advise

    data = ReportData(store)
    models, devices = advise.models_in_scope(data), ["edge1", "edge2", "nowhere"]
    limits = advise.Constraints(p99_ms=50.0, objective="cost")
    one_by_one = advise.render(advise.advise(data, models, devices, limits), limits, data)
    monkeypatch.setattr(advise, "ONE_BY_ONE", 1)
    queried: list[str] = []
    real = ReportData.trials_of

    def counted(self: ReportData, device: str, label: str) -> list:
        queried.append(label)
        return real(self, device, label)

    monkeypatch.setattr(ReportData, "trials_of", counted)
    data = ReportData(store)
    streamed = advise.render(advise.advise(data, models, devices, limits), limits, data)
    assert streamed == one_by_one and queried == []
    assert "nowhere: nothing measured in the store" in streamed


# ---------------------------------------------------------------- the budget line


def test_the_budget_line_says_what_is_decided_and_what_a_slow_call_may_cut() -> None:
    line = budget.upfront(MeasureSettings())
    assert line == (
        "budget: 7 s of warm-up and timed loops over 4 processes (up to 10 while the interval "
        "is wider than ci_target); a first call over 0.875 s plans for slow calls, which may cut "
        "this to 2 processes x 1 call"
    )
    settings = MeasureSettings()
    assert not budget.slow_enough(settings, 0.875) and budget.slow_enough(settings, 0.88)
    one = budget.upfront(MeasureSettings(workers=1, max_workers=1, max_measure_s=3.0))
    assert "over 1 process;" in one and "over 1.5 s" in one and "to 1 process x 2 calls" in one
