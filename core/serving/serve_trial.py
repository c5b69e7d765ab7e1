"""A serving trial: a sweep's ``[serve]`` run by the agent as any trial is (issue 43).

A ``TrialSpec`` whose ``serve`` is set is served under load (``ngb.core.serving.serve``) instead of
timed (``ngb.core.trial.measure``), on whatever device the sweep runs on (here, over SSH, under
Slurm), and comes back as a ``TrialResult`` so the checkpoint, resume, events and transports
carry it unchanged: ``ok`` with the whole serving outcome in ``extra["serving"]`` (its
``to_dict``, every reason kept), or ``failed`` with the reason in one line, classified as a
timed trial's failure is. Its throughput stays empty: the workstation stores the outcome as
``serving`` / ``serving_peaks`` rows (``ngb.sweeps.store.serving_ingest``), read back here
(``outcome_from_dict``).

The agent kills a trial past ``timeout_s``: for a serving trial the trial's own allowance
(``measure.timeout_s``: building and compiling) plus the serving's planned seconds
(``ServeSettings.budget_s``: warm-up and run, or every probe of a peak search at its longest).
"""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ngb.core.base.errors import ConfigError, one_line
from ngb.core.records import events
from ngb.core.records.types import TrialResult, TrialSpec

if TYPE_CHECKING:
    from ngb.core.serving.peak import Peak
    from ngb.core.serving.serve import ServeOutcome, ServingProgress
    from ngb.core.serving.serve_stats import Summary

#: where a serving trial's outcome rides in ``TrialResult.extra``
EXTRA: Final = "serving"  # Final: a literal key of TrialExtra for mypy

#: the agent's ``EventWriter.emit``: one event
Emit = Callable[[dict[str, object]], None]


def timeout_s(spec: TrialSpec) -> float:
    """Seconds the agent gives the trial before it kills it (see the module docstring)."""
    if spec.serve is None:
        return spec.measure.timeout_s
    return spec.measure.timeout_s + spec.serve.budget_s()


def run_serving(
    spec: TrialSpec, *, emit: Emit | None = None, cache_dir: Path | str | None = None
) -> TrialResult:
    """Serve ``spec`` here as its ``serve`` settings say; a failure is a failed result."""
    from ngb.core.serving import serve as core_serve
    from ngb.core.trial.measure import classify_error
    from ngb.core.trial.versions import library_versions

    if spec.serve is None:
        raise ConfigError(f"{spec.label} has no serve settings")
    result = TrialResult(
        key=spec.key, spec=spec.to_dict(), host=socket.gethostname(), started_at=time.time()
    )

    def say(line: str) -> None:
        if emit is not None:
            emit(events.make_event(events.LOG, key=spec.key, level="info", msg=line))

    def progress(p: ServingProgress) -> None:  # from the load generator's watching thread
        if emit is not None:
            emit(events.make_event(events.SERVING, key=spec.key, **p.fields()))

    try:
        outcome = core_serve.serve(
            spec, spec.serve, say=say, progress=progress,
            cache_dir=Path(cache_dir) if cache_dir else None,
        )  # fmt: skip
    except Exception as exc:  # a failure is a result, as for a timed trial
        result.status = "failed"
        result.error = one_line(exc)
        result.error_kind = classify_error(exc)
    else:
        result.host = outcome.host
        result.compile_s = outcome.compile_s
        result.precision = outcome.precision
        result.versions = dict(outcome.versions)
        result.extra[EXTRA] = to_dict(outcome)
        if outcome.summary is not None:
            result.verdict = outcome.summary.verdict
            result.verdict_reason = outcome.summary.verdict_reason or None
    finally:
        result.finished_at = time.time()
        if not result.versions:
            result.versions = library_versions()
    return result


# ---------------------------------------------------------------- the live line


def serving_line(event: Mapping[str, object]) -> str:
    """A ``serving`` event (``ngb.core.records.events.SERVING``) in one line, as the console's
    device panel, ``ngb run``'s progress line and ``ngb serve``'s terminal line show it: which run
    (a peak search's probe and its offered rate), how far into it in seconds of its planned ones,
    the rate achieved and the p99 so far of the limit where there is one ("probe 3/10 at 75.5 QPS,
    44/60 s: achieved 75.1, p99 so far 12.3/30 ms"): within an 80-column console's panel (76
    characters) up to 10,000 QPS."""
    probe, probes = _int(event.get("probe")), _int(event.get("max_probes"))
    offered = _num(event.get("offered_qps"))
    if probe is not None:
        head = f"probe {probe + 1}/{probes}" if probes else f"probe {probe + 1}"
    else:
        scenario = str(event.get("scenario") or "server")
        head = "serving" if scenario == "server" else scenario
    if offered is not None:
        head += f" at {_qps(offered)} QPS"
    elapsed, duration = _num(event.get("elapsed_s")), _num(event.get("duration_s"))
    if elapsed is not None:
        places = 0 if (duration or elapsed) >= 10 else 1  # a short probe's tenths
        head += f", {elapsed:.{places}f}" + (f"/{duration:.{places}f} s" if duration else " s")
    answered = _int(event.get("answered")) or 0
    achieved = _num(event.get("achieved_qps"))
    if not answered or achieved is None:
        return f"{head}: no answer yet"
    unit = "" if offered is not None else " QPS"
    text = f"{head}: achieved {_qps(achieved)}{unit}"
    p99, limit = _num(event.get("p99_ms")), _num(event.get("limit_ms"))
    if p99 is not None:  # "12.3/30 ms": of the limit, as "4/15 s" is of the run's seconds
        text += f", p99 so far {p99:.3g}" + (f"/{limit:g} ms" if limit is not None else " ms")
    return text


