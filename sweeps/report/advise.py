"""``ngb advise``: the configuration to deploy on a device, from the results in the store.

For each model and device in scope, every measured configuration (compiler, precision, batch,
optimisation: the newest result per point, as the reports read them) is checked against the
user's constraints -- p99 latency <= ``p99_ms`` (its 95 % upper bound; the server scenario's
p99 under load where ``ngb serve --db`` stored one for the configuration, else the timed loop's
per-call p99 on an idle device, and each answer says which: ``_check_p99``),
max abs error against torch eager <= ``max_err`` (the baseline itself counts as 0), peak memory
<= ``max_mem_mb`` (GPU memory on a GPU target, resident memory on a CPU), top-1 accuracy drop
<= ``max_drop`` percentage points (``_check_drop``, issue 42) -- and the ones that pass are
ranked by the objective:

- throughput: samples/s, higher is better;
- cost: cost per million inferences (``ngb.devices.pricing``; the price of the inventory entry
  a result ran under, so a Slurm node's result -- stored as ``gpu07@a100`` -- is priced as its
  Slurm entry: ``ReportData.price_for``); on one device the price is a
  constant factor, so the ranking and the ties are throughput's; across devices the ratio of
  the two costs (prices and both throughputs);
- energy: joules per sample measured on the device, lower is better. Configurations without a
  meter reading are left out (never guessed).

Every tie is the reports' one rule: two choices are tied when the printed 95 % interval of their
ratio (speed-up, cost ratio, energy ratio: ``ngb.sweeps.report.derived``) includes 1 -- never an
overlap of two intervals, which calls a 1.18 [1.09, 1.26] cost ratio a tie.

The numbers come from the report layer (``report_paper.throughput_cell``,
``report_deploy.cost_cell`` / ``energy_cell``), so ``ngb advise`` and ``ngb report energy`` print
the same values. A choice whose recorded precision is not fp32 is called out with its error.
When nothing passes, the nearest configuration is named with the constraints it misses (the
smallest sum of relative excesses; an unrecorded value counts as a full miss). A tie comes with
the sweep that would settle it: the tied configurations measured again to a tighter interval.

The accuracy gate (``--max-drop``, in percentage points of top-1: ``1``, ``1%`` and ``0.5%``;
absolute, so 97.2 % -> 96.2 % is a drop of 1 whatever the accuracy) judges each row's drop on
the labelled set its accuracy pass ran (``extra["accuracy"]``,
``ngb.core.statistics.accuracy_stats``):

- a ``none`` row: its drop against eager fp32 on the same samples (the pass's own paired record);
- an optimised row (``prune-l1-0.9``, ``int8-cal``...): paired (McNemar, per-sample bits) against
  the same model's ``none`` row under the same compiler on the same device (the same precision
  and batch where stored), and against that row's eager fp32 answers -- both must be within the
  bound, so neither a compiler's own loss nor the optimisation's hides behind the other.

The rule: a row is refused when a drop's point estimate is beyond the bound (strictly); where it
is within but its 95 % interval reaches past the bound, it passes flagged (the interval
straddles the bound: more labelled samples would settle it). A row with no accuracy measured --
no pass asked, a pass that failed (its one-line error is quoted), no ``none`` row with accuracy
to pair an optimised row with -- is refused too: a gate never passes what it cannot judge. The
answer names every row the gate refused and why, one line each, best-ranked first.

Each model and device is read with a query of its own (``ReportData.trials_of``); past
``ONE_BY_ONE`` answers (``--sweep`` over a store of many models) all are read in one pass over
the trials, sorted by model and device (``ReportData.streamed``), rather than a query of the
whole store for each. A ``--group`` member that is a Slurm entry answers for the nodes its
results are stored under (``ReportData.devices_under``).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ngb.core.base.errors import ConfigError
from ngb.core.records.trial_extra import from_json
from ngb.core.records.types import BLOCK_MODELS, PRECISIONS
from ngb.core.serving.peak import star_text
from ngb.core.statistics import accuracy_stats, percentiles
from ngb.sweeps.report import derived
from ngb.sweeps.report.data import Cell, ReportData, finite, precision_of
from ngb.sweeps.report.deploy import cost_cell, energy_cell
from ngb.sweeps.report.numbers import format_interval, format_value
from ngb.sweeps.report.paper import throughput_cell
from ngb.sweeps.rows import StoreRow, TrialRow, mapping

OBJECTIVES = ("throughput", "energy", "cost")
#: answers read a query each; more are read in one pass over the trials (``advise``)
ONE_BY_ONE = 16


@dataclass(frozen=True)
class Constraints:
    p99_ms: float | None = None
    max_err: float | None = None
    max_mem_mb: float | None = None
    objective: str = "throughput"
    max_drop: float | None = None  # top-1 drop, percentage points (``parse_drop``)

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ConfigError(
                f"unknown objective {self.objective!r}; valid: {', '.join(OBJECTIVES)}"
            )
        for name in ("p99_ms", "max_err", "max_mem_mb"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"{name.replace('_', '-')} must be a number >= 0, got {value}")
        if self.max_drop is not None:
            parse_drop(self.max_drop)  # the same one line as the option's


#: ``--max-drop``'s text: a plain decimal number, an optional ``%``, spaces (no sign, no nan/inf)
_DROP_TEXT = re.compile(r" *((?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?) *%? *")


def parse_drop(value: str | float) -> float:
    """``--max-drop``'s bound in percentage points of top-1: ``1``, ``1%`` and ``0.5%`` (a point
    is absolute: 97.2 % -> 96.2 % drops 1). NaN, the infinities, a sign, anything outside 0..100
    and any other text are refused in one line."""
    number = math.nan
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str) and (found := _DROP_TEXT.fullmatch(value)):
        number = float(found.group(1))
    if not (math.isfinite(number) and 0.0 <= number <= 100.0):
        shown = value if isinstance(value, str) else f"{value}"
        raise ConfigError(
            "max-drop must be percentage points of top-1 accuracy from 0 to 100 "
            f"(1, 1% or 0.5%), got {shown!r}"
        )
    return number


def _points(bound: float) -> str:
    return f"{bound:g} point" + ("" if bound == 1 else "s")


@dataclass
class Candidate:
    row: TrialRow
    throughput: Cell
    cost: Cell
    energy: Cell  # mJ per sample
    misses: list[str] = field(default_factory=list)  # constraints it does not meet, in words
    excess: float = 0.0  # sum of relative excesses over the limits (0 = meets them all)
    p99_source: str = ""  # which p99 the limit was checked on, in words
    refused_for: str = ""  # why the accuracy gate refused it (``--max-drop``), in words
    accuracy: str = ""  # its accuracy as the gate judged it, in words (shown for the choice)

    @property
    def label(self) -> str:
        r = self.row
        opt = "" if (r.get("optimisation") or "none") == "none" else f" {r.get('optimisation')}"
        ran = precision_of(r)
        precision = "" if ran == "?" else f" {ran}"  # "?": stored before precision was recorded
        return f"{r['compiler']}{precision} b{r['batch']}{opt}"

    def value(self, objective: str) -> Cell:
        return {"throughput": self.throughput, "cost": self.cost, "energy": self.energy}[objective]


@dataclass
class Advice:
    device: str
    model: str
    objective: str
    choice: Candidate | None = None
    tied: list[Candidate] = field(default_factory=list)
    nearest: Candidate | None = None
    lines: list[str] = field(default_factory=list)
    settle: str | None = None


def _memory(row: TrialRow) -> float | None:
    value = row.get("gpu_mem_mb") if row.get("target") == "cuda" else row.get("peak_rss_mb")
    return _number(value)


def _number(value: object) -> float | None:
    """A finite number as a float, else None (unrecorded, NaN)."""
    return float(value) if finite(value) else None


def _check(
    c: Candidate,
    limits: Constraints,
    baseline: str,
    data: ReportData,
    rows: list[TrialRow] | None = None,
) -> None:
    """The constraints on ``c``; ``rows``: its model's rows on its device (the accuracy gate
    pairs an optimised row with the ``none`` row among them)."""
    row = c.row
    if limits.max_drop is not None:
        _check_drop(c, limits.max_drop, rows if rows is not None else [row])
    err = 0.0 if row["compiler"] == baseline else row.get("max_abs_err")
    if limits.p99_ms is not None:
        runs, peaks = data.serving(str(row["device"]))
        served = [r for r in runs if _same_point(row, r)]
        if served:
            _check_server_p99(c, limits.p99_ms, served, [p for p in peaks if _same_point(row, p)])
        else:
            _check_p99(c, limits.p99_ms)
            c.p99_source = "p99 per call on an idle device (no server-scenario run stored)"
    checks = [
        ("max abs err", _number(err), limits.max_err, ""),
        ("memory", _memory(row), limits.max_mem_mb, " MB"),
    ]
    for name, value, limit, unit in checks:
        if limit is None:
            continue
        if value is None:
            c.misses.append(f"{name} not recorded")
            c.excess += 1.0
        elif value > limit:
            c.misses.append(f"{name} {value:.3g}{unit} > {limit:g}{unit}")
            c.excess += (value - limit) / limit if limit > 0 else 1.0


def _check_p99(c: Candidate, limit: float) -> None:
    """p99 per call <= ``limit``, decided on the upper bound of its 95 % order-statistic
    interval (``ngb.core.statistics.percentiles``): a p99 that may exceed the limit does not pass. A
    trial with too few calls to bound its p99 misses, saying so; a result stored before the bounds
    were (no call count) is held to its sample p99, as it was then."""
    row = c.row
    calls, high = _number(row.get("latency_calls")), _number(row.get("latency_p99_hi_ms"))
    point = _number(row.get("latency_p99_ms"))
    if calls is not None and high is None:
        c.misses.append(
            f"p99 not claimed: {percentiles.why_unclaimed(int(calls), 0.99)} (more calls or "
            "processes: raise [measure] max_measure_s or repetitions)"
        )
        c.excess += 1.0
    elif high is not None:
        if high > limit:
            seen = f"p99 {point:.3g}ms, " if point is not None else ""
            c.misses.append(f"p99 may be {high:.3g}ms > {limit:g}ms ({seen}95 % upper bound)")
            c.excess += (high - limit) / limit if limit > 0 else 1.0
    elif point is None:
        c.misses.append("p99 not recorded")
        c.excess += 1.0
    elif point > limit:
        c.misses.append(f"p99 {point:.3g}ms > {limit:g}ms")
        c.excess += (point - limit) / limit if limit > 0 else 1.0


def _accuracy(row: TrialRow) -> Mapping[str, object]:
    return mapping(from_json(row.get("extra")).get("accuracy"))


@dataclass(frozen=True)
class _Drop:
    """One judged drop: points (percentage points of top-1) with its 95 % interval."""

    points: float
    low: float
    high: float
    against: str  # what it is measured against, in words


def _drop_of(record: Mapping[str, object], against: str) -> _Drop | None:
    drop, ci = _number(record.get("drop")), record.get("drop_ci")
    if drop is None or not isinstance(ci, list) or len(ci) != 2:
        return None
    low, high = _number(ci[0]), _number(ci[1])
    if low is None or high is None:
        return None
    return _Drop(100 * drop, 100 * low, 100 * high, against)


def _unoptimised(row: TrialRow, rows: list[TrialRow]) -> list[TrialRow]:
    """The same model's ``none`` rows under the row's compiler (the rows are one model on one
    device) that carry accuracy: the same precision and batch first."""
    ran, batch = precision_of(row), row.get("batch")
    found = [
        r
        for r in rows
        if (r.get("optimisation") or "none") == "none"
        and r.get("compiler") == row.get("compiler")
        and _accuracy(r)
    ]
    return sorted(found, key=lambda r: (precision_of(r) != ran, r.get("batch") != batch))


def _drops(row: TrialRow, rows: list[TrialRow]) -> tuple[list[_Drop], str]:
    """The drops the gate judges for ``row`` (see the module docstring), or why there are none."""
    record = _accuracy(row)
    if not record:
        error = from_json(row.get("extra")).get("accuracy_error")
        why = f" (its pass failed: {error})" if isinstance(error, str) and error else ""
        return [], f"no accuracy measured{why}"
    if (row.get("optimisation") or "none") == "none":
        own = _drop_of(record, "against eager fp32")
        return ([own], "") if own else ([], "no accuracy drop recorded")
    for base in _unoptimised(row, rows):
        base_record = _accuracy(base)
        paired = accuracy_stats.between(base_record, record)
        if paired is None:
            continue
        name = f"{base['compiler']} {precision_of(base)} b{base['batch']} none"
        found = [_drop_of(paired, f"against {name} (paired)")]
        eager = {**base_record, "correct": base_record.get("eager_correct")}
        total = accuracy_stats.between(eager, record)
        if total is not None:
            found.append(_drop_of(total, "against eager fp32"))
        return [d for d in found if d is not None], ""
    return [], (
        f"no accuracy measured: no {row['compiler']} none row with accuracy on the same samples "
        "to pair it with"
    )


def _check_drop(c: Candidate, bound: float, rows: list[TrialRow]) -> None:
    """Top-1 drop <= ``bound`` points on each drop ``_drops`` finds: refused where a point
    estimate is beyond it, flagged where only an interval reaches past it; refused where
    nothing could be judged (the module docstring)."""
    drops, missing = _drops(c.row, rows)
    if missing:
        c.refused_for = missing
        c.misses.append(missing)
        c.excess += 1.0
        return
    record = _accuracy(c.row)
    samples = f"{record.get('samples')} samples"
    eps = 1e-9  # a drop printed as the bound is within it: "beyond" is strictly greater

    def shown(d: _Drop) -> str:
        # as the reports print it (``ngb report accuracy``): the bounds rounded outwards
        text = format_interval(d.points, d.low, d.high)
        if d.points > bound + eps and float(text.split(" ")[0]) <= bound:
            text = f"{d.points:.4g} ({text})"  # rounded onto the bound: the digits that differ
        return f"{text} points {d.against}"

    beyond = [d for d in drops if d.points > bound + eps]
    if beyond:
        straddles = any(d.low <= bound + eps for d in beyond)
        why = "; its 95 % interval straddles the bound" if straddles else ""
        miss = (
            f"accuracy drop {' and '.join(shown(d) for d in beyond)} > {_points(bound)} "
            f"({samples}{why})"
        )
        c.refused_for = miss
        c.misses.append(miss)
        c.excess += max((d.points - bound) / bound if bound > 0 else 1.0 for d in beyond)
        return
    flagged = any(d.high > bound + eps for d in drops)
    top1 = derived.top1(c.row)  # the reports' cell: Wilson's interval, printed as they print it
    head = f"top-1 {top1.text()} %; " if top1 is not None else ""
    c.accuracy = (
        f"{head}drop {', '.join(shown(d) for d in drops)} ({samples}): within {_points(bound)}"
        + (
            "; flagged: its 95 % interval reaches past the bound (more labelled samples would "
            "settle it)"
            if flagged
            else ""
        )
    )


def _same_point(trial: TrialRow, served: StoreRow) -> bool:
    """A serving row of the trial's configuration (``ngb.sweeps.store.serving``)."""
    names = ("model", "width", "depth", "batch", "compiler", "target")
    same = all(trial.get(n) == served.get(n) for n in names)
    opt = (trial.get("optimisation") or "none") == (served.get("optimisation") or "none")
    return same and opt and (trial.get("precision") or "") == (served.get("precision") or "")


