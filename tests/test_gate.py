"""The three-way regression gate of ``ngb compare --fail-above`` (issue 45): pass, fail or
undecidable, each point with its reason, one summary line on stderr on every exit, and the exit
status per outcome and ``--on-undecided``. Real stores written through the store's own ingest
(``tests/history_store.py``); the gate on real measured runs is in ``tests/test_history.py``.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from ngb.sweeps.cli import cli
from ngb.sweeps.report import compare as compare_runs
from ngb.sweeps.report import gate
from ngb.sweeps.report.points import differences

from tests.history_store import seed_runs


def _compare(db, *args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, ["compare", "h-00", "h-01", "--db", str(db), *args])
    return r.exit_code, r.stdout, r.stderr


def test_a_clear_slowdown_fails_and_an_unchanged_run_passes(tmp_path):
    slow = tmp_path / "slow.duckdb"
    seed_runs(slow, [1000.0, 950.0], rel_half=0.005)
    code, out, err = _compare(slow, "--fail-above", "2%")
    assert code == 2, out + err
    assert "slower FAIL" in out
    assert err.count("\n") == 1 and err.startswith(
        "gate fail at 2 %: 1 fail, 0 undecidable, 0 pass"
    )
    assert "slower beyond the threshold, 95 % sure" in err and "+5.3 %" in err

    same = tmp_path / "same.duckdb"
    seed_runs(same, [1000.0, 998.0], rel_half=0.005)
    code, out, err = _compare(same, "--fail-above", "2%")
    assert code == 0, out + err
    assert err == "gate pass at 2 %: 0 fail, 0 undecidable, 1 pass\n"

    code, out, err = _compare(same)  # no gate: still one line saying what was found
    assert code == 0 and err.count("\n") == 1
    assert "compare: 1 shared point(s): 0 slower, 0 faster, 1 not significant" in err


def test_a_collapsed_invalid_run_is_undecidable_and_fails_by_default(tmp_path):
    """97.2 [95.6, 98.8] against a run that collapsed under load, 30 [3.3, 350] INVALID: the old
    gate passed it ('n.s.'); now it cannot be judged, and a CI job is told so."""
    db = tmp_path / "collapsed.duckdb"
    collapsed = {"verdict": "INVALID", "verdict_reason": "disturbed: worker 0: other processes "
                 "used 91% of the CPU", "disturbed": True, "ci_half_width": 160.0}  # fmt: skip
    seed_runs(db, [97.2, 30.0], rel_half=0.0165, changed=[{}, collapsed])
    code, out, err = _compare(db, "--fail-above", "2%")
    assert code == 3, out + err
    assert "UNDECIDABLE" in out
    assert err.count("\n") == 1
    assert err.startswith("gate undecidable at 2 %: 0 fail, 1 undecidable, 0 pass")
    assert "B's result is INVALID (disturbed: worker 0" in err

    code, _, err = _compare(db, "--fail-above", "2%", "--on-undecided", "warn")
    assert code == 0 and "gate undecidable" in err and "(--on-undecided warn: exit 0)" in err
    code, _, err = _compare(db, "--fail-above", "2%", "--on-undecided", "pass")
    assert code == 0 and "gate undecidable" in err


def test_an_interval_wider_than_the_threshold_cannot_decide(tmp_path):
    """B / A about 0.94 [0.86, 1.03] at 2 %: neither a pass nor a failure can be told."""
    db = tmp_path / "wide.duckdb"
    seed_runs(db, [1000.0, 940.0], changed=[{}, {"ci_half_width": 940.0 * 0.045}])
    code, _, err = _compare(db, "--fail-above", "2%")
    assert code == 3
    assert "interval wider than the threshold" in err
    code, _, err = _compare(db, "--fail-above", "20%")  # a wide enough threshold decides it
    assert code == 0 and err.startswith("gate pass")


@pytest.mark.parametrize(
    ("error", "kind", "code", "said"),
    [
        ("a fresh worker interpreter did not start within 300 s", "error", 3,
         "infrastructure failure in B: a fresh worker interpreter did not start within 300 s"),
        ("onnxruntime: unsupported op GridSample", "unsupported", 2,
         "failed in B (unsupported): onnxruntime: unsupported op GridSample"),
    ],
)  # fmt: skip
def test_a_failed_point_is_named_with_its_reason(tmp_path, error, kind, code, said):
    """A harness fault is not a slowdown: it cannot be judged; a model that broke fails."""
    db = tmp_path / "failed.duckdb"
    seed_runs(db, [1000.0, 1000.0], changed=[{}, {"status": "failed", "error": error,
                                                   "error_kind": kind}])  # fmt: skip
    got, out, err = _compare(db, "--fail-above", "5%")
    assert got == code, out + err
    assert err.count("\n") == 1 and said in err


def test_judge_rules_and_what_is_never_a_cause():
    """The rules on hand-built rows, and settings that cannot move a timed number."""
    a = {
        "run_id": "a",
        "device": "d",
        "key": "k1",
        "model": "m",
        "compiler": "c",
        "batch": 1,
        "status": "ok",
        "throughput_mean": 100.0,
        "throughput_ci_half": 0.5,
        "repetitions": 5,
        "measure": {"profile": True, "repetitions": 5},
        "compiler_options": {"dump_dir": "/x"},
    }
    b = {
        **a,
        "run_id": "b",
        "key": "k2",
        "throughput_mean": 98.5,
        "measure": {"profile": False, "repetitions": 5},
        "compiler_options": {"dump_dir": "/y"},
    }
    comparison = compare_runs.compare("a", [a], "b", [b])
    assert comparison.run_changes == []  # the profile pass and an output folder are no cause
    assert differences(a, {**b, "measure": {"profile": False, "repetitions": 7}}) != []
    [point] = comparison.points
    near = gate.judge(point, 0.01)  # 1.5 % slower, interval +-0.7 %: close to the threshold
    assert near.outcome == gate.PASS and near.reason.startswith("possible slowdown")
    assert gate.judge(point, 0.05).reason.startswith("within the threshold")
    assert gate.gate(comparison, 0.05).outcome == gate.PASS
    assert gate.infrastructure_failure({"error_kind": "ingest", "error": "disk"})
    assert not gate.infrastructure_failure({"error_kind": "crash", "error": "SIGSEGV"})
