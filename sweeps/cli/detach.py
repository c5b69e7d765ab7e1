"""``ngb run --detach`` returns within seconds, however many devices take the run.

Why: ``--detach`` returned once every device's agent ran, and starting agents is the heaviest
part of a run for the workstation (a handshake, the agent's upload and start per device); 128
loopback devices on the 2-core VM took ~60 s under load (64 devices once did not return in
300 s). So the command runs itself again in a child process of its own session, the
*starter*, which does what ``--detach`` always did -- start, wait until every device took the run
or gave up, detach -- and this process waits for it ``WAIT_S`` seconds (a one-device run: until its
device took the run, so a refused one is still refused here, in one line with a non-zero status):
a start that is done by then prints what it always printed (``run X started``, the refusals,
``detached``) with its exit status; a longer one is left to the starter, and this process says
which run it is and where the starter writes the rest (``<data dir>/detached/<run>.log``: a
fleet's refusals too). Why not wait for a first device on a fleet either: 128 devices come up
together (each launch waits for its agent's imports, all on the same cores), the first after
~35 s.
``ngb status RUN`` shows the devices as they come up; the starter ends once every device runs or
gave up (nothing is left behind after that).

The starter tells this process the run's id as soon as the run exists, and its console lines,
through a pipe (``REPORT_ENV`` names the descriptor); everything it prints also goes to its log.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from ngb.sweeps.run.orchestrator import Orchestrator

#: set in the starter's environment: the descriptor of the pipe to the waiting command
REPORT_ENV = "NGB_DETACH_REPORT"


def _wait_s(text: str) -> float:
    """``NGB_DETACH_WAIT_S`` (the tests set it): a number of seconds in [0, 600], else 4."""
    try:
        value = float(text)
    except ValueError:
        return 4.0
    return min(max(value, 0.0), 600.0) if math.isfinite(value) else 4.0


#: seconds from this command's start until it leaves the start to the starter (then it gives
#: the starter 0.5 s more to finish, so the command returns within ~4.5 s)
WAIT_S = _wait_s(os.environ.get("NGB_DETACH_WAIT_S", "4"))
#: the starter's first line: the run it started (then the console's lines follow)
RUN_ID_LINE = "\x00run-id "
#: the starter's line once the command may leave the start to it (at ``WAIT_S``)
TOOK_LINE = "\x00may-leave"


def in_starter() -> bool:
    return REPORT_ENV in os.environ


def started_ago() -> float:
    """Seconds since this process started: its interpreter's start-up and ngb's imports count
    toward ``WAIT_S`` too (~0.3-0.8 s on the loaded 2-core VM, where a 32-device
    ``--detach`` returned after 5.3 s while it counted from here)."""
    try:
        import psutil

        return min(max(0.0, time.time() - psutil.Process().create_time()), WAIT_S)
    except Exception:  # noqa: BLE001 - no start time to read: count from here
        return 0.0


def start_in_background(argv: list[str], log_dir: Path) -> int:
    """Run ``ngb <argv>`` as the starter and wait for it (see the module docstring); the exit
    status for this command."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"starting-{os.getpid()}.log"
    read_fd, write_fd = os.pipe()
    with open(log_path, "ab") as log:
        child = subprocess.Popen(  # noqa: S603 - this very command, this interpreter
            [sys.executable, "-m", "ngb.sweeps.cli", *argv],
            env={**os.environ, REPORT_ENV: str(write_fd)},
            pass_fds=(write_fd,),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # a Ctrl-C here does not stop the start
        )
    os.close(write_fd)
    run_id = ""
    took = False
    buffer = b""
    deadline = time.monotonic() + WAIT_S - started_ago()

    def forward(chunk: bytes) -> None:
        """Pass the starter's lines on; keep its run id and its leave."""
        nonlocal run_id, took, buffer
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for raw in lines:
            line = raw.decode(errors="replace")
            if line.startswith(RUN_ID_LINE):
                run_id = line[len(RUN_ID_LINE) :]
            elif line == TOOK_LINE:
                took = True
            else:
                sys.stdout.write(line + "\n")
                sys.stdout.flush()

    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 and run_id and took:
                break
            ready, _, _ = select.select([pipe], [], [], max(0.05, min(left, 1.0)))
            if not ready:
                if child.poll() is not None and not buffer:
                    break
                continue
            chunk = pipe.read(65536)
            if not chunk:  # the starter is done (or died): its status is the answer
                break
            forward(chunk)
        try:
            status = child.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            final = log_dir / f"{run_id}.log"
            with contextlib.suppress(OSError):
                log_path.rename(final)  # the starter keeps writing to it (same file)
                log_path = final
            print(
                f"run {run_id} is starting on its devices in the background; `ngb status "
                f"{run_id}` shows them as they come up, `ngb attach {run_id}` follows it "
                f"(log: {log_path})"
            )
            return 0
        # Done in time, perhaps after this process stopped reading at the deadline: what it
        # said meanwhile (its "detached; follow with `ngb attach`" line) is said here too,
        # since its log goes below. Bounded: a descendant holding the pipe must not hang this.
        until = time.monotonic() + 1.0
        while time.monotonic() < until and select.select([pipe], [], [], 0.1)[0]:
            chunk = pipe.read(65536)
            if not chunk:
                break
            forward(chunk)
    if status != 0:  # its one-line error went to the log: say it here
        with contextlib.suppress(OSError):
            said = [ln for ln in log_path.read_text(errors="replace").splitlines() if ln]
            if said:
                sys.stderr.write(said[-1] + "\n")
    with contextlib.suppress(OSError):
        log_path.unlink()  # done in time: everything it said was said here
    return status


class ReportPipe:
    """The starter's console output: to its log (stdout) and, while the command waits, to the
    pipe (a command that has gone no longer reads it: then only the log)."""

    def __init__(self, fd: int, log: IO[str]) -> None:
        self._pipe: IO[str] | None = os.fdopen(fd, "w", buffering=1, errors="replace")
        self._log = log

    def write(self, text: str) -> int:
        self._log.write(text)
        if self._pipe is not None:
            try:
                self._pipe.write(text)
            except (BrokenPipeError, OSError, ValueError):
                self._pipe = None
        return len(text)

    def flush(self) -> None:
        self._log.flush()
        if self._pipe is not None:
            with contextlib.suppress(BrokenPipeError, OSError, ValueError):
                self._pipe.flush()

    def isatty(self) -> bool:
        return False

    def tell(self, line: str) -> None:
        """A line for the waiting command only, not the log."""
        if self._pipe is not None:
            try:
                self._pipe.write(f"{line}\n")
            except (BrokenPipeError, OSError, ValueError):
                self._pipe = None


def report_pipe() -> ReportPipe | None:
    """In the starter: its report pipe (None elsewhere)."""
    fd = os.environ.pop(REPORT_ENV, None)
    return ReportPipe(int(fd), sys.stdout) if fd and fd.isdigit() else None


async def tell_run_id(orch: Orchestrator, report: ReportPipe) -> None:
    """The run's id to the waiting command as soon as the run exists (its first event), and
    that it may leave: at once for a run of several devices, else once its device took it."""
    sub = orch.subscribe()
    run_id = ""
    try:
        async for item in sub:
            if item.kind == "run" and item.run_id and not run_id:
                run_id = item.run_id
                report.tell(f"{RUN_ID_LINE}{run_id}")
                if len(orch.device_states(run_id)) > 1:
                    report.tell(TOOK_LINE)
                    return
            elif run_id and item.run_id == run_id and item.state == "running":
                report.tell(TOOK_LINE)
                return
    finally:
        sub.close()
