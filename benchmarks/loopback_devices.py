"""32 loopback devices over real SSH running a no-op sweep: the orchestrator's parallel efficiency.

Each device gets the same sweep of ``--trials`` no-op trials whose compile sleeps ``--sleep``
seconds, so the serial work of one device is known: ideal wall time = trials x sleep (every device
runs concurrently, one trial at a time). Efficiency = ideal / actual wall time from ``start()`` to
the last device's checkpoint ingested, which includes SSH handshakes, deploying the agent, starting
32 Python agents on this machine, the event streams and DuckDB ingest (issue 41's goals:
>= 0.8 at 32 devices, >= 0.6 at 128, 4 trials x 5 s each).

The devices come from the test suite's sshd machinery (``tests/sshd.py``): one real OpenSSH sshd
on loopback ports, 32 inventory entries with distinct work dirs. Also printed: the live ingest rate
through the orchestrator (results and measurement rows per second of wall time, which is bounded by
the sweep, not by DuckDB). The store's own ingest rate and the 1M-row aggregate query are measured
by ``benchmarks/store.py``.

Login shells: every SSH exec runs the device user's login shell first. On this machine root's
shell is bash, and root's ~/.bashrc runs ``pyenv init`` and friends (~0.2 s of CPU per exec on two
cores) -- an artefact of the workstation, not of ngb. With ``--shell lean`` (root only) the devices
log in as a throwaway account created for the run and removed after: uid 0 (so it can run the venv's
python under /root, which is mode 700, and write the tmp work dirs), login shell ``/bin/sh``, an
empty home. ``--shell both`` (default) runs the sweep once per login shell and prints both figures.

With ``--plain`` a plain hand-written loop runs after ngb on the same sshd, devices and accounts
(``plain_loop``: asyncssh, one Python per device sleeping the same trials, a line after each):
its efficiency is what this machine allows a fleet at all, so the gap between the two figures is
ngb's own cost, not the machine's. ``--plain-imports numpy,psutil`` has each plain process import
what ngb's agent needs first: the ceiling for any Python agent that measures.

Usage: python benchmarks/loopback_devices.py [--devices 32] [--trials 6] [--sleep 10]
       [--shell both|root|lean] [--plain [--plain-imports MODULES]] [--acct]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import _acct  # this folder: the script runs as a file
import _cleanup

if TYPE_CHECKING:
    from ngb.devices.inventory import Device

ROOT = Path(__file__).resolve().parents[1]
#: pids of the children this process waits for itself (the sshd): the orphan reaper leaves them
_OWN_CHILDREN: set[int] = set()


def sweep_text(trials: int, sleep: float, reps: int) -> str:
    # One worker process per trial (``workers = 1``): since 2026-11-25 every worker process
    # compiles for itself, so the default three processes of a 3-repetition trial slept three
    # times and a device's serial work was 3 x trials x sleep -- the efficiency this printed
    # (0.19 at 32 devices) was capped at 1/3 by the sweep, not by the fleet. No quiet check: the
    # ideal counts the sleeps, and the 0.3 s of sampling before each timed loop is the
    # measurement protocol's, not the fleet's (``ngb bench console`` does the same).
    return f"""
