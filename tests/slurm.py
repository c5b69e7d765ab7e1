"""A real one-machine Slurm cluster for the Slurm device tests (Debian's slurm-wlm and munge).

``SlurmCluster.create(root, cpus=2)`` writes everything under ``root``: a munge key, a
``slurm.conf`` (``proctrack/linuxproc``, ``task/none``, ``select/cons_tres`` with ``CR_Core``,
state, spool, logs and pid files under ``root``, ``SlurmUser=root``, free ports), then
``start()`` runs ``munged``, ``slurmctld`` and ``slurmd`` and waits until ``sinfo`` shows the
node idle; ``stop()`` ends them by their pid files. ``env()`` is the environment every Slurm
command of a test must run with (``SLURM_CONF`` names this cluster's file, so
``/etc/slurm/slurm.conf`` is never read). The node is this machine under its own host name,
one partition ``debug`` whose CPUs are the job slots.

Why real daemons: what a device kind for a scheduler must get right (queue states and reasons,
``scancel`` from outside, the step ending with the job) is exactly what a fake would invent.

The ``slurm_cluster`` fixture (session scope) skips with the reason when the binaries are
missing, the user is not root (``SlurmUser=root``; munged as root needs ``--force``) or the
daemons do not come up, except under CI (``CI`` set) where missing binaries or daemons that do
not start fail: CI installs ``slurm-wlm`` and ``munge`` (``scripts/setup.sh``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SBIN = Path("/usr/sbin")
BINARIES = ("munged", "slurmctld", "slurmd", "srun", "sinfo", "squeue", "scancel")
PARTITION = "debug"


def missing() -> str:
    """Why this machine cannot run the cluster ('' when it can)."""
    absent = [b for b in BINARIES if not (shutil.which(b) or (SBIN / b).exists())]
    if absent:
        return (
            f"Slurm test cluster: {', '.join(absent)} not installed "
            "(apt-get install slurm-wlm munge)"
        )
    if os.geteuid() != 0:
        return "Slurm test cluster: needs root (SlurmUser=root, munged --force)"
    return ""


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _binary(name: str) -> str:
    return shutil.which(name) or str(SBIN / name)


@dataclass
class SlurmCluster:
    root: Path
    cpus: int
    node: str
    ctld_port: int
    slurmd_port: int

    @classmethod
    def create(cls, root: Path, cpus: int = 2) -> SlurmCluster:
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o755)  # munged refuses a socket folder others may write
        node = socket.gethostname().split(".")[0]
        ctld, slurmd = _free_ports(2)
        cluster = cls(root, cpus, node, ctld, slurmd)
        for sub in ("state", "spool", "log", "run", "munge"):
            (root / sub).mkdir(exist_ok=True)
        os.chmod(root / "munge", 0o700)
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        cluster.conf.write_text(cluster.conf_text())
        return cluster

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "munge.socket"

    def conf_text(self) -> str:
        r = self.root
        return f"""\
ClusterName=ngbtest
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={self.ctld_port}
SlurmdPort={self.slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=300
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd.pid
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} State=UNKNOWN
PartitionName={PARTITION} Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
"""

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, env=self.env(), capture_output=True, text=True, timeout=timeout, check=False
        )

    def start(self, timeout: float = 60) -> None:
        munge = self.root / "munge"
        subprocess.run(
            [_binary("munged"), "--force", f"--key-file={munge / 'munge.key'}",
             f"--socket={self.munge_socket}", f"--pid-file={munge / 'munged.pid'}",
             f"--log-file={munge / 'munged.log'}", f"--seed-file={munge / 'munged.seed'}"],
            check=True, capture_output=True, timeout=30,
        )  # fmt: skip
        for daemon in ("slurmctld", "slurmd"):
            res = subprocess.run(
                [_binary(daemon)], env=self.env(), capture_output=True, text=True, timeout=30
            )
            if res.returncode != 0:
                raise RuntimeError(f"{daemon} did not start: {res.stderr.strip()[-300:]}")
        end = time.monotonic() + timeout
        state = ""
        while time.monotonic() < end:
            with contextlib.suppress(subprocess.TimeoutExpired):
                res = self.run("sinfo", "-h", "-N", "-o", "%t", timeout=10)
                state = res.stdout.strip()
                if state == "idle":
                    return
            time.sleep(0.3)
        raise RuntimeError(f"the Slurm node did not become idle in {timeout:g}s (sinfo: {state!r})")

    def jobs(self) -> list[dict[str, str]]:
        """Every job the controller knows (recently ended ones too): id, name, state, reason."""
        res = self.run("squeue", "-h", "-t", "all", "-o", "%i|%j|%T|%r")
        out = []
        for line in res.stdout.splitlines():
            parts = line.split("|")
            if len(parts) == 4:
                out.append(dict(zip(("id", "name", "state", "reason"), parts, strict=True)))
        return out

    def cancel_all(self) -> None:
        """Cancel every job (between tests: a test's leftovers must not hold the slots)."""
        self.run("scancel", "--full", "-u", "root")
        end = time.monotonic() + 30
        while time.monotonic() < end:
            live = [j for j in self.jobs() if j["state"] in ("PENDING", "RUNNING", "COMPLETING")]
            if not live:
                return
            time.sleep(0.3)

    def stop(self) -> None:
        for pidfile in ("run/slurmd.pid", "run/slurmctld.pid", "munge/munged.pid"):
            path = self.root / pidfile
            with contextlib.suppress(OSError, ValueError):
                pid = int(path.read_text().strip())
                os.kill(pid, signal.SIGTERM)
                end = time.monotonic() + 10
                while time.monotonic() < end:
                    os.kill(pid, 0)
                    time.sleep(0.1)
                os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    why = missing()
    if why:
        if os.environ.get("CI") and "not installed" in why:
            pytest.fail(f"{why} (CI installs it through scripts/setup.sh)")
        pytest.skip(why)
    # A short path: munge's socket path must fit a sockaddr_un (108 bytes).
    root = Path(tmp_path_factory.mktemp("slurm", numbered=True))
    cluster = SlurmCluster.create(root, cpus=2)
    try:
        cluster.start()
    except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
        cluster.stop()
        if os.environ.get("CI"):
            raise
        pytest.skip(f"Slurm test cluster did not start: {exc}")
    try:
        yield cluster
    finally:
        cluster.cancel_all()
        cluster.stop()
