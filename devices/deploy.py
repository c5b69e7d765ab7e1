"""Put the agent on a device and ask it what the device is.

The agent ships as one file (``agent.pyz``, built by ``ngb.devices.bundle``) so a device needs only
a Python interpreter. Deploying is idempotent and cheap: one remote command creates the work
directory, resolves it to an absolute path and reports the sha256 of any agent already there; the
upload happens only when that hash differs, goes to a temporary name and is renamed into place after
its hash is checked, so a run already using the old agent never sees a half-written file.

Every remote command runs the device's own Python with the script and paths as separate argv words
(quoted by the transport), so no remote shell or shell utilities are needed, and no device field can
inject a command.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

from ngb.core.errors import NgbError
from ngb.devices.inventory import Device
from ngb.devices.paths import get_paths
from ngb.devices.transport import Transport, TransportError

# argv: WORKDIR NAME -> prints the absolute work dir, then the sha256 of WORKDIR/NAME (or "").
_PREPARE = """\
import hashlib, os, sys
d = os.path.abspath(os.path.expanduser(sys.argv[1]))
os.makedirs(d, exist_ok=True)
h = ""
try:
    with open(os.path.join(d, sys.argv[2]), "rb") as f:
        h = hashlib.sha256(f.read()).hexdigest()
except OSError:
    pass
print(d)
print(h)
"""

# argv: TMP FINAL SHA256 -> moves TMP over FINAL if its content has the expected hash.
_INSTALL = """\
import hashlib, os, sys
with open(sys.argv[1], "rb") as f:
    h = hashlib.sha256(f.read()).hexdigest()
if h != sys.argv[3]:
    os.unlink(sys.argv[1])
    sys.exit("uploaded agent is corrupt: sha256 %s, expected %s" % (h, sys.argv[3]))
os.replace(sys.argv[1], sys.argv[2])
"""

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


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


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


async def deploy_agent(transport: Transport, device: Device, *, timeout: float = 60.0) -> str:
    """Make sure the current agent is in the device's work dir; returns its absolute remote path."""
    local, digest = agent_bundle()
    # The remote name is the bundle's (it carries the content hash), so an agent that a detached run
    # is still using is never overwritten: zipimport re-reads the archive by path for lazy imports.
    out = await _python(
        transport,
        device,
        ["-c", _PREPARE, device.workdir, local.name],
        "preparing workdir",
        timeout,
    )
    lines = out.splitlines()
    if len(lines) < 1 or not lines[0].strip():
        raise TransportError(f"{device.name}: preparing workdir printed nothing")
    workdir = lines[0].strip()
    remote_hash = lines[1].strip() if len(lines) > 1 else ""
    remote = f"{workdir.rstrip('/')}/{local.name}"
    if remote_hash == digest:
        return remote
    part = f"{remote}.{uuid.uuid4().hex[:12]}.part"
    await transport.put(str(local), part)
    await _python(
        transport, device, ["-c", _INSTALL, part, remote, digest], "installing the agent", timeout
    )
    return remote


async def probe_device(transport: Transport, device: Device, *, timeout: float = 120.0) -> dict:
    """Deploy the agent and run ``python agent.pyz probe``; returns the parsed JSON object."""
    agent = await deploy_agent(transport, device)
    out = await _python(transport, device, [agent, "probe"], "probe", timeout)
    line = _last_line(out)
    try:
        facts: Any = json.loads(line)
    except json.JSONDecodeError:
        raise TransportError(
            f"{device.name}: probe printed no JSON (last line: {line[:120]!r})"
        ) from None
    if not isinstance(facts, dict):
        raise TransportError(f"{device.name}: probe printed {type(facts).__name__}, not an object")
    return facts
