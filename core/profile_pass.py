"""The profile pass of a trial (``MeasureSettings.profile``): where its time goes, per operator.

After the timed workers have finished and the trial's numbers are merged, ONE more process (a
fork of the trial's process, which has run no model) builds and compiles the model again with
the runtime's own profiler on and runs it (``ngb.core.profiling.profile_trial``). It runs after
the timing, never beside it, so the timed numbers are the same with profiling on or off; what it
costs is the trial's wall time. Its answer goes into ``result.extra["profile"]``
(``Profile.to_dict`` with the trial's timed ms per call beside the profiled one); the store takes
it out of ``extra`` into ``profiles`` / ``profile_kernels`` keyed by run and trial key
(``ngb.sweeps.store.profile_rows.take_profiles``).

A pass that fails, or has no profiler wired for its runtime, leaves ``{"error": "one line"}``
and the trial stays what its timing made it: a profile is an explanation, never a verdict. The
pass is bounded by what is left of the trial's ``timeout_s`` (at most ``PASS_CAP_S``): the
agent kills a trial past its timeout and a hung profiler must not take the timed result with it.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ngb.core import events
from ngb.core.errors import one_line
from ngb.core.isolate import call_in_child
from ngb.core.profiling import requests_in_flight

if TYPE_CHECKING:
    from ngb.core.profiling import Profile
    from ngb.core.types import TrialResult, TrialSpec
    from ngb.core.workers import Emit

#: the pass's own limit (build, two compiles for ONNX Runtime/OpenVINO, the calls)
PASS_CAP_S = 600.0
#: what is kept of the trial's timeout for sending its result after the pass
_MARGIN_S = 10.0
#: seconds of profiled calls aimed at (then 5..20 calls, from the timed latency)
_TARGET_S = 2.0
#: a call this long or longer is profiled twice after one warm-up call. The pass runs its warm-up
#: and calls twice (unprofiled for the reference latency, then profiled): at the old floor of
#: 5 + 2, untuned TVM on deit3 b8 (~100 s a call) needed 1,400 s of calls and the trial ran past
#: its 1,200 s timeout. An operator's share of a call of seconds is steady over two calls.
SLOW_CALL_MS = 1000.0


def calls_for(timed_ms: float | None) -> tuple[int, int]:
    """(profiled calls, warm-up calls): about ``_TARGET_S`` of calls, 5 to 20 of them; a call
    of ``SLOW_CALL_MS`` or more gets 2 and 1."""
    if not timed_ms or timed_ms <= 0:
        return 20, 5
    if timed_ms >= SLOW_CALL_MS:
        return 2, 1
    calls = max(5, min(20, round(_TARGET_S * 1000.0 / timed_ms)))
    return calls, max(2, calls // 4)


def timed_ms_of(result: TrialResult, batch: int) -> float | None:
    """The trial's timed milliseconds per call: batch / mean throughput (what the reports use)."""
    mean = result.throughput.mean
    return 1000.0 * batch / mean if mean and mean > 0 else None


def run_pass(
    spec: TrialSpec,
    result: TrialResult,
    workdir: Path,
    cache_dir: Path | None,
    deadline: float,
    emit: Emit,
) -> None:
    """Profile ``spec`` in one more process when its settings ask and its timing succeeded;
    the answer (or its one-line error) goes into ``result.extra["profile"]``. Never raises."""
    if not spec.measure.profile or result.status != "ok":
        return
    timed = timed_ms_of(result, spec.batch)
    limit = min(PASS_CAP_S, deadline - time.monotonic() - _MARGIN_S)
    if limit < 1.0:
        result.extra["profile"] = {"error": "no time left in timeout_s for the profile pass"}
        return
    calls, warmup = calls_for(timed)
    emit(
        events.make_event(
            events.LOG, key=spec.key, level="info",
            msg=f"profile pass: {calls} calls under {spec.compiler}'s profiler (timing done)",
        )
    )  # fmt: skip
    try:
        found = call_in_child(
            f"profile pass of {spec.label}", _bounded, limit, spec, workdir / "profile",
            calls, warmup, cache_dir, workdir,
        )  # fmt: skip
    except Exception as exc:  # the timed result stands; the profile says why it is missing
        result.extra["profile"] = {"error": one_line(exc)}
        return
    found.timed_ms = timed
    found.timed_in_flight = requests_in_flight(result.extra)
    result.extra["profile"] = found.to_dict()


def _bounded(
    limit: float,
    spec: TrialSpec,
    workdir: Path,
    calls: int,
    warmup: int,
    cache_dir: Path | None,
    trial_dir: Path,
) -> Profile:
    """In the pass's process: the kernel ends it at ``limit`` seconds (SIGALRM's default
    action), even inside a runtime's C code that never returns to Python."""
    from ngb.core.profiling import profile_trial

    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(max(1, int(limit)))
    return profile_trial(spec, workdir, calls, warmup, cache_dir, trial_dir)
