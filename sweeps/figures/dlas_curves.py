"""DLAS Fig. 3: top-1 against compression ratio per technique, the elbows ringed.

One panel per model (and device): a line per pruning technique from its stored ladder (each step
a fine-tuned model, eager, on the held-out labelled set), fp16 and int8 (uncalibrated and
calibrated) as single points, error bars the stored 95 % Wilson interval of each top-1, the
baseline's top-1 as the dashed line, the elbow each ``elbow-*`` trial recorded ringed. The
numbers are the ones ``ngb report dlas`` prints (``ngb.sweeps.report.dlas_facts``), so the table
and the figure cannot disagree. A step whose top-1 is not a number is left out (and said).
"""

from __future__ import annotations

from ngb.sweeps.figures.data import FigureData, ngb_version
from ngb.sweeps.figures.spec import ErrorBar, FigureSpec, Line, LinePanel
from ngb.sweeps.report.dlas_facts import TECHNIQUE_NAMES, TECHNIQUES, Curve, ModelFacts, collect

NAME = "dlas-accuracy"


def _bar(value: float, bounds: tuple[float, float] | None) -> ErrorBar:
    if bounds is None:
        return None
    return (max(value - 100 * bounds[0], 0.0), max(100 * bounds[1] - value, 0.0))


def _line(model: ModelFacts, curve: Curve, notes: list[str]) -> Line | None:
    points = [s for s in curve.steps if s.top1 is not None and s.ratio is not None]
    if len(points) < len(curve.steps):
        notes.append(
            f"{model.label} {TECHNIQUE_NAMES[curve.technique]}: "
            f"{len(curve.steps) - len(points)} step(s) without a top-1 left out"
        )
    if not points:
        return None
    ys = [100 * (s.top1 or 0.0) for s in points]
    return Line(
        TECHNIQUE_NAMES[curve.technique],
        [s.ratio or 1.0 for s in points],
        ys,
        [_bar(y, s.top1_ci) for y, s in zip(ys, points, strict=True)],
        [False] * len(points),
        ringed=[s.name == curve.elbow for s in points],
    )


def _facts(data: FigureData, models: list[ModelFacts]) -> str:
    """The caption's facts: these are eager models on a labelled set, not timed trials, so no
    precision or stopping rule (``caption_facts``) applies."""
    sets = sorted({f"{m.data or 'labelled set'} ({m.samples or '?'} samples)" for m in models})
    scope = f"run {data.run_id}" if data.run_id else "all runs, newest per point"
    return (
        f"Device: {', '.join(sorted({m.device for m in models})) or '-'}. "
        f"Labelled set: {', '.join(sets) or '-'}, every model evaluated eager (the pruning "
        "steps after fine-tuning). "
        "Error bars: 95% Wilson interval of each top-1. "
        f"Models: {len(models)}. Source: {scope}. Made by ngb {ngb_version()}."
    )


def accuracy_curves(data: FigureData) -> FigureSpec:
    trials = data.trials()
    models = collect(trials)
    spec = FigureSpec(
        NAME,
        "DLAS Fig. 3: accuracy vs compression ratio",
        "Top-1 (%) of each compressed model, eager, on the held-out labelled set, against its "
        "compression ratio (size before / after, log axis), per technique; dashed: the "
        "baseline's top-1.",
        ring_label="ringed: the elbow, chosen by rule",
    )
    used = {(m.device, m.label) for m in models}
    spec.trials = [t for t in trials if (t["device"], t["label"]) in used]
    spec.facts = _facts(data, models)
    several_devices = len({m.device for m in models}) > 1
    for model in models:
        lines = []
        for technique in TECHNIQUES:
            curve = model.curve(technique)
            if curve is None:
                continue
            if curve.none_found:
                spec.notes.append(
                    f"{model.label} {TECHNIQUE_NAMES[technique]}: no elbow (the first step "
                    "already drops)"
                )
            elif curve.elbow is None and curve.technique in ("prune-l1", "prune-ch"):
                spec.notes.append(f"{model.label} {TECHNIQUE_NAMES[technique]}: no elbow recorded")
            line = _line(model, curve, spec.notes)
            if line is not None:
                lines.append(line)
        if not lines:
            spec.notes.append(f"{model.label}: no step with a compression ratio and a top-1")
            continue
        base = model.baseline.top1 if model.baseline is not None else None
        title = model.label + (f" [{model.device}]" if several_devices else "")
        spec.panels.append(
            LinePanel(
                title,
                lines,
                "compression ratio",
                "top-1 %",
                logx=True,
                reference=100 * base if base is not None else None,
                tick_every_x=False,
            )  # fmt: skip
        )
    if not models:
        spec.notes.append(
            "no DLAS facts in these trials (extra.optimisation.dlas: the zoo models' "
            "optimisations, e.g. the dlas-digits preset)"
        )
    return spec
