"""Synthetic DLAS trials for the report and figure tests (issue 42): the facts
``ngb.core.trial.optimise`` stores for a zoo model (``extra["optimisation"]["dlas"]``), with
ladders, elbows and a compiled-model accuracy pass made by
``ngb.core.statistics.accuracy_stats.compare`` itself.

Two models (``digits-resnet``, ``digits-vgg``) x six optimisations (none, elbow-prune-l1,
elbow-prune-ch, fp16, int8, int8-cal) x two compilers (identity, openvino) at batch 8. The
weight-pruning ladder of digits-resnet (ratio: top-1 %, drop in points, verdict):

    2: 99.6  0.0 n.s. | 2.5: 99.6 0.0 n.s. | 3.33: 99.4 0.2 n.s. | 5: 99.4 0.2 n.s.
    10: 99.1 0.5 n.s. (the elbow) | 20: 97.2 2.4 drop | 100: 80.0 19.6 drop

digits-vgg's is the same 1 point lower. The openvino ``none`` trial ran bf16 and agrees with
eager on 538 of 540 samples.
"""

from __future__ import annotations

import statistics

import numpy as np
from ngb.core.records.types import MeasureSettings, Stats, TrialResult, TrialSpec
from ngb.core.statistics import accuracy_stats

MEASURE = MeasureSettings(repetitions=5, min_iters=5, min_duration_s=0.3)
NOISE = (-0.01, 0.01, -0.005, 0.005, 0.0)
SAMPLES = 540
L1_RATIOS = (2.0, 2.5, 10 / 3, 5.0, 10.0, 20.0, 100.0)
L1_TOP1 = (0.996, 0.996, 0.994, 0.994, 0.991, 0.972, 0.800)
L1_VERDICT = ("n.s.", "n.s.", "n.s.", "n.s.", "n.s.", "drop", "drop")
L1_NAMES = ("prune-l1-0.5", "prune-l1-0.6", "prune-l1-0.7", "prune-l1-0.8", "prune-l1-0.9",
            "prune-l1-0.95", "prune-l1-0.99")  # fmt: skip
CH_RATIOS = (1.1, 1.4, 2.0, 4.0)
CH_TOP1 = (0.996, 0.994, 0.985, 0.90)
CH_VERDICT = ("n.s.", "n.s.", "drop", "drop")
CH_NAMES = ("prune-ch-0.05", "prune-ch-0.3", "prune-ch-0.5", "prune-ch-0.75")
BASELINE = 0.996
RULE = "the highest compression whose drop is n.s. (McNemar, 95 %)"
# fp16, int8 (synthetic ranges), int8-cal: (ratio, top-1, verdict)
FORMATS = {"fp16": (2.0, 0.996, "n.s."), "int8": (3.9, 0.950, "drop"),
           "int8-cal": (3.9, 0.993, "n.s.")}  # fmt: skip
THROUGHPUT = {"none": 1000.0, "elbow-prune-l1": 1050.0, "elbow-prune-ch": 1600.0,
              "fp16": 300.0, "int8": 2500.0, "int8-cal": 2400.0}  # fmt: skip
NONZERO = 100_000


def step(name: str, ratio: float, top1: float, verdict: str, base: float = BASELINE) -> dict:
    drop = base - top1
    half = 0.004 + drop / 4
    return {
        "name": name, "compression_ratio": ratio, "top1": top1,
        "top1_ci": [top1 - 0.006, min(1.0, top1 + 0.003)], "drop": drop,
        "drop_ci": [drop - half, drop + half] if verdict == "drop" else [-0.004, drop + half],
        "p_value": 0.001 if verdict == "drop" else 0.5, "verdict": verdict,
    }  # fmt: skip


def ladder(names, ratios, top1s, verdicts, shift: float) -> list[dict]:
    return [step(n, r, t - shift, v, BASELINE - shift)
            for n, r, t, v in zip(names, ratios, top1s, verdicts, strict=True)]  # fmt: skip