def _qps(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def _num(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# ---------------------------------------------------------------- the outcome as plain data


def to_dict(outcome: ServeOutcome) -> dict[str, object]:
    """``outcome.to_dict()`` with each summary's reasons as a list (its ``verdict_reason`` joins
    them), so ``outcome_from_dict`` gives back the same outcome."""
    data = outcome.to_dict()
    summary = data.get("summary")
    if outcome.summary is not None and isinstance(summary, dict):
        summary["reasons"] = list(outcome.summary.reasons)
    found, peak_data = outcome.peak, data.get("peak")
    if found is not None and isinstance(peak_data, dict):
        for probe, probe_data in zip(found.probes, peak_data.get("probes") or [], strict=True):
            probe_data["summary"]["reasons"] = list(probe.summary.reasons)
    return data


def outcome_from_dict(data: Mapping[str, Any]) -> ServeOutcome:
    """A ``ServeOutcome`` from ``to_dict``'s form, after JSON (NaN and infinity came back as
    null: an unknown statistic as NaN again, a peak's missing upper end as infinity)."""
    from ngb.core.serving.serve import ServeOutcome, ServeSettings

    try:
        summary = data.get("summary")
        found = data.get("peak")
        return ServeOutcome(
            spec=TrialSpec.from_dict(data["spec"]),
            settings=ServeSettings.of(data["settings"]),
            host=str(data.get("host") or ""),
            started_at=float(data.get("started_at") or 0.0),
            finished_at=float(data.get("finished_at") or 0.0),
            summary=_summary(summary) if summary is not None else None,
            peak=_peak(found) if found is not None else None,
            capacity_qps=_maybe(data.get("capacity_qps")),
            compile_s=_maybe(data.get("compile_s")),
            precision=data.get("precision"),
            versions=dict(data.get("versions") or {}),
            extra=dict(data.get("extra") or {}),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"not a serving outcome: {one_line(exc)}") from None


# Any: a JSON number or null
def _nan(value: Any) -> float:
    return math.nan if value is None else float(value)


def _maybe(value: Any) -> float | None:
    return None if value is None else float(value)


def _summary(d: Mapping[str, Any]) -> Summary:
    from ngb.core.serving.serve_stats import Exceedance, Summary
    from ngb.core.statistics import percentiles

    qs = dict(percentiles.TAILS)
    latency = {
        name: percentiles.PercentileInterval(
            name, qs[name], _nan(p.get("value")), _maybe(p.get("low")), _maybe(p.get("high")),
            int(p.get("n") or 0),
        )
        for name, p in (d.get("latency_ms") or {}).items()
    }  # fmt: skip
    reasons = d.get("reasons")
    if reasons is None:  # written without them: the joined line, split again
        reasons = [r for r in str(d.get("verdict_reason") or "").split("; ") if r]
    ex = d.get("exceedance")
    exceed = (
        Exceedance(float(ex["limit_ms"]), int(ex["over"]), int(ex["n"]), _nan(ex.get("share")),
                   _nan(ex.get("se")), int(ex["blocks"]))
        if ex is not None else None
    )  # fmt: skip
    return Summary(
        scenario=str(d["scenario"]), requests=int(d["requests"]), queries=int(d["queries"]),
        target_qps=_maybe(d.get("target_qps")), offered_qps=_maybe(d.get("offered_qps")),
        issued_qps=_maybe(d.get("issued_qps")), completed_qps=_nan(d.get("completed_qps")),
        wall_s=_nan(d.get("wall_s")), latency=latency,
        issue_lag_ms={k: _nan(v) for k, v in (d.get("issue_lag_ms") or {}).items()},
        loadgen_cpu_percent=_nan(d.get("loadgen_cpu_percent")),
        process_cpu_percent=_nan(d.get("process_cpu_percent")),
        concurrency=int(d.get("concurrency") or 0), mean_batch=_nan(d.get("mean_batch")),
        verdict=str(d["verdict"]), reasons=list(reasons), claimed=d.get("claimed"),
        limit_ms=_maybe(d.get("limit_ms")), over_limit=d.get("over_limit"),
        needed=d.get("needed"), meets=d.get("meets"), exceed=exceed,
        errors=int(d.get("errors") or 0), issuer=str(d.get("issuer") or ""),
    )  # fmt: skip


def _peak(d: Mapping[str, Any]) -> Peak:
    from ngb.core.serving.peak import Peak, Probe

    probes = [
        Probe(int(p["index"]), float(p["qps"]), float(p["duration_s"]), str(p["phase"]),
              _summary(p["summary"]))
        for p in d.get("probes") or []
    ]  # fmt: skip
    high = d.get("high")
    return Peak(
        limit_ms=float(d["limit_ms"]), q=float(d["q"]), qps=_nan(d.get("qps")),
        low=_maybe(d.get("low")), high=math.inf if high is None else float(high),
        method=str(d["method"]), verified_qps=_maybe(d.get("verified_qps")), probes=probes,
        level=float(d.get("level") or 0.95),
    )  # fmt: skip
