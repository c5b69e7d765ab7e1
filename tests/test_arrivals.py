"""The serving schedule (issue 43): seeded, made in advance, exponential gaps (KS), the count fixed
so the offered rate is the target exactly, burstiness as the gamma shape."""

from __future__ import annotations

import numpy as np
import pytest
from ngb.core.base.errors import ConfigError
from ngb.core.records import arrivals


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another() -> None:
    a, b = arrivals.schedule(50, 10, seed=3), arrivals.schedule(50, 10, seed=3)
    assert np.array_equal(a.times_s, b.times_s)
    assert not np.array_equal(a.times_s, arrivals.schedule(50, 10, seed=4).times_s)


def test_the_count_is_fixed_and_the_last_arrival_ends_the_run() -> None:
    plan = arrivals.schedule(100, 60, seed=1)
    assert plan.count == 6000
    assert plan.times_s[-1] == pytest.approx(60.0)
    assert plan.offered_qps == pytest.approx(100.0)
    assert np.all(np.diff(plan.times_s) > 0) and plan.times_s[0] > 0


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_gaps_pass_a_ks_test_against_the_exponential(seed: int) -> None:
    """10,000 arrivals at 250 QPS: the gaps are exponential with mean 1/250 s."""
    from scipy import stats

    plan = arrivals.schedule(250, 40, seed=seed)
    gaps = np.diff(np.concatenate(([0.0], plan.times_s)))
    assert len(gaps) == 10_000
    result = stats.kstest(gaps, "expon", args=(0, 1 / 250))
    assert result.pvalue > 0.01


def test_burstiness_is_the_gamma_shape_of_the_gaps() -> None:
    """Coefficient of variation 1/sqrt(shape): 1 for Poisson, 2 at shape 0.25, 0.5 at 4."""
    for shape, cv in ((1.0, 1.0), (0.25, 2.0), (4.0, 0.5)):
        gaps = np.diff(arrivals.schedule(200, 100, seed=7, burstiness=shape).times_s)
        assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.06)


@pytest.mark.parametrize(
    ("qps", "duration", "burstiness", "words"),
    [(0, 10, 1.0, "qps"), (10, float("nan"), 1.0, "duration"), (10, 10, -1, "burstiness"),
     (0.01, 10, 1.0, "not one request")],
)  # fmt: skip
def test_bad_rates_are_one_line(qps: float, duration: float, burstiness: float, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        arrivals.schedule(qps, duration, burstiness=burstiness)
