"""What the figures read: the report data layer's trials, narrowed and given an uncertainty each.

``FigureData`` is a ``ReportData`` (same "newest result per point" rule, same ``--run`` /
``--device`` checks) that also filters by model family (or block kind, ``conv`` / ``mha``) and --
where the store records it -- by precision, so the report builders reused by the figures (ASE
grid, ranking reversals) see the same trials as the figures drawn directly.

Each trial gets:

- ``ci_half``: the half-width of the 95 % confidence interval of its mean throughput, as
  ``ngb.sweeps.report.derived`` reads it: the stored half-width, else a Student-t interval from the
  stored std and repetitions, else ``None`` (no error bar is drawn -- never a made-up one).
- ``ci_source``: where ``ci_half`` came from, for the captions.
- ``n_reps``, ``precision``, ``verdict``, ``measure`` (the timing settings), read from the full
  ``trials`` row through ``Store.trials`` (which returns every column, so columns added by later
  schemas arrive without a change here).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import TYPE_CHECKING

from ngb.core.base.errors import ConfigError, UnknownNameError
from ngb.sweeps.figures.spec import ErrorBar, FigureTrial
from ngb.sweeps.report import derived
from ngb.sweeps.report.data import ReportData, finite
from ngb.sweeps.rows import StoreRow, TrialRow, integer, mapping, number, text

if TYPE_CHECKING:
    from ngb.sweeps.store.database import Store

# Column names a store may use for a stored interval / verdict / precision (newest schema first).
CI_COLUMNS = ("throughput_ci_half", "throughput_ci_half_width", "ci_half_width")
VERDICT_COLUMNS = ("verdict",)
PRECISION_COLUMNS = ("precision", "precision_resolved")
LEVEL = 0.95
BLOCK_KINDS = ("conv", "mha")  # synthetic blocks: family "block", filterable by kind too


def _first(row: Mapping[str, object], names: tuple[str, ...]) -> object:
    for name in names:
        if row.get(name) is not None:
            return row[name]
    return None


class FigureData(ReportData):
    """Report data narrowed by family and precision, each trial with its interval; see module."""

    _CACHES = (*ReportData._CACHES, "_rows")

    def __init__(
        self,
        store: Store,
        run_id: str | None = None,
        device: str | None = None,
        family: str | None = None,
        precision: str | None = None,
    ):
        super().__init__(store, run_id=run_id, device=device)
        self.family = family
        self.precision = precision
        self._rows: list[FigureTrial] | None = None
        self._details: dict[tuple[str, str, str], StoreRow] | None = None
        self.has_precision = False
        if family is not None or precision is not None:
            self.trials()  # validate the filters now: one clear error before any drawing

    def _full_rows(self) -> dict[tuple[str, str, str], StoreRow]:
        if self._details is None:
            rows = self.store.trials(run_id=self.run_id, device=self.device, status="ok")
            self._details = {(str(r["run_id"]), str(r["device"]), str(r["key"])): r for r in rows}
            # a column, not a value: the store's schema records precision or it does not
            self.has_precision = bool(rows) and any(n in rows[0] for n in PRECISION_COLUMNS)
        return self._details

    def trials(self) -> list[FigureTrial]:
        if self._rows is not None:
            return self._rows
        base = super().trials()
        details = self._full_rows()
        enriched = [self._enrich(t, details.get((t["run_id"], t["device"], t["key"]), {}))
                    for t in base]  # fmt: skip
        if self.family is not None:
            # a family (resnet, deit, block ...) or one block kind (conv, mha), as the console
            # groups them
            kinds = {str(t["model"]) for t in enriched if t.get("model") in BLOCK_KINDS}
            known = sorted({str(t.get("family")) for t in enriched if t.get("family")} | kinds)
            if self.family not in known:
                raise UnknownNameError("model family", self.family, known)
            enriched = [t for t in enriched if self.family in (t.get("family"), t.get("model"))]
        if self.precision is not None:
            known = sorted({str(t["precision"]) for t in enriched if t.get("precision")})
            if not self.has_precision or not known:
                raise ConfigError(
                    "--precision: none of these results records the precision it ran at "
                    "(measured before ngb recorded it; each compiler ran at its default)"
                )
            if self.precision not in known:
                raise UnknownNameError("precision", self.precision, known)
            enriched = [t for t in enriched if t.get("precision") == self.precision]
        self._rows = enriched
        return enriched

    def _enrich(self, trial: TrialRow, full: StoreRow) -> FigureTrial:
        samples = self.samples(trial)
        unstable, disturbed = full.get("unstable"), full.get("disturbed")
        out: FigureTrial = {
            **trial,
            "n_reps": len(samples) or integer(full.get("repetitions")),
            "precision": text(_first(full, PRECISION_COLUMNS)),
            "verdict": text(_first(full, VERDICT_COLUMNS)),
            "unstable": unstable if isinstance(unstable, bool) else None,
            "disturbed": disturbed if isinstance(disturbed, bool) else None,
            "workers": integer(full.get("workers")),
            "measure": mapping(full.get("measure")),
            "ngb_version": text(mapping(full.get("versions")).get("ngb")),
        }
        stored = _first(full, CI_COLUMNS)
        own = derived.mean_of({**full, **out})  # the interval every surface uses
        if finite(stored):
            out["ci_half"], out["ci_source"] = float(stored), "stored"
        elif own.known:
            out["ci_half"], out["ci_source"] = own.half, "t-interval"  # the stored half-width
        else:
            out["ci_half"], out["ci_source"] = None, "none"
        return out


# ---------------------------------------------------------------- propagation


def derived_bar(value: derived.Derived) -> ErrorBar:
    """The error bar of a derived number: the distances to its printed interval's bounds (the
    reports' and the console's; a ratio's or a throughput's lower bound is above zero, so a log
    axis draws it); (0, 0) for a value exact by definition, None when its interval is unknown."""
    if not finite(value.value):
        return None
    if value.estimate.exact:
        return (0.0, 0.0)
    printed = value.printed
    if printed is None:
        return None
    return (max(value.value - printed.low, 0.0), max(printed.high - value.value, 0.0))


# ---------------------------------------------------------------- captions


def ngb_version() -> str:
    try:
        return metadata.version("ngb")
    except metadata.PackageNotFoundError:  # running from a checkout without an install
        return "unknown"


def _span(values: list[int]) -> str:
    if not values:
        return "?"
    lo, hi = min(values), max(values)
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _rule(m: Mapping[str, object], workers: object = None) -> str:
    """One trial's stopping rule in words, from its stored ``MeasureSettings`` (and the worker
    processes it really used, where the store records that, over the setting)."""
    calls, seconds = m.get("min_iters", "?"), m.get("min_duration_s", "?")
    each = f"each repetition >= {calls} calls and >= {seconds} s"
    workers = workers if isinstance(workers, int) else m.get("workers")
    spread = (
        f", over {workers} worker processes" if isinstance(workers, int) and workers > 1 else ""
    )
    if "repetitions" in m and m["repetitions"] is None:  # adaptive: stop on confidence
        level = number(m.get("confidence")) or LEVEL
        target = number(m.get("ci_target")) or 0.0
        return (
            f"stop when the {level:.0%} CI is within ±{target:.0%} of the mean, "
            f"{m.get('min_repetitions', '?')}-{m.get('max_repetitions', '?')} repetitions, "
            f"<= {m.get('max_measure_s', '?')} s; {each}{spread}"
        )
    return f"fixed count, {each}{spread}"


def stopping_rule(trials: Sequence[FigureTrial]) -> str:
    """How many repetitions the points had and the rule(s) that ended them."""
    reps = [n for n in (t.get("n_reps") for t in trials) if isinstance(n, int)]
    rules = sorted({_rule(m, t.get("workers")) for t in trials if (m := t.get("measure"))})
    rule_text = "; ".join(rules) or "settings not recorded"
    return f"Repetitions: {_span(reps)} per point ({rule_text})"


def caption_facts(data: FigureData, trials: Sequence[FigureTrial], heat: bool = False) -> str:
    """One paragraph: device(s), precision, repetitions/stopping rule, intervals, ngb version.
    ``heat``: the figure is heatmaps, whose cells print their interval (no error bars)."""
    devices = sorted({str(t["device"]) for t in trials}) or ([data.device] if data.device else [])
    precisions = sorted({str(t["precision"]) for t in trials if t.get("precision")})
    requested = sorted({str(t.get("measure", {}).get("precision")) for t in trials
                        if t.get("measure", {}).get("precision")})  # fmt: skip
    if precisions:
        precision = ", ".join(precisions)
    elif requested and requested != ["default"]:
        precision = f"{', '.join(requested)} requested (what ran is not recorded by this store)"
    else:
        precision = "not recorded by this store (each compiler's default)"
    sources = {t.get("ci_source") for t in trials}
    if sources == {"energy"}:  # fig13: the bars are the energy's, not the throughput's
        bars = f"Error bars: {LEVEL:.0%} interval of the energy per sample over worker processes"
    elif sources == {"stored"}:
        levels = {number(t.get("measure", {}).get("confidence")) or LEVEL for t in trials}
        level = f"{levels.pop():.0%}" if len(levels) == 1 else "stored-level"
        bars = f"Error bars: stored {level} CI of the mean"
    elif "t-interval" in sources or "stored" in sources:
        bars = f"Error bars: {LEVEL:.0%} Student-t CI of the mean over the repetitions"
    else:
        bars = "No error bars (fewer than 2 repetitions stored)"
    if "none" in sources and len(sources) > 1:
        bars += "; points with fewer than 2 repetitions have none"
    if heat:
        bars = (
            "Cells: value ± 95 % interval from each result's interval (no error bars in a "
            "heatmap); a value without ± has no interval (fewer than 2 repetitions)"
        )
    invalid = sum(1 for t in trials if str(t.get("verdict") or "").upper().startswith("INVALID"))
    unstable = sum(1 for t in trials if t.get("unstable"))
    disturbed = sum(1 for t in trials if t.get("disturbed"))
    flags = []
    if invalid:
        flags.append(f"{invalid} INVALID")
    if disturbed:
        flags.append(f"{disturbed} disturbed by other processes")
    if unstable:
        flags.append(f"{unstable} unstable (CoV above threshold)")
    scope = [f"Source: run {data.run_id}" if data.run_id else "Source: all runs, newest per point"]
    if data.family:
        scope.append(f"family {data.family}")
    made_by = {str(t["ngb_version"]) for t in trials if t.get("ngb_version")}
    version = ngb_version() + (f" (measured with {', '.join(sorted(made_by))})" if made_by else "")
    parts = [
        f"Device: {', '.join(devices) or '-'}",
        f"Precision: {precision}",
        stopping_rule(trials),
        bars,
        f"Trials: {len(trials)}" + (f" ({', '.join(flags)})" if flags else ""),
        "; ".join(scope),
        f"Made by ngb {version}",
    ]
    return ". ".join(parts) + "."
