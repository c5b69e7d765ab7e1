"""The device agent as a real process: checkpoint/resume, kill -9, crashes, timeouts, cancel,
pause, probe, and the one-file bundle."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import psutil
import pytest
from ngb.core.records import events
from ngb.core.records.types import TrialSpec
from ngb.devices.agent import append_checkpoint, load_trials, read_checkpoint
from ngb.devices.bundle import build_agent_zipapp

from tests.cli_helpers import scaled

AGENT = [sys.executable, "-m", "ngb.devices.agent"]
FAST = {
    "warmup_iters": 0,
    "warmup_s": 0.0,
    "min_iters": 1,
    "min_duration_s": 0.01,
    "repetitions": 2,
    "workers": 1,  # worker processes are covered by tests/test_workers.py
    "quiet_check_s": 0.0,
}


#: both ways ``agent run`` starts a trial's process: isolation is the claim of either
TRIAL_STARTS = pytest.mark.parametrize("start", ["fork", "exec"])


def trial(name: str, options: dict | None = None, **measure: object) -> dict:
    return {
        "model": name,
        "compiler": "noop",
        "compiler_options": options or {},
        "measure": {**FAST, **measure},
    }


def write_trials(path: Path, rows: list[dict]) -> list[str]:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return [TrialSpec.from_dict(r).key for r in rows]


def agent_run_argv(tmp: Path, *extra: str) -> list[str]:
    """``agent run`` on the test's trials.jsonl / ck.jsonl, plus ``extra`` flags."""
    trials, checkpoint = str(tmp / "trials.jsonl"), str(tmp / "ck.jsonl")
    return [*AGENT, "run", "--trials", trials, "--checkpoint", checkpoint, *extra]


def start_agent(tmp: Path, *extra: str) -> subprocess.Popen:
    """The agent in the background, its events readable line by line from ``stdout``."""
    return subprocess.Popen(
        agent_run_argv(tmp, *extra), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )


