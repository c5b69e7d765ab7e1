"""32 loopback devices over real SSH running a no-op sweep: the orchestrator's parallel efficiency.

Each device gets the same sweep of ``--trials`` no-op trials whose compile sleeps ``--sleep``
seconds, so the serial work of one device is known: ideal wall time = trials x sleep (every device
runs concurrently, one trial at a time). Efficiency = ideal / actual wall time from ``start()`` to
the last device's checkpoint ingested, which includes SSH handshakes, deploying the agent, starting
32 Python agents on this machine, the event streams and DuckDB ingest (goal >= 0.90).

The devices come from the test suite's sshd machinery (``tests/sshd.py``): one real OpenSSH sshd
on loopback ports, 32 inventory entries with distinct work dirs. Also printed: the live ingest rate
through the orchestrator (results and measurement rows per second of wall time, which is bounded by
the sweep, not by DuckDB). The store's own ingest rate and the 1M-row aggregate query are measured
by ``benchmarks/store.py``.

Usage: python benchmarks/loopback_devices.py [--devices 32] [--trials 6] [--sleep 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def sweep_text(trials: int, sleep: float, reps: int) -> str:
    return f"""
name = "loopback-bench"
[measure]
warmup_iters = 0
warmup_s = 0
min_iters = 1
min_duration_s = 0
repetitions = {reps}
verify = false
[[matrix]]
models = ["resnet18"]
compilers = ["noop"]
batches = {list(range(1, trials + 1))}
compiler_options.noop = {{ compile_s = {sleep} }}
"""


async def bench(args: argparse.Namespace, tmp: Path) -> int:
    sys.path.insert(0, str(ROOT))
    from ngb.devices.inventory import Inventory, load_inventory
    from ngb.sweeps.orchestrator import Orchestrator
    from ngb.sweeps.spec import loads_sweep
    from ngb.sweeps.store import Store

    from tests.sshd import SshdServer

    load0 = f"{os.getloadavg()[0]:.2f}"
    server = SshdServer.create(tmp / "sshd")
    server.start()
    try:
        devices = server.make_devices(args.devices, prefix="loop")
        home = server.make_ngb_home(tmp / "ngb-home", devices=devices)
        os.environ["NGB_HOME"] = str(home)
        os.environ["HOME"] = str(tmp)  # keep the operator's ~/.ssh out of it
        os.environ.pop("SSH_AUTH_SOCK", None)
        inventory: Inventory = load_inventory()
        store = Store(tmp / "bench.duckdb")
        sweep = loads_sweep(sweep_text(args.trials, args.sleep, args.reps))
        names = [d.name for d in devices]
        orch = Orchestrator(store, inventory, max_handshakes=args.handshakes)
        sub = orch.subscribe()
        first_result: dict[str, float] = {}
        marks: dict[str, dict[str, float]] = {}  # device -> first time of each state / event

        async def watch() -> None:
            async for item in sub:
                now = time.perf_counter()
                mark = marks.setdefault(item.device, {})
                if item.kind == "connection":
                    mark.setdefault(item.state, now)
                if item.kind == "agent" and (item.event or {}).get("type") == "run_started":
                    first_result.setdefault(item.device, now)
                    mark.setdefault("agent", now)
                if item.kind == "agent" and (item.event or {}).get("type") == "run_done":
                    mark.setdefault("run_done", now)

        watcher = asyncio.create_task(watch())
        t0 = time.perf_counter()
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        run_id = await orch.start(sweep, names, isolate=args.isolate)
        summary = await orch.wait(run_id)
        wall = time.perf_counter() - t0
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        own_cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
        await orch.close()
        await watcher
    finally:
        server.stop()

    states = [d["state"] for d in summary["devices"].values()]
    _, rows = store.query(
        "SELECT count(*), count(DISTINCT device || key) FROM trials WHERE run_id = ?", [run_id]
    )
    n_trials, n_distinct = rows[0]
    _, rows = store.query("SELECT count(*) FROM measurements WHERE run_id = ?", [run_id])
    n_meas = rows[0][0]
    ideal = args.trials * args.sleep
    started = sorted(t - t0 for t in first_result.values())
    print(
        f"devices: {args.devices} over real sshd on loopback; {args.trials} no-op trials each, "
        f"compile sleeps {args.sleep:g} s; isolate={args.isolate}; cores here: {os.cpu_count()}"
    )
    print(f"device states: {dict((s, states.count(s)) for s in set(states))}")
    print(
        f"trials stored: {n_trials} ({n_distinct} distinct; expected "
        f"{args.devices * args.trials}), measurement rows: {n_meas}"
    )
    if started:
        print(
            f"agent started on every device after: first {started[0]:.2f} s, "
            f"median {started[len(started) // 2]:.2f} s, last {started[-1]:.2f} s"
        )
    print(
        f"workstation (orchestrator process) CPU: {own_cpu:.2f} s over {wall:.2f} s wall "
        f"({100 * own_cpu / wall:.1f} % of one core)"
    )
    print(
        f"load average before/after: {load0} / {os.getloadavg()[0]:.2f} "
        "(other work on this machine competes for the same cores)"
    )
    for label, a, b in (
        ("connect", "connecting", "deploying"),
        ("deploy + upload + start", "deploying", "running"),
        ("agent start-up", "running", "agent"),
        ("run_done -> stored + torn down", "run_done", "finished"),
    ):
        spans = sorted(m[b] - m[a] for m in marks.values() if a in m and b in m)
        if spans:
            print(f"  {label}: median {spans[len(spans) // 2]:.2f} s, max {spans[-1]:.2f} s")
    print(f"ideal wall (per-device serial work): {ideal:.2f} s")
    print(f"actual wall: {wall:.2f} s")
    print(f"parallel efficiency: {ideal / wall:.3f} (goal >= 0.90)")
    print(
        f"live ingest through the orchestrator: {n_trials / wall:.1f} results/s, "
        f"{n_meas / wall:.1f} measurement rows/s (bounded by the sweep itself)"
    )
    ok = n_trials == n_distinct == args.devices * args.trials and set(states) == {"finished"}
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=32)
    parser.add_argument("--trials", type=int, default=6, help="no-op trials per device")
    parser.add_argument("--sleep", type=float, default=10.0, help="seconds each trial sleeps")
    parser.add_argument("--reps", type=int, default=3, help="repetitions per trial")
    parser.add_argument("--handshakes", type=int, default=8, help="concurrent SSH handshakes")
    parser.add_argument("--isolate", choices=("inprocess", "subprocess"), default="inprocess")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ngb-loopback-") as tmp:
        return asyncio.run(bench(args, Path(tmp)))


if __name__ == "__main__":
    sys.exit(main())