def dlas_facts(optimisation: str, arch: str, shift: float) -> dict:
    """``extra["optimisation"]`` of one zoo trial (the DLAS facts and the sizes)."""
    base = BASELINE - shift
    facts: dict = {"arch": arch, "data": "digits-test", "recipe_key": "ab12",
                   "baseline": {"top1": base, "top1_ci": [base - 0.007, base + 0.003],
                                "samples": SAMPLES}}  # fmt: skip
    if optimisation == "elbow-prune-l1":
        steps = ladder(L1_NAMES, L1_RATIOS, L1_TOP1, L1_VERDICT, shift)
        facts |= {"technique": "prune-l1", "ladder": steps, "step": steps[4],
                  "elbow": {"name": "prune-l1-0.9", "rule": RULE}}  # fmt: skip
    elif optimisation == "elbow-prune-ch":
        steps = ladder(CH_NAMES, CH_RATIOS, CH_TOP1, CH_VERDICT, shift)
        facts |= {"technique": "prune-ch", "ladder": steps, "step": steps[1],
                  "elbow": {"name": "prune-ch-0.3", "rule": RULE}}  # fmt: skip
    else:
        ratio, top1, verdict = FORMATS[optimisation]
        facts |= {"technique": optimisation,
                  "step": step(optimisation, ratio, top1 - shift, verdict, base)}  # fmt: skip
    ratio = facts["step"]["compression_ratio"]
    nonzero = NONZERO if optimisation in ("fp16", "int8", "int8-cal") else int(NONZERO / ratio)
    return {"name": optimisation, "kind": facts["technique"], "compression_ratio": ratio,
            "expected_speedup": ratio, "nonzero_before": NONZERO, "nonzero_after": nonzero,
            "dlas": facts}  # fmt: skip


def accuracy_record(wrong_compiled: int, wrong_eager: int = 2, disagree: int = 0) -> dict:
    """A real ``compare`` record over 540 samples: eager wrong on the first ``wrong_eager``, the
    compiled model on the first ``wrong_compiled`` (``disagree`` more samples change their answer
    to another wrong class where eager was already wrong -- agreement falls, top-1 does not)."""
    labels = np.arange(SAMPLES) % 10
    eager = np.eye(10)[labels] * 5.0
    eager[:wrong_eager] = np.eye(10)[(labels[:wrong_eager] + 1) % 10] * 5.0
    compiled = eager.copy()
    compiled[:wrong_compiled] = np.eye(10)[(labels[:wrong_compiled] + 1) % 10] * 5.0
    compiled[:disagree] = np.eye(10)[(labels[:disagree] + 2) % 10] * 5.0
    record = dict(accuracy_stats.compare(eager, compiled, labels))
    record["data"] = "digits-test"
    return record


def trial(model: str, compiler: str, optimisation: str, shift: float, *, batch: int = 8,
          accuracy: dict | None = None, precision: str | None = None,
          throughput: float | None = None) -> TrialResult:  # fmt: skip
    spec = TrialSpec(model=model, compiler=compiler, batch=batch, optimisation=optimisation,
                     measure=MEASURE)  # fmt: skip
    tput = throughput or THROUGHPUT[optimisation] * (1.5 if compiler == "openvino" else 1.0)
    reps = [tput * (1 + n) for n in NOISE]
    extra: dict = {}
    if optimisation != "none":
        extra["optimisation"] = dlas_facts(optimisation, model.split("-")[1], shift)
    if accuracy is not None:
        extra["accuracy"] = accuracy
    return TrialResult(
        key=spec.key, spec=spec.to_dict(), started_at=1_700_000_000.0,
        finished_at=1_700_000_010.0, throughput=Stats(n=5, mean=tput, std=statistics.stdev(reps)),
        repetitions=[{"iters": 10, "elapsed_s": 1.0, "throughput": v} for v in reps],
        cpu_percent_mean=50.0, versions={"ngb": "0.1.0"}, precision=precision, extra=extra,
    )  # fmt: skip


#: the compiled passes: (model, compiler, optimisation) -> (wrong compiled, disagreements)
PASSES = {
    ("digits-resnet", "identity", "none"): (2, 0),
    ("digits-resnet", "openvino", "none"): (2, 2),  # bf16: two answers move, top-1 stays
    ("digits-resnet", "openvino", "int8"): (28, 0),  # 26 more wrong than openvino's none
    ("digits-resnet", "openvino", "int8-cal"): (3, 0),
}


def dlas_results(models: tuple[str, ...] = ("digits-resnet", "digits-vgg")) -> list[TrialResult]:
    out = []
    for model in models:
        shift = 0.0 if model == "digits-resnet" else 0.01
        for compiler in ("identity", "openvino"):
            for optimisation in THROUGHPUT:
                found = PASSES.get((model, compiler, optimisation))
                acc = accuracy_record(found[0], disagree=found[1]) if found else None
                precision = "bf16" if compiler == "openvino" and optimisation == "none" else None
                out.append(trial(model, compiler, optimisation, shift, accuracy=acc,
                                 precision=precision))  # fmt: skip
    return out
