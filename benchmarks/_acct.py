"""Where a benchmark's CPU went, process by process: Linux process accounting (``acct(2)``).

Why accounting and not sampling ``/proc``: a fleet run starts thousands of short processes
(login shells, ``sha256sum``, forked trial workers) that end between two samples; the kernel
writes one record for each as it exits, with its own user and system time. Only processes that
end while accounting is on are recorded, so turn it on before the run and read it after the
agents have exited. It is machine-wide: on a quiet machine that is the benchmark's processes.

Needs root (``CAP_SYS_PACCT``); ``start`` says why in one line when it cannot. The record is
``struct acct_v3`` (``linux/acct.h``): times are ``comp_t`` ticks of ``AHZ`` (100 a second).
"""

from __future__ import annotations

import ctypes
import os
import statistics
import struct
import subprocess
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

#: struct acct_v3: flag, version, tty, exitcode, uid, gid, pid, ppid, btime, etime (float),
#: utime, stime, mem, io, rw, minflt, majflt, swaps (comp_t each), comm[16]
RECORD = struct.Struct("<BBHIIIIIIf8H16s")
AHZ = 100


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    name: str
    cpu_s: float  # user + system


def _comp(value: int) -> int:
    """``comp_t``: a 13-bit mantissa and a 3-bit base-8 exponent."""
    return (value & 0x1FFF) << (3 * (value >> 13))


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def start(path: Path) -> str | None:
    """Turn accounting on into ``path`` (created empty); None when on, else why not."""
    path.write_bytes(b"")
    if _libc().acct(os.fsencode(path)) != 0:
        return f"process accounting unavailable: {os.strerror(ctypes.get_errno())}"
    return None


def stop() -> None:
    _libc().acct(None)


def stop_and_read(path: Path) -> tuple[list[Process], str | None]:
    """Turn accounting off and read ``path``: the records, or none and why not. A sentinel
    process (``true``) ends just before: when even its record is missing, the kernel was not
    writing into ``path``, and a total of 0 s would be a false figure."""
    with subprocess.Popen(["true"]) as sentinel:  # noqa: S607
        sentinel.wait()
    stop()
    processes = read(path)
    if any(p.pid == sentinel.pid for p in processes):
        return processes, None
    return [], why_nothing(path)


def why_nothing(path: Path) -> str:
    """The two causes the kernel allows: its file's filesystem is nearly full (accounting is
    suspended below ``/proc/sys/kernel/acct``'s second figure, in % free), or another program
    called ``acct(2)`` since and the records went to its file."""
    fs = os.statvfs(path.parent)
    free = 100 * fs.f_bavail / fs.f_blocks if fs.f_blocks else 0.0
    try:
        resume, suspend, _ = (int(x) for x in Path("/proc/sys/kernel/acct").read_text().split())
    except (OSError, ValueError):
        resume, suspend = 4, 2  # the kernel's defaults
    if free < resume:
        cause = (f"{path.parent} has {free:.1f} % free, and the kernel suspends accounting "
                 f"below {suspend} % until {resume} % (/proc/sys/kernel/acct)")  # fmt: skip
    else:
        cause = (f"{path.parent} has {free:.1f} % free (enough), so another program most "
                 "likely turned accounting to its own file while this run counted")  # fmt: skip
    return f"process accounting recorded nothing into {path}, not even a sentinel process: {cause}"


def read(path: Path) -> list[Process]:
    data = path.read_bytes()
    out = []
    for offset in range(0, len(data) - RECORD.size + 1, RECORD.size):
        fields = RECORD.unpack_from(data, offset)
        if fields[1] != 3:  # not acct_v3: the kernel writes another layout
            raise ValueError(f"{path}: accounting record version {fields[1]}, expected 3")
        pid, ppid, utime, stime, comm = fields[6], fields[7], fields[10], fields[11], fields[18]
        name = comm.split(b"\0", 1)[0].decode(errors="replace")
        out.append(Process(pid, ppid, name, (_comp(utime) + _comp(stime)) / AHZ))
    return out


def fleet_lines(processes: list[Process], orchestrator: int) -> list[str]:
    """CPU by kind: agents (Python processes whose parent was not another agent), their forked
    workers (Python children of an agent), sshd, and everything else by name. Records of the
    ``orchestrator`` process itself are left out: its threads' exits leave records under its
    pid, and the benchmark prints its CPU from ``getrusage``."""
    processes = [p for p in processes if p.pid != orchestrator]
    pythons = {p.pid for p in processes if p.name.startswith("python")}
    groups: dict[str, list[float]] = defaultdict(list)
    for p in processes:
        if p.name.startswith("python"):
            kind = "workers (forked by an agent)" if p.ppid in pythons else "agents"
        else:
            kind = p.name
        groups[kind].append(p.cpu_s)
    total = sum(p.cpu_s for p in processes)
    lines = [f"CPU of the processes that ended during the run: {total:.1f} s"]
    for kind, cpu in sorted(groups.items(), key=lambda kv: -sum(kv[1]))[:6]:
        lines.append(
            f"  {kind}: {sum(cpu):.1f} s in {len(cpu)} processes "
            f"(median {statistics.median(cpu):.3f} s, max {max(cpu):.2f} s)"
        )
    return lines
