"""Time from ``exec ngb-tui`` to its first frame, in a real pseudo-terminal, and what it imported.

Each run starts the installed console script in a fresh pty (160x48, ``TERM=xterm-256color``,
``NGB_HOME`` a new empty folder, i.e. a true first launch with the embedded localhost device and
demo sweep), reads its output, strips the escape sequences and stops the clock when the header
text of a painted screen appears. A second later it presses ``q`` and times the process's end
(goal < 1 s: the console ends without the interpreter's slow teardown, ``ngb.tui.app``). The
figure includes interpreter start-up and every import: what an operator waits for. Goal: < 1 s.

One extra run under ``python -X importtime`` lists the top-level modules imported before the
first frame (Textual draws on stderr, so the importtime lines arrive in the same pty stream, in
order, ahead of the frame) and checks that none of the heavy ones (torch, tvm, openvino,
onnxruntime, timm, duckdb, asyncssh) is among them.

Usage: ``python benchmarks/tui_startup.py [--runs 5]``
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import re
import select
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

FRAME_MARKER = "neural graph compiler bench"  # the header's sub-title: a screen was painted
HEAVY = ("torch", "tvm", "tvm_ffi", "openvino", "onnxruntime", "onnx", "timm", "duckdb", "asyncssh")
# CSI sequences, OSC strings, charset selection and any other two-byte escape
ANSI = re.compile(
    r"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[()][0-9A-B]|\x1b."
)
COLS, ROWS = 160, 48
QUIT_AFTER_S = 1.0


def ngb_tui_argv() -> list[str]:
    script = Path(sys.executable).with_name("ngb-tui")
    return [str(script)] if script.exists() else [sys.executable, "-m", "ngb.tui.app"]


def run_once(argv: list[str], timeout: float = 30.0) -> tuple[float, str, float]:
    """Start ``argv`` in a pty; return (seconds to first frame, plain text output until then,
    seconds from ``q`` to the process's end)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    home = tempfile.mkdtemp(prefix="ngb-startup-")
    env = {**os.environ, "TERM": "xterm-256color", "NGB_HOME": home, "COLUMNS": str(COLS)}
    env.pop("TEXTUAL", None)
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True
    )
    os.close(slave)
    seen = ""
    first_frame = None
    try:
        while time.perf_counter() - t0 < timeout:
            ready, _, _ = select.select([master], [], [], 0.05)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            seen += ANSI.sub("", chunk.decode("utf-8", "replace"))
            if FRAME_MARKER in seen[-20000:]:
                first_frame = time.perf_counter() - t0
                break
        time.sleep(QUIT_AFTER_S)  # the screen's first loads, as an operator's q comes later
        quit_at = time.perf_counter()
        os.write(master, b"q")
        deadline = time.monotonic() + 15
        while proc.poll() is None and time.monotonic() < deadline:
            if select.select([master], [], [], 0.1)[0]:
                try:
                    os.read(master, 65536)  # keep draining, or the app may block on a full pty
                except OSError:
                    break
        quit_s = time.perf_counter() - quit_at
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        os.close(master)
        shutil.rmtree(home, ignore_errors=True)
    if first_frame is None:
        raise SystemExit(f"no frame within {timeout:.0f}s from {argv}")
    return first_frame, seen, quit_s


def imported_before_frame(text: str) -> dict[str, int]:
    """Packages in ``-X importtime`` output (any nesting depth), with their self time in us."""
    totals: dict[str, int] = {}
    for line in text.splitlines():
        m = re.search(r"import time:\s+(\d+) \|\s+\d+ \| *(\S+)", line)
        if m:
            top = m.group(2).split(".")[0]
            totals[top] = totals.get(top, 0) + int(m.group(1))
    return totals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    argv = ngb_tui_argv()
    run_once(argv)  # warm the page cache (.pyc files), as a second launch would be
    runs = [run_once(argv) for _ in range(args.runs)]
    times = [r[0] for r in runs]
    quits = [r[2] for r in runs]
    print(f"ngb-tui start-up to first frame over {args.runs} runs (pty {COLS}x{ROWS}):")
    print(
        f"  median {statistics.median(times):.3f} s  min {min(times):.3f} s  "
        f"max {max(times):.3f} s  goal < 1 s"
    )
    print(f"q to exit: median {statistics.median(quits):.3f} s  max {max(quits):.3f} s  goal < 1 s")
    _, text, _ = run_once([sys.executable, "-X", "importtime", "-m", "ngb.tui.app"])
    packages = imported_before_frame(text)
    slowest = sorted(packages.items(), key=lambda kv: -kv[1])[:10]
    print(f"packages imported before the first frame: {len(packages)} (self time, -X importtime)")
    print("  slowest: " + ", ".join(f"{n} {us / 1000:.0f} ms" for n, us in slowest))
    print(f"  total import self time: {sum(packages.values()) / 1000:.0f} ms")
    heavy = sorted(set(packages) & set(HEAVY))
    print(f"  heavy modules among them: {', '.join(heavy) if heavy else 'none'}")
    return 1 if heavy else 0


if __name__ == "__main__":
    sys.exit(main())
