"""Confidence intervals and comparisons on hand-made samples."""

from __future__ import annotations

import math

import pytest
from ngb.core.base.errors import ConfigError
from ngb.core.statistics.significance import (
    A_FASTER,
    B_FASTER,
    INSUFFICIENT,
    NOT_SIGNIFICANT,
    compare,
    confidence_interval,
)


def test_t_interval_matches_hand_computation() -> None:
    # mean 12, sample std sqrt(10) = 3.1623, n 5, t(0.975, 4) = 2.776445
    ci = confidence_interval([8, 10, 12, 14, 16])
    assert ci.mean == pytest.approx(12)
    assert ci.std == pytest.approx(math.sqrt(10))
    half = 2.776445 * math.sqrt(10) / math.sqrt(5)
    assert (ci.low, ci.high) == pytest.approx((12 - half, 12 + half), rel=1e-5)
    assert ci.half_width == pytest.approx(half, rel=1e-5)
    wider = confidence_interval([8, 10, 12, 14, 16], level=0.99)
    assert wider.half_width > ci.half_width


def test_interval_edge_cases() -> None:
    one = confidence_interval([5.0])
    assert one.n == 1 and one.mean == 5.0 and math.isnan(one.low)
    empty = confidence_interval([])
    assert empty.n == 0 and math.isnan(empty.mean)
    assert confidence_interval([1.0, float("nan"), 3.0]).n == 2  # NaN dropped
    with pytest.raises(ConfigError, match="confidence level"):
        confidence_interval([1, 2], level=1.5)


def test_separated_samples_name_the_faster_side() -> None:
    slow = [100, 101, 99, 100.5, 99.5]
    fast = [120, 121, 119, 120.5, 119.5]
    result = compare(fast, slow)
    assert result.verdict == A_FASTER and result.significant and result.flag == ""
    assert result.p_value < 1e-6
    assert compare(slow, fast).verdict == B_FASTER
    assert compare(slow, fast, method="overlap").verdict == B_FASTER


def test_overlapping_samples_are_not_significant() -> None:
    a = [100, 110, 90, 105, 95]
    b = [102, 112, 92, 107, 97]  # shifted by 2, spread of ±10
    result = compare(a, b)
    assert result.verdict == NOT_SIGNIFICANT and not result.significant
    assert result.flag == "n.s."
    assert result.a.overlaps(result.b)
    assert compare(a, b, method="overlap").verdict == NOT_SIGNIFICANT


def test_degenerate_samples() -> None:
    assert compare([1.0], [2.0, 3.0]).verdict == INSUFFICIENT
    assert compare([1.0], [2.0, 3.0]).flag == "n<2"
    assert compare([5, 5, 5], [4, 4, 4]).verdict == A_FASTER  # noiseless but different
    assert compare([5, 5, 5], [5, 5, 5]).verdict == NOT_SIGNIFICANT
    with pytest.raises(ConfigError, match="unknown comparison method"):
        compare([1, 2], [3, 4], method="eyeball")
