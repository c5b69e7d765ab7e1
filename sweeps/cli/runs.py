"""``ngb run``, ``ngb attach``, ``ngb status``, ``ngb cancel``: sweeps on devices from a terminal.

``run`` and ``attach`` show one rich progress bar per device (trials done / total, state, trial in
flight) fed by the orchestrator's event stream. Ctrl-C *detaches*: the agents run detached on the
devices, so the run goes on and ``ngb attach RUN`` picks it up later (from another terminal, or
after a reboot of the workstation). ``cancel`` is the way to stop a run.

Heavy modules (asyncssh, duckdb, rich) are imported inside the commands so ``ngb --help`` stays
light.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any, TypedDict, TypeVar, cast

import click
from ngb.core.base.clock_text import clock
from ngb.core.base.errors import NgbError
from ngb.core.serving.serve_trial import serving_line
from ngb.sweeps.rows import integer, mapping
from ngb.sweeps.run.refusal import start_or_refuse, until_started

if TYPE_CHECKING:  # imported where used: `ngb --help` must not load rich, duckdb or asyncssh
    from ngb.devices.inventory import Inventory
    from ngb.sweeps.cli.detach import ReportPipe
    from ngb.sweeps.run.events import RunEvent
    from ngb.sweeps.run.orchestrator import Orchestrator, Subscription
    from ngb.sweeps.spec.sweep import Sweep
    from ngb.sweeps.store.database import Store
    from rich.console import Console
    from rich.progress import TaskID

_Command = TypeVar("_Command", bound=Callable[..., object])


class StartArgs(TypedDict):
    """``Orchestrator.start``'s arguments for ``ngb run``."""

    sweep: Sweep
    device_names: str | Iterable[str]
    keep: bool
    isolate: str | None


FINAL_RUN_STATES = ("finished", "failed", "cancelled", "detached")


def _store(db: str | None) -> Store:
    from ngb.sweeps.store.database import Store

    return Store(db)


def _inventory(path: str | None) -> Inventory:
    from ngb.devices.inventory import load_inventory

    return load_inventory(path)


def _db_option(fn: _Command) -> _Command:
    return click.option(
        "--db", type=click.Path(dir_okay=False), default=None,
        help="Results file (default: the data dir's results.duckdb, or $NGB_DB).",
    )(fn)  # fmt: skip


def _inventory_option(fn: _Command) -> _Command:
    return click.option(
        "--inventory", "inventory_path", type=click.Path(dir_okay=False), default=None,
        help="Device inventory (default: the config dir's devices.toml).",
    )(fn)  # fmt: skip


# ---------------------------------------------------------------- live display


