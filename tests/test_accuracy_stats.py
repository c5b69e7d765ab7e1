"""ngb.core.statistics.accuracy_stats: Wilson and exact intervals against scipy, McNemar's exact
test, and the simulations issue 42 asks for (false drops between exchangeable models, a planted
2-point drop on 1,797 samples)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from ngb.core.base.errors import NgbError
from ngb.core.statistics import accuracy_stats as acc


@pytest.fixture
def scipy_stats():  # noqa: ANN201 - the module
    """scipy's stats, imported by the tests that compare with it (~0.7 CPU-s): every xdist
    worker imports this module to collect it."""
    return pytest.importorskip("scipy.stats")


N_DIGITS = 1797  # scikit-learn's load_digits


@pytest.mark.parametrize(("k", "n"), [(0, 10), (3, 10), (10, 10), (81, 263), (1750, 1797)])
def test_wilson_and_clopper_pearson_match_scipy(k: int, n: int, scipy_stats) -> None:
    ref = scipy_stats.binomtest(k, n).proportion_ci(0.95, method="wilson")
    assert acc.wilson(k, n) == pytest.approx((ref.low, ref.high), abs=1e-9)
    exact = scipy_stats.binomtest(k, n).proportion_ci(0.95, method="exact")
    assert acc.clopper_pearson(k, n) == pytest.approx((exact.low, exact.high), abs=1e-9)


def test_wilson_of_nothing_is_nan_and_bad_counts_refused() -> None:
    assert all(math.isnan(v) for v in acc.wilson(0, 0))
    with pytest.raises(ValueError):
        acc.wilson(11, 10)


@pytest.mark.parametrize(("b", "c"), [(0, 0), (0, 5), (7, 2), (36, 12), (400, 380), (3, 3)])
def test_mcnemar_exact_is_the_binomial_test(b: int, c: int, scipy_stats) -> None:
    want = 1.0 if b + c == 0 else scipy_stats.binomtest(b, b + c, 0.5).pvalue
    assert acc.mcnemar_p(b, c) == pytest.approx(want, rel=1e-9)
    assert acc.mcnemar_p(b, c) == acc.mcnemar_p(c, b)


def test_the_drop_interval_and_the_test_never_disagree() -> None:
    # the conditional exact interval excludes 0 exactly where the exact p <= 0.05
    pairs = [(b, m) for m in range(1, 31) for b in range(m + 1)]
    pairs += [(b, m) for m in (60, 121, 250) for b in range(m // 2, m // 2 + m // 4)]
    for b, m in pairs:  # every b of small m, and the boundary region of larger ones
        _, low, high = acc.paired_drop(b, m - b, 500)
        excludes = low > 0 or high < 0
        assert excludes == (acc.mcnemar_p(b, m - b) <= 0.05), (b, m - b)
        assert acc.verdict(b, m - b) == (
            acc.NS if not excludes else (acc.DROP if b > m - b else acc.GAIN)
        )


def test_compare_counts_top1_top5_agreement_and_nan_rows() -> None:
    labels = np.array([0, 1, 2, 3, 4, 5, 6, 7])
    eye = np.eye(8)[:, :8]
    base = eye.copy()  # eager: all right
    got = eye.copy()
    got[0] = np.roll(eye[0], 1)  # wrong top-1, label still in the top 5 (score 0 beats nothing)
    got[1, 0] = np.nan
    record = acc.compare(base, got, labels)
    assert record["samples"] == 8 and record["classes"] == 8
    assert record["eager_top1"] == 1.0 and record["top1"] == 6 / 8
    assert record["discordant"] == [2, 0]
    assert record["agreement"] == 6 / 8
    assert record["nan_outputs"] == 1 and "NaN outputs for 1 of 8" in record["note"]
    assert record["verdict"] == acc.NS  # 2 discordant pairs decide nothing
    assert record["top1_ci"][0] < record["top1"] < record["top1_ci"][1]
    assert "top5" in record
    small = acc.compare(base[:, :5][:5], got[:, :5][:5], labels[:5])
    assert "top5" not in small  # 5 classes: top-5 is always right, so not reported


def test_compare_refuses_nan_in_eager_and_mismatched_labels() -> None:
    base = np.eye(3)
    base[0, 0] = np.nan
    with pytest.raises(NgbError, match="eager model gave NaN outputs for 1 of 3"):
        acc.compare(base, np.eye(3), np.arange(3))
    with pytest.raises(NgbError, match="2 labels for 3 outputs"):
        acc.compare(np.eye(3), np.eye(3), np.arange(2))


def _twins(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Correctness of two models of the same accuracy (~97 %) on one set: most samples are easy
    (right under both), a tenth hard (each model right with p = 0.75, independently)."""
    hard = rng.random(n) < 0.1
    p = np.where(hard, 0.75, 0.995)
    return rng.random(n) < p, rng.random(n) < p, p


def _scores(
    correct: np.ndarray, labels: np.ndarray, classes: int, rng: np.random.Generator
) -> np.ndarray:
    """Scores whose top-1 is the label where ``correct``, another class elsewhere."""
    n = len(labels)
    wrong = (labels + rng.integers(1, classes, n)) % classes
    top = np.where(correct, labels, wrong)
    scores = rng.random((n, classes))
    scores[np.arange(n), top] = 2.0
    return scores


def test_simulation_identical_models_rarely_show_a_significant_drop() -> None:
    false_drops = 0
    for seed in range(100):
        rng = np.random.default_rng(seed)
        labels = rng.integers(0, 10, N_DIGITS)
        first, second, _ = _twins(rng, N_DIGITS)
        record = acc.compare(
            _scores(first, labels, 10, rng), _scores(second, labels, 10, rng), labels
        )
        false_drops += record["verdict"] == acc.DROP
    print(f"false significant drops: {false_drops} of 100")
    assert false_drops <= 5, false_drops


def test_simulation_exactly_identical_outputs_are_never_a_drop() -> None:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, N_DIGITS)
    scores = _scores(rng.random(N_DIGITS) < 0.97, labels, 10, rng)
    record = acc.compare(scores, scores.astype(np.float32), labels)
    assert record["verdict"] == acc.NS and record["p_value"] == 1.0
    assert record["agreement"] == 1.0 and record["drop"] == 0.0


def test_simulation_a_planted_two_point_drop_is_found() -> None:
    found = 0
    for seed in range(100):
        rng = np.random.default_rng(1000 + seed)
        labels = rng.integers(0, 10, N_DIGITS)
        base, compiled, _ = _twins(rng, N_DIGITS)
        # plant the drop: 2 points of the set (36 samples) the compiled model got right, now wrong
        right = np.flatnonzero(compiled)
        compiled[rng.choice(right, size=round(0.02 * N_DIGITS), replace=False)] = False
        record = acc.compare(
            _scores(base, labels, 10, rng), _scores(compiled, labels, 10, rng), labels
        )
        found += record["verdict"] == acc.DROP
    print(f"planted 2-point drops found: {found} of 100")
    assert found >= 80, found
