"""The Python API for notebooks: ``ngb.measure``, ``ngb.open_results``, ``ngb.compare``.

The same machinery as the CLI, without a shell: ``measure`` runs one trial here (as
``ngb measure`` does) and returns a :class:`Result` with the throughput, its interval and the
verdict; ``open_results`` reads a run from the DuckDB store as pandas DataFrames (DuckDB's own
``.df()``); ``compare`` decides "faster or not" with the function the reports use
(``ngb.sweeps.report.derived.speedup``), so a notebook and ``ngb report`` never disagree.
Everything else in ngb is private to it.

Every argument is checked before anything is measured (``ngb.sweeps.api.checks``): a bad value is
one ``NgbError`` line, and so is a results file that could not take the result
(``ngb.sweeps.store.measure``). Re-exported lazily by ``ngb/__init__.py`` (importing ``ngb`` loads
neither torch nor duckdb); this module itself imports torch only inside ``measure``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ngb.core.base.errors import ConfigError, NgbError
from ngb.core.records.types import TrialResult, TrialSpec
from ngb.sweeps.api import checks as check
from ngb.sweeps.spec.checks import accuracy_table, check_algorithm, check_timm_names
from ngb.sweeps.spec.one_trial import one_trial

if TYPE_CHECKING:
    import pandas as pd
    from ngb.sweeps.api.progress import Progress
    from ngb.sweeps.report.derived import Derived
    from ngb.sweeps.store.database import Store

__all__ = [
    "Comparison", "Result", "ResultFrames", "Samples", "compare", "measure", "open_results",
]  # fmt: skip

#: the device name results measured through the API are stored under (as `ngb measure` runs: here)
HERE = "localhost"


class Samples(list[float]):
    """Per-repetition throughputs that remember the worker process each came from, so
    ``compare`` computes from them exactly the interval the trial computed (between processes,
    times the ``widening`` the trial's re-run history added, with its ``df``:
    ngb.core.statistics.reruns)."""

    workers: tuple[int, ...]
    widening: float
    df: int | None

    def __init__(
        self,
        values: Sequence[float],
        workers: Sequence[int],
        widening: float = 1.0,
        df: int | None = None,
    ) -> None:
        super().__init__(values)
        self.workers = tuple(workers)
        self.widening = widening
        self.df = df


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
        """The throughput's 95 % interval as every report prints it (``derived.throughput``:
        between the worker processes' means, on the log scale, so both bounds are positive);
        NaN bounds when the trial has none."""
        bounds = self._throughput().interval
        return bounds if bounds is not None else (math.nan, math.nan)

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
    def samples(self) -> Samples:
        """Per-repetition throughputs, each with its worker process (``Samples.workers``)."""
        reps = [r for r in self.trial.repetitions if "throughput" in r]
        measured = self.trial.extra.get("measure")
        said = measured.get("reruns") if isinstance(measured, Mapping) else None
        widening = said.get("widening") if isinstance(said, Mapping) else None
        df = said.get("df") if isinstance(said, Mapping) else None
        return Samples(
            [float(r["throughput"]) for r in reps],
            [int(r.get("worker") or 0) for r in reps],
            float(widening) if isinstance(widening, (int, float)) else 1.0,
            int(df) if isinstance(df, int) else None,
        )

    @property
    def accuracy(self) -> dict[str, object] | None:
        """The accuracy pass (``accuracy=`` given): the compiled model's top-1 (top-5) with
        intervals, eager's, agreement, the drop and McNemar's verdict
        (``ngb.core.statistics.accuracy_stats.AccuracyRecord``); None without one. A pass that could
        not run raises nothing here: its line is ``trial.extra["accuracy_error"]``."""
        record = self.trial.extra.get("accuracy")
        return dict(record) if isinstance(record, Mapping) else None

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
        return f"<ngb.Result {self.label}: {self.summary()}>"

    def summary(self) -> str:
        """The throughput as every report prints it (``ngb.sweeps.report.derived``) and the
        verdict."""
        return f"{self._throughput().text()} samples/s {self.trial.verdict}"

    def _throughput(self) -> Derived:
        from ngb.sweeps.report import derived

        measured = self.trial.extra.get("measure")
        row = {
            "key": self.trial.key,
            "throughput_mean": self.throughput,
            "throughput_ci_half": self.trial.ci_half_width,
            "extra": {"measure": measured if isinstance(measured, Mapping) else {}},
        }
        return derived.throughput(row)


@dataclass(frozen=True)
class Comparison:
    """``a`` over ``b``: a throughput speed-up with its printed 95 % interval and verdict, as
    ``ngb.sweeps.report.derived.speedup`` gives them to every report."""

    derived: Derived

    @property
    def speedup(self) -> float:
        return self.derived.value

    @property
    def interval(self) -> tuple[float, float]:
        """The interval as printed (rounded outwards); NaN only for exactly 1 (a with itself)."""
        printed = self.derived.printed
        return (printed.low, printed.high) if printed is not None else (math.nan, math.nan)

    @property
    def significant(self) -> bool:
        """False: the printed interval includes 1 ("n.s." in the reports)."""
        return self.derived.significant is True

    def __str__(self) -> str:
        return f"speed-up {self.derived.text()}"

    def __repr__(self) -> str:
        return f"<ngb.Comparison {self.derived.text()}>"


def measure(
    model: str | Path,
    compiler: str = "identity",
    batch: int = 1,
    device: str = "cpu",
    precision: str | None = None,
    *,
    width: int | None = None,
    depth: int = 1,
    optimisation: str = "none",
    algorithm: str = "default",
    options: Mapping[str, object] | None = None,
    kwargs: Mapping[str, object] | None = None,
    inputs: Sequence[check.InputLike] | None = None,
    code: str | Path | None = None,
    family: str | None = None,
    name: str | None = None,
    db: str | Path | None = None,
    run: str | None = None,
    progress: bool = True,
    **settings: object,
) -> Result:
    """Measure ``model`` compiled by ``compiler`` here, as ``ngb measure`` does.

    ``model``: a timm name, a synthetic block (``conv``/``mha`` with ``width``), your own model
    as ``"package.module:factory"`` or ``"/path/to/file.py:factory"`` (called with ``kwargs``,
    fed ``inputs``), or an ``.onnx`` file (external data beside it is fine) or ``.pt2`` program
    (inputs read from the file). ``inputs``: ``["tokens:batch,16:int64:0-1000"]`` (as
    ``ngb measure -i``) or dicts ``{"name", "shape", "dtype", "range"}`` as in a sweep file;
    ``kwargs``: the factory's (or ``timm.create_model``'s) arguments; ``code``: the folder
    holding the package; ``family``: what reports group it under; ``name``: what the results
    call your model (default: the file's own name, ``resmlp.py:build`` for a python file: the
    same as ``ngb measure`` and a ``[[models]]`` table without a name give it, from any working
    directory, so they form one series in ``ngb history``). ``settings``: any
    ``MeasureSettings`` field (``workers=2``, ``ci_target=0.05``, ``repetitions=3`` ...);
    ``options``: the compiler's own options; ``progress``: show the phase on stderr.
    ``algorithm``: the convolution primitive (``default``, ``direct``, ``gemm``, ``sparse-csr``,
    ``sparse-bsr-B``: ``ngb.core.models.algorithms``); one the compiler cannot run gives a failed
    Result whose ``error`` says why, as ``ngb measure --algorithm`` does.

    Every argument is checked first: a bad one raises ``ngb.core.base.errors.NgbError`` with one
    line, before anything is measured (a results file that cannot take the result included). A trial
    that fails returns a Result with ``ok`` False and ``error``. With ``db`` or ``run`` the result
    is also stored (run id ``run``, default ``api-<time>``), where ``open_results`` and ``ngb
    report`` find it.
    """
    from ngb.sweeps.store import measure as measure_store

    typed = check.model_text(model)
    compiler = check.text("compiler", compiler)
    batch = check.whole("batch", batch)
    device = check.text("device", device)
    optimisation = check.text("optimisation", optimisation)
    algorithm = check_algorithm(check.text("algorithm", algorithm), "algorithm")
    depth = check.whole("depth", depth)
    width = None if width is None else check.whole("width", width)
    if precision is not None:
        settings["precision"] = check.text("precision", precision)
    if settings.get("accuracy") is not None:  # a relative file from this working directory
        settings["accuracy"] = accuracy_table(settings["accuracy"], "accuracy")
    if not isinstance(progress, bool):
        raise ConfigError(f"progress must be True or False, got {progress!r}")
    run = measure_store.check_run_id(check.optional_text("run", run), "run")
    db_path = check.path_text("db", db)
    store = measure_store.writable_store(db_path) if db is not None or run is not None else None

    from ngb.sweeps.api.progress import quiet_tqdm

    quiet_tqdm()  # before timm pulls in tqdm.auto: no TqdmWarning in a notebook
    from ngb.core.compilers import compiler_class

    compiler_class(compiler)  # an unknown name: one line with close matches
    source = check.model_source(
        typed,
        check.table("kwargs", kwargs),
        check.input_specs(inputs),
        check.path_text("code", code),
        check.optional_text("family", family),
    )
    if source is None:
        check_timm_names([typed])  # the cached list of timm's names: no timm import here
    from ngb.core.models.model_sources import trial_name

    spec = one_trial(
        model=trial_name(typed, source, name, "name"),
        compiler=compiler,
        batch=batch,
        depth=depth,
        width=width,
        optimisation=optimisation,
        algorithm=algorithm,
        device=device,
        options=check.table("options", options),
        settings=settings,
        source=source,
        settings_name="measure settings",
        accuracy_name="accuracy",
    )
    result = Result(_run(spec, progress))
    if store is not None:
        run = run or measure_store.default_run_id("api")
        said = measure_store.save(store, run, result.trial, "ngb.measure")
        if progress or said.startswith("not stored"):
            print(f"ngb: {said}", file=sys.stderr)
    return result


def _run(spec: TrialSpec, progress: bool) -> TrialResult:
    """The trial here, its phases shown on stderr while it runs."""
    from ngb.core.trial.measure import run_trial
    from ngb.devices.paths import get_paths
    from ngb.sweeps.api.progress import Progress

    cache = get_paths().ensure().cache
    shown = Progress(spec.label, enabled=progress)
    if "torch" in sys.modules:
        # This interpreter (a notebook) has torch already, maybe with OpenMP's thread pool
        # started, and libgomp's pool does not survive the fork of ngb's worker processes (the
        # worker's first parallel op would wait forever): measure from a fresh process instead,
        # as the device agent does.
        trial = _in_fresh_process(spec, cache, shown)
    else:
        trial = run_trial(spec, cache_dir=cache, emit=shown)
    if trial.ok:
        shown.finish(Result(trial).summary())
    else:
        shown.finish(f"failed ({trial.error_kind})")
    return trial


def _in_fresh_process(spec: TrialSpec, cache: Path, shown: Progress) -> TrialResult:
    """The trial in a child interpreter (``ngb.devices.agent``'s trial subprocess, its events
    shown as progress); a crash or hang there is a failed result, as in a sweep."""
    import io
    import threading

    from ngb.core.records import events
    from ngb.devices.agent import EventWriter, run_subprocess

    class Shown(EventWriter):
        def write_line(self, line: str) -> None:
            event = events.decode(line)
            if event is not None:
                shown(event)

    outcome = run_subprocess(spec, Shown(io.StringIO()), None, cache, threading.Event())
    assert outcome is not None  # None only when cancelled, and nothing cancels it here
    return outcome


class ResultFrames(tuple["pd.DataFrame", "pd.DataFrame"]):
    """What ``open_results`` gives: it unpacks as ``results, samples``; ``profiles`` is the
    run's per-operator profile frame beside them (``ngb.sweeps.store.profiles.profile_frame``:
    one row per kernel record of each profile pass, empty where none was taken)."""

    profiles: pd.DataFrame

    def __new__(
        cls, results: pd.DataFrame, samples: pd.DataFrame, profiles: pd.DataFrame
    ) -> ResultFrames:
        frames = super().__new__(cls, (results, samples))
        frames.profiles = profiles
        return frames

    @property
    def results(self) -> pd.DataFrame:
        return self[0]

    @property
    def samples(self) -> pd.DataFrame:
        return self[1]


def open_results(db: str | Path | None = None, run: str | None = None) -> ResultFrames:
    """``(results, samples)`` of a run as pandas DataFrames: one row per finished trial (the
    ``results`` view) and one per timed repetition (the ``measurements`` table, with the worker
    process it came from); ``.profiles`` of what it returns is the third frame, one row per
    kernel of each per-operator profile pass (a sweep's ``profile = true``, ``ngb profile
    --db --run``). ``db``: the results file (default: ngb's own); ``run``: a run id (default:
    the newest run that has results, named on stderr). The run id is in each frame's
    ``attrs["run_id"]``."""
    from ngb.sweeps.store.database import Store
    from ngb.sweeps.store.profiles import profile_frame

    store = Store(check.path_text("db", db))
    run = check.optional_text("run", run)
    store.require_file()
    if run is None:
        run = _newest_with_results(store)
    else:
        store.run(run)  # an unknown run id: one line with the known ones
    # ci_df: the interval's degrees of freedom (k - 1 processes), so a row compares as the
    # reports compare it (``compare``)
    results = store.frame(
        "SELECT r.*, TRY_CAST(json_extract_string(t.extra, '$.measure.df') AS DOUBLE) AS ci_df "
        "FROM results r JOIN trials t USING (run_id, device, key) "
        "WHERE r.run_id = ? ORDER BY r.device, r.key",
        [run],
    )
    # ci_widening / ci_df: what the trial's re-run history added to its interval
    # (ngb.core.statistics.reruns), so ``compare`` on a key's repetitions rebuilds the interval it
    # stated
    samples = store.frame(
        "SELECT m.*, TRY_CAST(json_extract_string(t.extra, '$.measure.reruns.widening') AS DOUBLE)"
        " AS ci_widening, TRY_CAST(json_extract_string(t.extra, '$.measure.df') AS DOUBLE) AS ci_df"
        " FROM measurements m LEFT JOIN trials t USING (run_id, device, key)"
        " WHERE m.run_id = ? ORDER BY m.device, m.key, m.rep",
        [run],
    )
    if results.empty:
        status = store.run(run).get("status")
        print(f"ngb: run {run} ({status}) has no finished trials", file=sys.stderr)
    profiles = profile_frame(store, run)
    for frame in (results, samples, profiles):
        frame.attrs["run_id"] = run
    return ResultFrames(results, samples, profiles)


def _newest_with_results(store: Store) -> str:
    """The newest run with at least one finished trial, said on stderr; empty runs (cancelled
    before a trial ended) are passed over, and said to be."""
    runs = store.frame(
        "SELECT r.run_id, r.status, count(t.key) AS n FROM runs r "
        "LEFT JOIN trials t ON t.run_id = r.run_id "
        "GROUP BY r.run_id, r.status, r.created_at ORDER BY r.created_at DESC, r.run_id DESC"
    )
    if runs.empty:
        raise NgbError(f"no runs in {store.path}")
    skipped: list[str] = []
    for run_id, status, count in runs.itertuples(index=False):
        if count:
            passed = f"; newer runs without results: {', '.join(skipped)}" if skipped else ""
            print(
                f"ngb: run {run_id} ({status}, {count} trials) of {store.path}{passed}",
                file=sys.stderr,
            )
            return str(run_id)
        skipped.append(f"{run_id} ({status})")
    raise NgbError(f"no run in {store.path} has a finished trial (runs: {', '.join(skipped)})")


def _row(x: object, side: str) -> dict[str, object]:
    """One side of ``compare`` as a result row for ``ngb.sweeps.report.derived``: a ``Result``, a
    row of ``open_results``' results frame, or per-repetition throughputs (a list, ``Samples``, a
    pandas Series, or a samples frame with its ``throughput`` and ``worker`` columns)."""
    from ngb.sweeps.rows import number

    if isinstance(x, Result):
        if not x.ok:
            raise ConfigError(
                f"compare: {side} is a failed trial ({x.trial.error_kind}): {x.error}"
            )
        trial = x.trial
        measured = trial.extra.get("measure")
        df = measured.get("df") if isinstance(measured, Mapping) else None
        return _checked_row(
            side,
            {
                "key": f"{trial.key}@{trial.host}@{trial.started_at}",
                "throughput_mean": trial.throughput.mean,
                "throughput_ci_half": trial.ci_half_width,
                "extra": {"measure": {"df": df if df is not None else max(len(x.samples) - 1, 0)}},
                "precision": trial.precision,
            },
        )
    pandas = sys.modules.get("pandas")  # frames and rows come from open_results
    if pandas is not None and isinstance(x, pandas.DataFrame) and "throughput" in x.columns:
        # a samples frame (one key's repetitions)
        workers = [int(w) for w in x["worker"]] if "worker" in x.columns else None
        values = [number(v) for v in x["throughput"]]
        widening = _first_number(x, "ci_widening")
        df = _first_number(x, "ci_df")
        if widening is None:
            return _from_samples(side, values, workers)
        return _from_samples(side, values, workers, widening, None if df is None else int(df))
    series = pandas is not None and isinstance(x, pandas.Series) and "throughput_mean" in x.index
    if isinstance(x, Mapping) or series:
        # a pandas cell that is missing reads NaN: None, as the store gives it
        items = x.items() if isinstance(x, Mapping) else x.to_dict().items()  # type: ignore[attr-defined]
        row = {str(k): _cell(v) for k, v in items}
        if "throughput_mean" not in row:
            raise ConfigError(f"compare: {side} is a mapping without throughput_mean")
        if "ci_df" in row:  # a row of open_results' frame
            row["extra"] = {"measure": {"df": row["ci_df"]}}
        row.setdefault("key", f"row-{id(x)}")
        return _checked_row(side, row)
    if isinstance(x, str | bytes) or not isinstance(x, Iterable):
        raise ConfigError(
            f"compare: {side} must be an ngb.Result, a results row or a list of throughputs, "
            f"got {type(x).__name__}"
        )
    values = [number(v) for v in x]
    if isinstance(x, Samples):
        return _from_samples(side, values, list(x.workers), x.widening, x.df)
    return _from_samples(side, values, None)


def _first_number(frame: pd.DataFrame, column: str) -> float | None:
    """The column's first finite value, None where the frame has none (an older store)."""
    if column not in frame.columns:
        return None
    for value in frame[column]:
        if isinstance(value, (int, float)) and math.isfinite(value):
            return float(value)
    return None


