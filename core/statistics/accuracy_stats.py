"""Accuracy as a measured quantity: top-k with its interval, and the paired test of a drop.

A compiled model's accuracy is a proportion over a finite labelled set, so it gets an interval
like every other number ngb prints: Wilson's score interval (good coverage down to a handful of
errors, never outside [0, 1], unlike the Wald interval at 97 % of 1,797).

Comparing the compiled model with its baseline (eager fp32, same inputs) is a *paired* question:
both models answer the same samples, and most samples are right (or wrong) under both. Only the
discordant ones carry information: ``b`` samples the baseline got right and the compiled model
wrong, ``c`` the other way round. McNemar's exact test conditions on ``m = b + c``: under "no
difference" ``b ~ Binomial(m, 1/2)``; the two-sided p is twice the smaller tail (at most 1). The
drop's interval is the same conditional model: Clopper-Pearson's exact interval for
``pi = b / m``, carried to the drop ``(b - c) / n = m (2 pi - 1) / n``. That interval excludes 0
exactly where the exact test's p is at most ``1 - confidence``, so the verdict -- ``n.s.`` where
the interval includes 0, as every other ngb comparison -- and the p value never disagree.

Without labels, ``fidelity`` compares a compiled model's outputs with eager's on the verify
batch: SQNR in dB and top-1 agreement (issue 42), beside the worst absolute error.

Pure Python and numpy: it runs on the device agent, which has neither scipy nor the reports.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping
from statistics import NormalDist
from typing import TypedDict

import numpy as np
from ngb.core.base.errors import NgbError

#: the verdicts of a paired comparison: no significant difference, a significant drop, a gain
NS, DROP, GAIN = "n.s.", "drop", "gain"


def z_quantile(confidence: float) -> float:
    """The two-sided normal quantile for ``confidence`` (1.96 at 0.95)."""
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def wilson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson's score interval for ``k`` successes of ``n`` (``(nan, nan)`` for ``n = 0``)."""
    if n <= 0:
        return (math.nan, math.nan)
    if not 0 <= k <= n:
        raise ValueError(f"successes {k} outside 0..{n}")
    z = z_quantile(confidence)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # exact at the ends: k = 0 has 0 as its lower bound, k = n has 1 as its upper
    low = 0.0 if k == 0 else max(0.0, centre - half)
    high = 1.0 if k == n else min(1.0, centre + half)
    return (low, high)


def _binomial_log_pmf(m: int, p: float) -> np.ndarray:
    """log P(X = k) for k = 0..m, X ~ Binomial(m, p), 0 < p < 1."""
    k = np.arange(m + 1, dtype=np.float64)
    log_comb = np.concatenate(([0.0], np.cumsum(np.log(m - k[1:] + 1) - np.log(k[1:]))))
    return log_comb + k * math.log(p) + (m - k) * math.log1p(-p)


def _tail_at_most(x: int, m: int, p: float) -> float:
    """P(X <= x), X ~ Binomial(m, p)."""
    if x < 0:
        return 0.0
    if x >= m or p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    log_pmf = _binomial_log_pmf(m, p)[: x + 1]
    top = float(log_pmf.max())
    return min(1.0, math.exp(top) * float(np.exp(log_pmf - top).sum()))


