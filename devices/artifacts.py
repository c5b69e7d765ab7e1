"""Shipping a user's model files to a device: pack, upload once per device, install verified.

A trial whose model is the user's own (``TrialSpec.source``, see ``ngb.core.models.model_sources``)
names the files it needs as artifacts: ``{"name", "sha256", "local", "role"}``, content-addressed by
sha256 (a file's bytes; a code folder's file list and file hashes); a trial's labelled data for its
accuracy pass travels the same way (``measure.accuracy.artifact``,
``ngb.core.models.labelled_files``). Before a run's agent starts, the orchestrator calls
``ship_run_artifacts(transport, device, trials_jsonl)``:

1. one remote command asks which of the run's hashes the device's cache already holds
   (``<workdir>/cache/artifacts/<sha256>/<name>``); nothing else happens when it holds them all;
2. each missing artifact is uploaded once: a file as it is, a code folder as a deterministic zip
   (sorted entries, fixed timestamps and modes: the same folder always packs to the same bytes),
   to a temporary name;
3. one more command checks each upload's sha256, unpacks zips with the device's own Python and
   renames the result into place.

The agent verifies every artifact's hash again before a trial uses it
(``ngb.core.base.artifact_hashes``), so a
cache entry damaged on the device fails that trial with one line ("hash mismatch on the device")
and is removed, and the next run uploads it again. Devices need no network and no copy of the
user's repository: only the model file or the code folder the source names travels.

An ONNX model's external data files (``Artifact.data_files``) are uploaded as files of their own
into the model's ``<sha256>/`` folder (the address is the bundle's hash), so the runtime finds
them beside the model. What a code folder ships is ``model_sources.folder_files``: its Python
modules and packages, never ngb's own files (a results store kept beside the model) or the other
files of a project folder.

An artifact whose local file is gone or changed since the sweep was loaded is not uploaded; the
device then fails its trials with one line naming what changed, and the rest of the sweep goes on.
"""

from __future__ import annotations

import os
import tempfile
import uuid
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ngb.core.base.errors import NgbError
from ngb.core.base.safe_files import check_readable
from ngb.devices import protocol
from ngb.devices.agent_remote import sha256_file
from ngb.devices.inventory import Device
from ngb.devices.paths import get_paths
from ngb.devices.transport import Transport, TransportError

_FIXED_TIME = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class ShipItem:
    """One artifact a run needs on its devices."""

    sha256: str
    name: str
    local: str  # where the workstation has it
    # a model file and the data files it reads travel as one bundle under one address: every
    # name of the bundle (empty for a lone file or folder), for checking the address
    bundle: tuple[str, ...] = ()

    @property
    def is_folder(self) -> bool:
        return Path(self.local).is_dir()


@dataclass
class Shipment:
    """What ``ship_artifacts`` did on one device."""

    workdir: str = ""
    uploaded: list[str] = field(default_factory=list)  # hashes sent now
    reused: list[str] = field(default_factory=list)  # hashes the device already held
    unavailable: dict[str, str] = field(default_factory=dict)  # hash -> why it was not sent
    bytes_sent: int = 0


def artifacts_in(trials: Iterable[Mapping[str, object]]) -> list[ShipItem]:
    """The artifacts the trial dicts name, once each, in first-seen order.

    Keyed by (hash, name): equal bytes under two names (two models sharing one file under
    different names) are two entries of one ``<sha256>/`` folder on the device.
    """
    items: dict[tuple[str, str], ShipItem] = {}
    for trial in trials:
        for art in _listed(trial):
            if not isinstance(art, Mapping):
                continue
            sha, name, local = art.get("sha256"), art.get("name"), art.get("local")
            protocol.check_artifact(sha, name)  # raises unless both are plain strings
            extra = art.get("data_files") or ()
            data = [str(n) for n in extra] if isinstance(extra, list | tuple) else []
            bundle = tuple(sorted({str(name), *data})) if data else ()
            for member in (str(name), *data):
                protocol.check_artifact(sha, member)
                path = str(Path(str(local)).parent / member) if local and member != name else local
                if (sha, member) not in items:
                    items[(str(sha), member)] = ShipItem(str(sha), member, str(path or ""), bundle)
    return list(items.values())


def _listed(trial: Mapping[str, object]) -> list[object]:
    """The artifacts one trial dict names: its model source's, then its labelled data's
    (``measure.accuracy.artifact``: an ``.npz`` or a loader's folder,
    ``ngb.core.models.labelled_files``)."""
    listed: list[object] = []
    source = trial.get("source")
    if isinstance(source, Mapping):
        arts = source.get("artifacts") or ()
        listed.extend(arts if isinstance(arts, list | tuple) else ())
    measure = trial.get("measure")
    accuracy = measure.get("accuracy") if isinstance(measure, Mapping) else None
    if isinstance(accuracy, Mapping) and accuracy.get("artifact") is not None:
        listed.append(accuracy["artifact"])
    return listed


def artifacts_in_jsonl(text: str) -> list[ShipItem]:
    return artifacts_in(protocol.parse_jsonl(text))


