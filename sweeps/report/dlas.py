"""Reports beyond the paper's tables: the DLAS optimisation axis and the ranking-reversal finder.

- dlas: for each trial with an optimisation, the same point without one (same device, model,
  width, depth, compiler, batch) is the baseline. achieved = T_opt / T_none; expected = the
  compression ratio recorded by ``ngb.core.trial.optimise`` (bytes for fp16/int8, non-zero
  parameters for pruning); "% of expected" = 100 · achieved / expected. ``achieved`` carries its 95
  % interval (from both results' stored intervals, ``ngb.sweeps.report.derived``) and "n.s." when
  that interval includes 1 (the optimisation made no significant difference).
- reversals: on each device, at each batch, every pair of models (A, B) with A faster than B under
  identity (torch eager) but slower under a compiler -- the paper's Fig. 1 effect. Pairs are
  comparable workloads only: two timm models, or two stacks of the same block kind (a conv stack
  is not ranked against a ResNet). A flip counts as
  significant only when both orders are (the 95 % interval of T_A/T_B under the
  baseline and of T_B/T_A under the compiler each excludes 1, ``ngb.sweeps.report.derived``);
  otherwise it is listed as n.s.

The dlas report's accuracy tables (the paper's Tables 2/5, the compiled model's accuracy per
compiler, observation I's rank correlations) are ``ngb.sweeps.report.dlas_accuracy`` and
``ngb.sweeps.report.dlas_ranks``.
"""

from __future__ import annotations

from itertools import combinations

from ngb.core.records.trial_extra import from_json
from ngb.core.trial.optimise import percent_of_expected
from ngb.sweeps.report import derived, dlas_accuracy, dlas_ranks
from ngb.sweeps.report.data import (
    PrecisionMarks,
    Report,
    ReportData,
    Table,
    finite,
    group_by,
    mean_throughput,
)
from ngb.sweeps.report.paper import UNCERTAINTY_NOTE, cell, compiler_order, verdict_text
from ngb.sweeps.rows import TrialRow, mapping


def _same_point(r: TrialRow) -> tuple[object, ...]:
    """What an optimised trial is compared against: the same point without the optimisation."""
    return (
        r["device"], r["model"], r.get("width"), r.get("depth"), r["compiler"], r["batch"],
        r.get("target"), r.get("input_size"),
    )  # fmt: skip


def _label(row: TrialRow) -> str:
    return row["label"]


def _kind(row: TrialRow) -> str:
    """What may be ranked against what: timm models together, blocks only with the same kind."""
    return row["model"] if row["model"] in ("conv", "mha") else "timm"


#: optimisations that change the number format on purpose (no precision mark on their rows)
_NUMBER_FORMATS = ("fp16", "bf16", "int8")


def dlas(data: ReportData) -> Report:
    rows = [r for r in data.trials() if finite(r.get("throughput_mean"))]
    baseline = {_same_point(r): r for r in rows if (r.get("optimisation") or "none") == "none"}
    table = Table(
        "DLAS: achieved vs expected speed-up per optimisation",
        ["device", "model", "compiler", "batch", "optimisation", "T none", "T opt", "achieved",
         "expected", "% of expected", "verdict"],
    )  # fmt: skip
    table.notes.append(
        "achieved = T_opt / T_none; expected = compression ratio (size before / after); "
        "% of expected = 100 · achieved / expected"
    )
    table.notes.append(UNCERTAINTY_NOTE)
    report = Report("dlas", "DLAS optimisation axis", [table])
    # the compiled model's accuracy beside its speed, where a trial ran an accuracy pass
    with_accuracy = any(derived.top1(r) is not None for r in rows)
    if with_accuracy:
        table.columns[7:7] = ["top-1 % none", "top-1 % opt", "drop vs eager"]
        table.notes.append(ACCURACY_NOTE)
    marks = PrecisionMarks("none")
    optimised = [r for r in rows if (r.get("optimisation") or "none") != "none"]
    optimised.sort(
        key=lambda r: (r["device"], _label(r), compiler_order(r["compiler"]), r["batch"],
                       r.get("optimisation") or "")
    )  # fmt: skip
    for r in optimised:
        base = baseline.get(_same_point(r))
        if base is None or mean_throughput(base) <= 0:
            report.notes.append(
                f"{r['device']} {_label(r)} {r['compiler']} b{r['batch']} {r['optimisation']}: "
                "no baseline without optimisation"
            )
            continue
        achieved = mean_throughput(r) / mean_throughput(base)
        expected = mapping(from_json(r.get("extra")).get("optimisation")).get("expected_speedup")
        percent = percent_of_expected(achieved, expected) if finite(expected) else None
        ratio = derived.speedup(r, base)
        if r.get("optimisation") in _NUMBER_FORMATS:  # there, a new precision is the point
            ratio = derived.Derived(
                ratio.estimate, tuple(f for f in ratio.flags if f != derived.PRECISION_MARK), 1.0
            )
        achieved_cell = cell(ratio)
        if r.get("optimisation") not in _NUMBER_FORMATS:
            achieved_cell = marks.mark(achieved_cell, r, base)
        line = [r["device"], _label(r), r["compiler"], r["batch"], r.get("optimisation"),
                mean_throughput(base), mean_throughput(r), achieved_cell,
                expected if finite(expected) else None, percent, verdict_text(r)]  # fmt: skip
        if with_accuracy:
            line[7:7] = [
                cell(derived.top1(base)),
                cell(derived.top1(r)),
                cell(derived.accuracy_drop(r)),
            ]
        table.rows.append(line)
    marks.add_note(table)
    # DLAS's first half (issue 42), each table only where its facts were stored
    trials = data.trials()
    extra = (
        dlas_accuracy.elbow_table(trials),
        dlas_accuracy.compiled_table(data, trials),
        dlas_ranks.observation_one(trials),
    )
    report.tables += [t for t in extra if t is not None]
    return report


