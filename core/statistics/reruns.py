"""What re-runs on this machine say about a trial's spread: the part of the interval that time adds.

Why (issue 30): a trial's interval is a Student-t over its worker processes' means
(``ngb.core.statistics.stopping.process_interval``), and it is honest only if those processes are
independent draws of what a re-run meets. On the 2-core development VM they are not: the machine's
speed wanders on a scale of seconds to minutes (a plain hand-written MHA loop in fresh processes
20 s apart read 3,000-5,000/s with the machine otherwise idle), so the processes of one trial,
seconds apart, agree with each other more than with a trial run minutes later. Measured over
12 re-runs each (2026-11-26, load 1-2): the variance of the trial means between runs was 3.1x
(mha:128:1), 3.1x (conv:64:16) and 1.7x (resnet18 b8) what the trials' own process intervals
implied, and their coverage was 58 / 75 / 83 % instead of 95 %. A probe run just before each trial
did not predict it (correlation 0.06 / 0.26 / -0.47), so no reading taken beside the trial can
correct for it: the only witness of that variance is re-runs.

So each trial's result is appended to a small history on the machine that measured it
(``reruns.jsonl`` in the device's long-lived cache, one JSON line per trial: when, host, trial
key, log of the mean, the variance of that log from its own processes). A trial flagged
disturbed is left out: another process's load is its own INVALID reason, and as a re-run it would
widen every later trial's interval on the host. A trial's interval then
uses two things from that history:

- the **design effect** D: how much larger the variance of a trial mean between runs is than its
  own processes imply, pooled over every trial that was run more than once on this host (each
  trial's sum of squares over its mean process variance, over their degrees of freedom), shrunk
  towards the default ``DEFAULT_DESIGN_EFFECT`` with the weight of ``PRIOR_DF`` degrees of
  freedom, the trial's own re-runs weighted first. The process interval's variance is multiplied
  by D (never below 1). Before any re-run on a host, D is the default -- 3, the value measured on
  the VM above -- and the verdict says so: an interval that may be too wide on a quiet server is
  the price of never stating a width the next run will not meet.
- the trial's **own re-runs**: with two or more earlier runs of the same trial on this host, the
  variance of their log means and this one's (runs - 1 degrees of freedom) is pooled with the
  widened process variance (k - 1), each weighed by its degrees of freedom, and the t quantile
  takes the sum of both. The result is never narrower than the process interval itself.

Replayed over the 36 trials recorded on 2026-11-26 and the 36 of 2026-11-27 (mha:128:1,
conv:64:16, resnet18 b8; history empty at the start, in their order), this gives coverage
92 / 92 / 92 % at width ratios 1.02 / 0.80 / 1.17 and 92 / 100 / 100 % at 1.13 / 1.51 / 1.13.
Taking the larger of the two estimates instead (each at its own t) held 100 / 100 / 100 % at
1.51 / 1.80 / 1.35 in the fresh ``ngb bench coverage`` of 2026-11-27: too wide. Only the
interval changes: the trial's mean is its own.

The history is best effort: an unreadable or unwritable cache means the default D, never a failed
trial. It is kept per host (a cache on a shared home serves several machines) and to the last
``KEEP_DAYS`` days; the file is cut back to its last ``KEEP_LINES`` lines when it grows past twice
that.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ngb.core.statistics.stopping import Interval
from ngb.core.statistics.student_t import t_quantile

FILE_NAME = "reruns.jsonl"
#: the design effect before a host has re-run anything (measured on the 2-core VM; see above)
DEFAULT_DESIGN_EFFECT = 3.0
#: the default's weight, in degrees of freedom, against what the host's re-runs show
PRIOR_DF = 3.0
#: the design effect is not trusted past this (one wild run in a short history)
MAX_DESIGN_EFFECT = 25.0
KEEP_DAYS = 7.0
KEEP_LINES = 5000


@dataclass(frozen=True)
class Run:
    """One trial as the history keeps it: log of its mean and that log's variance from its own
    processes (the variance of the log process means over their count)."""

    key: str
    log_mean: float
    log_var: float
    processes: int


@dataclass(frozen=True)
class Allowance:
    """What the history says for one trial key."""

    design_effect: float = DEFAULT_DESIGN_EFFECT
    pooled_runs: int = 0  # earlier runs of trials run more than once on this host (all keys)
    own: tuple[float, ...] = ()  # log means of this trial's earlier runs on this host

    @property
    def learnt(self) -> bool:
        return self.pooled_runs > 0

    def text(self) -> str:
        """How much wider than its processes' interval the stated one is, and on what grounds."""
        widened = f"x{math.sqrt(self.design_effect):.2f} for re-runs minutes apart"
        if not self.learnt:
            return f"{widened} (the default: no re-runs on this host yet)"
        return f"{widened} (from {self.pooled_runs} re-runs on this host)"

    def to_dict(self) -> dict[str, object]:
        return {
            "design_effect": round(self.design_effect, 4),
            "pooled_runs": self.pooled_runs,
            "own_runs": len(self.own),
            "source": "this host's re-runs" if self.learnt else "default",
        }