def _check_server_p99(
    c: Candidate, limit: float, served: list[StoreRow], peaks: list[StoreRow]
) -> None:
    """p99 under load <= ``limit``: the server scenario's VALID runs of this configuration
    (newest first, each with a claimed p99 upper bound). It passes at the highest offered rate
    whose upper bound is within the limit; where none is, it misses by the lowest rate's."""
    within = [r for r in served if float(_number(r["latency_p99_hi_ms"]) or math.inf) <= limit]
    if within:
        r = max(within, key=lambda r: float(_number(r["target_qps"]) or 0.0))
    else:
        r = min(served, key=lambda r: float(_number(r["target_qps"]) or math.inf))
    value, low = _number(r["latency_p99_ms"]), _number(r["latency_p99_lo_ms"])
    high = float(_number(r["latency_p99_hi_ms"]) or math.inf)
    qps = float(_number(r["target_qps"]) or math.nan)
    shown = f"{value:.3g} [{low:.3g}, {high:.3g}] ms" if value and low else f"<= {high:.3g} ms"
    c.p99_source = f"p99 under load (server scenario at {qps:g} QPS, run {r['run_id']}): {shown}"
    same_limit = [p for p in peaks if math.isclose(float(_number(p["limit_ms"]) or 0.0), limit)]
    if same_limit:
        row = same_limit[0]
        star = _number(row["peak_qps"])
        if star is not None:  # one wording on every surface, a missing bound said in words
            low_q, high_q = _number(row["peak_low"]), _number(row["peak_high"])
            c.p99_source += "; " + star_text(star, low_q, high_q, limit)
    if not within:
        c.misses.append(f"p99 under load may be {high:.3g}ms > {limit:g}ms at {qps:g} QPS")
        c.excess += (high - limit) / limit if limit > 0 else 1.0


