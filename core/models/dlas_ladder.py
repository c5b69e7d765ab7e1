"""The DLAS compression ladder: each step fine-tuned, its accuracy measured, the elbow by rule.

DLAS compresses a trained model step by step and fine-tunes after each step, then reads each
technique's accuracy curve (its Fig. 3) for the *elbow*: the most compression that still keeps
the model's accuracy. Here, for a zoo model (``ngb.core.models.dlas_zoo``):

- **weight pruning** ``prune-l1-R``: global L1 unstructured pruning, iterative: each step prunes
  the previous step's fine-tuned model to ``R`` of all Conv/Linear weights and fine-tunes it with
  those zeros held (``WEIGHT_STEPS``, DLAS's 50 … 99 %); an ``R`` off the list is reached from the
  last listed step below it;
- **channel pruning** ``prune-ch-R``: L1 filter pruning with torch-pruning
  (``ngb.core.models.compress``) from the trained model at each ratio, then fine-tuning
  (``CHANNEL_STEPS``, 5 … 90 %; above 90 % the 32-channel stems keep 1-3 channels and the step says
  little but "broken").

Every step's model is measured in eager on ``digits-test`` (540 samples no model has trained on)
and compared *paired* with the trained model on the same samples
(``ngb.core.statistics.accuracy_stats``: McNemar's exact test, the drop's exact interval):
``step_record``.

**The elbow rule** (``ELBOW_RULE``): walking up the ratios, the last step before the first
significant drop (McNemar exact, 95 %). A later step that happens to test n.s. after a significant
drop is not taken: the curve has already fallen. Where even the first step drops, there is no
elbow, and the technique's row says so.

Each step's weights and record are cached beside the trained model (``ZooTag.folder``): a ladder
is trained once per device and recipe, and every trial after reads it.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from ngb.core.models import compress, labelled_data
from ngb.core.models.dlas_nets import SAMPLE_SHAPE
from ngb.core.models.dlas_training import fit, predictions
from ngb.core.models.dlas_zoo import (
    TRAIN_SET,
    ZooTag,
    baseline,
    held_out,
    load_json,
    load_state,
    save_json,
    save_state,
    seeded,
)
from ngb.core.statistics import accuracy_stats
from torch import nn

WEIGHT_STEPS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)
CHANNEL_STEPS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
ELBOW_RULE = (
    "the highest ratio before the first significant accuracy drop (McNemar exact test against "
    "the trained model on the 540 held-out digits, 95 %)"
)
#: a step record's keys that stay with the step only, not in the ladder a trial stores
_BULKY = ("correct",)

Record = dict[str, Any]


def step_name(kind: str, ratio: float) -> str:
    return f"{kind}-{ratio:g}"


def baseline_record(tag: ZooTag) -> Record:
    """The trained model's top-1 on the held-out set, with its interval and per-sample bits."""
    path = tag.folder() / "baseline.json"
    cached = load_json(path)
    if isinstance(cached, dict) and "correct" in cached:
        return cached
    data = held_out()
    correct = predictions(baseline(tag), data.inputs) == data.labels
    k, n = int(correct.sum()), data.samples
    record: Record = {
        "top1": k / n,
        "top1_ci": list(accuracy_stats.wilson(k, n)),
        "samples": n,
        "correct": accuracy_stats.pack_correct(correct),
    }
    save_json(record, path)
    return record


def step_record(tag: ZooTag, name: str, ratio: float | None, model: nn.Module) -> Record:
    """One step's accuracy against the trained model's, paired, and its size."""
    base = baseline_record(tag)
    data = held_out()
    correct = predictions(model, data.inputs) == data.labels
    n = data.samples
    base_correct = accuracy_stats.unpack_correct(base["correct"], n)
    assert base_correct is not None
    b = int((base_correct & ~correct).sum())
    c = int((~base_correct & correct).sum())
    drop, low, high = accuracy_stats.paired_drop(b, c, n)
    size = compress.model_size(model)
    size_base = compress.model_size(baseline(tag))
    return {
        "name": name,
        "ratio": ratio,
        "params": size["params"],
        "nonzero": size["nonzero"],
        "bytes": size["bytes"],
        "compression_ratio": _compression(name, size_base, size),
        "top1": float(correct.mean()),
        "top1_ci": list(accuracy_stats.wilson(int(correct.sum()), n)),
        "drop": drop,
        "drop_ci": [low, high],
        "p_value": accuracy_stats.mcnemar_p(b, c),
        "verdict": accuracy_stats.verdict(b, c),
        "discordant": [b, c],
        "samples": n,
        "correct": accuracy_stats.pack_correct(correct),
    }


def _compression(name: str, before: dict[str, int], after: dict[str, int]) -> float:
    """The same measure ``ngb.core.models.compress`` reports for the technique."""
    key = "nonzero" if name.startswith("prune-l1") else "params"
    if name.startswith(("fp16", "int8")):
        key = "bytes"
    return before[key] / after[key] if after[key] else float("inf")