name = "loopback-bench"
[measure]
warmup_iters = 0
warmup_s = 0
min_iters = 1
min_duration_s = 0
repetitions = {reps}
workers = 1
quiet_check_s = 0
verify = false
[[matrix]]
models = ["resnet18"]
compilers = ["noop"]
batches = {list(range(1, trials + 1))}
compiler_options.noop = {{ compile_s = {sleep} }}
"""


class TrialStarts:
    """How long each trial's start takes on the device, by the agents' own clocks: from its
    ``trial_started`` event to its ``compile`` phase, the first trial of every device apart from
    the others. On 32 loopback devices (2026-11-30) the first took a median 2.1 s and the rest
    10-30 ms: every agent imports the trial's modules (``measure``, the compilers' versions) at
    its first trial, ~0.11 s of CPU alone, 32 at once on two cores."""

    def __init__(self) -> None:
        self._started: dict[str, tuple[int, float]] = {}  # device -> (trial index, started ts)
        self._count: dict[str, int] = {}
        self.first: list[float] = []
        self.later: list[float] = []

    def note(self, device: str, event: dict[str, object]) -> None:
        ts = event.get("ts")
        if not isinstance(ts, int | float):
            return
        if event.get("type") == "trial_started":
            index = self._count.get(device, 0)
            self._count[device] = index + 1
            self._started[device] = (index, float(ts))
        elif event.get("type") == "phase" and event.get("phase") == "compile":
            begun = self._started.pop(device, None)
            if begun is not None:
                (self.first if begun[0] == 0 else self.later).append(float(ts) - begun[1])

    def line(self) -> str:
        def median(values: list[float]) -> str:
            return f"{sorted(values)[len(values) // 2]:.2f} s" if values else "-"

        return (
            f"trial start -> compile on the device: first trial median {median(self.first)}, "
            f"the others median {median(self.later)}"
        )


async def bench(
    args: argparse.Namespace, tmp: Path, user: str | None, watchdog: _cleanup.Watchdog
) -> float | None:
    """One run of the sweep on all devices; prints the figures, returns the efficiency."""
    sys.path.insert(0, str(ROOT))
    from ngb.devices.inventory import Inventory, load_inventory
    from ngb.sweeps.run.orchestrator import Orchestrator
    from ngb.sweeps.spec.sweep import loads_sweep
    from ngb.sweeps.store.database import Store

    from tests.sshd import DEVICE_WORKER_START, SshdServer

    load0 = f"{os.getloadavg()[0]:.2f}"
    server = SshdServer.create(tmp / "sshd")
    server.start()
    assert server.proc is not None
    _OWN_CHILDREN.add(server.proc.pid)
    try:
        devices = server.make_devices(args.devices, prefix="loop", user=user)
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
        starts = TrialStarts()

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
                if item.kind == "agent" and item.event:
                    starts.note(item.device, item.event)

        watcher = asyncio.create_task(watch())
        accounting, counting = tmp / "run.acct", False
        if args.acct:
            watchdog.accounting_on()  # before it is on: a kill in between still turns it off
            why_not = _acct.start(accounting)
            counting = why_not is None
            if why_not:
                watchdog.accounting_off()  # not on: the watchdog must not turn off another's
                print(f"--acct: {why_not}; going on without it")
        # The agent bundle, built once per ngb version into the workstation's cache: this run's
        # home is new, so it is built here, before the clock, as any earlier run would have
        # (inside it, the first deploy waited ~0.25 s for it with the event loop held)
        from ngb.devices.agent_remote import agent_bundle

        bundle_s = time.perf_counter()
        agent_bundle()
        bundle_s = time.perf_counter() - bundle_s
        # The store's tables and the SSH library, likewise: a workstation's store has them from
        # its first run, the console and `ngb run` import asyncssh once at their start, and
        # neither is part of driving a fleet (the plain loop below finds asyncssh imported too)
        ready_cpu = time.process_time()
        with store.batch():
            pass
        import asyncssh  # noqa: F401

        ready_cpu = time.process_time() - ready_cpu
        t0 = time.perf_counter()
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        run_id = await orch.start(sweep, names, isolate=args.isolate)
        summary = await orch.wait(run_id)
        wall = time.perf_counter() - t0
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        own_cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
        await orch.close()
        await watcher
        ended = []
        if counting:
            await asyncio.sleep(1.0)  # the agents' last writes and exits
            processes, nothing = _acct.stop_and_read(accounting)
            watchdog.accounting_off()
            ended = [f"--acct: {nothing}"] if nothing else _acct.fleet_lines(processes, os.getpid())
        plain_wall, plain_cpu = None, 0.0
        if args.plain:  # the same devices, accounts and sshd, after ngb's run has ended
            load_plain = f"{os.getloadavg()[0]:.2f}"
            known = home / "config" / "known_hosts"
            plain_cpu0 = resource.getrusage(resource.RUSAGE_SELF)
            plain_wall = await plain_loop(
                devices, known, args.trials, args.sleep, args.plain_imports
            )
            plain_cpu1 = resource.getrusage(resource.RUSAGE_SELF)
            plain_cpu = (plain_cpu1.ru_utime - plain_cpu0.ru_utime) + (
                plain_cpu1.ru_stime - plain_cpu0.ru_stime
            )
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
    shell = "/bin/sh (throwaway account)" if user else f"{os.environ.get('SHELL', '?')} (this user)"
    print(f"--- login shell on the devices: {shell}")
    print(
        f"devices: {args.devices} over real sshd on loopback; {args.trials} no-op trials each, "
        f"compile sleeps {args.sleep:g} s; isolate={args.isolate}; cores here: {os.cpu_count()}"
    )
    # The agents' CPU below depends on it: a device's default (fresh) starts an interpreter per
    # trial worker, ~0.28 CPU-s more a no-op trial (1.68 against 0.54 CPU-s for one agent's 4).
    print(f"trial workers on the devices: NGB_WORKER_START={DEVICE_WORKER_START} and "
          "OMP_NUM_THREADS=1 (tests/sshd.py; a device's default is fresh, its OpenMP threads "
          "its own)")  # fmt: skip
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
    for state in ("connecting", "deploying", "running", "run_done", "finished"):
        at = sorted(m[state] - t0 for m in marks.values() if state in m)
        if at:
            print(f"  {state:>10} reached after: first {at[0]:.2f} s, "
                  f"median {at[len(at) // 2]:.2f} s, last {at[-1]:.2f} s")  # fmt: skip
    print(
        f"workstation (orchestrator process) CPU: {own_cpu:.2f} s over {wall:.2f} s wall "
        f"({100 * own_cpu / wall:.1f} % of one core); the agent bundle was built before the "
        f"clock ({bundle_s:.2f} s; a workstation has it cached from its first run), the store's "
        f"tables made and asyncssh imported too ({ready_cpu:.2f} CPU-s, once per process and "
        f"store)"
    )
    for line in ended:
        print(line)
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
    print(starts.line())
    print(f"ideal wall (per-device serial work): {ideal:.2f} s")
    print(f"actual wall: {wall:.2f} s")
    goal = 0.8 if args.devices <= 32 else 0.6  # issue 41, at 32 and at 128 devices
    print(f"parallel efficiency: {ideal / wall:.3f} (goal >= {goal})")
    if plain_wall is not None:
        print(
            f"plain loop beside it (asyncssh + one python per device sleeping the same trials"
            f"{', importing ' + args.plain_imports if args.plain_imports else ''}, "
            f"load before {load_plain}): wall {plain_wall:.2f} s, efficiency "
            f"{ideal / plain_wall:.3f}; ngb / plain: {plain_wall / wall:.3f}"
        )
        print(
            f"plain loop's own process CPU (SSH sessions, no store): {plain_cpu:.2f} s over "
            f"{plain_wall:.2f} s wall ({100 * plain_cpu / plain_wall:.1f} % of one core)"
        )
    print(
        f"live ingest through the orchestrator: {n_trials / wall:.1f} results/s, "
        f"{n_meas / wall:.1f} measurement rows/s (bounded by the sweep itself)"
    )
    ok = n_trials == n_distinct == args.devices * args.trials and set(states) == {"finished"}
    if not ok:
        print("FAILED: not every trial was stored exactly once / not every device finished")
        unfinished = [(n, d) for n, d in sorted(summary["devices"].items())
                      if d["state"] != "finished" or d["done"] != args.trials]  # fmt: skip
        for name, dev in unfinished[:5]:
            print(f"  {name}: {dev['state']}, {dev['done']} done: {dev.get('error') or '-'}")
        return None
    return ideal / wall


# The plain loop beside ngb: what any Python fleet harness must do at the least -- one SSH session
# per device, one Python process on it that runs the trials one after another and prints a line
# after each -- with nothing of ngb in it (asyncssh directly, no agent, no store). Its efficiency
# is this machine's ceiling for the fleet; ngb's distance below it is ngb's own cost.
MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
PLAIN_AGENT = (
    "import importlib, sys, time\n"
    "for name in filter(None, sys.argv[3].split(',')):\n"
    "    importlib.import_module(name)\n"
    "for i in range(int(sys.argv[1])):\n"
    "    time.sleep(float(sys.argv[2]))\n"
    "    print(i, flush=True)\n"
)


async def plain_loop(
    devices: list[Device], known_hosts: Path, trials: int, sleep: float, imports: str = ""
) -> float:
    """Wall seconds until every device has run ``trials`` sleeps of ``sleep`` s, plainly, after
    importing ``imports`` (comma-separated modules: what any agent that measures must load)."""
    import asyncssh

    async def one(dev: Device) -> int:
        async with asyncssh.connect(
            dev.host, port=dev.port, username=dev.user, client_keys=[dev.identity_file],
            known_hosts=str(known_hosts),
        ) as conn:  # fmt: skip
            proc = await conn.run(
                f"{dev.python} -c {shlex.quote(PLAIN_AGENT)} {trials} {sleep} "
                f"{shlex.quote(imports or ',')}"
            )
            if proc.exit_status != 0:
                last = (str(proc.stderr or "").strip().splitlines() or ["no output"])[-1]
                raise SystemExit(f"plain loop on {dev.name}: {last}")
            return len(str(proc.stdout).split())

    t0 = time.perf_counter()
    lines = await asyncio.gather(*(one(d) for d in devices))
    wall = time.perf_counter() - t0
    if sum(lines) != trials * len(devices):
        raise SystemExit(f"plain loop: {sum(lines)} lines, expected {trials * len(devices)}")
    return wall


@contextlib.contextmanager
def lean_account(home: Path, created: Callable[[str], None] | None = None) -> Iterator[str]:
    """A throwaway login for the devices: uid 0 alias, login shell /bin/sh, empty home.

    Why uid 0: the venv's python lives under /root (mode 700) and the work dirs are root's tmp
    folders; an unprivileged account could not use either without loosening their modes.
    Password ``*`` (no password login, but not "locked": sshd refuses locked accounts even for
    key logins when it runs without PAM). sshd
    only accepts this benchmark's key on loopback ports, and the account is deleted afterwards.
    """
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        raise SystemExit("--shell lean needs root and useradd (to create a throwaway account)")
    name = f"ngbbench{os.getpid()}"
    home.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["useradd", "--non-unique", "--uid", "0", "--gid", "0", "--no-create-home",
         "--password", "*", "--home-dir", str(home), "--shell", "/bin/sh", name],
        check=True,
        capture_output=True,  # useradd warns that uid 0 is outside UID_MIN..UID_MAX: expected
    )  # fmt: skip
    if created is not None:
        created(name)  # the watchdog deletes it if this process cannot (killed)
    try:
        yield name
    finally:
        # --force: userdel sees root's processes as this uid-0 account's and would refuse.
        done = subprocess.run(["userdel", "--force", name], capture_output=True, text=True)
        if subprocess.run(["id", name], capture_output=True).returncode == 0:
            print(f"WARNING: could not remove account {name}: {done.stderr.strip()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=32)
    parser.add_argument("--trials", type=int, default=6, help="no-op trials per device")
    parser.add_argument("--sleep", type=float, default=10.0, help="seconds each trial sleeps")
    parser.add_argument("--reps", type=int, default=3, help="repetitions per trial")
    parser.add_argument("--handshakes", type=int, default=64, help="concurrent SSH handshakes")
    parser.add_argument(
        "--isolate", choices=("inprocess", "subprocess"), default="subprocess",
        help="how each agent runs its trials: subprocess (a run's default: each in a process "
        "forked from the agent) or inprocess (this benchmark's default before 2026-11-30, when "
        "each trial was a new interpreter and ~0.17 CPU-s dearer)",
    )  # fmt: skip
    parser.add_argument(
        "--plain", action="store_true",
        help="also time a plain hand-written loop on the same devices (the machine's ceiling)",
    )  # fmt: skip
    parser.add_argument(
        "--plain-imports", default="", metavar="MODULES",
        help="modules the plain loop imports first, comma-separated (e.g. numpy,psutil: what "
        "ngb's agent needs on a device), to see the ceiling for any Python agent that measures",
    )  # fmt: skip
    parser.add_argument(
        "--acct", action="store_true",
        help="print the CPU of every process that ended during the run, by kind (agents, their "
        "workers, sshd, ...), from Linux process accounting (root)",
    )  # fmt: skip
    parser.add_argument(
        "--shell", choices=("both", "root", "lean"), default="both",
        help="the devices' login shell: this user's (root: bash + .bashrc) and/or plain /bin/sh",
    )  # fmt: skip
    args = parser.parse_args()
    bad = [m for m in args.plain_imports.split(",") if m and not MODULE_NAME.match(m)]
    if bad:
        parser.error(f"--plain-imports: {bad[0]!r} is not a module name")
    figures: dict[str, float | None] = {}
    # Nothing left behind, however this ends (a SIGKILL included): ``_cleanup``'s watchdog
    # kills what names this folder once this process is gone, and orphaned agents are reaped.
    tmp = Path(tempfile.mkdtemp(prefix="ngb-loopback-"))
    watchdog = _cleanup.start(tmp)
    _cleanup.adopt_orphans(keep=lambda: set(_OWN_CHILDREN))
    try:
        for shell in ("root", "lean") if args.shell == "both" else (args.shell,):
            where = tmp / shell
            if shell == "lean":
                with lean_account(where / "home", watchdog.add_account) as user:
                    figures[shell] = asyncio.run(bench(args, where, user, watchdog))
            else:
                figures[shell] = asyncio.run(bench(args, where, None, watchdog))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if len(figures) > 1:
        print("--- summary: parallel efficiency by device login shell")
        for shell, eff in figures.items():
            label = "this user's shell (root: bash + ~/.bashrc)" if shell == "root" else "/bin/sh"
            print(f"  {label}: {'failed' if eff is None else f'{eff:.3f}'}")
    return 0 if all(eff is not None for eff in figures.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
