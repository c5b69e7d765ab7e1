"""``ngb.serve``: a model under load here, as ``ngb serve`` runs it (issue 43).

One door for the command and the notebook: every argument is checked first (one ``NgbError``
line, a results file that could not take the answer included), then each compiler is served in
a process of its own (``ngb.core.serving.serve``) -- a fork from a process that has not started
torch's thread pool (``ngb serve``), a fresh interpreter where it may have (a notebook; libgomp's
pool does not survive a fork, see ``ngb.sweeps.api.notebook``) -- one after another, so two
runtimes' thread pools never share the cores. With ``db``/``run`` every answer is stored
(``ngb.sweeps.store.serving``), where ``ngb advise --p99-ms`` finds the server-scenario p99.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ngb.core.base.errors import ConfigError, NgbError, one_line
from ngb.core.records.types import TrialSpec
from ngb.core.serving.serve import OnProgress, ServeOutcome, ServeSettings, ServingProgress
from ngb.core.serving.serve_trial import serving_line
from ngb.core.statistics import percentiles
from ngb.sweeps.api import checks as check

#: what results served here are stored under (``ngb serve`` runs here)
HERE = "localhost"


@dataclass(frozen=True)
class Served:
    """One compiler served: its run (p50/p90/p99 from the scheduled time, the rates, the
    verdict) or its peak search (QPS* and the 95 % interval), or why it failed."""

    compiler: str
    outcome: ServeOutcome | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome is not None

    def _tail(self, name: str) -> percentiles.PercentileInterval | None:
        s = self.outcome.summary if self.outcome is not None else None
        return s.latency.get(name) if s is not None else None

    @property
    def p99_ms(self) -> float:
        tail = self._tail("p99")
        return tail.value if tail is not None else math.nan

    @property
    def p99_interval(self) -> tuple[float | None, float | None]:
        tail = self._tail("p99")
        return (tail.low, tail.high) if tail is not None else (None, None)

    @property
    def verdict(self) -> str | None:
        s = self.outcome.summary if self.outcome is not None else None
        if s is None:
            return None
        return f"{s.verdict}: {s.verdict_reason}" if s.reasons else s.verdict

    @property
    def peak_qps(self) -> float:
        found = self.outcome.peak if self.outcome is not None else None
        return found.qps if found is not None else math.nan

    @property
    def peak_interval(self) -> tuple[float | None, float]:
        """QPS*'s 95 % interval; its low end None where no probe verified a rate (no lower
        bound, ``ngb.core.serving.peak``), its high end infinite where none missed; NaN without a
        search."""
        found = self.outcome.peak if self.outcome is not None else None
        return (found.low, found.high) if found is not None else (math.nan, math.nan)

    def to_dict(self) -> dict[str, object]:
        if self.outcome is None:
            return {"compiler": self.compiler, "error": self.error}
        return {"compiler": self.compiler, **self.outcome.to_dict()}

    def __repr__(self) -> str:
        if self.outcome is None:
            return f"<ngb.Served {self.compiler}: failed: {self.error}>"
        if self.outcome.peak is not None:
            return f"<ngb.Served {self.compiler}: {self.outcome.peak.describe()}>"
        return f"<ngb.Served {self.compiler}: p99 {self.p99_ms:.3g} ms, {self.verdict}>"


def serve(
    model: str | Path,
    compiler: str | Sequence[str] = "identity",
    scenario: str = "server",
    *,
    qps: float | None = None,
    duration: float = 30.0,
    p99_ms: float | None = None,
    find_peak: bool = False,
    batch: int = 1,
    width: int | None = None,
    depth: int = 1,
    input_size: int | None = None,
    device: str = "cpu",
    precision: str | None = None,
    options: Mapping[str, object] | None = None,
    seed: int = 0,
    burstiness: float = 1.0,
    concurrency: int | None = None,
    max_batch: int = 1,
    max_queue_delay_ms: float = 0.0,
    samples_per_query: int = 8,
    probe_s: float = 60.0,
    max_probe_s: float | None = None,
    max_probes: int = 10,
    target: float = 0.05,
    warmup: float = 2.0,
    threads: int | None = None,
    db: str | Path | None = None,
    run: str | None = None,
    progress: bool = True,
) -> Served | list[Served]:
    """Serve ``model`` compiled by ``compiler`` (or each of a list, one after another) here.

    ``scenario``: ``server`` (open loop at ``qps`` with exponential gaps, ``burstiness`` the
    gamma shape; latency from each request's scheduled time), ``singlestream``,
    ``multistream`` or ``offline`` (MLPerf LoadGen's). ``p99_ms``: the latency budget (the run
    says whether its p99 shows it met); with ``find_peak`` the highest QPS whose p99 meets it,
    with its 95 % interval. ``concurrency``: requests in flight (default: the runtime's own);
    ``max_batch``/``max_queue_delay_ms``: dynamic batching. Returns a ``Served`` (a list for a
    list of compilers); a compiler that fails is a ``Served`` with ``error``, the others run.
    With ``db`` or ``run`` the answers are stored (run id ``run``, default ``serve-<time>``).
    """
    from ngb.sweeps.store import measure as measure_store

    names = _compilers(compiler)
    specs = [
        _spec(check.model_text(model), name, batch, width, depth, input_size, device, precision,
              options)
        for name in names
    ]  # fmt: skip
    settings = ServeSettings(
        scenario=check.text("scenario", scenario), qps=_number("qps", qps),
        duration_s=float(duration), seed=check.whole("seed", seed, minimum=0),
        burstiness=float(burstiness), concurrency=concurrency, max_batch=max_batch,
        max_queue_delay_ms=float(max_queue_delay_ms), samples_per_query=samples_per_query,
        p99_ms=_number("p99_ms", p99_ms), find_peak=bool(find_peak), probe_s=float(probe_s),
        max_probe_s=max_probe_s, max_probes=max_probes, target=float(target),
        warmup_s=float(warmup), threads=threads,
    )  # fmt: skip
    run = measure_store.check_run_id(check.optional_text("run", run), "run")
    store = None
    if db is not None or run is not None:
        store = measure_store.writable_store(check.path_text("db", db))
    answers = [_serve_one(spec, settings, progress) for spec in specs]
    if store is not None:
        from ngb.sweeps.store.serving import save_run

        done = [a.outcome for a in answers if a.outcome is not None]
        if done:
            said = save_run(store, run or measure_store.default_run_id("serve"), done, HERE)
            if progress:
                print(f"ngb: {said}", file=sys.stderr)
    return answers[0] if isinstance(compiler, str) else answers


def _number(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    return float(value)


def _compilers(value: str | Sequence[str]) -> list[str]:
    """``"openvino"``, ``"identity,openvino"`` or a list: the names, each known."""
    from ngb.core.compilers import compiler_class

    items = value.split(",") if isinstance(value, str) else list(value)
    names = [check.text("compiler", n) for n in items if not isinstance(n, str) or n.strip()]
    if not names:
        raise ConfigError("give at least one compiler")
    for name in names:
        compiler_class(name)  # an unknown name: one line with close matches
    return names


def _spec(
    model: str,
    compiler: str,
    batch: int,
    width: int | None,
    depth: int,
    input_size: int | None,
    device: str,
    precision: str | None,
    options: Mapping[str, object] | None,
) -> TrialSpec:
    """The trial point served, checked as ``ngb measure`` checks one."""
    from ngb.core.compilers import compiler_class
    from ngb.sweeps.spec.checks import check_timm_names, check_trial, parse_measure

    if compiler_class(compiler).needs_model:
        check_timm_names([model])  # an unknown timm name: one line, before anything is built
    spec = TrialSpec(
        model=model, compiler=compiler, batch=check.whole("batch", batch),
        depth=check.whole("depth", depth),
        width=None if width is None else check.whole("width", width),
        input_size=None if input_size is None else check.whole("input_size", input_size),
        device=check.text("device", device), compiler_options=check.table("options", options),
        measure=parse_measure(
            {} if precision is None else {"precision": check.text("precision", precision)},
            "serve settings",
        ),
    )  # fmt: skip
    return check_trial(spec, "serve")


def _serve_one(spec: TrialSpec, settings: ServeSettings, progress: bool) -> Served:
    """One compiler served in a process of its own; a failure is the answer's ``error``."""
    from ngb.core.serving import serve as core_serve

    say = _say(spec.compiler) if progress else None
    live = _live(spec.compiler) if progress and sys.stderr.isatty() else None
    try:
        if "torch" in sys.modules:  # a notebook: a fresh interpreter (see the docstring)
            import multiprocessing

            with multiprocessing.get_context("spawn").Pool(1) as pool:
                outcome = pool.apply(core_serve.serve, (spec, settings), {"say": say})
        else:
            from ngb.core.base.isolate import call_in_child

            outcome = call_in_child(
                f"serving {spec.label}", core_serve.serve, spec, settings, say=say,
                progress=live,
            )  # fmt: skip
    except (NgbError, OSError, RuntimeError, ValueError) as exc:  # the answer says it
        return Served(spec.compiler, error=one_line(exc))
    return Served(spec.compiler, outcome)


class _Say:
    """Prints ``ngb: <compiler>: <line>`` on stderr (picklable: it crosses to the server)."""

    def __init__(self, compiler: str) -> None:
        self.compiler = compiler

    def __call__(self, line: str) -> None:
        print(f"\rngb: {self.compiler}: {line}", file=sys.stderr, flush=True)


def _say(compiler: str) -> Callable[[str], None]:
    return _Say(compiler)


def _live(compiler: str) -> OnProgress:
    """A terminal's live line each second, as a sweep's serving trial shows in the console
    (``serving_line``: the probe, offered and achieved QPS, the p99 so far)."""

    def show(progress: ServingProgress) -> None:
        line = f"ngb: {compiler}: {serving_line(progress.fields())}"
        sys.stderr.write(f"\r{line:<78}")
        sys.stderr.flush()

    return show
