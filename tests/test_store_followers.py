"""One store, many followers: CLIs, consoles and readers on one live run, killed at random
(issue 41, and issue 46's "every event stored once").

The run's agent works detached on ``localhost``; around it, for a while, two ``ngb attach``
processes (the CLI), two console stand-ins (a process that follows the run with the
orchestrator, as ``ngb-tui`` re-attaches it, while another of its threads copies the store for
SQL queries -- the very mix that unlocked the store before ``raw_files``) and readers (``ngb
query``, ``ngb export``), one of them killed with SIGKILL every few seconds and another started
in its place. At the end every command opens the store, and every trial, CPU sample and error
is there exactly once.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ngb.devices.inventory import Device, Inventory
from ngb.sweeps.store.database import Store

from tests.cli_helpers import ngb, ngb_argv
from tests.noop_sweeps import noop_sweep
from tests.timm_names import seed_timm_names

#: a console stand-in: follows the run and queries copies of the store at once, until killed
CONSOLE = """
import asyncio, sys, threading, time
from pathlib import Path
from ngb.devices.inventory import load_inventory
from ngb.sweeps.run.orchestrator import Orchestrator
from ngb.sweeps.store.database import Store
from ngb.sweeps.store.snapshot import QueryJob

db, inventory, run_id = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
pause = float(sys.argv[4])  # between two queries, each on a fresh copy of the store
store = Store(db)

def queries():
    while True:
        QueryJob(store, "SELECT count(*) FROM trials").run()
        time.sleep(pause)

threading.Thread(target=queries, daemon=True).start()

async def follow():
    orch = Orchestrator(store, load_inventory(inventory), local_flush_interval=0.5)
    await orch.attach(run_id)
    print("following", flush=True)
    await orch.wait(run_id)
    await orch.close()

asyncio.run(follow())
"""


class Followers:
    """The processes around the run, started and killed by kind."""

    def __init__(
        self, env: dict[str, str], db: Path, inventory: Path, run_id: str, query_pause: float
    ) -> None:
        self.env, self.db, self.inventory, self.run_id = env, db, inventory, run_id
        self.query_pause = query_pause
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.killed = 0

    def start(self, kind: str, n: int = 0) -> None:
        argv = {
            "cli": ngb_argv("attach", self.run_id),
            "console": [sys.executable, "-c", CONSOLE, str(self.db), str(self.inventory),
                        self.run_id, str(self.query_pause)],
            "query": ngb_argv("query", "SELECT count(*) FROM cpu_samples"),
            "export": ngb_argv("export", "--format", "csv", "-o",
                               str(self.db.parent / f"export{n}.csv"), "--force"),
        }[kind]  # fmt: skip
        proc = subprocess.Popen(
            argv, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        self.procs.append((kind, proc))

    def keep_readers_going(self, n: int) -> None:
        for i, (kind, proc) in enumerate(self.procs):
            if kind in ("query", "export") and proc.poll() is not None:
                self.procs[i] = (kind, proc)  # finished: its place goes to a new one
                self.procs.pop(i)
                self.start(kind, n)
                return

    def kill_one(self, rng: random.Random, n: int) -> None:
        alive = [(k, p) for k, p in self.procs if p.poll() is None]
        if not alive:
            return
        kind, proc = rng.choice(alive)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        self.killed += 1
        self.procs.remove((kind, proc))
        self.start(kind, n)

    def stop(self) -> None:
        for _, proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def run_the_storm(tmp_path: Path, trials: int, seed: int, query_pause: float) -> None:
    """``query_pause``: each console stand-in's pause between two copies of the store."""
    home = tmp_path / "home"
    inventory = home / "config" / "devices.toml"
    Inventory(
        [Device(name="localhost", host="localhost", transport="local",
                python=sys.executable, workdir=str(tmp_path / "device"))]
    ).save(inventory)  # fmt: skip
    seed_timm_names(home)
    sweep = tmp_path / "noop.toml"
    sweep.write_text(noop_sweep(trials, compile_s=1.0).to_toml())  # a storm of >= 12 s
    env = {**os.environ, "NGB_HOME": str(home), "COLUMNS": "120"}
    env.pop("NGB_DB", None)
    db = home / "data" / "results.duckdb"
    started = ngb(
        "run", str(sweep), "-d", "localhost", "--detach", "--isolate", "inprocess", env=env
    )
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.split("run ")[1].split()[0]
    crowd = Followers(env, db, inventory, run_id, query_pause)
    rng = random.Random(seed)
    try:
        for kind in ("cli", "cli", "console", "console", "query", "export"):
            crowd.start(kind)
        n = 0
        deadline = time.monotonic() + trials * 10
        checkpoint = tmp_path / "device"
        seen = False
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(1.0, 3.0))
            n += 1
            crowd.kill_one(rng, n)
            crowd.keep_readers_going(n)
            files = list(checkpoint.rglob("checkpoint.jsonl"))
            done = sum(f.read_text().count("\n") for f in files)
            # The storm ends with the run: every trial checkpointed, or the run's device folder
            # already torn down once it was there (a run of 12 one-second trials can end between
            # two looks; the loop then ran on to its deadline, 100 s of killing followers of a
            # finished run, 2026-11-29). Three kills at least, whenever the run ends.
            ended = done >= trials or (seen and not files)
            seen = seen or bool(files)
            if ended and crowd.killed >= 3:
                break
        assert crowd.killed >= 3
    finally:
        crowd.stop()
    # whatever the last killed follower held is on the device: one more follower stores it
    final = ngb("attach", run_id, env=env)
    assert final.returncode in (0, 1), final.stderr
    for args in (("status", run_id), ("query", "SELECT count(*) FROM trials")):
        opened = ngb(*args, env=env)
        assert opened.returncode == 0, opened.stderr  # every command opens the store
    store = Store(db)
    keys = [r[0] for r in store.query("SELECT key FROM trials WHERE run_id = ?", [run_id])[1]]
    assert len(keys) == trials and len(set(keys)) == trials  # 0 lost, 0 twice
    for table, columns in (
        ("cpu_samples", "run_id, device, key, source, ts"),
        ("tuning_progress", "run_id, device, key, ts, trials_done"),
        ("errors", "run_id, device, key, ts, kind, message"),
    ):
        inner = f"SELECT DISTINCT {columns} FROM {table}"  # noqa: S608 - fixed names
        counts = f"SELECT (SELECT count(*) FROM {table}), (SELECT count(*) FROM ({inner}))"  # noqa: S608
        total, distinct = store.query(counts)[1][0]
        assert total == distinct, f"{table}: {total} rows, {distinct} distinct"
    live = store.query("SELECT count(*) FROM cpu_samples WHERE source = 'live'")[1][0][0]
    assert live > 0  # the followers did pass samples on


@pytest.mark.timeout(600)
def test_followers_killed_at_random_never_break_the_store_nor_store_twice(tmp_path: Path) -> None:
    # a copy every 0.2 s per console: 103 copies made while trials were ingested, and 4.3 CPU-s
    # less than at 0.05 s (17.9 -> 13.6 busy CPU-s on the 2-core VM, 2026-11-30); the minutes
    # below copy at 0.05 s
    run_the_storm(tmp_path, trials=12, seed=41, query_pause=0.2)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_minutes_of_followers_killed_at_random(tmp_path: Path) -> None:
    run_the_storm(tmp_path, trials=120, seed=4141, query_pause=0.05)
