"""`ngb advise --max-drop` (issue 42): the accuracy gate on a seeded store whose accuracy records
are real ``accuracy_stats.compare`` output (per-sample bits, Wilson and McNemar intervals).

One model on one CPU box, 540 labelled samples (digits-test's size), eager fp32 right on 530.
Each row's correctness is eager's with a few samples flipped, so every drop is known exactly:

=========================  ========  =============================  ======================
row                        samples/s  flips (lost, gained)           drop judged (points)
=========================  ========  =============================  ======================
openvino bf16 prune-l1-0.9  500       no accuracy (its pass failed)  -- refused
openvino bf16 prune-ch-0.05 450       5, 1 vs openvino none          0.74 vs openvino none,
                                                                      1.11 vs eager: refused
onnxruntime prune-l1-0.9    400       20, 2 vs onnxruntime none      3.33: refused
torchscript none            350       no accuracy asked              -- refused
onnxruntime int8-cal        300       5, 1 vs onnxruntime none       0.74 [.., 1.10]: flagged
openvino bf16 none          200       3, 1 vs eager                  0.37 [.., 0.73]
onnxruntime none            150       none                           0
identity none               100       none                           0
=========================  ========  =============================  ======================
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from ngb.core.base.errors import ConfigError
from ngb.core.records.types import MeasureSettings, Stats, TrialResult, TrialSpec
from ngb.core.statistics import accuracy_stats
from ngb.sweeps.cli import cli
from ngb.sweeps.report import advise
from ngb.sweeps.report.data import ReportData
from ngb.sweeps.report.numbers import format_interval
from ngb.sweeps.store.database import Store

SAMPLES, CLASSES = 540, 10
LABELS = np.arange(SAMPLES) % CLASSES
EAGER = np.arange(SAMPLES) >= 10  # eager fp32 gets the first ten wrong
DEVICE, MODEL = "box", "resnet18"


def binomtest(k: int, n: int):  # noqa: ANN201 - scipy's result
    """scipy's test, imported when a test asks for it: ``scipy.stats`` is ~0.7 CPU-s, and every
    xdist worker imports each test module to collect it, not only the one that runs it."""
    from scipy.stats import binomtest as scipy_binomtest

    return scipy_binomtest(k, n)


def flipped(base: np.ndarray, lose: range | list[int], gain: list[int]) -> np.ndarray:
    out = base.copy()
    out[list(lose)] = False
    out[gain] = True
    return out


def scores(correct: np.ndarray) -> np.ndarray:
    """Class scores whose top-1 is the label where ``correct``, the next class elsewhere."""
    predicted = np.where(correct, LABELS, (LABELS + 1) % CLASSES)
    return np.eye(CLASSES)[predicted]


OV_NONE = flipped(EAGER, [10, 11, 12], [0])
OV_PRUNE_CH = flipped(OV_NONE, range(13, 18), [1])
ORT_PRUNE = flipped(EAGER, range(20, 40), [2, 3])
ORT_INT8 = flipped(EAGER, range(40, 45), [4])
FAILED = "the compiled object has no feed (one-shot runtime)"

#: (compiler, precision, optimisation) -> (samples/s, the compiled model's correctness or None
#: for no accuracy record, the eager it was compared with in its own pass)
ROWS: dict[tuple[str, str, str], tuple[float, np.ndarray | None, np.ndarray | None]] = {
    ("openvino", "bf16", "prune-l1-0.9"): (500.0, None, None),
    ("openvino", "bf16", "prune-ch-0.05"): (450.0, OV_PRUNE_CH, OV_PRUNE_CH),
    ("onnxruntime", "fp32", "prune-l1-0.9"): (400.0, ORT_PRUNE, ORT_PRUNE),
    ("torchscript", "fp32", "none"): (350.0, None, None),
    ("onnxruntime", "fp32", "int8-cal"): (300.0, ORT_INT8, ORT_INT8),
    ("openvino", "bf16", "none"): (200.0, OV_NONE, EAGER),
    ("onnxruntime", "fp32", "none"): (150.0, EAGER, EAGER),
    ("identity", "fp32", "none"): (100.0, EAGER, EAGER),
}


def result(compiler: str, precision: str, opt: str) -> TrialResult:
    tput, correct, eager = ROWS[(compiler, precision, opt)]
    spec = TrialSpec(model=MODEL, compiler=compiler, batch=8, optimisation=opt,
                     measure=MeasureSettings(repetitions=5))  # fmt: skip
    reps = [tput * (1 + n) for n in (-0.01, 0.01, -0.005, 0.005, 0.0)]
    extra: dict[str, object] = {}
    if correct is not None and eager is not None:
        record = dict(accuracy_stats.compare(scores(eager), scores(correct), LABELS))
        extra["accuracy"] = {"data": "digits-test", **record}
    elif opt != "none":
        extra["accuracy_error"] = FAILED
    return TrialResult(
        key=spec.key,
        spec=spec.to_dict(),
        started_at=1_700_000_000.0,
        finished_at=1_700_000_010.0,
        throughput=Stats(n=5, mean=tput, std=float(np.std(reps, ddof=1))),
        repetitions=[{"iters": 10, "elapsed_s": 1.0, "throughput": v} for v in reps],
        precision=precision,
        verdict="VALID",
        extra=extra,
    )


@pytest.fixture
def store(tmp_path: Path) -> Store:
    store = Store(tmp_path / "acc.duckdb")
    store.create_run("acc", "acc-fixture", 'baseline = "identity"\n', [DEVICE], len(ROWS))
    store.ingest_results("acc", DEVICE, [result(*k) for k in ROWS])
    return store


def answer(store: Store, bound: float | None) -> advise.Advice:
    limits = advise.Constraints(max_drop=bound)
    return advise.advise(ReportData(store), [MODEL], [DEVICE], limits)[0]


def test_no_bound_picks_the_fastest(store: Store) -> None:
    open_ = answer(store, None)
    assert open_.choice is not None and open_.choice.label == "openvino bf16 b8 prune-l1-0.9"
    assert not any("refused" in line for line in open_.lines)


def drop(b: int, c: int) -> str:
    """The drop as the gate prints it, computed here independently: (b - c) / n with the exact
    (Clopper-Pearson, scipy's) interval of b / (b + c) carried to the drop; printed as every
    report prints an interval (its bounds rounded outwards)."""
    m = b + c
    ci = binomtest(b, m).proportion_ci(0.95, method="exact")
    low, high = (100 * m * (2 * float(p) - 1) / SAMPLES for p in (ci.low, ci.high))
    return f"{format_interval(100 * (b - c) / SAMPLES, low, high)} points"


def top1(correct: np.ndarray) -> str:
    """Top-1 with Wilson's interval (scipy's), as the reports print it."""
    k = int(correct.sum())
    ci = binomtest(k, SAMPLES).proportion_ci(0.95, method="wilson")
    return (
        f"top-1 {format_interval(100 * k / SAMPLES, 100 * float(ci.low), 100 * float(ci.high))} %"
    )


def test_the_independent_numbers() -> None:
    """The helpers above, checked by hand: 5 lost and 1 gained of 540 is 4 / 540 = 0.74 points,
    Clopper-Pearson for 5 of 6 is [0.3588, 0.9958], so 6 (2 p - 1) / 540 gives [-0.314, 1.102],
    printed outwards; 20 and 2: [0.7084, 0.9888] -> [1.698, 3.983], one decimal at that width;
    526 right of 540 is 97.4 %, Wilson [95.70, 98.45]."""
    assert drop(5, 1) == "0.74 [-0.32, 1.11] points"
    assert drop(8, 2) == "1.11 [-0.21, 1.76] points"
    assert drop(20, 2) == "3.3 [1.6, 4.0] points"
    assert top1(ORT_INT8) == "top-1 97.4 [95.6, 98.5] %"


FLAG = "flagged: its 95 % interval reaches past the bound (more labelled samples would settle it)"


def test_one_point_refuses_the_faster_rows_and_says_why(store: Store) -> None:
    a = answer(store, 1.0)
    assert a.choice is not None and a.choice.label == "onnxruntime fp32 b8 int8-cal"
    refused = [line for line in a.lines if line.startswith("  refused: ")]
    # best-ranked first, one line each: the drop beyond the bound with its interval, or why
    # nothing could be judged. openvino's channel pruning loses 0.74 points against openvino's
    # none row (within 1) but 1.11 against eager fp32: refused on the total, which the paired
    # comparison alone would have passed
    assert refused == [
        "  refused: openvino bf16 b8 prune-l1-0.9 (500.0 [495.1, 505.0] samples/s): no accuracy "
        f"measured (its pass failed: {FAILED})",
        "  refused: openvino bf16 b8 prune-ch-0.05 (450.0 [445.6, 454.5] samples/s): accuracy "
        f"drop {drop(8, 2)} against eager fp32 > 1 point (540 samples; its 95 % interval "
        "straddles the bound)",
        "  refused: onnxruntime fp32 b8 prune-l1-0.9 (400.0 [396.0, 404.0] samples/s): accuracy "
        f"drop {drop(20, 2)} against onnxruntime fp32 b8 none (paired) and {drop(20, 2)} against "
        "eager fp32 > 1 point (540 samples)",
        "  refused: torchscript fp32 b8 (350.0 [346.5, 353.5] samples/s): no accuracy measured",
    ], "\n".join(a.lines)
    # the choice passes flagged: 0.74 points, but its interval reaches past 1
    assert a.lines[1] == (
        f"  accuracy: {top1(ORT_INT8)}; drop {drop(5, 1)} against onnxruntime fp32 b8 none "
        f"(paired), {drop(5, 1)} against eager fp32 (540 samples): within 1 point; {FLAG}"
    )


def test_the_judged_drops_are_the_paired_ones(store: Store) -> None:
    """The numbers the gate prints, checked against accuracy_stats.between on the bits."""
    rows = {
        (r["compiler"], r["optimisation"]): r for r in ReportData(store).trials_of(DEVICE, MODEL)
    }
    ov_none = rows[("openvino", "none")]["extra"]["accuracy"]
    ov_ch = rows[("openvino", "prune-ch-0.05")]["extra"]["accuracy"]
    paired = accuracy_stats.between(ov_none, ov_ch)
    assert paired is not None and paired["discordant"] == [5, 1]
    assert round(100 * paired["drop"], 2) == 0.74  # within 1 point against openvino none ...
    eager = {**ov_none, "correct": ov_none["eager_correct"]}
    total = accuracy_stats.between(eager, ov_ch)
    assert total is not None and total["discordant"] == [8, 2]
    assert round(100 * total["drop"], 2) == 1.11  # ... but beyond it against eager fp32
    # its own pass compared it with its own (pruned) eager: no drop there to see
    assert ov_ch["drop"] == 0.0


def test_half_a_point(store: Store) -> None:
    a = answer(store, 0.5)
    assert a.choice is not None and a.choice.label == "openvino bf16 b8"
    text = "\n".join(a.lines)
    assert (
        "  refused: onnxruntime fp32 b8 int8-cal (300.0 [297.0, 303.0] samples/s): accuracy drop "
        f"{drop(5, 1)} against onnxruntime fp32 b8 none (paired) and {drop(5, 1)} against eager "
        "fp32 > 0.5 points (540 samples; its 95 % interval straddles the bound)"
    ) in text
    # openvino's bf16 none row: 3 lost, 1 gained against eager fp32
    assert a.lines[1] == (
        f"  accuracy: {top1(OV_NONE)}; drop {drop(3, 1)} against eager fp32 (540 samples): "
        f"within 0.5 points; {FLAG}"
    )
    assert sum(line.startswith("  refused: ") for line in a.lines) == 5
    # bf16 beside its agreement with eager fp32: 4 of 540 answers differ (3 lost, 1 gained)
    ci = binomtest(SAMPLES - 4, SAMPLES).proportion_ci(0.95, method="wilson")
    agree = format_interval(100 * 536 / SAMPLES, 100 * float(ci.low), 100 * float(ci.high))
    assert agree == "99.26 [98.11, 99.72]"
    assert (
        a.lines[-1]
        == f"  changes precision: runs bf16, not fp32 (top-1 agreement with eager fp32 {agree} %)"
    )


def test_zero_leaves_only_the_rows_that_lose_nothing(store: Store) -> None:
    a = answer(store, 0.0)
    assert a.choice is not None and a.choice.label == "onnxruntime fp32 b8"
    assert [c.label for c in a.tied] == []
    assert a.lines[1] == (
        f"  accuracy: {top1(EAGER)}; drop 0.000 [0.000, 0.000] points against eager fp32 "
        "(540 samples): within 0 points"
    )
    assert a.lines[-1].startswith("  refused: openvino bf16 b8 (200.0 [198.0, 202.0] samples/s)")


def test_nothing_judged_nothing_passed(tmp_path: Path) -> None:
    """A store with no accuracy anywhere: under --max-drop nothing passes silently."""
    store = Store(tmp_path / "bare.duckdb")
    store.create_run("bare", "bare", "", [DEVICE], 2)
    bare = [result("torchscript", "fp32", "none"), result("openvino", "bf16", "prune-l1-0.9")]
    store.ingest_results("bare", DEVICE, bare)
    a = answer(store, 1.0)
    assert a.choice is None and a.nearest is not None
    assert a.lines[0] == (
        f"{MODEL} on {DEVICE}: no measured configuration meets the constraints; nearest: "
        "openvino bf16 b8 prune-l1-0.9 (500.0 [495.1, 505.0] samples/s), which misses no "
        f"accuracy measured (its pass failed: {FAILED})"
    )
    assert a.lines[-2:] == [
        "  refused: openvino bf16 b8 prune-l1-0.9 (500.0 [495.1, 505.0] samples/s): no accuracy "
        f"measured (its pass failed: {FAILED})",
        "  refused: torchscript fp32 b8 (350.0 [346.5, 353.5] samples/s): no accuracy measured",
    ]


def test_an_optimised_row_without_its_none_row_is_refused(tmp_path: Path) -> None:
    store = Store(tmp_path / "alone.duckdb")
    store.create_run("alone", "alone", "", [DEVICE], 1)
    store.ingest_results("alone", DEVICE, [result("onnxruntime", "fp32", "int8-cal")])
    a = answer(store, 1.0)
    assert a.choice is None
    assert a.lines[-1] == (
        "  refused: onnxruntime fp32 b8 int8-cal (300.0 [297.0, 303.0] samples/s): no accuracy "
        "measured: no onnxruntime none row with accuracy on the same samples to pair it with"
    )


@pytest.mark.parametrize(
    ("text", "points"), [("1%", 1.0), ("1", 1.0), ("0.5%", 0.5), (" 2 % ", 2.0), ("100", 100.0),
                         ("0", 0.0), (".5", 0.5), ("1e-1%", 0.1)],
)  # fmt: skip
def test_parse_drop(text: str, points: float) -> None:
    assert advise.parse_drop(text) == points


HOSTILE = ["nan", "NaN%", "inf", "-inf", "1e400", "-1", "-0.5%", "101", "100.5%", "", "%", "abc",
           "1%%", "1_0", "0x10", "+1", "1 2", "1\n%", "1\t"]  # fmt: skip


@pytest.mark.parametrize("text", HOSTILE)
def test_parse_drop_refuses(text: str) -> None:
    with pytest.raises(ConfigError, match="max-drop must be percentage points of top-1 accuracy"):
        advise.parse_drop(text)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, 100.01])
def test_constraints_refuse(value: float) -> None:
    with pytest.raises(ConfigError, match="max-drop must be percentage points"):
        advise.Constraints(max_drop=value)


def test_cli(store: Store) -> None:
    runner = CliRunner()
    db = ["--db", str(store.path)]
    out = runner.invoke(cli, ["advise", MODEL, "--device", DEVICE, "--max-drop", "1%", *db])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0] == "objective: throughput; constraints: top-1 drop <= 1 point"
    assert lines[1].startswith(f"{MODEL} on {DEVICE}: deploy onnxruntime fp32 b8 int8-cal -- ")
    assert sum(line.startswith("  refused: ") for line in lines) == 4
    same = runner.invoke(cli, ["advise", MODEL, "--device", DEVICE, "--max-drop", "1", *db])
    assert same.output == out.output  # 1 and 1% are both one point
    half = runner.invoke(cli, ["advise", MODEL, "--device", DEVICE, "--max-drop", "0.5%", *db])
    assert half.output.splitlines()[0].endswith("top-1 drop <= 0.5 points")
    for text in ["nan", "inf", "-1", "101", "1%%", "abc"]:
        bad = runner.invoke(cli, ["advise", MODEL, "--device", DEVICE, "--max-drop", text, *db])
        assert bad.exit_code != 0
        said = [line for line in bad.output.splitlines() if line.strip()]
        assert len(said) == 1 and "Traceback" not in bad.output, bad.output
        assert said[0].startswith(
            "error: Invalid value for '--max-drop': must be percentage points of top-1 accuracy "
            "from 0 to 100 (1, 1% or 0.5%), got "
        ), said
        assert repr(text) in said[0]