def slim(record: Record) -> Record:
    return {k: v for k, v in record.items() if k not in _BULKY}


def _train_data() -> labelled_data.LabelledSet:
    return labelled_data.load(TRAIN_SET)


def _masks(model: nn.Module) -> dict[str, torch.Tensor]:
    """The non-zero pattern of every prunable weight, by parameter name."""
    names = {id(p): n for n, p in model.named_parameters()}
    return {
        names[id(getattr(m, attr))]: getattr(m, attr).detach() != 0
        for m, attr in compress.prunable_weights(model)
    }


def weight_steps(upto: float | None) -> list[float]:
    if upto is None:
        return list(WEIGHT_STEPS)
    return [r for r in WEIGHT_STEPS if r < upto] + [upto]


def weight_pruned(tag: ZooTag, ratio: float | None) -> tuple[nn.Module, list[Record]]:
    """The fine-tuned model at ``ratio`` (the ladder's top where None) and every step's record
    on the way there."""
    steps = weight_steps(ratio)
    found = _from_cache(tag, "prune-l1", steps)
    if found is not None:  # the whole chain is cached: only its last step's weights are needed
        model = baseline(tag)
        if load_state(model, tag.folder() / f"{step_name('prune-l1', steps[-1])}.pt"):
            return model.eval(), found
    model = baseline(tag)
    records: list[Record] = []
    for step in steps:
        name = step_name("prune-l1", step)
        path = tag.folder() / f"{name}.pt"
        if not load_state(model, path):
            compress.prune_unstructured(model, step)
            train = _train_data()
            with seeded(tag.recipe.seed + 1):
                fit(model, train.inputs, train.labels, tag.recipe.finetune_epochs,
                    tag.recipe.finetune_learning_rate, tag.recipe, masks=_masks(model))  # fmt: skip
            save_state(model.state_dict(), path)
            (tag.folder() / f"{name}.json").unlink(missing_ok=True)
        records.append(_record(tag, name, step, model))
    return model, records


def channel_pruned(tag: ZooTag, ratio: float | None) -> tuple[nn.Module, list[Record]]:
    """The fine-tuned channel-pruned model at ``ratio`` (the ladder's top where None) and the
    records of every listed step up to it."""
    steps = list(CHANNEL_STEPS) if ratio is None else [r for r in CHANNEL_STEPS if r < ratio]
    steps += [] if ratio is None else [ratio]
    found = _from_cache(tag, "prune-ch", steps)
    if found is not None:  # every step is cached: cut and load the last one only
        last = step_name("prune-ch", steps[-1])
        cached = _load_pruned(tag, steps[-1], tag.folder() / f"{last}.pt")
        if cached is not None:
            return cached, found
    records: list[Record] = []
    model: nn.Module | None = None
    for step in steps:
        name = step_name("prune-ch", step)
        path = tag.folder() / f"{name}.pt"
        model = _load_pruned(tag, step, path)
        if model is None:
            model = _cut(tag, step)
            train = _train_data()
            with seeded(tag.recipe.seed + 1):
                fit(model, train.inputs, train.labels, tag.recipe.finetune_epochs,
                    tag.recipe.finetune_learning_rate, tag.recipe)  # fmt: skip
            model.eval()
            save_state(model.state_dict(), path)
            (tag.folder() / f"{name}.json").unlink(missing_ok=True)
        records.append(_record(tag, name, step, model))
    assert model is not None
    return model, records


def _load_pruned(tag: ZooTag, step: float, path: Path) -> nn.Module | None:
    """A channel-pruned step from the cache: the trained model pruned again (L1 magnitude from
    the same trained weights gives the same channels; a torch-pruning trace) and the fine-tuned
    weights loaded into it; None where missing or not fitting. A plain state dict, so the
    cache is read with ``weights_only`` (torch-pruning's own state format pickles modules)."""
    if not path.is_file():
        return None
    model = _cut(tag, step)
    return model.eval() if load_state(model, path) else None


def _cut(tag: ZooTag, step: float) -> nn.Module:
    model = baseline(tag)
    compress.prune_channels(model, torch.zeros((1, *SAMPLE_SHAPE)), step)
    return model


def _record(tag: ZooTag, name: str, ratio: float | None, model: nn.Module) -> Record:
    path = tag.folder() / f"{name}.json"
    cached = load_json(path)
    if isinstance(cached, dict) and cached.get("name") == name:
        return cached
    record = step_record(tag, name, ratio, model)
    save_json(record, path)
    return record


def choose_elbow(records: Sequence[Record]) -> Record | None:
    """``ELBOW_RULE`` over the records in ascending ratio."""
    chosen: Record | None = None
    for record in sorted(records, key=lambda r: float(r.get("ratio") or 0.0)):
        if record.get("verdict") == accuracy_stats.DROP:
            break
        chosen = record
    return chosen


