"""Prices in the inventory, cost per million inferences, `ngb report energy` and `breakeven`
(issue 23), on a seeded DuckDB store."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from click.testing import CliRunner
from ngb.core.base.errors import ConfigError
from ngb.devices.inventory import inventory_from_dict, load_inventory
from ngb.devices.pricing import cost_per_million, load_prices, price_of
from ngb.sweeps.cli import cli
from ngb.sweeps.report.catalog import build_report, render
from ngb.sweeps.report.data import Cell
from ngb.sweeps.store.database import Store

from tests import deploy_store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    deploy_store.write_inventory(tmp_path)
    return deploy_store.seed(tmp_path / "results.duckdb")


def _table(report) -> list[dict]:
    t = report.tables[0]
    return [dict(zip(t.columns, r, strict=True)) for r in t.rows]


# ---------------------------------------------------------------- prices


def test_device_price_wins_then_the_most_specific_group() -> None:
    inv = inventory_from_dict(
        {
            "devices": {
                "a": {"host": "a", "groups": ["edge"], "price_per_hour": 1.5},
                "b": {"host": "b", "groups": ["jetsons"]},
                "c": {"host": "c"},
            },
            "groups": {
                "edge": {"children": ["jetsons"], "price_per_hour": 0.5},
                "jetsons": {"members": [], "price_per_hour": 0.25},
            },
        }
    )
    assert price_of(inv, "a").per_hour == 1.5 and price_of(inv, "a").source == "device"
    b = price_of(inv, "b")
    assert b is not None and b.per_hour == 0.25 and b.source == "group jetsons"
    assert price_of(inv, "c") is None


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"devices": {"a": {"host": "a", "price_per_hour": "cheap"}}},
         "device 'a': price_per_hour must be a number, got 'cheap'"),
        ({"devices": {"a": {"host": "a", "price_per_hour": -1}}},
         "device 'a': price_per_hour must be >= 0"),
        ({"devices": {"a": {"host": "a"}}, "groups": {"g": {"members": ["a"],
                                                            "price_per_hour": True}}},
         "group 'g': price_per_hour must be a number"),
        ({"devices": {"a": {"host": "a", "groups": ["x", "y"]}},
          "groups": {"x": {"price_per_hour": 1.0}, "y": {"price_per_hour": 2.0}}},
         "device 'a': its groups give different prices per hour (x = 1.0, y = 2.0)"),
    ],
)  # fmt: skip
def test_bad_prices_are_one_line_errors(doc: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        inventory_from_dict(doc)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_cost_per_million_with_the_throughput_interval() -> None:
    # 3.6/h = 0.001/s; 1000/s -> 1e-6 per inference; throughput in [900, 1100]
    est = cost_per_million(3.6, 1000.0, 900.0, 1100.0)
    assert est.value == pytest.approx(1.0)
    # cost falls as throughput rises: the bounds swap, each the cost at the other bound
    assert est.low == pytest.approx(1 / 1.1) and est.high == pytest.approx(1 / 0.9)
    assert math.isnan(cost_per_million(1.0, 0.0).value)
    assert cost_per_million(1.0, 100.0).half_width is None


def test_prices_come_from_the_operator_inventory(store: Store) -> None:
    prices = load_prices(load_inventory())
    assert prices["edge1"].per_hour == 0.36 and prices["edge2"].source == "group edge"
    assert "localhost" not in prices


# ---------------------------------------------------------------- energy report


def test_energy_report_numbers_and_no_meter_note(store: Store) -> None:
    rep = build_report("energy", store)
    rows = {(r["device"], r["model"], r["compiler"], r["batch"]): r for r in _table(rep)}
    ov = rows[("edge1", "resnet18", "openvino", 8)]
    assert ov["precision"] == "bf16" and ov["meter"] == "rapl"
    assert ov["mJ/sample"].value == pytest.approx(30.0 / 400 * 1000)
    # stored 75 ± 0.75 mJ: printed on the log scale, 75.0 [74.3, 75.8] (positive, same digits)
    mj = 30.0 / 400 * 1000
    assert ov["mJ/sample"].low == pytest.approx(mj * math.exp(-0.01))
    assert ov["mJ/sample"].high == pytest.approx(mj * math.exp(0.01))
    assert ov["mJ above idle"] == pytest.approx(20.0 / 400 * 1000)
    assert ov["samples/J"] == pytest.approx(400 / 30.0)
    assert ov["W"] == 30.0 and ov["idle W"] == 10.0
    assert ov["cost / 1M"].value == pytest.approx(0.36 / 3600 / 400 * 1e6)
    # the cost's interval is the throughput's, carried over: its bounds swap
    t = ov["samples/s"]
    assert ov["cost / 1M"].low == pytest.approx(0.36 / 3600 / t.high * 1e6)
    assert ov["cost / 1M"].high == pytest.approx(0.36 / 3600 / t.low * 1e6)
    edge2 = rows[("edge2", "resnet18", "openvino", 8)]
    assert edge2["mJ/sample"] == Cell(None) and edge2["meter"] == "-"
    assert edge2["cost / 1M"].value == pytest.approx(0.18 / 3600 / 200 * 1e6)  # group's price
    assert any(n.startswith("edge2: 14 trial(s) without energy: no power meter: RAPL not")
               for n in rep.notes)  # fmt: skip


# ---------------------------------------------------------------- break-even


def test_breakeven_against_the_baseline(store: Store) -> None:
    rep = build_report("breakeven", store, device="edge1")
    rows = {(r["model"], r["compiler"], r["batch"]): r for r in _table(rep)}
    ort = rows[("resnet18", "onnxruntime", 8)]
    extra = 3.0 + 4.0 - 0.1
    n = extra / (1 / 200 - 1 / 398)
    assert ort["extra one-time s"] == pytest.approx(extra)
    even = ort["break-even (inferences)"]
    assert even.value == pytest.approx(n, rel=1e-2)
    assert even.low < n < even.high  # both throughputs' intervals (compile from one run)
    assert ort["compile runs"] == "1 / 1" and "compile time from one run" in rep.tables[0].title
    assert ort["at full load (h)"] == pytest.approx(n / 398 / 3600)
    # torchscript on convnext: 52 vs 50 with +-1 % noise is significant; deit3 onnxruntime b1
    # has no baseline at b1: no row
    assert ("deit3_small", "onnxruntime", 1) not in rows
    assert rows[("resnet18", "onnxruntime", 1)]["break-even (inferences)"] != "never"


def test_breakeven_never_when_not_significantly_faster(tmp_path: Path) -> None:
    deploy_store.write_inventory(tmp_path)
    store = Store(tmp_path / "r.duckdb")
    store.create_run("n", "x", "", ["edge1"], 3)
    store.ingest_results(
        "n",
        "edge1",
        [
            deploy_store.result("edge1", "resnet18", "identity", 8, 200.0),
            deploy_store.result("edge1", "resnet18", "torchscript", 8, 200.5),  # within noise
            deploy_store.result("edge1", "resnet18", "onnxruntime", 8, 150.0),  # slower
        ],
    )
    rows = {r["compiler"]: r for r in _table(build_report("breakeven", store))}
    assert rows["torchscript"]["break-even (inferences)"] == "never"
    assert rows["torchscript"]["speed-up"].note == "n.s."
    assert rows["onnxruntime"]["break-even (inferences)"] == "never"


@pytest.mark.parametrize("fmt", ["markdown", "latex"])
def test_cost_and_breakeven_render_in_markdown_and_latex(store: Store, fmt: str) -> None:
    text = render(build_report("energy", store), fmt) + render(
        build_report("breakeven", store), fmt
    )
    assert "cost / 1M" in text and "mJ/sample" in text and "break-even (inferences)" in text


def test_cli_report_html_and_breakeven(store: Store, tmp_path: Path) -> None:
    runner = CliRunner()
    db = str(store.path)
    out = runner.invoke(cli, ["report", "breakeven", "--db", db, "--format", "markdown"])
    assert out.exit_code == 0, out.output
    assert "| edge1" in out.output and "at full load (h)" in out.output
    page = tmp_path / "r.html"
    out = runner.invoke(cli, ["report", "--db", db, "--format", "html", "--no-figures",
                              "-o", str(page)])  # fmt: skip
    assert out.exit_code == 0, out.output
    html = page.read_text()
    assert "cost / 1M" in html and "Break-even against identity" in html
