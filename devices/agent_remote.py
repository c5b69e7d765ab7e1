"""Put the agent on a device and ask it what the device is.

The agent ships as one file (``agent-<hash>.pyz``, built by ``ngb.devices.bundle``) so a device
needs only a Python interpreter. Deploying speaks the device protocol (``ngb.devices.protocol``),
the same installer a run's first start uses: one remote command resolves the work directory and
checks the sha256 of the agent already there; only when it is missing or different is the bundle
uploaded, to a temporary name, and a second command renames it into place after its hash checked
out, so a run already using the old agent never sees a half-written file. The installer also
checks that the device's ``python`` can start the agent, so a wrong interpreter is named at once.

Every device value (python, work dir) travels as a quoted argument, never as shell code.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from pathlib import Path
from typing import Any

from ngb.core.base.errors import NgbError
from ngb.devices import protocol
from ngb.devices.inventory import Device
from ngb.devices.paths import get_paths
from ngb.devices.transport import Transport, TransportError

_built: dict[Path, tuple[Path, str]] = {}


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def agent_bundle(rebuild: bool = False) -> tuple[Path, str]:
    """Build the agent zipapp once per process (in the cache dir); returns ``(path, sha256)``.

    The file is ``agent-<content hash>.pyz`` (named by ``ngb.devices.bundle``).
    """
    dest = get_paths().cache / "agent"
    if not rebuild and dest in _built and _built[dest][0].exists():
        return _built[dest]
    try:
        from ngb.devices.bundle import build_agent_zipapp
    except ImportError as exc:
        raise NgbError(f"the agent bundle builder is unavailable: {exc}") from None
    path = Path(build_agent_zipapp(dest))
    _built[dest] = (path, sha256_file(path))
    return _built[dest]


# Lines Slurm adds to a command's stderr when it runs through ``srun`` (a Slurm device's probe):
# after the node's own error come srun's "task 0: Exited with exit code 1" and "Terminating
# StepId=3.0", which say nothing of why.
_SCHEDULER_LINE = re.compile(r"^(srun|salloc|slurmstepd(-\S+)?): ")


def _last_line(text: str) -> str:
    """The last line of a command's stderr that the command itself wrote (the node's own error,
    ``ModuleNotFoundError: ...``, rather than srun's words about the step); srun's where it
    wrote every line."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    own = [ln for ln in lines if not _SCHEDULER_LINE.match(ln)]
    return (own or lines or [""])[-1]


async def _python(
    transport: Transport, device: Device, args: list[str], what: str, timeout: float
) -> str:
    result = await transport.run([device.python, *args], timeout=timeout)
    if result.returncode in (126, 127):
        raise TransportError(
            f"{device.name}: python {device.python!r} cannot run on the device "
            f"({_last_line(result.stderr) or 'not found'})"
        )
    if result.returncode != 0:
        raise TransportError(
            f"{device.name}: {what} failed (exit {result.returncode}): "
            f"{_last_line(result.stderr) or 'no error output'}"
        )
    return result.stdout


async def _install(
    transport: Transport, device: Device, digest: str, name: str, part: str, timeout: float
) -> tuple[str, bool]:
    argv = protocol.install_argv(device.python, device.workdir, name, digest, part=part)
    result = await transport.run(argv, timeout=timeout)
    if result.returncode == protocol.EXIT_BAD_PYTHON:
        raise TransportError(f"{device.name}: {_last_line(result.stderr)}")
    if result.returncode != 0:
        raise TransportError(
            f"{device.name}: installing the agent failed (exit {result.returncode}): "
            f"{_last_line(result.stderr) or 'no error output'}"
        )
    try:
        return protocol.parse_install(result.stdout)
    except NgbError as exc:
        raise TransportError(f"{device.name}: {exc}") from None


async def deploy_agent(transport: Transport, device: Device, *, timeout: float = 60.0) -> str:
    """Make sure the current agent is in the device's work dir; returns its absolute remote path."""
    local, digest = agent_bundle()
    # The remote name is the bundle's (it carries the content hash), so an agent that a detached run
    # is still using is never overwritten: zipimport re-reads the archive by path for lazy imports.
    workdir, ready = await _install(transport, device, digest, local.name, "", timeout)
    remote = f"{workdir.rstrip('/')}/{local.name}"
    if ready:
        return remote
    part = f"{remote}.{uuid.uuid4().hex[:12]}.part"
    await transport.put(str(local), part)
    _, ready = await _install(transport, device, digest, local.name, part, timeout)
    if not ready:
        raise TransportError(f"{device.name}: the uploaded agent did not install")
    return remote


async def probe_device(transport: Transport, device: Device, *, timeout: float = 120.0) -> dict:
    """Deploy the agent and run ``python agent.pyz probe``; returns the parsed JSON object."""
    agent = await deploy_agent(transport, device)
    out = await _python(transport, device, [agent, "probe"], "probe", timeout)
    return _json_object(device, out, "probe")


async def tune_device(
    transport: Transport, device: Device, action: str, *, timeout: float = 60.0
) -> dict:
    """``python agent.pyz tune --action show|apply|undo``: the device's state, the changes that
    would quiet it, what failed. The undo file lives in the device's work dir."""
    agent = await deploy_agent(transport, device)
    undo_file = f"{agent.rsplit('/', 1)[0]}/tune-undo.json"  # the agent's path is absolute
    argv = [agent, "tune", "--action", action, "--undo-file", undo_file]
    out = await _python(transport, device, argv, f"tune {action}", timeout)
    return _json_object(device, out, "tune")


def _json_object(device: Device, out: str, what: str) -> dict:
    line = _last_line(out)
    try:
        facts: Any = json.loads(line)
    except json.JSONDecodeError:
        raise TransportError(
            f"{device.name}: {what} printed no JSON (last line: {line[:120]!r})"
        ) from None
    if not isinstance(facts, dict):
        raise TransportError(f"{device.name}: {what} printed {type(facts).__name__}, not an object")
    return facts