def _tied(best: Candidate, other: Candidate, objective: str, data: ReportData) -> bool:
    if objective in ("throughput", "cost"):
        ratio = derived.speedup(best.row, other.row)
    else:
        ratio = derived.ratio(derived.energy_mean(other.row), derived.energy_mean(best.row))
    # the reports' test on the printed interval; no interval stored: cannot tell
    return ratio.significant is False


def _settle(model: str, device: str, tied: list[Candidate]) -> str:
    """A sweep measuring the tied configurations again, to a tighter interval: one [[matrix]]
    per compiler, precision and optimisation (a cartesian product would add untied ones)."""
    target = str(tied[0].row.get("target") or "cpu")
    name = "settle-" + re.sub(r"[^A-Za-z0-9._-]", "-", model)[:50]  # resnet18@160: no '@'
    lines = [
        f'name = "{name}"',
        f'device = "{target}"',
        "[measure]\nci_target = 0.01\nworkers = 6\nmax_workers = 20\nmax_measure_s = 60.0",
    ]
    groups: dict[tuple[str, str, str], list[int]] = {}
    for c in tied:
        r = c.row
        key = (str(r["compiler"]), precision_of(r), str(r["optimisation"] or "none"))
        groups.setdefault(key, []).append(int(r["batch"]))
    # `model` is the report label (conv32x1, resnet18@160): a sweep names the model and its
    # width, depth and input size apiece, or `ngb sweeps check` refuses "conv32x1"
    first = tied[0].row
    width, depth, size = first.get("width"), first.get("depth") or 1, first.get("input_size")
    axes = [f'models = ["{first["model"]}"]']
    if first.get("model") in BLOCK_MODELS and width is not None:
        axes += [f"widths = [{int(width)}]", f"depths = [{int(depth)}]"]
    if size:
        axes.append(f"input_sizes = [{int(size)}]")
    for (compiler, ran, opt), batches in groups.items():
        lines += [
            "[[matrix]]",
            *axes,
            f'compilers = ["{compiler}"]',
            "batches = [" + ", ".join(str(b) for b in sorted(batches)) + "]",
        ]
        if opt != "none":
            lines.append(f'optimisations = ["{opt}"]')
        if ran in PRECISIONS and ran != "default":
            lines.append(f'measure = {{ precision = "{ran}" }}')
    return "\n".join(lines) + f"\n# then: ngb run {name}.toml -d {device}"


