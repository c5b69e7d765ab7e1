"""The Python API for notebooks: ``ngb.measure``, ``ngb.open_results``, ``ngb.compare``.

The same machinery as the CLI, without a shell: ``measure`` runs one trial here (as
``ngb measure`` does) and returns a :class:`Result` with the throughput, its interval and the
verdict; ``open_results`` reads a run from the DuckDB store as pandas DataFrames (DuckDB's own
``.df()``); ``compare`` decides "faster or not" with the function the reports use, so a notebook
and ``ngb report`` never disagree. Everything else in ngb is private to it.

Re-exported lazily by ``ngb/__init__.py`` (importing ``ngb`` loads neither torch nor duckdb);
this module itself imports torch only inside ``measure`` (through ``run_trial``).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ngb.core.errors import ConfigError, NgbError
from ngb.core.types import TrialResult, TrialSpec

if TYPE_CHECKING:
    import pandas as pd
    from ngb.core.intervals import Mean

__all__ = ["Comparison", "Result", "compare", "measure", "open_results"]

#: the device name results measured through the API are stored under (as `ngb measure` runs: here)
HERE = "localhost"


@dataclass(frozen=True)
class Result:
    """One measured trial: the throughput (samples/s), its interval and the verdict."""

    trial: TrialResult

    @property
    def ok(self) -> bool:
        return self.trial.ok

    @property
    def error(self) -> str | None:
        return self.trial.error

    @property
    def throughput(self) -> float:
        """Mean throughput in samples per second (NaN for a failed trial)."""
        return float(self.trial.throughput.mean)

    @property
    def interval(self) -> tuple[float, float]:
        """The throughput's interval at the trial's confidence (95 % by default): between the
        worker processes' means when there were several (``ngb.core.stopping``)."""
        half = self.trial.ci_half_width
        if half is None or not math.isfinite(half):
            return (math.nan, math.nan)
        return (self.throughput - half, self.throughput + half)

    @property
    def verdict(self) -> str | None:
        """``VALID`` or ``INVALID: reason`` (None for a failed trial)."""
        if self.trial.verdict is None:
            return None
        reason = self.trial.verdict_reason
        return f"{self.trial.verdict}: {reason}" if reason else self.trial.verdict

    @property
    def precision(self) -> str | None:
        """The precision that ran, read back from the runtime (fp32, tf32, bf16, ...)."""
        return self.trial.precision

    @property
    def samples(self) -> list[float]:
        """Per-repetition throughputs: what ``compare`` (and the reports) resample."""
        return [float(r["throughput"]) for r in self.trial.repetitions if "throughput" in r]

    @property
    def label(self) -> str:
        spec = self.trial.spec
        return f"{spec.get('model')} {spec.get('compiler')} b{spec.get('batch')}"

    def to_dict(self) -> dict[str, object]:
        """The whole trial as plain JSON-ready data (``TrialResult.to_dict``)."""
        return self.trial.to_dict()

    def __repr__(self) -> str:
        if not self.ok:
            return f"<ngb.Result {self.label}: failed ({self.trial.error_kind}): {self.error}>"
        low, high = self.interval
        return (
            f"<ngb.Result {self.label}: {self.throughput:.4g} samples/s "
            f"[{low:.4g}, {high:.4g}] {self.trial.verdict}>"
        )


@dataclass(frozen=True)
class Comparison:
    """``a`` over ``b``: a throughput speed-up with its printed 95 % interval."""

    speedup: float
    interval: tuple[float, float]
    significant: bool  # False: the interval includes 1 ("n.s." in the reports)

    def __str__(self) -> str:
        low, high = self.interval
        mark = "" if self.significant else " n.s."
        return f"{self.speedup:.3f}x [{low:.3f}, {high:.3f}]{mark}"