class _Progress:
    """One bar per device, updated from RunEvents (rich, on stderr-free stdout)."""

    def __init__(self, console: Console) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.progress = Progress(
            TextColumn("[bold]{task.fields[device]:<14}"),
            TextColumn("{task.fields[state]:<12}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[current]}", style="dim"),
            console=console,
            transient=False,
        )
        self.tasks: dict[str, TaskID] = {}
        self.current: dict[str, str] = {}  # device -> label of the trial in flight
        self.reused: dict[str, str] = {}  # device -> the trial whose reused search was said
        self.console = console

    def _task(self, device: str) -> TaskID:
        if device not in self.tasks:
            self.tasks[device] = self.progress.add_task(
                device, total=None, device=device, state="pending", current=""
            )
        return self.tasks[device]

    def seed(self, states: Mapping[str, Mapping[str, object]]) -> None:
        for name, st in states.items():
            task = self._task(name)
            self.progress.update(
                task,
                total=integer(st["total"]) or None,
                completed=integer(st["done"]),
                state=st["state"],
            )

    def handle(self, item: RunEvent) -> None:
        if item.kind == "store":  # waiting for the results database: normal, one quiet line
            self.console.print(f"[dim]{item.message}[/]")
            return
        if not item.device:
            return
        task = self._task(item.device)
        fields: dict[str, Any] = {}  # Any: rich's Progress.update takes its fields as **Any
        if item.total:
            fields["total"] = item.total
        if item.done is not None:
            fields["completed"] = item.done
        if item.kind == "connection":
            fields["state"] = item.state
            if item.state in ("failed", "lost", "reconnecting") and item.message:
                fields["current"] = item.message[:70]
                if item.state != "reconnecting":
                    self.console.print(f"[red]{item.device}[/]: {item.message}")
            elif item.state in ("finished", "cancelled"):
                fields["current"] = item.message
            elif item.message.startswith("slurm: "):  # the job's queue state (device_queue)
                fields["current"] = item.message[:70]
        elif item.kind == "agent":
            event = item.event or {}
            etype = event.get("type")
            if etype == "trial_started":
                self.current[item.device] = str(event.get("label", ""))
                fields["current"] = self.current[item.device][:70]
            elif etype == "trial_failed":
                label = self.current.get(item.device) or event.get("key", "")
                self.console.print(
                    f"[yellow]{item.device}[/]: trial {label} failed: {event.get('error')}"
                )
            elif etype == "log" and event.get("msg") in ("paused", "resumed"):
                fields["state"] = event["msg"]
            elif etype == "log" and str(event.get("msg", "")).startswith("tuning "):
                # the search's quarters and its end, as the console's log has them
                self.console.print(f"[dim]{item.device}: {event['msg']}[/]")
            elif etype == "tuning":
                fields["current"] = self._tuning(item.device, event)[:70]
            elif etype == "serving":
                fields["current"] = self._serving(item.device, event)
            elif etype == "state":
                fields.update(self._snapshot(item.device, event))
        self.progress.update(task, **fields)

    def _snapshot(self, device: str, event: Mapping[str, object]) -> dict[str, Any]:
        """The agent's snapshot (``ngb.core.trial.live_state``), sent every second: a follower that
        attached mid-trial gets the trial in flight and its search at once, as the console
        does (an `ngb attach` during a search showed no trial until the search's next batch,
        minutes later). Later snapshots change nothing a trial event already said."""
        trial = event.get("trial")
        if not isinstance(trial, Mapping) or self.current.get(device):
            return {}
        self.current[device] = str(trial.get("label") or "")
        tuning = event.get("tuning")
        if isinstance(tuning, Mapping) and tuning.get("budget"):
            return {"current": self._tuning(device, tuning)[:70]}
        serving = event.get("serving")
        if isinstance(serving, Mapping):
            return {"current": self._serving(device, serving)}
        return {"current": self.current[device][:70]}

    def _serving(self, device: str, event: Mapping[str, object]) -> str:
        """The trial line while a serving trial runs: its progress as the console's panel words
        it (``serving_line``: the probe, offered and achieved QPS, the p99 so far), after the
        trial's label where both fit."""
        line = serving_line(event)
        label = self.current.get(device, "")
        return f"{label}: {line}" if label and len(label) + 2 + len(line) <= 90 else line[:90]

    def _tuning(self, device: str, event: Mapping[str, object]) -> str:
        """The trial line while TVM tunes: trials of the budget, the search's recent rate and
        what is left of it as the agent computed it (the console's panel counts down from the
        same figure); a reused search said once, as the console says it."""
        label = self.current.get(device, "")
        if event.get("reused"):
            if self.reused.get(device) != label:
                self.reused[device] = label
                self.console.print(f"{device}: TVM {event.get('provenance') or 'tuning reused'}")
            return label
        done, budget = integer(event.get("trials_done")), integer(event.get("budget"))
        text = f"{label} tuning {done}/{budget}"
        rate, left = event.get("s_per_trial"), event.get("search_left_s")
        if isinstance(rate, int | float) and rate > 0:
            text += f" {60 / rate:.1f}/min"
        if isinstance(left, int | float) and left >= 0:
            text += f" search ETA {clock(left)}"
        return text