def _fmt(cell: Cell, unit: str) -> str:
    if cell.value is None:
        return "-"
    # the printed interval, rounded to what it supports, as every report prints it
    interval = cell.interval
    text = format_interval(cell.value, *interval) if interval else format_value(cell.value)
    return f"{text} {unit}".strip()


def advise_one(
    data: ReportData,
    model: str,
    device: str,
    limits: Constraints,
    trials: list[TrialRow] | None = None,
) -> Advice:
    """The answer for one model on one device (see the module docstring); ``trials``: that
    model's trials on that device where the caller read them already."""
    objective = limits.objective
    advice = Advice(device, model, objective)
    # this model on this device only, filtered in SQL: a store is never read whole here
    found = trials if trials is not None else data.trials_of(device, model)
    rows = [r for r in found if finite(r.get("throughput_mean"))]
    if not rows:
        advice.lines.append(f"{model} on {device}: nothing measured in the store")
        return advice
    baseline = data.baseline
    cands = [
        Candidate(r, throughput_cell(data, r) or Cell(None), cost_cell(data, r), energy_cell(r))
        for r in rows
    ]
    for c in cands:
        _check(c, limits, baseline, data, rows)
    if objective == "cost" and all(data.price_for(r) is None for r in rows):
        advice.lines.append(
            f"{model} on {device}: no price_per_hour for {device} in the inventory: "
            "cost cannot be ranked"
        )
        return advice
    scored = [c for c in cands if c.value(objective).value is not None]
    if not scored:
        notes = sorted({str(c.row.get("energy_note") or "no power meter") for c in cands})
        advice.lines.append(
            f"{model} on {device}: no energy measured ({'; '.join(notes)}): the energy objective "
            "cannot be answered"
        )
        return advice
    higher = objective == "throughput"

    def rank(c: Candidate) -> float:
        v = c.value(objective).value or 0.0
        return -v if higher else v

    passing = sorted((c for c in scored if not c.misses), key=rank)
    if not passing:
        nearest = min(scored, key=lambda c: (c.excess, rank(c)))
        advice.nearest = nearest
        advice.lines.append(
            f"{model} on {device}: no measured configuration meets the constraints; nearest: "
            f"{nearest.label} ({_fmt(nearest.value(objective), _unit(objective))}), which misses "
            + ", ".join(nearest.misses)
        )
        if nearest.p99_source:
            advice.lines.append(f"  {nearest.p99_source}")
        advice.lines.extend(_refused(scored, rank, objective))
        return advice
    best = passing[0]
    advice.choice = best
    advice.tied = [c for c in passing[1:] if _tied(best, c, objective, data)]
    advice.lines.append(
        f"{model} on {device}: deploy {best.label} -- "
        f"{_fmt(best.throughput, 'samples/s')}"
        + (f", {_fmt(best.cost, 'per 1M')}" if best.cost.value is not None else "")
        + (f", {_fmt(best.energy, 'mJ/sample')}" if best.energy.value is not None else "")
    )
    if best.p99_source:
        advice.lines.append(f"  {best.p99_source}")
    if best.accuracy:
        advice.lines.append(f"  accuracy: {best.accuracy}")
    if advice.tied:
        labels = [best.label, *(c.label for c in advice.tied)]
        names = ", ".join(labels[:-1]) + " and " + labels[-1]
        pick = "pick either" if len(labels) == 2 else "pick any"
        advice.lines.append(f"  {names} are within noise: {pick}")
        advice.settle = _settle(model, device, [best, *advice.tied])
    caution = _caution(best, rows)
    if caution:
        advice.lines.append(caution)
    advice.lines.extend(_refused(scored, rank, objective))
    ran = precision_of(best.row)
    if ran not in ("fp32", "?"):
        err = best.row.get("max_abs_err")
        agree = derived.agreement(best.row)  # the same top-1 as eager fp32, on labelled data
        said = [f"max abs err {err:.3g} against eager" if finite(err) else ""]
        said.append(f"top-1 agreement with eager fp32 {agree.text()} %" if agree else "")
        shown = "; ".join(s for s in said if s)
        advice.lines.append(
            f"  changes precision: runs {ran}, not fp32" + (f" ({shown})" if shown else "")
        )
    return advice


