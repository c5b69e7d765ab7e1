"""Accuracy in the dlas report (issue 42): the paper's Table 2/5 and the compiled model's
accuracy per compiler beside its speed-up.

- elbows (Tables 2 and 5): per device and model, the baseline's top-1 with its 95 % interval,
  then each technique present: weight and channel pruning at their elbow (the ``elbow-*`` trial;
  without one, each ``prune-*-R`` trial measured), fp16, int8 uncalibrated (``int8``: synthetic
  calibration ranges) and calibrated (``int8-cal``), each with its compression ratio, top-1
  [interval], drop in points [interval] and the stored verdict of McNemar's paired test. These
  are the eager model's facts (``ngb.sweeps.report.dlas_facts``), the same under every compiler.
- compiled: the accuracy the *compiled* model reached on the device (``extra["accuracy"]``), its
  agreement with eager fp32 on the same inputs beside its speed-up over the baseline compiler
  (a compiler that picks bf16 by itself, OpenVINO on an AMX CPU, is a win only as far as its
  agreement holds), and the paired drop against the same model's ``none`` trial under the same
  compiler (``ngb.core.statistics.accuracy_stats.between``, from the per-sample bits of both).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ngb.core.records.trial_extra import from_json
from ngb.core.statistics.accuracy_stats import between
from ngb.sweeps.report import derived
from ngb.sweeps.report.data import Cell, ReportData, Table, group_by
from ngb.sweeps.report.dlas_facts import (
    PRUNING,
    TECHNIQUE_NAMES,
    TECHNIQUES,
    ModelFacts,
    Step,
    collect,
    step_of,
)
from ngb.sweeps.report.paper import cell, compiler_order
from ngb.sweeps.rows import TrialRow, mapping

#: the row of a technique whose rule found no elbow
NO_ELBOW = "none: the first step already drops"
ELBOW_COLUMNS = ["device", "model", "technique", "step", "compression", "top-1 %",
                 "drop (points)", "verdict"]  # fmt: skip


def _points(value: float | None, bounds: tuple[float, float] | None, note: str = "") -> Cell:
    """A stored fraction as percent (points) with its stored bounds."""
    if value is None:
        return Cell(None)
    low, high = (100 * bounds[0], 100 * bounds[1]) if bounds else (None, None)
    return Cell(100 * value, None, note, low, high)


def _step_row(model: ModelFacts, technique: str, step: Step, notes: list[str]) -> list[object]:
    if step.top1 is None:
        notes.append(f"{model.device} {model.label} {step.name}: top-1 not stored as a number")
    return [
        model.device, model.label, technique, step.name,
        Cell(step.ratio) if step.ratio is not None else None,
        _points(step.top1, step.top1_ci), _points(step.drop, step.drop_ci),
        step.verdict or "-",
    ]  # fmt: skip


def elbow_table(rows: Sequence[TrialRow]) -> Table | None:
    """The Table 2/5 layout (see module); None where no trial carries DLAS facts."""
    models = collect(rows)
    if not models:
        return None
    table = Table("DLAS: accuracy at each technique's elbow (Tables 2 and 5)", ELBOW_COLUMNS)
    rules: dict[str, str] = {}
    for model in models:
        table.notes += model.notes
        base = model.baseline
        if base is None:
            table.notes.append(f"{model.device} {model.label}: no baseline accuracy stored")
        else:
            seen = f"{model.data or 'labelled set'}, {model.samples or '?'} samples"
            row = Step(seen, 1.0, base.top1, base.top1_ci)
            table.rows.append(_step_row(model, "baseline (fp32)", row, table.notes))
        for technique in TECHNIQUES:
            trials = model.of(technique)
            if not trials:
                continue
            name = TECHNIQUE_NAMES[technique]
            elbow = [t for t in trials if t.elbow_trial]
            if elbow:
                curve = model.curve(technique)
                if curve is not None and curve.none_found:
                    table.rows.append([model.device, model.label, f"{name} elbow", NO_ELBOW,
                                       None, None, None, "-"])  # fmt: skip
                    rules.setdefault(curve.rule or "", name)
                    continue
                step = step_of(elbow[0].facts.get("step"), elbow[0].optimisation)
                if step is None and curve is not None and curve.elbow:
                    step = next((s for s in curve.steps if s.name == curve.elbow), None)
                if step is None:
                    table.rows.append([model.device, model.label, f"{name} elbow",
                                       "no elbow recorded", None, None, None, "-"])  # fmt: skip
                    continue
                if curve is not None and curve.rule:
                    rules.setdefault(curve.rule, name)
                else:
                    table.notes.append(
                        f"{model.device} {model.label} {elbow[0].optimisation}: no elbow rule "
                        "recorded; the trial's own step is shown"
                    )
                table.rows.append(_step_row(model, f"{name} elbow", step, table.notes))
                continue
            steps = [step_of(t.facts.get("step"), t.optimisation) for t in trials]
            if technique in PRUNING:
                name += " (no elbow trial)"
            for step in sorted((s for s in steps if s is not None),
                               key=lambda s: (s.ratio or 0.0, s.name)):  # fmt: skip
                table.rows.append(_step_row(model, name, step, table.notes))
            for t, s in zip(trials, steps, strict=True):
                if s is None:
                    table.notes.append(f"{model.device} {model.label} {t.optimisation}: no step")
    table.notes.append(
        "top-1 = the eager model's top-1 (%) on the held-out labelled set, 95 % Wilson interval; "
        "drop = baseline - step in points, exact interval of McNemar's paired test; verdict: "
        "n.s. = no significant difference, drop / gain = significant; compression = size "
        "before / after (non-zero weights for weight pruning, parameters for channel pruning, "
        "bytes for fp16 / int8)"
    )
    table.notes += [f"elbow rule: {rule}" for rule in rules if rule]
    return table


# ---------------------------------------------------------------- the compiled model


def _point(r: Mapping[str, object]) -> tuple[object, ...]:
    """The same measured point whatever its compiler and optimisation."""
    return (r["device"], r["model"], r.get("width"), r.get("depth"), r["batch"], r.get("target"),
            r.get("input_size"))  # fmt: skip


def _accuracy(r: Mapping[str, object]) -> Mapping[str, object]:
    return mapping(from_json(r.get("extra")).get("accuracy"))


def _optimisation(r: Mapping[str, object]) -> str:
    return str(r.get("optimisation") or "none")


def _opt_order(name: str) -> tuple[int, str]:
    bare = name.removeprefix("elbow-")
    for i, technique in enumerate(TECHNIQUES):
        if bare == technique or bare.startswith(technique + "-"):
            return (i + 1, name)
    return (0 if name == "none" else len(TECHNIQUES) + 1, name)


def compiled_table(data: ReportData, rows: Sequence[TrialRow]) -> Table | None:
    """The compiled model's accuracy (see module). A model enters where DLAS facts or a trial of
    another compiler than the baseline carry an accuracy pass; None where none does."""
    measured = [r for r in rows if derived.top1(r) is not None]
    dlas_models = {(m.device, m.label) for m in collect(rows)}
    keep = {
        key
        for key, mine in group_by(measured, lambda r: (r["device"], r["label"])).items()
        if key in dlas_models or any(r["compiler"] != data.baseline for r in mine)
    }
    chosen = [r for r in measured if (r["device"], r["label"]) in keep]
    if not chosen:
        return None
    base = data.baseline
    table = Table(
        "DLAS: the compiled model's accuracy beside its speed-up",
        ["device", "model", "optimisation", "compiler", "precision", "batch",
         f"speed-up vs {base}", "top-1 %", "agree with eager fp32 %", "drop vs eager",
         "drop vs none", "verdict vs none"],
    )  # fmt: skip
    by_point = {(_point(r), _optimisation(r), r["compiler"]): r for r in rows}
    chosen.sort(key=lambda r: (r["device"], r["label"], _opt_order(_optimisation(r)),
                               compiler_order(r["compiler"]), r["batch"]))  # fmt: skip
    unpaired = 0
    for r in chosen:
        opt = _optimisation(r)
        reference = by_point.get((_point(r), opt, base))
        speed = cell(derived.speedup(r, reference)) if reference is not None else None
        paired: Cell | None = None
        verdict = "-"
        if opt != "none":
            plain = by_point.get((_point(r), "none", r["compiler"]))
            drop = between(_accuracy(plain), _accuracy(r)) if plain is not None else None
            if drop is None:
                unpaired += 1
            else:
                paired = _points(drop["drop"], (drop["drop_ci"][0], drop["drop_ci"][1]))
                verdict = drop["verdict"]
        table.rows.append(
            [r["device"], r["label"], opt, r["compiler"], r.get("precision"), r["batch"], speed,
             cell(derived.top1(r)), cell(derived.agreement(r)), cell(derived.accuracy_drop(r)),
             paired, verdict]
        )  # fmt: skip
    table.notes.append(
        "top-1 = the compiled model's on the device, over the whole labelled set, 95 % Wilson "
        "interval; agree = share of samples whose top-1 is eager fp32's (a compiler that runs "
        "bf16 or int8 kernels by itself changes it); drop vs eager = eager - compiled top-1 in "
        f"points; speed-up = T / T_{base} at the same point and optimisation; drop vs none = "
        "the same compiler's unoptimised trial - this one, paired per sample (McNemar's exact "
        "interval); n.s. = the printed interval includes the null"
    )
    if unpaired:
        table.notes.append(
            f"drop vs none '-' on {unpaired} row(s): no unoptimised trial with per-sample "
            "correctness on the same set under that compiler"
        )
    return table
