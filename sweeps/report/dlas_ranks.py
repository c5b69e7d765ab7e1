"""DLAS's observation I, tested: "MACs, accuracy and inference time are not strongly correlated".

Over the DLAS trials of one device, compiler and batch (every zoo model at every optimisation,
its ``none`` trial included) three Spearman rank correlations: size ~ top-1, size ~ time and
top-1 ~ time, each with a 95 % percentile bootstrap interval (rows resampled with replacement,
``RESAMPLES`` times, seeded, so a report is reproducible), and ``n``, the rows that had all
three numbers.

- size: MACs after the optimisation where every row's facts store them (``macs_after``; an
  unoptimised row ``macs_before`` of its model's facts), else non-zero parameters after it
  (``nonzero_after``; the ``none`` row takes ``nonzero_before`` from its model's facts). The
  trial's own MACs column is counted on the model before any optimisation, so it cannot rank
  compressed models.
- top-1: the compiled model's on the device where every row has an accuracy pass, else the
  eager model's from the DLAS facts (the baseline's for the ``none`` row).
- time: seconds per sample, 1 / mean throughput (ranks only, so the batch is held fixed).

Spearman's rho is Pearson's on ranks, ties sharing their mean rank
(``ngb.core.trial.page_faults.rank_correlation``, the same computation, gives the estimate).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from ngb.core.records.trial_extra import from_json
from ngb.core.trial.page_faults import rank_correlation
from ngb.sweeps.report import derived
from ngb.sweeps.report.data import Cell, Table, group_by, positive
from ngb.sweeps.report.dlas_facts import ModelFacts, collect, dlas_of
from ngb.sweeps.report.paper import compiler_order
from ngb.sweeps.rows import TrialRow, mapping, number

RESAMPLES = 2000
SEED = 42
CONFIDENCE = 0.95
#: fewer rows than this give no rank correlation worth printing
MIN_ROWS = 5
PAIRS = (("size", "top-1"), ("size", "time"), ("top-1", "time"))


def ranks(values: np.ndarray) -> np.ndarray:
    """Ranks from 1 along the last axis, ties sharing their mean rank (each row on its own)."""
    values = np.atleast_2d(np.asarray(values, dtype=float))
    rows, n = values.shape
    order = np.argsort(values, axis=1, kind="stable")
    ordered = np.take_along_axis(values, order, axis=1)
    starts = np.ones((rows, n), dtype=bool)
    starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    # one group id per run of equal values, unique over all rows
    groups = (np.cumsum(starts, axis=1) - 1) + (np.arange(rows) * n)[:, None]
    position = np.broadcast_to(np.arange(1, n + 1, dtype=float), (rows, n))
    sums = np.bincount(groups.ravel(), weights=position.ravel(), minlength=rows * n)
    counts = np.bincount(groups.ravel(), minlength=rows * n)
    mean_rank = (sums / np.maximum(counts, 1))[groups]
    out = np.empty_like(mean_rank)
    np.put_along_axis(out, order, mean_rank, axis=1)
    return out


def spearman_rows(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Spearman's rho of each row pair (NaN where either row does not vary)."""
    rx, ry = ranks(xs), ranks(ys)
    rx = rx - rx.mean(axis=1, keepdims=True)
    ry = ry - ry.mean(axis=1, keepdims=True)
    denom = np.sqrt((rx * rx).sum(axis=1) * (ry * ry).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = (rx * ry).sum(axis=1) / denom
    return np.where(denom > 0, rho, np.nan)


def rank_interval(
    xs: Sequence[float], ys: Sequence[float], resamples: int = RESAMPLES, seed: int = SEED
) -> tuple[float | None, float | None, float | None]:
    """(rho, low, high): the estimate and its percentile bootstrap interval (None: no estimate,
    or too few resamples that vary)."""
    rho = rank_correlation(xs, ys)
    if rho is None:
        return None, None, None
    x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    picks = np.random.default_rng(seed).integers(0, len(x), size=(resamples, len(x)))
    boot = spearman_rows(x[picks], y[picks])
    boot = boot[np.isfinite(boot)]
    if boot.size < resamples // 2:
        return rho, None, None
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(boot, [tail, 100 - tail])
    return rho, float(low), float(high)


def _rho_cell(xs: list[float], ys: list[float]) -> Cell:
    rho, low, high = rank_interval(xs, ys)
    if rho is None:
        return Cell(None)
    ns = low is not None and high is not None and low <= 0 <= high
    return Cell(rho, None, "n.s." if ns else "", low, high)


def _sizes(row: TrialRow, before: Mapping[str, float]) -> tuple[float | None, float | None]:
    """(MACs, non-zero parameters) of the row's model after its optimisation."""
    facts = mapping(from_json(row.get("extra")).get("optimisation"))
    if (row.get("optimisation") or "none") == "none":
        return before.get("macs"), before.get("nonzero")
    return number(facts.get("macs_after")), number(facts.get("nonzero_after"))


def _model_before(rows: Sequence[TrialRow]) -> Mapping[str, float]:
    """The unoptimised model's size, from any of its optimised trials' facts."""
    out: dict[str, float] = {}
    for r in rows:
        facts = mapping(from_json(r.get("extra")).get("optimisation"))
        for key in ("macs", "nonzero"):
            value = number(facts.get(f"{key}_before"))
            if value is not None:
                out.setdefault(key, value)
    return out


def _top1s(row: TrialRow, baseline: float | None) -> tuple[float | None, float | None]:
    """(compiled top-1, eager top-1) of the row, fractions."""
    compiled = derived.top1(row)
    step = mapping(dlas_of(row).get("step"))
    eager = baseline if (row.get("optimisation") or "none") == "none" else number(step.get("top1"))
    return (compiled.value / 100 if compiled is not None else None), eager


def observation_one(rows: Sequence[TrialRow]) -> Table | None:
    """The rank-correlation table (see module); None without DLAS trials."""
    models = {(m.device, m.label): m for m in collect(rows)}
    if not models:
        return None
    table = Table(
        "DLAS observation I: rank correlations of size, accuracy and time",
        ["device", "compiler", "batch", "n", "size", "top-1 of", "size ~ top-1", "size ~ time",
         "top-1 ~ time"],
    )  # fmt: skip
    mine = [r for r in rows if (r["device"], r["label"]) in models
            and positive(r.get("throughput_mean"))
            and (dlas_of(r) or (r.get("optimisation") or "none") == "none")]  # fmt: skip
    before = {key: _model_before([r for r in rows if (r["device"], r["label"]) == key])
              for key in models}  # fmt: skip
    groups = group_by(mine, lambda r: (r["device"], r["compiler"], r["batch"]))
    for device, compiler, batch in sorted(groups, key=lambda k: (k[0], compiler_order(k[1]), k[2])):
        group = groups[(device, compiler, batch)]
        sizes = [_sizes(r, before[(r["device"], r["label"])]) for r in group]
        use_macs = all(s[0] is not None for s in sizes)
        size = [s[0] if use_macs else s[1] for s in sizes]
        accuracy = [_top1s(r, _baseline(models[(r["device"], r["label"])])) for r in group]
        compiled = all(a[0] is not None for a in accuracy)
        top1 = [a[0] if compiled else a[1] for a in accuracy]
        time = [1 / float(r["throughput_mean"] or 0) for r in group]
        points = [(s, a, t) for s, a, t in zip(size, top1, time, strict=True)
                  if s is not None and a is not None]  # fmt: skip
        line: list[object] = [device, compiler, batch, len(points),
                              "MACs" if use_macs else "non-zero params",
                              "compiled" if compiled else "eager"]  # fmt: skip
        if len(points) < MIN_ROWS:
            table.rows.append(line + [None, None, None])
            table.notes.append(
                f"{device} {compiler} b{batch}: {len(points)} row(s) with size, top-1 and time; "
                f"a rank correlation needs {MIN_ROWS}"
            )
            continue
        column = {"size": [p[0] for p in points], "top-1": [p[1] for p in points],
                  "time": [p[2] for p in points]}  # fmt: skip
        table.rows.append(line + [_rho_cell(column[a], column[b]) for a, b in PAIRS])
    table.notes.append(
        f"Spearman's rank correlation over the trials (each a model at one optimisation), "
        f"95 % percentile bootstrap interval ({RESAMPLES:,} resamples of the rows, seed {SEED}); "
        "n = rows with all three numbers; n.s. = the interval includes 0; '-' = a side that "
        "does not vary. time = 1 / mean throughput; size = MACs after the optimisation where "
        "stored, else non-zero parameters after it. DLAS's observation I holds where these "
        "stay far from +-1"
    )
    return table


def _baseline(model: ModelFacts) -> float | None:
    return model.baseline.top1 if model.baseline is not None else None
