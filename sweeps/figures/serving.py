"""Fig. 14: latency under load -- p99 with its 95 % interval, and p50, against the offered rate,
a line per compiler (issue 43).

Drawn from the stored serving runs (``serving``: ``ngb serve --db``, one row per run at one
offered rate, each probe of a peak search included), in the figures' scope (run, device, model
family, precision), server scenario only (the other scenarios offer no rate). One panel per
point (device, model, batch); x: the offered QPS, y: ms, both on log axes. p99: solid, its bar
the 95 % interval exactly as ``ngb report serving`` prints it (``printed_bounds``); a p99
without an upper bound (too few requests past it, or stretches of the run that differ too much)
has no bar. Hollow: the run is INVALID (that, a rate not achieved, a large issue lag, failed
calls). p50: dashed, the same colour, its interval likewise. The grey dashed line: the p99 limit
the panel's runs were held to, where they share one; each peak search in scope is a note of the
caption, as every surface prints QPS* (``ngb.core.serving.peak.star_text``: an unverified lower
bound is said in words). Numbers straight from the table, never recomputed.

The caption's facts are the runs' (``FigureSpec.facts``), not the trials': how a point was
measured, the requests per run, the intervals, the INVALID count, the scope.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ngb.sweeps.figures.data import FigureData, ngb_version
from ngb.sweeps.figures.spec import ErrorBar, FigureSpec, Line, LinePanel
from ngb.sweeps.report.numbers import printed_bounds
from ngb.sweeps.report.paper import compiler_order
from ngb.sweeps.report.serving import serving_rows
from ngb.sweeps.rows import StoreRow, integer, number

NAME = "fig14-serving-latency"
COLUMNS = (
    "run_id, device, model, width, depth, batch, compiler, precision, target, scenario, probe, "
    "offered_qps, requests, concurrency, max_batch, burstiness, latency_p50_ms, "
    "latency_p50_lo_ms, latency_p50_hi_ms, latency_p99_ms, latency_p99_lo_ms, latency_p99_hi_ms, "
    "limit_ms, verdict"
)
PEAK_COLUMNS = (
    "run_id, device, model, width, depth, batch, compiler, precision, target, scenario, limit_ms, "
    "q, peak_qps, peak_low, peak_high, probes"
)
#: settings that make two runs of one compiler different lines where they differ in a panel
VARIANTS = (
    ("precision", ""),
    ("max_batch", "max batch "),
    ("concurrency", "in flight "),
    ("burstiness", "burstiness "),
)

Key = tuple[str, str, str]  # device, point, target


def _point(r: Mapping[str, object]) -> str:
    model = str(r["model"])
    if r.get("width") is not None:
        model += f"{r['width']}x{r.get('depth') or 1}"
    return f"{model}/b{r['batch']}"


def _key(r: Mapping[str, object]) -> Key:
    return (str(r["device"]), _point(r), str(r.get("target") or ""))


def _in_scope(data: FigureData, r: Mapping[str, object]) -> bool:
    """Server-scenario rows of the figures' family and precision."""
    if r.get("scenario") != "server":
        return False
    if data.precision is not None and r.get("precision") != data.precision:
        return False
    if data.family is not None:
        from ngb.sweeps.store.ingest import model_family

        model = str(r["model"])
        return data.family in (model, model_family(model))
    return True


def _bar(value: float | None, low: object, high: object) -> ErrorBar:
    """The distances to the interval's bounds as ``ngb report serving`` prints them; None
    without both bounds."""
    lo, hi = number(low), number(high)
    if value is None or lo is None or hi is None:
        return None
    printed = printed_bounds(value, lo, hi)
    if printed is None:
        return None
    return (max(value - printed.low, 0.0), max(printed.high - value, 0.0))


def _label(r: Mapping[str, object], varying: Sequence[tuple[str, str]]) -> str:
    extra = [f"{prefix}{r.get(name) if r.get(name) is not None else '?'}"
             for name, prefix in varying]  # fmt: skip
    return " ".join([str(r["compiler"]), *extra])


def _lines(rows: Sequence[StoreRow]) -> list[Line]:
    """Per compiler (and setting that differs within the panel): p99 solid, p50 dashed."""
    varying = [(n, p) for n, p in VARIANTS if len({r.get(n) for r in rows}) > 1]
    groups: dict[str, list[StoreRow]] = {}
    for r in sorted(rows, key=lambda r: compiler_order(str(r["compiler"]))):
        groups.setdefault(_label(r, varying), []).append(r)
    out = []
    for label, mine in groups.items():
        mine = sorted(mine, key=lambda r: number(r["offered_qps"]) or 0.0)
        compiler = str(mine[0]["compiler"])
        for tail, dashed in (("p99", False), ("p50", True)):
            shown = [r for r in mine if number(r[f"latency_{tail}_ms"]) is not None]
            values = [number(r[f"latency_{tail}_ms"]) for r in shown]
            out.append(
                Line(
                    f"{label} {tail}",
                    [float(number(r["offered_qps"]) or 0.0) for r in shown],
                    [float(v or 0.0) for v in values],
                    [
                        _bar(v, r[f"latency_{tail}_lo_ms"], r[f"latency_{tail}_hi_ms"])
                        for v, r in zip(values, shown, strict=True)
                    ],  # fmt: skip
                    [r.get("verdict") != "VALID" for r in shown],
                    compiler,
                    dashed=dashed,
                )
            )
    return [ln for ln in out if ln.xs]


