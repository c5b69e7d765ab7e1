"""What another Python process says when it runs a few lines against a file: the store's locks
are per process, so only a second process can tell whether this one holds them."""

from __future__ import annotations

import subprocess
import sys


def run_snippet(code: str, *args: str) -> str:
    """``code`` run by a fresh interpreter with ``args`` as ``sys.argv[1:]``: its stdout, or its
    stderr when it printed nothing."""
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60
    )
    return out.stdout.strip() or out.stderr.strip()
