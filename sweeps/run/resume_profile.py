"""Profile passes when a run goes on: ``ngb run --resume [--profile]``, ``ngb attach`` (issue 34).

A run's trials travel to each device once (``trials.jsonl``, measure settings included) and a
resumed or re-attached agent goes on with that list from its checkpoint. So the profile setting
of a run is the one it was started with: it carries over to every trial a resume runs, with or
without ``--profile`` on the resume. ``--profile`` cannot add passes to a run started without
them: the devices' lists would have to be rewritten under agents that may still run, and the
finished trials would have to be built again on their devices. That is refused in one line
before anything is followed, with what to do instead; profiling finished trials afterwards is
``ngb profile MODEL --db FILE`` (stored apart from the trials, as ``ngb report ops`` reads).

What a resume says (``resume_line``): whether passes are on, and how many finished trials have
no profile, with the first reason a failed pass left.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ngb.core.base.errors import NgbError
from ngb.sweeps.spec.sweep import Sweep, loads_sweep
from ngb.sweeps.store.profiles import finished_passes

if TYPE_CHECKING:
    from ngb.sweeps.store.database import Store


def profiled_keys(sweep: Sweep) -> set[str]:
    """The keys of the sweep's trials that take a profile pass (a matrix may turn it off)."""
    return {t.key for t in sweep.trials() if t.measure.profile}


def with_profile(sweep: Sweep) -> Sweep:
    """``ngb run --profile``: the sweep's [measure] turned on; a matrix's own ``profile =
    false`` still wins."""
    return dataclasses.replace(sweep, measure={**sweep.measure, "profile": True})


def resume_line(store: Store, run_id: str, asked: bool = False) -> str | None:
    """What a resume of ``run_id`` says about its profile passes (None: it has none, and none
    was asked). ``asked`` (``--profile``) for a run whose trials were started without a pass is
    refused (``NgbError``, one line)."""
    info = store.run(run_id)
    try:
        sweep = loads_sweep(str(info.get("sweep_toml") or ""), source=f"run {run_id}")
    except NgbError:
        if asked:
            raise NgbError(
                f"run {run_id}: its stored sweep does not load, so --profile cannot be checked "
                "against how it was started; resume without --profile"
            ) from None
        return None
    on = profiled_keys(sweep)
    if asked:
        added = profiled_keys(with_profile(sweep)) - on
        if added:
            raise NgbError(
                f"run {run_id} was started without a profile pass for {len(added)} of its "
                "trials, and a resume runs its trials as started (their list is on the "
                "devices): resume without --profile, then `ngb profile MODEL --db FILE`, or "
                "start a new run with --profile"
            )
    if not on:
        return None
    finished = [(key, has, why) for _, key, has, why in finished_passes(store, run_id)]
    done = [(has, why) for key, has, why in finished if key in on]
    line = f"profile: on for {len(on)} trial(s), as run {run_id} was started"
    missing = [why for has, why in done if not has]
    if missing:
        first = next((why for why in missing if why), "no pass recorded")
        line += (
            f"; {len(missing)} of its {len(done)} finished trial(s) have no profile "
            f"(first: {first})"
        )
    elif done:
        line += f"; its {len(done)} finished trial(s) have theirs"
    return line
