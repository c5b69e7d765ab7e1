"""A refused ``ngb run --detach`` (the device is busy with another run) says so in one line,
exits non-zero, never says "started", and leaves no failed run in the store (issue 20, point 6)."""

from __future__ import annotations

from ngb.sweeps.store import Store

from tests.noop_sweeps import noop_sweep
from tests.test_orchestrator import cli_env, ngb

__all__ = ["cli_env"]  # the fixture, shared with the orchestrator's CLI tests


def test_a_refused_detached_run_exits_non_zero_and_is_not_stored(cli_env):
    env, sweep_file, home = cli_env
    sweep_file.write_text(noop_sweep(200, compile_s=0.3).to_toml())
    first = ngb(
        env, "run", str(sweep_file), "-d", "localhost", "--detach", "--isolate", "inprocess"
    )
    assert first.returncode == 0, first.stderr
    run_id = first.stdout.split("run ")[1].split()[0]
    try:
        second = ngb(env, "run", str(sweep_file), "-d", "localhost", "--detach")
        assert second.returncode != 0
        assert not second.stdout.strip()  # nothing about starting
        lines = [line for line in second.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "run refused: localhost is busy with run" in lines[0], lines
        assert run_id in lines[0]
        store = Store(home / "data" / "results.duckdb")
        assert [r["run_id"] for r in store.runs()] == [run_id]  # no failed run left behind
    finally:
        ngb(env, "cancel", run_id)