def reversals(data: ReportData) -> Report:
    rows = [
        r
        for r in data.trials()
        if (r.get("optimisation") or "none") == "none" and finite(r.get("throughput_mean"))
    ]
    table = Table(
        "Ranking reversals: model order under identity flips under a compiler",
        ["device", "batch", "compiler", "A (faster eager)", "B", "T_id A", "T_id B", "T_c A",
         "T_c B", "flip"],
    )  # fmt: skip
    base = data.baseline
    table.notes.append(
        f"A beats B under {base}, B beats A under the compiler; flip = significant only when the "
        "95 % interval of each ratio (T_A/T_B under the baseline, T_B/T_A under the "
        "compiler) excludes 1, else n.s."
    )
    for (device, _target, batch), at_batch in sorted(
        group_by(rows, lambda r: (r["device"], r.get("target"), r["batch"])).items(),
        key=lambda kv: (kv[0][0], kv[0][2]),
    ):
        by_compiler = {
            c: {_label(r): r for r in rs}
            for c, rs in group_by(at_batch, lambda r: r["compiler"]).items()
        }
        identity = by_compiler.get(base)
        if not identity:
            continue
        for compiler in sorted(by_compiler, key=compiler_order):
            if compiler == base:
                continue
            mine = by_compiler[compiler]
            models = sorted(set(mine) & set(identity))
            for x, y in combinations(models, 2):
                if _kind(mine[x]) != _kind(mine[y]):
                    continue
                a, b = (
                    (x, y)
                    if mean_throughput(identity[x]) > mean_throughput(identity[y])
                    else (y, x)
                )
                ia, ib, ca, cb = identity[a], identity[b], mine[a], mine[b]
                if not (
                    mean_throughput(ia) > mean_throughput(ib)
                    and mean_throughput(ca) < mean_throughput(cb)
                ):
                    continue
                eager = derived.speedup(ia, ib)  # T_A / T_B
                compiled = derived.speedup(cb, ca)  # T_B / T_A
                flip = "significant" if eager.significant and compiled.significant else "n.s."
                table.rows.append(
                    [device, batch, compiler, a, b, *map(mean_throughput, (ia, ib, ca, cb)), flip]
                )  # fmt: skip
    report = Report("reversals", "Ranking-reversal finder", [table])
    if not table.rows:
        report.notes.append("no ranking reversals found")
    return report


#: what the accuracy columns mean, under every table that shows them
ACCURACY_NOTE = (
    "top-1/top-5 = the compiled model's accuracy (%) on the labelled set, on the device, 95 % "
    "Wilson interval; eager = eager fp32 on the same inputs; agree = share of samples with "
    "eager's top-1; drop = eager - compiled top-1 in points, exact interval of McNemar's paired "
    "test, n.s. = the printed interval includes 0"
)


def accuracy(data: ReportData) -> Report:
    """Every trial with an accuracy pass: its throughput beside the compiled model's accuracy."""
    table = Table(
        "Accuracy of the compiled model beside its speed",
        ["device", "model", "compiler", "optimisation", "precision", "batch", "throughput",
         "top-1 %", "top-5 %", "eager top-1 %", "agree %", "drop (points)", "data", "pass s"],
    )  # fmt: skip
    table.notes.append(ACCURACY_NOTE)
    table.notes.append(UNCERTAINTY_NOTE)
    report = Report("accuracy", "Accuracy on labelled data beside throughput", [table])
    rows = [r for r in data.trials() if derived.top1(r) is not None]
    rows.sort(
        key=lambda r: (r["device"], _label(r), r.get("optimisation") or "",
                       compiler_order(r["compiler"]), r["batch"])
    )  # fmt: skip
    for r in rows:
        record = mapping(from_json(r.get("extra")).get("accuracy"))
        table.rows.append(
            [r["device"], _label(r), r["compiler"], r.get("optimisation") or "none",
             r.get("precision"), r["batch"], cell(derived.throughput(r)), cell(derived.top1(r)),
             cell(derived.top5(r)), cell(derived.eager_top1(r)), cell(derived.agreement(r)),
             cell(derived.accuracy_drop(r)), record.get("data"), record.get("pass_s")]
        )  # fmt: skip
    failed = [r for r in data.trials() if from_json(r.get("extra")).get("accuracy_error")]
    for r in failed:
        said = from_json(r.get("extra")).get("accuracy_error")
        report.notes.append(f"{r['device']} {_label(r)} {r['compiler']} b{r['batch']}: {said}")
    if not rows and not failed:
        report.notes.append("no trial with an accuracy pass (`[accuracy]`, `--accuracy`)")
    return report