def _refused(
    scored: list[Candidate], rank: Callable[[Candidate], float], objective: str
) -> list[str]:
    """One line per row the accuracy gate refused, best-ranked first: which and why."""
    refused = sorted((c for c in scored if c.refused_for), key=rank)
    return [
        f"  refused: {c.label} ({_fmt(c.value(objective), _unit(objective))}): {c.refused_for}"
        for c in refused
    ]


def _caution(best: Candidate, rows: list[TrialRow]) -> str:
    """The reports' INVALID / disturbed note for the choice (empty when it is VALID and quiet):
    advice built on a number its own stopping rule rejected must say so."""
    flags = derived.result_flags(best.row)
    if not flags:
        return ""
    judged = [r for r in rows if r.get("verdict")]
    bad = [r for r in judged if derived.result_flags(r)]
    reason = best.row.get("verdict_reason")
    why = f" ({reason})" if isinstance(reason, str) and reason else ""
    return (
        f"  caution: {', '.join(flags)}{why}; {len(bad)} of {len(judged)} results here are not "
        "VALID or disturbed: measure again"
    )


def _unit(objective: str) -> str:
    return {"throughput": "samples/s", "energy": "mJ/sample", "cost": "per 1M"}[objective]


def models_in_scope(data: ReportData) -> list[str]:
    return data.labels()  # from the label columns: the trials are read per model and device