def latency_vs_load(data: FigureData) -> FigureSpec:
    """The figure (see the module docstring)."""
    rows = [r for r in serving_rows(data, "serving", COLUMNS) if _in_scope(data, r)]
    spec = FigureSpec(
        NAME,
        "Fig. 14: latency under load vs offered rate",
        "Latency counted from each request's scheduled time (open loop: a stall delays every "
        "request scheduled during it) against the offered queries per second, per compiler, "
        "log-log axes: p99 solid with its 95 % interval, p50 dashed; grey dashed line: the p99 "
        "limit the runs were held to.",
    )
    if not rows:
        spec.notes.append("no serving runs in scope (`ngb serve MODEL -c A,B --db PATH` adds them)")
        return spec
    panels: dict[Key, list[StoreRow]] = {}
    for r in rows:
        panels.setdefault(_key(r), []).append(r)
    several_devices = len({k[0] for k in panels}) > 1
    several_targets = len({k[2] for k in panels}) > 1
    for key in sorted(panels):
        device, point, target = key
        mine = panels[key]
        extra = [device] * several_devices + [target] * several_targets
        title = point + (f" [{', '.join(extra)}]" if extra else "")
        limits = {number(r.get("limit_ms")) for r in mine} - {None}
        spec.panels.append(
            LinePanel(
                title, _lines(mine), "offered QPS", "latency ms", logx=True, logy=True,
                reference=limits.pop() if len(limits) == 1 else None, tick_every_x=False,
            )
        )  # fmt: skip
    spec.notes += _peak_notes(data, set(panels))
    spec.facts = serving_facts(data, rows)
    return spec


def _peak_notes(data: FigureData, keys: set[Key]) -> list[str]:
    """Each peak search of a panel drawn, as every surface prints QPS*."""
    from ngb.core.serving.peak import star_text

    notes = []
    for r in serving_rows(data, "serving_peaks", PEAK_COLUMNS):
        if _key(r) not in keys or not _in_scope(data, r):
            continue
        qps, limit = number(r["peak_qps"]), number(r["limit_ms"])
        if qps is None or limit is None:
            continue
        text = star_text(qps, number(r["peak_low"]), number(r["peak_high"]), limit,
                         number(r.get("q")) or 0.99)  # fmt: skip
        notes.append(f"{_point(r)} {r['compiler']}: {text} ({r['probes']} probes)")
    return notes


def serving_facts(data: FigureData, rows: Sequence[StoreRow]) -> str:
    """The caption's facts about the runs drawn (see the module docstring)."""
    from ngb.core.serving.serve_stats import BLOCKS

    devices = sorted({str(r["device"]) for r in rows})
    precisions = sorted({str(r["precision"]) for r in rows if r.get("precision")})
    stated = ", ".join(precisions) if precisions else "not stated by the runtimes"
    if precisions and any(not r.get("precision") for r in rows):
        stated += " (some runtimes state none)"
    requests = [n for n in (integer(r.get("requests")) for r in rows) if n is not None]
    span = (
        f"{min(requests)}" if requests and min(requests) == max(requests)
        else f"{min(requests)}-{max(requests)}" if requests else "?"
    )  # fmt: skip
    invalid = sum(1 for r in rows if r.get("verdict") != "VALID")
    probes = sum(1 for r in rows if r.get("probe") is not None)
    runs = f"Runs: {len(rows)}" + (f", {probes} of them peak-search probes" if probes else "")
    runs += f" ({invalid} INVALID, drawn hollow)" if invalid else ""
    scope = f"Source: run {data.run_id}" if data.run_id else "Source: all runs"
    if data.family:
        scope += f"; family {data.family}"
    parts = [
        f"Device: {', '.join(devices)}",
        f"Precision: {stated}",
        "Each point: one server-scenario run at its offered rate (ngb serve: arrivals from a "
        f"seeded schedule), {span} requests",
        f"Error bars: 95 % interval of the percentile over {BLOCKS} stretches of each run, as "
        "`ngb report serving` prints it; a p99 with no upper bound has none",
        runs,
        scope,
        f"Made by ngb {ngb_version()}",
    ]
    return ". ".join(parts) + "."
