"""The paper's metrics on hand-computed values (arithmetic written out next to each assertion)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from ngb.core.base.errors import ConfigError
from ngb.core.statistics import student_t
from ngb.core.trial import metrics

approx = pytest.approx


def test_rtr_ase():
    # T(1) = 100/s, T(8) = 400/s: RTR = 400/100 = 4; ASE = 4/8 = 0.5.
    assert metrics.rtr(400.0, 100.0) == 4.0
    assert metrics.ase(400.0, 100.0, 8) == 0.5
    # Perfect scaling: T(4) = 4*T(1) -> ASE 1.
    assert metrics.ase(200.0, 50.0, 4) == 1.0
    # Batch 1: RTR = ASE = 1 by definition.
    assert metrics.rtr(73.0, 73.0) == metrics.ase(73.0, 73.0, 1) == 1.0


def test_bsr_and_speedup():
    # compiler ASE 0.5, identity ASE 0.25 -> BSR = 0.5/0.25 = 2 (scales twice as well as eager).
    assert metrics.bsr(0.5, 0.25) == 2.0
    # T_c = 300/s, T_identity = 120/s -> speed-up 2.5.
    assert metrics.speedup(300.0, 120.0) == 2.5
    assert metrics.speedup(60.0, 120.0) == 0.5  # a slowdown is < 1


def test_depth_slope_least_squares():
    # Exactly linear: s = 2.0 - 0.1 * d  ->  slope -0.1.
    assert metrics.depth_slope([1, 2, 4, 8], [1.9, 1.8, 1.6, 1.2]) == approx(-0.1)
    # Not linear: d = 1, 2, 3; s = 1, 3, 2.  mean d = 2, mean s = 2;
    # sum (d-2)(s-2) = (-1)(-1) + 0*1 + 1*0 = 1;  sum (d-2)^2 = 2  ->  slope 0.5.
    assert metrics.depth_slope([1, 2, 3], [1.0, 3.0, 2.0]) == approx(0.5)
    # Agrees with numpy's least-squares fit, order of points irrelevant.
    d, s = [8, 1, 4, 2, 16], [1.1, 2.0, 1.4, 1.9, 0.7]
    assert metrics.depth_slope(d, s) == approx(np.polyfit(d, s, 1)[0])


def test_retention():
    # speed-up 2.0 at one block, 1.5 at the deepest (8) -> retention 1.5/2.0 = 0.75.
    assert metrics.retention([1, 2, 8], [2.0, 1.8, 1.5]) == 0.75
    # Unordered input: deepest is 16 (s=3.0), depth 1 has s=1.2 -> 3.0/1.2 = 2.5.
    assert metrics.retention([4, 16, 1], [2.0, 3.0, 1.2]) == approx(2.5)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: metrics.rtr(0.0, 10.0), "> 0"),
        (lambda: metrics.rtr(10.0, 0), "> 0"),
        (lambda: metrics.ase(10.0, -1.0, 2), "> 0"),
        (lambda: metrics.ase(10.0, 5.0, 0), "batch size"),
        (lambda: metrics.speedup(math.nan, 1.0), "finite"),
        (lambda: metrics.speedup(1.0, math.inf), "finite"),
        (lambda: metrics.bsr("1", 1.0), "number"),
        (lambda: metrics.depth_slope([1, 2, 3], [1.0, 2.0]), "differ in length"),
        (lambda: metrics.depth_slope([1], [1.0]), "at least 2"),
        (lambda: metrics.depth_slope([2, 2], [1.0, 1.1]), "distinct"),
        (lambda: metrics.depth_slope([0, 2], [1.0, 1.1]), "depth"),
        (lambda: metrics.retention([2, 4], [1.0, 1.1]), "depth-1"),
    ],
)
def test_bad_input_is_a_config_error(call, message):
    with pytest.raises(ConfigError, match=message):
        call()


def test_tables():
    # resnet-like numbers: identity 100/180/300 at b = 1/2/8; compiler 150/300/600.
    identity = {1: 100.0, 2: 180.0, 8: 300.0}
    comp = {8: 600.0, 1: 150.0, 2: 300.0}
    # RTR: 150/150 = 1, 300/150 = 2, 600/150 = 4 (keys come back sorted).
    assert metrics.rtr_table(comp) == {1: 1.0, 2: 2.0, 8: 4.0}
    assert list(metrics.rtr_table(comp)) == [1, 2, 8]
    # ASE: 1/1, 2/2 = 1, 4/8 = 0.5.  identity ASE: 1, 1.8/2 = 0.9, 3/8 = 0.375.
    assert metrics.ase_table(comp) == {1: 1.0, 2: 1.0, 8: 0.5}
    assert metrics.ase_table(identity) == approx({1: 1.0, 2: 0.9, 8: 0.375})
    # BSR: 1/1 = 1, 1/0.9 = 1.111..., 0.5/0.375 = 1.333...
    assert metrics.bsr_table(comp, identity) == approx({1: 1.0, 2: 1 / 0.9, 8: 0.5 / 0.375})
    # speed-up: 150/100 = 1.5, 300/180 = 1.666..., 600/300 = 2.
    assert metrics.speedup_table(comp, identity) == approx({1: 1.5, 2: 300 / 180, 8: 2.0})


def test_batch_metrics():
    per = {
        "identity": {1: 100.0, 2: 180.0, 8: 300.0},
        "tvm-ms": {1: 150.0, 2: 300.0, 8: 600.0, 16: 960.0},
    }
    out = metrics.batch_metrics(per)
    row = out["tvm-ms"][8]
    assert row == approx(
        {"throughput": 600.0, "rtr": 4.0, "ase": 0.5, "bsr": 0.5 / 0.375, "speedup": 2.0}
    )
    # identity is its own baseline: BSR 1 and speed-up 1 everywhere.
    assert all(r["bsr"] == 1.0 and r["speedup"] == 1.0 for r in out["identity"].values())
    # Batch 16 has no identity run: RTR = 960/150 = 6.4, ASE = 6.4/16 = 0.4, no BSR/speed-up.
    assert out["tvm-ms"][16] == approx(
        {"throughput": 960.0, "rtr": 6.4, "ase": 0.4, "bsr": None, "speedup": None}
    )
    # Without an identity baseline at all, RTR/ASE are still computed.
    alone = metrics.batch_metrics({"openvino": {1: 10.0, 4: 30.0}})
    assert alone["openvino"][4] == approx(
        {"throughput": 30.0, "rtr": 3.0, "ase": 0.75, "bsr": None, "speedup": None}
    )


def test_missing_batch_one_names_the_compiler():
    with pytest.raises(
        ConfigError, match=r"'?onnxruntime'? has no batch-1 throughput \(batches: 2, 8\)"
    ):
        metrics.batch_metrics({"identity": {1: 1.0, 2: 2.0}, "onnxruntime": {2: 5.0, 8: 9.0}})
    with pytest.raises(ConfigError, match="at batch 1 must be a finite number > 0"):
        metrics.rtr_table({1: 0.0, 2: 5.0})


def test_depth_metrics():
    # identity 1000/520/140 samples/s at depth 1/2/8; compiler 1500/780/196.
    # speed-ups: 1.5, 1.5, 1.4.  mean d = 11/3, mean s = 4.4/3.
    # slope = sum (d - 11/3)(s - 4.4/3) / sum (d - 11/3)^2
    #       = [(-8/3)(0.1/3) + (-5/3)(0.1/3) + (13/3)(-0.2/3)] / [(64 + 25 + 169)/9]
    #       = (-0.8 - 0.5 - 2.6)/9 / (258/9) = -3.9/258
    identity = {1: 1000.0, 2: 520.0, 8: 140.0}
    comp = {1: 1500.0, 2: 780.0, 8: 196.0}
    out = metrics.depth_metrics(comp, identity)
    assert out["speedups"] == approx({1: 1.5, 2: 1.5, 8: 1.4})
    assert out["slope"] == approx(-3.9 / 258)
    assert out["retention"] == approx(1.4 / 1.5)
    # No depth-1 run: slope still computed over shared depths, retention None.
    out = metrics.depth_metrics({2: 780.0, 8: 196.0}, identity)
    assert out["retention"] is None and out["slope"] == approx((1.4 - 1.5) / 6)


# ---- intervals from each result's stored interval (ngb.core.statistics.intervals)
# ------------------------


def measured(values: list[float], key: str | None = None) -> Any:
    """A result as the store keeps it: mean, 95 % Student-t half-width, n - 1 df."""
    import statistics

    from ngb.core.statistics import intervals

    n = len(values)
    half = (
        student_t.t_two_sided(0.95, n - 1) * statistics.stdev(values) / math.sqrt(n)
        if n >= 2
        else None
    )
    return intervals.Mean(statistics.fmean(values), half, n - 1, key)


def test_speedup_interval_from_stored_intervals() -> None:
    from ngb.core.statistics import intervals

    narrow = intervals.speedup(
        measured([200.0, 202.0, 198.0, 201.0, 199.0]), measured([100.0, 101.0, 99.0, 100.0])
    )
    assert narrow.value == pytest.approx(2.0) and narrow.known and narrow.excludes(1.0)
    assert narrow.low < 2.0 < narrow.high and narrow.half_width < 0.05
    same = intervals.speedup(measured([100.0, 130.0, 70.0]), measured([100.0, 130.0, 70.0]))
    assert same.value == pytest.approx(1.0) and not same.excludes(1.0) and not same.exact
    itself = measured([100.0, 130.0, 70.0], key="a")
    own = intervals.speedup(itself, itself)  # the baseline over itself: exactly 1, no interval
    assert own.value == 1.0 and own.exact and own.low == own.high == 1.0
    single = intervals.speedup(measured([100.0]), measured([50.0, 51.0]))
    assert single.value == pytest.approx(100 / 50.5) and not single.known
    assert not single.excludes(1.0)  # unknown is never "significant"


def test_a_ratio_interval_is_the_log_scale_delta_method() -> None:
    from ngb.core.statistics import intervals

    a, b = intervals.Mean(200.0, 20.0, 4), intervals.Mean(100.0, 5.0, 9)
    est = intervals.speedup(a, b)
    va = (20.0 / student_t.t_two_sided(0.95, 4) / 200.0) ** 2
    vb = (5.0 / student_t.t_two_sided(0.95, 9) / 100.0) ** 2
    df = (va + vb) ** 2 / (va**2 / 4 + vb**2 / 9)  # Welch-Satterthwaite
    q = student_t.t_two_sided(0.95, df) * math.sqrt(va + vb)
    assert est.df == pytest.approx(df) and est.high == pytest.approx(2.0 * math.exp(q))
    assert est.low == pytest.approx(2.0 * math.exp(-q))  # the log interval itself, not widened


@pytest.mark.parametrize(("cv", "k"), [(0.02, 4), (0.05, 10), (0.3, 4), (0.3, 3)])
def test_speedup_interval_covers_the_true_ratio(cv: float, k: int) -> None:
    """Simulated results (k process means each, as ``timing.merge`` stores them): the printed
    interval of T_c / T_base covers the true ratio at least ~95 % of the time, and is not
    wildly conservative (at most ~99.5 %)."""
    import numpy as np
    from ngb.core.statistics import intervals

    rng = np.random.default_rng(int(cv * 1000) + k)
    true_a, true_b, runs, hits = 150.0, 100.0, 4000, 0
    for _ in range(runs):
        xa = true_a * (1 + cv * rng.standard_normal(k))
        xb = true_b * (1 + cv * rng.standard_normal(k))
        if xa.min() <= 0 or xb.min() <= 0:
            continue
        est = intervals.speedup(measured(list(xa)), measured(list(xb)))
        hits += est.low <= true_a / true_b <= est.high
    coverage = hits / runs
    assert 0.94 <= coverage <= 0.995, coverage


def test_bsr_rtr_ase_intervals_match_the_point_metrics() -> None:
    from ngb.core.statistics import intervals

    c8, c1 = measured([176.0, 177.0, 175.0], "c8"), measured([20.0, 20.1, 19.9], "c1")
    i8, i1 = measured([56.0, 56.5, 55.5], "i8"), measured([10.0, 10.01, 9.99], "i1")
    assert intervals.rtr(c8, c1).value == pytest.approx(metrics.rtr(176, 20))
    assert intervals.ase(c8, c1, 8).value == pytest.approx(metrics.ase(176, 20, 8))
    bsr = intervals.bsr(c8, c1, i8, i1)
    assert bsr.value == pytest.approx(metrics.bsr(1.1, 0.7)) and bsr.excludes(1.0)
    # at batch 1 the trial is its own reference: RTR, ASE and BSR are exactly 1
    assert intervals.rtr(c1, c1).exact and intervals.bsr(c1, c1, i1, i1).value == 1.0
    assert intervals.bsr(i8, i1, i8, i1).exact  # the baseline's own BSR


def test_depth_slope_interval_says_when_a_slope_is_noise() -> None:
    from ngb.core.statistics import intervals

    depths = [1, 2, 4, 6]
    identity = [measured([100.0, 101.0, 99.0, 100.0], f"i{d}") for d in depths]
    rising = [measured([100.0 * (1 + 0.1 * d) + e for e in (-1.0, 0.0, 1.0, 0.5)])
              for d in depths]  # fmt: skip
    trend, kept = intervals.depth_trend(depths, rising, identity)
    assert trend.value == pytest.approx(metrics.depth_slope(depths, [1.1, 1.2, 1.4, 1.6]), rel=1e-2)
    assert trend.excludes(0.0) and kept is not None and kept.excludes(1.0)
    # A flat speed-up buried in ±20 % noise: a slope of this size is not a finding.
    noisy = [measured([150.0 + e for e in (-30.0, 25.0, -10.0, 20.0, 0.0)]) for _ in depths]
    flat, _ = intervals.depth_trend(depths, noisy, identity)
    assert flat.known and not flat.excludes(0.0)
    no_one, none_kept = intervals.depth_trend([2, 4], rising[:2], identity[:2])
    assert none_kept is None and no_one.known


def test_mean_of_means_interval() -> None:
    from ngb.core.statistics import intervals

    est = intervals.mean_of_means([measured([10.0, 10.2, 9.8]), measured([20.0, 20.4, 19.6])])
    assert est.value == pytest.approx(15.0) and est.low < 15.0 < est.high
    assert intervals.mean_of_means([measured([5.0])]).known is False