def mcnemar_p(b: int, c: int) -> float:
    """McNemar's exact two-sided p value for ``b`` and ``c`` discordant pairs (1 when none)."""
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got {b}, {c}")
    m = b + c
    if m == 0:
        return 1.0
    return min(1.0, 2.0 * _tail_at_most(min(b, c), m, 0.5))


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval for ``k`` of ``n``, by bisection on the tails."""
    if n <= 0:
        return (math.nan, math.nan)
    alpha = (1 - confidence) / 2

    def solve(target: float, tail: str) -> float:
        # upper: P(X <= k | p) = alpha, decreasing in p; lower: P(X >= k | p) = alpha, increasing
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            if tail == "upper":
                value = _tail_at_most(k, n, mid)
                lo, hi = (mid, hi) if value > target else (lo, mid)
            else:
                value = 1.0 - _tail_at_most(k - 1, n, mid)
                lo, hi = (lo, mid) if value > target else (mid, hi)
        return (lo + hi) / 2

    low = 0.0 if k == 0 else solve(alpha, "lower")
    high = 1.0 if k == n else solve(alpha, "upper")
    return (low, high)


def paired_drop(b: int, c: int, n: int, confidence: float = 0.95) -> tuple[float, float, float]:
    """The accuracy drop ``(b - c) / n`` with its exact conditional interval (see the module
    docstring); ``b``: right under the baseline only, ``c``: right under the compared only."""
    if n <= 0:
        return (math.nan, math.nan, math.nan)
    m = b + c
    drop = (b - c) / n
    if m == 0:
        return (0.0, 0.0, 0.0)
    low, high = clopper_pearson(b, m, confidence)
    return (drop, m * (2 * low - 1) / n, m * (2 * high - 1) / n)


def verdict(b: int, c: int, confidence: float = 0.95) -> str:
    """``n.s.`` unless McNemar's exact test rejects at ``1 - confidence``: then drop or gain."""
    if mcnemar_p(b, c) > 1 - confidence:
        return NS
    return DROP if b > c else GAIN


