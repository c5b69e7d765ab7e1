"""Commands on one device of a run over a live transport: start its agent, read its files.

Each call is one remote command (every SSH exec pays for the device's login shell, so they are
few). A command cut short by a dropped link raises ``TransportError`` (the orchestrator
reconnects and asks again); a command the device refuses raises ``NgbError`` with its last line.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from ngb.core.base.errors import NgbError
from ngb.core.records import events as ev
from ngb.core.records.types import TrialSpec
from ngb.devices import protocol as remote
from ngb.devices.artifacts import describe as describe_shipment
from ngb.devices.artifacts import ship_run_artifacts
from ngb.devices.inventory import Device
from ngb.devices.protocol import EventLogReader, RunPaths
from ngb.devices.transport import CommandResult, Transport, TransportError
from ngb.sweeps.run import device_claim, device_queue, job_end
from ngb.sweeps.run.state import DeviceRun


async def checked(
    transport: Transport | None, argv: list[str], what: str, input: str | None = None
) -> str:
    """Run ``argv``; its stdout, or a one-line error saying what could not be done."""
    assert transport is not None
    return _output(transport, await transport.run(argv, timeout=120, input=input), what)


def _output(transport: Transport, res: CommandResult, what: str) -> str:
    if res.returncode < 0:  # no exit status: the link went away mid-command
        raise TransportError(f"{transport.name}: connection lost while trying to {what}")
    if res.returncode != 0:
        detail = (res.stderr or res.stdout).strip().splitlines()
        raise NgbError(
            f"{transport.name}: could not {what}: {detail[-1] if detail else res.returncode}"
        )
    return res.stdout


async def deploy_and_launch(
    dev: DeviceRun, isolate: str | None, say: Callable[[str], None], hosts: HostAgents
) -> int:
    """Deploy and first start in as few round trips as the safety checks allow; the agent's pid.

    Every SSH exec pays for the device's login shell, so the common case (agent already
    there) is one remote command: resolve the work dir, check the agent's sha256, write the
    trials (stdin) and start the agent detached. A missing or stale agent adds one SFTP upload
    to a temporary name and one more such command, which verifies the upload's hash before
    renaming it into place, or, where another device of the same machine got it in this run
    (``hosts``), one command that copies it from there. The user's model files go first (the
    agent verifies them before a trial uses them); ``say`` gets a line about them. Sets
    ``dev.paths`` and ``dev.agent_path``.
    """
    from ngb.devices.agent_remote import agent_bundle

    transport = dev.transport
    assert transport is not None
    local, digest = agent_bundle()

    async def launch(part: str = "") -> int | None:
        argv = remote.launch_argv(
            dev.device.python, dev.device.workdir, local.name, digest, dev.run_id,
            part=part, isolate=isolate, ready_by_start=transport.queue is None,
        )  # fmt: skip
        out = await start_gated(dev, argv, input=dev.trials_text, say=say)
        try:
            workdir, pid = remote.parse_launch(out)
        except NgbError as exc:
            raise NgbError(f"{dev.name}: {exc}") from None
        dev.paths = dev.paths or RunPaths(workdir, dev.run_id)
        dev.agent_path = f"{workdir.rstrip('/')}/{local.name}"
        return pid

    shipment = await ship_run_artifacts(transport, dev.device, dev.trials_text)
    if shipment.uploaded or shipment.reused or shipment.unavailable:
        say(describe_shipment(shipment))
    try:
        pid = await _launch_once_per_machine(dev, hosts, launch, local)
    except device_claim.DeviceBusy:
        raise
    except NgbError:  # refused (a bad python...): the claim must not outlive this attempt
        with contextlib.suppress(NgbError, TransportError, OSError):
            await release(dev, remove=False)
        raise
    return pid


COPY_WAIT_S = 120.0
#: seconds a follower keeps reading after the agent's goodbye, beyond ``tail``'s poll, for the
#: stream's end that tells the agent exited (``follow_events``): it exits ~0.1-0.5 s after it
EXIT_SEEN_S = 3.0
#: how often ``tail`` looks at a device's event log (``protocol.follow_argv``) while this process
#: follows up to ``DEVICES_PER_POLL_S`` / 2 devices; more devices, longer polls (``follow_poll_s``)
FOLLOW_POLL_S = 0.5
FOLLOW_POLL_MAX_S = 2.0
DEVICES_PER_POLL_S = 64
#: seconds between follows of a device whose last follow failed at once (``follow_error``)
FOLLOW_RETRY_S = 10.0


def exit_seen_wait_s(poll_s: float) -> float:
    """How long a follower waits after the goodbye for the stream's end (tail checks the pid
    once a poll)."""
    return EXIT_SEEN_S + poll_s


def follow_poll_s(following: int) -> float:
    """``tail``'s poll for one of ``following`` devices: 0.5 s up to 32, then as long as keeps
    the polls that find lines at ~64 a second, 2 s from 128 devices on. Each is an SSH packet,
    ~125 us of this process's CPU in asyncssh and asyncio (8 streams, a line every 50 ms each,
    800 in a row), and a device writes a line a second (its CPU sample) through every trial:
    at 128 devices, polls of 0.5 s cost ~0.3 CPU-s more of a 30 s run than polls of 2 s. The
    events of a big fleet reach the console up to 2 s later; none is lost or reordered."""
    return min(FOLLOW_POLL_MAX_S, max(FOLLOW_POLL_S, following / DEVICES_PER_POLL_S))


class HostAgents:
    """Where this workstation installed the agent on each machine, so that the other devices of
    that machine (a loopback fleet, a server listed once per GPU: one host, user and port, a work
    dir each) copy it there instead of each receiving the ~1 MB archive over SSH: 128 loopback
    devices made 128 SFTP sessions, on the same two cores as their agents' start."""

    def __init__(self) -> None:
        self._installed: dict[tuple[object, ...], asyncio.Future[str | None]] = {}

    @staticmethod
    def machine(device: Device) -> tuple[object, ...]:
        if device.is_local:
            return ("local",)
        return (device.transport, device.host, device.port, device.user, device.jump_host)

    def installer(self, device: Device) -> asyncio.Future[str | None] | None:
        """None: this device installs for its machine (then ``installed`` says how it went);
        else the future of another device's install: its agent's path, or None if it failed."""
        key = self.machine(device)
        if key in self._installed:
            return self._installed[key]
        self._installed[key] = asyncio.get_running_loop().create_future()
        return None

    def installed(self, device: Device, agent_path: str | None) -> None:
        future = self._installed.get(self.machine(device))
        if future is not None and not future.done():
            future.set_result(agent_path)
        if agent_path is None:  # the next device of that machine tries for itself
            self._installed.pop(self.machine(device), None)


