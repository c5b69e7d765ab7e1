"""A run's verdicts in one line, and what to change when most trials are INVALID.

Why: a run that ends "122 ok, 0 failed" reads as 122 facts. The count that matters is how many
trials met their confidence target, and, when most did not, whether more time would fix it (a
few more repetitions) or the device is too noisy for the target (its repetitions spread so widely
that the target needs hundreds). ``ngb run`` and ``ngb attach`` print this line under the run's
table.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping

from ngb.core.records.trial_extra import from_json
from ngb.core.statistics.autocorrelation import long_run_factor
from ngb.core.statistics.stopping import OFFERED_TARGETS, repetitions_for_cov
from ngb.sweeps.rows import integer, mapping, number

WIDE = "wider than the target"
DISTURBED = "disturbed"


def _settings(row: Mapping[str, object]) -> dict[str, object]:
    measure = row.get("measure")
    if isinstance(measure, str):
        try:
            measure = json.loads(measure)
        except ValueError:
            return {}
    return dict(mapping(measure))


def _kind(reason: str) -> str:
    """What an INVALID reason is about: the words before its first ":" ("two levels between
    processes: 38,000/s ..." -> "two levels between processes")."""
    return reason.split(":", 1)[0].strip() or "no reason recorded"


def invalid_causes(rows: Iterable[Mapping[str, object]]) -> list[str]:
    """Why the INVALID trials among ``rows`` are INVALID, counted one way for every surface (the
    run's summary line and the reports' footnote): "3 with a CI wider than the target",
    "1 disturbed by other processes", "2 (two levels between processes)"."""
    reasons = [
        str(r.get("verdict_reason") or "")
        for r in rows
        if r.get("verdict") and r["verdict"] != "VALID" and r.get("status", "ok") == "ok"
    ]
    wide = sum(1 for why in reasons if WIDE in why)
    disturbed = sum(1 for why in reasons if why.startswith(DISTURBED) and WIDE not in why)
    other: dict[str, int] = {}
    for why in reasons:
        if WIDE not in why and not why.startswith(DISTURBED):
            other[_kind(why)] = other.get(_kind(why), 0) + 1
    causes = [
        f"{count} {what}"
        for count, what in (
            (wide, "with a CI wider than the target"),
            (disturbed, "disturbed by other processes"),
        )
        if count
    ]
    return causes + [f"{count} ({kind})" for kind, count in other.items()]


def summary_line(rows: Iterable[Mapping[str, object]]) -> str | None:
    """One line on the verdicts of a run's measured trials (rows of the ``trials`` table);
    None when no trial has a verdict (nothing measured, or results from before verdicts)."""
    judged = [r for r in rows if r.get("status") == "ok" and r.get("verdict")]
    if not judged:
        return None
    valid = sum(1 for r in judged if r["verdict"] == "VALID")
    wide = [r for r in judged if r["verdict"] != "VALID" and WIDE in str(r.get("verdict_reason"))]
    text = f"verdicts: {valid} of {len(judged)} trials VALID"
    causes = invalid_causes(judged)
    if causes:
        text += f"; INVALID: {', '.join(causes)}"
    return text + _advice(wide, len(judged)) + offer_text(reached_target(judged))


#: a target is offered when it would hold this share of the trials that were only too wide
OFFER_SHARE = 0.9


def reached_target(rows: Iterable[Mapping[str, object]]) -> tuple[float, int, int] | None:
    """The target this run's budget reached on this machine: the smallest of
    ``OFFERED_TARGETS`` within which ``OFFER_SHARE`` of the trials that were INVALID only for
    their width ended (their stated interval, ``throughput_ci_half`` over the mean), as
    (target, trials VALID at it, trials judged); None when fewer than half were too wide (as
    for ``_advice``), or no offered target would hold them. Issue 44: 0 of 30 trials were
    VALID at the default +-2 % on a VM with 6-22 % between processes; "INVALID at +-2 %, VALID
    at +-8 %" is something to act on. A trial disturbed, drifting or on two levels stays
    INVALID at any width."""
    judged = [r for r in rows if r.get("status") == "ok" and r.get("verdict")]
    valid = sum(1 for r in judged if r["verdict"] == "VALID")
    widths = []
    for r in judged:
        if r["verdict"] == "VALID" or WIDE not in str(r.get("verdict_reason")):
            continue
        half, mean = number(r.get("throughput_ci_half")), number(r.get("throughput_mean"))
        widths.append(half / mean if half is not None and mean and mean > 0 else math.inf)
    if not widths or len(widths) * 2 < len(judged):  # mostly VALID: nothing to change
        return None
    current = number(_settings(judged[0]).get("ci_target")) or 0.02
    for target in OFFERED_TARGETS:
        held = sum(1 for w in widths if w <= target)
        if target > current and held >= OFFER_SHARE * len(widths):
            return target, valid + held, len(judged)
    return None


def offer_text(reached: tuple[float, int, int] | None) -> str:
    """``reached_target``'s offer as the run's summary line and the reports' note say it."""
    if reached is None:
        return ""
    target, valid, total = reached
    return (
        f". At ±{target:.0%} (what this budget reached here) {valid} of {total} would be "
        f"VALID: `ci_target = {target:g}` in the sweep's [measure] (`ngb measure --ci-target "
        f"{target:g}`)"
    )


def _advice(wide: list[Mapping[str, object]], total: int) -> str:
    """When most trials were too wide: the processes (or, for results measured before intervals
    were built over processes, the repetitions) their typical spread needs."""
    if len(wide) * 2 < total:
        return ""
    process_covs = [cov for r in wide if (cov := _process_cov(r)) is not None]
    if process_covs:
        cov = statistics.median(process_covs)
        settings = _settings(wide[0])
        target = number(settings.get("ci_target")) or 0.02
        needed = repetitions_for_cov(cov, target, number(settings.get("confidence")) or 0.95)
        most = settings.get("max_workers")
        limit = f" (at most {most})" if most and settings.get("repetitions") is None else ""
        return (
            f". Their worker processes' means spread by a median CoV of {cov:.1%}: "
            f"±{target:.1%} needs ~{needed} processes per trial{limit}. Quiet the device "
            "(`ngb bench noise` measures its noise floor), raise max_workers/max_measure_s, "
            "or widen ci_target"
        )
    covs = [cov for r in wide if (cov := number(r.get("throughput_cov"))) is not None]
    if not covs:
        return ""
    cov = statistics.median(covs)
    settings = _settings(wide[0])
    target = number(settings.get("ci_target")) or 0.02
    # Correlated repetitions are worth less each (ngb.core.statistics.autocorrelation): as if the
    # spread were wider.
    rhos = [rho for r in wide if (rho := _serial_rho(r)) is not None]
    rho = statistics.median(rhos) if rhos else 0.0
    spread = cov * math.sqrt(long_run_factor(rho))
    needed = repetitions_for_cov(spread, target, number(settings.get("confidence")) or 0.95)
    serial = f", serially correlated (median lag-1 {rho:.2f})" if rho >= 0.05 else ""
    allowed = settings.get("max_repetitions")
    repetitions = [n for r in wide if (n := integer(r.get("repetitions")))]
    ran = f"; they ran a median of {statistics.median(repetitions):g}" if repetitions else ""
    limit = f" (at most {allowed})" if allowed and settings.get("repetitions") is None else ""
    return (
        f". Their repetitions spread by a median CoV of {cov:.1%}{serial}: ±{target:.1%} needs "
        f"~{needed} repetitions per trial{ran}{limit}. Quiet the device (`ngb bench noise` "
        "measures its noise floor), raise max_measure_s/max_repetitions, or widen ci_target"
    )


def _process_cov(row: Mapping[str, object]) -> float | None:
    """CoV of a trial's worker-process means (None with fewer than two processes)."""
    workers = from_json(row.get("extra")).get("workers")
    if not isinstance(workers, list):
        return None
    means = [m for w in workers if (m := number(mapping(w).get("mean"))) is not None]
    if len(means) < 2 or statistics.fmean(means) <= 0:
        return None
    return statistics.stdev(means) / statistics.fmean(means)


def _serial_rho(row: Mapping[str, object]) -> float | None:
    """The lag-1 autocorrelation the trial's interval was widened for (None before it was kept)."""
    rho = mapping(from_json(row.get("extra")).get("measure")).get("serial_rho")
    return float(rho) if isinstance(rho, int | float) else None