def run_agent(tmp: Path, *extra: str, timeout: float = 120) -> tuple[int, list[dict], str]:
    proc = subprocess.run(
        agent_run_argv(tmp, *extra),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    evs = [events.decode(line) for line in proc.stdout.splitlines()]
    assert all(e is not None for e in evs), proc.stdout  # every stdout line is an event
    return proc.returncode, evs, proc.stderr


def checkpoint_keys(path: Path) -> list[str]:
    keys = []
    for line in path.read_text().splitlines():
        try:
            keys.append(json.loads(line)["key"])
        except ValueError:
            continue
    return keys


def read_events_until(proc: subprocess.Popen, predicate, limit_s: float = 60) -> list[dict]:
    """Read the agent's stdout until an event satisfies ``predicate``."""
    seen: list[dict] = []
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        event = events.decode(line)
        if event is not None:
            seen.append(event)
            if predicate(event, seen):
                return seen
    raise AssertionError(f"event not seen; got {[e['type'] for e in seen]}")


def wait_dead(proc: psutil.Process, limit_s: float = 30) -> bool:
    """True once ``proc`` is gone or a zombie (killed, waiting for init to reap it)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_checkpoint_and_resume_skip_done_trials(tmp_path: Path) -> None:
    keys = write_trials(tmp_path / "trials.jsonl", [trial("a"), trial("b"), trial("a")])
    rc, evs, _ = run_agent(tmp_path, "--isolate", "inprocess", "--run-id", "r1")
    assert rc == 0
    assert evs[0]["type"] == events.RUN_STARTED and evs[0]["total"] == 2  # duplicate kept once
    done = [e for e in evs if e["type"] == events.TRIAL_DONE]
    assert [e["key"] for e in done] == keys[:2]
    assert done[0]["result"]["throughput"]["n"] == 2
    assert evs[-1] == {
        **evs[-1],
        "type": events.RUN_DONE,
        "ok": 2,
        "failed": 0,
        "skipped": 0,
        "cancelled": False,
        "run_id": "r1",
    }
    assert checkpoint_keys(tmp_path / "ck.jsonl") == keys[:2]

    rc, evs, _ = run_agent(tmp_path, "--isolate", "inprocess")
    assert rc == 0
    assert [e["type"] for e in evs] == [events.RUN_STARTED, events.RUN_DONE]
    assert evs[0]["skipped"] == 2 and evs[-1]["skipped"] == 2
    assert checkpoint_keys(tmp_path / "ck.jsonl") == keys[:2]


def test_torn_checkpoint_line_is_ignored_and_healed(tmp_path: Path) -> None:
    keys = write_trials(tmp_path / "trials.jsonl", [trial("a"), trial("b")])
    run_agent(tmp_path, "--isolate", "inprocess")
    ck = tmp_path / "ck.jsonl"
    lines = ck.read_text().splitlines()
    # Keep trial a, and leave half of trial b's line with no newline: a kill -9 mid-write.
    ck.write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])
    assert set(read_checkpoint(ck)) == {keys[0]}

    rc, evs, _ = run_agent(tmp_path, "--isolate", "inprocess")
    assert rc == 0 and evs[0]["skipped"] == 1
    assert [e["key"] for e in evs if e["type"] == events.TRIAL_DONE] == [keys[1]]
    assert set(read_checkpoint(ck)) == set(keys)
    assert len(ck.read_text().splitlines()) == 3  # the torn fragment stays on a line of its own


def test_append_checkpoint_after_torn_line(tmp_path: Path) -> None:
    ck = tmp_path / "ck.jsonl"
    ck.write_text('{"key": "x", "sta')
    append_checkpoint(ck, {"key": "y", "status": "ok"})
    assert ck.read_text().endswith('\n{"key":"y","status":"ok"}\n')
    assert list(read_checkpoint(ck)) == ["y"]


@TRIAL_STARTS
def test_sigkill_mid_run_then_rerun_runs_every_trial_once(tmp_path: Path, start: str) -> None:
    # 0.3 s timed loops of 2 ms sleeping calls: long enough to kill one mid-measurement, and
    # ~1 CPU-s each less than a busy no-op loop (9.1-9.6 -> 2.2-2.7 busy CPU-s for this test)
    rows = [trial(f"m{i}", {"sleep_s": 0.002}, min_duration_s=0.3) for i in range(6)]
    keys = write_trials(tmp_path / "trials.jsonl", rows)
    proc = start_agent(tmp_path, "--trial-start", start)
    try:
        # Kill while the third trial is in flight (after its measuring started).
        read_events_until(
            proc,
            lambda e, seen: (
                e["type"] == events.PROGRESS
                and sum(x["type"] == events.TRIAL_DONE for x in seen) == 2
            ),
        )
        children = psutil.Process(proc.pid).children()
    finally:
        proc.kill()
        proc.wait()
    # The in-flight trial dies with its agent instead of running on as an orphan.
    assert len(children) == 1  # the trial in flight
    assert wait_dead(children[0])
    after_kill = checkpoint_keys(tmp_path / "ck.jsonl")
    # Trials finished before the kill are all there, in order (normally exactly two; a very
    # slow reader may see the third finish before the kill lands).
    assert 2 <= len(after_kill) < len(keys) and after_kill == keys[: len(after_kill)]

    rc, evs, _ = run_agent(tmp_path, "--trial-start", start)
    assert rc == 0 and evs[0]["skipped"] == 2
    final = checkpoint_keys(tmp_path / "ck.jsonl")
    assert sorted(final) == sorted(keys) and len(final) == len(set(final))


@TRIAL_STARTS
def test_crashing_trial_is_recorded_and_run_goes_on(tmp_path: Path, start: str) -> None:
    keys = write_trials(
        tmp_path / "trials.jsonl", [trial("a"), trial("boom", {"crash": True}), trial("c")]
    )
    rc, evs, stderr = run_agent(tmp_path, "--trial-start", start)
    assert rc == 0
    failed = [e for e in evs if e["type"] == events.TRIAL_FAILED]
    assert len(failed) == 1 and failed[0]["key"] == keys[1]
    assert failed[0]["error_kind"] == "crash" and "SIGABRT" in failed[0]["error"]
    assert evs[-1]["ok"] == 2 and evs[-1]["failed"] == 1
    records = read_checkpoint(tmp_path / "ck.jsonl")
    assert records[keys[1]]["status"] == "failed" and records[keys[1]]["error_kind"] == "crash"
    assert records[keys[2]]["status"] == "ok"


@TRIAL_STARTS
def test_timeout_kills_the_trial(tmp_path: Path, start: str) -> None:
    keys = write_trials(
        tmp_path / "trials.jsonl", [trial("slow", {"compile_s": 60}, timeout_s=1.0), trial("next")]
    )
    rc, evs, _ = run_agent(tmp_path, "--trial-start", start)
    assert rc == 0
    records = read_checkpoint(tmp_path / "ck.jsonl")
    assert records[keys[0]]["error_kind"] == "timeout"
    assert "timeout_s=1s" in records[keys[0]]["error"]
    assert records[keys[1]]["status"] == "ok"


@TRIAL_STARTS
def test_a_trial_process_leads_its_session_and_holds_none_of_the_agents_files(
    tmp_path: Path, start: str
) -> None:
    # Forked or started anew, the trial's process is a session of its own (a kill of its group
    # takes the compiler's helpers) and does not hold the checkpoint's lock: a trial that lived
    # on would otherwise refuse the next agent of the run ("another agent is running").
    keys = write_trials(tmp_path / "trials.jsonl", [trial("hang", {"compile_s": 60})])
    proc = start_agent(tmp_path, "--trial-start", start)
    try:
        read_events_until(proc, lambda e, seen: e["type"] == events.PHASE and e["key"] == keys[0])
        (child,) = psutil.Process(proc.pid).children()
        held = [f.path for f in child.open_files()]
        agent_held = [f.path for f in psutil.Process(proc.pid).open_files()]
        cmdline = child.cmdline()
        assert os.getsid(child.pid) == child.pid != os.getsid(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    lock = str(tmp_path / "ck.jsonl.lock")
    assert lock in agent_held and lock not in held
    # forked: the agent's own command line; started anew: ``agent trial``
    assert ("trial" in cmdline) == (start == "exec")


def test_a_forked_trial_imports_nothing_the_agent_did_not_load_first() -> None:
    # What the agent preloads (``preload_trial_harness``) is what a trial loads on first use,
    # so a forked trial starts with it: none of ngb's modules, numpy's or psutil's left to
    # import for a no-op trial. A module that a trial starts to import lazily shows up here.
    # And no torch in the agent: a trial forked from it would inherit torch's OpenMP pool.
    code = """
import json, os, sys
from pathlib import Path
from ngb.devices.agent import EventWriter, TrialSpec, _preloaded, run_inprocess
assert _preloaded()
assert "torch" not in sys.modules, "a forked trial would inherit torch's OpenMP pool"
before = set(sys.modules)
spec = TrialSpec.from_dict(json.loads(sys.argv[1]))
with open(os.devnull, "w") as sink:
    run_inprocess(spec, EventWriter(sink), Path(sys.argv[2]), None)
print(json.dumps(sorted(set(sys.modules) - before)))
"""
    with tempfile.TemporaryDirectory() as work:
        out = subprocess.run(
            [sys.executable, "-c", code, json.dumps(trial("m")), work],
            capture_output=True, text=True, timeout=scaled(60), check=True,
        ).stdout  # fmt: skip
    assert json.loads(out.splitlines()[-1]) == []


def test_a_preload_that_raises_starts_the_trial_anew_and_the_agent_goes_on(monkeypatch) -> None:
    # A compiler module that fails to import breaks the agent's preload: the trial then starts
    # in a new interpreter (which meets the error as the trial's own), never ends the run here.
    import subprocess as sp

    from ngb.core.trial import measure
    from ngb.devices import agent

    def broken() -> None:
        raise SyntaxError("a compiler module that does not parse")

    monkeypatch.setattr(measure, "preload_trial_harness", broken)
    proc = agent._start_trial(TrialSpec.from_dict(trial("m")), None, None, "fork")
    assert isinstance(proc, sp.Popen)
    assert proc.stdout is not None and proc.stderr is not None
    out = proc.stdout.read()
    proc.stderr.read()
    assert proc.wait(timeout=scaled(60)) == 0
    last = events.decode(out.splitlines()[-1])
    assert last is not None and last["type"] == agent.TRIAL_RESULT


def test_in_process_failure_is_recorded(tmp_path: Path) -> None:
    keys = write_trials(tmp_path / "trials.jsonl", [trial("f", {"fail": True})])
    rc, evs, _ = run_agent(tmp_path, "--isolate", "inprocess")
    assert rc == 0
    failed = [e for e in evs if e["type"] == events.TRIAL_FAILED]
    assert failed[0]["key"] == keys[0] and failed[0]["error_kind"] == "error"
    assert failed[0]["result"]["status"] == "failed"


@TRIAL_STARTS
def test_sigterm_cancels_kills_child_and_records_nothing(tmp_path: Path, start: str) -> None:
    keys = write_trials(tmp_path / "trials.jsonl", [trial("a"), trial("hang", {"compile_s": 60})])
    pidfile = tmp_path / "agent.pid"
    proc = start_agent(tmp_path, "--pidfile", str(pidfile), "--trial-start", start)
    try:
        # The child reports its compile phase only once it is running the hanging trial.
        read_events_until(
            proc, lambda e, seen: e["type"] == events.PHASE and e.get("key") == keys[1]
        )
        assert pidfile.read_text().strip() == str(proc.pid)
        children = psutil.Process(proc.pid).children()
        assert len(children) == 1
        proc.send_signal(signal.SIGTERM)
        rest = [events.decode(line) for line in proc.stdout]
        assert proc.wait(timeout=30) == 143
    finally:
        proc.kill()
    assert rest[-1]["type"] == events.RUN_DONE and rest[-1]["cancelled"] is True
    assert rest[-1]["ok"] == 1
    assert wait_dead(children[0])
    assert checkpoint_keys(tmp_path / "ck.jsonl") == keys[:1]
    assert not pidfile.exists()


def test_pause_file_holds_the_next_trial(tmp_path: Path) -> None:
    write_trials(tmp_path / "trials.jsonl", [trial("a")])
    pause = tmp_path / "pause"
    pause.touch()
    proc = start_agent(tmp_path, "--pause-file", str(pause), "--isolate", "inprocess")
    try:
        seen = read_events_until(proc, lambda e, s: e["type"] == events.LOG)
        assert seen[-1]["msg"] == "paused"
        assert not any(e["type"] == events.TRIAL_STARTED for e in seen)
        pause.unlink()
        rest = [events.decode(line) for line in proc.stdout]
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    types = [e["type"] for e in rest]
    assert rest[0]["msg"] == "resumed" and events.TRIAL_DONE in types


def test_bad_trials_file_is_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "trials.jsonl").write_text(json.dumps(trial("a")) + "\n{not json\n")
    rc, evs, stderr = run_agent(tmp_path)
    assert rc == 2 and evs == []
    assert stderr.strip().count("\n") == 0 and "trials.jsonl:2" in stderr
    assert not (tmp_path / "ck.jsonl").exists()
    (tmp_path / "trials.jsonl").write_text(
        json.dumps({"model": "x", "compiler": "noop", "batch": 0}) + "\n"
    )
    with pytest.raises(Exception, match="batch must be > 0"):
        load_trials(tmp_path / "trials.jsonl")


def test_probe_reports_device_facts() -> None:
    proc = subprocess.run([*AGENT, "probe"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout)
    assert facts["cores_logical"] == os.cpu_count()
    assert facts["ram_mb"] > 100 and facts["python"] and facts["kernel"]
    assert "numpy" in facts["versions"]
    assert facts["compilers"]["identity"]["available"] in (True, False)
    assert "noop" not in facts["compilers"]
    assert isinstance(facts["gpus"], list)


def test_bundle_is_deterministic_and_runs(tmp_path: Path) -> None:
    first = build_agent_zipapp(tmp_path / "one")
    second = build_agent_zipapp(tmp_path / "two")
    assert first.name == second.name and first.read_bytes() == second.read_bytes()
    assert build_agent_zipapp(tmp_path / "one") == first  # cached by content hash
    names = zipfile.ZipFile(first).namelist()
    assert "__main__.py" in names and "ngb/devices/agent.py" in names
    assert "ngb/core/trial/measure.py" in names and "ngb/core/compilers/noop.py" in names
    assert not any(n.startswith(("ngb/sweeps", "ngb/tui")) or "__pycache__" in n for n in names)

    # The agent is loaded from the archive, not from the checkout.
    where = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; sys.path.insert(0, {str(first)!r}); import ngb.devices.agent as a; "
            "print(a.__file__)",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert where.stdout.strip().startswith(str(first))

    probe = subprocess.run(
        [sys.executable, str(first), "probe"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert probe.returncode == 0 and json.loads(probe.stdout)["hostname"]

    keys = write_trials(tmp_path / "trials.jsonl", [trial("a"), trial("b", {"crash": True})])
    run = subprocess.run(
        [sys.executable, str(first), "run", "--trials", "trials.jsonl", "--checkpoint", "ck.jsonl"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=scaled(120),
    )
    assert run.returncode == 0, run.stderr
    records = read_checkpoint(tmp_path / "ck.jsonl")
    assert records[keys[0]]["status"] == "ok" and records[keys[1]]["error_kind"] == "crash"


def test_sigterm_cancels_an_in_process_trial(tmp_path: Path) -> None:
    keys = write_trials(tmp_path / "trials.jsonl", [trial("hang", {"compile_s": 60}), trial("b")])
    proc = start_agent(tmp_path, "--isolate", "inprocess")
    try:
        read_events_until(proc, lambda e, seen: e["type"] == events.PHASE and e["key"] == keys[0])
        proc.send_signal(signal.SIGTERM)
        rest = [events.decode(line) for line in proc.stdout]
        assert proc.wait(timeout=30) == 143
    finally:
        proc.kill()
    assert [e["type"] for e in rest][-1] == events.RUN_DONE and rest[-1]["cancelled"] is True
    assert not any(e["type"] == events.TRIAL_STARTED for e in rest)  # trial b never started
    assert not (tmp_path / "ck.jsonl").exists() or checkpoint_keys(tmp_path / "ck.jsonl") == []


@TRIAL_STARTS
def test_trial_killed_from_outside_is_a_crash(tmp_path: Path, start: str) -> None:
    # What the kernel's OOM killer does: SIGKILL the trial process. The agent records it and
    # goes on with the next trial.
    keys = write_trials(tmp_path / "trials.jsonl", [trial("victim", {"compile_s": 60}), trial("b")])
    proc = start_agent(tmp_path, "--trial-start", start)
    try:
        read_events_until(proc, lambda e, seen: e["type"] == events.PHASE and e["key"] == keys[0])
        (child,) = psutil.Process(proc.pid).children()
        child.kill()
        rest = [events.decode(line) for line in proc.stdout]
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
    failed = next(e for e in rest if e["type"] == events.TRIAL_FAILED)
    assert failed["key"] == keys[0] and failed["error_kind"] == "crash"
    assert "SIGKILL" in failed["error"] and "OOM" in failed["error"]
    assert failed["result"]["versions"]["python"]
    assert rest[-1]["ok"] == 1 and rest[-1]["failed"] == 1


def test_second_agent_on_the_same_checkpoint_is_refused(tmp_path: Path) -> None:
    import fcntl

    write_trials(tmp_path / "trials.jsonl", [trial("a")])
    with open(tmp_path / "ck.jsonl.lock", "wb") as held:  # what a running agent holds
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        rc, evs, stderr = run_agent(tmp_path, "--isolate", "inprocess")
        assert rc == 3 and evs == [] and "another agent is running" in stderr
    rc, evs, _ = run_agent(tmp_path, "--isolate", "inprocess")  # the lock is free again
    assert rc == 0 and evs[-1]["ok"] == 1


def test_agent_repeats_its_last_state_while_a_trial_runs_and_sends_eta_inputs(
    tmp_path: Path,
) -> None:
    """Issue 32: a console that re-attaches mid-trial reads the event log from a stored offset,
    after the trial's start. The agent writes its last state again (``state``, with each CPU
    sample, at most every ``SNAPSHOT_S`` s, while a trial runs): the trial, its phase, the last CPU
    sample and the ETA's inputs; and it tags the environment with the run id, which a tuning
    database records."""
    from ngb.core.trial.live_state import SNAPSHOT_S

    keys = write_trials(
        tmp_path / "trials.jsonl",
        [trial("first"), trial("slow", {"compile_s": 4.0})],  # a slow compile: nothing timed
    )
    code, evs, err = run_agent(tmp_path, "--run-id", "run-32")
    assert code == 0, err
    started = [e for e in evs if e["type"] == "trial_started"]
    assert started[0]["eta"]["rest_trials"] == 1 and started[1]["eta"]["rest_trials"] == 0
    # the second trial's prediction comes from the first one's duration, not the cap
    first = next(e["result"] for e in evs if e["type"] == "trial_done")
    took = first["finished_at"] - first["started_at"]
    assert started[1]["eta"]["current_other_s"] == pytest.approx(took, abs=0.01)
    # each snapshot carries the phase the trial was last in (None before its first phase event:
    # on a loaded machine a snapshot can come between the trial's start and its phase)
    phase: str | None = None
    slow: list[dict] = []
    for e in evs:
        if e["type"] == "trial_started":
            phase = None
        elif e["type"] == "phase":
            phase = e["phase"]
        elif e["type"] == "state" and e["trial"]["key"] == keys[1]:
            assert e["phase"] == phase, e
            slow.append(e)
    compiling = [s for s in slow if s["phase"] == "compile"]
    assert len(compiling) >= 2, [e["type"] for e in evs]  # a 4 s compile: one per 1 s sample
    assert all(s["eta"]["rest_trials"] == 0 for s in slow)
    sampled = [s["cpu"] for s in slow if s["cpu"]]  # the live meter's sample, without per-core
    assert sampled and "percent" in sampled[-1] and "per_cpu" not in sampled[-1]
    gaps = [b["ts"] - a["ts"] for a, b in zip(slow, slow[1:], strict=False)]
    # never two at once (the reader and sampler threads both found one due: 2 ms apart); the
    # upper bound is a timing claim, in the slow tier below
    assert all(g >= SNAPSHOT_S / 2 for g in gaps), gaps
    last_done = max(i for i, e in enumerate(evs) if e["type"] == "trial_done")
    assert not any(e["type"] == "state" for e in evs[last_done:])  # between trials: none


# A timing claim (how far apart the agent's snapshots come): in the slow tier, on a quiet machine
# (`make test-slow`); beside three other xdist workers on 2 cores the sampler thread lags.
@pytest.mark.slow
def test_a_console_re_attached_at_any_moment_of_a_trial_gets_a_snapshot_within_2_s(
    tmp_path: Path,
) -> None:
    """The promise behind the re-attach (issue 32): whenever a console resumes the event log,
    a ``state`` event follows within 2 s. With snapshots at most every 1.5 s, carried by the
    1 s CPU samples, they came up to 2.5 s apart."""
    write_trials(tmp_path / "trials.jsonl", [trial("slow", {"compile_s": 6.0})])
    code, evs, err = run_agent(tmp_path)
    assert code == 0, err
    start = next(e["ts"] for e in evs if e["type"] == "trial_started")
    done = next(e["ts"] for e in evs if e["type"] == "trial_done")
    stamps = [start] + [e["ts"] for e in evs if e["type"] == "state"] + [done]
    waits = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    assert len(waits) >= 6 and max(waits) <= 2.0, waits