async def _launch_once_per_machine(
    dev: DeviceRun,
    hosts: HostAgents,
    launch: Callable[[str], Awaitable[int | None]],
    local: Path,
) -> int:
    """The first start, the agent installed by one device of each machine (``hosts``): the
    first of them launches, which finds the agent in its work dir or not (then it uploads it);
    the others wait for that and launch once, copying the agent from its work dir where theirs
    has none (a copy that fails is no error: they upload it themselves). Before, every device
    asked first and most were told to wait: two launches each, an SSH session and a shell more
    per device (the need-agent answer itself is ~2 ms of the device's CPU, run locally)."""
    other = hosts.installer(dev.device)
    if other is not None:
        try:  # the other device's launch, upload and check: seconds; a stalled one is not waited
            source = await asyncio.wait_for(asyncio.shield(other), timeout=COPY_WAIT_S)
        except asyncio.TimeoutError:
            source = None
        if source is not None:
            pid = await launch(remote.copy_part(source))
            if pid is not None:
                return pid
        return await _launch_or_upload(dev, launch, local)
    pid = None
    try:
        pid = await _launch_or_upload(dev, launch, local)
        return pid
    finally:
        hosts.installed(dev.device, dev.agent_path if pid is not None else None)


async def _launch_or_upload(
    dev: DeviceRun, launch: Callable[[str], Awaitable[int | None]], local: Path
) -> int:
    """Launch; where the agent is missing, upload it (to a temporary name the launch checks and
    renames) and launch again."""
    pid = await launch("")
    if pid is not None:
        return pid
    assert dev.transport is not None and dev.agent_path is not None
    part = f"{dev.agent_path}.{uuid.uuid4().hex[:12]}.part"
    await dev.transport.put(str(local), part)
    pid = await launch(part)
    if pid is None:
        raise NgbError(f"{dev.name}: the uploaded agent did not install")
    return pid


