"""A refused run (its device busy with another process's run) says so in one line, never says
"started", and leaves no run in the store: from ``ngb run`` (with and without ``--detach``) and
from the console's Start (issue 20, point 6)."""

from __future__ import annotations

from ngb.sweeps.store.database import Store
from ngb.tui.app import NgbApp
from ngb.tui.backend import Backend
from textual.widgets import Input, Label

from tests.cli_helpers import ngb
from tests.noop_sweeps import noop_sweep
from tests.test_orchestrator import cli_env
from tests.test_tui_support import SIZE, wait_for

__all__ = ["cli_env"]  # the fixture, shared with the orchestrator's CLI tests


def start_busy_run(env, sweep_file) -> str:
    """A detached run holding localhost (long enough for the refusals below)."""
    sweep_file.write_text(noop_sweep(200, compile_s=0.3).to_toml())
    first = ngb(
        "run", str(sweep_file), "-d", "localhost", "--detach", "--isolate", "inprocess", env=env
    )
    assert first.returncode == 0, first.stderr
    return first.stdout.split("run ")[1].split()[0]


def assert_only_run_stored(store: Store, run_id: str) -> None:
    """No row of any table that has a ``run_id`` names another run (the refused one's device
    rows and its error are gone with it)."""
    _, tables = store.select(
        "SELECT DISTINCT table_name FROM information_schema.columns "
        "WHERE column_name = 'run_id' AND table_catalog = current_database()"
    )
    assert len(tables) > 5  # runs, run_devices, trials, errors, cpu_samples, ...
    for (table,) in tables:
        _, rows = store.select(f'SELECT DISTINCT run_id FROM "{table}"')  # noqa: S608 - catalogue
        assert {r[0] for r in rows} <= {run_id}, (table, rows)


def test_a_refused_run_exits_non_zero_and_is_not_stored(cli_env):
    env, sweep_file, home = cli_env
    run_id = start_busy_run(env, sweep_file)
    try:
        for detach in (["--detach"], []):
            second = ngb("run", str(sweep_file), "-d", "localhost", *detach, env=env)
            assert second.returncode != 0, detach
            assert "started" not in second.stdout, (detach, second.stdout)
            lines = [line for line in second.stderr.splitlines() if line.strip()]
            assert len(lines) == 1 and "run refused: localhost is busy with run" in lines[0], lines
            assert run_id in lines[0]
            store = Store(home / "data" / "results.duckdb")
            assert [r["run_id"] for r in store.runs()] == [run_id]  # no failed run left behind
            assert_only_run_stored(store, run_id)
    finally:
        ngb("cancel", run_id, env=env)


async def test_a_start_the_console_cannot_make_is_refused_and_not_stored(cli_env, tmp_path):
    env, sweep_file, home = cli_env
    run_id = start_busy_run(env, sweep_file)
    db = home / "data" / "results.duckdb"
    backend = Backend(db, home / "config" / "devices.toml", isolate="inprocess")
    # No re-attach: this console must not hold the run itself (that refusal is another test's).
    app = NgbApp(backend, start_screen="run", attach_on_start=False,
                 settings_path=tmp_path / "tui.json")  # fmt: skip
    toasts: list[str] = []
    try:
        async with app.run_test(size=SIZE) as pilot:
            screen = app.run_screen
            original_notify = screen.notify

            def notify(message: str, **kw: object) -> None:
                toasts.append(message)
                original_notify(message, **kw)  # type: ignore[arg-type]

            screen.notify = notify  # type: ignore[method-assign]
            screen.query_one("#sweep-file", Input).value = str(sweep_file)
            await pilot.pause()
            screen.action_start()
            status = screen.query_one("#run-status", Label)
            await wait_for(pilot, lambda: "not started" in str(status.render()), timeout=60)
            line = str(status.render())
            assert f"run refused: localhost is busy with run {run_id}" in line, line
            await pilot.pause(0.5)
            # Nothing of the refused run: no panel, no state, no "started"/"failed" toast.
            assert not screen._panels and not screen.model.devices
            assert screen.current_run == ""
            assert not any("started" in t or "failed" in t for t in toasts), toasts
            assert [r["run_id"] for r in backend.store().runs()] == [run_id]
    finally:
        ngb("cancel", run_id, env=env)
