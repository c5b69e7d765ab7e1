"""The agent's event stream: one JSON event per line on the real stdout (``EventWriter``), with
compiler libraries' own prints moved out of its way (``claim_stdout``).

Part of ``ngb.core`` because the agent (``ngb.devices.agent``), which is shipped to devices with
``ngb.core`` and nothing else of ``ngb.devices``, and the workstation's in-process paths (the
Python API, the console's live run) both write through it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Mapping
from typing import IO

from ngb.core.records import events
from ngb.core.trial.live_state import LastState


class EventWriter:
    """Writes one JSON event per line and flushes it; safe to call from the CPU sampler thread.

    If the reader goes away (an SSH link dropped under a run that was not detached), events are
    dropped and the run carries on: the checkpoint, not the event stream, is the record.
    """

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self.broken = False
        self.state = LastState()  # what a console attaching mid-trial is sent again

    def write_line(self, line: str) -> None:
        with self._lock:
            if self.broken:
                return
            try:
                self._stream.write(line.rstrip("\n") + "\n")
                self._stream.flush()
            except (BrokenPipeError, OSError, ValueError):
                self.broken = True

    def emit(self, event: dict[str, object]) -> None:
        self.state.observe(event)
        self.write_line(events.encode(event))
        self._snapshot()

    def forward(self, line: str, event: Mapping[str, object]) -> None:
        """A trial process's event line, passed on as it came (and remembered)."""
        self.state.observe(event)
        self.write_line(line)
        self._snapshot()

    def _snapshot(self) -> None:
        """The last state again, when due (``ngb.core.trial.live_state``: for a console that
        attaches mid-trial)."""
        snap = self.state.due(time.monotonic())
        if snap is not None:
            self.write_line(events.encode(snap))

    def __call__(self, type_: str, **fields: object) -> None:
        self.emit(events.make_event(type_, **fields))


def claim_stdout() -> IO[str]:
    """Keep the real stdout for events and point fd 1 at stderr.

    Compiler libraries (TVM, OpenVINO, C++ loggers) sometimes print to stdout; with fd 1 redirected
    their chatter lands in the error log instead of corrupting the JSON-lines event stream.
    """
    sys.stdout.flush()
    events_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(events_fd, "w", buffering=1, encoding="utf-8")
