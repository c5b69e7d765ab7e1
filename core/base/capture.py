"""Third-party noise around a step that may fail, kept out of the operator's terminal.

Some libraries log a full traceback before raising (``torch.export.load`` on a corrupt file logs
"Ran into the following error when deserializing" with 15 lines of traceback, then raises a
shorter error). ``captured_stderr`` redirects file descriptor 2 (so C++ and Python logging
handlers bound to the old ``sys.stderr`` are caught alike) into a temporary file for the step. When
the step succeeds the text is written back unchanged; when it fails, the caller folds the last
meaningful logged line into its one-line error (``Captured.last_line``) and the rest is dropped.

Stdlib only (the agent bundle carries ``ngb.core``).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

# glog/absl-style prefixes ("W1125 16:50:22.205000 28837 file.py:403] ") and logging's own
_PREFIX = re.compile(r"^[IWEF]\d{4} [\d:.]+ +\d+ [^\]]*\] ?|^(WARNING|ERROR|INFO|DEBUG):[\w.]*:")


@dataclass
class Captured:
    text: str = ""

    def last_line(self) -> str:
        """The last non-empty logged line without its logging prefix ("" when none)."""
        for raw in reversed(self.text.splitlines()):
            line = _PREFIX.sub("", raw).strip()
            if line and not line.startswith(("File ", "^", "~")):
                return line
        return ""


@contextlib.contextmanager
def captured_stderr() -> Iterator[Captured]:
    """Capture fd 2 for the block; on success re-emit what was written, on an exception keep it
    in the yielded ``Captured`` for the caller's message."""
    holder = Captured()
    fd = 2  # the process's stderr, whatever object sys.stderr is now (handlers kept the old one)
    with tempfile.TemporaryFile() as sink:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
        saved = os.dup(fd)
        os.dup2(sink.fileno(), fd)
        failed = False
        try:
            yield holder
        except BaseException:
            failed = True
            raise
        finally:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)
            sink.seek(0)
            holder.text = sink.read().decode("utf-8", errors="replace")
            if not failed and holder.text:
                with contextlib.suppress(OSError, ValueError):
                    sys.stderr.write(holder.text)
                    sys.stderr.flush()


@contextlib.contextmanager
def silenced() -> Iterator[Captured]:
    """Capture fds 1 and 2 for the block and drop what was written, success or not (its text
    is in the yielded ``Captured`` for a caller that wants it): the runtimes' profilers print
    to the process's own descriptors from C++ (ONNX Runtime's "Serializing optimized model"
    warning, the torch profiler's Kineto lines), never to be seen by whoever ran ``ngb``."""
    holder = Captured()
    with tempfile.TemporaryFile() as sink:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        saved = [os.dup(1), os.dup(2)]
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield holder
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(OSError, ValueError):
                    stream.flush()
            for fd, copy in zip((1, 2), saved, strict=True):
                os.dup2(copy, fd)
                os.close(copy)
            sink.seek(0)
            holder.text = sink.read().decode("utf-8", errors="replace")