def ladder(tag: ZooTag, technique: str) -> tuple[list[Record], Record | None]:
    """The technique's whole curve and its elbow (None where the first step already drops)."""
    steps = weight_steps(None) if technique == "prune-l1" else list(CHANNEL_STEPS)
    records = _from_cache(tag, technique, steps)
    if records is None:  # a step to train (or to measure): the ladder itself, in order
        run = weight_pruned if technique == "prune-l1" else channel_pruned
        _, records = run(tag, None)
    return records, choose_elbow(records)


def _from_cache(tag: ZooTag, kind: str, steps: Sequence[float]) -> list[Record] | None:
    """Every step's record where each step's weights and record are both cached (a step that
    is trained again loses its record first), else None. Every worker of every trial on a
    device asks for the ladder: read, it costs milliseconds; rebuilt, each channel step's cut
    is a torch-pruning graph trace (2.3 s for the MobileNet-style ladder)."""
    records: list[Record] = []
    for step in steps:
        name = step_name(kind, step)
        record = load_json(tag.folder() / f"{name}.json")
        if not (isinstance(record, dict) and record.get("name") == name):
            return None
        if not (tag.folder() / f"{name}.pt").is_file():
            return None
        records.append(record)
    return records


def elbow_model(tag: ZooTag, technique: str) -> tuple[nn.Module, list[Record], Record | None]:
    """The elbow's model (the trained model where there is no elbow), the curve and the elbow."""
    records, elbow = ladder(tag, technique)
    if elbow is None:
        return baseline(tag), records, None
    run = weight_pruned if technique == "prune-l1" else channel_pruned
    model, _ = run(tag, float(elbow["ratio"]))
    return model, records, elbow


def calibration_batches(samples: np.ndarray, batch: int = 32) -> list[torch.Tensor]:
    return [torch.from_numpy(samples[i : i + batch]) for i in range(0, len(samples), batch)]


_METHODS = {
    "prune-l1": "torch.nn.utils.prune global L1 unstructured",
    "prune-ch": "torch-pruning L1 magnitude channel pruning",
}


def ladder_step(
    model: nn.Module, kind: str, ratio: float | None, tag: ZooTag
) -> tuple[nn.Module, compress.Facts, Record]:
    """A zoo model's pruning for ``ngb.core.trial.optimise``: ``kind`` (``prune-l1``, ``prune-ch``,
    ``elbow-prune-l1``, ``elbow-prune-ch``) as the fine-tuned ladder step, on the device the
    trained ``model`` was put on; its facts and what the ladder found (curve, elbow)."""
    device = next(model.parameters()).device
    technique = kind.removeprefix("elbow-")
    steps = "weight" if technique == "prune-l1" else "channel"
    facts: compress.Facts = {
        "method": f"DLAS {steps} pruning ladder, {tag.recipe.finetune_epochs} fine-tuning "
        f"epochs after each step ({_METHODS[technique]})",
    }
    elbow: Record | None = None
    if kind.startswith("elbow-"):
        pruned, records, elbow = elbow_model(tag, technique)
        facts["elbow"] = None if elbow is None else str(elbow["name"])
    elif technique == "prune-l1":
        pruned, records = weight_pruned(tag, ratio)
    else:
        pruned, records = channel_pruned(tag, ratio)
    found: Record = {"technique": technique, "ladder": [slim(r) for r in records]}
    if kind.startswith("elbow-"):
        found["elbow"] = {"name": None if elbow is None else elbow["name"], "rule": ELBOW_RULE}
    return pruned.to(device).eval(), facts, found


def step_facts(
    tag: ZooTag,
    name: str,
    kind: str,
    ratio: float | None,
    model: nn.Module,
    found: Record | None,
) -> Record:
    """``facts["dlas"]`` of a zoo model's optimisation: this step's eager top-1 on the held-out
    digits, paired against the trained model's, beside what the ladder found."""
    from ngb.core.models.dlas_zoo import TEST_SET

    base = baseline_record(tag)
    elbow = found.get("elbow") if found is not None else None
    if isinstance(elbow, dict) and found is not None:
        name = str(elbow.get("name") or "none")  # the step the rule chose (none: no elbow)
        ratio = next((r.get("ratio") for r in found["ladder"] if r.get("name") == name), None)
    # measured on the CPU, like the ladder (a copy: the trial's model stays where it is)
    first = next(iter(model.parameters()), None)
    on_cpu = (
        copy.deepcopy(model).cpu() if first is not None and first.device.type != "cpu" else model
    )
    out: Record = {
        "arch": tag.arch,
        "data": TEST_SET,
        "recipe_key": tag.recipe.key,
        "baseline": {k: base[k] for k in ("top1", "top1_ci", "samples")},
        "technique": kind,
        "step": _record(tag, name, ratio, on_cpu),  # each worker reads what the first measured
    }
    out.update(found or {})
    return out
