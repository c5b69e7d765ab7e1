"""``ngb measure --profile`` (issue 34): after the timed trial, its profile pass is printed as
``ngb report ops`` prints it (one computation: ``ngb.sweeps.report.ops.point_report``), and
with ``--db`` stored keyed to the trial, where ``ngb report ops --db`` finds the same table. A
model's batches are tables of their own in ``ngb report ops``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from ngb.sweeps.cli import cli
from ngb.sweeps.report.catalog import build_report, render
from ngb.sweeps.store.database import Store

from tests.test_tui_ops import filled

FAST = ["--repetitions", "2", "--workers", "1", "--min-duration", "0.02", "--min-iters", "2",
        "--warmup-s", "0", "--warmup-iters", "0", "--no-verify"]  # fmt: skip


def class_table(text: str) -> list[str]:
    """The lines of the rendered class table, from its title (wrapped to the table's width) to
    the line before its first note."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "on localhost: time per" in line)
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("note:"))
    return lines[start:end]


@pytest.mark.slow  # one real trial and its pass: 25 s at load 7 on 2 cores
def test_measure_profile_prints_and_stores_what_report_ops_prints(tmp_path: Path) -> None:
    db = str(tmp_path / "r.duckdb")
    args = ["measure", "conv", "--width", "8", "-c", "identity", "--profile", "--db", db]
    out = CliRunner().invoke(cli, [*args, "--run", "m1", *FAST])
    assert out.exit_code == 0, out.output
    printed = class_table(out.stdout)
    assert "conv w8 b1 on localhost: time per" in printed[0]  # (the title wraps)
    rows = {line.split()[0] for line in printed[1:] if line.strip()}
    assert {"convolution", "kernels", "fused", "profiled", "timed"} <= rows
    assert "the ten costliest kernels" in out.stdout
    assert "stored: run m1" in out.stderr
    store = Store(db)
    _, keys = store.select("SELECT t.key, p.key, p.timed_ms FROM trials t, profiles p")
    ((trial_key, profile_key, timed_ms),) = keys
    assert trial_key == profile_key and timed_ms > 0  # keyed to the trial, timed ms beside it
    _, extra = store.select("SELECT extra FROM trials")
    assert '"records"' not in extra[0][0]  # the store holds the profile in its own tables
    report = CliRunner().invoke(cli, ["report", "ops", "--db", db])
    assert report.exit_code == 0, report.output
    assert class_table(report.stdout) == printed  # the same table, number for number


def test_measure_without_a_profiler_says_why_in_one_line(tmp_path: Path) -> None:
    out = CliRunner().invoke(
        cli, ["measure", "resnet18", "-c", "noop", "--profile", "-o", "compile_s=0", *FAST]
    )
    assert out.exit_code == 0, out.output  # the timed result stands
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("profile: none (")]
    assert "no profiler is wired" in line
    assert "by operator class" not in out.stdout
    db = str(tmp_path / "r.duckdb")  # with --json: one object that keeps what the pass left
    args = ["measure", "resnet18", "-c", "noop", "--profile", "--json", "--db", db]
    as_json = CliRunner().invoke(cli, [*args, "-o", "compile_s=0", *FAST])
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.stdout)
    assert "no profiler is wired" in data["extra"]["profile"]["error"]
    _, extra = Store(db).select("SELECT extra FROM trials")
    assert "no profiler is wired" in json.loads(extra[0][0])["profile_error"]  # stored as such


def test_report_ops_gives_each_batch_its_own_tables(tmp_path: Path) -> None:
    """b1 and b8 of one model: two table pairs, each with its own timed latency, never summed
    into one column."""
    store = Store(filled(tmp_path / "r.duckdb"))
    report = build_report("ops", store, run_id="ops-snap")
    titles = [t.title for t in report.tables]
    assert titles == [
        "conv w16 b1 on localhost: time per inference by operator class (ms, share)",
        "conv w16 b1 on localhost: the ten costliest kernels per compiler",
        "conv w16 b8 on localhost: time per inference by operator class (ms, share)",
        "conv w16 b8 on localhost: the ten costliest kernels per compiler",
    ]
    b1, b8 = report.tables[0], report.tables[2]
    assert b1.columns == b8.columns == ["class", "identity", "onnxruntime", "openvino"]
    timed = {t.title.split(":")[0]: dict((r[0], r[1:]) for r in t.rows) for t in (b1, b8)}
    # identity: 1600/s at b1 (0.625 ms a call), 2400/s at b8 (3.33 ms a call of 8)
    for label, ms in (("conv w16 b1 on localhost", 0.625), ("conv w16 b8 on localhost", 3.333)):
        cell = timed[label]["timed ms / call [95 %]"][0]
        assert float(str(cell).split()[0]) == pytest.approx(ms, rel=0.02), cell
    assert timed["conv w16 b8 on localhost"]["convolution"][0] == "3.36 (75 %)"  # 8 x 420 us
    assert "conv w16 b8 on localhost" in render(report, "csv")
