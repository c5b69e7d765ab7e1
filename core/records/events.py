"""The agent's JSON-lines event protocol (device → workstation).

One JSON object per line, always with ``v`` (protocol version), ``ts`` (unix seconds) and ``type``.
Unknown types and fields are ignored by readers, so the agent and the workstation can be upgraded
one at a time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

PROTOCOL_VERSION = 1

RUN_STARTED = "run_started"  # run_id, total, skipped (already in the checkpoint)
TRIAL_STARTED = "trial_started"  # key, label, index, total
PHASE = "phase"  # key, phase: build | optimise | export | compile | tune | first_call | warmup |
#                  measure | accuracy (ngb.core.trial.accuracy_pass, after the timed
#                  loops); `worker` (1, 2 ...) when a worker process of the trial sent it
PROGRESS = "progress"  # key, rep, reps (repetitions done / planned maximum), throughput,
#                        ci_relative (CI half-width / mean over all repetitions so far, null
#                        while n < 2), ci_target, fixed (true: a fixed repetition count,
#                        judged against ci_target at its end but never stopped by it), worker
#                        (0 = the trial's own process)
CPU = "cpu"  # key, percent (system 0..100), proc_percent (100 per busy core), others_percent
#              (other processes' share of the machine, 0..100), per_cpu ([0..100] per logical
#              core), steal_percent (null where the kernel reports no steal), mem_percent,
#              mem_used_mb, mem_total_mb (system memory), worker (when a worker process sent it)
TUNING = "tuning"  # key, trials_done, budget, best_ms, tasks: [{name, trials, best_ms}]
SERVING = "serving"  # key, scenario, elapsed_s, duration_s (this run's or probe's plan),
#                      offered_qps (the run's rate; null for closed loops and offline),
#                      achieved_qps (answered / elapsed), issued, answered, p99_ms (so far, from
#                      each request's scheduled time, to 1 %; null before an answer), limit_ms,
#                      probe (a peak search's, 0-based; null for a single run), max_probes. A
#                      serving trial's live progress (``ngb.core.serving.serve.ServingProgress``):
#                      at each run's or probe's start, then once a second; shown, never stored
TRIAL_DONE = "trial_done"  # key, result (TrialResult.to_dict())
TRIAL_FAILED = "trial_failed"  # key, error, error_kind, result
LOG = "log"  # level, msg
RUN_DONE = "run_done"  # ok, failed, skipped

ALL_TYPES = (
    RUN_STARTED,
    TRIAL_STARTED,
    PHASE,
    PROGRESS,
    CPU,
    TUNING,
    SERVING,
    TRIAL_DONE,
    TRIAL_FAILED,
    LOG,
    RUN_DONE,
)


def make_event(type_: str, **fields: object) -> dict[str, object]:
    return {"v": PROTOCOL_VERSION, "ts": time.time(), "type": type_, **fields}


def encode(event: Mapping[str, object]) -> str:
    """One line, no trailing newline. NaN becomes null so any JSON reader accepts it."""
    try:  # most events hold no NaN: the walk below was a third of an agent's CPU per event
        return json.dumps(event, separators=(",", ":"), allow_nan=False)
    except ValueError:  # a NaN or an infinity somewhere (json's only ValueError here)
        return json.dumps(_nan_to_none(event), separators=(",", ":"), allow_nan=False)


# Any: an event read off the wire (JSON); each reader takes the fields its event type carries
def decode(line: str | bytes) -> dict[str, Any] | None:
    """Parse one line; ``None`` for blank, partial (e.g. cut by kill -9) or foreign lines."""
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(obj, dict) or "type" not in obj:
        return None
    return obj


def _nan_to_none(obj: object) -> object:
    if isinstance(obj, float) and obj != obj:  # NaN
        return None
    if isinstance(obj, float) and obj in (float("inf"), float("-inf")):
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_nan_to_none(v) for v in obj]
    return obj