def _cell(value: object) -> object:
    return None if isinstance(value, float) and math.isnan(value) else value


def _from_samples(
    side: str,
    values: list[float | None],
    workers: list[int] | None,
    widening: float = 1.0,
    stated_df: int | None = None,
) -> dict[str, object]:
    """The trial's own interval from its repetitions (``stopping.process_interval``): between
    the worker processes' means (k - 1 df) when there were several, else over the repetitions;
    for an ngb trial's ``Samples``, times the widening its re-run history added, at its df."""
    from ngb.core.statistics.stopping import process_interval

    if any(v is None or not math.isfinite(v) or v <= 0 for v in values):
        raise ConfigError(f"compare: {side} has a throughput that is not a positive finite number")
    clean = [float(v) for v in values if v is not None]
    if len(clean) < 2:
        raise ConfigError(
            f"compare needs at least two repetitions on each side ({side}: {len(clean)})"
        )
    groups: dict[int, list[float]] = {}
    for value, worker in zip(clean, workers or [0] * len(clean), strict=True):
        groups.setdefault(worker, []).append(value)
    ci = process_interval(list(groups.values()))
    df = ci.workers - 1 if ci.workers >= 2 else max(ci.n - 1, 0)
    if stated_df is not None:
        df = stated_df
    return _checked_row(
        side,
        {
            "key": f"samples-{side}-{id(values)}",
            "throughput_mean": ci.mean,
            "throughput_ci_half": ci.half_width * widening,
            "extra": {"measure": {"df": df}},
        },
    )


