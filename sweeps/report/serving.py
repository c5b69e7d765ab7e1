"""``ngb report serving``: what ``ngb serve --db`` stored, compilers side by side (issue 43).

- Peak QPS under a p99 bound: one row per peak search (``serving_peaks``): QPS* [its 95 %
  interval] -- "6.9 below 7.8 (no lower bound): no VALID probe met p99 <= 30 ms" where no probe
  verified a rate, in ``ngb.core.serving.peak.star_text``'s words as every surface says it, never a
  bracket from 0 -- how it was found (the probes it took and the
  seconds) and the capacity the closed-loop start measured. The rows of one point (device,
  model, batch, scenario, limit) follow each other, one per compiler, so the compilers read side
  by side.
- Serving runs: every run at one offered rate (``serving``: a single ``ngb serve`` or one probe
  of a search): offered and achieved rates, p50 / p99 [their intervals] counted from each
  request's *scheduled* time (a stall is not hidden), the issuing thread's lag p99, and the
  verdict with its reason. The p99 an interval cannot bound (too few requests beyond it for
  LoadGen's early-stopping count) is shown with "no bound".

Rows come straight from the two tables (``ngb.sweeps.store.serving``), filtered by the report's
run and device; the numbers are the ones ``ngb serve`` printed, never recomputed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ngb.core.serving.peak import star_text
from ngb.sweeps.report.data import Cell, Report, ReportData, Table
from ngb.sweeps.report.paper import compiler_order
from ngb.sweeps.rows import StoreRow, number

_POINT = "device, model, width, depth, batch, compiler, precision, scenario"
PEAK_COLUMNS = (
    f"run_id, {_POINT}, limit_ms, q, peak_qps, peak_low, peak_high, method, probes, search_s, "
    "capacity_qps"
)
RUN_COLUMNS = (
    f"run_id, {_POINT}, probe, phase, offered_qps, completed_qps, duration_s, requests, "
    "latency_p50_ms, latency_p50_lo_ms, latency_p50_hi_ms, latency_p99_ms, latency_p99_lo_ms, "
    "latency_p99_hi_ms, issue_lag_p99_ms, verdict, verdict_reason"
)
_NOTE = (
    "latency counted from each request's scheduled time (open loop: a stall delays every request "
    "scheduled during it); [low, high] = 95 % interval; QPS* = the offered rate at which the p99 "
    "reaches the limit (method line: a fit pooling the probes near it; bracket: from the highest "
    "rate a VALID probe verified, its p99 upper bound within the limit, to the lowest that "
    "missed); 'no lower bound' = no probe verified any rate, so QPS* is only the sample p99s' "
    "estimate, below the rate shown; 'no bound' = the p99 has no upper bound, and the verdict "
    "says why (too few requests past it for LoadGen's early-stopping count, or stretches of the "
    "run that differ too much)"
)


def serving(data: ReportData) -> Report:
    """The peak searches and serving runs in scope (see module)."""
    report = Report("serving", "Serving: p99 under load and the peak QPS a latency bound allows")
    peaks = serving_rows(data, "serving_peaks", PEAK_COLUMNS)
    runs = serving_rows(data, "serving", RUN_COLUMNS)
    if not peaks and not runs:
        report.notes.append(
            "no serving runs in scope (`ngb serve MODEL -c A,B --db PATH` adds them)"
        )
        return report
    if peaks:
        report.tables.append(_peak_table(peaks))
    if runs:
        report.tables.append(_run_table(runs))
    report.notes.append(_NOTE)
    return report


def serving_rows(data: ReportData, table: str, columns: str) -> list[StoreRow]:
    """``table``'s ``columns`` (``serving`` or ``serving_peaks``) in the report's run and device
    scope, oldest first."""
    clauses, params = [], []
    if data.run_id is not None:
        clauses.append("run_id = ?")
        params.append(data.run_id)
    if data.device is not None:
        clauses.append("device = ?")
        params.append(data.device)
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    names, rows = data.store.select(
        f"SELECT {columns} FROM {table}{where} ORDER BY created_at",  # noqa: S608 - fixed names
        params,
    )
    return [dict(zip(names, r, strict=True)) for r in rows]


def _sorted(rows: Sequence[StoreRow], *point: str) -> list[StoreRow]:
    """One point's compilers next to each other, in the reports' compiler order."""
    return sorted(
        rows, key=lambda r: (*(str(r.get(p)) for p in point), compiler_order(str(r["compiler"])))
    )


def _point_label(r: Mapping[str, object]) -> str:
    model = str(r["model"])
    if r.get("width") is not None:
        model += f"{r['width']}x{r.get('depth') or 1}"
    return f"{model}/b{r['batch']}"


def _rounded(value: object, digits: int) -> float | None:
    v = number(value)
    return None if v is None else round(v, digits)


def _interval(value: object, low: object, high: object, note: str = "") -> Cell | None:
    v = number(value)
    if v is None:
        return None
    return Cell(v, None, note, number(low), number(high))


def _star(r: Mapping[str, object]) -> Cell | None:
    """QPS* [its interval]; a missing bound in the words every surface uses
    (``ngb.core.serving.peak.star_text``, after the value), never a bracket from 0 (no probe
    verified a rate: ``ngb.core.serving.peak``)."""
    value, low, high = (number(r[n]) for n in ("peak_qps", "peak_low", "peak_high"))
    if value is None:
        return None
    if low is not None and low > 0 and high is not None:
        return Cell(value, None, "", low, high)
    # a row stored before ``low`` could be None has 0 there: star_text reads it the same
    limit, q = number(r["limit_ms"]) or 0.0, number(r.get("q")) or 0.99
    return Cell(value, note=star_text(value, low, high, limit, q, value_shown=True))


def _peak_table(peaks: Sequence[StoreRow]) -> Table:
    table = Table(
        "Peak QPS under a p99 bound (ngb serve --find-peak)",
        [
            "device",
            "point",
            "scenario",
            "p99 limit ms",
            "compiler",
            "precision",
            "QPS*",
            "method",
            "probes",
            "search s",
            "capacity QPS",
        ],  # fmt: skip
    )
    for r in _sorted(peaks, "device", "model", "width", "depth", "batch", "scenario", "limit_ms"):
        table.rows.append(
            [
                r["device"],
                _point_label(r),
                r["scenario"],
                number(r["limit_ms"]),
                r["compiler"],
                r.get("precision") or "?",
                _star(r),
                r.get("method") or "",
                r["probes"],
                _rounded(r["search_s"], 1),
                _rounded(r["capacity_qps"], 1),
            ]
        )
    return table


def _run_table(runs: Sequence[StoreRow]) -> Table:
    table = Table(
        "Serving runs: latency from the scheduled time at each offered rate",
        [
            "device",
            "point",
            "scenario",
            "compiler",
            "probe",
            "offered QPS",
            "achieved QPS",
            "p50 ms",
            "p99 ms",
            "issue lag p99 ms",
            "verdict",
        ],  # fmt: skip
    )
    rows = _sorted(runs, "device", "model", "width", "depth", "batch", "scenario")
    for r in rows:
        bounded = r.get("latency_p99_hi_ms") is not None
        verdict = str(r.get("verdict") or "")
        if verdict != "VALID" and r.get("verdict_reason"):
            verdict += f" ({r['verdict_reason']})"
        table.rows.append(
            [
                r["device"],
                _point_label(r),
                r["scenario"],
                r["compiler"],
                "-" if r.get("probe") is None else f"{r['probe']} {r.get('phase') or ''}".strip(),
                _rounded(r["offered_qps"], 1),
                _rounded(r["completed_qps"], 1),
                _interval(r["latency_p50_ms"], r["latency_p50_lo_ms"], r["latency_p50_hi_ms"]),
                _interval(
                    r["latency_p99_ms"],
                    r["latency_p99_lo_ms"],
                    r["latency_p99_hi_ms"],
                    "" if bounded else "no bound",
                ),
                _rounded(r["issue_lag_p99_ms"], 3),
                verdict,
            ]
        )
    return table
