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
