"""The allocator setting: what it puts in force, that it keeps freed memory, and how it is recorded.

The effect is checked by page faults, not time: a 64 MiB buffer allocated, touched and freed ten
times faults its pages in every time under glibc's defaults (the block is mmap'ed and unmapped),
and only the first time when freed memory is retained.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from ngb.core.base.errors import ConfigError
from ngb.core.records.types import MeasureSettings, TrialSpec

_FAULTS = """
import ctypes, resource, sys
from ngb.core.trial import allocator
print(allocator.apply(sys.argv[1]))
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
size = 64 << 20
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    p = libc.malloc(size)
    ctypes.memset(p, 1, size)  # touch every page
    libc.free(ctypes.c_void_p(p))
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> tuple[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    return out[0], int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_retain_keeps_freed_memory_and_system_does_not() -> None:
    text, retained = _faults("retain")
    assert text.startswith("glibc retain (M_MMAP_MAX=0")
    system_text, system = _faults("system")
    assert system_text == "system"
    pages = (64 << 20) // 4096
    assert system >= 9 * pages  # faulted in again on each of the 10 rounds
    assert retained < 2 * pages  # only the first round faults


def test_system_after_retain_in_one_process_says_what_ran() -> None:
    out = subprocess.run(
        [sys.executable, "-c",
         "from ngb.core.trial import allocator as a; a.apply('retain'); print(a.apply('system'))"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    if sys.platform.startswith("linux"):
        assert "set earlier in this process" in out


def test_setting_is_checked_and_retain_keys_stay_as_before() -> None:
    with pytest.raises(ConfigError, match="allocator must be retain or system"):
        MeasureSettings(allocator="jemalloc")
    plain = TrialSpec(model="conv", compiler="identity", width=8)
    retain = TrialSpec(
        model="conv", compiler="identity", width=8, measure=MeasureSettings(allocator="retain")
    )
    system = TrialSpec(
        model="conv", compiler="identity", width=8, measure=MeasureSettings(allocator="system")
    )
    # "system" is the default now (what a plain deployment runs); trials stored under the old
    # default ("retain", omitted from the key) keep their keys, so a resume never mixes the two
    assert plain.key == system.key != retain.key


def test_measure_records_the_allocator(tmp_path) -> None:
    from ngb.core.trial.measure import run_trial

    spec = TrialSpec(
        model="conv", compiler="noop", width=8,
        measure=MeasureSettings(repetitions=2, workers=1, min_duration_s=0.0, allocator="system"),
    )  # fmt: skip
    result = run_trial(spec, workdir=tmp_path)
    assert result.status == "ok" and result.extra["allocator"] == "system"