def measure(
    model: str,
    compiler: str = "identity",
    batch: int = 1,
    device: str = "cpu",
    precision: str | None = None,
    *,
    width: int | None = None,
    depth: int = 1,
    optimisation: str = "none",
    options: Mapping[str, object] | None = None,
    db: str | Path | None = None,
    run: str | None = None,
    **settings: object,
) -> Result:
    """Measure ``model`` compiled by ``compiler`` here, as ``ngb measure`` does.

    ``model``: a timm name or a synthetic block (``conv``/``mha`` with ``width``); ``settings``:
    any ``MeasureSettings`` field (``workers=2``, ``ci_target=0.05``, ``repetitions=3`` ...);
    ``options``: the compiler's own options. Bad arguments raise ``ngb.core.errors.NgbError``
    with one line; a trial that fails returns a Result with ``ok`` False and ``error``.
    With ``db`` or ``run`` the result is also stored (run id ``run``, default ``api-<time>``),
    where ``open_results`` and ``ngb report`` find it.
    """
    from ngb.core.compilers import compiler_class
    from ngb.core.measure import run_trial
    from ngb.core.models import resolve_model
    from ngb.core.types import BLOCK_MODELS
    from ngb.devices.paths import get_paths
    from ngb.sweeps.spec_checks import check_trial, parse_measure

    compiler_class(compiler)  # an unknown name: one line with close matches
    if model not in BLOCK_MODELS:
        resolve_model(model)
    if precision is not None:
        settings["precision"] = precision
    spec = TrialSpec(
        model=model,
        compiler=compiler,
        batch=batch,
        depth=depth,
        width=width,
        optimisation=optimisation,
        device=device,
        compiler_options=dict(options or {}),
        measure=parse_measure(settings, "measure settings"),
    )
    check_trial(spec, "measure")
    cache = get_paths().ensure().cache
    if "torch" in sys.modules:
        # This interpreter (a notebook) has torch already, maybe with OpenMP's thread pool
        # started, and libgomp's pool does not survive the fork of ngb's worker processes (the
        # worker's first parallel op would wait forever): measure from a fresh process instead,
        # as the device agent does.
        result = Result(_in_fresh_process(spec, cache))
    else:
        result = Result(run_trial(spec, cache_dir=cache))
    if db is not None or run is not None:
        _save(result.trial, db, run or time.strftime("api-%Y%m%d-%H%M%S"))
    return result


def _in_fresh_process(spec: TrialSpec, cache: Path) -> TrialResult:
    """The trial in a child interpreter (``ngb.devices.agent``'s trial subprocess, events to
    nowhere); a crash or hang there is a failed result, as in a sweep."""
    import io
    import threading

    from ngb.devices.agent import EventWriter, run_subprocess

    outcome = run_subprocess(spec, EventWriter(io.StringIO()), None, cache, threading.Event())
    assert outcome is not None  # None only when cancelled, and nothing cancels it here
    return outcome


def _save(trial: TrialResult, db: str | Path | None, run_id: str) -> None:
    from ngb.sweeps.store import Store

    store = Store(db)
    store.create_run(run_id, "api", "", [HERE], 0, meta={"source": "ngb.measure"})
    store.ingest_results(run_id, HERE, [trial])


def open_results(
    db: str | Path | None = None, run: str | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(results, samples)`` of a run as pandas DataFrames: one row per finished trial (the
    ``results`` view) and one per timed repetition (the ``measurements`` table, with the worker
    process it came from). ``db``: the results file (default: ngb's own); ``run``: a run id
    (default: the newest run)."""
    from ngb.sweeps.store import Store

    store = Store(db)
    store.require_file()
    runs = store.runs()
    if run is None:
        if not runs:
            raise NgbError(f"no runs in {store.path}")
        run = str(runs[0]["run_id"])
    else:
        store.run(run)  # an unknown run id: one line with the known ones
    results = store.frame("SELECT * FROM results WHERE run_id = ? ORDER BY device, key", [run])
    samples = store.frame(
        "SELECT * FROM measurements WHERE run_id = ? ORDER BY device, key, rep", [run]
    )
    return results, samples


def _mean(x: Result | Sequence[float]) -> Mean:
    """A measured result (its stored interval and degrees of freedom: between processes when
    several ran) or raw per-repetition throughputs (Student-t over them) as a ``Mean``."""
    from ngb.core.intervals import Mean
    from ngb.core.stopping import interval

    if isinstance(x, Result):
        measure = x.trial.extra.get("measure") or {}
        df = float(measure.get("df") or max(len(x.samples) - 1, 0))
        return Mean(x.throughput, x.trial.ci_half_width, df, x.trial.key)
    ci = interval([float(v) for v in x], serial=False)  # independent Student-t, n - 1 df
    return Mean(ci.mean, ci.half_width, ci.n - 1)


def compare(a: Result | Sequence[float], b: Result | Sequence[float]) -> Comparison:
    """How much faster ``a`` is than ``b`` (throughput ratio), with the 95 % interval and the
    "n.s." verdict every report prints (``ngb.sweeps.derived``, one computation). ``a``/``b``:
    Results, or per-repetition throughputs (e.g. a ``samples`` DataFrame's ``throughput`` column
    for one key)."""
    from ngb.core import intervals
    from ngb.sweeps import derived
    from ngb.sweeps.numbers import printed_interval

    for x in (a, b):
        if not isinstance(x, Result) and len(x) < 2:
            raise ConfigError("compare needs at least two repetitions on each side")
    ratio = derived.judge(intervals.speedup(_mean(a), _mean(b)), 1.0)
    if ratio.half is None:
        return Comparison(ratio.value, (math.nan, math.nan), False)
    low, high = printed_interval(ratio.value, ratio.half)
    return Comparison(ratio.value, (low, high), ratio.significant is True)