def log_spread(groups: Sequence[Sequence[float]]) -> Run | None:
    """(log of the mean of the process means, variance of that log from the processes) for a
    trial's worker groups; None below two processes with positive means."""
    means = [math.fsum(g) / len(g) for g in groups if g]
    means = [m for m in means if math.isfinite(m) and m > 0]
    if len(means) < 2:
        return None
    logs = [math.log(m) for m in means]
    centre = math.fsum(logs) / len(logs)
    var = math.fsum((v - centre) ** 2 for v in logs) / (len(logs) - 1)
    return Run("", math.log(math.fsum(means) / len(means)), var / len(logs), len(means))


def allowance(runs: Sequence[Run], key: str) -> Allowance:
    """The design effect for ``key`` and its own earlier runs, from this host's history."""
    by_key: dict[str, list[Run]] = {}
    for run in runs:
        by_key.setdefault(run.key, []).append(run)
    pooled_ss = pooled_df = own_ss = own_df = 0.0
    counted = 0
    for name, rows in by_key.items():
        if len(rows) < 2:
            continue
        mean_var = math.fsum(r.log_var for r in rows) / len(rows)
        if mean_var <= 0:
            continue
        centre = math.fsum(r.log_mean for r in rows) / len(rows)
        ss = math.fsum((r.log_mean - centre) ** 2 for r in rows) / mean_var
        counted += len(rows)
        if name == key:
            own_ss, own_df = ss, len(rows) - 1.0
        else:
            pooled_ss += ss
            pooled_df += len(rows) - 1.0
    pooled = (PRIOR_DF * DEFAULT_DESIGN_EFFECT + pooled_ss) / (PRIOR_DF + pooled_df)
    # the trial's own re-runs first, the host's other trials as their prior
    effect = (PRIOR_DF * pooled + own_ss) / (PRIOR_DF + own_df)
    effect = min(MAX_DESIGN_EFFECT, max(1.0, effect))
    own = tuple(r.log_mean for r in by_key.get(key, ()))
    return Allowance(effect, counted, own)


@dataclass(frozen=True)
class Stated:
    """The interval a trial states: its half-width (samples/s), degrees of freedom, and why."""

    half_width: float
    df: int
    note: str
    allowance: Allowance
    widening: float = 1.0  # half_width over the process interval's: what time added

    def to_dict(self) -> dict[str, object]:
        return {
            **self.allowance.to_dict(),
            "df": self.df,
            "note": self.note,
            "widening": round(self.widening, 6),
        }