async def started_unrecorded(dev: DeviceRun) -> bool:
    """Whether an attached device's agent was started though the store never said so (the
    workstation died just after the start): its run dir has a pid file. Then the device is
    followed as started (a dead agent is restarted, or its job's end decided), not started a
    second time as new, which would skip what a scheduler's end left to decide."""
    from ngb.devices.agent_remote import deploy_agent

    assert dev.transport is not None
    workdir = await remote_workdir(dev.transport, dev.device.workdir)
    dev.paths = dev.paths or RunPaths(workdir, dev.run_id)
    pid = await read_pid(dev)
    if pid is None:
        return False
    dev.started, dev.pid = True, pid
    if dev.agent_path is None:  # the one that started is not known: this ngb's, installed
        dev.agent_path = await deploy_agent(dev.transport, dev.device)
    return True


async def start_agent(dev: DeviceRun, isolate: str | None) -> int:
    """Start the agent of an existing run dir again; its pid."""
    from ngb.devices.agent_remote import deploy_agent

    transport, paths = dev.transport, dev.paths
    assert transport is not None and paths is not None
    if not dev.agent_path:  # a follower that took over before the start was recorded: its own
        dev.agent_path = await deploy_agent(transport, dev.device)
    argv = remote.start_agent_argv(dev.device.python, dev.agent_path, paths, isolate=isolate)
    out = await start_gated(dev, argv)
    try:
        return int(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise NgbError(f"{dev.name}: could not start the agent: {out.strip()[:200]}") from None


async def send_cancel(dev: DeviceRun) -> str:
    """SIGTERM the agent (it stops after its trial in flight); what happened, in a few words."""
    assert dev.transport is not None and dev.paths is not None
    if await device_queue.cancel(dev):  # scancel: the queued job leaves, a running agent stops
        dev.cancel_sent = True
        return "cancel sent (scancel)"
    res = await dev.transport.run(remote.signal_argv(dev.paths, dev.pid, "TERM"), timeout=30)
    if res.returncode < 0:
        raise TransportError(f"{dev.name}: connection lost while sending the cancel")
    dev.cancel_sent = True
    return "cancel sent" if res.returncode == 0 else "cancel: the agent was not running"


async def release(dev: DeviceRun, *, remove: bool) -> None:
    """Give the device up (and with ``remove``, delete the run dir first) in one command."""
    run_dir = dev.paths.run_dir if remove and dev.paths else None
    argv = device_claim.release_argv(dev.device.workdir, dev.run_id, run_dir)
    await checked(dev.transport, argv, "remove run dir" if remove else "release the device")


async def start_gated(
    dev: DeviceRun,
    argv: list[str],
    input: str | None = None,
    say: Callable[[str], None] | None = None,
) -> str:
    """A start command that runs only if this run holds (or now takes) the device. A device a
    scheduler hands out is never refused: its job waits in the scheduler's queue behind the
    other run's, which ``say`` is told in one line."""
    assert dev.transport is not None
    queued = dev.transport.queue is not None
    argv = device_claim.gated(argv, dev.device.workdir, dev.run_id, share=queued)
    res = await dev.transport.run(argv, timeout=120, input=input)
    if res.returncode == device_claim.EXIT_BUSY:
        holder = device_claim.parse_answer(dev.name, res.stdout)
        if holder is not None:
            raise device_claim.DeviceBusy(dev.name, holder)
    out = _output(dev.transport, res, "start the agent")
    behind = device_claim.parse_behind(out) if queued else None
    if behind is not None and say is not None:
        say(device_claim.queued_line(dev.name, behind))
    return out


async def fetch_text(dev: DeviceRun, path: str) -> str | None:
    """A file of the run dir, or None if it does not exist."""
    assert dev.transport is not None
    res = await dev.transport.run(remote.read_file_argv(path), timeout=120)
    if res.returncode == 3:
        return None
    if res.returncode != 0:  # cut short (link lost) or unreadable: try again after reconnect
        raise TransportError(f"{dev.name}: could not read {path} (exit {res.returncode})")
    return res.stdout


async def read_pid(dev: DeviceRun) -> int | None:
    assert dev.paths is not None
    text = (await fetch_text(dev, dev.paths.pidfile) or "").strip()
    return int(text) if text.isdigit() else None


async def read_checkpoint(
    dev: DeviceRun, *, owner: bool = True, exit_wait: float | None = None
) -> dict[str, dict[str, object]]:
    """The finished trials, as this follower takes them: on a scheduler's device the owner also
    decides what a job the scheduler ended means (``job_end``), and every result is named by
    the node that ran it. ``exit_wait``: first give the agent up to that many seconds to exit
    (``_checkpoint_after_exit``), in the same remote command."""
    assert dev.paths is not None
    if exit_wait is None:
        text = await fetch_text(dev, dev.paths.checkpoint)
    else:
        text = await _checkpoint_after_exit(dev, exit_wait)
    text = await job_end.scheduler_end(dev, text or "", owner=owner)
    return await device_queue.stamped(dev, remote.parse_checkpoint(text))  # a Slurm job's node


async def read_trial_keys(dev: DeviceRun) -> set[str]:
    assert dev.paths is not None
    text = await fetch_text(dev, dev.paths.trials) or ""
    return {TrialSpec.from_dict(data).key for data in remote.parse_jsonl(text)}


async def stderr_tail(dev: DeviceRun) -> str:
    """The agent's last stderr lines, joined on one line (for "agent died" messages)."""
    assert dev.transport is not None and dev.paths is not None
    with contextlib.suppress(TransportError, OSError):
        res = await dev.transport.run(remote.stderr_tail_argv(dev.paths, 3), timeout=30)
        return " | ".join(x.strip() for x in res.stdout.splitlines() if x.strip())[-300:]
    return ""


def _run_dir(dev: DeviceRun) -> str:
    """What the device's agent checks take to tell this run's agent (``protocol.IS_AGENT``):
    the run dir, or the bare run id before the launch told where it is."""
    return dev.paths.run_dir if dev.paths is not None else dev.run_id


async def alive(dev: DeviceRun, timeout: float) -> bool:
    """Whether the device's agent process lives (never "dead" from a broken answer)."""
    assert dev.transport is not None
    res = await dev.transport.run(remote.alive_argv(dev.pid, _run_dir(dev)), timeout=timeout)
    answer = res.stdout.strip()
    if res.returncode != 0 or answer not in ("alive", "dead"):
        # Never conclude "dead" from a broken answer: that would start a second agent.
        raise TransportError(f"{dev.name}: no answer to the liveness check")
    return answer == "alive"


async def _checkpoint_after_exit(dev: DeviceRun, timeout: float, limit: float = 10.0) -> str | None:
    """After ``run_done``: give the agent up to ``limit`` seconds to exit (workers shut down),
    waiting on the device rather than asking it every 0.1 s, then read the checkpoint, in one
    command (one SSH session less per device at a run's end); None when there is none."""
    assert dev.transport is not None and dev.paths is not None
    argv = remote.wait_then_read_argv(dev.pid, _run_dir(dev), limit, dev.paths.checkpoint)
    res = await dev.transport.run(argv, timeout=max(120.0, timeout + limit))
    word, _, text = res.stdout.partition("\n")
    if res.returncode not in (0, 3) or word.strip() not in ("alive", "dead"):
        raise TransportError(f"{dev.name}: no answer while waiting for the agent to exit")
    return None if res.returncode == 3 else text


async def remote_workdir(transport: Transport, workdir: str) -> str:
    """The work dir with ``~`` resolved on the device."""
    if not workdir.startswith("~"):
        return workdir
    home = (await checked(transport, remote.home_argv(), "find the home directory")).strip()
    return remote.expand_home(workdir, home)


async def follow_events(
    dev: DeviceRun,
    on_event: Callable[[DeviceRun, dict[str, object]], None],
    *,
    watchdog: float,
    timeout: float,
    say: Callable[[str], None] | None = None,
    poll_s: float = FOLLOW_POLL_S,
) -> None:
    """Consume the event log from ``dev.offset`` until the agent exits (tail --pid ends), tail
    looking for lines every ``poll_s`` seconds (``follow_poll_s``).

    ``dev.offset`` follows every complete line consumed. A watchdog asks whether the agent lives
    after ``watchdog`` quiet seconds: ``tail --pid`` cannot see that an unreaped zombie is dead,
    and the agent may be silent for hours while a compiler tunes, so silence alone proves nothing.
    """
    transport, paths = dev.transport, dev.paths
    assert transport is not None and paths is not None
    if dev.pid is None:
        return  # nothing to follow: the caller's liveness check decides what comes next
    loop = asyncio.get_running_loop()
    last_line = loop.time()
    began = dev.offset
    reader = EventLogReader(dev.offset)
    stream = transport.stream(remote.follow_argv(paths, dev.offset, dev.pid, poll_s))

    async def take(line: str) -> bool:
        """One line of the log; True for the agent's goodbye."""
        nonlocal last_line
        last_line = loop.time()
        event = reader.feed(line)  # None too for the agent's later snapshots
        if event is not None:  # a scheduler's reason for a failure (or withheld), a node
            event = await device_queue.amend(dev, event)
        dev.offset = reader.offset
        if event is None or await device_queue.foreign_cancel(dev, event):
            return False
        on_event(dev, event)
        return event.get("type") == ev.RUN_DONE

    async def consume() -> None:
        async for line in stream:
            if await take(line):
                break
        else:
            return
        # After the goodbye the agent exits once its workers are down, and ``tail --pid`` ends
        # the stream by itself (exit status 0): seen here, the device's end needs no command of
        # its own to wait for the exit (``streamed_whole``). Not seen in time (a zombie tail
        # cannot tell from a live agent, a lost link), the end waits on the device as before.
        with contextlib.suppress(TimeoutError, TransportError, OSError):
            async with asyncio.timeout(exit_seen_wait_s(poll_s)):
                async for line in stream:
                    await take(line)
                dev.exit_seen = transport.last_exit_status == 0

    consumer = asyncio.create_task(consume())
    poller = asyncio.create_task(device_queue.poll(dev, say))  # a scheduler's queue state
    try:
        while True:
            done, _ = await asyncio.wait({consumer}, timeout=watchdog)
            if done:
                consumer.result()  # re-raise a transport error
                break
            if loop.time() - last_line >= watchdog and not await alive(dev, timeout):
                break
    finally:
        poller.cancel()
        if not consumer.done():
            consumer.cancel()
            await asyncio.gather(consumer, return_exceptions=True)
        reader.end_of_stream()
        with contextlib.suppress(Exception):
            await stream.aclose()  # type: ignore[attr-defined]
    _note_follow_error(dev, began, say)


def _note_follow_error(dev: DeviceRun, began: int, say: Callable[[str], None] | None) -> None:
    """A follow that ended by itself, failed and brought no line: the device's ``tail`` cannot
    follow (no GNU tail, one without ``--pid``). The agent runs on and its results come from
    its checkpoint at the end; the operator is told why the live view is empty, once, and the
    follower asks again every ``FOLLOW_RETRY_S`` instead of every second."""
    transport = dev.transport
    if transport is None or transport.last_exit_status in (None, 0) or dev.offset != began:
        dev.follow_error = None
        return
    lines = (x.strip() for x in transport.last_stderr.splitlines())  # tail says why first
    why = next((x for x in lines if x), f"exit status {transport.last_exit_status}")[:300]
    if why != dev.follow_error and say is not None:
        say(f"live events unavailable ({why}); the results come from the device's checkpoint")
    dev.follow_error = why


def streamed_whole(dev: DeviceRun) -> bool:
    """Whether this follower has every result of the device's run and saw its agent exit after
    the goodbye: then the checkpoint holds nothing it lacks, and the device is free. Not on a
    scheduler's slot, whose end (``job_end``) and nodes (``device_queue.stamped``) are read
    from the device."""
    return (
        dev.exit_seen and job_end.queue_of(dev) is None and bool(dev.keys)
        and dev.keys <= dev.results.keys()
    )  # fmt: skip


def is_link_error(exc: BaseException) -> bool:
    """Errors that mean "the link is gone" (retry), as opposed to bugs (fail loudly)."""
    if isinstance(exc, TransportError | OSError | EOFError | asyncio.IncompleteReadError):
        return True
    return type(exc).__module__.split(".")[0] == "asyncssh"