def advise(
    data: ReportData, models: list[str], devices: list[str], limits: Constraints
) -> list[Advice]:
    """One ``Advice`` per model and device, models in the order given."""
    known = models_in_scope(data)
    for model in models:
        if model not in known:
            from ngb.core.base.errors import UnknownNameError

            raise UnknownNameError("model in the store", model, known)
    if len(models) * len(devices) <= ONE_BY_ONE:
        return [advise_one(data, m, d, limits) for m in models for d in devices]
    # many answers (`--sweep` over a store of many models): one reading of the trials, a
    # model and device at a time, instead of one query of the whole store for each
    wanted, places = set(models), set(devices)
    answers: dict[tuple[str, str], Advice] = {}
    with data.streamed(("label", "device")) as batches:
        rows = (r for batch in batches for r in batch)
        pairs = itertools.groupby(rows, key=lambda r: (r["label"], r["device"]))
        for (label, device), group in pairs:
            if label in wanted and device in places:
                answers[(label, device)] = advise_one(data, label, device, limits, list(group))
    return [
        answers.get((m, d)) or advise_one(data, m, d, limits, []) for m in models for d in devices
    ]


def cheapest(advices: list[Advice], data: ReportData) -> list[str]:
    """Per model over several devices (objective cost): the device whose choice costs least, and
    the devices within noise of it (the printed interval of the cost ratio includes 1)."""
    out = []
    models = list(dict.fromkeys(a.model for a in advices))
    for model in models:
        priced = [
            (a.choice.cost, a)
            for a in advices
            if a.model == model and a.choice is not None and a.choice.cost.value is not None
        ]
        if len(priced) < 2:
            continue
        priced.sort(key=lambda item: item[0].value or 0.0)
        (best, first), rest = priced[0], priced[1:]
        close = [a.device for _, a in rest if _cost_tied(first, a, data)]
        line = f"{model}: cheapest on {first.device} ({_fmt(best, 'per 1M')})"
        if close:
            line += f"; {', '.join([first.device, *close])} are within noise: pick any"
        out.append(line)
    return out


