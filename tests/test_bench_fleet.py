"""``ngb bench loopback_devices --plain`` (issue 41): ngb's fleet beside a plain hand-written loop
on the same sshd, devices and accounts, so a reader can tell the machine's ceiling from ngb's own
cost. Run small: two devices, two short trials."""

from __future__ import annotations

import os
import re
import sys
import warnings
from pathlib import Path
from types import ModuleType

import pytest

from tests.cli_helpers import ngb
from tests.sshd import SSHD

pytestmark = pytest.mark.skipif(not Path(SSHD).exists(), reason="OpenSSH server not installed")


def test_the_plain_loop_runs_beside_ngb_on_the_same_devices() -> None:
    ran = ngb(
        "bench", "loopback_devices", "--devices", "2", "--trials", "2", "--sleep", "0.5",
        "--shell", "root", "--plain", "--plain-imports", "numpy,psutil", "--acct", timeout=300,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    if os.geteuid() == 0:  # process accounting: each agent's CPU, counted by the kernel
        # machine-wide: other tests' processes may add to the count, never take from it
        agents = re.search(r"^  agents: [0-9.]+ s in ([0-9]+) processes", ran.stdout, re.M)
        if agents is None:  # the kernel wrote nothing (a CI run once): said, not a 0 s total
            nothing = re.search(
                r"^--acct: process accounting recorded nothing.*$", ran.stdout, re.M
            )
            assert nothing is not None, ran.stdout
            assert "CPU of the processes that ended" not in ran.stdout
            warnings.warn(nothing.group(0), stacklevel=1)
        else:
            assert int(agents.group(1)) >= 2, ran.stdout
    else:
        assert "--acct: process accounting unavailable" in ran.stdout
    assert "trials stored: 4 (4 distinct; expected 4)" in ran.stdout
    # two devices, two trials each: one first and one later trial start apiece, timed
    starts = re.search(
        r"^trial start -> compile on the device: first trial median ([0-9.]+) s, "
        r"the others median ([0-9.]+) s$", ran.stdout, re.M,
    )  # fmt: skip
    assert starts is not None, ran.stdout
    assert all(0 <= float(g) < 60 for g in starts.groups())
    ngb_eff = re.search(r"^parallel efficiency: ([0-9.]+)", ran.stdout, re.M)
    plain = re.search(
        r"^plain loop beside it .*: wall ([0-9.]+) s, efficiency ([0-9.]+); ngb / plain: ([0-9.]+)",
        ran.stdout,
        re.M,
    )
    assert ngb_eff is not None and plain is not None, ran.stdout
    assert "importing numpy,psutil" in plain.group(0)  # what ngb's agent needs, loaded first
    wall, plain_eff, ratio = (float(g) for g in plain.groups())
    # two sleeps of 0.5 s each: the plain loop cannot beat its own serial work
    assert wall >= 1.0 and 0 < plain_eff <= 1.0
    assert ratio == pytest.approx(float(ngb_eff.group(1)) / plain_eff, abs=0.01)


def test_accounting_records_are_read_and_grouped_by_kind(tmp_path: Path) -> None:
    """``--acct``'s reader on records laid out as the kernel writes them (``acct_v3``)."""
    _acct = _acct_module()

    def record(pid: int, ppid: int, comm: bytes, utime: int, stime: int = 0) -> bytes:
        return _acct.RECORD.pack(0, 3, 0, 0, 0, 0, pid, ppid, 0, 0.0, utime, stime,
                                 0, 0, 0, 0, 0, 0, comm)  # fmt: skip

    big = (1 << 13) | 100  # comp_t: mantissa 100, exponent 1 -> 800 ticks = 8 s
    data = b"".join([
        record(10, 1, b"python", 50, 10),   # an agent: 0.6 s
        record(11, 10, b"python", 2),       # its worker: 0.02 s
        record(12, 1, b"python", big),      # another agent: 8 s
        record(13, 2, b"sshd", 1),
        record(99, 1, b"python", 500),      # the orchestrator itself: left out
    ])  # fmt: skip
    path = tmp_path / "acct"
    path.write_bytes(data)
    got = _acct.read(path)
    assert [(p.pid, p.cpu_s) for p in got] == [(10, 0.6), (11, 0.02), (12, 8.0), (13, 0.01),
                                               (99, 5.0)]  # fmt: skip
    lines = _acct.fleet_lines(got, orchestrator=99)
    assert lines[0] == "CPU of the processes that ended during the run: 8.6 s"
    assert lines[1].startswith("  agents: 8.6 s in 2 processes (median 4.300 s, max 8.00 s)")
    assert "workers (forked by an agent): 0.0 s in 1 processes" in lines[2]
    path.write_bytes(_acct.RECORD.pack(0, 2, *([0] * 7), 0.0, *([0] * 8), b"x"))
    with pytest.raises(ValueError, match="version 2, expected 3"):
        _acct.read(path)


def _acct_module() -> ModuleType:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import _acct

    return _acct


def test_accounting_taken_over_by_another_file_is_said_not_counted_as_zero(tmp_path: Path) -> None:
    """Another program's ``acct(2)`` while a run counts: the run's file gets no record (not even
    the sentinel's), and the benchmark says so instead of printing a 0 s total. Accounting is
    machine-wide: this file's tests run one after another on one worker (``--dist loadfile``)."""
    _acct = _acct_module()
    ours, theirs = tmp_path / "ours.acct", tmp_path / "theirs.acct"
    why_not = _acct.start(ours)
    if why_not:
        pytest.skip(why_not)
    try:
        assert _acct.start(theirs) is None  # the other program: records now go to its file
    finally:
        processes, nothing = _acct.stop_and_read(ours)
    assert processes == []
    assert nothing is not None and f"recorded nothing into {ours}" in nothing
    assert "enough), so another program most likely turned accounting to its own file" in nothing
    assert any(p.name == "true" for p in _acct.read(theirs))  # the sentinel went there

    assert _acct.start(ours) is None  # and untouched, the sentinel and the rest are read back
    processes, nothing = _acct.stop_and_read(ours)
    assert nothing is None and any(p.name == "true" for p in processes)


def test_a_nearly_full_filesystem_is_named_as_the_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel suspends accounting below ``/proc/sys/kernel/acct``'s % free: said with the
    figures, since the file then stays empty however the run went."""
    _acct = _acct_module()

    class Full:
        f_blocks, f_bavail = 1000, 15  # 1.5 % free

    monkeypatch.setattr(_acct.os, "statvfs", lambda path: Full())
    said = _acct.why_nothing(tmp_path / "run.acct")
    assert "has 1.5 % free, and the kernel suspends accounting below" in said
    assert "(/proc/sys/kernel/acct)" in said