def pack_folder(folder: Path, dest: Path) -> Path:
    """Zip ``folder``'s travelling files (``model_sources.folder_files``) deterministically.

    Entries are sorted, dated 1980-01-01 and mode 0644, so equal folders give equal bytes. Written
    to a temporary name and renamed, so a concurrent reader never sees half an archive.
    """
    from ngb.core.models.model_sources import folder_files

    dest.parent.mkdir(parents=True, exist_ok=True)
    files = sorted(folder_files(folder), key=lambda f: f.relative_to(folder).as_posix())
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w") as zf:
            for path in files:
                info = zipfile.ZipInfo(path.relative_to(folder).as_posix(), _FIXED_TIME)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                zf.writestr(info, path.read_bytes())
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dest


def payload(item: ShipItem) -> tuple[Path, str]:
    """The bytes to upload for ``item`` and their sha256; ``NgbError`` (one line) when the local
    copy is gone or no longer has the recorded hash."""
    from ngb.core.models.model_sources import bundle_sha256, changed_since, sha256_of

    local = Path(item.local)
    if not item.local or not local.exists():
        raise NgbError(f"{item.name} is gone from {item.local or 'the workstation'}")
    if not local.is_dir():
        check_readable(local)  # a FIFO put in its place would block the hash for ever
    if item.bundle:
        model = local.parent / item.bundle[0]
        others = item.bundle[1:]
        if bundle_sha256(model, others) != item.sha256:
            raise NgbError(changed_since(model, item.sha256, others))
    elif sha256_of(local) != item.sha256:
        raise NgbError(changed_since(local, item.sha256))
    if not local.is_dir():  # a bundle's member is checked on arrival by its own bytes' hash
        return local, sha256_of(local) if item.bundle else item.sha256
    packed = get_paths().cache / "artifacts" / f"{item.sha256}.zip"
    if not packed.is_file():
        pack_folder(local, packed)
    return packed, sha256_file(packed)


async def ship_artifacts(
    transport: Transport, device: Device, items: Iterable[ShipItem], *, timeout: float = 300.0
) -> Shipment:
    """Make sure the device's cache holds every item; upload only what it lacks."""
    items = list(items)
    report = Shipment()
    if not items:
        return report
    have_argv = protocol.artifacts_have_argv(device.workdir, [(i.sha256, i.name) for i in items])
    out = await _checked(transport, have_argv, "list the device's artifacts", timeout)
    report.workdir, have = protocol.parse_artifacts_have(out)
    store = f"{report.workdir.rstrip('/')}/{protocol.ARTIFACTS_DIR}"
    uploads = []
    for item in items:
        if (item.sha256, item.name) in have:
            report.reused.append(item.sha256)
            continue
        try:
            local, payload_sha = payload(item)
        except NgbError as exc:
            report.unavailable[item.sha256] = str(exc)
            continue
        part = f"{store}/.{item.sha256}.{uuid.uuid4().hex[:12]}.part"
        await transport.put(str(local), part)
        report.bytes_sent += local.stat().st_size
        uploads.append(
            protocol.ArtifactUpload(item.sha256, item.name, item.is_folder, payload_sha, part)
        )
    if uploads:
        argv = protocol.artifacts_install_argv(device.python, device.workdir, uploads)
        out = await _checked(transport, argv, "install the uploaded artifacts", timeout)
        installed = {
            tuple(ln[len("installed ") :].split(" ", 1))
            for ln in out.splitlines()
            if ln.startswith("installed ")
        }
        missing = [u.name for u in uploads if (u.sha256, u.name) not in installed]
        if missing:
            raise NgbError(f"{device.name}: artifacts did not install: {', '.join(missing)}")
        report.uploaded = [u.sha256 for u in uploads]
    return report


async def ship_run_artifacts(
    transport: Transport, device: Device, trials_jsonl: str | None
) -> Shipment:
    """``ship_artifacts`` for the artifacts a run's trials (its ``trials.jsonl`` text) name."""
    return await ship_artifacts(transport, device, artifacts_in_jsonl(trials_jsonl or ""))


async def _checked(transport: Transport, argv: list[str], what: str, timeout: float) -> str:
    res = await transport.run(argv, timeout=timeout)
    if res.returncode < 0:  # no exit status: the link went away mid-command
        raise TransportError(f"{transport.name}: connection lost while trying to {what}")
    if res.returncode != 0:
        lines = [ln for ln in (res.stderr or res.stdout).splitlines() if ln.strip()]
        detail = lines[-1].strip() if lines else f"exit status {res.returncode}"
        raise NgbError(f"{transport.name}: could not {what}: {detail}")
    return res.stdout


def describe(report: Shipment) -> str:
    """One line for logs: ``artifacts: 1 uploaded (2.1 MB), 2 reused``."""
    text = (
        f"artifacts: {len(report.uploaded)} uploaded ({report.bytes_sent / 1e6:.1f} MB), "
        f"{len(report.reused)} reused"
    )
    if report.unavailable:
        text += f", {len(report.unavailable)} not on the workstation"
    return text