def widen(ci: Interval, allow: Allowance, now: Run | None, confidence: float) -> Stated | None:
    """The process interval ``ci`` with time's part added (see the module docstring): its
    variance times the design effect, pooled with the spread of the trial's own re-runs where
    it has two or more. None when ``ci`` has no finite width (fewer than two repetitions)."""
    if ci.n < 2 or not math.isfinite(ci.half_width) or not ci.mean > 0:
        return None
    df = ci.workers - 1 if ci.workers >= 2 else ci.n - 1
    p = (1 + confidence) / 2
    # the log-scale variance of the mean its processes imply, times the design effect
    var = allow.design_effect * (ci.half_width / ci.mean / t_quantile(p, df)) ** 2
    note = allow.text()
    if now is not None and len(allow.own) >= 2:
        logs = [*allow.own, now.log_mean]
        centre = math.fsum(logs) / len(logs)
        own_var = math.fsum((v - centre) ** 2 for v in logs) / (len(logs) - 1)
        own_df = len(logs) - 1
        # two estimates of one variance, each weighed by its degrees of freedom: the max of the
        # two (each at its own t) was 1.35-1.80x the exact width on 36 re-runs (2026-11-27)
        var = (df * var + own_df * own_var) / (df + own_df)
        df += own_df
        note = f"{note}, pooled with its {len(logs)} runs here (SD {math.sqrt(own_var):.1%})"
    # a positive quantity's interval is value * exp(-+ half / value) (ngb.core.statistics.intervals)
    half = t_quantile(p, df) * math.sqrt(var) * ci.mean
    if half < ci.half_width:  # never narrower than what its own processes show
        half, df = ci.half_width, ci.workers - 1 if ci.workers >= 2 else ci.n - 1
    return Stated(half, df, note, allow, half / ci.half_width if ci.half_width > 0 else 1.0)


# ---- the file ---------------------------------------------------------------------------------


def history_path(cache_dir: Path | None) -> Path | None:
    return None if cache_dir is None else Path(cache_dir) / FILE_NAME


def load(cache_dir: Path | None, host: str, now: float | None = None) -> list[Run]:
    """This host's runs of the last ``KEEP_DAYS`` days; [] when there is no readable history."""
    path = history_path(cache_dir)
    if path is None:
        return []
    oldest = (time.time() if now is None else now) - KEEP_DAYS * 86400
    try:
        # a FIFO or a device in the cache's place must not block a trial
        if not path.is_file():
            return []
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    runs: list[Run] = []
    for line in lines[-KEEP_LINES:]:
        run = _parse(line, host, oldest)
        if run is not None:
            runs.append(run)
    return runs


def _parse(line: str, host: str, oldest: float) -> Run | None:
    try:
        row = json.loads(line)
        if row.get("host") != host or float(row["t"]) < oldest:
            return None
        run = Run(str(row["key"]), float(row["y"]), float(row["v"]), int(row["k"]))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None  # a torn or foreign line: skipped, never fatal
    ok = math.isfinite(run.log_mean) and math.isfinite(run.log_var) and run.log_var >= 0
    return run if ok and run.processes >= 2 else None


def append(cache_dir: Path | None, host: str, key: str, run: Run) -> None:
    """Add a finished trial to the history (best effort: a read-only cache keeps none)."""
    path = history_path(cache_dir)
    if path is None:
        return
    row = {"t": round(time.time(), 3), "host": host, "key": key, "y": run.log_mean,
           "v": run.log_var, "k": run.processes}  # fmt: skip
    line = json.dumps(row, separators=(",", ":")) + "\n"
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and not path.is_file():
            return
        # one write of one short line with O_APPEND: lines from two processes never interleave
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        _trim(path)


def _trim(path: Path) -> None:
    """Keep the last ``KEEP_LINES`` lines once the file holds twice that many."""
    if path.stat().st_size < KEEP_LINES * 2 * 100:  # ~100 bytes a line: no need to count yet
        return
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
    if len(lines) <= 2 * KEEP_LINES:
        return
    spare = path.with_name(f".{path.name}.{os.getpid()}")
    spare.write_text("".join(lines[-KEEP_LINES:]), encoding="utf-8")
    os.replace(spare, path)