def topk_hits(scores: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """Boolean per sample: is the label among the ``k`` highest scores (ties: lowest index)."""
    if k == 1:
        return np.asarray(np.argmax(scores, axis=1) == labels)
    top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    return np.asarray((top == labels[:, None]).any(axis=1))


class AccuracyRecord(TypedDict, total=False):
    """``extra["accuracy"]`` of a trial: the compiled model over a labelled set, beside eager.

    Proportions are fractions (0..1), intervals ``[low, high]`` at ``confidence``; ``drop`` is
    eager top-1 minus the compiled model's (positive: the compiled model is worse)."""

    data: str  # the data set reference as given (``digits``, a file, ``module:loader``)
    samples: int
    classes: int
    batch: int  # the batch the compiled model ran the set in (the last one padded)
    confidence: float
    top1: float
    top1_ci: list[float]
    top5: float  # only where the model scores more than 5 classes
    top5_ci: list[float]
    eager_top1: float
    eager_top1_ci: list[float]
    eager_top5: float
    eager_top5_ci: list[float]
    agreement: float  # share of samples whose top-1 is the same under both
    agreement_ci: list[float]
    discordant: list[int]  # [b, c]: right under eager only, right under the compiled only
    drop: float
    drop_ci: list[float]
    p_value: float  # McNemar's exact test of the paired correctness
    verdict: str  # n.s. | drop | gain
    nan_outputs: int  # samples whose compiled scores hold a NaN (counted wrong)
    correct: str  # the compiled model's top-1 right/wrong per sample, packed (``pack_correct``)
    eager_correct: str  # the same for eager
    note: str  # one line where something needs saying (NaN outputs, a reshape)
    eager_s: float  # seconds of the eager pass
    compiled_s: float  # seconds of the compiled model's pass
    pass_s: float  # the whole accuracy pass: data, eager, compiled, statistics


def compare(
    baseline: np.ndarray, compiled: np.ndarray, labels: np.ndarray, confidence: float = 0.95
) -> AccuracyRecord:
    """Top-1 (and top-5 above 5 classes) of both score arrays ``(samples, classes)``, agreement,
    McNemar's test and the drop. A row of ``compiled`` holding a NaN counts as wrong (and is
    counted); a NaN in ``baseline`` is an error: the reference itself is broken."""
    baseline = np.asarray(baseline, dtype=np.float64)
    compiled = np.asarray(compiled, dtype=np.float64)
    labels = np.asarray(labels)
    if baseline.ndim != 2 or compiled.shape != baseline.shape:
        raise NgbError(
            f"scores must be (samples, classes) and alike: eager {baseline.shape}, "
            f"compiled {compiled.shape}"
        )
    n, classes = baseline.shape
    if labels.shape != (n,):
        raise NgbError(f"{labels.shape[0] if labels.ndim else 0} labels for {n} outputs")
    if np.isnan(baseline).any():
        rows = int(np.isnan(baseline).any(axis=1).sum())
        raise NgbError(f"the eager model gave NaN outputs for {rows} of {n} samples")
    nan_rows = np.isnan(compiled).any(axis=1)
    compiled = np.where(nan_rows[:, None], -np.inf, compiled)
    base_hit = topk_hits(baseline, labels, 1)
    hit = topk_hits(compiled, labels, 1) & ~nan_rows
    agree = (np.argmax(baseline, axis=1) == np.argmax(compiled, axis=1)) & ~nan_rows
    b = int((base_hit & ~hit).sum())
    c = int((~base_hit & hit).sum())
    drop, low, high = paired_drop(b, c, n, confidence)

    def with_ci(k: int) -> tuple[float, list[float]]:
        return k / n, list(wilson(k, n, confidence))

    record: AccuracyRecord = {"samples": n, "classes": classes, "confidence": confidence}
    record["top1"], record["top1_ci"] = with_ci(int(hit.sum()))
    record["eager_top1"], record["eager_top1_ci"] = with_ci(int(base_hit.sum()))
    if classes > 5:
        record["top5"], record["top5_ci"] = with_ci(
            int((topk_hits(compiled, labels, 5) & ~nan_rows).sum())
        )
        record["eager_top5"], record["eager_top5_ci"] = with_ci(
            int(topk_hits(baseline, labels, 5).sum())
        )
    record["agreement"], record["agreement_ci"] = with_ci(int(agree.sum()))
    record["discordant"] = [b, c]
    record["drop"], record["drop_ci"] = drop, [low, high]
    record["p_value"] = mcnemar_p(b, c)
    record["verdict"] = verdict(b, c, confidence)
    record["nan_outputs"] = int(nan_rows.sum())
    # per sample, so that two stored trials on the same set compare paired (``between``)
    record["correct"] = pack_correct(hit)
    record["eager_correct"] = pack_correct(base_hit)
    if nan_rows.any():
        record["note"] = (
            f"the compiled model gave NaN outputs for {int(nan_rows.sum())} of {n} samples "
            "(counted wrong)"
        )
    return record


def pack_correct(hits: np.ndarray) -> str:
    """Right/wrong per sample as base64 of ``numpy.packbits`` (1,797 samples: 300 characters)."""
    return base64.b64encode(np.packbits(np.asarray(hits, dtype=bool)).tobytes()).decode("ascii")


def unpack_correct(text: object, samples: int) -> np.ndarray | None:
    """``pack_correct``'s booleans back, or None where ``text`` is not a packing of ``samples``."""
    if not isinstance(text, str) or samples <= 0:
        return None
    try:
        raw = np.frombuffer(base64.b64decode(text, validate=True), dtype=np.uint8)
    except ValueError:
        return None
    if raw.size != (samples + 7) // 8:
        return None
    return np.unpackbits(raw)[:samples].astype(bool)


class PairedDrop(TypedDict):
    """How much ``other`` loses against ``base`` on the same samples (positive: a drop)."""

    samples: int
    base_top1: float
    other_top1: float
    discordant: list[int]
    drop: float
    drop_ci: list[float]
    p_value: float
    verdict: str


def between(
    base: Mapping[str, object], other: Mapping[str, object], confidence: float = 0.95
) -> PairedDrop | None:
    """The paired drop from one stored accuracy record to another (the ``none`` row of a model to
    its pruned row, eager to a compiler): McNemar over their per-sample correctness. None where
    the two did not answer the same samples of the same set (or one lacks the bits)."""
    if base.get("data") != other.get("data") or base.get("samples") != other.get("samples"):
        return None
    n = base.get("samples")
    if not isinstance(n, int):
        return None
    a = unpack_correct(base.get("correct"), n)
    o = unpack_correct(other.get("correct"), n)
    if a is None or o is None:
        return None
    b = int((a & ~o).sum())
    c = int((~a & o).sum())
    drop, low, high = paired_drop(b, c, n, confidence)
    return {
        "samples": n,
        "base_top1": float(a.mean()),
        "other_top1": float(o.mean()),
        "discordant": [b, c],
        "drop": drop,
        "drop_ci": [low, high],
        "p_value": mcnemar_p(b, c),
        "verdict": verdict(b, c, confidence),
    }


def _percent(value: object) -> str:
    return f"{100 * value:.1f}" if isinstance(value, int | float) else "?"


def _with_interval(record: Mapping[str, object], name: str) -> str:
    ci = record.get(f"{name}_ci")
    bounds = ci if isinstance(ci, list) and len(ci) == 2 else ["?", "?"]
    return f"{_percent(record.get(name))} % [{_percent(bounds[0])}, {_percent(bounds[1])}]"


def summary(record: Mapping[str, object]) -> str:
    """One line: ``top-1 97.2 % [96.4, 97.9] (eager 97.3 % [...]), top-5 ..., agreement ...,
    drop 0.1 points [-0.2, 0.4] n.s. (McNemar p 1, 1,797 samples), pass 0.41 s``."""
    parts = [
        f"top-1 {_with_interval(record, 'top1')} (eager {_with_interval(record, 'eager_top1')})"
    ]
    if "top5" in record:
        parts.append(f"top-5 {_with_interval(record, 'top5')}")
    parts.append(f"agreement with eager {_with_interval(record, 'agreement')}")
    drop, ci = record.get("drop"), record.get("drop_ci")
    if isinstance(drop, int | float) and isinstance(ci, list) and len(ci) == 2:
        p = record.get("p_value")
        p_text = f"{p:.2g}" if isinstance(p, int | float) else "?"
        parts.append(
            f"drop {_percent(drop)} points [{_percent(ci[0])}, {_percent(ci[1])}] "
            f"{record.get('verdict', '?')} (McNemar p {p_text}, {record.get('samples', 0):,} "
            "samples)"
        )
    if isinstance(record.get("pass_s"), int | float):
        parts.append(f"pass {record['pass_s']:.3g} s")
    line = ", ".join(parts)
    note = record.get("note")
    return f"{line}; {note}" if note else line


class Fidelity(TypedDict, total=False):
    """``extra["fidelity"]`` (``fidelity``): the compiled output against eager's beyond the worst
    error (SQNR; top-1 agreement where the output has rows of class scores)."""

    exact: bool
    sqnr_db: float | None
    top1_agreement: float
    rows: int


def fidelity(reference: np.ndarray, got: np.ndarray) -> Fidelity:
    """Beyond one number's worst error, without labels (issue 42): the signal-to-quantisation-
    noise ratio of the whole output, ``10 log10(sum ref^2 / sum (got - ref)^2)`` in dB (None and
    ``exact`` where the outputs are equal), and for class scores ``(batch, classes)`` the share
    of rows whose top-1 class is eager's."""
    noise = float(np.sum((got - reference) ** 2))
    signal = float(np.sum(reference**2))
    out: Fidelity = {"exact": noise == 0.0, "sqnr_db": None}
    if noise > 0.0 and signal > 0.0 and math.isfinite(noise):
        out["sqnr_db"] = round(10.0 * math.log10(signal / noise), 2)
    if reference.ndim == 2 and reference.shape[1] > 1 and reference.shape[0] > 0:
        broken = ~np.isfinite(got).all(axis=1)  # a row with NaN or inf agrees with nothing
        same = (np.argmax(reference, axis=1) == np.argmax(np.nan_to_num(got), axis=1)) & ~broken
        out["top1_agreement"] = float(same.mean())
        out["rows"] = int(reference.shape[0])
    return out
