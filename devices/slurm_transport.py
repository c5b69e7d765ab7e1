"""SlurmTransport: one slot of a Slurm partition, reached through the scheduler's login host.

Every command runs on the login host (this workstation through ``LocalTransport``, or an SSH
device of the inventory) exactly as it would on an SSH device: the run dir, the claim, the
event log and the checkpoint live in the slot's work dir, which must be on a file system the
login host and the nodes share (as on real clusters; on the one-machine test cluster the node is
this machine). Two commands are changed on their way:

- the agent's detached start (``protocol``'s start script) runs the agent as the one task of a
  ``srun`` that asks for its own one-node allocation (``ngb.devices.slurm``'s options). ``srun``
  stays on the login host, detached like the agent would be, and forwards the agent's stdout into
  ``events.jsonl`` there, so the event log is followed as from any device. Its pid is what the
  protocol's pid file holds (the agent's own pid, on the node, goes to ``agent.node-pid``):
  ``kill -0``, ``tail --pid`` and the device claim then ask about the job's life on the login
  host, where they can. While the job waits in the queue ``srun`` lives and no event comes;
- a probe or tune (``python agent.pyz probe``) runs on a node of the partition through ``srun``,
  so Tables I/II describe the node, not the login host.

``queue`` (a ``JobQueue``) is what the orchestrator's device side asks the scheduler: the job's
state and reason, why it ended (``squeue``; for a job it no longer lists, the end slurmstepd wrote
into the agent's stderr), and ngb's own cancel (``scancel``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import shlex
from collections.abc import AsyncIterator, Callable, Sequence

from ngb.core.base.errors import NgbError
from ngb.devices import protocol, slurm, slurm_nodes
from ngb.devices.inventory import LOCALHOST, Device, Inventory, load_inventory
from ngb.devices.local import LocalTransport
from ngb.devices.slurm import JobState, SlurmSettings
from ngb.devices.transport import CommandResult, JobQueue, Transport, TransportError

# The protocol's detached start (devices/protocol.py: AGENT_START, through the host's agent
# server or directly); the Slurm start replaces it: the agent runs on the node the job gets.
_AGENT_START = protocol.AGENT_START
# srun's pid is the job's handle on the login host: written to the pid file the protocol reads
# (the start script's "agent already alive" check, kill, the claim), then printed as the pid.
# On the node, slurm_nodes.NODE_SCRIPT records the job's node, then becomes the agent (exec).
_SRUN_START = (
    'nohup setsid srun {options} sh -c {node_script} ngb-node {slot} {claims} "$py" "$agent" "$@" '
    ">> events.jsonl 2>> agent.err < /dev/null &\nngb_pid=$!\necho $! > agent.pid\necho $!\n"
)
NODE_PIDFILE = "agent.node-pid"
_ON_NODE = ("probe", "tune")  # agent commands that must describe or change the node


class SlurmTransport(Transport):
    def __init__(self, device: Device, login: Transport) -> None:
        if device.slurm is None:
            raise NgbError(f"{device.name}: not a Slurm device")
        self.device = device
        self.name = device.name
        self.login = login
        self.settings = SlurmSettings.from_table(device.slurm, f"device {device.name!r}: ")
        self.queue: JobQueue | None = SlurmQueue(self)

    async def connect(self) -> None:
        await self.login.connect()

    async def close(self) -> None:
        await self.login.close()

    async def run(
        self, argv: Sequence[str], *, timeout: float | None = None, input: str | None = None
    ) -> CommandResult:
        return await self.login.run(self.rewrite(argv), timeout=timeout, input=input)

    def stream(self, argv: Sequence[str]) -> AsyncIterator[str]:
        return self.login.stream(list(argv))

    async def put(self, local_path: str, remote_path: str) -> None:
        await self.login.put(local_path, remote_path)

    async def get(self, remote_path: str, local_path: str) -> None:
        await self.login.get(remote_path, local_path)

    def rewrite(self, argv: Sequence[str]) -> list[str]:
        """The command as the login host must run it (see the module docstring)."""
        argv = list(argv)
        if argv[:2] == ["sh", "-c"] and len(argv) > 2 and _AGENT_START in argv[2]:
            return self._start_in_job(argv)
        if len(argv) >= 3 and argv[0] == self.device.python and argv[2] in _ON_NODE:
            name = slurm.job_name(argv[2], self.device.name)
            return ["srun", *self.settings.allocation_options(name), *argv]
        return argv

    def _start_in_job(self, argv: list[str]) -> list[str]:
        try:
            run_id = argv[argv.index("--run-id") + 1]
            pidfile = argv.index("--pidfile") + 1
        except (ValueError, IndexError):
            raise NgbError(f"{self.name}: an agent start without --run-id/--pidfile") from None
        options = self.settings.allocation_options(slurm.job_name(run_id, self.device.name))
        claims = slurm_nodes.claims_dir(self.device.name, self.device.workdir, run_id)
        start = _SRUN_START.format(
            options=shlex.join(options), node_script=shlex.quote(slurm_nodes.NODE_SCRIPT),
            slot=shlex.quote(self.device.name), claims=shlex.quote(claims),
        )  # fmt: skip
        argv[2] = argv[2].replace(_AGENT_START, start)
        head, _, tail = argv[pidfile].rpartition("/")
        if tail != "agent.pid":
            raise NgbError(f"{self.name}: unexpected agent pid file {argv[pidfile]!r}")
        argv[pidfile] = f"{head}/{NODE_PIDFILE}"
        return argv


class SlurmQueue(JobQueue):
    """The scheduler's view of a slot's jobs, found again by name (``ngb-<run>-<slot>``)."""

    def __init__(self, transport: SlurmTransport) -> None:
        self.transport = transport

    async def job(self, run_id: str) -> JobState | None:
        name = slurm.job_name(run_id, self.transport.device.name)
        res = await self.transport.login.run(slurm.squeue_argv(name), timeout=30)
        if res.returncode < 0:
            raise TransportError(f"{self.transport.name}: connection lost while asking squeue")
        if res.returncode != 0:
            detail = (res.stderr or res.stdout).strip().splitlines()
            raise NgbError(
                f"{self.transport.name}: squeue failed: {detail[-1] if detail else res.returncode}"
            )
        return slurm.parse_squeue(res.stdout)

    async def state(self, run_id: str) -> str:
        job = await self.job(run_id)
        if job is None:
            return ""
        # the scheduler's word on sharing (squeue's OverSubscribe) over the inventory's setting
        shared = job.shared if job.shared is not None else not self.transport.settings.exclusive
        if job.state == "RUNNING" and shared:
            return f"{job.text()}; shared node: others may disturb the timings"
        return job.text()

    async def ended(
        self, run_id: str, settle: float = 10.0, stderr: str = ""
    ) -> tuple[int, str] | None:
        # A cancelled job shows COMPLETING (or still RUNNING) while its processes are killed:
        # wait up to ``settle`` seconds for its final state before saying "not the scheduler".
        loop = asyncio.get_running_loop()
        end = loop.time() + settle
        job = await self.job(run_id)
        while job is not None and job.active and loop.time() < end:
            await asyncio.sleep(0.5)
            job = await self.job(run_id)
        if job is None and stderr:  # squeue forgot it (MinJobAge): slurmstepd's own line
            settings = self.transport.settings
            job = slurm.ended_in_stderr(stderr, settings.partition)
            if job is not None and settings.time_limit:
                job = dataclasses.replace(job, time_limit=settings.time_limit)
        if job is None or not job.scheduler_ended:
            return None
        return job.job_id, job.ended_text()

    async def cancel(self, run_id: str, run_dir: str) -> bool:
        job = await self.job(run_id)
        if job is None or not job.active:
            return False
        res = await self.transport.login.run(slurm.cancel_argv(job), timeout=60)
        return res.returncode == 0


def make_slurm_transport(
    device: Device,
    inventory: Inventory | None,
    make: Callable[..., Transport],
    **settings: object,
) -> SlurmTransport:
    """The slot's transport over its login host: this machine, or an SSH device (``make`` is
    ``ngb.devices.ssh.make_transport``, passed in so neither module imports the other)."""
    if device.host == LOCALHOST:
        return SlurmTransport(device, LocalTransport(device))
    inventory = inventory or load_inventory()
    return SlurmTransport(device, make(inventory.get(device.host), inventory=inventory, **settings))
