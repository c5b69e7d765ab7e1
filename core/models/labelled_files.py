"""Labelled data that travels with a trial, as a user's model files do (issue 42).

A trial's labelled data (``AccuracySettings.data``, ``ngb.core.models.labelled_data``) that is a
file of the operator's becomes an artifact (``ngb.core.models.model_sources.Artifact``) when the
reference is read (``artifact_for``, called by ``ngb.sweeps.spec.checks.accuracy_table`` for a
sweep, ``ngb measure --accuracy`` and ``ngb.measure(accuracy=)``):

- an ``.npz`` file: the file itself (role ``data``);
- ``path/to/file.py:loader``: the file's folder, as a python model source's code folder (role
  ``folder``: its ``.py`` files and packages, ``model_sources.folder_files``);
- a built-in name and an installed ``package.module:loader`` travel as they are (none).

``ngb.devices.artifacts`` uploads it once per device to ``<cache_dir>/artifacts/<sha256>/<name>``
beside the model files. On the device the accuracy pass reads the copy ``here`` finds: the
device's cache (its hash checked again, a damaged entry removed so the next run uploads it once
more), else the workstation's own path when its content still has the recorded hash (the
built-in localhost, ``ngb measure``). Missing, changed or damaged data is one ``NgbError`` line,
which the pass leaves in ``extra["accuracy_error"]``; the timed trial stands.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ngb.core.base.errors import ConfigError, NgbError
from ngb.core.base.safe_files import check_readable, shorten

if TYPE_CHECKING:
    from ngb.core.models.model_sources import Artifact
    from ngb.core.records.types import AccuracySettings


def artifact_for(ref: str) -> Artifact | None:
    """The artifact that carries ``ref`` (made absolute by ``labelled_data.resolve``) to a
    device, hashed now; None for a built-in set and an installed module's loader."""
    from ngb.core.models.labelled_data import kind_of
    from ngb.core.models.model_sources import Artifact, folder_files

    kind = kind_of(ref)
    target, _, _ = ref.rpartition(":")
    try:
        if kind == "npz":
            return Artifact.of(Path(ref), "data")
        if kind == "loader" and target.endswith(".py"):
            file = Path(target)
            if file not in set(folder_files(file.parent)):
                raise ConfigError(
                    f"labelled data {ref}: {file.name} would not travel to a device (a hidden or "
                    "cache file name); rename it"
                )
            return Artifact.of(file.parent, "folder")
    except ConfigError:
        raise
    except (NgbError, OSError) as exc:  # a FIFO in the loader's folder, a file gone meanwhile
        raise ConfigError(f"labelled data {ref}: cannot hash it: {exc}") from None
    return None


def here(settings: AccuracySettings, cache_dir: Path | str | None) -> str:
    """The reference to read on this machine: ``settings.data`` with its file or folder replaced
    by the shipped copy (see the module docstring); one ``NgbError`` line when there is none."""
    artifact = settings.artifact
    if artifact is None:
        return settings.data
    path = _located(artifact, cache_dir)
    target, sep, attr = settings.data.rpartition(":")
    if not (sep and target.endswith(".py")):
        return str(path)
    try:
        rel = Path(target).relative_to(artifact.local)
    except ValueError:
        rel = Path(Path(target).name)
    return f"{path / rel}:{attr}"


def _located(artifact: Artifact, cache_dir: Path | str | None) -> Path:
    from ngb.core.base.artifact_hashes import verify_shipped
    from ngb.core.models.model_sources import artifact_dir, changed_since

    what = f"labelled data {artifact.name} (sha256 {artifact.sha256[:12]})"
    if cache_dir is not None:
        shipped = artifact_dir(cache_dir, artifact.sha256) / artifact.name
        if shipped.exists():
            problem = verify_shipped({"artifacts": [artifact.to_dict()]}, cache_dir)
            if problem:  # the damaged entry is gone now: the next run uploads it again
                raise NgbError(f"labelled data: {problem}")
            return shipped
    local = Path(artifact.local)
    if not artifact.local or not local.exists():
        raise NgbError(
            f"{what} was not shipped to this device (the workstation's copy was gone or changed "
            f"when the run started) and {shorten(local)} does not exist here"
        )
    if not local.is_dir():
        check_readable(local, "labelled data")  # a FIFO would block the hash and the loader
    try:
        same = artifact.content_sha256(local) == artifact.sha256
    except (NgbError, OSError) as exc:
        raise NgbError(f"{what}: cannot read {shorten(local)}: {exc}") from None
    if not same:
        raise NgbError(f"labelled data {changed_since(local, artifact.sha256)}")
    return local