def _checked_row(side: str, row: dict[str, object]) -> dict[str, object]:
    mean, half = row.get("throughput_mean"), row.get("throughput_ci_half")
    if not isinstance(mean, int | float) or not math.isfinite(mean) or mean <= 0:
        raise ConfigError(f"compare: {side}'s throughput is not a positive finite number ({mean})")
    if not isinstance(half, int | float) or not math.isfinite(half) or half < 0:
        raise ConfigError(
            f"compare: {side} has no interval (fewer than two repetitions?): nothing to test"
        )
    return row


def compare(a: object, b: object) -> Comparison:
    """How much faster ``a`` is than ``b`` (throughput ratio), with the 95 % interval and the
    "n.s." verdict every report prints: ``ngb.sweeps.report.derived.speedup``, the one computation.

    ``a``/``b``: ``Result``s, rows of ``open_results``' results frame, or per-repetition
    throughputs: ``Result.samples``, a samples frame (its ``throughput`` and ``worker`` columns)
    for one key, or a plain list (one process). A trial's samples give the same interval as the
    trial itself. A failed trial, fewer than two repetitions, or a throughput that is zero,
    negative or not finite raise ``NgbError``."""
    from ngb.sweeps.report import derived

    return Comparison(derived.speedup(_row(a, "a"), _row(b, "b")))
