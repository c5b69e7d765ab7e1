"""A Slurm partition as devices: the inventory's ``slurm`` table, its checks, and the commands.

An inventory entry with ``transport = "slurm"`` is a partition, not a machine::

    [devices.gpu]
    transport = "slurm"
    host = "login1"             # how to reach the scheduler: "localhost" (this workstation) or
                                # the name of an SSH device of the inventory (the login host)
    python = "/shared/me/venv/bin/python"   # the interpreter on the nodes
    workdir = "/shared/me/ngb"              # on a file system the login host and nodes share

    [devices.gpu.slurm]
    partition = "gpu"
    gres = "gpu:1"
    constraint = "a100"
    account = "proj42"
    qos = "normal"
    time_limit = "02:00:00"
    nodes = 2                   # nodes wanted: one job (and one device in the results) each
    cpus_per_task = 16
    mem = "64G"
    exclusive = true            # the default: timing needs the node to itself

Each wanted node is a *slot* device of its own (``gpu`` for one node, ``gpu.1``, ``gpu.2``...
for more), with its own work dir under the entry's, so one node = one device in the results and
the reports compare them. A slot's agent runs as the one task of a ``srun`` that asks for its
own one-node allocation (``ngb.devices.slurm_transport``). This module knows no ``Device``: it
checks the table and builds argv lists, so the inventory can use it without an import loop.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from ngb.core.base.errors import ConfigError

#: a value of the ``slurm`` table as TOML gives it
SlurmValue = str | int | bool
SlurmTable = dict[str, SlurmValue]

_TEXT_KEYS = ("partition", "gres", "constraint", "account", "qos", "time_limit", "mem")
_INT_KEYS = ("nodes", "cpus_per_task")
KEYS = (*_TEXT_KEYS, *_INT_KEYS, "exclusive")
# Slurm's own spellings of these values use no spaces or shell characters; refusing the rest keeps
# an inventory typo from becoming an srun option of its own (``--gres="gpu:1 --uid=0"``).
# \A...\Z, not ^...$: "$" also matches before a final newline ("gpu\n" passed, issue 41)
_VALUE_RE = re.compile(r"\A[A-Za-z0-9_.:,=+\-*/|&!()\[\]]+\Z")
MAX_NODES = 256

# Job states in which the scheduler (not the agent) ended the job: its trial in flight is failed
# with the reason and the slot is not restarted until the operator resumes the run.
SCHEDULER_ENDS = frozenset({
    "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY",
    "REVOKED",
})  # fmt: skip
ACTIVE = frozenset({
    "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING",
    "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD", "REQUEUE_HOLD",
})  # fmt: skip


def check_table(table: object, where: str) -> None:
    """Raise ``ConfigError`` (one line) for the first bad key or value of a ``slurm`` table."""
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}slurm must be a table (partition = ..., nodes = ...)")
    for key in table:
        if key not in KEYS:
            import difflib

            close = difflib.get_close_matches(str(key), KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{where}unknown slurm key {key!r}{hint}")
    if not table.get("partition"):
        raise ConfigError(f"{where}slurm.partition is missing (the partition to run on)")
    for key in _TEXT_KEYS:
        value = table.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or not _VALUE_RE.match(value):
            raise ConfigError(f"{where}slurm.{key} {value!r}: one word of Slurm's syntax")
    for key in _INT_KEYS:
        value = table.get(key)
        if value is None:
            continue
        top = MAX_NODES if key == "nodes" else 4096
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
            raise ConfigError(f"{where}slurm.{key} must be an integer 1-{top}, got {value!r}")
    if "exclusive" in table and not isinstance(table["exclusive"], bool):
        raise ConfigError(f"{where}slurm.exclusive must be true or false")
    if table.get("time_limit") is not None and not re.fullmatch(
        r"(\d+-)?\d+(:\d+){0,2}|UNLIMITED|INFINITE", str(table["time_limit"])
    ):
        raise ConfigError(
            f"{where}slurm.time_limit {table['time_limit']!r}: minutes, [D-]HH:MM:SS or MM:SS"
        )


@dataclass(frozen=True)
class SlurmSettings:
    """A checked ``slurm`` table."""

    partition: str
    gres: str | None = None
    constraint: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit: str | None = None
    mem: str | None = None
    nodes: int = 1
    cpus_per_task: int | None = None
    exclusive: bool = True

    @classmethod
    def from_table(cls, table: Mapping[str, SlurmValue], where: str = "") -> SlurmSettings:
        check_table(table, where)

        def text(key: str) -> str | None:
            value = table.get(key)
            return None if value is None else str(value)

        cpus = table.get("cpus_per_task")
        return cls(
            partition=str(table["partition"]),
            gres=text("gres"), constraint=text("constraint"), account=text("account"),
            qos=text("qos"), time_limit=text("time_limit"), mem=text("mem"),
            nodes=int(table.get("nodes", 1)),
            cpus_per_task=int(cpus) if cpus is not None else None,
            exclusive=bool(table.get("exclusive", True)),
        )  # fmt: skip

    def allocation_options(self, job_name: str) -> list[str]:
        """``srun`` options asking for one node of the partition for one task (the agent)."""
        opts = [f"--job-name={job_name}", f"--partition={self.partition}", "--nodes=1",
                "--ntasks=1", "--unbuffered", "--kill-on-bad-exit=1"]  # fmt: skip
        for flag, value in (
            ("--gres", self.gres), ("--constraint", self.constraint), ("--account", self.account),
            ("--qos", self.qos), ("--time", self.time_limit), ("--mem", self.mem),
            ("--cpus-per-task", self.cpus_per_task),
        ):  # fmt: skip
            if value is not None:
                opts.append(f"{flag}={value}")
        if self.exclusive:
            opts.append("--exclusive")
        return opts


class Entry(Protocol):
    """What this module reads of an inventory ``Device`` (it cannot import the inventory)."""

    name: str
    host: str
    transport: str
    workdir: str
    slurm: SlurmTable | None


E = TypeVar("E", bound=Entry)


def check_entry(transport: str, table: object, where: str) -> None:
    """A ``slurm`` table belongs to a ``transport = "slurm"`` entry, which must have one."""
    if transport == "slurm":
        check_table(table, where)
    elif table is not None:
        raise ConfigError(f'{where}a slurm table needs transport = "slurm"')


def check_login(dev: Entry, devices: Mapping[str, Entry], where: str) -> None:
    """The scheduler is reached on this workstation or through an SSH device (the login host)."""
    if dev.transport != "slurm" or dev.host == "localhost":
        return
    login = devices.get(dev.host)
    if login is None or login.transport != "ssh":
        raise ConfigError(
            f"{where}host {dev.host!r} must be 'localhost' or an SSH device of the inventory "
            "(the cluster's login host)"
        )


def slots(dev: E) -> list[E]:
    """A Slurm entry as the devices a run uses, one per wanted node (any other device as is).

    One node keeps the entry's name and work dir; several are ``name.1``, ``name.2``... each with
    its own work dir below the entry's (its own claim, runs and cache) and ``nodes = 1``, so a
    slot is never expanded again.
    """
    nodes = int((dev.slurm or {}).get("nodes", 1))
    if dev.transport != "slurm" or nodes <= 1:
        return [dev]
    out = []
    for i in range(1, nodes + 1):
        slot = copy.copy(dev)
        slot.name = f"{dev.name}.{i}"
        slot.workdir = f"{dev.workdir.rstrip('/')}/{slot.name}"
        slot.slurm = {**(dev.slurm or {}), "nodes": 1}
        out.append(slot)
    return out


def slot_named(devices: Mapping[str, E], name: str) -> list[E] | None:
    """``[the slot]`` for a slot name such as ``gpu.2`` (a run's device), else None."""
    entry = devices.get(name.rpartition(".")[0])
    found = [s for s in slots(entry) if s.name == name] if entry is not None else []
    return found or None


def job_name(run_id: str, device: str) -> str:
    """The Slurm job name of a slot in a run (how ngb finds its jobs again, from any process)."""
    return f"ngb-{run_id}-{device}"


# -- the scheduler's answers ------------------------------------------------------------------

_SQUEUE_FORMAT = "%i|%T|%r|%L|%N|%P|%M|%h|%l"  # %h: may others share the node; %l: limit


def squeue_argv(name: str) -> list[str]:
    """Every job of that name the controller still knows (ended ones for ``MinJobAge``)."""
    return ["squeue", "-h", "-t", "all", f"--name={name}", "-o", _SQUEUE_FORMAT]


@dataclass(frozen=True)
class JobState:
    job_id: int
    state: str  # PENDING, RUNNING, CANCELLED, TIMEOUT...
    reason: str  # Resources, Priority, PartitionConfig, None...
    time_left: str  # [D-]HH:MM:SS, UNLIMITED, INVALID
    node: str
    partition: str
    oversubscribe: str = ""  # NO: the node is the job's alone; OK, YES, USER: others may run there
    time_limit: str = ""  # the job's limit as squeue writes it (1:00, 2:00:00, UNLIMITED)

    @property
    def shared(self) -> bool | None:
        """Whether other jobs may run on the job's node (None: the scheduler did not say)."""
        return None if not self.oversubscribe else self.oversubscribe != "NO"

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    @property
    def scheduler_ended(self) -> bool:
        return self.state in SCHEDULER_ENDS

    def text(self) -> str:
        """One line for the console and ``ngb status``: ``PENDING (Resources)``,
        ``RUNNING on node1@gpu, 1:59:10 left``, ``TIMEOUT (job 12)``."""
        if self.state == "PENDING":
            return f"PENDING ({self.reason})"
        where = f"{self.node}@{self.partition}" if self.node else self.partition
        if self.state == "RUNNING":
            return f"RUNNING on {where}, {self.left_text()} (job {self.job_id})"
        reason = f", {self.reason}" if self.reason and self.reason != "None" else ""
        return f"{self.state} (job {self.job_id} on {where}{reason})"

    def left_text(self) -> str:
        """A running job's time left: squeue says INVALID once the limit is past (the job is
        being ended, or the scheduler's check has not come round yet), UNLIMITED without one."""
        if self.time_left == "INVALID":
            return "past its time limit"
        if self.time_left in ("UNLIMITED", "NOT_SET", ""):
            return "no time limit"
        return f"{self.time_left} left"

    def ended_text(self) -> str:
        """Why the scheduler ended the job, in one line (a failed trial's error, the slot's)."""
        where = f" on {self.node}@{self.partition}" if self.node else ""
        if self.state == "TIMEOUT" and self.time_limit not in ("", "UNLIMITED", "INVALID"):
            why = f" (time limit {self.time_limit})"
        else:
            why = f" ({self.reason})" if self.reason not in ("", "None") else ""
        return f"killed by the scheduler: Slurm job {self.job_id} {self.state}{where}{why}"


_LEFT_RE = re.compile(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+) left")


def time_left_s(text: str) -> int | None:
    """Seconds in a queue line's ``1:59:10 left`` (``JobState.text``); None when it has none."""
    found = _LEFT_RE.search(text)
    if found is None:
        return None
    days, hours, minutes, seconds = (int(g) if g else 0 for g in found.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def duration_text(seconds: float) -> str:
    """Seconds as Slurm writes a duration: ``59:58``, ``1:59:10``, ``2-00:00:00``."""
    secs = max(0, int(seconds))
    days, rest = divmod(secs, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def counted_down(text: str, elapsed: float) -> str:
    """A queue line as it reads ``elapsed`` seconds after the scheduler said it: its time left
    counted down (never below 0:00), so a view between two polls of ``squeue`` stays current."""
    left = time_left_s(text)
    if left is None:
        return text
    return _LEFT_RE.sub(f"{duration_text(left - elapsed)} left", text, count=1)


def steady_part(text: str) -> str:
    """A queue line without its time left: what a change of the job's state changes."""
    return _LEFT_RE.sub("left", text, count=1)


def parse_squeue(out: str) -> JobState | None:
    """The newest job in ``squeue_argv``'s answer (a resumed run has had several)."""
    newest: JobState | None = None
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) not in (7, 8, 9) or not parts[0].isdigit():
            continue
        over, limit = (parts[7:] + ["", ""])[:2]
        state, reason, left, node, partition = parts[1:6]
        job = JobState(int(parts[0]), state, reason, left, node, partition, over, limit)
        if newest is None or job.job_id > newest.job_id:
            newest = job
    return newest


def cancel_argv(job: JobState) -> list[str]:
    """ngb's own cancel: ``scancel``, queued or running, so the scheduler accounts the job as
    CANCELLED (stopping only the agent through a step of its allocation ended the job as FAILED
    NonZeroExitCode). Every process of the job gets SIGTERM: the agent stops as a cancelled agent
    does, and a trial whose process the signal ends first is not recorded (the workstation knows
    the cancel is its own: ``ngb.sweeps.run.job_end``)."""
    return ["scancel", str(job.job_id)]


# slurmstepd's line in the step's stderr (srun forwards it to the agent's log on the login host):
# "*** STEP 12.0 ON node1 CANCELLED AT 2026-11-28T03:11:27 DUE TO TIME LIMIT ***"
_STEPD_END_RE = re.compile(
    r"\*\*\* (?:JOB|STEP) (\d+)(?:\.\S+)? ON (\S+) CANCELLED AT \S+(?: DUE TO ([A-Z ]+?))? \*\*\*"
)
_DUE_TO = {"TIME LIMIT": "TIMEOUT", "PREEMPTION": "PREEMPTED", "NODE FAILURE": "NODE_FAIL"}


def ended_in_stderr(text: str, partition: str) -> JobState | None:
    """The job end slurmstepd wrote into the agent's stderr (the newest), for a job the
    controller no longer lists (``squeue`` forgets ended jobs after ``MinJobAge``)."""
    found = list(_STEPD_END_RE.finditer(text))
    if not found:
        return None
    job, node, due = found[-1].groups()
    state = _DUE_TO.get(due or "", "CANCELLED")
    return JobState(int(job), state, "None", "INVALID", node, partition)