async def _follow(orch: Orchestrator, run_id: str, sub: Subscription, console: Console) -> str:
    """Show progress until the run ends or Ctrl-C (which detaches); returns the run state."""
    loop = asyncio.get_running_loop()
    interrupted = asyncio.Event()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, interrupted.set)
    display = _Progress(console)
    display.seed(orch.device_states(run_id))
    final = ""
    with display.progress:
        waiter = asyncio.create_task(interrupted.wait())
        while not final:
            getter = asyncio.create_task(sub.__anext__())
            done, _ = await asyncio.wait({getter, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if getter not in done:
                getter.cancel()
                await asyncio.gather(getter, return_exceptions=True)
                break
            try:
                item = getter.result()
            except StopAsyncIteration:
                break
            display.handle(item)
            if item.kind == "run" and item.run_id == run_id and item.state in FINAL_RUN_STATES:
                final = item.state
        waiter.cancel()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.remove_signal_handler(signal.SIGINT)
    if not final:
        await orch.detach(run_id)
        console.print(
            f"[bold]Detached.[/] The run goes on on its devices; "
            f"`ngb attach {run_id}` follows it again, `ngb cancel {run_id}` stops it."
        )
        return "detached"
    return final


def _report(console: Console, summary: Mapping[str, object], *, show_error: bool = True) -> None:
    """The run's summary (``Orchestrator.wait`` / ``cancel``) as a table."""
    from rich.table import Table

    table = Table(title=f"run {summary['run_id']}: {summary['status']}")
    for col in ("device", "state", "done", "failed", "restarts", "error"):
        table.add_column(col)
    for name, facts in mapping(summary["devices"]).items():
        d = mapping(facts)
        table.add_row(
            name, str(d["state"]), f"{d['done']}/{d['total']}", str(d["failed"]),
            str(d["restarts"]), str(d["error"] or ""),
        )  # fmt: skip
    console.print(table)
    if show_error and summary.get("error"):  # the run as a whole stopped
        console.print(f"[red]{summary['error']}[/]")


async def _drive(
    store: Store,
    inventory: Inventory,
    console: Console,
    *,
    start: StartArgs | None = None,
    attach: str | None = None,
    detach_after_start: bool = False,
    report: ReportPipe | None = None,
) -> tuple[str, Mapping[str, object] | None]:
    from ngb.sweeps.run.orchestrator import Orchestrator

    orch = Orchestrator(store, inventory)
    try:
        sub = orch.subscribe()
        if report is not None:  # the starter of a detached run: its id to the waiting command
            from ngb.sweeps.cli.detach import tell_run_id

            asyncio.get_running_loop().create_task(tell_run_id(orch, report))
        if start is not None:
            # Nothing says "started" until a device took the run; a run none took is refused
            # (RunRefused: one line, non-zero exit, no run left in the store).
            with console.status("waiting for the devices to take the run..."):
                run_id, failures = await start_or_refuse(orch, store, sub, **start)
            console.print(f"run [bold]{run_id}[/] started")
            for line in failures:  # the devices that did not take it, or queued it
                _print_refusal(console, line)
        else:
            assert attach is not None
            run_id = await orch.attach(attach)
            console.print(f"attached to run [bold]{run_id}[/]")
        if detach_after_start:
            # Detach once every agent runs (or its device gave up): nothing left to hand over.
            _, failures = await until_started(orch, run_id, sub)
            if attach is not None:
                for line in failures:
                    _print_refusal(console, line)
            await orch.detach(run_id)
            console.print(f"detached; follow with `ngb attach {run_id}`, see `ngb status {run_id}`")
            return "detached", None
        state = await _follow(orch, run_id, sub, console)
        if state == "detached":
            return state, None
        return state, await orch.wait(run_id)
    finally:
        await orch.close()


def _console(file: IO[str] | None = None) -> Console:
    from rich.console import Console

    return Console() if file is None else Console(file=file, width=100)


def _print_refusal(console: Console, line: str) -> None:
    """A device's line beside "started": a refusal in red, a job queued behind another run's
    (``queued: ...``) as it is."""
    from ngb.sweeps.run.device_claim import QUEUED

    console.print(line if line.startswith(QUEUED) else f"[red]{line}[/]", highlight=False)


# ---------------------------------------------------------------- commands


@click.command("run")
@click.argument("sweep")
@click.option("--devices", "-d", required=True, help="Device names and/or groups: A,B or GROUP.")
@click.option("--keep", is_flag=True, help="Keep the run directory on the devices after ingest.")
@click.option("--detach", is_flag=True, help="Return once the agents run; follow with `attach`.")
@click.option(
    "--resume", is_flag=True,
    help="Go on with the newest unfinished run of SWEEP on these devices (`attach` it): devices "
    "that failed start again (a Slurm slot asks for a new allocation); nothing is run twice.",
)  # fmt: skip
@click.option(
    "--isolate", type=click.Choice(["subprocess", "inprocess"]), default=None,
    help="How the agent runs each trial (default: subprocess, so a crash fails one trial only).",
)  # fmt: skip
@click.option(
    "--profile", is_flag=True,
    help="After each trial's timing, one more process profiles it per operator (`ngb report ops`); "
    "the timed numbers are not touched. Same as `profile = true` in the sweep's [measure]. A "
    "resumed run keeps the setting it was started with (--resume --profile of one started "
    "without it is refused).",
)  # fmt: skip
@click.option(
    "--retry-killed", type=click.IntRange(0, 100), default=None, metavar="N",
    help="A trial a batch scheduler killed (time limit, preemption, someone's scancel) runs "
    "again in a new allocation, up to N times (the count is stored with its result). Same as "
    "`retry_killed = N` in the sweep's [measure]. A resumed run keeps the setting it was started "
    "with.",
)  # fmt: skip
@_db_option
@_inventory_option
def run(
    sweep: str,
    devices: str,
    keep: bool,
    detach: bool,
    resume: bool,
    isolate: str | None,
    profile: bool,
    retry_killed: int | None,
    db: str | None,
    inventory_path: str | None,
) -> None:
    """Run SWEEP (a preset name or a sweep file) on devices, one trial at a time on each.

    Ctrl-C detaches: the run goes on on the devices; `ngb attach RUN` picks it up.
    """
    from ngb.sweeps.spec.sweep import load_sweep

    if not [name for name in devices.split(",") if name.strip()]:
        # An empty list must not mean "every device" (it did: `-d ''` ran the sweep everywhere).
        raise NgbError("--devices names no device: give names or groups, e.g. -d localhost")
    spec = load_sweep(sweep)
    from ngb.sweeps.cli import safe_text
    from ngb.sweeps.spec.model_ranges import sweep_warnings

    for line in sweep_warnings(spec.model_sources):  # a guessed input range is said
        click.echo(safe_text(f"warning: {line}"), err=True)
    if profile:  # the sweep's [measure]; a matrix's own `profile = false` still wins
        from ngb.sweeps.run.resume_profile import with_profile

        spec = with_profile(spec)
    if retry_killed is not None:  # the sweep's [measure]; a matrix's own setting still wins
        import dataclasses

        spec = dataclasses.replace(spec, measure={**spec.measure, "retry_killed": retry_killed})
    if spec.models():
        from ngb.sweeps.spec.checks import check_timm_names

        check_timm_names(spec.models())  # an unknown name fails here, not on every device
    inventory = _inventory(inventory_path)
    inventory.resolve(devices)  # unknown names: one-line error before anything starts
    from ngb.sweeps.cli import detach as background

    if detach and not resume and not background.in_starter() and sys.argv[1:2] == ["run"]:
        # the start goes on in a child of its own; this waits a few seconds at most (detach.py)
        from ngb.devices.paths import get_paths

        raise SystemExit(
            background.start_in_background(sys.argv[1:], get_paths().data / "detached")
        )
    report = background.report_pipe()  # in that child: what it prints also goes to the waiter
    console = _console() if report is None else _console(cast("IO[str]", report))
    start: StartArgs = {"sweep": spec, "device_names": devices, "keep": keep, "isolate": isolate}
    store = _store(db)
    if resume:
        names = {d.name for d in inventory.resolve(devices)}
        run_id = _to_resume(store, spec.name, names)
        _profile_line(console, store, run_id, asked=profile)  # refuses what cannot carry over
        if retry_killed is not None:
            _check_retry_killed(store, run_id, spec)
        state, summary = asyncio.run(_drive(store, inventory, console, attach=run_id))
        _finish(console, state, summary, store)
        return
    state, summary = asyncio.run(
        _drive(store, inventory, console, start=start, detach_after_start=detach, report=report)
    )
    _finish(console, state, summary, store)


def _to_resume(store: Store, sweep_name: str, devices: set[str]) -> str:
    """The newest run of the sweep on exactly these devices that did not finish."""
    for info in store.runs() if store.path.exists() else []:
        run_id = str(info["run_id"])
        if info["sweep_name"] != sweep_name or info["status"] == "finished":
            continue
        if {str(r["device"]) for r in store.run_devices(run_id)} == devices:
            return run_id
    raise NgbError(f"no unfinished run of sweep {sweep_name!r} on {', '.join(sorted(devices))}")


def _check_retry_killed(store: Store, run_id: str, asked: Sweep) -> None:
    """``--resume --retry-killed N``: the run's trials went to its devices with their setting,
    and a resume runs them as started, so N must be what the run was started with."""
    from ngb.sweeps.spec.sweep import loads_sweep

    stored = loads_sweep(str(store.run(run_id).get("sweep_toml") or ""), source=f"run {run_id}")
    was = {t.key: t.measure.retry_killed for t in stored.trials()}
    now = {t.key: t.measure.retry_killed for t in asked.trials()}
    if any(was.get(key, n) != n for key, n in now.items()):
        raise NgbError(
            f"run {run_id} was started with retry_killed = {max(was.values(), default=0)}, and "
            "a resume runs its trials as started (their list is on the devices): resume without "
            "--retry-killed, or start a new run with it"
        )


def _profile_line(console: Console, store: Store, run_id: str, asked: bool = False) -> None:
    """Whether the run's profile passes carry over (``resume_profile``); ``asked`` (``--resume
    --profile``) of a run started without them is refused here, before anything is followed."""
    from ngb.sweeps.cli import safe_text
    from ngb.sweeps.run.resume_profile import resume_line

    try:
        line = resume_line(store, run_id, asked) if store.path.exists() else None
    except NgbError:
        if asked:
            raise
        line = None  # `attach` of an unknown run: the orchestrator says so in its own words
    if line:
        console.print(safe_text(line), highlight=False, markup=False)


@click.command("attach")
@click.argument("run_id")
@_db_option
@_inventory_option
def attach(run_id: str, db: str | None, inventory_path: str | None) -> None:
    """Follow RUN_ID again (after Ctrl-C, --detach, a lost link or a workstation restart)."""
    console = _console()
    store = _store(db)
    _profile_line(console, store, run_id)
    state, summary = asyncio.run(_drive(store, _inventory(inventory_path), console, attach=run_id))
    _finish(console, state, summary, store)


def _finish(
    console: Console, state: str, summary: Mapping[str, object] | None, store: Store
) -> None:
    if summary is not None:
        _report(console, summary, show_error=False)
        _verdicts(console, store, str(summary["run_id"]))
    if state in ("failed", "cancelled"):
        error = (summary or {}).get("error")
        if error:  # the run as a whole stopped (e.g. the database cannot be written): one line
            raise NgbError(str(error))
        raise SystemExit(1)


def _verdicts(console: Console, store: Store, run_id: str) -> None:
    """How many trials met their confidence target, and what to change when most did not."""
    from ngb.sweeps.report.verdicts import summary_line

    try:
        line = summary_line(store.trials(run_id))
    except NgbError as exc:  # the store cannot be read now: say so, the run itself is done
        line = f"verdicts not read: {exc}"
    if line:
        console.print(line, highlight=False)


@click.command("status")
@click.argument("run_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option(
    "--live", is_flag=True, help="Also ask each unfinished device whether its agent runs."
)
@_db_option
@_inventory_option
def status(
    run_id: str | None, as_json: bool, live: bool, db: str | None, inventory_path: str | None
) -> None:
    """Show runs (newest first), or the devices of RUN_ID, as recorded in the results file."""
    import json

    store = _store(db)
    if db is not None:  # a file named on purpose must exist (as for `ngb query`); only the
        store.require_file()  # default one may be absent on a fresh install ("no runs yet")
    if run_id is None:
        _, rows = store.select(
            "SELECT run_id, sweep_name, run_status, count(*) AS devices, "
            "sum(n_trials) AS trials, sum(ok) AS ok, sum(failed) AS failed "
            "FROM run_progress GROUP BY ALL ORDER BY run_id DESC"
        )
        cols = ["run_id", "sweep", "status", "devices", "trials", "ok", "failed"]
        records = [dict(zip(cols, r, strict=True)) for r in rows]
        if as_json:
            click.echo(json.dumps(records, default=str, indent=1))
            return
        if not records:
            click.echo("no runs yet; start one with `ngb run demo --devices localhost`")
            return
        _table(cols, [[r[c] for c in cols] for r in records])
        return
    info = store.run(run_id)  # unknown run: one-line error with close matches
    _, rows = store.select(
        "SELECT device, state, n_trials, ok, failed FROM run_progress WHERE run_id = ? "
        "ORDER BY device",
        [run_id],
    )
    messages = {r["device"]: r for r in store.run_devices(run_id)}
    agents: dict[str, str] = {}
    if live:
        from ngb.sweeps.run.orchestrator import Orchestrator

        async def ask() -> dict[str, str]:
            orch = Orchestrator(store, _inventory(inventory_path))
            try:
                return await orch.check(run_id)
            finally:
                await orch.close()

        agents = asyncio.run(ask())
    records = []
    for device, state, n_trials, ok, failed in rows:
        rd = messages.get(device, {})
        records.append({
            "device": device, "state": state, "done": (ok or 0) + (failed or 0),
            "total": n_trials, "failed": failed or 0, "message": rd.get("message") or "",
            "updated": str(rd.get("updated_at") or "")[:19],
        })  # fmt: skip
        if live:
            records[-1]["agent"] = agents.get(device, "-")
    queue = _queue_states(inventory_path, run_id, [r for r in records if r["state"] != "finished"])
    if as_json:
        click.echo(json.dumps({"run_id": run_id, "status": info["status"],
                               "sweep": info["sweep_name"], "devices": records},
                              default=str, indent=1))  # fmt: skip
        return
    click.echo(f"run {run_id} ({info['sweep_name']}): {info['status']}")
    cols = ["device", "state", "done", "total", "failed", "message", "updated"]
    if live:
        cols.append("agent")
    cols += ["queue"] if queue else []
    _table(cols, [[r.get(c) for c in cols] for r in records])


def _queue_states(path: str | None, run_id: str, records: list[dict[str, object]]) -> bool:
    """Ask the scheduler about the run's Slurm devices (``queue`` in their records); whether any
    is one. The inventory may have changed since the run: a device it no longer has is skipped."""
    from ngb.sweeps.run.device_queue import job_states

    try:
        inventory = _inventory(path)
    except NgbError:
        return False
    names = [str(r["device"]) for r in records]
    states = asyncio.run(job_states(inventory, run_id, names)) if names else {}
    for r in records:
        if str(r["device"]) in states:
            r["queue"] = states[str(r["device"])]
    return bool(states)


def _table(cols: list[str], rows: Sequence[Sequence[object]]) -> None:
    """Rows under a rule, columns one space apart: at 80 columns (a pipe) words are never cut
    ("fini…" read as another word): each column is as wide as its longest word, long text (a
    device's message) wraps between words."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    cells = [["" if v is None else str(v) for v in row] for row in rows]
    table = Table(box=box.SIMPLE_HEAD, padding=0, show_edge=False)
    for i, col in enumerate(cols):
        words = [w for text in [col, *(row[i] for row in cells)] for w in text.split()]
        longest = min(max((len(w) for w in words), default=1), 40)
        numbers = [row[i] for row in cells if row[i]]
        right = bool(numbers) and all(v.isdigit() for v in numbers)
        table.add_column(  # ids stay copy-pasteable
            col, no_wrap=i == 0, min_width=longest, justify="right" if right else "left"
        )
    for row in cells:
        table.add_row(*row)
    Console().print(table)


@click.command("cancel")
@click.argument("run_id")
@_db_option
@_inventory_option
def cancel(run_id: str, db: str | None, inventory_path: str | None) -> None:
    """Stop RUN_ID on its devices (SIGTERM to each agent); finished trials are kept."""
    from ngb.sweeps.run.orchestrator import Orchestrator

    store, inventory = _store(db), _inventory(inventory_path)

    async def go() -> Mapping[str, object]:
        orch = Orchestrator(store, inventory)
        try:
            return await orch.cancel(run_id)
        finally:
            await orch.close()

    _report(_console(), asyncio.run(go()))
