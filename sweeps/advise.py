"""``ngb advise``: the configuration to deploy on a device, from the results in the store.

For each model and device in scope, every measured configuration (compiler, precision, batch,
optimisation: the newest result per point, as the reports read them) is checked against the
user's constraints -- p99 latency per call <= ``p99_ms``, max abs error against torch eager <=
``max_err`` (the baseline itself counts as 0), peak memory <= ``max_mem_mb`` (GPU memory on a GPU
target, resident memory on a CPU) -- and the ones that pass are ranked by the objective:

- throughput: samples/s, higher is better; two choices are tied when the printed 95 % interval
  of their ratio includes 1 (``ngb.sweeps.derived.speedup``, the reports' "n.s." test);
- cost: cost per million inferences (``ngb.devices.pricing``); on one device the price is a
  constant factor, so the ranking and the ties are throughput's;
- energy: joules per sample measured on the device, lower is better; tied when the two 95 %
  intervals overlap. Configurations without a meter reading are left out (never guessed).

The numbers come from the report layer (``report_paper.throughput_cell``,
``report_deploy.cost_cell`` / ``energy_cell``), so ``ngb advise`` and ``ngb report energy`` print
the same values. A choice whose recorded precision is not fp32 is called out with its error.
When nothing passes, the nearest configuration is named with the constraints it misses (the
smallest sum of relative excesses; an unrecorded value counts as a full miss). A tie comes with
the sweep that would settle it: the tied configurations measured again to a tighter interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ngb.core.errors import ConfigError
from ngb.core.types import PRECISIONS
from ngb.sweeps import derived
from ngb.sweeps.numbers import format_with_interval
from ngb.sweeps.report_data import Cell, ReportData, finite, precision_of
from ngb.sweeps.report_deploy import cost_cell, energy_cell
from ngb.sweeps.report_paper import throughput_cell
from ngb.sweeps.rows import TrialRow

OBJECTIVES = ("throughput", "energy", "cost")


@dataclass(frozen=True)
class Constraints:
    p99_ms: float | None = None
    max_err: float | None = None
    max_mem_mb: float | None = None
    objective: str = "throughput"

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ConfigError(
                f"unknown objective {self.objective!r}; valid: {', '.join(OBJECTIVES)}"
            )
        for name in ("p99_ms", "max_err", "max_mem_mb"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"{name.replace('_', '-')} must be a number >= 0, got {value}")


@dataclass
class Candidate:
    row: TrialRow
    throughput: Cell
    cost: Cell
    energy: Cell  # mJ per sample
    misses: list[str] = field(default_factory=list)  # constraints it does not meet, in words
    excess: float = 0.0  # sum of relative excesses over the limits (0 = meets them all)

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


def _check(c: Candidate, limits: Constraints, baseline: str) -> None:
    row = c.row
    err = 0.0 if row["compiler"] == baseline else row.get("max_abs_err")
    checks = [
        ("p99", _number(row.get("latency_p99_ms")), limits.p99_ms, "ms"),
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


def _tied(best: Candidate, other: Candidate, objective: str, data: ReportData) -> bool:
    if objective in ("throughput", "cost"):
        ratio = derived.speedup(best.row, other.row)
        # the reports' test on the printed interval; no interval stored: cannot tell
        return ratio.half is not None and ratio.significant is False
    b, o = best.energy, other.energy
    if b.value is None or o.value is None or b.std is None or o.std is None:
        return False
    return b.value + b.std >= o.value - o.std


def _settle(model: str, device: str, tied: list[Candidate]) -> str:
    """A sweep measuring the tied configurations again, to a tighter interval: one [[matrix]]
    per compiler, precision and optimisation (a cartesian product would add untied ones)."""
    target = str(tied[0].row.get("target") or "cpu")
    lines = [
        f'name = "settle-{model}"',
        f'device = "{target}"',
        "[measure]\nci_target = 0.01\nworkers = 6\nmax_workers = 20\nmax_measure_s = 60.0",
    ]
    groups: dict[tuple[str, str, str], list[int]] = {}
    for c in tied:
        r = c.row
        key = (str(r["compiler"]), precision_of(r), str(r["optimisation"] or "none"))
        groups.setdefault(key, []).append(int(r["batch"]))
    for (compiler, ran, opt), batches in groups.items():
        lines += [
            "[[matrix]]",
            f'models = ["{model}"]',
            f'compilers = ["{compiler}"]',
            "batches = [" + ", ".join(str(b) for b in sorted(batches)) + "]",
        ]
        if opt != "none":
            lines.append(f'optimisations = ["{opt}"]')
        if ran in PRECISIONS and ran != "default":
            lines.append(f'measure = {{ precision = "{ran}" }}')
    return "\n".join(lines) + f"\n# then: ngb run settle-{model}.toml -d {device}"


def _fmt(cell: Cell, unit: str) -> str:
    if cell.value is None:
        return "-"
    # rounded to what the interval supports, as every report prints it
    return f"{format_with_interval(cell.value, cell.std)} {unit}".strip()


def advise_one(data: ReportData, model: str, device: str, limits: Constraints) -> Advice:
    """The answer for one model on one device (see the module docstring)."""
    objective = limits.objective
    advice = Advice(device, model, objective)
    rows = [
        r
        for r in data.trials()
        if r["device"] == device and r["label"] == model and finite(r.get("throughput_mean"))
    ]
    if not rows:
        advice.lines.append(f"{model} on {device}: nothing measured in the store")
        return advice
    baseline = data.baseline
    cands = [
        Candidate(r, throughput_cell(data, r) or Cell(None), cost_cell(data, r), energy_cell(r))
        for r in rows
    ]
    for c in cands:
        _check(c, limits, baseline)
    if objective == "cost" and device not in data.prices:
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
    if advice.tied:
        labels = [best.label, *(c.label for c in advice.tied)]
        names = ", ".join(labels[:-1]) + " and " + labels[-1]
        pick = "pick either" if len(labels) == 2 else "pick any"
        advice.lines.append(f"  {names} are within noise: {pick}")
        advice.settle = _settle(model, device, [best, *advice.tied])
    ran = precision_of(best.row)
    if ran not in ("fp32", "?"):
        err = best.row.get("max_abs_err")
        advice.lines.append(
            f"  changes precision: runs {ran}, not fp32"
            + (f" (max abs err {err:.3g} against eager)" if finite(err) else "")
        )
    return advice


def _unit(objective: str) -> str:
    return {"throughput": "samples/s", "energy": "mJ/sample", "cost": "per 1M"}[objective]


def models_in_scope(data: ReportData) -> list[str]:
    return sorted({r["label"] for r in data.trials()})


def advise(
    data: ReportData, models: list[str], devices: list[str], limits: Constraints
) -> list[Advice]:
    """One ``Advice`` per model and device, models in the order given."""
    known = models_in_scope(data)
    for model in models:
        if model not in known:
            from ngb.core.errors import UnknownNameError

            raise UnknownNameError("model in the store", model, known)
    return [advise_one(data, m, d, limits) for m in models for d in devices]


def cheapest(advices: list[Advice]) -> list[str]:
    """Per model over several devices (objective cost): the device whose choice costs least, and
    the devices within noise of it (their cost intervals overlap)."""
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
        reach = (best.value or 0.0) + (best.std or 0.0)
        close = [a.device for c, a in rest if (c.value or 0.0) - (c.std or 0.0) <= reach]
        line = f"{model}: cheapest on {first.device} ({_fmt(best, 'per 1M')})"
        if close:
            line += f"; {', '.join([first.device, *close])} are within noise: pick any"
        out.append(line)
    return out


def render(advices: list[Advice], limits: Constraints) -> str:
    given = [
        f"p99 <= {limits.p99_ms:g} ms" if limits.p99_ms is not None else "",
        f"max abs err <= {limits.max_err:g}" if limits.max_err is not None else "",
        f"memory <= {limits.max_mem_mb:g} MB" if limits.max_mem_mb is not None else "",
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
        out.extend(cheapest(advices))
    return "\n".join(out) + "\n"