def _cost_tied(best: Advice, other: Advice, data: ReportData) -> bool:
    """cost_other / cost_best = (price_o / price_b) * (T_b / T_o), judged against 1."""
    if best.choice is None or other.choice is None:
        return False
    p_best, p_other = data.price_for(best.choice.row), data.price_for(other.choice.row)
    if p_best is None or p_other is None:  # a cost was ranked, so both have one
        return False
    ratio = derived.ratio(
        derived.mean_of(best.choice.row),
        derived.mean_of(other.choice.row),
        scale=p_other.per_hour / p_best.per_hour,
    )
    return ratio.significant is False


def render(advices: list[Advice], limits: Constraints, data: ReportData) -> str:
    given = [
        f"p99 <= {limits.p99_ms:g} ms" if limits.p99_ms is not None else "",
        f"max abs err <= {limits.max_err:g}" if limits.max_err is not None else "",
        f"memory <= {limits.max_mem_mb:g} MB" if limits.max_mem_mb is not None else "",
        f"top-1 drop <= {_points(limits.max_drop)}" if limits.max_drop is not None else "",
    ]
    head = f"objective: {limits.objective}; constraints: " + (
        ", ".join(g for g in given if g) or "none"
    )
    out = [head]
    for a in advices:
        out.extend(a.lines)
        if a.settle:
            out.append("  to settle the tie, run this sweep:")
            out.extend("    " + line for line in a.settle.splitlines())
    if limits.objective == "cost":
        out.extend(cheapest(advices, data))
    return "\n".join(out) + "\n"
