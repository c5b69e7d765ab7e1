"""Student's t quantile without scipy (``ngb.core.statistics.student_t``): what every trial computes
with.

It must agree with scipy's ``stdtrit`` (which the workstation's reports use) wherever a trial
or a report can ask: integer and fractional (Welch) degrees of freedom, both tails, the 95 %
interval's 0.975 and the percentiles' tails. scipy's own quantile is off by up to ~4e-11 (its
probability read back through ``stdtr``), so the bound is 1e-10; the survival function itself
matches scipy's to 1e-11.
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
from ngb.core.statistics import student_t

from tests.cli_helpers import scaled


@pytest.fixture
def scipy_special():  # noqa: ANN201 - the module
    """scipy's special functions, imported by the tests that compare with them: every xdist
    worker imports this module to collect it."""
    return pytest.importorskip("scipy.special")


PS = (0.001, 0.025, 0.3, 0.51, 0.6, 0.9, 0.95, 0.975, 0.99, 0.995, 0.9995, 1 - 1e-6, 1 - 1e-9)
DFS = (0.5, 0.9, 1, 1.3, 2, 2.5, 3, 3.7, 5, 9.3, 10, 29, 99.5, 300, 1999, 2001, 1e4, 1e6)


@pytest.mark.parametrize("df", DFS)
def test_quantile_matches_scipy(df: float, scipy_special) -> None:
    for p in PS:
        exact = float(scipy_special.stdtrit(df, p))
        assert student_t.ppf(p, df) == pytest.approx(exact, rel=1e-10), (p, df)


@pytest.mark.parametrize("df", (1.5, 4, 30, 500))
def test_survival_function_matches_scipy(df: float, scipy_special) -> None:
    for t in (0.0, 0.1, 1.0, 2.0, 3.3, 10.0, 100.0):
        assert student_t.sf(t, df) == pytest.approx(float(scipy_special.stdtr(df, -t)), rel=1e-11)


def test_edges() -> None:
    assert student_t.ppf(0.5, 7) == 0.0
    assert student_t.ppf(0.0, 3) == -math.inf and student_t.ppf(1.0, 3) == math.inf
    assert student_t.ppf(0.975, math.inf) == pytest.approx(1.959963984540054)
    for bad in ((-0.1, 3), (1.5, 3), (0.9, 0), (0.9, -1), (0.9, math.nan)):
        with pytest.raises(ValueError):
            student_t.ppf(*bad)


def test_a_trial_imports_no_scipy() -> None:
    """The trial's interval code path computes its quantiles without importing scipy."""
    code = (
        "import sys\n"
        "from ngb.core.statistics import student_t, percentiles\n"
        "from ngb.core.trial import measure\n"
        "student_t.t_quantile(0.975, 3)\n"
        "student_t.t_quantile(0.975, 4.5)\n"
        "percentiles.over_processes([[1.0, 2.0, 3.0, 4.0], [2.0, 3.0, 5.0, 9.0]], 0.5)\n"
        "print(sorted(m for m in sys.modules if m.startswith('scipy')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=scaled(120)
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
