"""The DLAS facts a zoo model's trials carry, read once for the tables and Fig. 3.

``extra["optimisation"]["dlas"]`` (written by ``ngb.core.trial.optimise`` for the DLAS zoo): the
baseline's top-1, this trial's own step (its model, eager, on the held-out set, paired against
the baseline), the technique's whole ladder for pruning steps and, on ``elbow-*`` trials, the
elbow and the rule that chose it. These are eager facts of the model, not of the compiled one, so
every compiler and batch of one (device, model, optimisation) carries the same; the first trial in
compiler and batch order speaks for them.

Everything is read defensively: a stored value that is not what it should be (NaN top-1, a
missing or empty ladder, a ladder without an elbow) becomes ``None`` or a note for the reader,
never an exception in a report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ngb.core.records.trial_extra import from_json
from ngb.sweeps.report.data import group_by
from ngb.sweeps.report.paper import compiler_order
from ngb.sweeps.rows import TrialRow, integer, mapping, number, text

#: the paper's techniques in its table order
TECHNIQUES = ("prune-l1", "prune-ch", "fp16", "int8", "int8-cal")
TECHNIQUE_NAMES = {
    "prune-l1": "weight pruning",
    "prune-ch": "channel pruning",
    "fp16": "fp16",
    "int8": "int8 uncalibrated",
    "int8-cal": "int8 calibrated",
}
PRUNING = ("prune-l1", "prune-ch")
ELBOW_PREFIX = "elbow-"


Interval = tuple[float, float]


def _interval(value: object) -> Interval | None:
    if isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2:
        low, high = number(value[0]), number(value[1])
        if low is not None and high is not None:
            return (low, high)
    return None


@dataclass(frozen=True)
class Step:
    """One model of a technique's ladder: fractions as stored (0.01 = 1 point)."""

    name: str
    ratio: float | None
    top1: float | None
    top1_ci: Interval | None
    drop: float | None = None
    drop_ci: Interval | None = None
    verdict: str | None = None


def step_of(value: object, name: str = "?") -> Step | None:
    """A stored step dict as a ``Step`` (None where it is not a dict or says nothing)."""
    record = mapping(value)
    if not record:
        return None
    return Step(
        text(record.get("name")) or name,
        number(record.get("compression_ratio")),
        number(record.get("top1")),
        _interval(record.get("top1_ci")),
        number(record.get("drop")),
        _interval(record.get("drop_ci")),
        text(record.get("verdict")),
    )


def dlas_of(row: Mapping[str, object]) -> Mapping[str, object]:
    """A trial's DLAS facts (empty where it has none)."""
    return mapping(mapping(from_json(row.get("extra")).get("optimisation")).get("dlas"))


def technique_of(optimisation: str, facts: Mapping[str, object]) -> str | None:
    """``prune-l1`` for ``prune-l1-0.9`` and ``elbow-prune-l1``; None for anything else."""
    stored = text(facts.get("technique"))
    if stored in TECHNIQUES:
        return stored
    name = optimisation.removeprefix(ELBOW_PREFIX)
    for technique in PRUNING:
        if name == technique or name.startswith(technique + "-"):
            return technique
    return name if name in TECHNIQUES else None


@dataclass
class Trial:
    """The trial that speaks for one (device, model, optimisation) and its facts."""

    optimisation: str
    row: TrialRow
    facts: Mapping[str, object]

    @property
    def elbow_trial(self) -> bool:
        return self.optimisation.startswith(ELBOW_PREFIX)


@dataclass
class Curve:
    """One technique of one model: its steps in ascending compression and its elbow."""

    technique: str
    steps: list[Step]
    elbow: str | None = None  # the elbow step's name
    rule: str | None = None
    from_ladder: bool = True  # False: pieced together from the trials' own steps
    # the rule ran and found no elbow (the first step already drops): the elbow trial then
    # timed the trained model itself
    none_found: bool = False


@dataclass
class ModelFacts:
    """Everything DLAS stored about one model on one device."""

    device: str
    label: str
    trials: dict[str, Trial]
    baseline: Step | None = None
    data: str | None = None
    samples: int | None = None
    notes: list[str] = field(default_factory=list)

    def of(self, technique: str) -> list[Trial]:
        return [
            t for t in self.trials.values() if technique_of(t.optimisation, t.facts) == technique
        ]

    def curve(self, technique: str) -> Curve | None:
        """The technique's ladder: the elbow trial's, else the longest stored, else the steps
        of the trials themselves (one point each); None where the technique has no trial."""
        trials = self.of(technique)
        if not trials:
            return None
        trials.sort(key=lambda t: (not t.elbow_trial, t.optimisation))
        ladders = [(t, _ladder(t.facts.get("ladder"))) for t in trials]
        found = [(t, steps) for t, steps in ladders if steps]
        elbow_trial = next((t for t in trials if t.elbow_trial), None)
        if found:
            best = max(found, key=lambda p: (p[0].elbow_trial, len(p[1])))
            curve = Curve(technique, best[1])
        else:
            own = [step_of(t.facts.get("step"), t.optimisation) for t in trials]
            steps = sorted((s for s in own if s is not None and s.ratio is not None),
                           key=lambda s: s.ratio or 0.0)  # fmt: skip
            curve = Curve(technique, steps, from_ladder=False)
        if elbow_trial is not None:
            elbow = mapping(elbow_trial.facts.get("elbow"))
            own_step = step_of(elbow_trial.facts.get("step"))
            curve.rule = text(elbow.get("rule"))
            if "name" in elbow and elbow["name"] is None:
                curve.none_found = True
            else:
                curve.elbow = text(elbow.get("name")) or (own_step.name if own_step else None)
        return curve


def _ladder(value: object) -> list[Step]:
    """A stored ladder's steps with a ratio, ascending (empty for a missing or broken one)."""
    if not isinstance(value, Sequence) or isinstance(value, str):
        return []
    steps = [step_of(v) for v in value]
    return sorted(
        (s for s in steps if s is not None and s.ratio is not None), key=lambda s: s.ratio or 0.0
    )


def collect(rows: Sequence[TrialRow]) -> list[ModelFacts]:
    """Per (device, model) with DLAS facts: the trial that speaks for each optimisation."""
    with_facts = [r for r in rows if dlas_of(r)]
    out = []
    keyed = group_by(with_facts, lambda r: (r["device"], r["label"]))
    for (device, label), mine in sorted(keyed.items()):
        mine.sort(key=lambda r: (compiler_order(r["compiler"]), r["batch"]))
        trials: dict[str, Trial] = {}
        for r in mine:
            name = r.get("optimisation") or "none"
            trials.setdefault(name, Trial(name, r, dlas_of(r)))
        model = ModelFacts(device, label, trials)
        recipes = {text(t.facts.get("recipe_key")) for t in trials.values()} - {None}
        if len(recipes) > 1:
            model.notes.append(
                f"{device} {label}: facts from {len(recipes)} training recipes (several runs); "
                "each row shows its own"
            )
        for t in trials.values():
            base = mapping(t.facts.get("baseline"))
            if base:
                model.baseline = Step("baseline", 1.0, number(base.get("top1")),
                                      _interval(base.get("top1_ci")))  # fmt: skip
                model.samples = integer(base.get("samples"))
                model.data = text(t.facts.get("data"))
                break
        out.append(model)
    return out
