"""The ETA's evidence from a device's earlier runs, kept in the agent's cache folder.

A run's first trial of a compiler has no evidence of its own on how long it takes; the device's
earlier runs do. The agent keeps each compiler's recent non-tuning and after-search seconds, and
how much slower a search's first batch ran than its later ones, in ``EVIDENCE_FILE`` (issue 46:
a fresh run's 64-trial search ended 25 s before its trial did and the device line had counted
none of it; a search's first batch, with the evolutionary search's initial population and the
runner's first processes, ran 1.3-1.4x slower per trial than the later ones, and an ETA from it
alone was 29-37 % long at a quarter of the budget). ``ngb.core.trial.live_state.EtaBook`` reads and
writes it; a tuning search reads ``first_batch_factor``. A missing, damaged or hostile file (a
FIFO, a folder) is no evidence, never a hang or a failed run.
Standard library only: this module is shipped to devices.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path

#: the device's evidence from earlier runs, in the agent's cache folder
EVIDENCE_FILE = "eta-evidence.json"
#: values kept per compiler (the recent ones: the machine and ngb change)
EVIDENCE_KEPT = 8
#: more than a file of ours ever holds (a few compilers x 3 x 8 numbers); past it: not ours
_EVIDENCE_MAX_BYTES = 64 * 1024


def load_evidence(path: Path) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """(non-tuning, after-search) seconds per compiler from an evidence file; a missing or
    damaged one is no evidence (the ETA then waits for this run's own), never a failed run."""
    doc = _evidence_doc(path)
    return _durations(doc.get("other_s")), _durations(doc.get("post_s"))


def load_first_ratios(path: Path) -> dict[str, list[float]]:
    """compiler -> its searches' first-batch ratios from an evidence file (see ``EtaBook``)."""
    table = _durations(_evidence_doc(path).get("first_ratio"))
    positive = {c: [r for r in ratios if r > 0] for c, ratios in table.items()}
    return {c: ratios for c, ratios in positive.items() if ratios}


#: the first-batch factor a search may use: within what a first batch plausibly costs
FIRST_FACTOR_RANGE = (1.0, 3.0)


def first_batch_factor(cache_dir: Path | None, compiler: str) -> float | None:
    """How much slower per trial this device's ``compiler`` searches ran their first batch than
    their later ones (the mean of the recent ones kept, within ``FIRST_FACTOR_RANGE``); None
    without one. A search measured one batch divides its rate by it (``TuningProgress``)."""
    if cache_dir is None:
        return None
    ratios = load_first_ratios(cache_dir / EVIDENCE_FILE).get(compiler)
    if not ratios:
        return None
    low, high = FIRST_FACTOR_RANGE
    return min(high, max(low, sum(ratios) / len(ratios)))


def _evidence_doc(path: Path) -> dict[str, object]:
    try:
        if not path.is_file():  # a FIFO there would block the agent's start for ever
            return {}
        with path.open("rb") as f:
            doc = json.loads(f.read(_EVIDENCE_MAX_BYTES))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def save_evidence(evidence: Mapping[str, object], cache_dir: Path) -> None:
    """Keep ``evidence`` (``EtaBook.evidence()``) for the next run (written whole, then renamed:
    one run per device writes it; a crash mid-write leaves the old file)."""
    target = cache_dir / EVIDENCE_FILE
    partial = target.with_name(f".{EVIDENCE_FILE}.{os.getpid()}")
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(evidence, sort_keys=True))
        partial.replace(target)
    except OSError:  # no evidence kept is a vaguer ETA next time, never a failed run
        with contextlib.suppress(OSError):
            partial.unlink()


def _durations(table: object) -> dict[str, list[float]]:
    """compiler -> finite non-negative seconds, from what a file said (anything else dropped)."""
    if not isinstance(table, dict):
        return {}
    kept = {}
    for compiler, values in table.items():
        if isinstance(compiler, str) and isinstance(values, list):
            seconds = [
                float(v)
                for v in values
                if isinstance(v, int | float)
                and not isinstance(v, bool)
                and math.isfinite(v)
                and v >= 0
            ][-EVIDENCE_KEPT:]
            if seconds:
                kept[compiler] = seconds
    return kept
