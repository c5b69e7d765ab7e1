"""Fidelity without labels (issue 42): SQNR in dB and top-1 agreement of the verify batch."""

from __future__ import annotations

import math

import numpy as np
import pytest
from ngb.core.statistics.accuracy_stats import fidelity


def test_equal_outputs_are_exact_and_noise_sets_the_sqnr() -> None:
    ref = np.random.default_rng(0).normal(size=(8, 10))
    assert fidelity(ref, ref.copy()) == {
        "exact": True, "sqnr_db": None, "top1_agreement": 1.0, "rows": 8
    }  # fmt: skip
    noisy = ref + 0.01 * np.random.default_rng(1).normal(size=ref.shape)
    got = fidelity(ref, noisy)
    expected = 10 * math.log10(np.sum(ref**2) / np.sum((noisy - ref) ** 2))
    assert got["sqnr_db"] == pytest.approx(expected, abs=0.01) and 35 < expected < 45
    assert got["exact"] is False


def test_a_flipped_class_and_nan_outputs_count_against_agreement() -> None:
    ref = np.eye(4) * 5.0
    flipped = ref.copy()
    flipped[0] = [0, 9, 0, 0]
    assert fidelity(ref, flipped)["top1_agreement"] == 0.75
    nan = ref * np.nan
    got = fidelity(ref, nan)
    assert got["sqnr_db"] is None and got["exact"] is False and got["top1_agreement"] == 0.0


def test_outputs_that_are_not_class_scores_get_the_sqnr_only() -> None:
    ref = np.linspace(1, 2, 12).reshape(2, 2, 3)
    got = fidelity(ref, ref * 1.001)
    assert "top1_agreement" not in got and got["sqnr_db"] == pytest.approx(60.0, abs=0.01)


def test_ngb_measure_prints_it_beside_the_worst_error() -> None:
    from ngb.sweeps.cli.measure import _fidelity_text

    assert _fidelity_text({"exact": False, "sqnr_db": 49.51, "top1_agreement": 0.875, "rows": 8}) \
        == "; SQNR 49.5 dB, top-1 agreement 7/8"  # fmt: skip
    assert _fidelity_text({"exact": True, "sqnr_db": None}) == "; outputs equal"
    assert _fidelity_text(None) == "" and _fidelity_text({"exact": False, "sqnr_db": None}) == ""
