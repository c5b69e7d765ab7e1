"""What ``ngb.measure`` shows while it measures: the phase, then the repetitions so far.

Plain text on stderr, so it works the same in a terminal, a notebook and a log: a terminal or a
notebook gets one line redrawn in place (a carriage return; both honour it), anything else one line
per phase. No progress-bar library: ``tqdm.auto`` picks its notebook bar inside Jupyter and, without
ipywidgets, falls back with a ``TqdmWarning``; rich's live display needs ipywidgets there too.
``quiet_tqdm`` imports ``tqdm.auto`` once with that warning silenced, before timm (through
huggingface_hub) imports it and prints the warning in the user's notebook.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import time
import warnings
from collections.abc import Mapping
from typing import TextIO

from ngb.core.records import events


def in_notebook() -> bool:
    """A Jupyter kernel (its stderr is not a terminal, but a carriage return redraws the line)."""
    return "ipykernel" in sys.modules


def quiet_tqdm() -> None:
    """Import ``tqdm.auto`` with its no-ipywidgets warning silenced (later imports reuse it)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*IProgress not found.*")
        warnings.filterwarnings("ignore", message=".*tqdm.autonotebook.*")
        with contextlib.suppress(ImportError):  # no tqdm: nothing will warn
            importlib.import_module("tqdm.auto")


class Progress:
    """A callable for the trial's events that writes the phase and repetitions to ``stream``."""

    def __init__(self, label: str, stream: TextIO | None = None, *, enabled: bool = True) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        isatty = getattr(self.stream, "isatty", lambda: False)
        self.redraw = in_notebook() or bool(isatty())
        self._phase = ""
        self._seen: set[str] = set()
        self._last = 0.0
        self._drawn = False

    def _write(self, line: str, *, final: bool = False) -> None:
        if not self.enabled:
            return
        try:
            if self.redraw:
                self.stream.write(f"\r{line:<78}" + ("\n" if final else ""))
            else:
                self.stream.write(line + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # a closed stream: progress is only a courtesy
            self.enabled = False
        self._drawn = not final

    def __call__(self, event: Mapping[str, object]) -> None:
        kind = event.get("type")
        if kind == events.PHASE:
            phase = str(event.get("phase"))
            worker = event.get("worker")
            if self.redraw and isinstance(worker, int) and worker > 0:
                phase = f"{phase} (worker process {worker + 1})"
            elif phase in self._seen:  # a log gets each phase once, not once per worker
                return
            self._seen.add(phase)
            if phase != self._phase:
                self._phase = phase
                self._write(f"ngb: {self.label}: {phase} ...")
        elif kind == events.PROGRESS and self.redraw:
            now = time.monotonic()
            if now - self._last < 0.5:
                return
            self._last = now
            rep, reps = event.get("rep"), event.get("reps")
            tput = event.get("throughput")
            shown = f", {tput:,.4g} samples/s" if isinstance(tput, int | float) else ""
            self._write(f"ngb: {self.label}: measuring, repetition {rep} of at most {reps}{shown}")
        elif kind == events.TUNING and self.redraw:
            done, budget = event.get("trials_done"), event.get("budget")
            self._write(f"ngb: {self.label}: tuning {done}/{budget}")

    def finish(self, summary: str) -> None:
        self._write(f"ngb: {self.label}: {summary}", final=True)
